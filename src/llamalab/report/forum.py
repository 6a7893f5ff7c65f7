"""`llamalab report --format forum`: the Markdown a person pastes into a forum thread or an issue, under `LINES`
lines — what ran where, the original study's table (build, compute per device, context, copies), the decision table,
three lines of verdict (memory, speed, what to do), the command, and the llamalab and llama.cpp versions.

A tune run gives its pick, its command and the measured front (llama.cpp's default, the front, the pick) instead.
Everything here is said at more length in the Markdown report. Pure: takes a stored RunData.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..core.safetext import md_fence, md_prose, md_text, plain
from .analysis import answer, grid, outputs, recommend, summary, tables, tune, verdict
from .data import RunData

NAME = "forum"
LINES = 40


def pieces(data: RunData) -> Iterator[str]:
    """The format's text in pieces (`formats.REGISTRY`): one."""
    yield render(data)


def render(data: RunData) -> str:
    v = tune.view(data)
    lines = [_title(data), ""] + (_tune(v) if v is not None else _study(data)) + ["", _versions(data)]
    return plain("\n".join(lines) + "\n")


def _title(data: RunData) -> str:
    items = dict(summary.system_items(data))
    model = summary.model(data)
    return (f"**{md_text(data.run['study'])}** on {md_text(items.get('GPUs', '?').split('; driver')[0])} — model "
            f"{md_text(model.get('name') or '?')} ({md_text(model.get('n_layer', '?'))} layers)")


def _study(data: RunData) -> list[str]:
    head, body = tables.memory_table(data)
    out = [tables.markdown_table(head, body), ""] if body else []
    rows = recommend.decision_table(data)
    if rows:
        h, b = recommend.table_cells(rows)
        out += [tables.markdown_table(h[:5], [r[:5] for r in b]), ""]
    out += [f"- {md_prose(line)}" for line in verdict_lines(data)]
    a = answer.answer(data)
    if a.command:
        out += ["", md_fence(a.command), a.command, md_fence(a.command)]
    return out


def verdict_lines(data: RunData) -> list[str]:
    """Three lines: what the memory comparison found, where speed differs, and what to do."""
    out = []
    mem = verdict.memory_comparisons(data)
    if mem:
        c = mem[0]
        compute = [f"{d} {v:+,.0f}" for d, v in c["compute_delta_mib"].items() if v is not None]
        ctx = f"; context {c['n_ctx_delta']:+,.0f} tokens" if c["n_ctx_delta"] else "; the same context"
        out.append(f"Memory: {c['candidate']} vs {c['baseline']} ({c['setting']}): compute "
                   + (", ".join(compute) or "not printed") + " MiB" + ctx + ".")
    p = grid.pair(data)
    crossing = grid.crossover(data, None, p) if p else ""
    if crossing:
        out.append(f"Speed: {crossing}")
    else:
        key = summary.key_speed_lines(data)
        out.append(f"Speed: {key[0]}" if key else "Speed: nothing compared.")
    said = outputs_line(data)
    if said:
        out.append(said)
    out.append(f"Do: {answer.answer(data).text}")
    return out


def outputs_line(data: RunData) -> str:
    """"Outputs: …": each arm's verdict against its baseline, grouped by verdict, on one line ("" for a run before
    the output check)."""
    if not outputs.compared(data):
        return ""
    by: dict[str, list[str]] = {}
    for (b, s), v in outputs.verdicts(data).items():
        if b != v.baseline:
            by.setdefault(v.words, []).append(f"{b} ({s})")
    base = outputs.baseline(data)
    said = "; ".join(f"{', '.join(names)}: {words}" for words, names in by.items())
    return f"Outputs vs {base}: {said}."


def _tune(v: tune.View) -> list[str]:
    """The pick, its command, and the front in short (`tune.shown`), without the stopping notes."""
    head, body = tune.front_table(v)
    rows = {r.build: r for r in tune.shown(v)}
    short = [[row[0], rows[row[0]].label, *row[2:]] for row in body if row[0] in rows]
    out = [f"Pick: {md_prose(v.pick_sentence)}"] + ([md_prose(v.versus_default)] if v.versus_default else [])
    fence = md_fence(v.command)
    return out + ["", fence, v.command, fence, "", tables.markdown_table(head, short)]


def _versions(data: RunData) -> str:
    items = dict(summary.system_items(data))
    return (f"<sub>llamalab {md_text(data.run.get('llamalab_version') or '?')}, llama.cpp "
            f"{md_text(items.get('llama.cpp', '?'))}; run {md_text(data.id)}; `llamalab report --format forum`</sub>")
