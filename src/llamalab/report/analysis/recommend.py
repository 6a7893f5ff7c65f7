"""Advice from everything measured: a small decision table by use, and the paragraph derived from it.

Three uses, each a row: one user with short prompts (the shortest prompt measured, one request), one user with
long prompts — RAG, agents, code — (the longest prompt, one request), and serving N requests at once (the highest
concurrency level, every prompt length that ran there). For each row and each build against the setting's baseline
(the study's first build, llama.cpp's default), what the build *buys* and what it *costs* is read off the stored
run alone:

- speed: every comparison in the row's scope (`speed.comparisons`: ratio, 95% interval, verdict) — a "faster"
  verdict is bought, a "slower" one is a cost, "no measurable difference" neither, "not comparable" neither (and
  said);
- context: the tokens `--fit` gave it over the baseline (never past the model's n_ctx_train), bought in the
  long-prompt and serving rows (short prompts do not need it), a cost in every row where it is lost; a context
  from an over-budget configuration counts for nothing;
- memory: weights that moved (model buffers that differ from the baseline's) are always a cost; compute the build
  frees without a context gain is said, and buys nothing under the study's budgets.

A build is recommended for a use only when it buys something there, with every cost it has there stated; when
none does, the row keeps the baseline and says what the best alternative would have bought and cost. The paragraph
is written from the rows, so it can say nothing the table does not. Pure: takes a stored RunData.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from ...core import stats
from ..data import RunData
from . import context, outputs, speed
from .summary import cmake_defs, study_cmake_of
from .tables import OUTPUTS_HEAD
from .verdict import memory_comparisons, placed_otherwise, study_builds, study_settings

SHORT, LONG, SERVING = "short", "long", "serving"
TITLES = {SHORT: "One user, short prompts", LONG: "One user, long prompts (RAG, agents, code)",
          SERVING: "Serving {n} requests at once"}
ROW_METRICS = {SHORT: ("input_tps", "ttft_ms", "output_tps", "itl_ms"),
               LONG: ("input_tps", "ttft_ms", "output_tps", "itl_ms"),
               SERVING: ("aggregate_output_tps", "aggregate_input_tps", "ttft_ms", "itl_ms")}
CONTEXT_MATTERS = {SHORT: False, LONG: True, SERVING: True}
SAME_CONTEXT = 256  # --fit steps the context by 256 tokens: closer than that is the same context


def action(data: RunData, build: str) -> str:
    """What a user does to get this build's configuration: a CMake command or llama-server flags — of its engine,
    named where it is not llama.cpp."""
    args = data.build_spec(build).args
    cmake = study_cmake_of(data, build)
    engine = data.engine(build)
    parts = [] if engine == "llama.cpp" else [f"run {engine}"]
    if cmake:
        defs = cmake_defs(cmake)
        parts.append(f"build {engine} with `cmake -B build {defs} && cmake --build build --target llama-server`")
    if args:
        parts.append(f"start llama-server with `{shlex.join(args)}`")
    if parts == [f"run {engine}"]:
        return f"use {engine}'s defaults"
    return " and ".join(parts) or "use llama.cpp's defaults"


def baseline_is(data: RunData, build: str) -> str:
    """What the baseline build is, in words: llama.cpp's default, or, in a study of llama.cpp versions (where no
    build is "the default"), its version."""
    from . import versions

    row = next((b for b in data.builds if b["name"] == build), None)
    if data.engine(build) != "llama.cpp":
        return f"{data.engine(build)}'s default"
    if row is None or not versions.applies(data):
        return "llama.cpp's default"
    return f"llama.cpp {versions.source_of(row)['version']}"


def ratio_text(c: dict | None) -> str:
    if c is None:
        return "not measured"
    iv = f" [{c['ci_low']:.2f}, {c['ci_high']:.2f}]" if c.get("ci_low") is not None else " (one trial: no interval)"
    return f"{c['ratio']:.2f}×{iv}"


# ---------------------------------------------------------------- one build in one use


@dataclass
class Claim:
    """One measured figure in a row: `kind` speed | context | weights | memory; `comparison` for speed."""

    kind: str
    text: str
    comparison: dict | None = None
    label: str = ""  # for speed: the metric (and where), without the ratio


@dataclass
class Assessment:
    build: str
    buys: list[Claim] = field(default_factory=list)
    costs: list[Claim] = field(default_factory=list)
    same: list[dict] = field(default_factory=list)  # comparisons with no measurable difference
    unlike: list[dict] = field(default_factory=list)  # comparisons that are not comparable
    untested: list[dict] = field(default_factory=list)  # one trial on a side: a ratio, no verdict
    notes: list[str] = field(default_factory=list)  # neither bought nor paid: freed memory without a context gain
    unneeded_context: str = ""  # a context gain in a use that does not need it (short prompts)
    context_gain: int = 0
    freed_mib: float = 0.0  # compute freed over every device
    moved: bool = False
    context_unknown: str = ""  # why its context against the baseline's is not known (never counted as no gain)
    outputs: str = "not compared"  # its outputs against the baseline's (report.analysis.outputs: a table cell)
    differs: str = ""  # why it is never recommended: it computes differently (the verdict's words)

    @property
    def speed_buys(self) -> list[Claim]:
        return [c for c in self.buys if c.kind == "speed"]

    @property
    def speed_costs(self) -> list[Claim]:
        return [c for c in self.costs if c.kind == "speed"]


@dataclass
class Scope:
    use: str
    title: str
    setting: str
    level: int
    cells: list[tuple[int, int]]  # (prompt tokens, output tokens)
    note: str = ""  # why the scope is narrower than the use (one prompt length measured, …)

    def covers(self, c: dict) -> bool:
        return (c["setting"] == self.setting and c["concurrency"] == self.level
                and (c.get("prompt_tokens"), c.get("output_tokens")) in self.cells
                and c["metric"] in ROW_METRICS[self.use])


def _label(c: dict, scope: Scope, many_outputs: bool) -> str:
    m = speed.metric(c["metric"]).short
    if len(scope.cells) > 1:
        m += f" at {c['prompt_tokens']:,}-token prompts"
        if many_outputs:
            m += f", {c['output_tokens']:,} output tokens"
    return m


def _memory(data: RunData, setting: str, build: str) -> dict | None:
    return next((m for m in memory_comparisons(data) if m["setting"] == setting and m["candidate"] == build), None)


def assess(data: RunData, scope: Scope, build: str, comps: list[dict], ctx: dict, many_outputs: bool
           ) -> Assessment:
    """What `build` buys and costs against the setting's baseline, for one use."""
    a = Assessment(build)
    v = outputs.verdicts(data).get((build, scope.setting))
    a.outputs = outputs.short(v, build)
    if v is not None and not v.recommendable:
        a.differs = v.words
        a.costs.append(Claim("outputs", f"{v.words} (against {v.baseline})"))
    _weigh_speed(a, scope, comps, many_outputs)
    row = ctx.get((build, scope.setting))
    base_row = ctx.get((row["baseline"], scope.setting)) if row else None
    gain = (row or {}).get("measured_delta_tokens")
    if row and gain is None:
        why = row.get("context_unknown") or (base_row or {}).get("context_unknown")
        if why:
            whose = build if row.get("context_unknown") else row["baseline"]
            a.context_unknown = f"{whose}'s context within the budgets is not known ({why})"
    a.context_gain = gain or 0
    mem = _memory(data, scope.setting, build)
    if mem:
        _weigh_memory(a, mem)
    _weigh_context(a, scope, row, base_row, mem)
    return a


