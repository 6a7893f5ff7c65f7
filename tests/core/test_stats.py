"""Statistics on known inputs, with the answers worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llamalab.core import stats
from llamalab.core.stats import Ratio

# ---- summarize ---------------------------------------------------------------------------------------------------

SUMMARIES = [
    # xs, n, median, min, max, mean, stddev, mad, outliers
    pytest.param([3.0], 1, 3.0, 3.0, 3.0, 3.0, None, 0.0, (), id="one-sample-has-no-stddev"),
    pytest.param([1.0, 3.0], 2, 2.0, 1.0, 3.0, 2.0, math.sqrt(2), 1.0, (), id="two-samples"),
    pytest.param([5.0, 5.0, 5.0, 5.0], 4, 5.0, 5.0, 5.0, 5.0, 0.0, 0.0, (), id="all-equal-no-outliers"),
    # median 4.5; deviations .5×5, 2.5×2, 4.5 → MAD .5, σ̂ = .7413; 4.5/.7413 = 6.07 > 3.5, 2.5/.7413 = 3.37 < 3.5
    pytest.param([2, 4, 4, 4, 5, 5, 7, 9], 8, 4.5, 2.0, 9.0, 5.0, math.sqrt(32 / 7), 0.5, (7,),
                 id="textbook-set-flags-only-9"),
    # median 3; deviations 2,1,0,1,97 → MAD 1; 97/1.4826 = 65 → index 4; stddev² = (441+400+361+324+6084)/4
    pytest.param([1, 2, 3, 4, 100], 5, 3.0, 1.0, 100.0, 22.0, math.sqrt(7610 / 4), 1.0, (4,), id="one-far-outlier"),
    # MAD 0 → σ̂ = 1.2533 · mean|x − median| = 1.2533 · 8 = 10.03; 40/10.03 = 3.99 > 3.5
    pytest.param([10, 10, 10, 10, 50], 5, 10.0, 10.0, 50.0, 18.0, math.sqrt(1280 / 4), 0.0, (4,),
                 id="zero-mad-falls-back-to-mean-deviation"),
    # MAD 0, four values: mean|dev| = .25 → σ̂ = .3133; 1/.3133 = 3.19 < 3.5
    pytest.param([10, 10, 10, 11], 4, 10.0, 10.0, 11.0, 10.25, 0.5, 0.0, (), id="zero-mad-small-deviation-kept"),
    pytest.param([7, 7], 2, 7.0, 7.0, 7.0, 7.0, 0.0, 0.0, (), id="two-equal"),
]


@pytest.mark.parametrize("xs, n, median, lo, hi, mean, stddev, mad, outliers", SUMMARIES)
def test_summarize(xs, n, median, lo, hi, mean, stddev, mad, outliers):
    s = stats.summarize(xs)
    assert (s.n, s.median, s.min, s.max) == (n, median, lo, hi)
    assert s.mean == pytest.approx(mean)
    assert s.stddev == (None if stddev is None else pytest.approx(stddev))
    assert s.mad == pytest.approx(mad)
    assert s.outliers == outliers


def test_zero_mad_rule_is_scale_free():
    """With the MAD at zero, one differing value among n is z = n / 1.2533, whatever its size: flagged from n = 5.
    This is the rule's documented behaviour, pinned here so a change to it is deliberate."""
    assert stats.outliers([10, 10, 10, 10, 10.001]) == (4,)
    assert stats.outliers([10, 10, 10, 10.001]) == ()


@pytest.mark.parametrize("xs", [
    pytest.param([], id="empty"),
    pytest.param([1.0, float("nan")], id="nan"),
    pytest.param([float("inf")], id="inf"),
])
def test_summarize_rejects(xs):
    with pytest.raises(ValueError):
        stats.summarize(xs)


@pytest.mark.parametrize("xs, expected", [
    pytest.param(list(range(1, 11)), {"p50": 5.5, "p90": 9.1, "p99": 9.91}, id="one-to-ten"),
    pytest.param([7.0], {"p50": 7.0, "p90": 7.0, "p99": 7.0}, id="one-sample"),
    pytest.param([], {"p50": None, "p90": None, "p99": None}, id="empty-gives-none"),
    pytest.param([10, 20], {"p50": 15.0, "p90": 19.0, "p99": 19.9}, id="two-samples-interpolate"),
])
def test_percentiles(xs, expected):
    got = stats.percentiles(xs)
    assert got.keys() == expected.keys()
    for k, v in expected.items():
        assert got[k] == (None if v is None else pytest.approx(v))


