"""The pipeline-parallel study on Vulkan, for real, on Mesa's lavapipe (a Vulkan device on the CPU): two Vulkan
devices on one lavapipe device (GGML_VK_VISIBLE_DEVICES=0,0, -dev Vulkan0,Vulkan1), the Vulkan build made with the
toolchain of scripts/vulkan-toolchain.sh, the real logs read for `sched copies` and the compute buffers.

Needs: mesa-vulkan-drivers (lavapipe), and the Vulkan toolchain (`bash scripts/vulkan-toolchain.sh`, which .ci/run
runs) or a system with new enough Vulkan headers, glslc and SPIRV-Headers. Where they are missing the tests skip
with what to install — except in CI (CI=true), where a missing piece is a failure."""

from __future__ import annotations

import json
import os
import time

import pytest

from llamahelp import run_study
from llamalab.core.paths import cache_home
from llamalab.llamacpp import vulkan as vk
from llamalab.machine import detect
from llamalab.setup import prepare as session
from llamalab.setup.options import RunOptions
from llamalab.setup.progress import Progress
from llamalab.study import spec as studymod

pytestmark = pytest.mark.llama

LAVAPIPE = [
    'devices.backend="vulkan"', "devices.count=2",
    # lavapipe's one heap is 2 GiB (Mesa 22.3): two 300 MiB cards as in the demo, fit keeps 64 MiB on each
    'devices.vram=["300MiB","300MiB"]',
    'builds=[{name="copies4"},{name="copies1",cmake={GGML_SCHED_MAX_COPIES=1}},'
    '{name="no-pp-override",args=["-ot","no_such_tensor=CPU"]}]',
    'settings=[{name="kv-f16-q8_0",args=["-ctk","f16","-ctv","q8_0"]}]',
    "workload.repeats=1", "workload.prompt_tokens=64", "workload.output_tokens=8", "workload.warmup=0",
    "workload.concurrency=[1]", "server.ready_timeout_s=900",
]


def _missing() -> str | None:
    ok, why = detect.vulkan_toolchain(cache_home(), os.environ)
    if not ok:
        return f"no Vulkan toolchain ({why}): run `bash scripts/vulkan-toolchain.sh`"
    devs = vk.vulkaninfo(summary=True)
    if devs is None:
        return "vulkaninfo is missing (apt-get install vulkan-tools mesa-vulkan-drivers)"
    if not any(d.software for d in devs):
        return "no lavapipe device (apt-get install mesa-vulkan-drivers)"
    return None


@pytest.fixture(scope="module")
def lavapipe_run(tmp_path_factory):
    why = _missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Vulkan study: {why}")
        pytest.skip(why)
    data = tmp_path_factory.mktemp("vulkan-data")
    t0 = time.monotonic()
    store, run_id = run_study(cache_home(), data, LAVAPIPE)
    seconds = time.monotonic() - t0
    print(f"\nVulkan study on lavapipe (builds included where not cached): {seconds:.0f} s")
    return store, run_id


def _by_build(store, run_id) -> dict[str, dict]:
    return {c["build"]: c for c in store.configs(run_id)}


def test_two_vulkan_devices_on_one_lavapipe(lavapipe_run):
    store, run_id = lavapipe_run
    for name, c in _by_build(store, run_id).items():
        assert c["status"] == "ok", (name, c.get("reason"))
        led = c["ledger"]
        assert sorted(led["devices"]) == ["Vulkan0", "Vulkan1"], name
        argv = json.loads(c["server_argv_json"])
        assert argv[argv.index("-dev") + 1] == "Vulkan0,Vulkan1"
        assert json.loads(c["env_json"])["GGML_VK_VISIBLE_DEVICES"] == "0,0"
        dev = json.loads(c["devices_json"])
        assert dev["backend"] == "vulkan" and dev["virtual"] is True and dev["gpu_of"] == [0, 0]


