"""Statistics over lists of floats: summaries, percentiles, ratios with bootstrap intervals, and verdicts.

Pure functions, no I/O. Everything a comparison says comes from here — the reports' and tune's race alike — so
every edge is spelled out: one sample has no standard deviation, no interval and no verdict ("untested"); a MAD of
zero does not flag every other value as an outlier; a verdict of "faster" or "slower" needs the point estimate
beyond the threshold *and* an interval that excludes 1.
"""

from __future__ import annotations

import functools
import inspect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

Verdict = Literal["faster", "slower", "no measurable difference", "untested (one trial)"]
NO_DIFFERENCE: Verdict = "no measurable difference"
# fewer trials than an interval needs (one on either side): the ratio is shown, but it is no verdict either way
UNTESTED: Verdict = "untested (one trial)"
DECIDED = ("faster", "slower")  # the verdicts that claim a difference

# Iglewicz & Hoaglin: a modified z-score above 3.5 marks an outlier. 1.4826·MAD estimates σ for normal data;
# 1.2533·mean absolute deviation does the same when the MAD is zero (more than half the values are equal).
OUTLIER_Z = 3.5
MAD_TO_SIGMA = 1.4826
MEANAD_TO_SIGMA = 1.253314


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    min: float
    max: float
    mean: float
    stddev: float | None  # sample standard deviation (n − 1); None for one sample
    mad: float  # median absolute deviation from the median, unscaled
    outliers: tuple[int, ...]  # indexes into the input whose modified z-score exceeds OUTLIER_Z


@dataclass(frozen=True)
class Ratio:
    """median(candidate) / median(baseline), with a bootstrap interval when both sides have ≥ 2 samples."""

    ratio: float
    ci_low: float | None
    ci_high: float | None
    n_baseline: int
    n_candidate: int
    confidence: float = 0.95

    @property
    def has_interval(self) -> bool:
        return self.ci_low is not None and self.ci_high is not None


def _values(xs: Sequence[float], what: str = "samples") -> list[float]:
    vals = [float(x) for x in xs]
    if not vals:
        raise ValueError(f"no {what}: a summary needs at least one value")
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"{what} contain a NaN or an infinity: {vals}")
    return vals


