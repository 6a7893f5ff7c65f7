"""The devices llama.cpp lists (`llama-server --list-devices`, or a log's device lines), with their total and free
memory. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from . import patterns


@dataclass(frozen=True)
class DeviceMemory:
    """A device as llama.cpp reports it: `RPC0: 127.0.0.1:50052 (24105 MiB, 24105 MiB free)`."""

    name: str
    description: str
    total_mib: int
    free_mib: int


_NOT_MODEL_DEVICES = ("CPU", "BLAS", "AMX", "ACCEL")


def parse_devices(lines: Iterable[str]) -> list[DeviceMemory]:
    """Devices from `llama-server --list-devices` output or a log's `common_param: device_info` lines.

    Only devices a model's layers can go to are kept: the CPU and accelerator-only backends (BLAS) are not."""
    out: dict[str, DeviceMemory] = {}
    for raw in lines:
        found = patterns.device_line(str(raw))
        if not found or found[0].upper().startswith(_NOT_MODEL_DEVICES):
            continue
        out.setdefault(found[0], DeviceMemory(*found))
    return list(out.values())

