"""NVIDIA GPUs through NVML (nvidia-ml-py), with nvidia-smi as a fallback; a null probe where there is none."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from . import proc


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    total_mib: int
    used_mib: int
    driver: str | None = None
    uuid: str | None = None
    compute_capability: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def probe() -> list[Gpu]:
    """Every NVIDIA GPU this process can see (respecting CUDA_VISIBLE_DEVICES order only via NVML index)."""
    gpus = _nvml()
    return gpus if gpus is not None else _smi()


def _nvml() -> list[Gpu] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else name
            try:
                cc = "%d.%d" % pynvml.nvmlDeviceGetCudaComputeCapability(h)
            except Exception:
                cc = None
            try:
                uuid = pynvml.nvmlDeviceGetUUID(h)
                uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            except Exception:
                uuid = None
            out.append(Gpu(index=i, name=name, total_mib=mem.total // (1 << 20), used_mib=mem.used // (1 << 20),
                           driver=driver, uuid=uuid, compute_capability=cc))
        return out
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _smi() -> list[Gpu]:
    rc, out = proc.capture(["nvidia-smi", "--query-gpu=index,name,memory.total,memory.used,driver_version,uuid,compute_cap",
                            "--format=csv,noheader,nounits"], timeout_s=20)
    if rc != 0:
        return []
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 5 and parts[0].isdigit():
            gpus.append(Gpu(index=int(parts[0]), name=parts[1], total_mib=int(float(parts[2])),
                            used_mib=int(float(parts[3])), driver=parts[4],
                            uuid=parts[5] if len(parts) > 5 else None,
                            compute_capability=parts[6] if len(parts) > 6 else None))
    return gpus


def process_used_mib(pids: set[int]) -> dict[int, int] | None:
    """Per GPU index, the memory (MiB) used by the given processes (NVML); None where NVML is unavailable."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        out: dict[int, int] = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            used = 0
            for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                try:
                    for p in getattr(pynvml, getter)(h):
                        if p.pid in pids and p.usedGpuMemory:
                            used += p.usedGpuMemory
                except Exception:
                    pass
            out[i] = used // (1 << 20)
        return out
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def visible_count() -> int:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    n = len(probe())
    if env is not None and env.strip() != "":
        return min(n, len([x for x in env.split(",") if x.strip()]))
    return n
