"""Speed comparisons and the throughput table over a RunData built in memory (no llama.cpp, no database).

The numbers are shaped like the CPU+RPC demo (256-token prompt, 32 generated tokens, concurrency 1 and 4, five
repeats): the single-stream figures are those of the first demo run (copies4, kv-f16-q8_0: ~203 t/s generation,
~2050 t/s prompt, TTFT ~126 ms, ITL ~4.9 ms); the 4-request figures are made up. copies4 is the study's first build
(the baseline), copies4-again is the same build measured again (A vs A) and copies1 keeps single-stream speed but
loses about a sixth of its throughput at 4 parallel requests.
"""

from __future__ import annotations

import json

import pytest

from llamalab.report.analysis import speed
from llamalab.report.data import RunData

STUDY = """
name = "pp"
[[builds]]
name = "copies4"
[[builds]]
name = "copies4-again"
[[builds]]
name = "copies1"
[[settings]]
name = "kv-f16-q8_0"
[workload]
prompt_tokens = 256
output_tokens = 32
concurrency = [1, 4]
repeats = 5
threshold = 0.02
"""

# Trial-to-trial jitter: medians 1.000 and 1.001, so A vs A differs by 0.1%.
JITTER = {"copies4": [1.000, 0.986, 1.007, 1.012, 0.995],
          "copies4-again": [0.993, 1.009, 1.001, 0.988, 1.010],
          "copies1": [1.004, 0.991, 1.010, 0.997, 1.000]}
# (single-stream gen t/s, prompt t/s, TTFT ms, ITL ms) at c=1, and (aggregate t/s, TTFT ms, ITL ms) at c=4
SINGLE = {"copies4": (203.4, 2051.0, 126.4, 4.93), "copies4-again": (203.4, 2051.0, 126.4, 4.93),
          "copies1": (203.1, 2046.0, 126.6, 4.94)}
PARALLEL = {"copies4": (301.5, 402.0, 12.9), "copies4-again": (301.5, 402.0, 12.9),
            "copies1": (252.0, 468.0, 15.4)}


def request(i: int, ttft_ms: float, itl_ms: float, *, error: str | None = None) -> dict:
    """A request row as the store returns it (asdict(RequestResult), JSON round-tripped)."""
    if error:
        return {"index": i, "wall_s": 0.01, "error": error, "itl_ms": [], "ttft_s": None}
    gaps = [round(itl_ms * f, 3) for f in (0.96, 1.0, 1.0, 1.03, 1.08)]
    return {"index": i, "prompt_n": 256, "prompt_ms": 124.8, "prompt_tps": 2051.5, "predicted_n": 32,
            "predicted_ms": 157.3, "predicted_tps": 203.4, "wall_s": 0.281, "ttft_s": ttft_ms / 1000.0,
            "itl_ms": gaps, "stop_type": "limit", "error": None}


def trial(build: str, setting: str, n: int, c: int, *, agg: float, out_tps: float | None = None,
          in_tps: float | None = None, ttft_ms: float, itl_ms: float, errors: int = 0) -> dict:
    reqs = [request(i, ttft_ms * (1 + 0.02 * i), itl_ms) for i in range(c - errors)]
    reqs += [request(i, 0, 0, error="HTTP 503: busy") for i in range(c - errors, c)]
    return {"id": 0, "run_id": "r1", "config_id": 1, "build": build, "setting": setting, "trial": n,
            "concurrency": c, "input_tokens": 256 * c, "input_tps": in_tps, "output_tokens": 32 * c,
            "output_tps": out_tps, "wall_s": 32 * c / agg, "aggregate_output_tps": agg,
            "aggregate_total_tps": round(9 * agg, 2),  # (256 + 32) / 32 × output
            "errors": errors, "started": 0.0,
            "requests": reqs}


def demo_trials(setting: str = "kv-f16-q8_0") -> list[dict]:
    out = []
    for n in range(1, 6):  # trials are numbered from 1; interleaved order, as `order = "interleaved"` stores them
        for b in JITTER:
            j = JITTER[b][n - 1]
            gen, pp, ttft, itl = SINGLE[b]
            out.append(trial(b, setting, n, 1, agg=round(32 / (ttft / 1000 + 31 * itl / 1000) * j, 2),
                             out_tps=round(gen * j, 2), in_tps=round(pp * j, 1), ttft_ms=ttft / j, itl_ms=itl / j))
            agg, ttft4, itl4 = PARALLEL[b]
            out.append(trial(b, setting, n, 4, agg=round(agg * j, 2), ttft_ms=ttft4 / j, itl_ms=itl4 / j))
    return out


def run_data(trials: list[dict], study: str = STUDY) -> RunData:
    return RunData(run={"id": "r1", "study": "pp", "status": "done", "started": "2025-01-01T00:00:00"},
                   builds=[], configs=[], trials=trials, study_toml=study)


