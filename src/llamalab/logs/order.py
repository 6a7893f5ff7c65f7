"""The device order of a stored ledger: llama.cpp's numbering (`device_names`) and each device's total. Pure.
"""

from __future__ import annotations

import re
from typing import Any


def without_endpoint(name: str) -> str:
    """A device name without its `[host:port]` (`RPC0[127.0.0.1:50052]` → `RPC0`): from the first `[` of its last
    line to a closing `]` at the end. String operations, not `\\[.*\\]$`, which is quadratic in a name of many `[`
    (names come from imported runs too)."""
    if not name.endswith("]"):
        return name
    i = name.find("[", name.rfind("\n") + 1)
    return name[:i] if i >= 0 else name


_NAME = re.compile(r"^(?P<base>[^\[\s(]+)\s*(?:[\[(](?P<inner>[^\])]*)[\])])?")


def _natural(s: str) -> list[tuple[int, str]]:
    """A natural sort key: `RPC10` after `RPC9` (numbers by value; text and numbers alternate, so a position holds
    the same kind in every key)."""
    return [(int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"(\d+)", s)]


def device_totals(ledger: dict[str, Any]) -> list[float]:
    """Each device's allocated MiB (every buffer kind) in llama.cpp's device order (`device_names`), from a stored
    ledger."""
    devs = ledger.get("devices") or {}
    return [float((devs.get(n) or {}).get("total_mib") or 0.0) for n in device_names(ledger)]


def device_names(ledger: dict[str, Any]) -> list[str]:
    """The ledger's device buffer names in llama.cpp's device order. Ledgers stored by older llamalab versions have
    sorted keys, so the order is taken from the memory breakdown table where it lists the devices
    (`RPC1 (127.0.0.1:50052)`, `CUDA0 (NVIDIA …)`; an rpc device matches by its endpoint, since every local
    rpc-server's device prints as RPC0[host:port]); names it does not list go by their number, then their stored
    order (the log's order in current ledgers)."""
    names = list(ledger.get("devices", {}))
    rows = [r.get("name") or "" for r in (ledger.get("breakdown_final") or ledger.get("breakdown_projected") or [])]
    if not rows:  # a log read before its exit-time table (a server still running): the device lines' order
        rows = [f"{n} ({d})" for n, d in (ledger.get("device_desc") or {}).items() if isinstance(d, str)]
    parsed = [_NAME.match(r.strip().lstrip("- ").strip()) for r in rows]

    def rank(name: str) -> int:
        m = _NAME.match(name)
        base, inner = (m.group("base"), m.group("inner")) if m else (name, None)
        for i, p in enumerate(parsed):
            if p is None:
                continue
            if inner and "[" in name:
                if p.group("inner") == inner:
                    return i
            elif p.group("base") == base:
                return i
        return 1 << 30

    # unlisted: llama.cpp numbers devices in order (CUDA0 < CUDA2 < CUDA10); equal bases keep the stored order
    return sorted(names, key=lambda n: (rank(n), _natural(without_endpoint(n)), names.index(n)))