def _weigh_speed(a: Assessment, scope: Scope, comps: list[dict], many_outputs: bool) -> None:
    """Sort the build's speed comparisons in the scope by verdict: bought, paid, not comparable, untested, same."""
    for c in comps:
        if c["candidate"] != a.build or not scope.covers(c):
            continue
        text = f"{_label(c, scope, many_outputs)} {ratio_text(c)}"
        if c["verdict"] == "faster":
            a.buys.append(Claim("speed", text, c, _label(c, scope, many_outputs)))
        elif c["verdict"] == "slower":
            a.costs.append(Claim("speed", text, c, _label(c, scope, many_outputs)))
        elif c["verdict"] == speed.NOT_COMPARABLE:
            a.unlike.append(c)
        elif c["verdict"] == stats.UNTESTED:
            a.untested.append(c)
        else:
            a.same.append(c)


def _weigh_memory(a: Assessment, mem: dict) -> None:
    """The compute the build frees, the weights it moves (a cost, or a note for a split mode's own placement) and
    the compute buffer it grows (a cost)."""
    a.freed_mib = -sum(v for v in mem["compute_delta_mib"].values() if v is not None)
    if mem["weights_moved"] and placed_otherwise(mem):
        # a split change's own placement: stated, but not the warning meant for an override that moves weights
        a.notes.append(f"{placed_otherwise(mem)} places the weights otherwise ({mem['weights_moved_text']})")
    elif mem["weights_moved"]:
        a.moved = True
        a.costs.append(Claim("weights", f"moves weights ({mem['weights_moved_text']}): not a no-op"))
    grown = {d: v for d, v in mem["compute_delta_mib"].items() if v is not None and v > 1.0}
    if grown:
        a.costs.append(Claim("memory", "more compute buffer (" + ", ".join(
            f"{d} {v:+,.2f} MiB" for d, v in grown.items()) + ")"))