def test_percentiles_custom_levels():
    assert stats.percentiles([1, 2, 3, 4, 5], (50, 90)) == {"p50": 3.0, "p90": pytest.approx(4.6)}


# ---- ratio -------------------------------------------------------------------------------------------------------

BASE = [100.0, 101.0, 99.0, 100.5, 99.5]


def test_ratio_of_identical_samples_is_one_and_no_difference():
    r = stats.ratio(BASE, list(BASE))
    assert r.ratio == 1.0
    assert r.ci_low <= 1.0 <= r.ci_high
    assert (r.n_baseline, r.n_candidate) == (5, 5)
    assert stats.verdict(r) == "no measurable difference"


def test_clear_twenty_percent_shift_is_faster_with_interval_excluding_one():
    r = stats.ratio(BASE, [x * 1.2 for x in BASE])
    assert r.ratio == pytest.approx(1.2)
    assert 1.0 < r.ci_low <= r.ratio <= r.ci_high
    assert stats.verdict(r) == "faster"
    assert stats.verdict(r, higher_is_better=False) == "slower"


def test_constant_samples_give_a_point_interval():
    # every resample of [1, 1] and [2, 2] has medians 1 and 2
    r = stats.ratio([1.0, 1.0], [2.0, 2.0])
    assert (r.ratio, r.ci_low, r.ci_high) == (2.0, 2.0, 2.0)


@pytest.mark.parametrize("base, cand, expected", [
    pytest.param([100.0], BASE, 1.0, id="one-baseline-sample"),  # median(BASE) = 100
    pytest.param(BASE, [120.0], 1.2, id="one-candidate-sample"),
    pytest.param([100.0], [120.0], 1.2, id="one-each"),
])
def test_ratio_with_one_sample_has_no_interval(base, cand, expected):
    r = stats.ratio(base, cand)
    assert r.ci_low is None and r.ci_high is None and not r.has_interval
    assert r.ratio == pytest.approx(expected)
    assert stats.verdict(r) == "untested (one trial)"  # a ratio measured once is no verdict, either way


def test_three_samples_each_give_the_range_ratio_as_interval():
    """The first demo run's single-stream generation t/s (copies4 vs copies1, kv-f16-q8_0). A resampled median of
    three takes the smallest value with probability 7/27, so both 2.5% tails sit on the extreme pairs: the interval
    is [min(c) / max(b), max(c) / min(b)]."""
    base = [203.75, 203.45, 200.78]
    cand = [201.39, 197.12, 194.02]
    r = stats.ratio(base, cand)
    assert r.ratio == pytest.approx(197.12 / 203.45)
    assert (r.ci_low, r.ci_high) == (pytest.approx(194.02 / 203.75), pytest.approx(201.39 / 200.78))
    assert stats.verdict(r) == "no measurable difference"


def test_outlier_rule_is_eager_with_three_samples():
    """Pinned: with n = 3 the MAD is the smaller gap to the middle value, so a trial 1.3% off the others is flagged
    (deviations 0.30 and 2.67: 2.67 / (1.4826 · 0.30) = 6.0)."""
    assert stats.outliers([203.75, 203.45, 200.78]) == (2,)


def test_ratio_is_deterministic_for_a_seed():
    noisy_b = [97.0, 103.0, 99.0, 101.5, 95.0, 104.0]
    noisy_c = [101.0, 99.0, 108.0, 96.0, 105.0, 102.0]
    a = stats.ratio(noisy_b, noisy_c, seed=7, n_resamples=2000)
    b = stats.ratio(noisy_b, noisy_c, seed=7, n_resamples=2000)
    assert a == b


def test_wider_confidence_gives_a_wider_interval():
    noisy_b = [97.0, 103.0, 99.0, 101.5, 95.0, 104.0]
    noisy_c = [101.0, 99.0, 108.0, 96.0, 105.0, 102.0]
    narrow = stats.ratio(noisy_b, noisy_c, confidence=0.5)
    wide = stats.ratio(noisy_b, noisy_c, confidence=0.99)
    assert wide.ci_low <= narrow.ci_low and narrow.ci_high <= wide.ci_high


@pytest.mark.parametrize("base, cand, kw", [
    pytest.param([0.0, 1.0], [1.0, 1.0], {}, id="non-positive-baseline"),
    pytest.param([], [1.0], {}, id="empty-baseline"),
    pytest.param([1.0], [], {}, id="empty-candidate"),
    pytest.param([1.0, 2.0], [1.0, 2.0], {"confidence": 1.0}, id="confidence-one"),
])
def test_ratio_rejects(base, cand, kw):
    with pytest.raises(ValueError):
        stats.ratio(base, cand, **kw)


# ---- verdict -----------------------------------------------------------------------------------------------------

