"""What the speed numbers say: per-level throughput, and each build against the study's first build with a ratio,
its bootstrap interval and a verdict. Pure: takes a stored RunData, returns rows, dicts and sentences.

The unit of a sample is the trial: requests inside one trial share the server at the same moment and are not
independent, so latencies are reduced to one median per trial before two builds are compared. A trial in which any
request failed is left out of both the comparisons and the table, and counted (`*_excluded`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .. import stats
from .data import RunData
from .verdict import study_builds, study_settings

DEFAULT_THRESHOLD = 0.02


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    higher_is_better: bool
    single_stream_only: bool


METRICS: tuple[Metric, ...] = (
    Metric("output_tps", "generation t/s", True, True),
    Metric("input_tps", "prompt t/s", True, True),
    Metric("aggregate_output_tps", "aggregate output t/s", True, False),
    Metric("ttft_ms", "median time to first token", False, False),
    Metric("itl_ms", "median inter-token latency", False, False),
)
_BY_NAME = {m.name: m for m in METRICS}


# ---- per-trial values -------------------------------------------------------------------------------------------

def _ok_requests(trial: dict) -> list[dict]:
    return [r for r in trial.get("requests") or [] if not r.get("error")]


def _ttfts_ms(trial: dict) -> list[float]:
    return [r["ttft_s"] * 1000.0 for r in _ok_requests(trial) if r.get("ttft_s") is not None]


def _itls_ms(trial: dict) -> list[float]:
    return [float(g) for r in _ok_requests(trial) for g in r.get("itl_ms") or ()]


def trial_value(trial: dict, metric: str) -> float | None:
    """One trial's sample of `metric`: the stored figure for throughputs, the median over its requests (ms) for
    TTFT and over all its inter-token gaps for ITL. None when the trial has no such figure, or it is not positive
    (a ratio needs a positive baseline)."""
    if metric == "ttft_ms":
        vals = _ttfts_ms(trial)
    elif metric == "itl_ms":
        vals = _itls_ms(trial)
    elif metric in _BY_NAME:
        v = trial.get(metric)
        vals = [float(v)] if v is not None else []
    else:
        raise KeyError(f"unknown speed metric {metric!r}; known: {', '.join(_BY_NAME)}")
    med = statistics.median(vals) if vals else None
    return med if med is not None and med > 0 else None


def _usable(trial: dict) -> bool:
    return not trial.get("errors")


@dataclass(frozen=True)
class _Cell:
    """The trials of one build × setting × concurrency level, in trial order."""

    used: list[dict]
    excluded: int

    def samples(self, metric: str) -> tuple[list[float], list[int]]:
        pairs = [(v, t["trial"]) for t in self.used if (v := trial_value(t, metric)) is not None]
        return [v for v, _ in pairs], [n for _, n in pairs]


def _cells(data: RunData) -> dict[tuple[str, str, int], _Cell]:
    groups: dict[tuple[str, str, int], list[dict]] = {}
    for t in data.trials:
        groups.setdefault((t["build"], t["setting"], int(t["concurrency"])), []).append(t)
    out = {}
    for key, ts in groups.items():
        ts = sorted(ts, key=lambda t: t["trial"])
        used = [t for t in ts if _usable(t)]
        out[key] = _Cell(used, len(ts) - len(used))
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
    v = (data.study.get("workload") or {}).get("threshold")
    return float(v) if isinstance(v, (int, float)) and v >= 0 else DEFAULT_THRESHOLD


# ---- comparisons ------------------------------------------------------------------------------------------------

def _r(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)


def comparisons(data: RunData, threshold: float | None = None, *, seed: int = 0,
                n_resamples: int = 10_000) -> list[dict]:
    """For every setting and concurrency level, each build against the setting's baseline (the study's first build
    that has usable trials there), metric by metric. The public JSON contract: `metric, baseline, candidate,
    concurrency, ratio, ci_low, ci_high, verdict` are always present."""
    t = threshold_of(data) if threshold is None else threshold
    cells = _cells(data)
    builds, settings = _order(data)
    out: list[dict] = []
    for setting in settings:
        base = next((b for b in builds if any(k[0] == b and k[1] == setting and c.used for k, c in cells.items())),
                    None)
        if base is None:
            continue
        levels = sorted({k[2] for k in cells if k[1] == setting})
        for level in levels:
            bcell = cells.get((base, setting, level))
            if bcell is None:
                continue
            for cand in builds:
                ccell = cells.get((cand, setting, level))
                if cand == base or ccell is None:
                    continue
                for m in METRICS:
                    if m.single_stream_only and level != 1:
                        continue
                    row = _compare(m, base, cand, setting, level, bcell, ccell, t, seed, n_resamples)
                    if row is not None:
                        out.append(row)
    return out


def _compare(m: Metric, base: str, cand: str, setting: str, level: int, bcell: _Cell, ccell: _Cell,
             threshold: float, seed: int, n_resamples: int) -> dict | None:
    bx, bn = bcell.samples(m.name)
    cx, cn = ccell.samples(m.name)
    if not bx or not cx:
        return None
    r = stats.ratio(bx, cx, seed=seed, n_resamples=n_resamples)
    return {
        "metric": m.name,
        "baseline": base,
        "candidate": cand,
        "setting": setting,
        "concurrency": level,
        "ratio": _r(r.ratio, 4),
        "ci_low": _r(r.ci_low, 4),
        "ci_high": _r(r.ci_high, 4),
        "confidence": r.confidence,
        "verdict": stats.verdict(r, threshold, m.higher_is_better),
        "threshold": threshold,
        "higher_is_better": m.higher_is_better,
        "n_baseline": r.n_baseline,
        "n_candidate": r.n_candidate,
        "baseline_median": _r(statistics.median(bx), 3),
        "candidate_median": _r(statistics.median(cx), 3),
        "baseline_outlier_trials": [bn[i] for i in stats.outliers(bx)],
        "candidate_outlier_trials": [cn[i] for i in stats.outliers(cx)],
        "baseline_excluded": bcell.excluded,
        "candidate_excluded": ccell.excluded,
    }


def _where(label: str, level: int) -> str:
    return f"in {label}, single stream" if level == 1 else f"in {label} at {level} parallel requests"


def sentence(c: dict) -> str:
    """One comparison as a line: "kv-f16-f16: copies1 vs copies4 in aggregate output t/s at 4 parallel requests:
    1.19× [1.15, 1.23] — faster"."""
    r = stats.Ratio(c["ratio"], c["ci_low"], c["ci_high"], c["n_baseline"], c["n_candidate"])
    label = _BY_NAME[c["metric"]].label if c["metric"] in _BY_NAME else c["metric"]
    head = stats.sentence(c["candidate"], c["baseline"], r, _where(label, c["concurrency"]))
    return f"{c['setting']}: {head} — {c['verdict']}"


