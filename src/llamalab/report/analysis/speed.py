"""What the speed numbers say: per-level throughput, and each build against the study's first build with a ratio,
its bootstrap interval and a verdict. Pure: takes a stored RunData, returns rows, dicts and sentences.

The unit of a sample is the trial: requests inside one trial share the server at the same moment and are not
independent, so latencies are reduced to one median per trial before two builds are compared. A trial in which any
request failed is left out of both the comparisons and the table, and counted (`*_excluded`). Only trials of the
same workload cell (prompt and output tokens per request) and concurrency level are ever compared, and two sides
whose trials ran under different foreign CPU load (beyond FOREIGN_LOAD_GAP cores) get no verdict.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from ...core import stats
from ..data import RunData, figures
from ..records import TrialRecord
from .verdict import study_builds, study_settings

DEFAULT_THRESHOLD = 0.02
# Other processes' CPU use (trials.foreign_load, median over a side's trials) may differ by at most this many cores
# between the two sides of a comparison; beyond it their speeds were measured under unlike conditions and the
# comparison says "not comparable" instead of a verdict.
FOREIGN_LOAD_GAP = 0.5
NOT_COMPARABLE = "not comparable"


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    higher_is_better: bool
    short: str  # for tables and the decision table


METRICS: tuple[Metric, ...] = (
    Metric("output_tps", "generation t/s", True, "generation t/s"),
    Metric("input_tps", "prompt t/s", True, "prompt t/s"),
    Metric("aggregate_output_tps", "aggregate output t/s", True, "aggregate output t/s"),
    Metric("aggregate_input_tps", "aggregate prompt t/s", True, "aggregate prompt t/s"),
    Metric("ttft_ms", "median time to first token", False, "TTFT"),
    Metric("itl_ms", "median inter-token latency", False, "ITL"),
)
_BY_NAME = {m.name: m for m in METRICS}


def metric(name: str) -> Metric:
    return _BY_NAME[name]


# ---- per-trial values -------------------------------------------------------------------------------------------

def _ttfts_ms(trial: TrialRecord) -> Sequence[float]:
    return figures(trial).ttfts_ms


def _itls_ms(trial: TrialRecord) -> Sequence[float]:
    return figures(trial).itls_ms


def aggregate_input_tps(trial: TrialRecord) -> float | None:
    """Prompt tokens of all the level's requests per second until the last of them had its first token (all are
    sent together, so that is when every prompt had been processed)."""
    return figures(trial).aggregate_input_tps


def trial_value(trial: TrialRecord, metric: str) -> float | None:
    """One trial's sample of `metric`: the stored figure for throughputs (aggregate prompt t/s derived from the
    requests), the median over its requests (ms) for TTFT and over all its inter-token gaps for ITL. None when the
    trial has no such figure, or it is not positive (a ratio needs a positive baseline)."""
    if metric == "ttft_ms":
        vals = _ttfts_ms(trial)
    elif metric == "itl_ms":
        vals = _itls_ms(trial)
    elif metric == "aggregate_input_tps":
        v = aggregate_input_tps(trial)
        vals = [v] if v is not None else []
    elif metric in _BY_NAME:
        stored = cast("float | None", trial.get(metric))  # a speed column, by _BY_NAME
        vals = [float(stored)] if stored is not None else []
    else:
        raise KeyError(f"unknown speed metric {metric!r}; known: {', '.join(_BY_NAME)}")
    med = statistics.median(vals) if vals else None
    return med if med is not None and med > 0 else None


def _usable(trial: TrialRecord) -> bool:
    return not trial.get("errors")


@dataclass(frozen=True)
class Cell:
    """The trials of one build × setting × workload cell × concurrency level, in trial order."""

    used: list[TrialRecord]
    excluded: int

    def samples(self, metric: str) -> tuple[list[float], list[int]]:
        pairs = [(v, t["trial"]) for t in self.used if (v := trial_value(t, metric)) is not None]
        return [v for v, _ in pairs], [n for _, n in pairs]

    @property
    def foreign_load(self) -> float | None:
        """Median CPU cores other processes used during these trials (None where not recorded)."""
        vals = [float(x) for t in self.used if (x := t.get("foreign_load")) is not None]
        return round(statistics.median(vals), 2) if vals else None


Key = tuple[str, str, int, int, int]  # build, setting, prompt tokens, output tokens, concurrency


def cells(data: RunData) -> dict[Key, Cell]:
    groups: dict[Key, list[TrialRecord]] = {}
    for t in data.trials:
        p, o = data.cell(t)
        groups.setdefault((t["build"], t["setting"], p, o, int(t["concurrency"])), []).append(t)
    out = {}
    for key, ts in groups.items():
        ts = sorted(ts, key=lambda t: t["trial"])
        used = [t for t in ts if _usable(t)]
        out[key] = Cell(used, len(ts) - len(used))
    return out


# ---- study order and threshold ----------------------------------------------------------------------------------

def _ordered(preferred: Iterable[str], seen: Iterable[str]) -> list[str]:
    """`preferred` entries that were seen, in that order, then the rest of `seen` in order of appearance."""
    seen_list = list(dict.fromkeys(seen))
    pref = [p for p in preferred if p in seen_list]
    return pref + [s for s in seen_list if s not in pref]


def _order(data: RunData) -> tuple[list[str], list[str]]:
    builds = _ordered(study_builds(data), (t["build"] for t in data.trials))
    settings = _ordered(study_settings(data), (t["setting"] for t in data.trials))
    return builds, settings


def threshold_of(data: RunData) -> float:
    """The study's `[workload] threshold`, else 2%."""
    v = data.threshold
    return DEFAULT_THRESHOLD if v is None else v


