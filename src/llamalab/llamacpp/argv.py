"""llama-server argument lists [pure]: the one place they are read and edited.

A flag is given as `-np 4` or `--parallel=4`, and a long option may be spelled with `_` for `-` (`--log_file`:
llama.cpp's parser turns `_` into `-` in long options); `name_of` (flags.py) gives the flag as llama.cpp reads it,
and every reader here, the trust gate and the unknown-flag check compare those names. Where a flag has aliases the
caller names them all (the constants below, from `flags`' table). Reading returns what llama.cpp would see (its
argument parser lets the last occurrence win)."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from . import flags
from .flags import SPLIT_MODES
from .flags import name_of as name_of  # re-exported: argv's callers read flags with it

PARALLEL = flags.names("-np")
TENSOR_SPLIT = flags.names("-ts")
SPLIT_MODE = flags.names("-sm")
FIT_TARGET = flags.names("-fitt")
CTX_SIZE = flags.names("-c")
CACHE_RAM = flags.names("-cram")


def occurrences(args: Sequence[str], *names: str) -> list[tuple[str, str]]:
    """(flag as written, value) of each occurrence of any of `names`, in order: `-np 4` and `--parallel=4` alike
    (a flag at the end without its value has the value "")."""
    out = []
    for i, a in enumerate(args):
        _, eq, inline = a.partition("=")
        name = name_of(a)
        if name in names:
            out.append((name, inline if eq else (args[i + 1] if i + 1 < len(args) else "")))
    return out


def value(args: Sequence[str], *names: str) -> str | None:
    """The value of the last of `names` given (as llama.cpp reads it), or None where none is."""
    found = occurrences(args, *names)
    return found[-1][1] if found else None


def has(args: Sequence[str], *names: str) -> bool:
    """Whether any of `names` is given (bare or with a value, `=` form included)."""
    return any(name_of(a) in names for a in args)


def without(args: Sequence[str], with_value: Collection[str] = (), bare: Collection[str] = ()) -> list[str]:
    """`args` without the flags in `with_value` (each with the value that follows it, or its `=` value) and those
    in `bare`."""
    out: list[str] = []
    skip = False
    for a in args:
        eq = "=" in a
        name = name_of(a)
        if skip:
            skip = False
        elif name in with_value:
            skip = not eq
        elif name not in bare:
            out.append(a)
    return out


def replaced(args: Sequence[str], extra: Sequence[str]) -> list[str]:
    """`args` with each flag of `extra` (`-fitt X -ts Y …`, a flag and its value each) replaced, aliases and all
    (flags.names), or added where absent: the old occurrences are dropped and `extra` is appended."""
    drop = {name for i in range(0, len(extra), 2) for name in flags.names(extra[i])}
    return without(args, with_value=drop) + list(extra)


def put(args: Sequence[str], flag: str, new: str) -> list[str]:
    """`args` with the value of `flag` (no aliases) set to `new` where it first occurs (later occurrences dropped),
    or `flag new` appended where absent."""
    if not has(args, flag):
        return [*args, flag, new]
    out: list[str] = []
    skip = placed = False
    for a in args:
        eq = "=" in a
        name = name_of(a)
        if skip:
            skip = False
        elif name == flag:
            skip = not eq
            if not placed:
                out += [flag, new]
                placed = True
        else:
            out.append(a)
    return out


def tensor_split(args: Sequence[str]) -> list[float] | None:
    """The `-ts`/`--tensor-split` proportions in `args` (llama.cpp's `3,1` or `3/1`; the last flag wins), or None
    where absent or not (finite) numbers."""
    found = value(args, *TENSOR_SPLIT)
    if not found:
        return None
    try:
        out = [float(x) for x in found.replace("/", ",").split(",") if x.strip()]
    except ValueError:
        return None
    return out if all(math.isfinite(x) for x in out) else None  # nan and inf are no proportions


def split_mode(args: Sequence[str]) -> str:
    """The `-sm`/`--split-mode` in `args` (the last valid one wins), or llama.cpp's default, `layer`."""
    return next((v for _, v in reversed(occurrences(args, *SPLIT_MODE)) if v in SPLIT_MODES), "layer")


def n_slots(args: Sequence[str]) -> int:
    """The -np the server runs with: the last whole number given, as llama-server reads it (its own default, 4,
    where the arguments do not say; the study checked each is a whole number)."""
    return next((int(v) for _, v in reversed(occurrences(args, *PARALLEL)) if is_count(v)), 4)


def is_count(value: str) -> bool:
    """A whole number as llama.cpp's std::stoi reads one: ASCII digits only (`str.isdecimal` also takes `１` and `٣`,
    which Python's int() reads and llama.cpp does not)."""
    return value.isascii() and value.isdigit()
