"""Which driver can say how much memory llama-server uses on each GPU, for the backend a study runs on; the
comparison with the ledger is nvmlcheck.compare (pure). This module reads the driver.

| backend | source | scope |
|---|---|---|
| cuda | NVML, the server's processes | process |
| vulkan on NVIDIA | NVML (Vulkan clients are listed among the graphics processes) | process |
| vulkan on AMD, rocm | rocm-smi --showmeminfo vram: the card's use, less a reading before the server started | device |
| vulkan elsewhere | vulkaninfo's VK_EXT_memory_budget: size − budget of local heaps, less the same before | device |

Mesa's lavapipe has no VK_EXT_memory_budget: no cross-check there (said in the report by its absence).
A device-wide figure counts every process on the GPU: other work started meanwhile shows as "unaccounted".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..llamacpp import vulkan as vk
from ..machine import gpu, rocm
from ..rig.devices import DeviceSetup
from . import nvmlcheck


@dataclass
class Checker:
    source: str  # "NVML", "rocm-smi", "vulkaninfo"
    scope: str  # "process" | "device"
    physical: int
    gpu_of: tuple[int, ...]
    reader: Callable[[set[int]], Mapping[int, float] | None]  # MiB per GPU (NVML's whole MiB, others' floats)
    baseline: Mapping[int, float] | None = field(default=None)

    def start(self) -> Checker:
        if self.scope == "device":
            self.baseline = self.reader(set())
        return self

    def read(self, pids: set[int]) -> dict[int, float] | None:
        now = self.reader(pids)
        if now is None or self.scope != "device":
            return None if now is None else dict(now)
        if self.baseline is None:
            return None
        return {g: round(v - self.baseline.get(g, 0.0), 1) for g, v in now.items()}

    def compare(self, ledger: dict, used: dict[int, float] | None) -> list[dict]:
        return nvmlcheck.compare(ledger, used, self.physical, gpu_of=self.gpu_of or None, source=self.source,
                                 scope=self.scope)


def _rocm_cards(_: set[int]) -> dict[int, float] | None:
    cards = rocm.probe_meminfo()
    return {c.card: c.used_mib for c in cards} if cards else None


def _vulkaninfo_used(_: set[int]) -> dict[int, float] | None:
    devs = vk.vulkaninfo()
    if not devs:
        return None
    used = vk.used_by_gpu(devs)
    return used or None


def for_setup(backend: str, dev: DeviceSetup, *, nvidia: Callable[[], list] = gpu.probe,
              rocm_cards: Callable[[], list | None] = rocm.probe_meminfo,
              vulkaninfo: Callable[[], list | None] = vk.vulkaninfo) -> Checker | None:
    """The cross-check for these devices, started (a device-wide source has read its baseline), or None."""
    gpu_of = tuple(dev.gpu_of)
    if backend == "cuda" or backend == "vulkan" and nvidia():
        n = len(nvidia())
        return Checker("NVML", "process", n, gpu_of, lambda pids: gpu.process_used_mib(pids)).start() if n else None
    if backend in ("rocm", "vulkan"):
        cards = rocm_cards()
        if cards:
            return Checker("rocm-smi", "device", len(cards), gpu_of, _rocm_cards).start()
    if backend == "vulkan":
        devs = vulkaninfo()
        if devs and any(d.has_budget for d in devs):
            return Checker("vulkaninfo", "device", len(devs), gpu_of, _vulkaninfo_used).start()
    return None
