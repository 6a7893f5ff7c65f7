"""The Markdown report: ready to paste into a forum post or a GitHub issue. A serialiser of `model.Report`."""

from __future__ import annotations

from collections.abc import Iterator

from ..core.safetext import md_code, md_fence, md_prose, md_text, plain
from . import model
from .analysis import tables
from .data import RunData

NAME = "md"

# the sections Markdown shows, in its order: the answer, the memory table, the decision table, the crossover map,
# then the details (the long ones folded)
ORDER = ("title", "tune", "answer", "memory_picture", "decision", "outputs", "pp_gain", "memory", "versions",
         "system", "throughput", "results", "speed", "builds", "not_measured", "not_applicable", "splits", "trust",
         "network", "reproduce", "footnote")


def render(data: RunData) -> str:
    return write(model.build(data))


def pieces(data: RunData) -> Iterator[str]:
    """The format's text in pieces (`formats.REGISTRY`): one, made when first asked for."""
    yield render(data)


def write(report: model.Report) -> str:
    out: list[str] = []
    for section in report.sections(ORDER):
        for block in section.for_format(NAME):
            out += block_lines(block)
    if out and out[-1] == "":  # the last paragraph ends the file
        out.pop()
    return plain("\n".join(out) + "\n")  # labels, names and reasons may hold terminal control sequences


def spans(text: model.Text) -> str:
    """Text as Markdown: llamalab's words as they are; what came from a run escaped (`safetext.md_text`: no HTML,
    link or line break), sentences written from stored names without HTML, code spans that hold any backtick."""
    out, bold = [], False
    for s in text:
        if s.bold != bold:
            out.append("**")
            bold = s.bold
        out.append(md_code(s.value) if s.kind == "code" else md_text(s.value) if s.kind == "text"
                   else md_prose(s.value) if s.kind == "prose" else f"{s.value}")
    return "".join(out) + ("**" if bold else "")


def block_lines(b: model.Block) -> list[str]:
    """A block as Markdown lines, each block followed by an empty line."""
    if isinstance(b, model.Heading):
        return ["#" * b.level + " " + spans(b.text), ""]
    if isinstance(b, model.Para):
        return [spans(b.text), ""]
    if isinstance(b, model.Items):
        return [f"- {spans(t)}" for t in b.items] + [""]
    if isinstance(b, model.Table):
        return [tables.markdown_table(b.head, b.body), ""]
    if isinstance(b, model.Code):
        fence = md_fence(b.text)
        return [fence, b.text, fence, ""]
    if isinstance(b, model.Details):
        inner = [line for x in b.blocks for line in block_lines(x)]
        return [f"<details><summary>{spans(b.summary)}</summary>", "", *inner, "</details>", ""]
    return []  # figures and the fields of the HTML page: Markdown shows neither
