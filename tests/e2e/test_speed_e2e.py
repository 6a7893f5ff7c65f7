"""Speed you can trust, for real: a repeated identical configuration (A vs A) gives "no measurable difference",
the concurrency levels are measured and compared with intervals, and the crosscheck compares llamalab's speeds
with llama-bench on the same binary and settings."""

from __future__ import annotations

import sys

import pytest

from llamahelp import run_study
from llamalab.report import data as rdata
from llamalab.report.analysis import speed

pytestmark = [pytest.mark.llama, pytest.mark.timed]  # speeds compared: run alone (Makefile)

A_VS_A = [
    'builds=[{name="copies4"},{name="copies4-again"}]',
    'settings=[{name="kv-f16-q8_0",args=["-ctk","f16","-ctv","q8_0"]}]',
    "workload.repeats=5", "workload.concurrency=[1,4]", 'workload.order="interleaved"',
    "workload.prompt_tokens=128", "workload.output_tokens=32", "workload.warmup=1",
]


@pytest.fixture(scope="module")
def a_vs_a(demo_prep, llama_home, tmp_path_factory):
    store, rid = run_study(llama_home, tmp_path_factory.mktemp("ava"), A_VS_A, crosscheck=True)
    yield rdata.load(store, rid), store, rid
    store.close()


def _false_verdicts(data) -> list[dict]:
    """The A/A's comparisons that break its bounds (none if it is within them)."""
    comps = speed.comparisons(data)
    key = [c for c in comps if c["metric"] in ("output_tps", "input_tps", "aggregate_output_tps")]
    assert {(c["metric"], c["concurrency"]) for c in key} == {
        (m, level) for m in ("output_tps", "input_tps", "aggregate_output_tps") for level in (1, 4)}
    for c in key:
        assert c["n_baseline"] == c["n_candidate"] == 5
        assert c["ci_low"] is not None and c["ci_low"] <= c["ratio"] <= c["ci_high"]
        assert (c["prompt_tokens"], c["output_tokens"]) == (128, 32)
    # per-request speeds at 4 parallel requests swing most with the machine's load: the verdict is checked on the
    # single stream and on the level's aggregate throughput (4 comparisons). An interval is wrong at its stated rate,
    # and A/A studies on this machine gave a false verdict in about 1 of 96 comparisons: one of the 4 may say
    # "faster" or "slower" (it failed a CI run: prompt t/s at one stream, "slower"), but never by more than 10%, and
    # two false verdicts in one run (about 1 run in 1,500 at that rate) mean the intervals are too narrow.
    checked = [c for c in key if c["concurrency"] == 1 or c["metric"] == "aggregate_output_tps"]
    assert len(checked) == 4
    false = [c for c in checked if c["verdict"] != "no measurable difference"]
    return false if len(false) > 1 or not all(0.9 <= c["ratio"] <= 1.1 for c in false) else []


def test_identical_configurations_show_no_measurable_difference(a_vs_a, llama_home, tmp_path_factory):
    """Within the bounds above, or else in a second A/A study run at once: a 2-core VM whose speed swings twice over
    between server starts (prompt t/s 359-1,049 for one configuration in one run, 2026-12-07) breaks them about one
    run in ten with 5 trials each (all 5 of one copy slower at 4 requests, 0.84x); two runs in a row that break them
    mean the intervals are too narrow."""
    data, _, _ = a_vs_a
    false = _false_verdicts(data)
    if false:
        broke = [(c["metric"], c["concurrency"], round(c["ratio"], 3)) for c in false]
        print(f"\nA/A: outside the bounds in the first study ({broke}): running it again", file=sys.stderr)
        store, rid = run_study(llama_home, tmp_path_factory.mktemp("ava-again"), A_VS_A)
        with store:
            again = _false_verdicts(rdata.load(store, rid))
        assert not again, (false, again)


def test_every_level_has_throughput_with_spread(a_vs_a):
    data, _, _ = a_vs_a
    table = speed.throughput_table(data)
    assert {(r["build"], r["concurrency"]) for r in table} == {
        ("copies4", 1), ("copies4", 4), ("copies4-again", 1), ("copies4-again", 4)}
    for r in table:
        assert r["n"] == 5
        assert r["aggregate_output_tps_min"] <= r["aggregate_output_tps"] <= r["aggregate_output_tps_max"]
        assert r["ttft_ms_p50"] > 0 and r["itl_ms_p50"] > 0


def test_crosscheck_with_llama_bench_and_server_timings(a_vs_a):
    _, store, rid = a_vs_a
    (row,) = store.crosschecks(rid)
    assert row["error"] is None, row["error"]
    res = row["result"]
    assert res["untranslated_server_args"] == []
    for key in ("input_tps", "output_tps"):
        pair = res[key]
        assert pair["llamalab"] > 0 and pair["llama_bench"] > 0
        # same binary, same settings: within a factor of two even on a busy 2-core machine
        assert 0.5 < pair["llamalab"] / pair["llama_bench"] < 2.0, pair
    assert 0 <= res["client_overhead_ms"] < 50  # HTTP + JSON + streaming on loopback
