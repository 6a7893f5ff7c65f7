"""Vulkan devices: which physical devices llama.cpp's Vulkan backend sees, how a study chooses them, and what the
driver says about their memory.

How llama.cpp b11312 picks Vulkan devices (ggml-vulkan.cpp, `ggml_vk_instance_init`):
* `GGML_VK_VISIBLE_DEVICES=i,j,…` lists indices into the loader's physical-device enumeration; each entry becomes
  one ggml device (`Vulkan0`, `Vulkan1` … in the listed order), with its own VkDevice, even when an index is listed
  twice. An index past the end aborts the process ("Invalid device index … in GGML_VK_VISIBLE_DEVICES").
* Without it: every discrete or integrated GPU (one per deviceUUID when two drivers expose one GPU); a CPU
  implementation (Mesa's lavapipe/llvmpipe) is never chosen, so lavapipe needs the variable.
* llama.cpp (src/llama.cpp) then skips a GPU whose PCI bus id (VK_EXT_pci_bus_info) equals one it already uses —
  unless devices are named with `-dev Vulkan0,Vulkan1`. Listing one GPU twice is therefore Vulkan's
  `GGML_CUDA_DEVICES`: with `-dev`, two devices on one GPU, and pipeline parallelism is on.

Pure except `physical_devices` and `vulkaninfo_*` probes, which run programs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from ..core import proc
from ..core.records import JsonObject
from ..logs import devicelist

MAX_DEVICES = 16  # GGML_VK_MAX_DEVICES
VISIBLE = "GGML_VK_VISIBLE_DEVICES"
_SOFTWARE = re.compile(r"llvmpipe|lavapipe|swiftshader|softpipe", re.I)


@dataclass(frozen=True)
class PhysicalDevice:
    """One Vulkan physical device as llama.cpp reports it with `GGML_VK_VISIBLE_DEVICES=<index>`."""

    index: int  # in the loader's enumeration (what GGML_VK_VISIBLE_DEVICES takes)
    description: str
    total_mib: int
    free_mib: int

    @property
    def software(self) -> bool:
        """A CPU implementation (lavapipe/llvmpipe, SwiftShader): a Vulkan device, but not a GPU."""
        return is_software(self.description)

    def as_dict(self) -> JsonObject:
        return {"index": self.index, "description": self.description, "total_mib": self.total_mib,
                "free_mib": self.free_mib, "software": self.software}


def is_software(name: str) -> bool:
    return bool(_SOFTWARE.search(name or ""))


@dataclass(frozen=True)
class Selection:
    """The study's Vulkan devices: which physical device each one is, and what llama-server needs to see them."""

    indices: tuple[int, ...]  # physical index of Vulkan0, Vulkan1, …
    physical: tuple[PhysicalDevice, ...]  # the distinct physical devices used
    virtual: bool  # more devices than physical devices: some are listed twice

    @property
    def env(self) -> dict[str, str]:
        return {VISIBLE: ",".join(str(i) for i in self.indices)}

    @property
    def server_args(self) -> tuple[str, ...]:
        # Named devices: llama.cpp skips a second device with an already used PCI id unless it is named.
        if not self.virtual:
            return ()
        return ("-dev", ",".join(f"Vulkan{i}" for i in range(len(self.indices))))

    def describe(self) -> str:
        names = ", ".join(f"{p.description} (#{p.index})" for p in self.physical)
        n = len(self.indices)
        if self.virtual:
            return (f"{n} Vulkan devices on {len(self.physical)} physical device(s) ({names}; "
                    f"{VISIBLE}={self.env[VISIBLE]}, named with -dev)")
        return f"{n} Vulkan device(s): {names} ({VISIBLE}={self.env[VISIBLE]})"


def select(count: int, physical: Sequence[PhysicalDevice]) -> Selection:
    """`count` devices from the physical ones: GPUs first (a software device is used only where there is no GPU);
    more devices than GPUs are spread round-robin (two on one GPU: `0,0`)."""
    if count < 1:
        raise ValueError("count must be at least 1")
    gpus = [p for p in physical if not p.software]
    pool = gpus or [p for p in physical if p.software]
    if not pool:
        raise LookupError("no Vulkan device")
    indices = tuple(pool[i % len(pool)].index for i in range(count))
    used = tuple(p for p in pool if p.index in indices)
    return Selection(indices=indices, physical=used, virtual=count > len(pool))


