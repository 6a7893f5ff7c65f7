"""A self-contained HTML report: one file, inline CSS, plots as data: URIs, no script, no network.

Everything shown that came from a log, a study file, the machine or the user passes through `esc` (html.escape),
and a Content-Security-Policy forbids scripts and any fetch outright, so a hostile build label or log line can
neither run nor load anything.
"""

from __future__ import annotations

import base64
import html
import re

from ..safetext import plain
from . import context, grid, plots, recommend, speed, summary, tables, tune, versions
from .data import RunData

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

CSS = """
:root { color-scheme: light; --fg: #1d232b; --muted: #5b6573; --line: #d6dbe1; --accent: #2d5ea8; --bg: #ffffff; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--fg);
       background: var(--bg); margin: 0 auto; padding: 24px 28px 48px; max-width: 1280px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid var(--line);
     padding-bottom: 4px; }
.sub { color: var(--muted); margin: 0 0 16px; }
dl.sys { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0; }
dl.sys dt { color: var(--muted); } dl.sys dd { margin: 0; overflow-wrap: anywhere; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; margin: 4px 0 8px; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: right; white-space: nowrap; }
th { background: #f2f4f7; font-weight: 600; }
td.t, th.t { text-align: left; }
tbody tr:nth-child(even) td { background: #fafbfc; }
figure { margin: 12px 0 20px; } figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: 12px; }
ul.verdict li { margin: 2px 0; }
code, pre { font: 12px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
pre { background: #f5f6f8; border: 1px solid var(--line); padding: 8px; overflow-x: auto; white-space: pre-wrap;
      overflow-wrap: anywhere; }
.note { color: var(--muted); font-size: 12px; }
table.words td { white-space: normal; max-width: 28em; vertical-align: top; }
td.good { color: #1d7a35; font-weight: 600; } td.bad { color: #b3261e; font-weight: 600; } td.same { color: var(--muted); }
"""

