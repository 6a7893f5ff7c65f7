"""A self-contained HTML report: one file, inline CSS, plots as SVG data: URIs (each with its alt text), no script,
no network. A serialiser of `model.Report`, read in this order: the answer and its command, the memory picture,
the decision table, where pipeline parallelism pays, then the details, folded.

The page fits any width: at 1400 px the tables wrap their text; under 720 px (a phone) each table row becomes a
block of "label: value" lines, so nothing runs past the screen and the page never scrolls sideways.

Everything shown that came from a log, a study file, the machine or the user passes through `esc` (html.escape),
and a Content-Security-Policy forbids scripts and any fetch outright, so a hostile build label or log line can
neither run nor load anything.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterator

from ..core.safetext import plain
from . import model, plots
from .data import RunData

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
PLOT_FORMAT = "svg"
MIME = {"svg": "image/svg+xml", "png": "image/png"}

CSS = """
:root { color-scheme: light; --fg: #1d232b; --muted: #5b6573; --line: #d6dbe1; --accent: #0072b2; --bg: #ffffff; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--fg);
       background: var(--bg); margin: 0 auto; padding: 16px 28px 48px; max-width: 1320px; overflow-wrap: break-word; }
h1 { font-size: 20px; margin: 0 0 2px; } h2 { font-size: 17px; margin: 24px 0 8px; border-bottom: 1px solid var(--line);
     padding-bottom: 4px; } h3 { font-size: 15px; margin: 14px 0 6px; }
