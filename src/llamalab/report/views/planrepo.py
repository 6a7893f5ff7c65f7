"""The repository table of `llamalab plan --model hf://OWNER/REPO` (`plan.repo.RepoPlan`): terminal, Markdown
(pure but for `print_table`)."""

from __future__ import annotations

import sys

from ...core.safetext import md_prose, md_text
from ...plan.repo import QuantRow, RepoPlan
from ..analysis.tables import markdown_table


def _gib(n_bytes: int | None) -> str:
    return "?" if n_bytes is None else f"{n_bytes / 2**30:,.2f} GiB"


def _ctx(n: int | None, over: dict[str, float] | None = None) -> str:
    """A fitted context; where a device ends over its budget there (llama.cpp's fit sized the context by the
    total, and a study's -ngl 999 kept it from moving layers), by how much."""
    if not n:
        return "–"
    return f"{n:,}" + (" (over: " + ", ".join(f"{k} +{v:,.0f} MiB" for k, v in over.items()) + ")" if over else "")


def _budgets(mib: list[float] | None) -> str:
    return " + ".join(f"{x / 1024:,.1f}" for x in mib) + " GiB" if mib else "–"


def head(plan: RepoPlan) -> list[str]:
    out = ["Quant", "File", "Size", "Fits", "Context (llama.cpp's default)", "Context (no pipeline parallelism)"]
    if plan.context:
        out.append(f"Needs for {plan.context:,} tokens")
    return out


def cells(plan: RepoPlan, r: QuantRow) -> list[str]:
    files = r.files[0] + (f" (+{len(r.files) - 1} parts)" if len(r.files) > 1 else "")
    if r.status != "ok":
        fits = f"failed: {r.reason or '?'}"
    else:
        fits = "yes" if r.fits else "no"
    row = [r.quant, files, _gib(r.size_bytes), fits, _ctx(r.n_ctx, r.over_mib), _ctx(r.n_ctx_no_pp, r.no_pp_over_mib)]
    if plan.context:
        if r.need_mib:
            row.append(_budgets(r.need_mib) + ("" if r.need_fits is None else " (fits)" if r.need_fits
                                              else " (more than the budgets)"))
        else:
            row.append(r.need_note or "–")
    return row


def lines(plan: RepoPlan) -> list[str]:
    out = []
    if plan.budgets_mib:
        out.append("budgets " + ", ".join(f"{n or f'device {i}'} {b:,} MiB" for i, (n, b) in
                                          enumerate(zip(plan.devices or [""] * len(plan.budgets_mib),
                                                        plan.budgets_mib, strict=False)))
                   + f" (llama.cpp keeps {', '.join(str(m) for m in plan.margins_mib or [])} MiB free on each)")
    out.append(f"dry runs of the study's build {plan.build} ({plan.llama_cpp}) on {plan.backend} with "
               f"{' '.join(plan.args) or 'no arguments'} (and llamalab's -np/-kvu); no pipeline parallelism: "
               "-ot no_such_tensor=CPU added (no weight moves); fits: every device within its budget less the margin "
               "at that context")
    if plan.context:
        out.append(f"needs for {plan.context:,} tokens: per device, llama.cpp's projected use at -c {plan.context} "
                   "(layers split as the budgets split them) plus its margin")
    out += plan.notes
    out += [f"not a model: {p} ({why})" for p, why in plan.skipped]
    out.append(f"{len(plan.rows)} model(s), {sum(r.dry_runs for r in plan.rows)} dry runs, {plan.seconds:.1f} s")
    return out


def markdown(plan: RepoPlan) -> str:
    body = [cells(plan, r) for r in plan.rows]
    text = [f"## {md_text(plan.ref)}: every quant under the budgets", "", markdown_table(head(plan), body), ""]
    text += [f"- {md_prose(x)}" for x in lines(plan)]  # file names from the hub: no HTML, link or escape sequence
    return "\n".join(text) + "\n"


def print_table(plan: RepoPlan) -> None:
    from rich.console import Console
    from rich.table import Table

    from ...core.safetext import rich_text as T

    console = Console(width=200 if not sys.stdout.isatty() else None, highlight=False)
    t = Table(title=T(f"{plan.ref}: every quant under the budgets"))
    for i, h in enumerate(head(plan)):
        t.add_column(T(h), justify="left" if i in (0, 1, 3) else "right")
    for r in plan.rows:
        t.add_row(*[T(c) for c in cells(plan, r)])
    console.print(t)
    for line in lines(plan):
        console.print(T("• " + line))