def _weigh_context(a: Assessment, scope: Scope, row: dict | None, base_row: dict | None, mem: dict | None) -> None:
    """The context gained (bought where the use needs it), the context lost (a cost), or, with neither, the compute
    freed without a context gain and why (a note)."""
    gain = a.context_gain
    if gain > 0 and row and base_row:
        text = (f"+{gain:,} tokens of context ({base_row['n_ctx']:,} → {row['n_ctx']:,}{context.limit_text(row)}"
                + (" within every budget" if row.get("budget_fit") else "") + ")")
        if CONTEXT_MATTERS[scope.use]:
            a.buys.append(Claim("context", text))
        else:
            a.unneeded_context = text + ", which short prompts do not need"
    elif gain < 0 and row and base_row:
        a.costs.append(Claim("context", f"{gain:,} tokens of context ({base_row['n_ctx']:,} → "
                                        f"{row['n_ctx']:,}" + (" within every budget" if row.get("budget_fit")
                                                               else "") + ")"))
    elif a.freed_mib > 1.0 and mem and not a.context_unknown:
        n = max(1, len(mem["compute_delta_mib"]))
        why = ("the baseline already runs the model's whole context" if base_row and base_row.get("at_model_limit")
               else "no budget limited the context" if not (row or {}).get("budgets_mib")
               and not (row or {}).get("fit_reduced_from") else "no more within every budget"
               if (row or {}).get("budget_fit") else "the fit gave no more context")
        a.notes.append(f"frees {a.freed_mib / n:,.0f} MiB of compute buffer per device but gains no context ({why})")


def _rank(a: Assessment, order: list[str], data: RunData) -> tuple:
    """Best first: nothing paid, most context, most speed bought, least speed paid, no weights moved, no rebuild."""
    return (bool(a.costs), -a.context_gain, -len(a.speed_buys), len(a.speed_costs), a.moved,
            bool(study_cmake_of(data, a.build)), order.index(a.build) if a.build in order else 1 << 30)


def _same_outcome(a: Assessment, b: Assessment) -> bool:
    """Two builds that buy and cost the same here (context within the fit's step, the same verdicts)."""
    def verdicts(x: Assessment) -> set:
        return {(m["metric"], m["prompt_tokens"], m["output_tokens"], side)
                for side, claims in (("buys", x.speed_buys), ("costs", x.speed_costs)) for c in claims
                if (m := c.comparison) is not None}  # every speed claim carries its comparison
    return (abs(a.context_gain - b.context_gain) <= SAME_CONTEXT and not a.moved and not b.moved
            and verdicts(a) == verdicts(b) and bool(a.costs) == bool(b.costs))


# ---------------------------------------------------------------- the table


