"""The largest context a configuration holds within every device's budget, from llama.cpp's own dry runs.

llama.cpp's `--fit` shrinks the context for the *total* free memory and, where `-ngl` is given, stops before it
places layers per device: a device can end over its budget (a tied-embedding model's last device holds the output
matrix), and the context it fitted would then not load on such a card. This search answers per device instead:
dry runs of the configuration's exact arguments (budget emulation and layer split included) at fixed contexts
(`-c N`: llama.cpp projects every buffer, no weight is read) find the largest multiple of 256 tokens, at most the
model's training context, that keeps

- every device within its budget — what would load on a card with that much free memory. A dry run's figures
  differ from a full load's in two known ways, and that much is kept free: its model figure is whole MiB rounded
  down (1 MiB on every device), and on every device after the first its compute buffer has differed by up to
  n_copies × n_ubatch × n_embd × 4 bytes (the pipeline's input copies; benchmarks/plan-validation.md);
- every device within its budget less llama.cpp's margin — what llama.cpp's own fit aims for; this one may be "does
  not fit at any context", with how far the worst device is over at the smallest context.

`run` (where llama.cpp's fit left a device over its budget) and `plan` search with this one function
(`setup.configplan.within_budgets` gives it the configuration's dry runs); tune's stage one verifies its candidates
with the same arithmetic, `fit.maxctx.largest_within` (pure), on its own dry runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from . import maxctx


@dataclass(frozen=True)
class Limit:
    """One search's answer, in words a report can use."""

    n_ctx: int | None  # None: not even STEP tokens fit
    exact: bool  # n_ctx fits and n_ctx + 256 does not (or n_ctx is the model's limit)
    over_mib: float | None = None  # n_ctx None: MiB the worst device is over at the smallest context measured
    worst: str | None = None  # that device
    over_at: int | None = None  # the context it was measured at
    error: str | None = None  # a dry run gave no figures


@dataclass
class BudgetFit:
    """Within the budgets and within the budgets less the margin, for one configuration."""

    devices: list[str]
    budgets_mib: list[int]
    margins_mib: list[int]
    allowance_mib: list[float]  # kept free per device for the dry run's known error on later devices
    cap: int  # the model's training context
    budget: Limit
    margin: Limit
    probes: list[dict] = field(default_factory=list)  # every dry run: n_ctx and MiB per device
    dry_runs: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def _limit(r: maxctx.WithinFit, names: Sequence[str]) -> Limit:
    return Limit(n_ctx=r.n_ctx, exact=r.exact, over_mib=r.over_mib,
                 worst=names[r.worst] if r.worst is not None else None, over_at=r.over_at, error=r.error)


def search(measure: maxctx.Measure, names: Sequence[str], budgets_mib: Sequence[int], margins_mib: Sequence[int],
           allowance_mib: Sequence[float], cap: int, *, start: int | None = None,
           slopes: Sequence[float] | None = None, known: dict[int, tuple[float, ...]] | None = None,
           max_runs: int = 12) -> BudgetFit:
    """Both searches over one measure function (a dry run per call), the second reusing the first's dry runs;
    `known` holds dry runs already made (n_ctx → MiB per device)."""
    t0 = time.monotonic()
    runs = [0]

    def counted(n: int):
        runs[0] += 1
        return measure(n)

    full = [b - a for b, a in zip(budgets_mib, allowance_mib, strict=True)]
    within, cache = maxctx.largest_within(counted, full, cap, start=start, slopes=slopes, known=known,
                                          max_runs=max_runs)
    less = [b - m for b, m in zip(budgets_mib, margins_mib, strict=True)]
    margin, cache = maxctx.largest_within(counted, less, cap, slopes=slopes, known=cache, max_runs=max_runs)
    return BudgetFit(devices=list(names), budgets_mib=list(budgets_mib), margins_mib=list(margins_mib),
                     allowance_mib=[round(a, 2) for a in allowance_mib], cap=cap, budget=_limit(within, names),
                     margin=_limit(margin, names),
                     probes=[{"n_ctx": n, "devices_mib": [round(u, 2) for u in used]}
                             for n, used in sorted(cache.items())],
                     dry_runs=runs[0], seconds=round(time.monotonic() - t0, 2))


def input_copies_mib(cp) -> float | None:
    """n_copies × n_ubatch × n_embd × 4 bytes in MiB: how far a later device's dry-run compute figure was from the
    full load's on CPU-RPC (the pipeline's copies of a split's f32 input). `cp`: a `plan.plan.ConfigPlan`."""
    if not (cp.sched_copies and cp.n_ubatch and cp.n_embd):
        return None
    return cp.sched_copies * cp.n_ubatch * cp.n_embd * 4 / 2**20


