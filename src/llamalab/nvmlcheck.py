"""Cross-check llama.cpp's own memory lines against NVML: what the driver says the server process uses on each
GPU, next to the ledger's buffers on that GPU. The difference is shown as "unaccounted" (CUDA context, cuBLAS
workspaces, allocator slack …), never hidden. Pure."""

from __future__ import annotations

import re

_CUDA = re.compile(r"^CUDA(\d+)")
KINDS = ("model_mib", "kv_mib", "rs_mib", "compute_mib", "output_mib")


def compare(ledger: dict, used_by_gpu: dict[int, int] | None, physical: int) -> list[dict]:
    """One row per physical GPU: the ledger's device buffers that live there (virtual devices of
    GGML_CUDA_DEVICES map round-robin: device i → GPU i % physical), NVML's used MiB, and the difference."""
    rows: dict[int, dict] = {}
    for name, bufs in (ledger.get("devices") or {}).items():
        m = _CUDA.match(name)
        if not m or physical < 1:
            continue
        gpu = int(m.group(1)) % physical
        row = rows.setdefault(gpu, {"gpu": gpu, "devices": [], "ledger_mib": 0.0})
        row["devices"].append(name)
        row["ledger_mib"] = round(row["ledger_mib"] + sum(bufs.get(k) or 0.0 for k in KINDS), 2)
    for gpu, used in (used_by_gpu or {}).items():
        if gpu in rows or used:
            row = rows.setdefault(gpu, {"gpu": gpu, "devices": [], "ledger_mib": 0.0})
            row["nvml_mib"] = used
            row["unaccounted_mib"] = round(used - row["ledger_mib"], 2)
    return [rows[k] for k in sorted(rows)]


def sentences(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        if "nvml_mib" not in r:
            continue
        devs = "+".join(r["devices"]) or "no ledger device"
        out.append(f"GPU {r['gpu']} ({devs}): NVML {r['nvml_mib']:,} MiB used by llama-server, ledger "
                   f"{r['ledger_mib']:,.2f} MiB, unaccounted {r['unaccounted_mib']:+,.2f} MiB")
    return out