.sub { color: var(--muted); margin: 0 0 10px; }
p.answer { font-size: 15px; margin: 8px 0 6px; padding: 8px 12px; border-left: 4px solid var(--accent); background: #f3f7fb; }
dl.sys { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0; }
dl.sys dt { color: var(--muted); } dl.sys dd { margin: 0; min-width: 0; overflow-wrap: anywhere; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; margin: 4px 0 8px; max-width: 100%; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: right; }
td { white-space: nowrap; } th { background: #f2f4f7; font-weight: 600; }
td.t, th.t { text-align: left; white-space: normal; }
tbody tr:nth-child(even) td { background: #fafbfc; }
figure { margin: 8px 0 14px; } figure img { display: block; max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: 12px; }
ul.verdict li { margin: 2px 0; }
code, pre { font: 12px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
pre { background: #f5f6f8; border: 1px solid var(--line); padding: 8px; margin: 4px 0 8px; white-space: pre-wrap;
      overflow-wrap: anywhere; }
.note { color: var(--muted); font-size: 12px; }
details { margin: 4px 0; } summary { cursor: pointer; color: var(--accent); }
table.words td { white-space: normal; max-width: 28em; vertical-align: top; }
td.good { color: #0072b2; font-weight: 600; } td.bad { color: #d55e00; font-weight: 600; } td.same { color: var(--muted); }
@media (max-width: 720px) {
  body { padding: 10px 10px 32px; font-size: 13px; }
  table, thead, tbody, tr, th, td { display: block; width: 100%; }
  thead { display: none; }
  tr { border: 1px solid var(--line); margin: 0 0 6px; }
  td, td.t { border: 0; border-bottom: 1px solid #eef0f3; text-align: left; white-space: normal; max-width: none; }
  td::before { content: attr(data-label) ": "; color: var(--muted); }
  dl.sys { grid-template-columns: 1fr; } dl.sys dt { margin-top: 4px; }
}
"""  # noqa: E501 (the page's bytes: one rule a line)

CAPTIONS = {
    "memory": "Memory per device and on the host: each configuration's model, KV cache and compute buffers stacked "
              "(MiB, from llama.cpp's log; the label: compute), the compute the scheduler's extra copies hold "
              "hatched, and the context (n_ctx) each configuration ran with.",
    "compute": "Compute buffer per device and on the host, per configuration (MiB, from llama.cpp's log).",
    "context": "Context size (n_ctx, tokens) each configuration ran with.",
    "throughput": "Aggregate output tokens/s against parallel requests: median over trials, bars span min–max.",
    "tune_front": "Tune: each configuration run for real, its context against its median generation t/s (and "
                  "aggregate output t/s at K requests), bars span min–max over trials; the square is llama.cpp's "
                  "default, the star the pick, the grey line the measured front, hollow markers stopped after one "
                  "trial; ticks on the context axis are stage one's verified front (dry runs).",
    "pp_gain": "Pipeline-parallel gain per workload cell: the pipeline build's aggregate prompt and output t/s over "
               "the same build without pipeline parallelism (above 1: it pays), ratio of medians with its 95% "
               "bootstrap interval; full colour where the verdict is pays or costs, pale where there is no measurable "
               "difference.",
}


def esc(v: object) -> str:
    return html.escape(plain(v), quote=True)


_CODE = re.compile(r"`([^`\n]+)`")


def prose(v: object) -> str:
    """A sentence written with Markdown code spans (`llama-server -ot …`): escaped, the spans as <code>."""
    text = plain(v)
    out, at = [], 0
    for m in _CODE.finditer(text):
        out += [esc(text[at:m.start()]), f"<code>{esc(m.group(1))}</code>"]
        at = m.end()
    return "".join(out) + esc(text[at:])


NAME = "html"

# the sections the page shows, in its order: the answer, the memory picture, the decision table, the crossover map,
# then the details
ORDER = ("title", "tune", "answer", "memory_picture", "decision", "outputs", "pp_gain", "verdict", "versions",
         "trust", "plots", "throughput", "results", "system", "builds", "not_measured", "not_applicable", "reproduce",
         "study", "footer")


def render(data: RunData, images: dict[str, bytes] | None = None) -> str:
    """The page. `images`: {"compute": svg (or png) bytes, …}; drawn from the run as SVG when not given."""
    if images is None:
        images = {name: plots.to_bytes(fig, PLOT_FORMAT) for name, fig in plots.figures(data).items()}
    report = model.build(data, figures=list(images))
    alts = {"memory": plots.memory_alt(data)} if "memory" in images else {}
    return write(report, images, alts)


def pieces(data: RunData) -> Iterator[str]:
    """The format's text in pieces (`formats.REGISTRY`): one, made when first asked for."""
    yield render(data)


def write(report: model.Report, images: dict[str, bytes], alts: dict[str, str] | None = None) -> str:
    title = spans(report.title)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>{title}</title>",
        f"<style>{CSS}</style></head><body>",
    ]
    figures = {name: (blob, (alts or {}).get(name) or CAPTIONS.get(name, name)) for name, blob in images.items()}
    for section in report.sections(ORDER):
        for block in section.for_format(NAME):
            parts += block_parts(block, figures)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def spans(text: model.Text) -> str:
    """Text as HTML: llamalab's own words as they are, everything else escaped, code spans as <code>."""
    out, bold = [], False
    for s in text:
        if s.bold != bold:
            out.append("<b>" if s.bold else "</b>")
            bold = s.bold
        if s.kind == "lit":
            out.append(str(s.value))
        elif s.kind == "prose":
            out.append(prose(s.value))
        elif s.kind == "code":
            out.append(f"<code>{esc(s.value)}</code>")
        else:
            out.append(esc(s.value))
    return "".join(out) + ("</b>" if bold else "")


def _id(b: model.Block) -> str:
    return f' id="{esc(b.id)}"' if b.id else ""


def block_parts(b: model.Block, figures: dict[str, tuple[bytes, str]]) -> list[str]:
    """A block as parts of the page (joined by newlines). `figures`: each plot's bytes and alt text, by name."""
    if isinstance(b, model.Heading):
        return [f"<h{b.level}>{spans(b.text)}</h{b.level}>"]
    if isinstance(b, model.Para):
        cls = f' class="{b.style}"' if b.style else ""
        return [f"<p{_id(b)}{cls}>{spans(b.text)}</p>"]
    if isinstance(b, model.Items):
        ul = '<ul class="verdict">' if b.style == "verdict" else "<ul>"
        return [ul + "".join(f"<li>{spans(t)}</li>" for t in b.items) + "</ul>"]
    if isinstance(b, model.Table):
        return [_any_table(b).replace("<table", f"<table{_id(b)}", 1)]
    if isinstance(b, model.Fields):
        return ['<dl class="sys">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in b.pairs) + "</dl>"]
    if isinstance(b, model.Code):
        return [f"<pre>{esc(b.text)}</pre>"]
    if isinstance(b, model.Figure):
        return [_img(b.name, *figures[b.name])]
    if isinstance(b, model.Details):
        inner = [p for x in b.blocks for p in block_parts(x, figures)]
        return [f"<details{_id(b)}><summary>{spans(b.summary)}</summary>", *inner, "</details>"]
    return []


def _any_table(b: model.Table) -> str:
    if b.style == "words":
        return _wrapped_table(b.head, b.body)
    if b.style == "speed":
        return _speed_table(b)
    return _table(b.head, b.body, b.text_cols)


def _table(head: list[str], body: list[list[str]], text_cols: int = 2) -> str:
    cls = lambda i: ' class="t"' if i < text_cols else ""  # noqa: E731
    out = ['<div class="scroll"><table>', "<thead><tr>"]
    out += [f"<th{cls(i)}>{esc(h)}</th>" for i, h in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for row in body:
        out.append("<tr>" + "".join(f"<td{cls(i)}{_label(head, i)}>{esc(c)}</td>" for i, c in enumerate(row))
                   + "</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _label(head: list[str], i: int) -> str:
    """The cell's column, for the narrow page's "label: value" rows."""
    return f' data-label="{esc(head[i])}"' if i < len(head) else ""


def _speed_table(b: model.Table) -> str:
    """The comparisons: text in the first three columns and the verdict, each verdict coloured by its tone."""
    t = ' class="t"'
    out = ['<div class="scroll"><table class="speed">', "<thead><tr>"]
    out += [f"<th{t if i < 3 or i == len(b.head) - 1 else ''}>{esc(h)}</th>" for i, h in enumerate(b.head)]
    out.append("</tr></thead><tbody>")
    for row, tone in zip(b.body, b.tones):
        out.append("<tr>" + "".join(f"<td{t if i < 3 else ''}{_label(b.head, i)}>{esc(x)}</td>"
                                    for i, x in enumerate(row[:-1]))
                   + f'<td class="t {tone}"{_label(b.head, len(row) - 1)}>{esc(row[-1])}</td></tr>')
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _wrapped_table(head: list[str], body: list[list[str]]) -> str:
    """A table of sentences: cells wrap."""
    out = ['<div class="scroll"><table class="words">', "<thead><tr>"]
    out += [f'<th class="t">{esc(h)}</th>' for h in head]
    out.append("</tr></thead><tbody>")
    for row in body:
        out.append("<tr>" + "".join(f'<td class="t"{_label(head, i)}>{prose(c)}</td>' for i, c in enumerate(row))
                   + "</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _img(name: str, blob: bytes, alt: str) -> str:
    """A plot as an <img> of a data: URI (SVG, or PNG where given PNG bytes): the page's CSP lets an image load only
    so, and an SVG shown as an image runs nothing."""
    mime = MIME["png"] if blob[:8] == b"\x89PNG\r\n\x1a\n" else MIME["svg"]
    uri = f"data:{mime};base64," + base64.b64encode(blob).decode("ascii")
    return (f'<figure><img id="plot-{esc(name)}" src="{uri}" alt="{esc(alt)}">'
            f"<figcaption>{esc(CAPTIONS.get(name, name))}</figcaption></figure>")
