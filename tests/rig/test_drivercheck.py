"""Device setups for Vulkan and ROCm, and which driver cross-checks each backend (fakes stand in for GPUs that are
not on this machine; the parsing underneath is tested on real outputs in test_vulkan.py and test_rocm.py)."""

from __future__ import annotations

import pytest

from llamalab.core.errors import LaunchError
from llamalab.llamacpp import vulkan as vk
from llamalab.machine import rocm
from llamalab.rig import devices
from llamalab.run import drivercheck
from testpaths import FIXTURES

F = FIXTURES


def test_rocm_setups():
    with devices.rocm(2, 1) as d:
        assert d.env == {"GGML_CUDA_DEVICES": "2"} and d.virtual and d.gpu_of == (0, 0)
    with devices.rocm(1, 2) as d:
        assert d.env == {"HIP_VISIBLE_DEVICES": "0"} and not d.virtual
    with devices.rocm(2, 2) as d:
        assert d.env == {} and d.gpu_of == (0, 1) and d.description == "2 ROCm GPU(s)"
    with pytest.raises(LaunchError, match="no AMD GPU"):
        with devices.rocm(2, 0):
            pass


def test_vulkan_setup_on_one_gpu_and_none():
    with devices.vulkan(2, [vk.PhysicalDevice(0, "NVIDIA H200", 143000, 142000)]) as d:
        assert d.env == {"GGML_VK_VISIBLE_DEVICES": "0,0"} and d.server_args == ("-dev", "Vulkan0,Vulkan1")
        assert d.virtual and d.gpu_of == (0, 0) and "2 Vulkan devices on 1 physical device" in d.description
    with pytest.raises(LaunchError, match="sees none"):
        with devices.vulkan(2, []):
            pass


def test_remote_devices_join_named_vulkan_devices():
    from llamalab.rig import remote

    dev = devices.DeviceSetup(backend="vulkan", count=2, server_args=("-dev", "Vulkan0,Vulkan1"),
                              env={"GGML_VK_VISIBLE_DEVICES": "0,0"})
    found = {"10.0.0.2:50052": [remote.RemoteDevice(endpoint="10.0.0.2:50052", index=0, name="RPC0")]}
    merged = remote.merge_setup(dev, ["10.0.0.2:50052"], found)
    args = list(merged.server_args)
    assert args[args.index("-dev") + 1] == "RPC0[10.0.0.2:50052],Vulkan0,Vulkan1"
    assert args[args.index("--rpc") + 1] == "10.0.0.2:50052" and merged.count == 3


def test_cuda_uses_nvml_per_process(monkeypatch):
    gpus = [object()]
    with devices.cuda(2, 1) as d:
        c = drivercheck.for_setup("cuda", d, nvidia=lambda: gpus)
    assert (c.source, c.scope, c.physical, c.gpu_of) == ("NVML", "process", 1, (0, 0))
    monkeypatch.setattr(drivercheck.gpu, "process_used_mib", lambda pids: {0: 3000})
    led = {"devices": {"CUDA0": {"model_mib": 1000.0}, "CUDA1": {"model_mib": 1200.0}}}
    (row,) = c.compare(led, c.read({123}))
    assert row["unaccounted_mib"] == 800.0 and row["source"] == "NVML"


def test_vulkan_on_nvidia_uses_nvml_too():
    with devices.vulkan(2, [vk.PhysicalDevice(0, "NVIDIA H200", 1, 1)]) as d:
        c = drivercheck.for_setup("vulkan", d, nvidia=lambda: [object()])
    assert c.source == "NVML" and c.gpu_of == (0, 0)


def test_amd_uses_rocm_smi_as_a_rise_since_the_server_started():
    readings = iter([
        rocm.parse_meminfo((F / "rocm-smi" / "rx7900xt-meminfo.json").read_text()),  # before
        [rocm.CardMemory(card=0, total_mib=20464.0, used_mib=26.6 + 5000.0)],      # after the server loaded
    ])
    with devices.vulkan(2, [vk.PhysicalDevice(0, "AMD Radeon RX 7900 XT (RADV NAVI31)", 20464, 20000)]) as d:
        c = drivercheck.for_setup("vulkan", d, nvidia=lambda: [], rocm_cards=lambda: [object()])
    c.reader = lambda pids: {x.card: x.used_mib for x in next(readings)}
    c.start()
    assert c.baseline == {0: 26.6}
    assert c.read({1}) == {0: 5000.0}
    (row,) = c.compare({"devices": {"Vulkan0": {"model_mib": 2000.0}, "Vulkan1": {"model_mib": 2500.0}}}, {0: 5000.0})
    assert row["devices"] == ["Vulkan0", "Vulkan1"] and row["unaccounted_mib"] == 500.0 and row["scope"] == "device"


def test_vulkaninfo_budget_where_nothing_else_answers():
    amd = vk.parse_vulkaninfo((F / "vulkaninfo" / "amd-8gb-heaps-budget.txt").read_text())
    lvp = vk.parse_vulkaninfo((F / "vulkaninfo" / "lavapipe-mesa22.3.6-debian12.txt").read_text())
    with devices.vulkan(1, [vk.PhysicalDevice(0, "AMD", 1, 1)]) as d:
        c = drivercheck.for_setup("vulkan", d, nvidia=lambda: [], rocm_cards=lambda: None, vulkaninfo=lambda: amd)
        assert c.source == "vulkaninfo" and c.scope == "device"
        # lavapipe has no memory budget: no cross-check at all
        assert drivercheck.for_setup("vulkan", d, nvidia=lambda: [], rocm_cards=lambda: None,
                                     vulkaninfo=lambda: lvp) is None
    assert drivercheck.for_setup("cpu-rpc", devices.DeviceSetup("cpu-rpc", 2), nvidia=lambda: []) is None