# ---------------------------------------------------------------- probing llama.cpp itself


def physical_devices(binary: Path, env: dict[str, str] | None = None,
                     capture: Callable[..., tuple[int, str]] | None = None) -> list[PhysicalDevice]:
    """Every physical Vulkan device, in the loader's order, as this llama.cpp build sees it: one
    `llama-server --list-devices` per index with `GGML_VK_VISIBLE_DEVICES=<index>` until an index is refused.
    Unlike a plain `--list-devices`, this also finds lavapipe (which llama.cpp leaves out by default)."""
    capture = capture or (lambda argv, env: proc.capture(argv, timeout_s=60, env=env))
    out: list[PhysicalDevice] = []
    for i in range(MAX_DEVICES):
        rc, text = capture([str(binary), "--list-devices"], {**(env or {}), VISIBLE: str(i)})
        devs = [d for d in devicelist.parse_devices(text.splitlines()) if d.name.startswith("Vulkan")]
        if rc != 0 or not devs:
            break
        d = devs[0]
        out.append(PhysicalDevice(index=i, description=d.description, total_mib=d.total_mib, free_mib=d.free_mib))
    return out


# ---------------------------------------------------------------- vulkaninfo


@dataclass(frozen=True)
class Heap:
    index: int
    size: int  # bytes
    budget: int | None  # bytes (VK_EXT_memory_budget), None without the extension
    usage: int | None  # bytes used by the process that asked (vulkaninfo itself)
    device_local: bool


@dataclass(frozen=True)
class VkInfoDevice:
    """One GPU of a `vulkaninfo` (text) report."""

    gpu: int  # vulkaninfo's GPUn: the loader's enumeration order
    name: str
    device_type: str  # PHYSICAL_DEVICE_TYPE_DISCRETE_GPU …
    heaps: tuple[Heap, ...] = ()
    vendor_id: str | None = None
    driver: str | None = None
    pci_bus: str | None = None  # dddd:bb:dd.f where VK_EXT_pci_bus_info is reported

    @property
    def software(self) -> bool:
        return self.device_type.endswith("CPU") or is_software(self.name)

    @property
    def has_budget(self) -> bool:
        return any(h.budget is not None for h in self.heaps)

    def device_local_mib(self) -> tuple[float, float | None]:
        """(size, size − budget) of the device-local heaps in MiB: the second is what the driver says is in use
        by every process (None without VK_EXT_memory_budget). Integrated GPUs report no device-local heap split:
        every heap counts for them."""
        heaps = [h for h in self.heaps if h.device_local] or list(self.heaps)
        size = sum(h.size for h in heaps) / 2**20
        if any(h.budget is None for h in heaps) or not heaps:
            return size, None
        budgets = [(h.size, h.budget) for h in heaps if h.budget is not None]  # every heap has one here
        used = sum(max(0, size - b) for size, b in budgets if b <= size) / 2**20
        return size, used


_GPU = re.compile(r"^GPU(\d+):\s*$")
_KV = re.compile(r"^\s*(\w+)\s*=\s*(.+?)\s*$")
_HEAP = re.compile(r"^\s*memoryHeaps\[(\d+)\]:")
_NUM = re.compile(r"^\s*(size|budget|usage)\s*=\s*(\d+)")


class _RawHeap(TypedDict):
    """A `memoryHeaps[i]` block of a full report, as read: its figures (size, budget, usage) and flags."""
    index: int
    nums: dict[str, int]
    flags: list[str]


class _RawGpu(TypedDict):
    """A `GPUn:` block, as read: its `key = value` lines (the first of each key), heaps and PCI address parts."""
    gpu: int
    kv: dict[str, str]
    heaps: list[_RawHeap]
    pci: dict[str, int]