CAPTIONS = {
    "compute": "Compute buffer per device and on the host, per configuration (MiB, from llama.cpp's log).",
    "context": "Context size (n_ctx, tokens) each configuration ran with.",
    "throughput": "Aggregate output tokens/s against parallel requests: median over trials, bars span min–max.",
    "tune_front": "Tune: each configuration run for real, its context against its median generation t/s (and "
                  "aggregate output t/s at K requests), bars span min–max over trials; the square is llama.cpp's "
                  "default, the star the pick, the grey line the measured front, hollow markers stopped after one "
                  "trial; ticks on the context axis are stage one's verified front (dry runs).",
    "pp_gain": "Pipeline-parallel gain per workload cell: the pipeline build's aggregate prompt and output t/s over the "
               "same build without pipeline parallelism (above 1: it pays), ratio of medians with its 95% bootstrap "
               "interval; full colour where the verdict is pays or costs, pale where there is no measurable "
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


def _table(head: list[str], body: list[list[str]], text_cols: int = 2) -> str:
    cls = lambda i: ' class="t"' if i < text_cols else ""  # noqa: E731
    out = ['<div class="scroll"><table>', "<thead><tr>"]
    out += [f"<th{cls(i)}>{esc(h)}</th>" for i, h in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for row in body:
        out.append("<tr>" + "".join(f"<td{cls(i)}>{esc(c)}</td>" for i, c in enumerate(row)) + "</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _throughput(data: RunData) -> str:
    rows = speed.throughput_table(data)
    if not rows:
        return ""
    f = tables.format_cell
    head = ["Build", "Setting", "Prompt tokens", "Parallel requests", "Trials", "Aggregate output t/s (median)",
            "min", "max", "Aggregate prompt t/s", "Output t/s", "Input t/s", "TTFT p50 (ms)", "TTFT p90 (ms)",
            "ITL p50 (ms)", "ITL p90 (ms)"]
    body = [[r["build"], r["setting"], f(r["prompt_tokens"]), f(r["concurrency"]), f(r["n"]),
             f(r["aggregate_output_tps"]), f(r["aggregate_output_tps_min"]), f(r["aggregate_output_tps_max"]),
             f(r["aggregate_input_tps"]), f(r["output_tps"]), f(r["input_tps"]), f(r["ttft_ms_p50"]),
             f(r["ttft_ms_p90"]), f(r["itl_ms_p50"]), f(r["itl_ms_p90"])]
            for r in rows]
    return _table(head, body)


def _speed_table(comparisons: list[dict]) -> str:
    labels = {m.name: m.label for m in speed.METRICS}
    f = tables.format_cell
    out = ['<div class="scroll"><table class="speed">', "<thead><tr>"]
    head = ["Setting", "Candidate vs baseline", "Metric", "Prompt tokens", "Parallel requests", "Baseline",
            "Candidate", "Ratio", "Interval", "Verdict"]
    t = ' class="t"'
    out += [f"<th{t if i < 3 or i == 9 else ''}>{esc(h)}</th>" for i, h in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for c in comparisons:
        ci = f"[{c['ci_low']:.2f}, {c['ci_high']:.2f}]" if c["ci_low"] is not None else "no interval"
        verdict = c["verdict"] + (f" ({c['reason']})" if c.get("reason") else "")
        cls = {"faster": "good", "slower": "bad"}.get(c["verdict"], "same")
        cells = [c["setting"], f"{c['candidate']} vs {c['baseline']}", labels.get(c["metric"], c["metric"]),
                 f(c.get("prompt_tokens")), f(c["concurrency"]), f(c["baseline_median"]), f(c["candidate_median"]),
                 f"{c['ratio']:.2f}×", ci]
        out.append("<tr>" + "".join(f"<td{t if i < 3 else ''}>{esc(x)}</td>" for i, x in enumerate(cells))
                   + f'<td class="t {cls}">{esc(verdict)}</td></tr>')
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _decision(data: RunData) -> list[str]:
    """The decision table of every setting, right under the recommendation it is the source of."""
    settings = [s for s in recommend.study_settings(data) if recommend.decision_table(data, s)]
    out = ["<h2>Decision by use</h2>"] if settings else []
    for s in settings:
        if len(settings) > 1:
            out.append(f"<h3>{esc(s)}</h3>")
        head, body = recommend.table_cells(recommend.decision_table(data, s))
        out.append(_wrapped_table(head, body))
    return out


def _wrapped_table(head: list[str], body: list[list[str]]) -> str:
    """A table of sentences: cells wrap."""
    out = ['<div class="scroll"><table class="words">', "<thead><tr>"]
    out += [f'<th class="t">{esc(h)}</th>' for h in head]
    out.append("</tr></thead><tbody>")
    for row in body:
        out.append("<tr>" + "".join(f'<td class="t">{prose(c)}</td>' for c in row) + "</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _pp_gain(data: RunData, images: dict[str, bytes]) -> list[str]:
    p = grid.pair(data)
    rows = grid.gains(data, p) if p else []
    if not rows:
        return []
    out = ["<h2>Where pipeline parallelism pays</h2>", f'<p class="rec">{prose(grid.crossover(data, rows, p))}</p>']
    if "pp_gain" in images:
        out.append(_img("pp_gain", images["pp_gain"]))
    out.append(_table(*grid.table(rows), text_cols=1))
    return out


def _tune(data: RunData, images: dict[str, bytes]) -> list[str]:
    """A tune run's section: the pick and its command, the plot of the front, the front measured, the stages."""
    v = tune.view(data)
    if v is None:
        return []
    out = ["<h2>Tune: the front, measured</h2>", f'<p class="rec"><b>Pick.</b> {prose(v.pick_sentence)}</p>',
           f"<pre>{esc(v.command)}</pre>",
           f'<p class="note">llama.cpp\'s default, measured the same way: <code>{esc(v.default_command)}</code></p>']
    if "tune_front" in images:
        out.append(_img("tune_front", images["tune_front"]))
    out.append(_table(*tune.front_table(v)))
    out.append("<ul>" + "".join(f"<li>{prose(s)}</li>" for s in v.stage_lines) + "</ul>")
    out.append("<details><summary>Every stage-one candidate</summary>")
    out.append(_wrapped_table(*tune.candidates_table(v)))
    out.append("</details>")
    return out


def _img(name: str, png: bytes) -> str:
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    return (f'<figure><img id="plot-{esc(name)}" src="{uri}" alt="{esc(CAPTIONS.get(name, name))}">'
            f"<figcaption>{esc(CAPTIONS.get(name, name))}</figcaption></figure>")


def render(data: RunData, images: dict[str, bytes] | None = None) -> str:
    """The page. `images`: {"compute": png bytes, …}; drawn from the run when not given."""
    if images is None:
        images = {name: plots.to_bytes(fig, "png") for name, fig in plots.figures(data).items()}
    r = data.run
    level = min((int(t["concurrency"]) for t in data.trials), default=1)
    head, body = tables.table_cells(tables.rows(data, level))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>llamalab: {esc(r['study'])} — run {esc(r['id'])}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>llamalab: {esc(r['study'])} — run {esc(r['id'])}</h1>",
        f'<p class="sub">{esc(r["status"])}, started {esc(r.get("started"))} on {esc(r.get("host"))}</p>',
        *(_tune(data, images) or [f'<p class="rec"><b>Recommendation.</b> {prose(recommend.recommendation(data))}'
                                  "</p>", *_decision(data)]),
        "<h2>System</h2>",
        '<dl class="sys">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in summary.system_items(data))
        + "</dl>",
        f"<h2>Results{' (single stream)' if level == 1 else f' at {level} parallel requests'}</h2>",
        _table(head, body) if body else '<p class="note">No trial was stored for this run.</p>',
        '<p class="note">Compute buffers are llama.cpp\'s own <code>compute buffer size</code> lines (MiB); context '
        "is the <code>n_ctx</code> the server ran with; copies is the log's <code>sched copies</code>."
        + (" " + esc(context.WITHIN_NOTE) if context.searched(data) else "") + "</p>",
    ]
    verdict_mem = summary.memory_lines(data) + context.sentences(data)
    comparisons = speed.comparisons(data)
    parts.append("<h2>Verdict</h2>")
    if verdict_mem:
        parts.append('<ul class="verdict">' + "".join(f"<li>{prose(s)}</li>" for s in verdict_mem) + "</ul>")
    if comparisons:
        parts.append(_speed_table(comparisons))
        parts.append(f'<p class="note">Speed: candidate / baseline, ratio of medians over trials with a '
                     f"{comparisons[0]['confidence']:.0%} bootstrap interval; a verdict needs the ratio beyond the "
                     f"threshold ({speed.threshold_of(data):.0%}) and an interval that excludes 1.</p>")
    if not verdict_mem and not comparisons:
        parts.append('<p class="note">Only one configuration was measured: nothing to compare.</p>')
    thr = _throughput(data)
    if thr:
        parts += ["<h2>Throughput by concurrency</h2>", thr]
    parts += _pp_gain(data, images)
    if versions.applies(data):
        vrows = versions.rows(data)
        parts += ["<h2>Versions</h2>", _table(*versions.table(vrows), text_cols=5)]
        lines = versions.sentences(vrows)
        if lines:
            parts.append('<ul class="verdict">' + "".join(f"<li>{prose(s)}</li>" for s in lines) + "</ul>")
    trust = summary.noise_lines(data) + summary.fidelity_lines(data)
    if trust:
        parts += ["<h2>How far to trust the figures</h2>",
                  "<ul>" + "".join(f"<li>{prose(s)}</li>" for s in trust) + "</ul>"]
    others = {k: v for k, v in images.items() if k not in ("pp_gain", "tune_front")}
    if others:
        parts.append("<h2>Plots</h2>")
        parts += [_img(name, png) for name, png in others.items()]
    builds = summary.build_items(data)
    if builds:
        parts.append("<h2>Builds</h2>")
        parts.append(_table(["Build", "Label", "Status", "CMake options", "llama.cpp", "Build time"],
                            [[b["name"], b["label"], b["status"], b["cmake"], b["source"], b["build"]]
                             for b in builds], text_cols=6))
        parts += [f'<p class="note">{esc(n)}</p>' for n in summary.binary_notes(data)]
    missing = summary.not_measured(data)
    if missing:
        parts += ["<h2>Not measured</h2>", "<ul>" + "".join(f"<li>{prose(s)}</li>" for s in missing) + "</ul>"]
    inapplicable = summary.not_applicable_lines(data)
    if inapplicable:
        parts += ["<h2>Not applicable on this rig</h2>",
                  "<ul>" + "".join(f"<li>{prose(s)}</li>" for s in inapplicable) + "</ul>"]
    rep = summary.reproduce(data)
    if rep:
        parts.append("<h2>How each configuration was run</h2>")
        for x in rep:
            parts.append(f"<p><b>{esc(x['build'])} × {esc(x['setting'])}</b> — CMake: <code>{esc(x['cmake'])}</code>"
                         + (f"; environment: <code>{esc(x['env'])}</code>" if x["env"] else "") + "</p>")
            parts.append(f"<pre>llama-server -m MODEL {esc(x['server'])}</pre>")
    if data.study_toml:
        parts += ["<h2>Study file</h2>", f"<pre>{esc(data.study_toml)}</pre>"]
    parts.append(f'<p class="note">Made by llamalab from the results database; run {esc(r["id"])}.</p>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
