"""The largest-context search: bounded, monotonic bisection on multiples of 256."""

import pytest

from llamalab.fit import maxctx


def _probe(limit):
    return lambda n: {"loaded": n <= limit}


@pytest.mark.parametrize("lo, hi, limit, probes, want_max, want_steps", [
    pytest.param(4096, 65536, 10**9, 6, 65536, 2, id="everything-loads"),
    pytest.param(4096, 65536, 30000, 6, 27136, 6, id="bisect-within-six"),
    pytest.param(4096, 65536, 30000, 20, 29952, 10, id="more-probes-finer"),
    pytest.param(15872, 15872, 20000, 6, 15872, 1, id="verify-only"),
    pytest.param(16000, 65536, 5000, 8, 4864, 7, id="fitted-fails-search-below"),
])
def test_search(lo, hi, limit, probes, want_max, want_steps):
    r = maxctx.search(lo, hi, _probe(limit), max_probes=probes)
    assert r.max_loaded == want_max
    assert len(r.steps) == want_steps
    assert all(s["n_ctx"] % maxctx.STEP == 0 for s in r.steps)
    assert all(s["loaded"] == (s["n_ctx"] <= limit) for s in r.steps)


def test_probe_args_turn_fit_off_and_fix_the_context():
    args = ["-fa", "on", "-fitt", "23000,23000", "-ts", "1200,1200", "-c", "512", "-np", "4"]
    assert maxctx.probe_args(args, 8192) == ["-fa", "on", "-ts", "1200,1200", "-np", "4", "-fit", "off", "-c", "8192"]


@pytest.mark.parametrize("totals, budgets, ok", [
    ([167.5, 163.0], [1200, 1200], True),
    ([1300.0, 163.0], [1200, 1200], False),
    ([900.0, 900.0], [1000], True),
    ([900.0, 900.0], None, True),
])
def test_within_budgets(totals, budgets, ok):
    got, why = maxctx.within_budgets(totals, budgets)
    assert got is ok and (why is None) is ok


# ---------------------------------------------------------------- the largest context within per-device limits


def _lines(intercepts, slopes, bump=0.0, calls=None):
    """MiB per device on straight lines, plus `bump` MiB at contexts that are not multiples of 1024 (compute
    buffers step with the context's padding)."""
    def measure(n):
        if calls is not None:
            calls.append(n)
        return [a + b * n + (bump if n % 1024 else 0.0) for a, b in zip(intercepts, slopes)]
    return measure


@pytest.mark.parametrize("intercepts, slopes, bump, limits, cap, want, exact", [
    # device 1 decides: 150 + 0.006 n + 0.3 ≤ 300 → n ≤ 24,950 → 24,832 (a multiple of 256)
    pytest.param((100, 150), (0.004, 0.006), 0.3, (300, 300), 32768, 24832, True, id="the-tighter-device-decides"),
    pytest.param((100, 150), (0.004, 0.006), 0.0, (300, 300), 20480, 20480, True, id="everything-fits-the-cap"),
    pytest.param((100, 310), (0.004, 0.006), 0.0, (300, 300), 32768, None, True, id="weights-alone-over"),
    pytest.param((10, 10), (0.0, 0.0), 0.0, (300, 300), 32768, 32768, True, id="no-growth"),
    pytest.param((100, 150), (0.004, 0.006), 0.0, (300, 236), 65536, 14080, True, id="one-limit-lower"),
])
def test_largest_within(intercepts, slopes, bump, limits, cap, want, exact):
    calls = []
    r, cache = maxctx.largest_within(_lines(intercepts, slopes, bump, calls), limits, cap)
    assert r.n_ctx == want and r.exact is exact
    assert all(n % maxctx.STEP == 0 and n <= cap for n in calls)
    assert len(calls) == len(set(calls)) <= 8  # never the same context twice; a few dry runs, not a scan
    if want:  # exact: the answer fits and one step more does not (or it is the cap)
        fits = maxctx.within_limits(_lines(intercepts, slopes, bump)(want), limits)
        over = want == cap or not maxctx.within_limits(_lines(intercepts, slopes, bump)(want + maxctx.STEP), limits)
        assert fits and over
    else:
        assert r.over_mib == pytest.approx(max(a + b * r.over_at - x for a, b, x in zip(intercepts, slopes, limits)),
                                           abs=0.01)
        assert r.worst == 1


def test_largest_within_reuses_known_points_for_a_second_limit():
    calls = []
    m = _lines((100, 150), (0.004, 0.006), 0.3, calls)
    first, cache = maxctx.largest_within(m, (300, 300), 32768)
    n_first = len(calls)
    second, _ = maxctx.largest_within(m, (236, 236), 32768, known=cache)
    assert first.n_ctx == 24832 and second.n_ctx == 14080 and second.exact
    assert len(calls) - n_first <= 3  # the first search's points bracket the second one's answer already


def test_largest_within_starts_where_asked_and_uses_given_slopes():
    calls = []
    r, _ = maxctx.largest_within(_lines((100, 150), (0.004, 0.006), 0.0, calls), (300, 300), 65536, start=24832,
                                 slopes=(0.004, 0.006))
    assert calls[0] == 24832 and r.n_ctx == 24832
    assert len(calls) == 2  # the start, then one step more to show it is the largest


def test_largest_within_a_failed_dry_run_stops_with_what_is_known():
    def m(n):
        return "llama-server stopped before its memory fit finished" if n < 30000 else [400.0, 400.0]
    r, _ = maxctx.largest_within(m, (300, 300), 32768)
    assert r.n_ctx is None and r.error and not r.exact


def test_largest_within_is_bounded():
    calls = []
    r, _ = maxctx.largest_within(_lines((100, 150), (0.004, 0.006), 0.0, calls), (300, 300), 10**7, max_runs=3)
    assert len(calls) == 3 and not r.exact
    if r.n_ctx:
        assert maxctx.within_limits(_lines((100, 150), (0.004, 0.006))(r.n_ctx), (300, 300))