def mad(xs: Sequence[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    vals = _values(xs)
    med = statistics.median(vals)
    return statistics.median(abs(v - med) for v in vals)


def outliers(xs: Sequence[float]) -> tuple[int, ...]:
    """Indexes of values whose modified z-score |x − median| / σ̂ exceeds 3.5, where σ̂ = 1.4826·MAD; when the MAD
    is zero, σ̂ = 1.2533·(mean absolute deviation from the median); when that is zero too, all values are equal and
    none is an outlier. Fewer than three values never have outliers."""
    vals = _values(xs)
    if len(vals) < 3:
        return ()
    med = statistics.median(vals)
    dev = [abs(v - med) for v in vals]
    scale = MAD_TO_SIGMA * statistics.median(dev)
    if scale == 0:
        scale = MEANAD_TO_SIGMA * statistics.fmean(dev)
    if scale == 0:
        return ()
    return tuple(i for i, d in enumerate(dev) if d / scale > OUTLIER_Z)


def summarize(xs: Sequence[float]) -> Summary:
    """n, median, min, max, mean, sample stddev (None for one sample), MAD and MAD-based outlier indexes."""
    vals = _values(xs)
    return Summary(
        n=len(vals),
        median=statistics.median(vals),
        min=min(vals),
        max=max(vals),
        mean=statistics.fmean(vals),
        stddev=statistics.stdev(vals) if len(vals) > 1 else None,
        mad=mad(vals),
        outliers=outliers(vals),
    )


def percentiles(xs: Sequence[float], qs: Sequence[float] = (50, 90, 99)) -> dict[str, float | None]:
    """{"p50": …, "p90": …, "p99": …} by linear interpolation between closest ranks (numpy's default);
    every value None when there are no samples."""
    keys = [f"p{q:g}" for q in qs]
    if not xs:
        return dict.fromkeys(keys)
    vals = np.asarray(_values(xs), dtype=float)
    return {k: float(np.percentile(vals, q)) for k, q in zip(keys, qs)}


def _median_ratio(baseline: np.ndarray, candidate: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(candidate, axis=axis) / np.median(baseline, axis=axis)


@functools.cache
def _scipy_stats() -> Any:
    """scipy.stats, imported on the first interval asked for: its import (1.5 s on two cores) is most of the start
    of a `llamalab` command that computes none (an error, a plan, a listing)."""
    from scipy import stats

    return stats


def _rng_kwargs(seed: int) -> dict:
    # scipy ≥ 1.15 takes `rng`; older releases take `random_state`. Both give the same seeded Generator.
    gen = np.random.default_rng(seed)
    params = inspect.signature(_scipy_stats().bootstrap).parameters
    return {"rng": gen} if "rng" in params else {"random_state": gen}


# Beyond this many samples a side, the percentile bootstrap draws each resample's median from its exact distribution
# instead of resampling: 10,000 resamples of n values cost 10,000·n draws and partitions (seconds per comparison at
# n = 8,000, minutes for a report of 128,000 trials), the exact draw 10,000 Beta variates and a sort.
EXACT_FROM = 256


def bootstrap_medians(xs: np.ndarray, b: int, gen: np.random.Generator) -> np.ndarray:
    """`b` medians of bootstrap resamples (n values drawn with replacement) of the sorted sample `xs`, drawn from
    their exact distribution: a resample is F⁻¹(U₁…Uₙ) for uniforms U and the sample's quantile function F⁻¹
    (x₍⌈n·u⌉₎), and order statistics pass through that monotone map. The k-th of n uniforms is Beta(k, n+1−k); the
    (k+1)-th, given the k-th u, is u + (1−u)·Beta(1, n−k). Odd n: the median is the ((n+1)/2)-th value; even n: the
    mean of the (n/2)-th and (n/2+1)-th, as numpy's median takes it. The same distribution scipy's resampling
    estimates, in O(b) draws."""
    n = len(xs)

    def at(u: np.ndarray) -> np.ndarray:
        return xs[np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)]

    if n % 2:
        k = (n + 1) // 2
        return at(gen.beta(k, n + 1 - k, size=b))
    k = n // 2
    u1 = gen.beta(k, n + 1 - k, size=b)
    u2 = u1 + (1 - u1) * gen.beta(1, n - k, size=b)
    return (at(u1) + at(u2)) / 2


def ratio(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> Ratio:
    """median(candidate) / median(baseline) with a percentile bootstrap interval (scipy.stats.bootstrap, the two
    samples resampled independently, remembered by `_resampled`; beyond EXACT_FROM samples a side,
    `bootstrap_medians`). Deterministic for a given seed. With one sample on either side there is nothing to resample
    and the interval is None. Every baseline value must be positive (speeds, latencies)."""
    base = _values(baseline, "baseline samples")
    cand = _values(candidate, "candidate samples")
    if min(base) <= 0:
        raise ValueError(f"baseline samples must be positive for a ratio: {base}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie between 0 and 1, not {confidence}")
    point = statistics.median(cand) / statistics.median(base)
    if len(base) < 2 or len(cand) < 2:
        return Ratio(point, None, None, len(base), len(cand), confidence)
    if max(len(base), len(cand)) <= EXACT_FROM:
        lo, hi = _resampled(tuple(base), tuple(cand), confidence, n_resamples, seed)
        return Ratio(point, lo, hi, len(base), len(cand), confidence)
    gen = np.random.default_rng(seed)
    b_med = bootstrap_medians(np.sort(base), n_resamples, gen)
    c_med = bootstrap_medians(np.sort(cand), n_resamples, gen)
    alpha = (1 - confidence) / 2
    lo, hi = np.percentile(c_med / b_med, [100 * alpha, 100 * (1 - alpha)])
    return Ratio(point, float(lo), float(hi), len(base), len(cand), confidence)


@functools.lru_cache(maxsize=4096)
def _resampled(base: tuple[float, ...], cand: tuple[float, ...], confidence: float, n_resamples: int,
               seed: int) -> tuple[float, float]:
    """scipy's percentile interval of a small comparison, remembered: it is a pure function of its samples and the
    seed, and a report asks for the same comparison more than once (the speed table and the tune's pick), as do
    report, compare and export of one run in one process. Samples beyond EXACT_FROM take the exact draw instead
    and are not kept."""
    res = _scipy_stats().bootstrap(
        (np.asarray(base), np.asarray(cand)), _median_ratio, paired=False, vectorized=True,
        n_resamples=n_resamples, confidence_level=confidence, method="percentile", **_rng_kwargs(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def verdict(r: Ratio, threshold: float = 0.02, higher_is_better: bool = True) -> Verdict:
    """"faster" or "slower" only when the ratio lies outside [1 − threshold, 1 + threshold] *and* the interval
    excludes 1; "untested (one trial)" when there is no interval (one trial on either side: a ratio measured once
    says neither "faster" nor "no difference"); otherwise "no measurable difference". For a metric where lower is
    better (latency), a ratio above 1 is "slower"."""
    if threshold < 0:
        raise ValueError(f"threshold must not be negative: {threshold}")
    if not r.has_interval:
        return UNTESTED
    assert r.ci_low is not None and r.ci_high is not None
    if r.ratio > 1 + threshold and r.ci_low > 1:
        up = True
    elif r.ratio < 1 - threshold and r.ci_high < 1:
        up = False
    else:
        return NO_DIFFERENCE
    return "faster" if up == higher_is_better else "slower"


def format_ratio(r: Ratio, digits: int = 2) -> str:
    """"1.19× [1.15, 1.23]", or "1.19× (no interval: n=1)" when there is none."""
    s = f"{r.ratio:.{digits}f}×"
    if r.has_interval:
        return f"{s} [{r.ci_low:.{digits}f}, {r.ci_high:.{digits}f}]"
    return f"{s} (no interval: n={min(r.n_baseline, r.n_candidate)})"


def sentence(candidate: str, baseline: str, r: Ratio, context: str = "", digits: int = 2) -> str:
    """Hyperfine-style: "copies4 vs copies1 at 4 parallel requests: 1.19× [1.15, 1.23]"."""
    where = f" {context}" if context else ""
    return f"{candidate} vs {baseline}{where}: {format_ratio(r, digits)}"