def test_sched_copies_4_against_1_and_the_compute_buffers_they_cost(lavapipe_run):
    store, run_id = lavapipe_run
    by = _by_build(store, run_id)
    c4, c1, ot = by["copies4"]["ledger"], by["copies1"]["ledger"], by["no-pp-override"]["ledger"]
    assert c4["pipeline_parallel"] is True and c4["sched_copies"] == 4
    assert c1["sched_copies"] == 1
    assert ot["pipeline_parallel"] is False and ot["sched_copies"] == 1
    for dev in ("Vulkan0", "Vulkan1"):
        assert c4["devices"][dev]["compute_mib"] > c1["devices"][dev]["compute_mib"], dev
        # the override moves nothing and turns pipeline parallelism off: the one-copy buffers of the default binary
        assert ot["devices"][dev]["compute_mib"] == pytest.approx(c1["devices"][dev]["compute_mib"], abs=0.01), dev
    host = lambda led: sum(b.get("compute_mib") or 0 for b in led["host"].values())  # noqa: E731
    assert host(c4) > host(c1)
    trials = store.trials(run_id)
    assert trials and all(t["errors"] == 0 and t["output_tps"] > 0 for t in trials)


def test_budgets_fit_the_context_on_vulkan(lavapipe_run):
    """`--fit` chose every context under the 300 MiB budgets, and one copy leaves room for more of it."""
    store, run_id = lavapipe_run
    by = _by_build(store, run_id)
    for c in by.values():
        assert json.loads(c["devices_json"])["emulation"]["budgets_mib"] == [300, 300]
    assert by["copies1"]["ledger"]["n_ctx"] > by["copies4"]["ledger"]["n_ctx"]


def test_physical_device_probe_finds_lavapipe():
    if _missing():
        pytest.skip(_missing())
    st, _ = studymod.load("demo", LAVAPIPE)
    prep = session.prepare(st, RunOptions(home=cache_home()), Progress())
    assert prep.backend == "vulkan"
    assert prep.vulkan_devices and prep.vulkan_devices[0].software
    assert vk.select(2, prep.vulkan_devices).indices == (0, 0)


def test_kv_types_at_one_context_q8_0_question():
    """The q8_0 question on Vulkan at b11312, by dry runs at one fixed context: with -ctk/-ctv f16/f16, f16/q8_0 and
    q8_0/q8_0 flash attention stays on the Vulkan devices (the same graph splits: no hand-off to the CPU), and the
    compute buffers are the same to within 2 MiB — the growth a quantized V cache shows at fitted contexts is the
    larger context it makes room for (each copy of the inputs grows with it), not a CPU fallback."""
    if _missing():
        pytest.skip(_missing())
    from llamalab.plan import plan

    st, _ = studymod.load("demo", [
        'devices.backend="vulkan"', "devices.count=2", 'devices.vram=["1500MiB","1500MiB"]', "server.ctx=16384",
        'builds=[{name="copies4"},{name="no-pp-override",args=["-ot","no_such_tensor=CPU"]}]',
        'settings=[{name="f16-f16",args=["-ctk","f16","-ctv","f16"]},{name="f16-q8_0",args=["-ctk","f16","-ctv","q8_0"]},'
        '{name="q8_0-q8_0",args=["-ctk","q8_0","-ctv","q8_0"]}]'])
    p = plan.plan_study(st, RunOptions(), Progress())
    by = {(c.build, c.setting): c for c in p.configs}
    assert all(c.status == "ok" and c.n_ctx == 16384 for c in p.configs), [(c.build, c.reason) for c in p.configs]
    for build, copies in (("copies4", 4), ("no-pp-override", 1)):
        splits = {by[(build, s)].graph_splits for s in ("f16-f16", "f16-q8_0", "q8_0-q8_0")}
        assert len(splits) == 1 and splits.pop() is not None, build
        assert {by[(build, s)].sched_copies for s in ("f16-f16", "f16-q8_0", "q8_0-q8_0")} == {copies}
        base = [d.compute_mib for d in by[(build, "f16-f16")].devices]
        for s in ("f16-q8_0", "q8_0-q8_0"):
            got = [d.compute_mib for d in by[(build, s)].devices]
            assert all(abs(a - b) <= 2.0 for a, b in zip(got, base)), (build, s, got, base)
    for s in ("f16-f16", "q8_0-q8_0"):  # and the copies: 4 cost more at the same context
        assert all(a.compute_mib > b.compute_mib for a, b in zip(by[("copies4", s)].devices,
                                                                   by[("no-pp-override", s)].devices))