@dataclass
class Row:
    use: str
    title: str
    setting: str
    build: str  # what to run: the chosen build, or the baseline when keeping the default
    baseline: str
    keep_default: bool
    run: str
    buys: list[Claim]
    costs: list[Claim]
    same: list[dict]
    unlike: list[dict]
    notes: list[str]
    measured: str
    alternatives: list[str] = field(default_factory=list)  # builds that give the same here
    versus: str | None = None  # keeping the default: the alternative it is weighed against
    context_only: bool = False  # the build buys context alone and pays for it in speed
    measured_any: bool = True
    baseline_is: str = "llama.cpp's default"  # what the baseline is, in words ("llama.cpp b11312" among versions)
    context_unknown: str = ""  # the chosen build's (or, keeping the default, the alternative's) context is not known
    untested: list[dict] = field(default_factory=list)  # comparisons of one trial: a ratio, neither bought nor paid
    outputs: str = "not compared"  # the run build's outputs against the baseline's (keeping the default: "baseline")

    def as_json(self) -> dict:
        return {"use": self.use, "title": self.title, "setting": self.setting, "build": self.build,
                "baseline": self.baseline, "keep_default": self.keep_default, "run": self.run,
                "buys": [c.text for c in self.buys], "costs": [c.text for c in self.costs],
                "cost_comparisons": [c.comparison for c in self.costs if c.comparison],
                "buy_comparisons": [c.comparison for c in self.buys if c.comparison],
                "no_difference": [f"{speed.metric(c['metric']).short} {ratio_text(c)}" for c in self.same],
                "not_comparable": [f"{speed.metric(c['metric']).short}: {c['reason']}" for c in self.unlike],
                "untested": [f"{speed.metric(c['metric']).short} {ratio_text(c)}" for c in self.untested],
                "notes": self.notes, "measured": self.measured, "alternatives": self.alternatives,
                "versus": self.versus, "context_only": self.context_only,
                "context_unknown": self.context_unknown or None, "outputs": self.outputs}


def _scopes(data: RunData, setting: str) -> list[Scope]:
    trials = [t for t in data.trials if t["setting"] == setting and not t.get("errors")]
    by_level: dict[int, set[tuple[int, int]]] = {}
    for t in trials:
        by_level.setdefault(int(t["concurrency"]), set()).add(data.cell(t))
    out = []
    single = sorted(by_level.get(1, set()))
    prompts = sorted({p for p, _ in single})
    if prompts:
        lo, hi = prompts[0], prompts[-1]
        out.append(Scope(SHORT, TITLES[SHORT], setting, 1, [c for c in single if c[0] == lo]))
        note = "" if hi != lo else f"only {lo:,}-token prompts were measured"
        out.append(Scope(LONG, TITLES[LONG], setting, 1, [c for c in single if c[0] == hi], note))
    else:
        out.append(Scope(SHORT, TITLES[SHORT], setting, 1, [], "single requests were not measured"))
        out.append(Scope(LONG, TITLES[LONG], setting, 1, [], "single requests were not measured"))
    parallel = [lv for lv in by_level if lv > 1]
    if parallel:
        top = max(parallel)
        out.append(Scope(SERVING, TITLES[SERVING].format(n=top), setting, top, sorted(by_level[top])))
    else:
        out.append(Scope(SERVING, TITLES[SERVING].format(n="N"), setting, 0, [],
                         "parallel requests were not measured: rerun with --set workload.concurrency=[1,4]"))
    return out


def _measured(data: RunData, scope: Scope, build: str, baseline: str) -> str:
    if not scope.cells:
        return scope.note
    prompts = sorted({p for p, _ in scope.cells})
    outputs = sorted({o for _, o in scope.cells})
    n = sorted({int(t["trial"]) for t in data.trials if t["setting"] == scope.setting
                and t["build"] in (build, baseline) and int(t["concurrency"]) == scope.level
                and data.cell(t) in scope.cells and not t.get("errors")})
    req = "1 request" if scope.level == 1 else f"{scope.level} requests at once"
    s = (f"{scope.setting}; {'/'.join(f'{p:,}' for p in prompts)}-token prompts, "
         f"{'/'.join(f'{o:,}' for o in outputs)} output tokens; {req}; {len(n)} trial(s) each")
    return s + (f" ({scope.note})" if scope.note else "")