# ---- comparisons ------------------------------------------------------------------------------------------------

def _r(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)


def comparisons(data: RunData, threshold: float | None = None, *, seed: int = 0,
                n_resamples: int = 10_000) -> list[dict]:
    """For every setting, workload cell and concurrency level, each build against the setting's baseline (the
    study's first build that has usable trials there), metric by metric. The public JSON contract: `metric,
    baseline, candidate, concurrency, prompt_tokens, output_tokens, ratio, ci_low, ci_high, verdict` are always
    present; `verdict` is "not comparable" (with `reason`) when the two sides ran under unlike conditions."""
    t = threshold_of(data) if threshold is None else threshold
    memo = data.extra.setdefault("_comparisons", {})
    key = (t, seed, n_resamples)
    if key not in memo:
        memo[key] = _comparisons(data, t, seed, n_resamples)
    return [dict(r) for r in memo[key]]


def _comparisons(data: RunData, t: float, seed: int, n_resamples: int) -> list[dict]:
    by_key = cells(data)
    builds, settings = _order(data)
    out: list[dict] = []
    for setting in settings:
        base = next((b for b in builds if any(k[0] == b and k[1] == setting and c.used for k, c in by_key.items())),
                    None)
        if base is None:
            continue
        here = sorted({(k[2], k[3], k[4]) for k in by_key if k[1] == setting})
        for prompt, output, level in here:
            bcell = by_key.get((base, setting, prompt, output, level))
            if bcell is None:
                continue
            for cand in builds:
                ccell = by_key.get((cand, setting, prompt, output, level))
                if cand == base or ccell is None:
                    continue
                for m in METRICS:
                    row = _compare(m, base, cand, setting, (prompt, output), level, bcell, ccell, t, seed,
                                   n_resamples)
                    if row is not None:
                        out.append(row)
    return out


def comparable(base_load: float | None, cand_load: float | None) -> str | None:
    """Why two sides are not comparable (their foreign CPU load differs beyond FOREIGN_LOAD_GAP), or None."""
    if base_load is None or cand_load is None or abs(base_load - cand_load) <= FOREIGN_LOAD_GAP:
        return None
    return (f"other processes used {base_load:.2f} vs {cand_load:.2f} CPU cores (median) while the two sides ran, "
            f"more than {FOREIGN_LOAD_GAP} apart")


def _compare(m: Metric, base: str, cand: str, setting: str, cell: tuple[int, int], level: int, bcell: Cell,
             ccell: Cell, threshold: float, seed: int, n_resamples: int) -> dict | None:
    bx, bn = bcell.samples(m.name)
    cx, cn = ccell.samples(m.name)
    if not bx or not cx:
        return None
    r = stats.ratio(bx, cx, seed=seed, n_resamples=n_resamples)
    why = comparable(bcell.foreign_load, ccell.foreign_load)
    return {
        "metric": m.name,
        "baseline": base,
        "candidate": cand,
        "setting": setting,
        "prompt_tokens": cell[0],
        "output_tokens": cell[1],
        "concurrency": level,
        "ratio": _r(r.ratio, 4),
        "ci_low": _r(r.ci_low, 4),
        "ci_high": _r(r.ci_high, 4),
        "confidence": r.confidence,
        "verdict": NOT_COMPARABLE if why else stats.verdict(r, threshold, m.higher_is_better),
        "reason": why,
        "threshold": threshold,
        "higher_is_better": m.higher_is_better,
        "n_baseline": r.n_baseline,
        "n_candidate": r.n_candidate,
        "baseline_median": _r(statistics.median(bx), 3),
        "candidate_median": _r(statistics.median(cx), 3),
        "baseline_foreign_load": bcell.foreign_load,
        "candidate_foreign_load": ccell.foreign_load,
        "baseline_outlier_trials": [bn[i] for i in stats.outliers(bx)],
        "candidate_outlier_trials": [cn[i] for i in stats.outliers(cx)],
        "baseline_excluded": bcell.excluded,
        "candidate_excluded": ccell.excluded,
    }


