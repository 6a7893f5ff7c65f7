"""Cross-check llama.cpp's own memory lines against the GPU driver: what the driver says the server uses on each
GPU, next to the ledger's buffers on that GPU. The difference is shown as "unaccounted" (CUDA/Vulkan context,
cuBLAS workspaces, allocator slack …), never hidden. Pure.

Sources (the runner reads them; see drivercheck.py): NVML's per-process figure (CUDA, and Vulkan on NVIDIA:
NVML lists Vulkan clients among the graphics processes), rocm-smi (AMD: per process for HIP, otherwise the card's
use rising over a reading taken before the server started), vulkaninfo's VK_EXT_memory_budget (any other Vulkan
driver that has it: the rise of size − budget since before the server started)."""

from __future__ import annotations

import re
from collections.abc import Sequence

_DEVICE = re.compile(r"^(?:CUDA|ROCm|Vulkan|MUSA)(\d+)")
KINDS = ("model_mib", "kv_mib", "rs_mib", "compute_mib", "output_mib")


def compare(ledger: dict, used_by_gpu: dict[int, float] | None, physical: int, *,
            gpu_of: Sequence[int] | None = None, source: str = "NVML", scope: str = "process") -> list[dict]:
    """One row per physical GPU: the ledger's device buffers that live there, the driver's used MiB, and the
    difference. Device i lives on GPU `gpu_of[i]` where given (Vulkan: the GGML_VK_VISIBLE_DEVICES list), else
    on GPU i % physical (virtual devices of GGML_CUDA_DEVICES map round-robin). `scope` says what the driver's figure
    covers: "process" (the server alone) or "device" (every process, as a rise since before the server started)."""
    rows: dict[int, dict] = {}
    for name, bufs in (ledger.get("devices") or {}).items():
        m = _DEVICE.match(name)
        if not m or physical < 1:
            continue
        i = int(m.group(1))
        gpu = gpu_of[i] if gpu_of is not None and i < len(gpu_of) else i % physical
        row = rows.setdefault(gpu, {"gpu": gpu, "devices": [], "ledger_mib": 0.0})
        row["devices"].append(name)
        row["ledger_mib"] = round(row["ledger_mib"] + sum(bufs.get(k) or 0.0 for k in KINDS), 2)
    for gpu, used in (used_by_gpu or {}).items():
        if gpu in rows or used:
            row = rows.setdefault(gpu, {"gpu": gpu, "devices": [], "ledger_mib": 0.0})
            row["nvml_mib"] = used
            row["unaccounted_mib"] = round(used - row["ledger_mib"], 2)
            row["source"] = source
            row["scope"] = scope
    return [rows[k] for k in sorted(rows)]


def sentences(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        if "nvml_mib" not in r:
            continue
        devs = "+".join(r["devices"]) or "no ledger device"
        source = r.get("source", "NVML")
        what = ("used by llama-server" if r.get("scope", "process") == "process"
                else "more in use on the GPU than before llama-server started")
        out.append(f"GPU {r['gpu']} ({devs}): {source} {r['nvml_mib']:,} MiB {what}, ledger "
                   f"{r['ledger_mib']:,.2f} MiB, unaccounted {r['unaccounted_mib']:+,.2f} MiB")
    return out
