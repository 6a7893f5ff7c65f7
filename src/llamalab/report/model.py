"""The report as one structure: `build(data)` makes each section of a run's report once — its headings, paragraphs,
lists, tables, code and figures — and the serialisers (`markdown`, `html`) only write them out.

A section is a list of blocks. Text is a tuple of `Span`s, so that each serialiser escapes what came from the run
and leaves llamalab's own words as they are: `lit` (llamalab's words), `text` (from a run, a log, a study: escaped),
`prose` (a sentence written with Markdown code spans), `code` (a command); a span may be bold. Where the Markdown
and the HTML report show a section differently (the HTML page has a speed table where Markdown has sentences), the
block says which format shows it (`only`); `Serialiser.order` says which sections a format shows, in which order.

Sections are made when first asked for (`Report.section`), so a format never computes what it does not show.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .analysis import (
    answer,
    context,
    grid,
    network,
    outputs,
    recommend,
    speed,
    summary,
    tables,
    tune,
    verdict,
    versions,
)
from .data import RunData


@dataclass(frozen=True)
class Span:
    kind: str  # "lit" | "text" | "prose" | "code"
    value: object
    bold: bool = False


Text = tuple[Span, ...]


def lit(s: str, bold: bool = False) -> Span:
    return Span("lit", s, bold)


def text(v: object, bold: bool = False) -> Span:
    return Span("text", v, bold)


def prose(v: object) -> Span:
    return Span("prose", v)


def code(v: object) -> Span:
    return Span("code", v)


@dataclass(frozen=True, kw_only=True)
class Block:
    only: str = ""  # "" (every format) or the one format that shows it ("md", "html")
    id: str = ""  # the HTML element's id ("answer", "decision"): where a reader, or a test, finds it


@dataclass(frozen=True)
class Heading(Block):
    text: Text
    level: int = 2


@dataclass(frozen=True)
class Para(Block):
    text: Text
    style: str = ""  # "" | "rec" (a conclusion) | "note" | "sub" (the line under the title) | "answer"


@dataclass(frozen=True)
class Items(Block):
    items: tuple[Text, ...]
    style: str = ""  # "" | "verdict"


@dataclass(frozen=True)
class Table(Block):
    head: list[str]
    body: list[list[str]]
    text_cols: int = 2  # the first columns hold text (left-aligned), the others figures
    style: str = ""  # "" | "words" (cells are sentences with code spans; they wrap) | "speed" (a verdict per row)
    tones: tuple[str, ...] = ()  # style "speed": each row's verdict as "good", "bad" or "same"


@dataclass(frozen=True)
class Fields(Block):
    pairs: list[tuple[str, str]]


@dataclass(frozen=True)
class Code(Block):
    text: str


@dataclass(frozen=True)
class Figure(Block):
    name: str  # a plot of `plots.figures` ("compute", "pp_gain", …)


@dataclass(frozen=True)
class Details(Block):
    """Blocks folded away (`<details>`), with a one-line summary of what they hold."""
    summary: Text
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class Section:
    id: str
    blocks: tuple[Block, ...] = ()

    def for_format(self, fmt: str) -> Iterator[Block]:
        return (b for b in self.blocks if b.only in ("", fmt))


@dataclass
class Report:
    """A run's report: its sections, made once each when first asked for. `figures`: the plots a format can show,
    by name, in their order (none for Markdown)."""
    data: RunData
    figures: Sequence[str] = ()
    _made: dict[str, Section] = field(default_factory=dict, repr=False)

    @property
    def title(self) -> Text:
        r = self.data.run
        return lit("llamalab: "), text(r["study"]), lit(" — run "), text(r["id"])

    @cached_property
    def tune(self) -> tune.View | None:
        """A tune run's view (None for any other run): its section replaces the recommendation and decision."""
        return tune.view(self.data)

    def section(self, sid: str) -> Section:
        if sid not in self._made:
            self._made[sid] = Section(sid, tuple(SECTIONS[sid](self)))
        return self._made[sid]

    def sections(self, order: Iterable[str]) -> Iterator[Section]:
        return (self.section(s) for s in order)


