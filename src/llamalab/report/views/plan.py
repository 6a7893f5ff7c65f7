"""`llamalab plan`'s terminal view [pure]: the table of each configuration's memory per device, the copies' cost
and the notes, from the records `plan.plan` makes (`Plan`, `ConfigPlan`)."""

from __future__ import annotations

from rich.text import Text as RichText

from ...core.safetext import rich_text as Text  # never markup, no control sequences: names and reasons come from logs
from ...fit import maxctx
from ...logs import ledger
from ...logs.applicability import NOT_APPLICABLE
from ...plan.plan import BASIS_APPROX, Plan
from ...setup.configplan import ConfigPlan, input_copies_mib


def _mib(v: float | None, approx: bool = False) -> str:
    if v is None:
        return "–"
    s = f"{v:,.0f}" if abs(v) >= 1000 else f"{v:,.2f}".rstrip("0").rstrip(".")
    return ("~" if approx else "") + s


def render(plan: Plan, width: int | None = None):
    """A rich renderable: the table, the copies' cost and the notes."""
    from rich.console import Group

    return Group(_table(plan), *_notes(plan))


def _table(plan: Plan):
    """One row per configuration: PP, n_ctx, and model / context / compute MiB per device and host buffer type."""
    from rich.table import Table

    basis = plan.basis()
    approx = {k: v == BASIS_APPROX for k, v in basis.items()}
    names = list(dict.fromkeys(d.name for c in plan.configs for d in c.devices))
    t = Table(title=Text(f"{plan.study}: memory plan (MiB) — dry runs on {plan.backend}, for {plan.target}"),
              show_lines=False)
    within = any(c.within for c in plan.configs)
    for h in ("build", "setting", "PP", "n_ctx", *(("within budgets", "less margin") if within else ())):
        t.add_column(h, justify="left" if h in ("build", "setting") else "right")
    hosts = list(dict.fromkeys(h.name for c in plan.configs for h in c.host_buffers))
    for n in [*names, "host", *hosts]:
        t.add_column(Text(f"{n}{' (host)' if n in hosts else ''}\nmodel / ctx / compute"), justify="right")
    for c in plan.configs:
        if c.status == NOT_APPLICABLE:
            t.add_row(Text(c.build), Text(c.setting), "", "", Text(f"not applicable: {(c.reason or '')[:120]}",
                                                                   style="yellow"))
            continue
        if c.status != "ok":
            t.add_row(Text(c.build), Text(c.setting), "", "", Text(f"failed: {(c.reason or '')[:80]}", style="red"))
            continue
        pp = ledger.pp_label(c.pipeline_parallel, c.sched_copies, c.pipeline_parallel)
        if c.copies_mismatch:
            pp += " !"
        shown = _mib(c.n_ctx, approx["n_ctx"]) if c.n_ctx is not None else "–"
        ctx: str | RichText = shown
        if c.fit_ok is False:
            ctx = Text(shown.replace(",", "") + " (fit failed)", style="yellow")
        elif c.ctx_reduced_from:
            ctx = shown + " (fit)"
        w = [_within_cell((c.within or {}).get(k) or {}) for k in ("budget", "margin")] if within else []
        t.add_row(Text(c.build), Text(c.setting), pp, ctx if not isinstance(ctx, str) else ctx.replace(",", ""), *w,
                  *_buffer_cells(c, names, hosts, approx["compute"]))
    return t


def _buffer_cells(c: ConfigPlan, names: list[str], hosts: list[str], approx_compute: bool) -> list:
    """A configuration's "model / ctx / compute" cells: each device (red where over its budget, empty where it has
    none), the host, then each host buffer type."""
    cells: list = []
    for n in names:
        d = next((x for x in c.devices if x.name == n), None)
        if d is None:
            cells.append("")
            continue
        cell = f"{_mib(d.model_mib)} / {_mib(d.context_mib)} / {_mib(d.compute_mib, approx_compute)}"
        cells.append(Text(cell, style="red") if n in c.over_budget else cell)
    h = c.host
    cells.append(f"{_mib(h.model_mib)} / {_mib(h.context_mib)} / {_mib(h.compute_mib, approx_compute)}"
                 if h else "")
    for n in hosts:
        hb = next((x for x in c.host_buffers if x.name == n), None)
        cells.append(f"{_mib(hb.model_mib)} / {_mib(hb.context_mib)} / {_mib(hb.compute_mib)}" if hb else "")
    return cells


def _within_cell(lim: dict):
    """A searched context within the budgets (or less the margin): the tokens, "none" (not even 256 tokens fit),
    or "?" (unknown)."""
    if lim.get("n_ctx"):
        return f"{lim['n_ctx']}" + ("" if lim.get("exact") else "+")
    if lim.get("over_mib") is not None and not lim.get("error"):
        return Text("none", style="red")
    return Text("?", style="yellow") if lim else ""