@pytest.fixture(scope="module")
def demo() -> list[dict]:
    return speed.comparisons(run_data(demo_trials()))


def find(rows: list[dict], candidate: str, concurrency: int, metric: str) -> dict:
    (row,) = [r for r in rows if (r["candidate"], r["concurrency"], r["metric"]) == (candidate, concurrency, metric)]
    return row


# ---- the contract ------------------------------------------------------------------------------------------------

REQUIRED = {"metric", "baseline", "candidate", "concurrency", "ratio", "ci_low", "ci_high", "verdict"}


def test_every_comparison_carries_the_contract_keys_and_is_json(demo):
    assert demo
    for row in demo:
        assert REQUIRED <= row.keys()
        assert {"setting", "n_baseline", "n_candidate", "baseline_median", "candidate_median"} <= row.keys()
        assert row["verdict"] in {"faster", "slower", "no measurable difference", "not comparable"}
    assert json.loads(json.dumps(demo)) == demo


def test_baseline_is_the_study_first_build_and_never_its_own_candidate(demo):
    assert {r["baseline"] for r in demo} == {"copies4"}
    assert [r["candidate"] for r in demo if r["concurrency"] == 4 and r["metric"] == "aggregate_output_tps"] == \
        ["copies4-again", "copies1"]


def test_every_metric_at_every_level_where_it_was_measured(demo):
    got = sorted((r["concurrency"], r["metric"]) for r in demo if r["candidate"] == "copies1")
    # per-request prompt and generation t/s are not in this data at 4 requests; everything else is compared there
    assert got == [(1, "aggregate_input_tps"), (1, "aggregate_output_tps"), (1, "input_tps"), (1, "itl_ms"),
                   (1, "output_tps"), (1, "ttft_ms"),
                   (4, "aggregate_input_tps"), (4, "aggregate_output_tps"), (4, "itl_ms"), (4, "ttft_ms")]
    assert {(r["prompt_tokens"], r["output_tokens"]) for r in demo} == {(256, 32)}  # the study's one cell


def test_aggregate_prompt_throughput_is_prompt_tokens_over_the_last_first_token():
    t = trial("copies4", "kv", 1, 4, agg=300.0, ttft_ms=400.0, itl_ms=13.0)
    # 4 requests of 256 prompt tokens; their TTFTs are 400·(1, 1.02, 1.04, 1.06) ms
    assert speed.trial_value(t, "aggregate_input_tps") == pytest.approx(4 * 256 / 0.424)


def test_unlike_foreign_load_gives_no_verdict():
    trials = demo_trials()
    for t in trials:
        t["foreign_load"] = 1.2 if t["build"] == "copies1" else 0.1
    rows = speed.comparisons(run_data(trials))
    row = find(rows, "copies1", 4, "aggregate_output_tps")
    assert row["verdict"] == "not comparable" and "1.20" in row["reason"] and "0.10" in row["reason"]
    assert row["ratio"] < 0.9  # the ratio is still shown, without a claim
    assert find(rows, "copies4-again", 4, "aggregate_output_tps")["verdict"] == "no measurable difference"
    assert "— not comparable (other processes used 0.10 vs 1.20 CPU cores" in speed.sentence(row)


def test_cells_of_a_grid_are_compared_only_with_themselves():
    trials = demo_trials()
    long = []
    for t in demo_trials():
        t = {**t, "cell_prompt_tokens": 2048, "cell_output_tokens": 32}
        if t["build"] == "copies1":  # copies1 is 10% slower at 2,048-token prompts only
            t["aggregate_output_tps"] *= 0.9
        long.append(t)
    rows = speed.comparisons(run_data(trials + long))
    at = {(r["prompt_tokens"], r["verdict"]) for r in rows
          if (r["candidate"], r["concurrency"], r["metric"]) == ("copies1", 1, "aggregate_output_tps")}
    assert at == {(256, "no measurable difference"), (2048, "slower")}
    assert any("2,048-token prompts" in line for line in speed.sentences(run_data(trials + long)))


# ---- verdicts ----------------------------------------------------------------------------------------------------

VERDICTS = [
    *[pytest.param("copies4-again", c, m, "no measurable difference", id=f"a-vs-a-c{c}-{m}")
      for c, m in [(1, "output_tps"), (1, "input_tps"), (1, "aggregate_output_tps"), (1, "ttft_ms"), (1, "itl_ms"),
                   (4, "aggregate_output_tps"), (4, "ttft_ms"), (4, "itl_ms")]],
    pytest.param("copies1", 1, "output_tps", "no measurable difference", id="copies1-single-stream-same"),
    pytest.param("copies1", 4, "aggregate_output_tps", "slower", id="copies1-c4-throughput-slower"),
    pytest.param("copies1", 4, "ttft_ms", "slower", id="copies1-c4-ttft-higher-is-slower"),
    pytest.param("copies1", 4, "itl_ms", "slower", id="copies1-c4-itl-higher-is-slower"),
]