def build(data: RunData, figures: Sequence[str] = ()) -> Report:
    return Report(data, tuple(figures))


def _h(title: str, only: str = "") -> Heading:
    return Heading(text=(lit(title),), only=only)


def _proses(lines: Iterable[object]) -> tuple[Text, ...]:
    return tuple((prose(s),) for s in lines)


def _level(data: RunData) -> int:
    return min((int(t["concurrency"]) for t in data.trials), default=1)


# ---------------------------------------------------------------- the sections, in their canonical order

def _title(rep: Report) -> list[Block]:
    r = rep.data.run
    return [Heading(text=rep.title, level=1),
            Para(text=(text(r["status"]), lit(", started "), text(r.get("started")), lit(" on "), text(r.get("host"))),
                 style="sub", only="html")]


def _tune(rep: Report) -> list[Block]:
    """A tune run's section: the pick and its command, the memory of the front, the front measured (its decision
    table), the plot of the front, the stages."""
    v = rep.tune
    if v is None:
        return []
    out: list[Block] = [_h("Tune: the front, measured"),
                        Para(text=(lit("Pick.", bold=True), lit(" "), prose(v.pick_sentence)), style="answer",
                             id="answer"),
                        Code(text=v.command)]
    if v.versus_default:
        out.append(Para(text=(prose(v.versus_default),), style="note"))
    out.append(Para(text=(lit("llama.cpp's default, measured the same way: "), code(v.default_command)),
                    style="note"))
    if "memory" in rep.figures:
        out.append(Figure(name="memory"))
    out += [Table(*tune.front_table(v), id="decision"),
            Para(text=(lit("Context: the n_ctx each server ran with; prompt and generation t/s: median of the "
                           "single-stream trials; aggregate: median output t/s of "), text(v.parallel),
                       lit(" request(s) at once; MiB per device: llama.cpp's dry-run projection (model + KV cache + "
                           "compute) at that context; *Front*: no other measured configuration holds as much context "
                           "without being measurably slower in a speed.")), only="md")]
    if "tune_front" in rep.figures:
        out.append(Figure(name="tune_front"))
    out += [Items(items=_proses(tune.lines(v)), only="md"), Items(items=_proses(v.stage_lines), only="html"),
            Details(summary=(lit("Every stage-one candidate"),),
                    blocks=(Table(*tune.candidates_table(v), style="words"),))]
    return out


def _answer(rep: Report) -> list[Block]:
    """The answer (at most two sentences, `answer.WORDS` words) and the command that runs it."""
    if rep.tune is not None:  # a tune run: the pick and its command are its answer
        return []
    a = answer.answer(rep.data)
    out: list[Block] = [Para(text=(lit("Recommendation.", bold=True), lit(" "), prose(a.text)), style="answer",
                             id="answer")]
    if a.command:
        out.append(Code(text=a.command))
    return out


def _memory_picture(rep: Report) -> list[Block]:
    """Memory per device and the context each configuration fits: the figure in HTML, its table in Markdown."""
    if rep.tune is not None:
        return []
    head, body = tables.memory_table(rep.data)
    if not body:
        return []
    out: list[Block] = [_h("Memory and context", only="md"), Table(head, body, only="md")]
    if "memory" in rep.figures:
        out.append(Figure(name="memory", only="html"))
    return out


def _decision(rep: Report) -> list[Block]:
    """The decision table of every setting, right under the recommendation it is the source of (a heading per
    setting where the study has several)."""
    data = rep.data
    if rep.tune is not None:
        return []
    settings = [s for s in verdict.study_settings(data) if recommend.decision_table(data, s)]
    out: list[Block] = [_h("Decision by use")] if settings else []
    for i, s in enumerate(settings):
        if len(settings) > 1:
            out.append(Heading(text=(text(s),), level=3))
        out.append(Table(*recommend.table_cells(recommend.decision_table(data, s)), style="words",
                         id="decision" if i == 0 else ""))
    return out