VERDICTS = [
    # ratio, ci_low, ci_high, threshold, higher_is_better, expected
    pytest.param(1.10, 1.05, 1.15, 0.02, True, "faster", id="throughput-up"),
    pytest.param(0.90, 0.85, 0.95, 0.02, True, "slower", id="throughput-down"),
    pytest.param(0.90, 0.85, 0.95, 0.02, False, "faster", id="latency-down-is-faster"),
    pytest.param(1.10, 1.05, 1.15, 0.02, False, "slower", id="latency-up-is-slower"),
    pytest.param(1.10, 0.98, 1.20, 0.02, True, "no measurable difference", id="interval-includes-one"),
    pytest.param(1.01, 1.005, 1.015, 0.02, True, "no measurable difference", id="within-threshold"),
    pytest.param(1.01, 1.005, 1.015, 0.0, True, "faster", id="zero-threshold"),
    pytest.param(0.97, 0.95, 0.99, 0.05, True, "no measurable difference", id="below-wide-threshold"),
    pytest.param(1.02, 1.01, 1.03, 0.02, True, "no measurable difference", id="exactly-at-threshold"),
    pytest.param(1.50, None, None, 0.02, True, "untested (one trial)", id="no-interval"),
    pytest.param(0.85, None, None, 0.02, True, "untested (one trial)", id="a-15-percent-drop-once-is-untested"),
]


@pytest.mark.parametrize("ratio, lo, hi, threshold, higher, expected", VERDICTS)
def test_verdict(ratio, lo, hi, threshold, higher, expected):
    assert stats.verdict(Ratio(ratio, lo, hi, 5, 5), threshold, higher) == expected


def test_verdict_rejects_negative_threshold():
    with pytest.raises(ValueError):
        stats.verdict(Ratio(1.0, 0.9, 1.1, 5, 5), -0.01)


# ---- sentences ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("r, context, expected", [
    pytest.param(Ratio(1.19, 1.15, 1.23, 5, 5), "at 4 parallel requests",
                 "copies4 vs copies1 at 4 parallel requests: 1.19× [1.15, 1.23]", id="with-interval"),
    pytest.param(Ratio(0.9871, 0.9712, 1.0049, 5, 5), "",
                 "copies4 vs copies1: 0.99× [0.97, 1.00]", id="no-context"),
    pytest.param(Ratio(1.05, None, None, 1, 5), "single stream",
                 "copies4 vs copies1 single stream: 1.05× (no interval: n=1)", id="no-interval"),
])
def test_sentence(r, context, expected):
    assert stats.sentence("copies4", "copies1", r, context) == expected


@pytest.mark.parametrize("n_base, n_cand", [(300, 300), (301, 299),
                                            pytest.param(1000, 1500, marks=pytest.mark.slow)])
def test_exact_bootstrap_medians_agree_with_scipys_resampling(monkeypatch, n_base, n_cand):
    """Issue 26: above EXACT_FROM samples a side, the resample medians are drawn from their exact distribution
    (order statistics of uniforms) instead of resampling 10,000 × n values. Same percentile interval, within the
    Monte Carlo error of 10,000 resamples (≈0.3% here), odd and even n, and far faster."""
    rng = np.random.default_rng(5)
    base, cand = list(rng.lognormal(3, 0.3, n_base)), list(rng.lognormal(3.05, 0.3, n_cand))
    monkeypatch.setattr(stats, "EXACT_FROM", 10**9)
    scipy_r = stats.ratio(base, cand)
    monkeypatch.setattr(stats, "EXACT_FROM", 256)
    exact_r = stats.ratio(base, cand)
    assert exact_r.ratio == scipy_r.ratio
    assert exact_r.ci_low == pytest.approx(scipy_r.ci_low, rel=0.004)
    assert exact_r.ci_high == pytest.approx(scipy_r.ci_high, rel=0.004)
    assert stats.ratio(base, cand) == exact_r  # deterministic for a seed


def test_exact_bootstrap_medians_match_the_resampled_distribution():
    """The drawn medians have the distribution of medians of real resamples (a two-sample KS test), ties included."""
    from scipy.stats import ks_2samp

    gen = np.random.default_rng(1)
    for xs in (np.sort(gen.normal(size=401)), np.sort(gen.normal(size=400)), np.sort(np.repeat([1.0, 2.0, 3.0], 150))):
        drawn = stats.bootstrap_medians(xs, 4000, np.random.default_rng(2))
        resampled = np.median(gen.choice(xs, size=(4000, len(xs))), axis=1)
        assert ks_2samp(drawn, resampled).pvalue > 0.001