def allowance(cp, names: Sequence[str], reference: Sequence[float] | None = None) -> list[float]:
    """MiB kept free per device (in `names` order) for the dry run's known errors against a full load, from a dry
    run `cp` (a `plan.plan.ConfigPlan`). With `reference` (each device's allocated MiB in a full load of the same
    configuration at the dry run's context: the study's own server), the difference itself, per device, plus 1 MiB
    where the dry run's KV figure is the breakdown table's whole MiB (which rounds down differently at another
    context). Without one: 1 MiB for the table's rounding of the model figure, the same for a KV figure from the
    table, and the pipeline's input copies on every device after the first."""
    by = {d.name: d for d in cp.devices}
    table_kv = [0.0 if n in by and by[n].kv_layers else 1.0 for n in names]
    used = [(by[n].used_mib or 0.0) if n in by else 0.0 for n in names]
    if reference is not None and len(reference) == len(names):
        return [round(max(0.0, r - u) + k, 2) for r, u, k in zip(reference, used, table_kv, strict=True)]
    extra = round(input_copies_mib(cp) or 0.0, 2)
    return [round(1.0 + (extra if i else 0.0) + table_kv[i], 2) for i in range(len(names))]


DryRunAt = Callable[[int], Any]  # n_ctx → a `plan.plan.ConfigPlan` of the configuration's dry run at -c n_ctx


def for_config(dry_run_at: DryRunAt, names: Sequence[str], budgets_mib: Sequence[int], margins_mib: Sequence[int],
               cap: int, *, start: int | None = None, reference: Sequence[float] | None = None) -> BudgetFit:
    """The search for one configuration of a budgeted study: `dry_run_at(n)` dry-runs it at -c n (on devices set
    up by the caller, under the budget emulation whose devices are `names`, in llama.cpp's order, with these
    budgets and margins). `start`: the first context to dry-run (the context the study's server ran with);
    `reference`: that server's allocated MiB per device, in llama.cpp's order, against which the dry run's error is
    measured (see `allowance`). `cap`: the model's training context."""
    seen: list = []

    def measure(n: int):
        cp = dry_run_at(n)
        if cp.status != "ok":
            return cp.reason or cp.status
        seen.append(cp)
        by = {d.name: d for d in cp.devices}
        return [(by[x].used_mib or 0.0) if x in by else 0.0 for x in names]

    n0 = max(maxctx.STEP, min(start or cap, cap) // maxctx.STEP * maxctx.STEP) if cap else 0
    first = measure(n0) if cap else None
    if not cap or isinstance(first, str) or first is None:
        why = "the model's header gives no training context" if not cap else first or "no figures"
        none = Limit(n_ctx=None, exact=False, error=why)
        return BudgetFit(devices=list(names), budgets_mib=list(budgets_mib), margins_mib=list(margins_mib),
                         allowance_mib=[0.0] * len(names), cap=cap, budget=none, margin=none,
                         dry_runs=1 if cap else 0)  # without a training context nothing was dry-run
    ref = reference if reference is not None and start is not None and n0 == start else None
    fit = search(measure, names, budgets_mib, margins_mib, allowance(seen[-1], names, ref), cap,
                 known={n0: tuple(first)})
    fit.dry_runs += 1  # the first, made here for the allowance
    return fit


def step_down(fit: dict, n_ctx: int, over_mib: Sequence[float]) -> int | None:
    """After a load at `n_ctx` that went over its budgets by `over_mib` per device (≤ 0: within), the next lower
    context to load: down by the worst device's overflow over its MiB per token (from the search's dry runs), in
    whole steps, at least one. None where nothing lower is left."""
    probes = sorted((p["n_ctx"], p["devices_mib"]) for p in fit.get("probes") or [])
    drop = maxctx.STEP
    for i, over in enumerate(over_mib):
        if over <= 0:
            continue
        pts = [(n, u[i]) for n, u in probes if i < len(u)]
        slope = (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]) if len(pts) >= 2 and pts[-1][0] > pts[0][0] \
            else 0.0
        if slope > 0:
            drop = max(drop, math.ceil(over / slope / maxctx.STEP) * maxctx.STEP)
    nxt = (n_ctx - int(drop)) // maxctx.STEP * maxctx.STEP
    return nxt if nxt >= maxctx.STEP else None


def summary(fit: BudgetFit | dict) -> str:
    d = fit if isinstance(fit, dict) else fit.as_dict()
    return (f"{maxctx.within_text(d['budget'])} within every budget, {maxctx.within_text(d['margin'])} within every "
            "budget less llama.cpp's margin")
