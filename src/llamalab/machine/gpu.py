"""NVIDIA GPUs through NVML (nvidia-ml-py), with nvidia-smi as a fallback; a null probe where there is none."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from types import ModuleType

from ..core import proc
from ..core.records import JsonObject


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    total_mib: int
    used_mib: int
    driver: str | None = None
    uuid: str | None = None
    compute_capability: str | None = None

    def as_dict(self) -> JsonObject:
        return asdict(self)


def probe() -> list[Gpu]:
    """Every NVIDIA GPU this process can see (respecting CUDA_VISIBLE_DEVICES order only via NVML index)."""
    gpus = _nvml()
    return gpus if gpus is not None else _smi()


@contextmanager
def _session() -> Iterator[ModuleType | None]:
    """pynvml, initialised, or None where nvidia-ml-py or the driver is missing; shut down afterwards."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        yield None
        return
    try:
        yield pynvml
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _nvml() -> list[Gpu] | None:
    with _session() as nv:
        if nv is None:
            return None
        try:
            driver = _text(nv.nvmlSystemGetDriverVersion())
            out = []
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                try:
                    major, minor = nv.nvmlDeviceGetCudaComputeCapability(h)
                    cc = f"{major:d}.{minor:d}"
                except Exception:
                    cc = None
                try:
                    uuid = _text(nv.nvmlDeviceGetUUID(h))
                except Exception:
                    uuid = None
                out.append(Gpu(index=i, name=_text(nv.nvmlDeviceGetName(h)), total_mib=mem.total // (1 << 20),
                               used_mib=mem.used // (1 << 20), driver=driver, uuid=uuid, compute_capability=cc))
            return out
        except Exception:
            return None


def _smi() -> list[Gpu]:
    rc, out = proc.capture(["nvidia-smi",
                            "--query-gpu=index,name,memory.total,memory.used,driver_version,uuid,compute_cap",
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
    with _session() as nv:
        if nv is None:
            return None
        try:
            out: dict[int, int] = {}
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                used = 0
                for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                    try:
                        used += sum(p.usedGpuMemory or 0 for p in getattr(nv, getter)(h) if p.pid in pids)
                    except Exception:
                        pass
                out[i] = used // (1 << 20)
            return out
        except Exception:
            return None
