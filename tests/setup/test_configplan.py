"""An engine without a fit of the context (ik_llama.cpp) under budgets: its context found by loads at fixed -c
(setup/configplan.py `within_budgets_by_load`, `engine_context`), with the loads faked here by their figures."""

from __future__ import annotations

from types import SimpleNamespace

from llamalab.logs.dryrun import DeviceFigures
from llamalab.setup import configplan
from llamalab.study import spec as studymod


def _prep(budgets=("300MiB", "300MiB"), margin=(64,)):
    st, _ = studymod.load("engines", [f"devices.vram={list(budgets)!r}".replace("'", '"'),
                                      f"server.fit_target_mib={list(margin)}"])
    return SimpleNamespace(study=st, model_info=SimpleNamespace(n_ctx_train=65536, n_layer=8))


def fake_loads(monkeypatch, per_token_mib=(0.004, 0.006), fixed=(80.0, 110.0)):
    """Each load's figures: a fixed part and a part per token of context, per device (the KV cache)."""
    seen = []

    def load(prep, cfg, art, dev, env, logs, timeout_s, extra_args=()):
        n = int(extra_args[extra_args.index("-c") + 1])
        seen.append(n)
        devs = [DeviceFigures(name=f"RPC0[127.0.0.1:{5 + i}]", model_mib=f, context_mib=round(p * n, 2))
                for i, (f, p) in enumerate(zip(fixed, per_token_mib))]
        return configplan.ConfigPlan(build="ik", setting="s", status="ok", devices=devs, n_ctx=n)

    monkeypatch.setattr(configplan, "load_plan", load)
    return seen


def test_the_largest_context_within_every_budget_less_the_margin(monkeypatch):
    seen = fake_loads(monkeypatch)
    prep = _prep()
    fit = configplan.within_budgets_by_load(prep, None, None, None, {}, None, 1.0)
    # the second device limits: 110 + 0.006 n <= 300 - 64  →  n <= 21,000 → 20,992 in steps of 256
    assert fit.margin.n_ctx == 20992 and fit.margin.exact
    assert fit.budget.n_ctx == 31488 and fit.allowance_mib == [0.0, 0.0]  # a load's figures are its own
    assert seen[0] == 65536 and fit.dry_runs == len(seen)


def test_engine_context_runs_at_the_margins_context_and_reuses_a_stored_search(monkeypatch):
    seen = fake_loads(monkeypatch)
    art = SimpleNamespace(engine="ik_llama.cpp")
    n, doc = configplan.engine_context(_prep(), None, art, None, {}, __import__("pathlib").Path("/tmp/x"), None)
    assert n == 20992 and doc["engine"] == "ik_llama.cpp" and "has no fit of the context" in doc["why"]
    loads = len(seen)
    again, _ = configplan.engine_context(_prep(), None, art, None, {}, None, doc)
    assert again == 20992 and len(seen) == loads  # nothing loaded again


def test_nothing_fits_is_none_with_how_far_over(monkeypatch):
    fake_loads(monkeypatch, fixed=(290.0, 299.0))
    art = SimpleNamespace(engine="ik_llama.cpp")
    n, doc = configplan.engine_context(_prep(), None, art, None, {}, __import__("pathlib").Path("/tmp/x"), None)
    assert n is None and doc["budget"]["n_ctx"] is None and doc["budget"]["over_mib"] > 0


def test_a_loads_figures_name_the_rpc_servers_as_llama_cpp_numbers_them():
    """ik_llama.cpp prints every rpc-server as RPC0[host:port], the second one's buffers first: a plan names them
    RPC0, RPC1 in its own device order (its `using device` lines), the endpoint as the description, as a dry run's
    figures do (tests/fixtures/logs/ik-rpc-copies4-fa-off.log)."""
    from llamalab.logs import ledger
    from testpaths import FIXTURES

    led = ledger.parse((FIXTURES / "logs" / "ik-rpc-copies4-fa-off.log").read_text().splitlines())
    cp = configplan.ConfigPlan(build="ik", setting="s", status="ok")
    configplan._load_figures(cp, led)
    assert [(d.name, d.description) for d in cp.devices] == [("RPC0", "127.0.0.1:39637"), ("RPC1", "127.0.0.1:54577")]
    assert [(d.model_mib, d.context_mib, d.compute_mib) for d in cp.devices] == [(42.03, 52.5, 137.0),
                                                                                 (37.26, 7.5, 137.0)]
    assert (cp.host.model_mib, cp.host.context_mib, cp.host.compute_mib) == (31.25, 0.49, 16.01)
    assert (cp.n_ctx, cp.pipeline_parallel, cp.sched_copies, cp.graph_splits) == (7680, False, 1, 3)
