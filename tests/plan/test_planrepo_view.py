"""The repository table's rows and view (plan.repo, report.views.planrepo) from dry-run results, without
llama.cpp: what "fits", the contexts and the budget needed for --context, in the terminal's and Markdown's words."""

from llamalab.logs import dryrun
from llamalab.plan import plan as planmod
from llamalab.plan import repo as planrepo
from llamalab.report.views import planrepo as planrepo_view
from llamalab.setup import configplan


def config(n_ctx, used, budgets=(8192, 6144), margins=(1024, 1024), fit_ok=True, reduced=None):
    cp = configplan.ConfigPlan(build="copies4", setting="default", status="ok", n_ctx=n_ctx, fit_ok=fit_ok,
                            ctx_reduced_from=reduced, budgets_mib=list(budgets), margins_mib=list(margins),
                            devices=[dryrun.DeviceFigures(name=f"RPC{i}", model_mib=u, context_mib=0, compute_mib=0)
                                     for i, u in enumerate(used)])
    for d, b, m in zip(cp.devices, budgets, margins):
        if d.used_mib > b - m:
            cp.over_budget[d.name] = round(d.used_mib - (b - m), 2)
    return cp


def row(**kw):
    return planrepo.QuantRow(quant="Q4_K_M", name="M-Q4_K_M", files=["M-Q4_K_M.gguf"], size_bytes=4 << 30,
                             fetched_bytes=2 << 20, **kw)


def test_fits_means_every_device_within_budget_less_margin():
    r = row()
    # the study's -ngl 999 makes llama.cpp's fit "fail" after shrinking the context: the budgets decide
    planrepo._fill(r, config(52224, [7097, 5003], fit_ok=False, reduced=131072), config(55040, [7150, 5100]))
    assert r.fits and r.n_ctx == 52224 and r.n_ctx_no_pp == 55040 and r.over_mib == {}
    over = row()
    planrepo._fill(over, config(4096, [8592, 6739]), config(4096, [8548, 6655]))
    assert not over.fits and over.over_mib == {"RPC0": 1424, "RPC1": 1619}
    assert over.reason == "over budget on RPC0 by 1,424 MiB, RPC1 by 1,619 MiB"
    failed = row()
    planrepo._fill(failed, configplan.ConfigPlan(build="b", setting="s", status="failed", reason="died"), None)
    assert failed.status == "failed" and failed.reason == "died"


def test_the_budget_a_context_needs():
    r = row(context=32768)
    emu = type("E", (), {"margins_mib": (1024, 1024)})()
    planrepo._need(r, config(32768, [5336, 3890], budgets=(20000, 20000)), emu, [8192, 6144])
    assert r.need_mib == [6360, 4914] and r.need_fits is True
    short = row(context=32768)
    planrepo._need(short, config(16384, [5336, 3890], reduced=32768), emu, [8192, 6144])
    assert short.need_mib is None and "did not hold the layout" in short.need_note


def plan_of(rows, context=None):
    return planrepo.RepoPlan(ref="hf://o/r", study="pipeline-parallel", build="copies4", backend="cpu-rpc",
                             devices=["RPC0", "RPC1"], budgets_mib=[8192, 6144], margins_mib=[1024, 1024],
                             context=context, rows=rows, skipped=[("mmproj-F16.gguf", "a vision projector")],
                             size_bytes=sum(r.size_bytes for r in rows), fetched_bytes=2 << 20, llama_cpp="b11312 (x)",
                             seconds=12.5, notes=["a note"], args=["-fa", "on"])


def test_the_table_in_words():
    a = row(context=32768)
    planrepo._fill(a, config(52224, [7097, 5003]), config(62208, [7242, 4913]))
    a.need_mib, a.need_fits = [6360.0, 4914.0], True
    b = planrepo.QuantRow(quant="Q8_0", name="M-Q8_0", files=[f"Q8_0/M-Q8_0-0000{i}-of-00002.gguf" for i in (1, 2)],
                          size_bytes=8 << 30, fetched_bytes=1, context=32768, status="failed", reason="died")
    p = plan_of([a, b], context=32768)
    assert planrepo_view.cells(p, a) == ["Q4_K_M", "M-Q4_K_M.gguf", "4.00 GiB", "yes", "52,224",
                                         "62,208 (over: RPC0 +74 MiB)", "6.2 + 4.8 GiB (fits)"]
    assert planrepo_view.cells(p, b)[1:4] == ["Q8_0/M-Q8_0-00001-of-00002.gguf (+1 parts)", "8.00 GiB", "failed: died"]
    md = planrepo_view.markdown(p)
    assert md.startswith("## hf://o/r: every quant under the budgets\n\n| Quant | File | Size | Fits |")
    assert "| Needs for 32,768 tokens |" in md and "- not a model: mmproj-F16.gguf (a vision projector)" in md
    assert "-fa on" in md and "2 model(s), 0 dry runs, 12.5 s" in md
    assert "Needs for" not in planrepo_view.markdown(plan_of([a]))  # no --context, no column
    assert planrepo.dumps(p).startswith("{")
