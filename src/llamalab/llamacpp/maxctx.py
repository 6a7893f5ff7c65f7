"""The largest context that really loads [pure parts]: probe arguments, the budget check of a loaded server's
ledger, and a bounded bisection over -c.

`--fit` keeps a safety margin (1024 MiB by default) and decides from projected buffers; the largest context that
loads is what the hardware (or, with `[devices] vram`, the emulated card) actually holds. With budgets, a probe
counts as loaded only if every device's allocated buffers (model + KV + compute + output, from the log) stay
within that device's budget: that is what a card with that much free memory could allocate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from . import argv

STEP = 256  # llama.cpp pads the context to multiples of 256


def probe_args(args: Sequence[str], n_ctx: int) -> list[str]:
    """The study's server arguments with fit off and the context fixed (any -c/-fitt/-fit dropped first)."""
    drop = ("-c", "--ctx-size", "-fitt", "--fit-target", "-fit", "--fit", "-fitc", "--fit-ctx")
    return argv.without(args, with_value=drop) + ["-fit", "off", "-c", str(n_ctx)]


def within_budgets(device_totals: Sequence[float], budgets_mib: Sequence[int] | None) -> tuple[bool, str | None]:
    """Whether each device's allocated MiB fits its budget (budgets in llama.cpp's device order)."""
    if not budgets_mib:
        return True, None
    if len(budgets_mib) == 1:
        budgets_mib = list(budgets_mib) * len(device_totals)
    over = [f"device {i}: {t:,.0f} > {b:,} MiB" for i, (t, b) in enumerate(zip(device_totals, budgets_mib)) if t > b]
    return (not over), ("over budget: " + "; ".join(over)) if over else None


@dataclass
class Search:
    steps: list[dict] = field(default_factory=list)
    max_loaded: int | None = None


def search(lo: int, hi: int, probe: Callable[[int], dict], *, max_probes: int = 6) -> Search:
    """Largest n in [lo, hi] (multiples of STEP) for which `probe(n)["loaded"]` is true, assuming that loading is
    monotonic in n. `lo` is probed first (the fitted context: is it verified?), then `hi`, then bisection, at most
    `max_probes` loads in all. Where even `lo` fails, the search continues below it."""
    res = Search()

    def run(n: int) -> bool:
        r = {"n_ctx": n, **probe(n)}
        res.steps.append(r)
        if r["loaded"] and (res.max_loaded is None or n > res.max_loaded):
            res.max_loaded = n
        return bool(r["loaded"])

    lo = max(STEP, lo // STEP * STEP)
    hi = max(lo, hi // STEP * STEP)
    good, bad = (lo, None) if run(lo) else (None, lo)
    if good is not None and hi > lo and len(res.steps) < max_probes:
        if run(hi):
            return res
        bad = hi
    if good is None:
        good_floor = STEP
        bad_ceiling = lo
        lo_, hi_ = good_floor, bad_ceiling
    else:
        lo_, hi_ = good, bad
    while hi_ is not None and hi_ - lo_ > STEP and len(res.steps) < max_probes:
        mid = (lo_ + hi_) // 2 // STEP * STEP
        if mid <= lo_:
            break
        if run(mid):
            lo_ = mid
        else:
            hi_ = mid
    return res
