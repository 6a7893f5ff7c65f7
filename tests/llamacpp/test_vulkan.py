"""Vulkan devices: vulkaninfo parsing (real samples, tests/fixtures/SOURCES-drivers.md), device selection,
the physical-device probe, and the driver cross-check arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamalab.llamacpp import vulkan as vk
from llamalab.run import nvmlcheck
from testpaths import FIXTURES

F = FIXTURES / "vulkaninfo"


def test_lavapipe_full_report():
    (d,) = vk.parse_vulkaninfo((F / "lavapipe-mesa22.3.6-debian12.txt").read_text())
    assert d.gpu == 0 and d.name == "llvmpipe (LLVM 15.0.6, 256 bits)"
    assert d.device_type == "PHYSICAL_DEVICE_TYPE_CPU" and d.software and d.driver == "llvmpipe"
    assert d.pci_bus is None  # lavapipe has no VK_EXT_pci_bus_info: llama.cpp sees no PCI id to deduplicate by
    assert [h.size for h in d.heaps] == [2 * 2**30] and d.heaps[0].device_local
    assert not d.has_budget and d.device_local_mib() == (2048.0, None)
    assert vk.used_by_gpu([d]) == {}


def test_lavapipe_summary():
    (d,) = vk.parse_vulkaninfo((F / "lavapipe-mesa22.3.6-debian12-summary.txt").read_text())
    assert d.software and d.heaps == () and d.vendor_id == "0x10005"


def test_two_gpus_summary():
    igpu, amd = vk.parse_vulkaninfo((F / "intel-igpu-amd-r9-380-summary.txt").read_text())
    assert (igpu.gpu, igpu.name, igpu.device_type) == (0, "Intel(R) HD Graphics 530",
                                                       "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU")
    assert (amd.gpu, amd.name, amd.vendor_id) == (1, "AMD Radeon (TM) R9 380 Series", "0x1002")
    assert not igpu.software and not amd.software


def test_amd_heaps_with_memory_budget():
    (d,) = vk.parse_vulkaninfo((F / "amd-8gb-heaps-budget.txt").read_text())
    assert [h.device_local for h in d.heaps] == [True, False, True]
    assert d.heaps[0].budget == 7675416576 and d.heaps[0].usage == 0 and d.has_budget
    size, used = d.device_local_mib()
    # device-local heaps 0 and 2: VRAM and the 256 MiB BAR window; in use = size − budget
    assert size == pytest.approx((8321499136 + 268435456) / 2**20)
    assert used == pytest.approx((8321499136 - 7675416576 + 268435456 - 181755904) / 2**20)
    assert vk.used_by_gpu([d]) == {0: round(used, 1)}


def test_budget_above_size_counts_nothing():
    """RADV once reported a 16 EiB budget on a 16 MiB heap (GPUOpen VMA#157): no negative use."""
    h = vk.Heap(0, size=16777216, budget=18446744073271062528, usage=0, device_local=True)
    d = vk.VkInfoDevice(gpu=0, name="RADV", device_type="PHYSICAL_DEVICE_TYPE_DISCRETE_GPU", heaps=(h,))
    assert d.device_local_mib() == (16.0, 0.0)


def phys(i, name, free=24000):
    return vk.PhysicalDevice(index=i, description=name, total_mib=free, free_mib=free)


LVP = phys(0, "llvmpipe (LLVM 15.0.6, 256 bits)", 2048)
H200 = phys(0, "NVIDIA H200")


@pytest.mark.parametrize("count, devices, indices, virtual", [
    pytest.param(2, [H200], (0, 0), True, id="one-gpu-twice"),
    pytest.param(2, [LVP], (0, 0), True, id="lavapipe-twice"),
    pytest.param(1, [LVP], (0,), False, id="lavapipe-once"),
    pytest.param(2, [LVP, phys(1, "AMD Radeon RX 7900 XTX (RADV NAVI31)"), phys(2, "AMD Radeon RX 6800 (RADV NAVI21)")],
                 (1, 2), False, id="gpus-before-lavapipe"),
    pytest.param(4, [phys(0, "A"), phys(1, "B")], (0, 1, 0, 1), True, id="round-robin"),
    pytest.param(1, [phys(0, "A"), phys(1, "B")], (0,), False, id="fewer"),
])
def test_select(count, devices, indices, virtual):
    sel = vk.select(count, devices)
    assert sel.indices == indices and sel.virtual is virtual
    assert sel.env == {"GGML_VK_VISIBLE_DEVICES": ",".join(map(str, indices))}
    if virtual:
        # named devices: llama.cpp skips a device whose PCI id is already in use unless it is named
        assert sel.server_args == ("-dev", ",".join(f"Vulkan{i}" for i in range(count)))
    else:
        assert sel.server_args == ()


def test_select_nothing():
    with pytest.raises(LookupError):
        vk.select(2, [])


def test_physical_devices_probes_each_index_until_refused():
    """The probe asks llama-server once per index; an index past the end aborts llama-server (exit 134)."""
    calls = []
    listing = {"0": "Available devices:\n  Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 2048 MiB free)\n",
               "1": "Available devices:\n  Vulkan0: AMD Radeon RX 7900 XTX (RADV NAVI31) (24560 MiB, 24192 MiB free)\n"}

    def capture(argv, env):
        idx = env["GGML_VK_VISIBLE_DEVICES"]
        calls.append(idx)
        if idx in listing:
            return 0, listing[idx]
        return 134, (f"ggml_vulkan: Invalid device index {idx} in GGML_VK_VISIBLE_DEVICES.\n"
                     "terminate called after throwing an instance of 'std::runtime_error'\n")

    devs = vk.physical_devices(Path("/x/llama-server"), {"X": "1"}, capture=capture)
    assert calls == ["0", "1", "2"]
    assert [(d.index, d.software, d.free_mib) for d in devs] == [(0, True, 2048), (1, False, 24192)]
    assert vk.select(2, devs).indices == (1, 1)


def test_cross_check_maps_vulkan_devices_to_their_gpu():
    led = {"devices": {"Vulkan0": {"model_mib": 1000.0, "kv_mib": 200.0, "compute_mib": 300.0},
                       "Vulkan1": {"model_mib": 900.0, "kv_mib": 100.0, "compute_mib": 300.0}}}
    (row,) = nvmlcheck.compare(led, {0: 3300.0}, 1, gpu_of=(0, 0), source="NVML")
    assert row["devices"] == ["Vulkan0", "Vulkan1"] and row["ledger_mib"] == 2800.0
    assert row["unaccounted_mib"] == 500.0
    rows = nvmlcheck.compare(led, {1: 1500.0, 2: 1400.0}, 3, gpu_of=(1, 2), source="rocm-smi", scope="device")
    assert [(r["gpu"], r["devices"]) for r in rows] == [(1, ["Vulkan0"]), (2, ["Vulkan1"])]
    (line, _) = nvmlcheck.sentences(rows)
    assert line.startswith("GPU 1 (Vulkan0): rocm-smi 1,500.0 MiB more in use on the GPU than before")
    # CUDA keeps its round-robin mapping and its wording
    cuda = {"devices": {"CUDA0": {"model_mib": 10.0}, "CUDA1": {"model_mib": 20.0}}}
    (row,) = nvmlcheck.compare(cuda, {0: 40.0}, 1)
    assert nvmlcheck.sentences([row]) == ["GPU 0 (CUDA0+CUDA1): NVML 40.0 MiB used by llama-server, ledger 30.00 MiB, "
                                          "unaccounted +10.00 MiB"]
