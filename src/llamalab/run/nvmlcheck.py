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
KINDS = ("model_mib", "kv_mib", "rs_mib", "compute_mib", "output_mib", "input_mib")


def compare(ledger: dict, used_by_gpu: dict[int, float] | None, physical: int, *,
            gpu_of: Sequence[int] | None = None, source: str = "NVML", scope: str = "process") -> list[dict]:
    """One row per physical GPU: the ledger's device buffers that live there, the driver's used MiB, and the
    difference. Device i lives on GPU `gpu_of[i]` where given (Vulkan: the GGML_VK_VISIBLE_DEVICES list), else
    on GPU i % physical (virtual devices of GGML_CUDA_DEVICES map round-robin). `scope` says what the driver's figure
    covers: "process" (the server alone) or "device" (every process, as a rise since before the server started).

    Under -sm tensor the ledger's devices are the Meta() device's members, its buffers already attributed to them
    (ledger.split_meta); a Meta() buffer whose members the log did not name maps to no GPU and is counted in
    every row's `unmapped_mib`, so the sentence can say so."""
    rows: dict[int, dict] = {}
    unmapped = 0.0
    for name, bufs in (ledger.get("devices") or {}).items():
        m = _DEVICE.match(name)
        if not m and name.startswith("Meta("):
            unmapped += sum(bufs.get(k) or 0.0 for k in KINDS)
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
    for row in rows.values():
        if unmapped:
            row["unmapped_mib"] = round(unmapped, 2)
        if ledger.get("meta", {}) and (ledger.get("meta") or {}).get("attributed") and row["devices"]:
            row["meta"] = True  # these devices' figures were attributed from Meta() buffers (-sm tensor)
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
        s = (f"GPU {r['gpu']} ({devs}): {source} {r['nvml_mib']:,} MiB {what}, ledger "
             f"{r['ledger_mib']:,.2f} MiB, unaccounted {r['unaccounted_mib']:+,.2f} MiB")
        if r.get("meta"):
            s += (" (-sm tensor: the ledger's figures are llama.cpp's Meta() buffers attributed to this GPU's devices; "
                  "the meta backend's reduction buffers and NCCL's memory are in the unaccounted part)")
        if r.get("unmapped_mib"):
            s += (f" (and {r['unmapped_mib']:,.2f} MiB of Meta() buffers whose devices the log does not name, not "
                  "counted on any GPU)")
        out.append(s)
    return out
