"""Per-device memory budgets → llama.cpp `--fit` arguments (pure).

A study may say "pretend the devices are a 16 GiB and a 12 GiB card" (`[devices] vram = ["16GiB", "12GiB"]`).
llama.cpp cannot be told a device's size, but its fit can be told how much memory to leave free on each device
(`-fitt MiB0,MiB1,…`, default 1024 MiB each), and it sizes the context so that on every device

    free_i − used_i ≥ fitt_i                      (free_i: what the device reports before loading)

A budget B_i means: the emulated card offers B_i MiB to llama.cpp, i.e. B_i is the *free* memory that card reports
at start (`llama-server --list-devices` prints it as "… MiB free"), not its nameplate total: a card's driver,
CUDA context and display take a few hundred MiB of the total before llama.cpp starts. To emulate a particular
card, take the free figure `--list-devices` prints on it. On the emulated card llama.cpp's fit would keep its
own margin M_i (1024 MiB by default; `[server] fit_target_mib` sets it), so it would stop at used_i ≤ B_i − M_i.
The margin that makes this device stop at the same point is

    fitt_i = free_i − (B_i − M_i) = free_i − B_i + M_i

which needs B_i ≤ free_i (this device must have at least the memory of the one it stands for) and B_i > M_i.

The layer split must follow the budgets too: with no `-ts`, llama.cpp splits layers in proportion to each
device's free memory, so on the emulated rig the split would be B_0 : B_1 : … . `emulate` adds `-ts B_0,B_1,…`
unless the study sets its own `-ts`/`--tensor-split`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.errors import ConfigError
from ..core.records import JsonObject
from ..llamacpp import argv
from ..logs.devicelist import DeviceMemory

DEFAULT_MARGIN_MIB = 1024  # llama.cpp's default -fitt (common_params.fit_params_target)

_UNITS = {
    "": 1.0,  # a bare number is MiB, like -fitt
    "b": 1 / 2**20,
    "k": 1 / 1024, "kib": 1 / 1024, "kb": 1e3 / 2**20,
    "m": 1.0, "mib": 1.0, "mb": 1e6 / 2**20,
    "g": 1024.0, "gib": 1024.0, "gb": 1e9 / 2**20,
    "t": 1024.0**2, "tib": 1024.0**2, "tb": 1e12 / 2**20,
}


MAX_MIB = 1 << 40  # a memory size beyond this (1,048,576 TiB) is a mistake
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """A memory size in MiB (rounded down). Binary units: K/KiB, M/MiB, G/GiB, T/TiB; SI units KB, MB, GB, TB
    are powers of ten (a "16GB" budget is 15258 MiB: write 16GiB for a 16 GiB card); a bare number is MiB."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise ConfigError(f"{text!r} is not a memory size.",
                          tip="write it like 16GiB, 12000MiB or 16G (G, GiB: 1024 MiB; GB: 10^9 bytes).")
    mib = float(m.group(1)) * _UNITS[unit]
    if not mib < MAX_MIB:  # 400 digits is a float's infinity, which no int holds
        raise ConfigError(f"{text!r} is more memory than any device has (at most {MAX_MIB // 2**20:,} TiB).",
                          tip="write it like 16GiB, 12000MiB or 16G (G, GiB: 1024 MiB; GB: 10^9 bytes).")
    return int(mib)


def parse_budgets(values: str | Sequence[str | int]) -> list[int]:
    """`"16GiB,12GiB"` or `["16GiB", "12GiB"]` → [16384, 12288]."""
    items = [values] if isinstance(values, str) else list(values)
    out = [parse_size(part) for v in items for part in (v.split(",") if isinstance(v, str) else [v])
           if str(part).strip()]
    if not out:
        raise ConfigError("no memory budget given.", tip="e.g. --budget 16GiB,12GiB (one per device).")
    return out


@dataclass(frozen=True)
class Emulation:
    """How this machine's devices stand in for the budgeted ones."""

    budgets_mib: tuple[int, ...]
    margins_mib: tuple[int, ...]  # llama.cpp's margin on the emulated card
    fit_targets_mib: tuple[int, ...]  # -fitt on this machine
    tensor_split: tuple[int, ...] | None  # -ts, None when the study sets its own
    devices: tuple[DeviceMemory, ...]

    def args(self) -> list[str]:
        out = ["-fitt", ",".join(str(x) for x in self.fit_targets_mib)]
        if self.tensor_split:
            out += ["-ts", ",".join(str(x) for x in self.tensor_split)]
        return out

    def as_dict(self) -> JsonObject:
        return {"budgets_mib": list(self.budgets_mib), "margins_mib": list(self.margins_mib),
                "fit_targets_mib": list(self.fit_targets_mib),
                "tensor_split": list(self.tensor_split) if self.tensor_split else None,
                "devices": [d.__dict__ for d in self.devices]}


def _per_device(values: Sequence[int], n: int, what: str) -> list[int]:
    if len(values) == 1:
        return list(values) * n
    if len(values) != n:
        raise ConfigError(f"{len(values)} {what} given for {n} device(s).",
                          tip=f"give one value per device ({n}), or a single value for all of them.")
    return list(values)


def emulate(budgets_mib: Sequence[int], devices: Sequence[DeviceMemory], *, margins_mib: Sequence[int] | None = None,
            user_args: Sequence[str] = ()) -> Emulation:
    """The `-fitt` (and `-ts`) that make `devices` behave like devices with `budgets_mib` free, or a ConfigError
    that says why they cannot."""
    n = len(devices)
    if n == 0:
        raise ConfigError("memory budgets need devices, but llama.cpp reported none.",
                          tip="check `llama-server --list-devices` (with the study's --rpc servers, or GPUs).")
    budgets = _per_device(list(budgets_mib), n, "memory budget(s)")
    margins = _per_device(list(margins_mib or [DEFAULT_MARGIN_MIB]), n, "fit margins ([server] fit_target_mib)")
    targets = []
    for dev, b, m in zip(devices, budgets, margins, strict=True):
        if b <= m:
            raise ConfigError(f"the budget of {b} MiB for {dev.name} is not more than the {m} MiB llama.cpp keeps free "
                              "on a device, so nothing could be loaded on it.",
                              tip="give a larger budget, or a smaller [server] fit_target_mib.")
        if b > dev.free_mib:
            raise ConfigError(
                f"a budget of {b} MiB cannot be emulated on {dev.name} ({dev.description}): it has only "
                f"{dev.free_mib} MiB free of {dev.total_mib} MiB. A device can stand for a smaller one, not a larger "
                "one.",
                tip="lower the budget, free memory on that device, or plan on a machine with larger devices.")
        targets.append(dev.free_mib - b + m)
    own_split = argv.has(user_args, *argv.TENSOR_SPLIT)
    return Emulation(budgets_mib=tuple(budgets), margins_mib=tuple(margins), fit_targets_mib=tuple(targets),
                     tensor_split=None if own_split or n == 1 else tuple(budgets), devices=tuple(devices))