def _notes(plan: Plan) -> list:
    """What the table cannot say: skipped builds, failed fits, budgets overrun, the copies' cost, the basis."""
    parts: list = []
    for b, why in plan.not_applicable.items():
        parts.append(Text(f"build {b} does not apply to this rig: {why}", style="yellow"))
    for b, why in plan.skipped.items():
        parts.append(Text(f"build {b} not planned: {why}", style="yellow"))
    parts += _fit_failed_notes(plan)
    for c in plan.configs:
        if c.within:
            how = "loads" if c.within.get("engine") else "dry runs"  # an engine without a fit: real loads
            parts.append(Text(f"{c.build} × {c.setting}: {maxctx.within_text(c.within['budget'])} within every "
                              f"budget, {maxctx.within_text(c.within['margin'])} within every budget less the "
                              f"margin ({how} at fixed contexts; {c.within.get('why')})"))
    parts += _budget_notes(plan)
    for cc in plan.copies_costs:
        devs = ", ".join(f"{n} {v:+,.2f}" for n, v in cc.devices_mib.items())
        ctx = f"; context {cc.n_ctx_delta:+,} tokens with {cc.baseline}" if cc.n_ctx_delta else ""
        at = f" at n_ctx {cc.at_n_ctx}" if cc.at_n_ctx else ""
        parts.append(Text(f"• {cc.setting}: {cc.build}'s {cc.copies} scheduler copies cost {cc.total_mib:,.2f} MiB "
                          f"of compute over {cc.baseline}{at} ({devs}; host {cc.host_mib:+,.2f}){ctx}"))
    return parts + _basis_notes(plan)


def _fit_failed_notes(plan: Plan) -> list:
    """One note per distinct message of llama.cpp's failed fits, with how many configurations said it."""
    parts: list = []
    failed = [c for c in plan.configs if c.status == "ok" and c.fit_ok is False]
    for msg in dict.fromkeys(c.fit_message or "no reason printed" for c in failed):
        these = [c for c in failed if (c.fit_message or "no reason printed") == msg]
        reduced = any(c.ctx_reduced_from for c in these)
        parts.append(Text(
            f"llama.cpp's fit FAILED in {len(these)} configuration(s) ({msg})"
            + (": it had reduced the context to fit the total memory, then stopped before fitting the layers to "
               "each device, so the n_ctx shown is the reduced one and a device may hold more than its budget "
               "(red cells); to let the fit place layers, leave -ngl out of the study's server args"
               if reduced else ": the server would run with the parameters as given"), style="yellow"))
    return parts


def _budget_notes(plan: Plan) -> list:
    """Copies that differ from the expected, devices over their budget beyond the margin (would not load), then the
    devices that keep less than their margin free."""
    parts: list = []
    thin: dict[tuple[str, int], list[float]] = {}  # (device, margin) → MiB left free, per configuration
    for c in plan.configs:
        if c.copies_mismatch:
            parts.append(Text(f"{c.build} × {c.setting}: {c.copies_mismatch}", style="yellow"))
        for n, over in c.over_budget.items():
            i = next((k for k, d in enumerate(c.devices) if d.name == n), 0)
            margin = (c.margins_mib or [0])[min(i, len(c.margins_mib or [0]) - 1)]
            if over > margin:
                parts.append(Text(f"{c.build} × {c.setting}: {n} needs {over - margin:,.0f} MiB more than its budget: "
                                  "this configuration would not load on that card", style="red"))
            else:
                thin.setdefault((n, margin), []).append(margin - over)
    for (n, margin), left in thin.items():
        parts.append(Text(f"{n} keeps less than its {margin} MiB margin free in {len(left)} configuration(s) "
                          f"({min(left):,.0f}–{max(left):,.0f} MiB): llama.cpp's fit balances the total over the "
                          "devices, and a fixed -ngl keeps it from moving layers", style="yellow"))
    return parts


def _basis_notes(plan: Plan) -> list:
    """The dim lines closing the notes: the budgets and -fitt, the compute slack of input copies, what the figures
    are based on, the plan's own notes and the dry runs it took."""
    parts: list = []
    if plan.configs and (budgets := plan.configs[0].budgets_mib):
        c0 = plan.configs[0]
        parts.append(Text(f"budgets {', '.join(f'{b:,} MiB' for b in budgets)} free per device, llama.cpp "
                          f"margin {', '.join(str(m) for m in c0.margins_mib or [])} MiB → -fitt "
                          f"{','.join(str(x) for x in c0.fit_targets_mib or [])} here", style="dim"))
    slack = max((input_copies_mib(c) or 0.0 for c in plan.configs if len(c.devices) > 1), default=0.0)
    if slack:
        parts.append(Text(f"compute after the first device: a full load may differ by up to the pipeline's input "
                          f"copies, n_copies × n_ubatch × n_embd × 4 B (here ≤ {slack:,.2f} MiB; measured on "
                          "CPU-RPC, benchmarks/plan-validation.md)", style="dim"))
    legend = ("figures from dry runs on the target backend: model and context exact; compute is llama.cpp's "
              "projection (see --json accuracy)" if plan.target == plan.backend else
              f"model and context: backend-independent, exact for {plan.target}; ~ marks CPU-RPC approximations "
              f"of {plan.target}'s compute buffers and context")
    parts.append(Text(legend, style="dim"))
    for n in plan.notes:
        parts.append(Text(n, style="dim"))
    parts.append(Text(f"{sum(c.dry_runs for c in plan.configs)} dry runs in {plan.seconds:.1f} s", style="dim"))
    return parts