def _outputs(rep: Report) -> list[Block]:
    """Every configuration's outputs against its setting's baseline (its A/A first), and where each arm that parts
    with it parts: the two continuations side by side."""
    data = rep.data
    found = outputs.lines(data)
    if not found or rep.tune is not None:
        return []
    out: list[Block] = [_h("Outputs vs baseline"), Items(items=tuple((text(line),) for line in found))]
    parted = outputs.differing(data)
    if parted:
        body = []
        for b, s, v in parted:
            for m in v.modes:
                if m.parting is None:
                    continue
                p = m.parting
                margin = "–" if v.synthetic or p.margin is None else f"{100 * p.margin:.2g}%"
                body.append([f"{b} × {s}", m.mode, f"{p.pos + 1}", margin, "".join(p.base), "".join(p.arm)])
        out.append(Para(text=(lit("Where each arm first parts with its baseline (greedy decoding, the same prompt): "
                                  "the baseline's margin between its two best candidates there, and what each "
                                  "generated from that token on."),), style="note"))
        out.append(Table(["Configuration", "Mode", "Token", "Baseline's margin", "Baseline continues",
                          "This continues"], body))
    return out


def _system(rep: Report) -> list[Block]:
    data = rep.data
    pairs = summary.system_items(data)
    items = dict(pairs)
    r = data.run
    return [Items(items=((lit("llama.cpp "), text(items["llama.cpp"])),
                         (lit("machine: "), text(items["CPU"]), lit("; GPUs: "), text(items["GPUs"])),
                         (lit("model: "), text(items["Model"])),
                         (lit("status: "), text(r["status"]), lit(", started "), text(r["started"]))), only="md"),
            _h("System", only="html"), Fields(pairs=pairs, only="html")]


def _cell_words(prompt: object, output: object = None, level: object = None) -> str:
    """"2,048-token prompts, 32 output tokens, 4 requests at once" (the parts given)."""
    parts = [f"{prompt:,}-token prompts" if isinstance(prompt, int) else "prompts of any length"]
    if output is not None:
        parts.append(f"{output:,} output tokens" if isinstance(output, int) else str(output))
    if level is not None:
        parts.append("1 request" if level == 1 else f"{level} requests at once")
    return ", ".join(parts)


def _results(rep: Report) -> list[Block]:
    """The trials (one row per build × setting × trial, with each configuration's memory), folded, one fold per
    workload cell."""
    data = rep.data
    level = _level(data)
    out: list[Block] = [_h(f"Trials{' (single stream)' if level == 1 else f' at {level} parallel requests'}")]
    if level != 1:
        out.append(Para(text=(lit("At "), text(level), lit(" parallel requests:")), only="md"))
    by_cell = tables.rows_by_cell(data, level)
    for cell, rows in by_cell.items():
        head, body = tables.table_cells(rows)
        n = len({(r[0], r[1]) for r in body})
        out.append(Details(summary=(text(_cell_words(*cell)), lit(f": {len(body)} trial(s) of {n} configuration(s)")),
                           blocks=(Table(head, body),)))
    if not by_cell:
        out.append(Para(text=(lit("No trial was stored for this run."),), style="note"))
    note: Text = (lit("Compute buffers are llama.cpp's own "), code("compute buffer size"),
                  lit(" lines (MiB); context is the "), code("n_ctx"),
                  lit(" the server ran with; copies is the log's "), code("sched copies"), lit("."))
    within: Text = (lit(" "), text(context.WITHIN_NOTE)) if context.searched(data) else ()
    out.append(Para(text=note + within, style="note", only="html"))
    return out