@pytest.mark.parametrize("candidate, concurrency, metric, expected", VERDICTS)
def test_verdicts(demo, candidate, concurrency, metric, expected):
    row = find(demo, candidate, concurrency, metric)
    assert row["verdict"] == expected
    assert (row["n_baseline"], row["n_candidate"]) == (5, 5)
    if expected == "no measurable difference":
        assert abs(row["ratio"] - 1) < 0.02
    else:
        assert not row["ci_low"] <= 1 <= row["ci_high"]


def test_throughput_ratio_and_medians(demo):
    row = find(demo, "copies1", 4, "aggregate_output_tps")
    # medians of 301.5·jitter and 252·jitter: both jitter medians are 1.000
    assert (row["baseline_median"], row["candidate_median"]) == (301.5, 252.0)
    assert row["ratio"] == pytest.approx(252.0 / 301.5, abs=1e-4)
    assert row["ci_low"] <= row["ratio"] <= row["ci_high"] < 0.98


def test_latency_is_the_median_over_a_trials_requests_in_ms(demo):
    row = find(demo, "copies1", 4, "ttft_ms")
    # request i has ttft·(1 + 0.02 i), i = 0..3 → median factor 1.03; trial jitter median 1.000
    assert row["baseline_median"] == pytest.approx(402.0 * 1.03, abs=1e-3)
    assert row["candidate_median"] == pytest.approx(468.0 * 1.03, abs=1e-3)


def test_comparisons_are_deterministic(demo):
    assert speed.comparisons(run_data(demo_trials())) == demo


# ---- threshold ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("study_threshold, override, expected", [
    pytest.param("0.02", None, "slower", id="study-2pct"),
    pytest.param("0.5", None, "no measurable difference", id="study-50pct"),
    pytest.param("0.5", 0.02, "slower", id="argument-overrides-study"),
    pytest.param(None, None, "slower", id="default-2pct"),
])
def test_threshold(study_threshold, override, expected):
    study = STUDY.replace("threshold = 0.02", f"threshold = {study_threshold}" if study_threshold else "")
    data = run_data(demo_trials(), study)
    assert speed.threshold_of(data) == (float(study_threshold) if study_threshold else 0.02)
    row = find(speed.comparisons(data, override), "copies1", 4, "aggregate_output_tps")
    assert row["verdict"] == expected
    assert row["threshold"] == (override if override is not None else
                                float(study_threshold) if study_threshold else 0.02)


# ---- edges -------------------------------------------------------------------------------------------------------

def test_a_trial_with_a_failed_request_is_left_out_and_counted():
    trials = demo_trials()
    bad = next(t for t in trials if (t["build"], t["concurrency"], t["trial"]) == ("copies1", 4, 2))
    trials[trials.index(bad)] = trial("copies1", "kv-f16-q8_0", 2, 4, agg=120.0, ttft_ms=900.0, itl_ms=30.0,
                                      errors=1)
    row = find(speed.comparisons(run_data(trials)), "copies1", 4, "aggregate_output_tps")
    assert (row["n_baseline"], row["n_candidate"]) == (5, 4)
    assert (row["baseline_excluded"], row["candidate_excluded"]) == (0, 1)


def test_one_trial_each_gives_no_interval_and_no_claim():
    trials = [t for t in demo_trials() if t["trial"] == 1]
    rows = speed.comparisons(run_data(trials))
    row = find(rows, "copies1", 4, "aggregate_output_tps")
    assert (row["ci_low"], row["ci_high"], row["verdict"]) == (None, None, "untested (one trial)")
    assert "(no interval: n=1)" in speed.sentence(row)


def test_outlier_trials_are_named_by_trial_number():
    trials = demo_trials()
    for t in trials:
        if (t["build"], t["concurrency"], t["trial"]) == ("copies1", 4, 3):
            t["aggregate_output_tps"] = 150.0  # a trial that hit a hiccup
    row = find(speed.comparisons(run_data(trials)), "copies1", 4, "aggregate_output_tps")
    assert (row["baseline_outlier_trials"], row["candidate_outlier_trials"]) == ([], [3])


def test_without_a_study_file_builds_and_settings_keep_their_stored_order():
    trials = [t for t in demo_trials() if t["build"] != "copies4"]  # copies4-again is now seen first
    rows = speed.comparisons(run_data(trials, study=""))
    assert {(r["baseline"], r["candidate"], r["setting"]) for r in rows} == {
        ("copies4-again", "copies1", "kv-f16-q8_0")}


