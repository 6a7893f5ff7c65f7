"""`llamalab report` in every format, built from a real stored run: JSON and CSV give back every stored figure."""

from __future__ import annotations

import json
import stat

import pytest
from click.testing import CliRunner

import runfixtures
from llamalab.cli import cli
from llamalab.llamacpp import crosscheck
from llamalab.report import csvfile, document, formats, markdown
from llamalab.report import data as rdata
from llamalab.store.db import Store
from llamalab.store.exchange import decode_tables


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "results.db") as s:
        yield s


@pytest.fixture
def run(store):
    """The real demo run, plus a crosscheck row (the run's own client-vs-server figures, no llama-bench)."""
    rid = runfixtures.fill(store)
    trials = [t for t in store.trials(rid) if (t["build"], t["setting"]) == ("copies4", "kv-f16-q8_0")]
    store.save_crosscheck(rid, "copies4", "kv-f16-q8_0", crosscheck.compare([], trials), "llama-bench not run")
    return rdata.load(store, rid)


def stored(store: Store, run_id: str) -> dict[str, list[dict]]:
    return decode_tables(store.dump_run(run_id))


# ---------------------------------------------------------------- JSON

def test_json_report_round_trips_every_stored_row(store, run):
    doc = json.loads(formats.render(run, "json"))
    columns = {t: store.columns(t) for t in Store.RUN_TABLES}
    back = decode_tables(document.tables_of(doc, columns))
    assert back == stored(store, run.id)


def test_json_report_figures_are_the_stored_ones(store, run):
    doc = json.loads(formats.render(run, "json"))
    assert doc["format"] == "llamalab-report" and doc["version"] == 1
    assert doc["run"]["id"] == run.id and doc["run"]["status"] == "finished"
    assert doc["system"] == store.system(run.id)
    first = doc["trials"][0]
    assert first["output_tps"] == store.trials(run.id)[0]["output_tps"]  # full precision, not rounded
    assert first["requests"][0]["itl_ms"] == store.trials(run.id)[0]["requests"][0]["itl_ms"]
    cfg = doc["configs"][0]
    assert cfg["ledger"]["sched_copies"] == 4 and cfg["ledger"]["n_ctx"] == 8192
    assert {b["name"] for b in cfg["buffers"]} >= {"CPU", "CPU_Mapped"}
    assert len(doc["trials"]) == 12 and len(doc["configs"]) == 4
    assert doc["crosschecks"][0]["result"] == json.loads(store.dump_run(run.id)["crosschecks"][0]["result_json"])


def test_json_report_has_the_derived_tables(run):
    doc = json.loads(formats.render(run, "json"))
    assert len(doc["rows"]) == 12
    row = doc["rows"][0]
    assert (row["build"], row["setting"], row["trial"]) == ("copies4", "kv-f16-q8_0", 1)
    assert row["compute_mib"] == {"RPC0": 48.1, "RPC1": 48.1} and row["compute_host_mib"] == 37.11
    assert {(m["baseline"], m["candidate"]) for m in doc["memory"]} == {("copies4", "copies1")}
    assert {c["metric"] for c in doc["comparisons"]} >= {"output_tps", "input_tps"}
    for c in doc["comparisons"]:
        assert c["verdict"] in ("faster", "slower", "no measurable difference")
    assert [(t["build"], t["setting"], t["concurrency"]) for t in doc["throughput"]][0] == ("copies4", "kv-f16-q8_0", 1)


# ---------------------------------------------------------------- CSV

def test_csv_trials_round_trip(store, run):
    text = csvfile.trials_csv(run)
    lines = text.splitlines()
    assert lines[0].startswith("id,run_id,config_id,build,setting,trial,concurrency,input_tokens,input_tps,")
    assert "request.ttft_s" in lines[0] and "request.itl_ms" in lines[0]
    assert len(lines) == 1 + sum(len(t["requests"]) for t in store.trials(run.id))
    back = csvfile.parse_trials(text)
    assert back == document.trials_of(run)
    columns = store.columns("trials")
    assert [document.stored(t, columns) for t in back] == store.dump_run(run.id)["trials"]  # byte for byte