def where(level: int, prompt: int | None = None) -> str:
    """"single stream" / "at 4 parallel requests", with ", 2,048-token prompts" when a prompt length is given."""
    s = "single stream" if level == 1 else f"at {level} parallel requests"
    return s + (f", {prompt:,}-token prompts" if prompt is not None else "")


def _where(label: str, level: int, prompt: int | None = None) -> str:
    w = where(level, prompt)
    return f"in {label}, {w}" if level == 1 else f"in {label} {w}"


def sentence(c: dict, with_cell: bool = False) -> str:
    """One comparison as a line: "kv-f16-f16: copies1 vs copies4 in aggregate output t/s at 4 parallel requests:
    1.19× [1.15, 1.23] — faster" (with the prompt length where the run measured several)."""
    r = stats.Ratio(c["ratio"], c["ci_low"], c["ci_high"], c["n_baseline"], c["n_candidate"])
    label = _BY_NAME[c["metric"]].label if c["metric"] in _BY_NAME else c["metric"]
    head = stats.sentence(c["candidate"], c["baseline"], r,
                          _where(label, c["concurrency"], c.get("prompt_tokens") if with_cell else None))
    tail = c["verdict"] + (f" ({c['reason']})" if c.get("reason") else "")
    return f"{c['setting']}: {head} — {tail}"


def sentences(data: RunData, threshold: float | None = None, metrics: Sequence[str] | None = None) -> list[str]:
    """The verdict lines for the terminal and Markdown, in study order; `metrics` picks a subset by name."""
    grid = len(data.cells) > 1
    return [sentence(c, grid) for c in comparisons(data, threshold) if metrics is None or c["metric"] in metrics]


# ---- throughput table -------------------------------------------------------------------------------------------

def throughput_table(data: RunData) -> list[dict]:
    """Per build × setting × workload cell × concurrency level, in study order: median aggregate output t/s with
    min–max and n (trials), median aggregate prompt t/s, median single-request generation and prompt t/s, and
    per-request TTFT / ITL p50 and p90 (ms) pooled over the level's requests."""
    by_key = cells(data)
    builds, settings = _order(data)
    out = []
    for b in builds:
        for s in settings:
            for key in sorted(k for k in by_key if k[0] == b and k[1] == s):
                cell = by_key[key]
                agg, _ = cell.samples("aggregate_output_tps")
                agg_in, _ = cell.samples("aggregate_input_tps")
                gen, _ = cell.samples("output_tps")
                pp, _ = cell.samples("input_tps")
                ttft = stats.percentiles([v for t in cell.used for v in _ttfts_ms(t)], (50, 90))
                itl = stats.percentiles([v for t in cell.used for v in _itls_ms(t)], (50, 90))
                out.append({
                    "build": b, "setting": s, "prompt_tokens": key[2], "output_tokens": key[3],
                    "concurrency": key[4], "n": len(agg), "excluded": cell.excluded,
                    "aggregate_output_tps": _r(statistics.median(agg), 2) if agg else None,
                    "aggregate_output_tps_min": _r(min(agg), 2) if agg else None,
                    "aggregate_output_tps_max": _r(max(agg), 2) if agg else None,
                    "aggregate_input_tps": _r(statistics.median(agg_in), 2) if agg_in else None,
                    "output_tps": _r(statistics.median(gen), 2) if gen else None,
                    "input_tps": _r(statistics.median(pp), 2) if pp else None,
                    "ttft_ms_p50": _r(ttft["p50"], 2), "ttft_ms_p90": _r(ttft["p90"], 2),
                    "itl_ms_p50": _r(itl["p50"], 3), "itl_ms_p90": _r(itl["p90"], 3),
                    "foreign_load": cell.foreign_load,
                })
    return out