def test_baseline_falls_to_the_next_build_with_trials_in_that_setting():
    trials = demo_trials("kv-f16-q8_0") + [t for t in demo_trials("kv-f16-f16") if t["build"] != "copies4"]
    study = STUDY.replace('[[settings]]\nname = "kv-f16-q8_0"',
                          '[[settings]]\nname = "kv-f16-f16"\n[[settings]]\nname = "kv-f16-q8_0"')
    rows = speed.comparisons(run_data(trials, study))
    assert list(dict.fromkeys((r["setting"], r["baseline"]) for r in rows)) == [
        ("kv-f16-f16", "copies4-again"), ("kv-f16-q8_0", "copies4")]


def test_no_trials_no_comparisons():
    assert speed.comparisons(run_data([])) == []
    assert speed.throughput_table(run_data([])) == []
    assert speed.sentences(run_data([])) == []


# ---- sentences ---------------------------------------------------------------------------------------------------

def constant_data() -> RunData:
    """Every trial identical within a build, so the bootstrap interval is a point and the text is exact."""
    trials = []
    for n in range(1, 4):
        trials.append(trial("copies4", "kv-f16-q8_0", n, 4, agg=300.0, ttft_ms=400.0, itl_ms=13.0))
        trials.append(trial("copies1", "kv-f16-q8_0", n, 4, agg=360.0, ttft_ms=300.0, itl_ms=13.0))
    return run_data(trials)


def test_sentences_text():
    assert speed.sentences(constant_data()) == [
        "kv-f16-q8_0: copies1 vs copies4 in aggregate output t/s at 4 parallel requests: 1.20× [1.20, 1.20] — faster",
        "kv-f16-q8_0: copies1 vs copies4 in aggregate prompt t/s at 4 parallel requests: 1.33× [1.33, 1.33] — faster",
        "kv-f16-q8_0: copies1 vs copies4 in median time to first token at 4 parallel requests: 0.75× [0.75, 0.75]"
        " — faster",
        "kv-f16-q8_0: copies1 vs copies4 in median inter-token latency at 4 parallel requests: 1.00× [1.00, 1.00]"
        " — no measurable difference",
    ]


def test_sentences_can_pick_metrics():
    assert speed.sentences(constant_data(), metrics=["aggregate_output_tps"]) == [
        "kv-f16-q8_0: copies1 vs copies4 in aggregate output t/s at 4 parallel requests: 1.20× [1.20, 1.20] — faster"]


def test_single_stream_sentence_wording(demo):
    line = speed.sentence(find(demo, "copies1", 1, "output_tps"))
    assert line.startswith("kv-f16-q8_0: copies1 vs copies4 in generation t/s, single stream: 1.00× [")
    assert line.endswith("] — no measurable difference")


# ---- throughput table --------------------------------------------------------------------------------------------

def test_throughput_table_rows_in_study_order():
    rows = speed.throughput_table(run_data(demo_trials()))
    assert [(r["build"], r["concurrency"]) for r in rows] == [
        ("copies4", 1), ("copies4", 4), ("copies4-again", 1), ("copies4-again", 4), ("copies1", 1), ("copies1", 4)]


def test_throughput_table_figures():
    rows = speed.throughput_table(run_data(demo_trials()))
    (r,) = [r for r in rows if (r["build"], r["concurrency"]) == ("copies1", 4)]
    # 252 × jitter [1.004, 0.991, 1.010, 0.997, 1.000]
    assert (r["n"], r["excluded"]) == (5, 0)
    assert (r["aggregate_output_tps"], r["aggregate_output_tps_min"], r["aggregate_output_tps_max"]) == \
        (252.0, 249.73, 254.52)
    assert r["output_tps"] is None and r["input_tps"] is None  # not measured at c>1


def test_throughput_table_percentiles_pool_the_requests():
    rows = speed.throughput_table(constant_data())
    (r,) = [r for r in rows if r["build"] == "copies4"]
    # TTFTs 400·(1, 1.02, 1.04, 1.06) in each of 3 trials: 12 values, 400/408/416/424 three times each;
    # p50 sits at rank 5.5 (between 408 and 416), p90 at rank 9.9 (424 and 424)
    assert (r["ttft_ms_p50"], r["ttft_ms_p90"]) == (412.0, 424.0)
    # gaps 13·(.96, 1, 1, 1.03, 1.08) rounded → 12.48, 13, 13, 13.39, 14.04 for 12 requests: 60 values with
    # ranks 0–11 = 12.48, 12–35 = 13, 36–47 = 13.39, 48–59 = 14.04; p50 at rank 29.5, p90 at rank 53.1
    assert (r["itl_ms_p50"], r["itl_ms_p90"]) == (13.0, 14.04)
