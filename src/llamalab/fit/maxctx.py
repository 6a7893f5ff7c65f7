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

from ..core.records import JsonObject
from ..llamacpp import argv

STEP = 256  # llama.cpp pads the context to multiples of 256


def probe_args(args: Sequence[str], n_ctx: int, *, fit: bool = True) -> list[str]:
    """The study's server arguments with fit off and the context fixed (any -c/-fitt/-fit dropped first). `fit`:
    the engine has llama.cpp's fit to turn off (ik_llama.cpp has none of the context: only -c is set)."""
    if not fit:
        return argv.without(args, with_value=("-c", "--ctx-size")) + ["-c", str(n_ctx)]
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
    steps: list[JsonObject] = field(default_factory=list)
    max_loaded: int | None = None


def search(lo: int, hi: int, probe: Callable[[int], JsonObject], *, max_probes: int = 6) -> Search:
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
    hi_: int | None
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


# ---------------------------------------------------------------- the largest context within per-device limits


@dataclass(frozen=True)
class WithinFit:
    """The largest context (a multiple of STEP, at most the cap) whose projected memory keeps every device within
    its limit, from dry runs at fixed contexts. `n_ctx` None: none fits, not even STEP tokens — `over_mib` says by
    how much the worst device (`worst`) is over at the smallest context measured. `exact`: n_ctx is within the
    limits and n_ctx + STEP was measured over them (or n_ctx is the cap); otherwise the run budget ran out and
    n_ctx is only a context known to fit. `error`: a dry run gave no figures (n_ctx is then what was known)."""

    n_ctx: int | None
    exact: bool
    over_mib: float | None = None
    worst: int | None = None
    over_at: int | None = None  # the context over_mib was measured at
    probes: tuple[tuple[int, tuple[float, ...]], ...] = ()
    error: str | None = None


Measure = Callable[[int], "Sequence[float] | str"]  # n_ctx → MiB per device, or why the dry run gave none


def within_limits(used: Sequence[float], limits: Sequence[float]) -> bool:
    return all(u <= lim for u, lim in zip(used, limits, strict=True))


def largest_within(measure: Measure, limits: Sequence[float], cap: int, *, start: int | None = None,
                   slopes: Sequence[float] | None = None, known: dict[int, tuple[float, ...]] | None = None,
                   max_runs: int = 12) -> tuple[WithinFit, dict[int, tuple[float, ...]]]:
    """Search by dry runs for the largest multiple of STEP ≤ `cap` whose memory stays within every device's limit.

    Memory per device is close to linear in the context (KV cache exactly, compute buffers nearly), so each next
    context is the linear prediction through the two measured points nearest the bracket (or one point and the
    `slopes` given), kept strictly inside the bracket [largest known within, smallest known over]; where no
    prediction lands inside, the bracket's midpoint. Every measurement narrows the bracket, so the search ends,
    exactly, when the bracket is one step wide; `max_runs` bounds it. `known` (n_ctx → MiB per device, e.g. from a
    search against other limits over the same configuration) is used first and returned with the new points."""
    cache: dict[int, tuple[float, ...]] = dict(known or {})
    top = max(STEP, cap // STEP * STEP)
    lim = tuple(float(x) for x in limits)
    runs = 0
    error = None

    def fits(n: int) -> bool:
        return within_limits(cache[n], lim)

    def bracket() -> tuple[int, int]:
        """(largest known within or 0, smallest known over or top + STEP), over the points ≤ top."""
        good = max((n for n in cache if n <= top and fits(n)), default=0)
        bad = min((n for n in cache if n <= top and n > good and not fits(n)), default=top + STEP)
        return good, bad

    while True:
        good, bad = bracket()
        if bad - good <= STEP or runs >= max_runs:
            break
        n = _next_context(cache, lim, good, bad, start if not cache else None, slopes)
        got = measure(n)
        runs += 1
        if isinstance(got, str):
            error = got
            break
        cache[n] = tuple(float(x) for x in got)
    good, bad = bracket()
    probes = tuple(sorted(cache.items()))
    if good == 0:
        low = min(cache) if cache else None
        over = None
        worst = None
        if low is not None:
            excess = [u - x for u, x in zip(cache[low], lim, strict=True)]
            worst = max(range(len(excess)), key=lambda i: excess[i])
            over = round(excess[worst], 2)
        return WithinFit(n_ctx=None, exact=error is None and bad == STEP, over_mib=over, worst=worst, over_at=low,
                         probes=probes, error=error), cache
    return WithinFit(n_ctx=good, exact=error is None and bad - good <= STEP, probes=probes, error=error), cache


def _next_context(cache: dict[int, tuple[float, ...]], lim: tuple[float, ...], good: int, bad: int,
                  start: int | None, slopes: Sequence[float] | None) -> int:
    """The next context to measure, strictly inside (good, bad) on the STEP grid."""
    lo, hi = good + STEP, bad - STEP

    def inside(n: int) -> int | None:
        n = n // STEP * STEP
        return n if lo <= n <= hi and n not in cache else None

    if start is not None and (n := inside(start)) is not None:
        return n
    pred = _predict(cache, lim, good, bad, slopes)
    if pred is not None:
        n = inside(pred)
        if n is None and pred >= hi:
            n = inside(hi)  # predicted beyond the bracket: the top of it
        elif n is None and pred < lo:
            n = inside(lo)  # predicted below: the bottom of it
        if n is not None:
            # a prediction at the known good point's next step confirms it; otherwise one step past the prediction
            # is as likely to hold as not, and the prediction itself is the better bet
            return n
    if not cache:
        return hi  # nothing known: the cap itself, which settles it when everything fits
    return inside((lo + hi) // 2) or lo


def _predict(cache: dict[int, tuple[float, ...]], lim: tuple[float, ...], good: int, bad: int,
             slopes: Sequence[float] | None) -> int | None:
    """The largest context within every limit on the lines through the two measured points nearest the bracket
    (one point and `slopes` where only one is known). None where nothing can be predicted."""
    pts = sorted(cache, key=lambda n: (min(abs(n - good), abs(n - bad)), n))
    if not pts:
        return None
    if len(pts) >= 2:
        n1, n2 = sorted(pts[:2])
        u1, u2 = cache[n1], cache[n2]
        b = [(y - x) / (n2 - n1) for x, y in zip(u1, u2, strict=True)]
        base_n, base_u = n1, u1
    elif slopes is not None:
        base_n, base_u, b = pts[0], cache[pts[0]], [float(s) for s in slopes]
    else:
        return None
    best = float("inf")
    for u, s, x in zip(base_u, b, lim, strict=True):
        room = x - u
        if s > 1e-12:
            best = min(best, base_n + room / s)
        elif room < 0:
            return STEP  # over its limit whatever the context: the smallest context settles it
    if best == float("inf"):
        return 1 << 40
    return int(max(best, 0))


def within_text(d: JsonObject) -> str:
    """A stored search's answer in words (a `fit.budgetfit.Limit` as a dict): "24,832 tokens", "does not fit at any
    context (RPC1 is 11.8 MiB over at 256 tokens)", or why it is unknown."""
    if d.get("n_ctx"):
        return f"{d['n_ctx']:,} tokens" + ("" if d.get("exact") or d.get("error") else " (at least)")
    if d.get("error"):
        return f"unknown ({d['error']})"
    if d.get("over_mib") is not None:
        return (f"does not fit at any context ({d.get('worst') or 'a device'} is {d['over_mib']:,.1f} MiB over "
                f"at {d.get('over_at') or STEP:,} tokens)")
    return "unknown"
