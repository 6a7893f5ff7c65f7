"""The largest-context search: bounded, monotonic bisection on multiples of 256."""

import pytest

from llamalab.llamacpp import maxctx


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
