"""Arms that do not apply to the rig, in every report format and in the run's outcome, on a real stored run: the
split-modes preset on the CPU rig (tests/fixtures/split-modes/split-modes-cpu-rpc.json: `llamalab run split-modes`
on two local rpc-servers, 300 MiB budgets, KV f16/f16 and f16/q8_0, two interleaved rounds at 1 and 2 requests;
llama.cpp b11312 refused `-sm row` under both settings, once each, and everything else ran)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import runfixtures
from llamalab.cli import cli
from llamalab.cli.study import _print_table
from llamalab.report import csvfile, document, html, markdown
from llamalab.report import data as rdata
from llamalab.report.analysis import summary
from llamalab.run import runner
from llamalab.setup import prepare as session
from llamalab.store.db import Store
from llamalab.study import spec as studymod
from testpaths import FIXTURES

FIXTURE = FIXTURES / "split-modes" / "split-modes-cpu-rpc.json"
ROW = "llama.cpp: device RPC0 does not support split buffers"
LINE = f"sm-row: not applicable on this rig — {ROW}"


def exported() -> dict:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def stored(tmp_path: Path, doc: dict | None = None) -> tuple[Store, str]:
    store = Store(tmp_path / "r.db")
    return store, runfixtures.fill(store, document=doc or exported())


@pytest.fixture
def run(tmp_path):
    store, rid = stored(tmp_path)
    with store:
        yield store, rid, rdata.load(store, rid)


def test_the_fixture_is_what_it_says():
    t = exported()["tables"]
    na = [(c["build"], c["setting"], c["reason"]) for c in t["configs"] if c["status"] == "not-applicable"]
    assert sorted(na) == [("sm-row", "kv-f16", ROW), ("sm-row", "kv-f16-q8_0", ROW)]
    passes = [c for c in t["configs"] if c["build"] == "sm-tensor"]
    assert len(passes) == 4 and all(c["status"] == "ok" for c in passes)  # two rounds × two settings


def test_once_per_arm_in_every_format(run, capsys):
    store, rid, data = run
    assert summary.not_applicable(data) == [{"build": "sm-row", "settings": ["kv-f16", "kv-f16-q8_0"],
                                             "reason": ROW, "every_setting": True, "by": "llama.cpp"}]
    assert summary.not_applicable_lines(data) == [LINE]
    md = markdown.render(data)
    assert md.count("does not support split buffers") == 1 and f"## Not applicable on this rig\n\n- {LINE}\n" in md
    assert not any("sm-row" in x for x in summary.not_measured(data))  # not a failure, not "not measured"
    page = html.render(data)
    assert page.count("does not support split buffers") == 1
    assert "<h2>Not applicable on this rig</h2>" in page
    doc = json.loads(json.dumps(document.document(data), default=str))
    assert doc["not_applicable"] == summary.not_applicable(data)
    rows = [r for r in csv.DictReader(io.StringIO(csvfile.configs_csv(data))) if r["build"] == "sm-row"]
    assert {(r["setting"], json.loads(r["value"])) for r in rows if r["path"] == "/status"} == {
        ("kv-f16", "not-applicable"), ("kv-f16-q8_0", "not-applicable")}
    assert {json.loads(r["value"]) for r in rows if r["path"] == "/reason"} == {ROW}
    _print_table(data)
    out = capsys.readouterr().out
    assert out.count("not applicable:") == 1 and "sm-row: llama.cpp: device RPC0 does not support split" in out


def test_a_refusal_under_one_setting_names_it(tmp_path):
    doc = exported()
    t = doc["tables"]
    gone = {c["id"] for c in t["configs"] if c["build"] == "sm-row" and c["setting"] == "kv-f16-q8_0"}
    for name in ("configs", "ledgers", "buffers"):
        t[name] = [r for r in t[name] if r.get("id" if name == "configs" else "config_id") not in gone]
    store, rid = stored(tmp_path, doc)
    with store:
        data = rdata.load(store, rid)
    assert summary.not_applicable_lines(data) == [f"sm-row × kv-f16: not applicable on this rig — {ROW}"]


def test_the_outcome_does_not_count_it_as_failed(run):
    store, rid, _ = run
    failed, total, measured = runner.run_outcome(store, rid)
    assert (failed, total, measured) == ([], 10, True)  # 5 arms that apply × 2 settings


def test_a_failure_is_still_a_failure(tmp_path):
    doc = exported()
    cfg = next(c for c in doc["tables"]["configs"] if c["build"] == "sm-row" and c["setting"] == "kv-f16")
    cfg["status"], cfg["reason"] = "failed", "llama-server died at load: killed by SIGKILL (possibly out of memory)"
    store, rid = stored(tmp_path, doc)
    with store:
        failed, total, _ = runner.run_outcome(store, rid)
        data = rdata.load(store, rid)
    assert failed == ["sm-row × kv-f16: llama-server died at load: killed by SIGKILL (possibly out of memory)"]
    assert total == 11
    assert summary.not_applicable_lines(data) == [f"sm-row × kv-f16-q8_0: not applicable on this rig — {ROW}"]


def _prep(st, *, rig_devices: int, not_applicable: dict[str, str]) -> session.Prepared:
    return session.Prepared(study=st, backend="cpu-rpc", source=None, model_path=Path("m.gguf"), model_info=None,
                           artifacts={}, skipped={}, not_applicable=not_applicable, rig_devices=rig_devices)


def test_a_resumed_run_does_not_ask_llama_cpp_again_and_min_devices_is_stored_once(run):
    store, rid, _ = run
    st, _ = studymod.load("split-modes", ['settings=[{name="kv-f16"},{name="kv-f16-q8_0"}]'])
    before = len(store.configs(rid))
    assert runner._record_inapplicable(_prep(st, rig_devices=2, not_applicable={}), store, rid) == {
        ("sm-row", "kv-f16"), ("sm-row", "kv-f16-q8_0")}
    assert len(store.configs(rid)) == before  # llama.cpp's refusals are known: nothing new, nothing to retry
    need = "it needs at least 3 devices and this rig has 2 (cpu-rpc)"
    prep = _prep(st, rig_devices=2, not_applicable={"sm-tensor": need})
    for _ in range(2):  # the second call (a resume) adds nothing
        keys = runner._record_inapplicable(prep, store, rid)
        assert keys == {(b, s) for b in ("sm-row", "sm-tensor") for s in ("kv-f16", "kv-f16-q8_0")}
        assert len(store.configs(rid)) == before + 2
    added = [c for c in store.configs(rid) if c["reason"] == need]
    assert [(c["build"], c["status"], c["finished"] is not None) for c in added] == [
        ("sm-tensor", "not-applicable", True)] * 2


def test_a_setting_that_needs_more_devices(run):
    store, rid, _ = run
    st, _ = studymod.load("split-modes", ['settings=[{name="kv-f16"},{name="wide",min_devices=4}]'])
    prep = _prep(st, rig_devices=2, not_applicable={})
    keys = runner._record_inapplicable(prep, store, rid)
    assert {k for k in keys if k[1] == "wide"} == {(b.name, "wide") for b in st.builds}
    reasons = {c["reason"] for c in store.configs(rid) if c["setting"] == "wide"}
    assert reasons == {"setting wide: it needs at least 4 devices and this rig has 2 (cpu-rpc)"}


def test_import_and_report_from_the_command_line(tmp_path):
    db = tmp_path / "d.db"
    res = CliRunner().invoke(cli, ["import", str(FIXTURE), "--db", str(db)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, ["report", "--db", str(db)])
    assert res.exit_code == 0 and f"- {LINE}" in res.output


def test_a_llamalab_without_the_status_refuses_the_database_and_the_export(tmp_path, monkeypatch):
    """A llamalab from before migration 0009 would count a not-applicable arm as failed, or refuse to report it:
    the migration's name makes it refuse the database, and the export, as a newer llamalab's instead."""
    from llamalab.core.errors import ConfigError, StoreError
    from llamalab.store import exchange, migrations

    store, _ = stored(tmp_path)
    store.close()
    older = [m for m in migrations.MIGRATIONS if m.name != "0009_not_applicable"]
    monkeypatch.setattr(migrations, "MIGRATIONS", older)
    with pytest.raises(StoreError, match="written by a newer llamalab .*0009_not_applicable"):
        Store(tmp_path / "r.db")
    with pytest.raises(ConfigError, match="exported by a newer llamalab .*0009_not_applicable"):
        exchange.loads(FIXTURE.read_text(encoding="utf-8"), FIXTURE.name)


def test_a_split_mode_places_weights_by_design_not_as_a_side_effect(run):
    """-sm tensor and -sm none put the weights elsewhere than layer split: that is the arm, so the memory comparison
    says which split mode placed them, and the advice does not charge them the warning meant for an override that
    moves weights as a side effect (the no-op check of `-ot`)."""
    from llamalab.report.analysis import recommend, verdict

    _, _, data = run
    comps = {(c["candidate"], c["setting"]): c for c in verdict.memory_comparisons(data)}
    tensor = comps[("sm-tensor", "kv-f16")]
    assert (tensor["baseline_split_mode"], tensor["candidate_split_mode"]) == ("layer", "tensor")
    assert tensor["weights_moved"]  # the placement differs, and the figures say how
    assert comps[("sm-none", "kv-f16")]["candidate_split_mode"] == "none"
    assert comps[("copies1", "kv-f16")]["candidate_split_mode"] == "layer"
    lines = [s for s in verdict.memory_sentences(data) if s.startswith("kv-f16: sm-")]
    assert lines and all("weights placed by split mode" in s and "WEIGHTS MOVED" not in s for s in lines)
    ctx = {(r["build"], r["setting"]): r for r in recommend.context.rows(data)}
    scope = recommend._scopes(data, "kv-f16")[0]
    comps = recommend.speed.comparisons(data)
    for build in ("sm-tensor", "sm-none"):
        a = recommend.assess(data, scope, build, comps, ctx, False)
        assert not a.moved and not any("not a no-op" in c.text for c in a.costs)
        assert any(n.startswith(f"split mode {build[3:]} places the weights otherwise") for n in a.notes)
