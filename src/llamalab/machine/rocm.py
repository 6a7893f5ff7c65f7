"""AMD GPUs through rocm-smi: device memory in use per card and per process, for the driver cross-check of ROCm
and Vulkan studies on AMD cards (what NVML is on NVIDIA). Parsing is pure; `probe_*` run rocm-smi.

* `rocm-smi --showmeminfo vram --json` → per card "VRAM Total Memory (B)" and "VRAM Total Used Memory (B)": all
  processes together (amdgpu's VRAM manager), so llama-server's share is the rise over a reading taken before it
  started. Works for Vulkan (RADV, AMDVLK) as well as HIP.
* `rocm-smi --showpids` → per KFD (ROCm/HIP) process its VRAM in bytes, summed over its GPUs (the "GPU(s)" column
  is a count of GPUs, not an index: ROCm/rocm_smi_lib#166). Vulkan processes are not KFD processes and do not show.

llama.cpp's HIP devices are `ROCm0`, `ROCm1` … in the order HIP enumerates them (`HIP_VISIBLE_DEVICES` chooses),
which is rocm-smi's card order on ordinary machines.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass

from ..core import proc
from ..core.records import JsonObject

MIB = 2**20


@dataclass(frozen=True)
class CardMemory:
    card: int
    total_mib: float
    used_mib: float
    name: str | None = None


def _card_index(key: str) -> int | None:
    m = re.match(r"^(?:card|GPU\[?)(\d+)\]?$", key.strip())
    return int(m.group(1)) if m else None


def _num(v: object) -> float | None:
    try:
        return float(str(v).strip())
    except (TypeError, ValueError):
        return None


def parse_meminfo(text: str) -> list[CardMemory]:
    """`rocm-smi --showmeminfo vram` in its JSON, CSV or plain-text form (optionally with --showproductname)."""
    text = text.strip()
    rows: dict[int, JsonObject] = {}  # card → its fields (from JSON, CSV or text lines)
    start = text.find("{")
    if start >= 0:
        try:
            data = json.loads(text[start:text.rfind("}") + 1])
        except ValueError:
            data = None
        if isinstance(data, dict):
            for key, vals in data.items():
                i = _card_index(key)
                if i is not None and isinstance(vals, dict):
                    rows[i] = vals
    if not rows and text.splitlines() and text.splitlines()[0].startswith("device,"):
        for rec in csv.DictReader(io.StringIO(text)):
            i = _card_index(rec.get("device") or "")
            if i is not None:
                rows[i] = rec
    if not rows:  # GPU[0]          : VRAM Total Used Memory (B): 108814336
        for line in text.splitlines():
            m = re.match(r"^\s*GPU\[(\d+)\]\s*:\s*(.+?):\s*(\S+)\s*$", line)
            if m:
                rows.setdefault(int(m.group(1)), {})[m.group(2).strip()] = m.group(3)
    out = []
    for i in sorted(rows):
        r = rows[i]
        total, used = _num(r.get("VRAM Total Memory (B)")), _num(r.get("VRAM Total Used Memory (B)"))
        if total is None or used is None:
            continue
        out.append(CardMemory(card=i, total_mib=round(total / MIB, 1), used_mib=round(used / MIB, 1),
                              name=r.get("Card Series") or r.get("Card series")))
    return out


def parse_showpids(text: str) -> dict[int, float]:
    """`rocm-smi --showpids` → {pid: VRAM MiB} (rows with UNKNOWN usage are left out; a pid listed twice, as
    --showpids=details does per GPU, is summed)."""
    out: dict[int, float] = {}
    in_table = False
    for line in text.splitlines():
        tokens = line.split()
        if tokens[:3] == ["PID", "PROCESS", "NAME"]:
            in_table = True
            continue
        if not in_table or len(tokens) < 6 or not tokens[0].isdigit():
            continue
        v = _num(tokens[-3])  # the last columns: VRAM USED, SDMA USED, CU OCCUPANCY
        if v is not None:
            pid = int(tokens[0])
            out[pid] = round(out.get(pid, 0.0) + v / MIB, 1)
    return out


def probe_meminfo(which: Callable[[str], str | None] = shutil.which,
                  capture: Callable[[list[str]], tuple[int, str]] | None = None) -> list[CardMemory] | None:
    exe = which("rocm-smi")
    if not exe:
        return None
    capture = capture or (lambda argv: proc.capture(argv, timeout_s=30))
    rc, text = capture([exe, "--showmeminfo", "vram", "--showproductname", "--json"])
    return parse_meminfo(text) if rc == 0 else None


def probe_pids(which: Callable[[str], str | None] = shutil.which,
               capture: Callable[[list[str]], tuple[int, str]] | None = None) -> dict[int, float] | None:
    exe = which("rocm-smi")
    if not exe:
        return None
    capture = capture or (lambda argv: proc.capture(argv, timeout_s=30))
    rc, text = capture([exe, "--showpids"])
    return parse_showpids(text) if rc == 0 else None
