"""Where pipeline parallelism pays: the gain per workload cell and the crossover sentence, over a RunData built in
memory in the shape of the H200 grid (copies4 against copies1; prompt lengths × concurrency levels). The speeds are
made up: pipeline parallelism is 10% faster in aggregate prompt t/s from 8,000-token prompts, and the same
elsewhere."""

from __future__ import annotations

import pytest

from llamalab.report import plots
from llamalab.report.analysis import grid
from llamalab.report.data import RunData

STUDY = """
name = "grid"
[[builds]]
name = "copies4"
[[builds]]
name = "copies1"
cmake = { GGML_SCHED_MAX_COPIES = 1 }
[[builds]]
name = "moves-weights"
args = ["-ot", "token_embd.weight=CPU"]
[[settings]]
name = "kv"
[workload]
prompt_tokens = [512, 2048, 8000]
output_tokens = 32
concurrency = [1, 4]
"""
JITTER = [1.0, 0.99, 1.01]


def ledger(copies: int, model: tuple[float, float]) -> dict:
    dev = lambda m: {"model_mib": m, "kv_mib": 10.0, "compute_mib": 100.0 * copies, "output_mib": None,  # noqa: E731
                     "rs_mib": None}
    return {"devices": {"CUDA0": dev(model[0]), "CUDA1": dev(model[1])}, "host": {}, "sched_copies": copies,
            "pipeline_parallel": copies > 1, "n_ctx": 65536}


def trial(build: str, n: int, c: int, prompt: int, speedup: float) -> dict:
    j = JITTER[n - 1]
    ttft = prompt * c / (20000.0 * speedup * j)  # seconds until the last first token
    reqs = [{"index": i, "prompt_n": prompt, "predicted_n": 32, "ttft_s": ttft * (0.9 + 0.1 * i / max(1, c - 1)),
             "itl_ms": [6.0 * c] * 31, "error": None} for i in range(c)]
    return {"build": build, "setting": "kv", "trial": n, "concurrency": c, "cell_prompt_tokens": prompt,
            "cell_output_tokens": 32, "aggregate_output_tps": 32 * c / (ttft + 0.2 * c) * j, "errors": 0,
            "foreign_load": 0.0, "requests": reqs}


def run_data(skip_8000_at_4: bool = False) -> RunData:
    trials = []
    for n in (1, 2, 3):
        for prompt in (512, 2048, 8000):
            for c in (1, 4):
                if skip_8000_at_4 and (prompt, c) == (8000, 4):
                    continue
                trials.append(trial("copies4", n, c, prompt, 1.1 if prompt >= 8000 else 1.0))
                trials.append(trial("copies1", n, c, prompt, 1.0))
                trials.append(trial("moves-weights", n, c, prompt, 1.0))
    configs = [{"id": i, "build": b, "setting": "kv", "status": "ok", "ledger": led,
                "reason": "concurrency 4 not run: that many requests of 8000+32 tokens do not fit in n_ctx 20000"
                if skip_8000_at_4 and b == "copies4" else None}
               for i, (b, led) in enumerate([("copies4", ledger(4, (100.0, 100.0))),
                                             ("copies1", ledger(1, (100.0, 100.0))),
                                             ("moves-weights", ledger(1, (100.0, 30.0)))])]
    return RunData(run={"id": "g1", "study": "grid", "status": "finished", "started": "x"}, builds=[],
                   configs=configs, trials=trials, study_toml=STUDY)


def test_the_pair_is_the_one_copy_twin_that_moved_no_weight():
    p = grid.pair(run_data())
    assert (p.pp, p.no_pp, p.copies, p.setting) == ("copies4", "copies1", 4, "kv")


def test_gain_per_cell():
    rows = grid.gains(run_data())
    assert len(rows) == 3 * 2 * 2  # 3 prompt lengths × 2 levels × (prompt, output)
    by = {(r["prompt_tokens"], r["concurrency"], r["metric"]): r for r in rows}
    assert by[(8000, 1, "aggregate_input_tps")]["ratio"] == pytest.approx(1.1, abs=1e-3)
    assert by[(8000, 4, "aggregate_input_tps")]["verdict"] == "faster"
    assert by[(512, 4, "aggregate_input_tps")]["verdict"] == "no measurable difference"
    assert all(r["ci_low"] <= r["ratio"] <= r["ci_high"] for r in rows)


def test_crossover_sentence_says_where_it_pays():
    s = grid.crossover(run_data())
    assert s.startswith("Pipeline parallelism (copies4, 4 copies, against copies1) pays on this rig "
                        "(aggregate output and prompt t/s faster)")
    assert "from 8,000-token prompts at 1–4 requests at a time" in s
    assert "elsewhere it makes no measurable difference" in s


def test_crossover_names_skipped_cells_and_the_never_case():
    s = grid.crossover(run_data(skip_8000_at_4=True))
    assert "from 8,000-token prompts at 1 request" in s and "8000+32 tokens do not fit" in s
    flat = run_data()
    for t in flat.trials:
        if t["build"] == "copies4":
            t.update(trial("copies4", t["trial"], t["concurrency"], t["cell_prompt_tokens"], 1.0))
    assert "never pays measurably on this rig: in none of the 6 cells" in grid.crossover(flat)


def test_table_and_heatmap():
    data = run_data(skip_8000_at_4=True)
    head, body = grid.table(grid.gains(data))
    assert head == ["Prompt tokens", "1 request", "4 requests"]
    assert body[2][0] == "8,000" and body[2][2] == "not run" and "pays" in body[2][1]
    assert plots.pp_gain_figure(data) is not None
