"""fit/budgetfit.py: the search for the largest context within every budget, counted as it runs."""

from __future__ import annotations

from llamalab.fit import budgetfit
from llamalab.logs.dryrun import DeviceFigures
from llamalab.setup.configplan import ConfigPlan


def _dry_runs():
    """A dry-run function that records each context it is asked for and answers with a configuration plan of one
    device: 100 MiB of weights and 0.01 MiB of KV cache a token (the linear shape a dry run's figures have)."""
    asked: list[int] = []

    def at(n: int) -> ConfigPlan:
        asked.append(n)
        dev = DeviceFigures(name="RPC0", model_mib=100.0, context_mib=0.01 * n, compute_mib=0.0, kv_layers=1)
        return ConfigPlan(build="default", setting="tune", status="ok", n_ctx=n, devices=[dev])

    return at, asked


def test_no_training_context_is_no_dry_run():
    """Without the model's training context there is nothing to search and nothing is dry-run: the fit says so and
    counts none (it said one)."""
    at, asked = _dry_runs()
    fit = budgetfit.for_config(at, ["RPC0"], [300], [64], 0)
    assert asked == [] and fit.dry_runs == 0
    assert fit.budget.n_ctx is None and fit.budget.error == "the model's header gives no training context"


def test_the_dry_runs_counted_are_the_dry_runs_made():
    at, asked = _dry_runs()
    fit = budgetfit.for_config(at, ["RPC0"], [300], [64], 40_960, start=8192)
    assert fit.dry_runs == len(asked) and asked[0] == 8192
    assert fit.budget.n_ctx is not None and fit.margin.n_ctx is not None and fit.margin.n_ctx <= fit.budget.n_ctx
