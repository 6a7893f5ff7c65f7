"""llama-server argument lists [pure]."""

from __future__ import annotations

from collections.abc import Collection, Sequence


def without(args: Sequence[str], with_value: Collection[str] = (), bare: Collection[str] = ()) -> list[str]:
    """`args` without the flags in `with_value` (each with the value that follows it) and those in `bare`."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in with_value:
            skip = True
        elif a not in bare:
            out.append(a)
    return out


def tensor_split(args: Sequence[str]) -> list[float] | None:
    """The `-ts`/`--tensor-split` proportions in `args` (llama.cpp's `3,1` or `3/1`; the last flag wins), or None
    where absent or not numbers."""
    found = None
    for i, a in enumerate(args):
        name, eq, inline = a.partition("=")
        if name in ("-ts", "--tensor-split"):
            found = inline if eq else (args[i + 1] if i + 1 < len(args) else None)
    if not found:
        return None
    try:
        return [float(x) for x in found.replace("/", ",").split(",") if x.strip()]
    except ValueError:
        return None


SPLIT_MODES = ("none", "layer", "row", "tensor")


def split_mode(args: Sequence[str]) -> str:
    """The `-sm`/`--split-mode` in `args` (the last flag wins), or llama.cpp's default, `layer`."""
    mode = "layer"
    for i, a in enumerate(args):
        name, eq, inline = a.partition("=")
        if name in ("-sm", "--split-mode"):
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            if value in SPLIT_MODES:
                mode = value
    return mode
