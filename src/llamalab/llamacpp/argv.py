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
