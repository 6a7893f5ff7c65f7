"""The answer a report opens with: what to run, in at most two sentences and `WORDS` words, and the command that
runs it — written from the decision table (`recommend.decision_table`), so it says nothing the table does not.

One phrase per distinct decision of the first setting's table (keep the default; run a build; run it if you need
the context), its uses named together; the first phrase is the first sentence, the others the second. Each phrase
carries the figure that decides it: the context bought, and the worst speed paid ("up to 11% slower", with the
comparison it comes from). Where the phrases run past `WORDS`, the figures in brackets go first, then the
comparison behind the worst cost. Pure: takes a stored RunData.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...core.safetext import shell_line
from ..data import RunData
from . import context, recommend, speed
from .summary import cmake_defs, study_cmake_of

WORDS = 60
USES = {recommend.SHORT: "short prompts", recommend.LONG: "long prompts"}


@dataclass(frozen=True)
class Answer:
    sentences: tuple[str, ...]  # at most two, written with Markdown code spans
    command: str  # the shell lines that run `build` ("" where nothing ran); where the answer picks a build per use,
    # each one's lines under a `# uses: build` comment
    build: str | None  # the build the command runs: the first one the answer picks, else the baseline

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def words(s: str) -> int:
    return len(s.split())


def answer(data: RunData) -> Answer:
    if "answer" not in data.memo:
        data.memo["answer"] = _answer(data)
    return data.memo["answer"]


def _answer(data: RunData) -> Answer:
    rows_ctx = context.rows(data)
    if not rows_ctx:
        return Answer(("No configuration finished, so there is nothing to recommend yet; see the failures below.",),
                      "", None)
    base = rows_ctx[0]["baseline"]
    table = [r for r in recommend.decision_table(data) if r.measured_any]
    if not table:
        setting = rows_ctx[0]["setting"]
        return Answer((f"Only {base} was measured: nothing to compare.",), command(data, base, setting), base)
    groups: dict[tuple[bool, str, bool], list[recommend.Row]] = {}
    for r in table:
        groups.setdefault((r.keep_default, r.build, r.context_only), []).append(r)
    every = len(groups) == 1
    for terse in (0, 1, 2, 3):
        phrases = [_phrase(rows, every, terse) for rows in groups.values()]
        sentences = [phrases[0]] + (["; ".join(phrases[1:])] if phrases[1:] else [])
        if sum(words(s) for s in sentences) + 1 <= WORDS:
            break
    else:  # the other decisions, too many to say in the words left: the table has them
        sentences = [phrases[0], "the decision table has the other uses"]
    sentences = [s[0].upper() + s[1:] + "." for s in sentences]
    picks = {rows[0].build: rows for (keep, _, _), rows in groups.items() if not keep}
    setting = table[0].setting
    if len(picks) <= 1:
        pick = next(iter(picks), base)
        return Answer(tuple(sentences), command(data, pick, setting), pick)
    # a build per use: each one's command, under a comment that says which uses it serves
    lines = [f"# {_uses(rows, False)}: {b}\n{command(data, b, setting)}" for b, rows in picks.items()]
    return Answer(tuple(sentences), "\n".join(lines), next(iter(picks)))


def _uses(rows: list[recommend.Row], every: bool) -> str:
    if every:
        return "every use measured"
    names = [USES.get(r.use) or r.title[0].lower() + r.title[1:] for r in rows]
    if names[:2] == [USES[recommend.SHORT], USES[recommend.LONG]]:
        names[:2] = ["short and long prompts"]
    return recommend.join_and(names)


def _phrase(rows: list[recommend.Row], every: bool, terse: int) -> str:
    """One decision for the uses in `rows` (they share it), shorter as `terse` grows (0–3: `_worst`; from 1 the
    brackets of a context claim go)."""
    r = rows[0]
    head = f"for {_uses(rows, every)}, "
    if r.keep_default:
        s = head + f"keep {r.baseline} ({r.baseline_is})"
        if r.versus is None:
            return s
        if r.buys:
            return s + f": {r.versus} is slower ({_worst(r.buys, terse, 'slower')})"
        if r.context_unknown:
            return s + f": what {r.versus} buys is not known"
        return s + f": {r.versus} buys nothing measurable"
    buys = [c for x in rows for c in x.buys]
    costs = [c for x in rows for c in x.costs]
    verb = f"if you need the context, use {r.build}" if r.context_only else f"use {r.build}"
    paid = _paid(costs, terse)
    return head + verb + f": {_bought(buys, terse)}, " + (paid or "at no measured cost")


def _brief(text: str, terse: int) -> str:
    return re.sub(r" \([^()]*\)| \[[^\[\]]*\]", "", text) if terse else text


def _bought(buys: list[recommend.Claim], terse: int) -> str:
    ctx = next((c for c in buys if c.kind == "context"), None)
    parts = [_brief(ctx.text, terse)] if ctx else []
    fast = [c for c in buys if c.kind == "speed"]
    if fast:
        parts.append(_worst(fast, terse, "faster"))
    return " and ".join(parts) or "nothing measurable"


def _paid(costs: list[recommend.Claim], terse: int) -> str:
    parts = []
    slow = [c for c in costs if c.kind == "speed"]
    if slow:
        parts.append(_worst(slow, terse, "slower"))
    for kind, words_ in (("weights", "moved weights"), ("memory", "more compute buffer")):
        if any(c.kind == kind for c in costs):
            parts.append(words_)
    lost = next((c for c in costs if c.kind == "context"), None)
    if lost:
        parts.append(_brief(lost.text, terse))
    return recommend.join_and(parts)


def _size(c: recommend.Claim) -> float:
    """How far the comparison is from 1, as a share of the baseline's speed (a latency ratio turned around)."""
    cmp = c.comparison or {}
    ratio = float(cmp.get("ratio") or 1.0)
    higher = speed.metric(cmp["metric"]).higher_is_better if cmp.get("metric") else True
    r = ratio if higher else 1 / ratio
    return abs(r - 1)


def _worst(claims: list[recommend.Claim], terse: int, word: str) -> str:
    """"up to 11% slower (aggregate prompt t/s at 512-token prompts 0.89× [0.86, 0.99])": the largest of the
    claims' differences, with the comparison it comes from (`terse` 1: without its interval; 2: its metric
    alone; 3: the share alone)."""
    top = max(claims, key=_size)
    pct = max(1, round(_size(top) * 100))
    s = f"{'up to ' if len(claims) > 1 else ''}{pct}% {word}"
    if terse >= 3:
        return s
    if terse == 2 or top.comparison is None:
        return f"{s} in {top.label or top.text}"
    ratio = f"{top.comparison['ratio']:.2f}×" if terse else recommend.ratio_text(top.comparison)
    return f"{s} ({top.label} {ratio})"


def command(data: RunData, build: str, setting: str) -> str:
    """The commands that run `build` × `setting` as the study did, without llamalab: the CMake build where the build
    sets CMake options, then llama-server with the study's, the setting's and the build's own arguments (not the
    flags llamalab adds to emulate budgets or devices)."""
    lines = []
    cmake = study_cmake_of(data, build)
    if cmake:
        defs = cmake_defs(cmake)
        lines.append(f"cmake -B build {defs} && cmake --build build --target llama-server")
    st = data.study_spec
    set_args = next((list(s.args) for s in st.settings if s.name == setting), []) if st is not None else []
    args = [*data.server_args, *set_args, *data.build_spec(build).args]
    server = "build/bin/llama-server" if cmake else "llama-server"
    lines.append(shell_line([server, "-m", "MODEL.gguf", *args]))  # a word a terminal would act on: $'...'
    return "\n".join(lines)