def decision_table(data: RunData, setting: str | None = None) -> list[Row]:
    """The rows for one setting (default: the study's first setting with a measured baseline)."""
    settings = study_settings(data)
    ctx = {(r["build"], r["setting"]): r for r in context.rows(data)}
    if setting is None:
        setting = next((s for s in settings if any(k[1] == s for k in ctx)), None)
    if setting is None:
        return []
    order = study_builds(data)
    base = next((b for b in order if (b, setting) in ctx), None)
    if base is None:
        return []
    cands = [b for b in order if b != base and (b, setting) in ctx]
    comps = speed.comparisons(data)
    many_outputs = len({o for _, o in data.cells}) > 1
    rows = []
    for scope in _scopes(data, setting):
        assessed = [assess(data, scope, b, comps, ctx, many_outputs) for b in cands]
        # an arm that computes differently is never recommended, whatever it buys
        eligible = sorted((a for a in assessed if a.buys and not a.differs), key=lambda a: _rank(a, order, data))
        if eligible:
            rows.append(_pick_row(data, scope, base, assessed, eligible))
        else:
            rows.append(_keep_default_row(data, scope, base, assessed, order))
    return rows


def _pick_row(data: RunData, scope: Scope, base: str, assessed: list[Assessment], eligible: list[Assessment]
              ) -> Row:
    """The row of a use where some build buys something: the best of them (`eligible`, best first), led by one that
    needs no rebuild where one gives the same, with the others that give the same as alternatives."""
    pick = eligible[0]
    alts = [a.build for a in eligible[1:] if _same_outcome(a, pick)]
    # lead with a build that needs no rebuild where one gives the same
    runtime = [b for b in [pick.build, *alts] if not study_cmake_of(data, b)]
    if runtime and runtime[0] != pick.build:
        alts = [pick.build, *[b for b in alts if b != runtime[0]]]
        pick = next(a for a in assessed if a.build == runtime[0])
    context_only = all(c.kind == "context" for c in pick.buys) and bool(pick.speed_costs)
    notes = pick.notes + ([pick.unneeded_context] if pick.unneeded_context else [])
    return Row(scope.use, scope.title, scope.setting, pick.build, base, False, action(data, pick.build),
               pick.buys, pick.costs, pick.same, pick.unlike, notes,
               _measured(data, scope, pick.build, base), alts, None, context_only, bool(scope.cells),
               context_unknown=pick.context_unknown if CONTEXT_MATTERS[scope.use] else "",
               untested=pick.untested, outputs=pick.outputs)


def _keep_default_row(data: RunData, scope: Scope, base: str, assessed: list[Assessment], order: list[str]) -> Row:
    """The row of a use where nothing buys anything: keep the default, weighed against the best alternative."""
    ref = sorted(assessed, key=lambda a: (a.moved, -a.context_gain, not a.context_unknown, -a.freed_mib,
                                          bool(a.speed_costs),
                                          bool(study_cmake_of(data, a.build)), order.index(a.build)))
    alt = ref[0] if ref else None
    buys, costs, notes = _kept(alt, scope) if alt is not None else ([], [], [])
    how = action(data, base)
    return Row(scope.use, scope.title, scope.setting, base, base, True,
               f"keep {base}" + ("" if how == "use llama.cpp's defaults" else f" ({how})"), buys, costs,
               alt.same if alt else [], alt.unlike if alt else [], notes,
               _measured(data, scope, alt.build if alt else base, base), [],
               alt.build if alt else None, False, bool(scope.cells), baseline_is(data, base),
               context_unknown=alt.context_unknown if alt and CONTEXT_MATTERS[scope.use] else "",
               untested=alt.untested if alt else [], outputs="baseline")


