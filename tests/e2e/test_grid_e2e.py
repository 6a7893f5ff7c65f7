"""The H200 study's shape for real, scaled down to the CPU: benchmarks/h200/study.toml (copies4, copies1 and an
override that matches no tensor; interleaved; a prompt × concurrency grid) on two local rpc-servers with the tiny
model, a fixed 3,072-token context so that one cell cannot run, and a small grid."""

from __future__ import annotations

import pytest

from llamahelp import run_study
from llamalab.report import data as rdata
from llamalab.report import html, markdown, plots
from llamalab.report.analysis import grid, recommend, verdict
from testpaths import ROOT

pytestmark = pytest.mark.llama

STUDY = str(ROOT / "benchmarks" / "h200" / "study.toml")
SCALED = [
    'devices.backend="cpu-rpc"', 'model.preset="tiny"', "devices.vram=[]", "server.ctx=3072",
    "workload.prompt_tokens=[64,1024]", "workload.output_tokens=8", "workload.concurrency=[1,2,4]",
    "workload.repeats=2", "workload.warmup=0",
]


@pytest.fixture(scope="module")
def grid_run(demo_prep, llama_home, tmp_path_factory):
    store, rid = run_study(llama_home, tmp_path_factory.mktemp("grid"), SCALED, ref=STUDY)
    yield rdata.load(store, rid), store, rid
    store.close()


def test_every_cell_that_fits_ran_and_the_one_that_does_not_is_noted(grid_run):
    data, store, rid = grid_run
    done = store.done_trials(rid)
    want = {(b, "kv-f16-q8_0", t, c, p, 8) for b in ("copies4", "copies1", "no-pp-override") for t in (1, 2)
            for p, c in [(64, 1), (64, 2), (64, 4), (1024, 1), (1024, 2)]}
    assert done == want  # 4 × (1024 + 8) tokens do not fit n_ctx 3072
    notes = [c["reason"] for c in data.configs if c["status"] == "ok"]
    assert notes and all("concurrency 4 not run" in n and "1024+8 tokens" in n for n in notes)
    for t in data.trials:
        assert t["input_tokens"] == t["cell_prompt_tokens"] * t["concurrency"]


def test_the_override_that_matches_no_tensor_turns_pipelining_off_and_moves_nothing(grid_run):
    data, _, _ = grid_run
    assert data.ledger_for("copies4", "kv-f16-q8_0")["sched_copies"] == 4
    over = data.ledger_for("no-pp-override", "kv-f16-q8_0")
    assert over["sched_copies"] == 1 and over["pipeline_parallel"] is False
    (m,) = [m for m in verdict.memory_comparisons(data) if m["candidate"] == "no-pp-override"]
    assert m["weights_moved"] == [] and m["candidate_pp"] == "off"
    (c1,) = [m for m in verdict.memory_comparisons(data) if m["candidate"] == "copies1"]
    assert c1["candidate_pp"] == "on, 1 copy (no extra copies)" and c1["compute_delta_mib"] == m["compute_delta_mib"]


def test_the_gain_map_and_its_sentence(grid_run):
    data, _, _ = grid_run
    p = grid.pair(data)
    assert (p.pp, p.no_pp, p.copies) == ("copies4", "copies1", 4)
    rows = grid.gains(data, p)
    assert {(r["prompt_tokens"], r["concurrency"], r["metric"]) for r in rows} == {
        (pr, c, m) for pr, c in [(64, 1), (64, 2), (64, 4), (1024, 1), (1024, 2)] for m in grid.GAIN_METRICS}
    sentence = grid.crossover(data, rows, p)
    assert sentence.startswith("Pipeline parallelism (copies4, 4 copies, against copies1)")
    assert "concurrency 4 not run" in sentence
    assert plots.pp_gain_figure(data) is not None
    page = html.render(data)
    assert "Where pipeline parallelism pays" in page and 'id="plot-pp_gain"' in page
    md = markdown.render(data)
    assert "## Decision by use" in md and "## Where pipeline parallelism pays" in md


def test_the_decision_table_has_a_row_per_use(grid_run):
    data, _, _ = grid_run
    rows = recommend.decision_table(data)
    assert [(r.use, r.title) for r in rows] == [
        ("short", "One user, short prompts"), ("long", "One user, long prompts (RAG, agents, code)"),
        ("serving", "Serving 4 requests at once")]
    assert "64-token prompts" in rows[0].measured and "1,024-token prompts" in rows[1].measured
    text = recommend.recommendation(data)
    for r in rows:
        assert r.title in text