def test_csv_configs_round_trip(store, run):
    text = csvfile.configs_csv(run)
    assert text.splitlines()[0] == "config_id,build,setting,path,value"
    assert "/ledger/kv/v_type" in text and "/buffers/0/compute_mib" in text
    back = csvfile.parse_configs(text)
    assert back == document.configs_of(run)
    columns = {t: store.columns(t) for t in Store.RUN_TABLES}
    doc = {"run": {"id": run.id}, "system": None, "builds": [], "trials": [], "configs": back}
    rebuilt = decode_tables(document.tables_of(doc, columns))
    for t in ("configs", "ledgers", "buffers"):
        assert rebuilt[t] == stored(store, run.id)[t], t
    others = csvfile.parse_other_tables(text)
    # a table with no rows has no figures to carry: the CSV round trip covers every row of every other table
    assert others == {k: v for k, v in document.other_tables(run).items() if v} and len(others["crosschecks"]) == 1
    assert others["crosschecks"][0]["result"]["client_overhead_ms"] > 0


@pytest.mark.parametrize("value", [
    pytest.param(None, id="none"), pytest.param(0.1 + 0.2, id="float-repr"), pytest.param(1.0, id="integral-float"),
    pytest.param(7, id="int"), pytest.param("RPC0[127.0.0.1:50052]", id="text"), pytest.param([], id="empty-list"),
    pytest.param({}, id="empty-object"), pytest.param(True, id="bool"),
])
def test_flatten_round_trips_leaves(value):
    tree = {"a": {"b/c~d": value, "list": [1, {"x": value}]}, "z": value}
    assert csvfile.unflatten(csvfile.flatten(tree)) == tree


def test_csv_keeps_float_types():
    assert csvfile._value("input_tps", csvfile._cell(2.0)) == 2.0
    assert isinstance(csvfile._value("input_tps", csvfile._cell(2.0)), float)
    assert csvfile._value("build", "1234") == "1234"


# ---------------------------------------------------------------- Markdown

def test_markdown_has_the_seed_table_and_verdict(run):
    md = markdown.render(run)
    assert ("| Build | Setting | Trial | Input tokens | Input t/s | Output tokens | Output t/s "
            "| Compute RPC0 (MiB) |") in md
    assert "| copies4 | kv-f16-q8_0 | 1 | 256 | 2,076.74 | 32 | 203.75 | 48.10 | 48.10 | 37.11 | 8192 | 4 |" in md
    assert ("copies1 vs copies4 (pipeline parallelism on, 1 copy (no extra copies) vs on, 4 copies): compute "
            "buffers RPC0 -29.07 MiB") in md
    assert "model buffers unchanged on every device (no weight moved)" in md
    assert "## Decision by use" in md and "| Use | Run | Buys | Costs | Outputs vs baseline | Measured |" in md
    assert "## Speed" in md and "no measurable difference" in md
    assert "build no-pp-blas: skipped — OpenBLAS is not installed" in md
    assert "CMake `-DGGML_SCHED_MAX_COPIES=1`" in md


# ---------------------------------------------------------------- CLI

@pytest.fixture
def db(tmp_path):
    path = tmp_path / "cli.db"
    with Store(path) as s:
        runfixtures.fill(s)
    return path


@pytest.mark.parametrize("fmt,needle", [
    pytest.param("md", "# llamalab: demo — run", id="md"),
    pytest.param("json", '"format": "llamalab-report"', id="json"),
    pytest.param("csv", "id,run_id,config_id,build,setting", id="csv"),
    pytest.param("html", "<!DOCTYPE html>", id="html"),
])
def test_cli_report_formats_to_stdout(db, fmt, needle):
    res = CliRunner().invoke(cli, ["report", "--db", str(db), "--format", fmt])
    assert res.exit_code == 0, res.output
    assert needle in res.output