def _kept(alt: Assessment, scope: Scope) -> tuple[list[Claim], list[Claim], list[str]]:
    """What keeping the default buys (the speed the alternative loses), costs (the context it would gain) and
    notes (the alternative's other costs and notes, each with a verb)."""
    buys: list[Claim] = []
    costs: list[Claim] = []
    notes: list[str] = []
    for c in alt.speed_costs:  # the alternative is slower: keeping the default keeps that speed
        buys.append(Claim("speed", f"{c.label} ({alt.build}: {ratio_text(c.comparison)})", c.comparison,
                          c.label))
    for c in alt.costs:  # a verb for each: "it needs more compute buffer …, has -512 tokens of context …"
        verb = {"memory": "needs ", "context": "has ", "outputs": "is never recommended: it "}.get(c.kind, "")
        if c.kind in ("weights", "context", "memory", "outputs"):
            notes.append(f"{alt.build} {verb}{c.text}")
    if alt.context_gain > 0:
        costs.append(Claim("context", f"{alt.context_gain:,} tokens of context less than {alt.build}"
                                      + (" (short prompts do not need them)" if scope.use == SHORT else "")))
    notes += [f"{alt.build} {n}" for n in alt.notes]
    return buys, costs, notes


# ---------------------------------------------------------------- the paragraph


