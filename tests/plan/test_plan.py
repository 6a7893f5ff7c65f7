"""`llamalab plan` against real llama.cpp on CPU-RPC (issue 11): dry-run figures vs full loads of the same
configurations, planning from a header-only prefix, and the time of the 8B-shape memory-only study."""

import time

import pytest

from llamalab.fit import budget
from llamalab.models import gguf, standin
from llamalab.models import synthetic as models
from llamalab.plan import check as plancheck
from llamalab.plan import plan
from llamalab.setup import prepare as session
from llamalab.setup.options import RunOptions
from llamalab.setup.progress import Progress
from llamalab.study import spec as studymod

pytestmark = pytest.mark.llama


@pytest.fixture(scope="module")
def demo_plan_prep(llama_home):
    """The demo study's builds, with the tiny model's header-only stand-in as the model."""
    st, _ = studymod.load("demo")
    header = models.synthetic(models.preset(st.model.preset or "tiny"), llama_home, data=False)
    return st, session.prepare(st, RunOptions(home=llama_home, model=header), Progress())


def test_dry_run_figures_equal_a_full_load(demo_plan_prep, llama_home, tmp_path):
    """Every build × setting of the demo (its 300 MiB budgets make the fit shrink the context): the dry run and a
    full load in the same devices with the same arguments.

    Identical means: model MiB within the whole MiB llama.cpp's table prints (rounded down), context (KV) MiB and
    compute MiB within 0.01 (both print 2 decimals), n_ctx and scheduler copies equal. Exception measured on
    CPU-RPC b11312: the compute buffer of a device that receives a split's input differs by up to the pipeline's
    input copies, n_copies × n_ubatch × n_embd × 4 bytes (the rpc-server's own allocation log confirms the full
    load's figure)."""
    st, prep = demo_plan_prep
    full_model = models.synthetic(models.preset(st.model.preset or "tiny"), llama_home)
    results = plancheck.validate(st, prep, full_model, logs=tmp_path, progress=Progress(),
                                 budgets=budget.parse_budgets(st.devices.vram))
    assert len(results) == len(prep.artifacts) * len(st.settings)
    for r in results:
        label = f"{r.config.build} × {r.config.setting}"
        assert r.config.status == "ok", (label, r.config.reason)
        assert r.load.error is None, (label, r.load.error)
        assert r.config.ctx_reduced_from, f"{label}: the budgets should make the fit choose the context"
        slack = plancheck.input_copies_mib(r.config)
        for row in r.rows:
            where = f"{label} {row.where} {row.figure}: dry {row.dry} vs full {row.full}"
            if row.figure == "compute" and row.device_index not in (None, 0):
                assert abs(row.diff) <= slack + 0.01, where
            else:
                assert row.ok, where
    by = {(r.config.build, r.config.setting): r.config for r in results}
    assert by[("copies4", "kv-f16-q8_0")].sched_copies == 4 and by[("copies1", "kv-f16-q8_0")].sched_copies == 1
    # fewer copies buy context under the same budgets
    assert by[("copies1", "kv-f16-q8_0")].n_ctx > by[("copies4", "kv-f16-q8_0")].n_ctx


def test_plan_from_the_first_mib_of_a_model_file(demo_plan_prep, llama_home, tmp_path):
    """A file holding only the start of a model (here the tiny model cut 100 KiB after its header) plans exactly
    like the whole model."""
    st, _ = demo_plan_prep
    full_model = models.synthetic(models.preset(st.model.preset or "tiny"), llama_home)
    head = tmp_path / "head.gguf"
    with open(full_model, "rb") as f:
        head.write_bytes(f.read(gguf.read_layout(full_model).data_offset + 100 * 1024))
    st1, _ = studymod.load("demo", ["builds=[{name=\"copies4\"}]"])
    from_head = plan.plan_study(st1, RunOptions(home=llama_home, model=head), Progress())
    from_full = plan.plan_study(st1, RunOptions(home=llama_home, model=full_model), Progress())
    assert from_head.model_standin and "stand-in" in " ".join(from_head.notes)
    assert [c.status for c in from_head.configs] == ["ok"] * len(st1.settings)
    for a, b in zip(from_head.configs, from_full.configs, strict=True):
        assert a.n_ctx == b.n_ctx and a.sched_copies == b.sched_copies
        assert [(d.model_mib, d.context_mib, d.compute_mib) for d in a.devices] == \
               [(d.model_mib, d.context_mib, d.compute_mib) for d in b.devices]


@pytest.mark.timed
def test_8b_memory_only_study_takes_under_a_minute(llama_home, tmp_path):
    """Issue 11's performance target: the pipeline-parallel study (every build × both KV settings, fitted context)
    for an 8B-shape model from a header-only prefix, under 60 s once the builds exist (2-core CPU machine)."""
    header = models.synthetic(models.preset("8b"), llama_home, data=False)
    head = tmp_path / "head-8b.gguf"
    with open(header, "rb") as f:
        head.write_bytes(f.read(8 << 20))
    st, _ = studymod.load("pipeline-parallel", ['devices.backend="cpu-rpc"'])
    session.prepare(st, RunOptions(home=llama_home, model=header), Progress())  # builds exist before timing
    t0 = time.monotonic()
    p = plan.plan_study(st, RunOptions(home=llama_home, model=head, budgets_mib=[10240, 9216]), Progress())
    wall = time.monotonic() - t0
    print(f"\n8B memory-only study: {len(p.configs)} configurations, "
          f"{sum(c.dry_runs for c in p.configs)} dry runs, {wall:.1f} s")
    assert wall < 60
    # tensor split has no llama.cpp fit, and a dry run is that fit: not applicable, with llama.cpp's words
    assert [(c.build, c.status, c.reason) for c in p.configs if c.build == "sm-tensor"] == [
        ("sm-tensor", "not-applicable", 'no dry run (it is llama.cpp\'s fit): llama.cpp says "llama_params_fit is '
         'not implemented for SPLIT_MODE_TENSOR"')] * 2
    assert all(c.status == "ok" for c in p.configs if c.build != "sm-tensor"), [(c.build, c.reason) for c in p.configs]
    by = {(c.build, c.setting): c for c in p.configs}
    c4, c1 = by[("copies4", "kv-f16-q8_0")], by[("copies1", "kv-f16-q8_0")]
    assert (c4.sched_copies, c1.sched_copies) == (4, 1)
    assert c4.ctx_reduced_from == c4.n_ctx_train and c1.n_ctx > c4.n_ctx
    cost = next(c for c in p.copies_costs if c.setting == "kv-f16-q8_0")
    assert cost.total_mib > 100  # four copies of an 8B shape's compute buffers
    if ("no-pp-blas", "kv-f16-q8_0") in by:
        assert by[("no-pp-blas", "kv-f16-q8_0")].pipeline_parallel is False