def test_cli_report_csv_writes_two_files_and_plots(db, tmp_path):
    out = tmp_path / "out" / "run.csv"
    res = CliRunner().invoke(cli, ["report", "--db", str(db), "--format", "csv", "-o", str(out),
                                   "--plots", str(tmp_path / "plots")])
    assert res.exit_code == 0, res.output
    assert out.read_text().startswith("id,run_id,")
    assert (tmp_path / "out" / "run.configs.csv").read_text().startswith("config_id,build,setting,path,value")
    names = sorted(p.name for p in (tmp_path / "plots").iterdir())
    rid = runfixtures.doc()["run_id"]
    assert names == sorted(f"{rid}-{p}.{f}" for p in ("compute", "context", "memory", "throughput")
                           for f in ("png", "svg"))
    assert stat.S_IMODE(out.stat().st_mode) & 0o044  # readable by others, as any report file
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_cli_report_unknown_run_is_a_clean_error(db):
    res = CliRunner().invoke(cli, ["report", "20991231", "--db", str(db)])
    assert res.exit_code != 0
    assert "no run '20991231'" in str(res.exception)
    res = CliRunner().invoke(cli, ["report", "nope", "--db", str(db)])
    assert res.exit_code != 0
    assert "'nope' is not a llamalab run id or the start of one" in str(res.exception)


def test_cli_runs_json_contract(db):
    res = CliRunner().invoke(cli, ["runs", "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    items = json.loads(res.output)
    assert len(items) == 1
    item = items[0]
    assert {"id", "study", "status", "started", "trials"} <= set(item)
    assert item["status"] in ("finished", "interrupted", "failed", "running")
    assert (item["study"], item["status"], item["trials"]) == ("demo", "finished", 12)


def test_csv_of_a_run_without_trials_still_has_its_header(tmp_path):
    d = runfixtures.doc()
    d["tables"]["trials"] = []
    with Store(tmp_path / "empty.db") as s:
        run = rdata.load(s, runfixtures.fill(s, document=d))
    text = csvfile.trials_csv(run)
    assert text.startswith("id,run_id,config_id,build,setting,trial,concurrency,") and "request.itl_ms" in text
    assert csvfile.parse_trials(text) == []


@pytest.mark.parametrize("name", runfixtures.names())
def test_streamed_reports_equal_the_reports_of_a_run_held_whole(tmp_path, name):
    """`report` loads a run with only its requests' speed figures and streams CSV and JSON, reading each trial's
    requests again as it writes it (issue 26: a JSON report of 32,000 trials held 973 MB). Same text, same value."""
    from llamalab.store.db import Store

    with Store(tmp_path / "x.db") as s:
        runfixtures.fill(s, name)
    with Store(tmp_path / "x.db", readonly=True) as s:
        full, lean = rdata.load(s, requests=True), rdata.load(s, requests=False)
        assert all("requests" not in t and "figures" in t for t in lean.trials)
        for fmt in ("md", "csv", "json"):  # HTML renders what Markdown does, from the same figures
            held, streamed = formats.render(full, fmt), "".join(formats.pieces(lean, fmt))
            assert (json.loads(held) == json.loads(streamed)) if fmt == "json" else held == streamed, fmt


def test_the_architecture_docs_way_of_adding_a_format_works(run, monkeypatch):
    """docs/architecture.md's example, as it is printed there: one module (`report/txt.py`) and one registration make
    `--format txt` a format every report path knows."""
    import re
    import sys
    import types

    from testpaths import ROOT

    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    example = re.search(r"```python\n(# src/llamalab/report/txt\.py\n.*?)```", doc, re.S).group(1)
    module_src, registration = example.split("# src/llamalab/report/formats.py, in REGISTRY:")
    txt = types.ModuleType("llamalab.report.txt")
    txt.__package__ = "llamalab.report"
    exec(compile(module_src, "report/txt.py", "exec"), txt.__dict__)
    monkeypatch.setitem(sys.modules, "llamalab.report.txt", txt)
    fmt = eval(registration.strip().rstrip(","), vars(formats))
    monkeypatch.setitem(formats.REGISTRY, fmt.name, fmt)
    text = formats.render(run, "txt")
    assert text.splitlines()[0] == markdown.render(run).splitlines()[0].lstrip("# ")
    assert "copies4" in text and "\x1b" not in text
    assert "txt: the title, the answer and the results as plain lines" in formats.help_text()