def join_and(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _untested_text(untested: list[dict]) -> str:
    """"untested with one trial: prompt t/s 0.85×, …": measured once, neither a gain nor a cost."""
    names = list(dict.fromkeys(f"{speed.metric(c['metric']).short} {ratio_text(c)}" for c in untested))
    return f"untested with one trial: {join_and(names)}" if names else ""


def _same_text(same: list[dict]) -> str:
    names = list(dict.fromkeys(speed.metric(c["metric"]).short for c in same))
    return f"no measurable difference in {join_and(names)}" if names else ""


def row_sentence(r: Row, data: RunData | None = None, said: set[str] | None = None) -> str:
    """One row of the table as a sentence; every speed figure in it is the row's own. With `data`, alternatives
    are named with what a user does to get them, the first time (`said` remembers across rows)."""
    said = set() if said is None else said
    if not r.measured_any:
        return f"{r.title}: {r.measured}."
    if r.keep_default:
        return _keep_sentence(r)
    return _run_sentence(r, data, said)


def _unlike_text(unlike: list[dict]) -> str:
    """"not comparable: prompt t/s (foreign CPU load …)": each metric's comparison that had no verdict, once."""
    return "not comparable: " + join_and(list(dict.fromkeys(
        f"{speed.metric(c['metric']).short} ({c['reason']})" for c in unlike)))


def _keep_sentence(r: Row) -> str:
    """A row that keeps the default, as a sentence: what keeping it keeps and costs against the alternative."""
    s = f"{r.title}: keep {r.baseline} ({r.baseline_is})"
    if r.versus is None:
        return s + ": no other build was measured."
    reasons = []
    said_same = False
    if r.buys:
        reasons.append(f"it keeps {join_and([c.text for c in r.buys])}, where {r.versus} is slower")
    else:
        what = [n.removeprefix(f"{r.versus} ") for n in r.notes]
        if r.same:
            what.append(_same_text(r.same).replace("no measurable", "makes no measurable", 1))
            said_same = True
        if r.context_unknown:
            reasons.append(f"{r.context_unknown}, so what {r.versus} buys here is not known"
                           + (f"; it {join_and(what)}" if what else ""))
        else:
            reasons.append(f"{r.versus} buys nothing measurable here" + (f": it {join_and(what)}" if what else ""))
    if r.costs:
        reasons.append(f"keeping it costs {join_and([c.text for c in r.costs])}")
    if r.notes and r.buys:
        reasons.append(join_and(r.notes))
    if r.same and not said_same:
        reasons.append(f"{_same_text(r.same)} ({r.versus} vs {r.baseline})")
    if r.untested:
        reasons.append(f"{_untested_text(r.untested)} ({r.versus} vs {r.baseline})")
    if r.unlike:
        reasons.append(_unlike_text(r.unlike))
    return s + " — " + "; ".join(reasons) + "."


def _run_sentence(r: Row, data: RunData | None, said: set[str]) -> str:
    """A row that picks a build, as a sentence: what it buys and costs, then the builds that give the same (named
    with what a user does to get them the first time, where `data` is given)."""
    buys = join_and([c.text for c in r.buys])
    costs = join_and([c.text for c in r.costs])
    head = f"{r.title}: " + (f"if you need the context, {r.run}" if r.context_only else r.run)
    s = f"{head} — it buys {buys}"
    s += f"; it costs {costs}" if costs else "; no measured cost"
    if r.outputs == "not compared":
        s += " (its outputs were not compared with the baseline's)"
    if r.context_unknown:
        s += f"; {r.context_unknown}"
    if r.same:
        s += f"; {_same_text(r.same)}"
    if r.untested:
        s += f"; {_untested_text(r.untested)}"
    if r.unlike:
        s += "; " + _unlike_text(r.unlike)
    if r.context_only:
        s += f"; otherwise keep {r.baseline}"
    if r.alternatives:
        alts = []
        for b in r.alternatives:
            alts.append(b if b in said or data is None else f"{b} ({action(data, b)})")
            said.add(b)
        s += ". The same comes from " + " or from ".join(alts)
    return s + "."


def recommendation(data: RunData) -> str:
    """The paragraph: one sentence per row of the first setting's decision table, then what differs with the
    other settings."""
    settings = study_settings(data)
    rows_ctx = context.rows(data)
    if not rows_ctx:
        return "No configuration finished, so there is nothing to recommend yet; see the failures above."
    base = rows_ctx[0]["baseline"]
    table = decision_table(data)
    text = ""
    if not any(_pp_on(data, base, s) for s in settings):
        text = (f"Pipeline parallelism was not active in {base} on these devices (one device, a split mode other than "
                "layer, or a backend without events), so its scheduler copies cost nothing here. ")
    if not table:
        return text + f"Only {base} was measured: nothing to compare."
    said: set[str] = set()
    text += " ".join(row_sentence(r, data, said) for r in table)
    first = table[0].setting
    for s in settings:
        if s == first:
            continue
        other = decision_table(data, s)
        if not other:
            continue
        same = [(a.build, a.keep_default) for a in other] == [(b.build, b.keep_default) for b in table]
        gains = [r for r in rows_ctx if r["setting"] == s and r["build"] != r["baseline"]
                 and r["measured_delta_tokens"]]
        g = "; ".join(f"{r['build']} {r['measured_delta_tokens']:+,} tokens" for r in gains)
        if same:
            text += f" With {s}: the same choices" + (f" (context: {g})" if g else "") + "."
        else:
            text += f" With {s}: " + " ".join(row_sentence(r, data, said) for r in other)
    return text


def _pp_on(data: RunData, build: str, setting: str) -> bool | None:
    cfg = context.config_of(data, build, setting)
    return (cfg or {}).get("ledger", {}).get("pipeline_parallel") if cfg else None


def table_cells(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """The decision table for Markdown, HTML and the terminal: use, what to run, what it buys, what it costs,
    where it was measured."""
    head = ["Use", "Run", "Buys", "Costs", OUTPUTS_HEAD, "Measured"]
    body = []
    for r in rows:
        run = r.run + (f" (the same: {', '.join(r.alternatives)})" if r.alternatives else "")
        if r.context_only:
            run = "if you need the context: " + run
        buys = "; ".join(c.text for c in r.buys) or "nothing measurable"
        costs = "; ".join([*(c.text for c in r.costs), *([f"unknown: {r.context_unknown}"] if r.context_unknown
                                                          else []),
                           *(["outputs not compared"] if r.outputs == "not compared" and not r.keep_default
                             else [])]) or "none measured"
        extra = [n for n in r.notes]
        if r.same:
            extra.append(_same_text(r.same))
        if r.untested:
            extra.append(_untested_text(r.untested))
        if r.unlike:
            extra.append("not comparable: " + ", ".join(dict.fromkeys(speed.metric(c["metric"]).short
                                                                       for c in r.unlike)))
        measured = r.measured + (f" — {'; '.join(extra)}" if extra else "")
        body.append([r.title, run, buys if r.measured_any else "–", costs if r.measured_any else "–", r.outputs,
                     measured])
    return head, body


def as_json(data: RunData) -> dict:
    return {"context": context.rows(data), "decision_table": [r.as_json() for r in decision_table(data)],
            "recommendation": recommendation(data)}