def _verdict(rep: Report) -> list[Block]:
    """Memory sentences, and the speed comparisons folded, one fold per workload cell (the HTML page's verdict)."""
    data = rep.data
    mem = summary.memory_lines(data) + context.sentences(data)
    comparisons = speed.comparisons(data)
    out: list[Block] = [_h("Verdict")]
    if mem:
        out.append(Items(items=_proses(mem), style="verdict"))
    by_cell: dict[tuple, list[dict[str, Any]]] = {}
    for c in comparisons:
        by_cell.setdefault((c.get("prompt_tokens"), c.get("output_tokens"), c["concurrency"]), []).append(c)
    for (p, o, lv), group in sorted(by_cell.items(), key=lambda kv: tuple(x or 0 for x in kv[0])):
        head, body, tones = _speed_cells(group)
        counts = {v: sum(1 for c in group if c["verdict"] == v) for v in dict.fromkeys(c["verdict"] for c in group)}
        said = ", ".join(f"{n} {v}" for v, n in counts.items())
        out.append(Details(summary=(lit("Speed at "), text(_cell_words(p, o, lv)),
                                    lit(f": {len(group)} comparison(s) — "), text(said)),
                           blocks=(Table(head, body, style="speed", tones=tones),)))
    if comparisons:
        out.append(Para(text=(lit(f"Speed: candidate / baseline, ratio of medians over trials with a "
                                  f"{comparisons[0]['confidence']:.0%} bootstrap interval; a verdict needs the ratio "
                                  f"beyond the threshold ({speed.threshold_of(data):.0%}) and an interval that "
                                  "excludes 1."),), style="note"))
    if not mem and not comparisons:
        out.append(Para(text=(lit("Only one configuration was measured: nothing to compare."),), style="note"))
    return out


def _speed_cells(comparisons: list[dict[str, Any]]) -> tuple[list[str], list[list[str]], tuple[str, ...]]:
    labels = {m.name: m.label for m in speed.METRICS}
    f = tables.format_cell
    head = ["Setting", "Candidate vs baseline", "Metric", "Baseline", "Candidate", "Ratio", "Interval", "Verdict"]
    body, tones = [], []
    for c in comparisons:
        ci = f"[{c['ci_low']:.2f}, {c['ci_high']:.2f}]" if c["ci_low"] is not None else "no interval"
        body.append([c["setting"], f"{c['candidate']} vs {c['baseline']}", labels.get(c["metric"], c["metric"]),
                     f(c["baseline_median"]), f(c["candidate_median"]), f"{c['ratio']:.2f}×", ci,
                     c["verdict"] + (f" ({c['reason']})" if c.get("reason") else "")])
        tones.append({"faster": "good", "slower": "bad"}.get(c["verdict"], "same"))
    return head, body, tuple(tones)


def _throughput(rep: Report) -> list[Block]:
    """Speed by concurrency, folded by prompt length: Markdown where the run measured several levels or cells (its
    shorter columns), HTML wherever it has rows."""
    data = rep.data
    rows = speed.throughput_table(data)
    f = tables.format_cell
    out: list[Block] = []
    many = len({int(t["concurrency"]) for t in data.trials}) > 1 or len(data.cells) > 1
    md_head = ["Build", "Setting", "Prompt tokens", "Parallel requests", "Trials", "Aggregate output t/s",
               "min–max", "Aggregate prompt t/s", "Output t/s", "TTFT p50 (ms)", "ITL p50 (ms)"]
    html_head = ["Build", "Setting", "Parallel requests", "Trials", "Aggregate output t/s (median)", "min", "max",
                 "Aggregate prompt t/s", "Output t/s", "Input t/s", "TTFT p50 (ms)", "TTFT p90 (ms)",
                 "ITL p50 (ms)", "ITL p90 (ms)"]
    if rows:
        out.append(_h("Throughput by concurrency", only="" if many else "html"))
    for cell in dict.fromkeys((r["prompt_tokens"], r["output_tokens"]) for r in rows):
        group = [r for r in rows if (r["prompt_tokens"], r["output_tokens"]) == cell]
        levels = sorted({r["concurrency"] for r in group})
        summary_: Text = (lit("Throughput at "), text(_cell_words(*cell)), lit(f": {len(group)} row(s), "),
                          text(f"{levels[0]}–{levels[-1]}"), lit(" parallel requests"))
        if many:
            body = [[r["build"], r["setting"], f(r["prompt_tokens"]), f(r["concurrency"]), f(r["n"]),
                     f(r["aggregate_output_tps"]),
                     f"{f(r['aggregate_output_tps_min'])}–{f(r['aggregate_output_tps_max'])}",
                     f(r["aggregate_input_tps"]), f(r["output_tps"]), f(r["ttft_ms_p50"]), f(r["itl_ms_p50"])]
                    for r in group]
            out.append(Details(summary=summary_, blocks=(Table(md_head, body),), only="md"))
        body = [[r["build"], r["setting"], f(r["concurrency"]), f(r["n"]),
                 f(r["aggregate_output_tps"]), f(r["aggregate_output_tps_min"]), f(r["aggregate_output_tps_max"]),
                 f(r["aggregate_input_tps"]), f(r["output_tps"]), f(r["input_tps"]), f(r["ttft_ms_p50"]),
                 f(r["ttft_ms_p90"]), f(r["itl_ms_p50"]), f(r["itl_ms_p90"])] for r in group]
        out.append(Details(summary=summary_, blocks=(Table(html_head, body),), only="html"))
    return out