def sentences(data: RunData, threshold: float | None = None, metrics: Sequence[str] | None = None) -> list[str]:
    """The verdict lines for the terminal and Markdown, in study order; `metrics` picks a subset by name."""
    return [sentence(c) for c in comparisons(data, threshold) if metrics is None or c["metric"] in metrics]


# ---- throughput table -------------------------------------------------------------------------------------------

def throughput_table(data: RunData) -> list[dict]:
    """Per build × setting × concurrency level, in study order: median aggregate output t/s with min–max and n
    (trials), median single-request generation and prompt t/s, and per-request TTFT / ITL p50 and p90 (ms) pooled
    over the level's requests."""
    cells = _cells(data)
    builds, settings = _order(data)
    out = []
    for b in builds:
        for s in settings:
            for level in sorted(k[2] for k in cells if k[0] == b and k[1] == s):
                cell = cells[(b, s, level)]
                agg, _ = cell.samples("aggregate_output_tps")
                gen, _ = cell.samples("output_tps")
                pp, _ = cell.samples("input_tps")
                ttft = stats.percentiles([v for t in cell.used for v in _ttfts_ms(t)], (50, 90))
                itl = stats.percentiles([v for t in cell.used for v in _itls_ms(t)], (50, 90))
                out.append({
                    "build": b, "setting": s, "concurrency": level,
                    "n": len(agg), "excluded": cell.excluded,
                    "aggregate_output_tps": _r(statistics.median(agg), 2) if agg else None,
                    "aggregate_output_tps_min": _r(min(agg), 2) if agg else None,
                    "aggregate_output_tps_max": _r(max(agg), 2) if agg else None,
                    "output_tps": _r(statistics.median(gen), 2) if gen else None,
                    "input_tps": _r(statistics.median(pp), 2) if pp else None,
                    "ttft_ms_p50": _r(ttft["p50"], 2), "ttft_ms_p90": _r(ttft["p90"], 2),
                    "itl_ms_p50": _r(itl["p50"], 3), "itl_ms_p90": _r(itl["p90"], 3),
                })
    return out