def parse_vulkaninfo(text: str) -> list[VkInfoDevice]:
    """GPUs from `vulkaninfo` (full text) or `vulkaninfo --summary`: names, types, vendor, driver, PCI bus and,
    in the full report, each memory heap with its budget and usage (VK_EXT_memory_budget)."""
    devices: list[_RawGpu] = []
    cur: _RawGpu | None = None
    heap: _RawHeap | None = None
    pci: dict[str, int] = {}
    for raw in text.splitlines():
        line = raw.rstrip()
        if m := _GPU.match(line.strip()):
            cur = {"gpu": int(m.group(1)), "kv": {}, "heaps": [], "pci": {}}
            devices.append(cur)
            heap = None
            continue
        if cur is None:
            continue
        if m := _HEAP.match(line):
            heap = {"index": int(m.group(1)), "nums": {}, "flags": []}
            cur["heaps"].append(heap)
            continue
        if heap is not None:
            taken, heap = _heap_line(heap, line)
            if taken:
                continue
        if m := _KV.match(line):
            _key_value(cur, pci, m.group(1), m.group(2))
    out = [_device(d) for d in devices]
    # a summary and a full report of the same GPU merge by gpu number; keep the richest
    merged: dict[int, VkInfoDevice] = {}
    for d in out:
        old = merged.get(d.gpu)
        if old is None or len(d.heaps) > len(old.heaps):
            merged[d.gpu] = d
    return [merged[k] for k in sorted(merged)]


def _heap_line(heap: _RawHeap, line: str) -> tuple[bool, _RawHeap | None]:
    """A line inside a heap's block: (whether it was the heap's, the heap still being read: None at `memoryTypes`)."""
    if m := _NUM.match(line):
        heap["nums"][m.group(1)] = int(m.group(2))
        return True, heap
    if "MEMORY_HEAP_" in line:
        heap["flags"].append(line.strip())
        return True, heap
    if line.strip().startswith("memoryTypes"):
        return False, None
    return False, heap


def _key_value(cur: _RawGpu, pci: dict[str, int], key: str, val: str) -> None:
    """A `key = value` line of a GPU's block; the PCI address parts are kept across blocks (`pci`)."""
    if key in ("pciDomain", "pciBus", "pciDevice", "pciFunction"):
        try:
            pci[key] = int(val.split()[0], 0)
            cur["pci"] = dict(pci)
        except ValueError:
            pass
    elif key not in cur["kv"]:
        cur["kv"][key] = val


def _device(d: _RawGpu) -> VkInfoDevice:
    kv = d["kv"]
    p = d["pci"]
    bus = (f"{p['pciDomain']:04x}:{p['pciBus']:02x}:{p['pciDevice']:02x}.{p['pciFunction']:x}"
           if len(p) == 4 else None)
    heaps = tuple(Heap(index=h["index"], size=h["nums"].get("size", 0), budget=h["nums"].get("budget"),
                       usage=h["nums"].get("usage"), device_local=any("DEVICE_LOCAL" in f for f in h["flags"]))
                  for h in d["heaps"])
    return VkInfoDevice(gpu=d["gpu"], name=kv.get("deviceName", "?"), device_type=kv.get("deviceType", "?"),
                        heaps=heaps, vendor_id=kv.get("vendorID"), driver=kv.get("driverName"), pci_bus=bus)


def vulkaninfo(run: Callable[[list[str]], tuple[int, str]] | None = None,
               which: Callable[[str], str | None] | None = None,
               env: dict[str, str] | None = None, summary: bool = False) -> list[VkInfoDevice] | None:
    """Run vulkaninfo (None where it is missing or fails)."""
    import shutil

    exe = (which or shutil.which)("vulkaninfo")
    if not exe:
        return None
    run = run or (lambda argv: proc.capture(argv, timeout_s=30, env=env))
    rc, text = run([exe, "--summary"] if summary else [exe])
    if rc != 0:
        return None
    return parse_vulkaninfo(text)


def used_by_gpu(devices: Iterable[VkInfoDevice]) -> dict[int, float]:
    """Per vulkaninfo GPU number, device-local memory in use by all processes (MiB), where the driver has
    VK_EXT_memory_budget."""
    out = {}
    for d in devices:
        _, used = d.device_local_mib()
        if used is not None:
            out[d.gpu] = round(used, 1)
    return out