def _pp_gain(rep: Report) -> list[Block]:
    """Where pipeline parallelism pays: the crossover sentence and the grid of its gain."""
    data = rep.data
    p = grid.pair(data)
    rows = grid.gains(data, p) if p else []
    if not p or not rows:
        return []
    out: list[Block] = [_h("Where pipeline parallelism pays"), Para(text=(prose(grid.crossover(data, rows, p)),),
                                                                  style="rec")]
    if "pp_gain" in rep.figures:
        out.append(Figure(name="pp_gain"))
    out += [Table(*grid.table(rows), text_cols=1, style="words"),
            Para(text=(lit("Each cell: "), text(p.pp), lit(" / "), text(p.no_pp),
                       lit(" in aggregate prompt and output t/s (above 1: pipeline parallelism is faster), ratio of "
                           "medians with its 95% bootstrap interval; *pays* and *costs* need the ratio beyond the "
                           f"threshold ({speed.threshold_of(data):.0%}) and an interval that excludes 1.")),
                 only="md")]
    return out


def _versions(rep: Report) -> list[Block]:
    """Memory and speed per llama.cpp version, where the builds ran more than one."""
    data = rep.data
    if not versions.applies(data):
        return []
    rows = versions.rows(data)
    lines = versions.sentences(rows)
    return [_h("Versions"),
            Para(text=(lit("The same configuration on each llama.cpp the builds ran: compute, KV cache and weights "
                           "summed over the devices and the host (MiB, as each version's log prints them), the "
                           "context it ran with, and speed (medians; the speed section below has the verdicts)."),),
                 only="md"),
            Table(*versions.table(rows), text_cols=5),
            Items(items=_proses(lines), style="verdict", only="" if lines else "md")]


def _trust(rep: Report) -> list[Block]:
    lines = summary.noise_lines(rep.data) + summary.fidelity_lines(rep.data)
    return [_h("How far to trust the figures"), Items(items=_proses(lines))] if lines else []


def _plots(rep: Report) -> list[Block]:
    others = [n for n in rep.figures if n not in ("pp_gain", "tune_front", "memory")]  # those shown in sections
    return [_h("Plots"), *(Figure(name=n) for n in others)] if others else []


def _builds(rep: Report) -> list[Block]:
    data = rep.data
    builds = summary.build_items(data)
    if not builds:
        return []
    entries: list[Text] = [(text(b["name"]), lit(": "), text(b["label"]), lit(" — CMake "), code(b["cmake"]),
                            lit(", llama.cpp "), text(b["source"]), lit(", "), text(b["status"])) for b in builds]
    entries += [(lit("binaries "), text(v)) for k, v in summary.system_items(data) if k == "Binaries"]
    notes = summary.binary_notes(data)
    entries += [(lit("note: "), text(n)) for n in notes]
    return [_h("Builds"), Items(items=tuple(entries), only="md"),
            Table(["Build", "Label", "Status", "CMake options", "llama.cpp", "Build time"],
                  [[b["name"], b["label"], b["status"], b["cmake"], b["source"], b["build"]] for b in builds],
                  text_cols=6, only="html"),
            *(Para(text=(text(n),), style="note", only="html") for n in notes)]


def _listed(title: str, lines: Callable[[RunData], list[str]]) -> Callable[[Report], list[Block]]:
    def section(rep: Report) -> list[Block]:
        found = lines(rep.data)
        return [_h(title), Items(items=_proses(found))] if found else []
    return section


def _splits(rep: Report) -> list[Block]:
    splits = summary.split_table(rep.data)
    if not splits:
        return []
    return [_h("Graph splits and buffers per device"),
            Para(text=(lit("Each configuration as it loaded: llama.cpp's `graph splits` (more splits: more hand-offs "
                           "between devices or to the CPU; pipeline parallelism keeps `Copies` copies of every split's "
                           "inputs), and each device's compute and KV buffers."),)),
            Details(summary=(lit(f"Splits and buffers of {len(splits[1])} configuration(s)"),),
                    blocks=(Table(*splits),))]


def _memory(rep: Report) -> list[Block]:
    lines = summary.memory_lines(rep.data) + context.sentences(rep.data)
    return [_h("Memory, compared"), Items(items=_proses(lines))] if lines else []


def _speed(rep: Report) -> list[Block]:
    lines = summary.speed_lines(rep.data)
    if not lines:
        return []
    return [_h(f"Speed (ratio of medians, 95% bootstrap interval, threshold {speed.threshold_of(rep.data):.0%})"),
            Details(summary=(lit(f"Every speed comparison: {len(lines)} line(s)"),),
                    blocks=(Items(items=_proses(lines)),))]


def _network(rep: Report) -> list[Block]:
    """Remote rpc-servers: their devices and pipeline parallelism (Markdown written by `network`)."""
    if not network.has_remotes(rep.data):
        return []
    return [Para(text=(text(network.markdown(rep.data)),))]


def _reproduce(rep: Report) -> list[Block]:
    rep_ = summary.reproduce(rep.data)
    if not rep_:
        return []
    out: list[Block] = [_h("How each configuration was run"),
                        Items(items=tuple((text(x["build"]), lit(" × "), text(x["setting"]), lit(": "),
                                           code(f"{x['env'] + ' ' if x['env'] else ''}llama-server -m MODEL "
                                                f"{x['server']}"))
                                          for x in rep_), only="md")]
    for x in rep_:
        env: Text = (lit("; environment: "), code(x["env"])) if x["env"] else ()
        out += [Para(text=(text(x["build"], bold=True), lit(" × ", bold=True), text(x["setting"], bold=True),
                           lit(" — CMake: "), code(x["cmake"]), *env), only="html"),
                Code(text=f"llama-server -m MODEL {x['server']}", only="html")]
    return out


def _study(rep: Report) -> list[Block]:
    toml = rep.data.study_toml
    return [_h("Study file"), Details(summary=(lit(f"The study as it ran: {len(toml.splitlines())} lines of TOML"),),
                                      blocks=(Code(text=toml),))] if toml else []


def _footnote(rep: Report) -> list[Block]:
    within: Text = (lit(" "), text(context.WITHIN_NOTE)) if context.searched(rep.data) else ()
    return [Para(text=(lit("Compute buffers are llama.cpp's own "), code("compute buffer size"),
                       lit(" lines (MiB); context is the "), code("n_ctx"), lit(" the server ran with."), *within))]


def _footer(rep: Report) -> list[Block]:
    return [Para(text=(lit("Made by llamalab from the results database; run "), text(rep.data.id), lit(".")),
                 style="note")]


SECTIONS: dict[str, Callable[[Report], list[Block]]] = {
    "title": _title,
    "tune": _tune,
    "answer": _answer,
    "memory_picture": _memory_picture,
    "decision": _decision,
    "outputs": _outputs,
    "system": _system,
    "results": _results,
    "verdict": _verdict,
    "throughput": _throughput,
    "pp_gain": _pp_gain,
    "versions": _versions,
    "builds": _builds,
    "not_measured": _listed("Not measured", summary.not_measured),
    "not_applicable": _listed("Not applicable on this rig", summary.not_applicable_lines),
    "splits": _splits,
    "memory": _memory,
    "speed": _speed,
    "trust": _trust,
    "plots": _plots,
    "network": _network,
    "reproduce": _reproduce,
    "study": _study,
    "footnote": _footnote,
    "footer": _footer,
}
