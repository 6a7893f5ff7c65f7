"""A tune run (`llamalab tune`) as the reports show it: the front measured, the pick for the goal and its exact
command, llama.cpp's default beside it, and how many candidates each stage looked at. Pure: from a stored RunData
(its `tunes` row and its trials), never from a live run.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ...core import stats
from ...core.safetext import one_line, shell_line
from ...llamacpp import argv, engines
from ...tune import pick as tunepick
from ...tune import space as ts
from ...tune.pick import Decision, Pick, compare, measured_front
from ...tune.records import DEFAULT, ledger_contexts
from .. import records
from ..data import RunData


@dataclass
class Row:
    build: str
    label: str
    n_ctx: int
    prompt: float | None
    gen: float | None
    agg: float | None
    n: int  # single-stream trials
    devices_mib: list[float | None]
    gen_vs_default: str = ""  # "1.01× [0.99, 1.03] — no measurable difference"
    vs_default: dict = field(default_factory=dict)  # metric → "0.64× [0.41, 0.85] — slower" against the default
    on_front: bool = False
    picked: bool = False
    note: str = ""
    kld: dict | None = None  # its KV cache against f16/f16 (llama-perplexity --kl-divergence), where measured
    kv: str = ""
    engine: str = engines.LLAMA_CPP  # whose llama-server ran it


@dataclass
class View:
    run_id: str
    doc: dict
    rows: list[Row]
    pick: Pick
    pick_sentence: str  # the pick and why, and its KV cache's cost in quality (at most two sentences)
    command: str
    default_command: str
    devices: list[str]
    parallel: int
    stage_lines: list[str] = field(default_factory=list)
    versus_default: str = ""  # the pick against llama.cpp's default: context and each speed, with its verdict
    undecided: list[str] = field(default_factory=list)  # what the measurements leave open about the pick
    rule: tunepick.Rule | None = None
    repeats: int = 1
    replay: tunepick.Replay | None = None  # an exhaustive run: the race over its own trials
    stored: bool = True  # the pick as the run stored it (False: a run stored before tunes stored their pick)
    command_words: list[str] = field(default_factory=list)  # the words of `command`


# ---------------------------------------------------------------- measured speeds (stage two)


# ---------------------------------------------------------------- the view


def doc_of(data: RunData) -> dict | None:
    rows = data.tables.get("tunes") or []
    if not rows:
        return None
    raw = rows[0].get("result")
    return raw if isinstance(raw, dict) else None


def _fmt(v: float | None, nd: int = 1) -> str:
    return "–" if v is None else f"{v:,.{nd}f}"


def command(data: RunData, build: str, parallel: int, model: str) -> str:
    """The llama-server command a configuration of the run ran with, as a user types it: its engine's llama-server
    (`server_binary`), the study's server arguments, the build's, and the slots (-np K, with -kvu where the engine
    has a unified KV cache); the budget emulation's -fitt and the default's `-ts 0,…` (llama.cpp's "no split given",
    there only to keep the emulation from adding one) left out, as are the devices' own arguments (--rpc, and on
    CPU + RPC the CPU's 0 that ik_llama.cpp's -ts gets in front: docs/engines.md)."""
    return shell_line(command_words(data, build, parallel, model))


def command_words(data: RunData, build: str, parallel: int, model: str) -> list[str]:
    """The words of `command` (what llama-swap's entry quotes its own way)."""
    server = data.server_args
    args = list(data.build_spec(build).args or [])
    if build == DEFAULT and (split := argv.value(args, *argv.TENSOR_SPLIT)) and set(split.replace(",", "")) <= {"0"}:
        args = argv.without(args, with_value=set(argv.TENSOR_SPLIT))
    slots = ["-np", str(parallel), *(["-kvu"] if _engine(data, build).unified_kv else [])]
    return [server_binary(data, build), "-m", model, *server, *args, *slots]


def _engine(data: RunData, build: str) -> engines.Engine:
    try:
        return engines.get(data.engine(build))
    except KeyError:  # an engine this llamalab does not know (an imported run): llama.cpp's words
        return engines.get(engines.LLAMA_CPP)


def server_binary(data: RunData, build: str) -> str:
    """llama.cpp's llama-server by its name (`llama-server`, as every llama.cpp install has it on PATH); another
    engine's, which shares that name, by the path the run started it from, else the path a build of its checkout
    gives it (`ik_llama.cpp/build/bin/llama-server`), so the command never starts the other engine's."""
    eng = _engine(data, build)
    if eng.name == engines.LLAMA_CPP:
        return "llama-server"
    ran = next((a[0] for c in reversed(data.configs) if c["build"] == build and (a := records.server_argv(c))), None)
    return ran or f"{eng.name}/build/bin/llama-server"


def _candidates(doc: dict) -> dict[str, dict]:
    """The tune's stage-one candidates that got a build (those stage two could run), by build."""
    return {c.get("build"): c for c in doc.get("candidates") or [] if c.get("build")}


def _contexts(doc: dict, cands: dict[str, dict]) -> dict[str, int]:
    """The context each configuration was tuned to, by build (llama.cpp's default's included; 0: unknown)."""
    ctx = {DEFAULT: int((doc.get("default") or {}).get("n_ctx") or 0)}
    ctx |= {b: int(c.get("n_ctx") or 0) for b, c in cands.items()}
    return ctx


def _measures(data: RunData, doc: dict) -> list[ts.Measures]:
    ctx = _contexts(doc, _candidates(doc))
    return ts.measures(data.trials, ctx, int(doc.get("parallel") or 1), ledger_contexts(data.ok_configs()))


def measures_of(data: RunData, v: View) -> list[ts.Measures]:
    return _measures(data, v.doc)


def decision(data: RunData, doc: dict, ms: list[ts.Measures]) -> tuple[Decision, bool]:
    """What the tune decided: as stored with the run (`tune_picks.pick_json`), or — for a run stored before tunes stored
    their pick — the pick under the rule of its stored search, made now (the second value says which)."""
    rows = data.tables.get("tune_picks") or []
    stored = rows[0].get("pick") if rows else None
    if isinstance(stored, dict):
        return Decision.from_dict(stored), True
    repeats = int(doc.get("repeats") or max((len(m.samples.get("output_tps") or []) for m in ms), default=1))
    return tunepick.decide(ms, tunepick.Rule.of_search(doc), repeats), False


def view(data: RunData) -> View | None:
    """The tune run of `data` as the reports show it (None: the run is no tune)."""
    doc = doc_of(data)
    if doc is None:
        return None
    k = int(doc.get("parallel") or 1)
    cands = _candidates(doc)
    ms = _measures(data, doc)
    d, stored = decision(data, doc, ms)
    p, rule, repeats = d.pick, d.rule, d.repeats
    order = [DEFAULT, *[b for b in (doc.get("stage2") or {}).get("real", []) if b != DEFAULT]]
    rows = _rows(doc, cands, ms, order, p, rule.differs or {})
    model = (doc.get("model") or {}).get("path") or "MODEL"
    pick_row = next((r for r in rows if r.build == p.name), None)
    base_row = next((r for r in rows if r.build == DEFAULT), None)
    sentence = _pick_sentence(p, pick_row, base_row, k)
    v = View(run_id=data.id, doc=doc, rows=rows, pick=p, pick_sentence=sentence,
             versus_default=_versus_default(pick_row, base_row),
             command=command(data, p.name, k, model), default_command=command(data, DEFAULT, k, model),
             command_words=command_words(data, p.name, k, model),
             devices=list((doc.get("rig") or {}).get("devices") or []), parallel=k, stored=stored)
    v.stage_lines = stage_lines(doc)
    v.undecided = list(d.undecided)
    v.rule, v.repeats = rule, repeats
    if (doc.get("stage2") or {}).get("mode") == "exhaustive":
        v.replay = tunepick.replay(ms, order[1:], rule, repeats)
        v.stage_lines.append(_replay_line(v.replay, ms, repeats, p))
    return v


def _rows(doc: dict, cands: dict[str, dict], ms: list[ts.Measures], order: list[str], p: Pick,
          differs: dict[str, str] | None = None) -> list[Row]:
    """One row per configuration stage two ran, in `order` (llama.cpp's default first): its medians, memory,
    speeds against the default, whether it is on the front or the pick, why it was not measured in full, and why
    its outputs rule it out (`differs`: the output check's words against llama.cpp's default's)."""
    threshold = float(doc.get("threshold") or 0.02)
    ctx = _contexts(doc, cands)
    by = {m.name: m for m in ms}
    default = doc.get("default") or {}
    front = set(measured_front(ms, threshold))
    if default.get("over_budget"):
        front.discard(DEFAULT)  # measured, but not something these cards could run
    screened = (doc.get("stage2") or {}).get("screened_out") or {}
    not_loaded = (doc.get("stage2") or {}).get("not_loaded") or {}
    rows = []
    for b in order:
        m = by.get(b)
        c = cands.get(b)
        label = "llama.cpp's default (--fit, no flags)" if b == DEFAULT else (c or {}).get("label", b)
        devs = (default if b == DEFAULT else c or {}).get("devices_mib") or []
        row = Row(build=b, label=label, n_ctx=m.n_ctx if m else ctx.get(b, 0),
                  prompt=m.median("input_tps") if m else None, gen=m.median("output_tps") if m else None,
                  agg=m.median("aggregate_output_tps") if m else None,
                  n=len(m.samples.get("output_tps") or []) if m else 0, devices_mib=list(devs),
                  on_front=b in front, picked=b == p.name,
                  kld=(c or {}).get("kld") if b != DEFAULT else None,
                  kv="f16/f16" if b == DEFAULT else f"{(c or {}).get('ctk', 'f16')}/{(c or {}).get('ctv', 'f16')}",
                  engine=str((c or {}).get("engine") or engines.LLAMA_CPP))
        if m and b != DEFAULT and DEFAULT in by:
            row.vs_default = _vs_default(by[DEFAULT], m, threshold)
            row.gen_vs_default = row.vs_default.get("output_tps", "")
        if b in not_loaded:
            row.note = "not loaded: " + not_loaded[b]
        elif b in screened:
            row.note = "stopped after one trial: " + screened[b]
        elif differs and b in differs:
            row.note = "not the pick: " + tunepick.differs_text(differs[b])
        elif m is None:
            row.note = "not measured (the configuration failed; see the run's report)"
        elif b == DEFAULT and default.get("over_budget"):
            row.note = over_note(default, doc)
        rows.append(row)
    return rows


def _vs_default(base: ts.Measures, m: ts.Measures, threshold: float) -> dict[str, str]:
    """Each speed of `m` against llama.cpp's default's: "0.64× [0.41, 0.85] — slower" (none where not compared)."""
    out = {}
    for metric in ts.SPEEDS:
        r = compare(base, m, metric, threshold)
        if r is not None:
            out[metric] = f"{stats.format_ratio(r[0])} — {r[1]}"
    return out


def _replay_line(replay: tunepick.Replay, ms: list[ts.Measures], repeats: int, p: Pick) -> str:
    """What the race would have picked over an exhaustive run's own trials, and with how many of them."""
    total = sum(min(repeats, len(m.samples.get("output_tps") or [])) for m in ms)
    return (f"the race, replayed over these same trials: it would pick {replay.pick.name}"
            + (" — the same pick" if replay.pick.name == p.name else f" — NOT this run's pick ({p.name})")
            + f", with {replay.trials} of these {total} trials ({len(replay.not_loaded)} members not loaded, "
              f"{len(replay.ruled)} ruled out after their screening trial)")


def over_note(default: dict, doc: dict) -> str:
    """Which device llama.cpp's own fit left above its budget less the margin, by how much."""
    rig = doc.get("rig") or {}
    names = rig.get("devices") or []
    avail = [b - m for b, m in zip(rig.get("budgets_mib") or [], rig.get("margins_mib") or [], strict=False)]
    over = [f"{n} at {u:,.0f} MiB, {u - a:,.0f} over" for n, u, a in
            zip(names, default.get("devices_mib") or [], avail, strict=False) if u is not None and u > a]
    return ("over a budget: llama.cpp's fit leaves " + "; ".join(over) + " its budget less the margin "
            "(its own dry run at that context), so on these cards it would not keep the margin or would not load")


SPEED_WORDS = {"input_tps": "prompt", "output_tps": "generation", "aggregate_output_tps": "aggregate output"}


def _pick_sentence(p: Pick, row: Row | None, base: Row | None, parallel: int = 1) -> str:
    if row is None:
        return f"{p.name}: {p.reason}."
    if row.build == DEFAULT:
        return f"keep llama.cpp's default — {p.reason}."
    parts = [f"{row.build} ({row.label}): {p.reason}."]
    if row.kld:
        parts.append(f"Its KV cache ({row.kv}) costs {kld_text(row.kld)} against f16/f16.")
    if parallel > 1 and not _unified(row.engine):
        parts.append(f"It runs on {row.engine}, which has no unified KV cache: each of its {parallel} slots holds "
                     f"{row.n_ctx // parallel:,} tokens.")
    return " ".join(parts)


def _unified(engine: str) -> bool:
    try:
        return engines.get(engine).unified_kv
    except KeyError:
        return True


def _versus_default(row: Row | None, base: Row | None) -> str:
    """"Against llama.cpp's default: context 79,360 vs 76,032 tokens (+4%); prompt 0.99× [0.95, 1.00] — …"."""
    if row is None or row.build == DEFAULT or base is None or not base.n_ctx:
        return ""
    speeds = "; ".join(f"{SPEED_WORDS[k]} {v}" for k, v in row.vs_default.items())
    return (f"Against llama.cpp's default: context {row.n_ctx:,} vs {base.n_ctx:,} tokens "
            f"({(row.n_ctx - base.n_ctx) / base.n_ctx:+.0%})" + (f"; {speeds}" if speeds else "") + ".")


def kld_text(k: dict) -> str:
    """"mean KLD 0.0083 nats, 99th percentile 0.051, same top token 95.3%"."""
    parts = [f"mean KLD {k['mean']:.4f}"]
    if k.get("p99") is not None:
        parts.append(f"99th percentile {k['p99']:.3f}")
    if k.get("same_top_pct") is not None:
        parts.append(f"same top token {k['same_top_pct']:.1f}%")
    return ", ".join(parts)


def stage_lines(doc: dict) -> list[str]:
    """How many candidates each stage looked at, and the wall time of each."""
    s1, s2 = doc.get("stage1") or {}, doc.get("stage2") or {}
    by = s1.get("by_status") or {}
    out = [f"stage one: {s1.get('enumerated', 0)} candidates, {s1.get('dry_runs', 0)} dry runs in "
           f"{float(s1.get('seconds') or 0):.1f} s — " + ", ".join(
               f"{n} {what}" for what, n in (("verified on the front", by.get("front", 0)),
                                              ("dominated after verification", by.get("dominated", 0)),
                                              ("pruned by prediction", by.get("pruned", 0)),
                                              ("infeasible", by.get("infeasible", 0)),
                                              ("not plannable", by.get("unplannable", 0))) if n)]
    if s1.get("afresh"):
        out.append(f"stage one computed afresh, not reused from the cache of this search: {s1['afresh']}")
    elif s1.get("reused_from"):
        out.append("stage one reused from an earlier tune of this search, model, build and budgets (its dry runs "
                   "and time are that tune's)")
    out += [engine_line(e, int(doc.get("parallel") or 1)) for e in doc.get("engines") or []]
    out += _stage_two_lines(s2)
    q = doc.get("quality") or {}
    if q.get("measured"):
        out.append("KV cache quality: " + "; ".join(f"{kv} {kld_text(k)}" for kv, k in sorted(q["by_pair"].items()))
                   + f" — against f16/f16 over {q.get('corpus', {}).get('name', 'a text')} ({q.get('method')})")
    sp = doc.get("space") or {}
    dims = [f"split {', '.join(sp.get('splits') or [])}", f"KV {', '.join(sp.get('kv') or [])}",
            f"-ub {', '.join(str(x) for x in sp.get('ubatch') or [])}"]
    if (doc.get("model") or {}).get("n_expert"):
        dims.append(f"--n-cpu-moe {', '.join(str(x) for x in sp.get('n_cpu_moe') or [])}")
    out.append("searched: " + "; ".join(dims) + " (-ts chosen per candidate for the most context)"
               + "".join(f"; not searched: {k} ({v})" for k, v in (sp.get("not_searched") or {}).items()))
    rig = doc.get("rig") or {}
    if rig.get("budgets_mib"):
        out.append("budgets " + ", ".join(f"{n} {b:,} MiB" for n, b in zip(rig.get("devices") or [],
                                                                           rig["budgets_mib"], strict=False))
                   + f" (llama.cpp's margin {', '.join(str(m) for m in rig.get('margins_mib') or [])} MiB kept free)"
                   + ("" if rig.get("budgets_given") else ": what the devices report free"))
    unplannable = {c.get("reason") for c in doc.get("candidates") or [] if c.get("status") == "unplannable"}
    for why in sorted(x for x in unplannable if x):
        out.append(f"not plannable: {why}")
    if (doc.get("default") or {}).get("fit_split"):
        out.append("llama.cpp's default ran with `-ts 0,0` (llama.cpp's \"no split given\") under the budgets: on "
                   "cards of these sizes its fit places the layers itself, and without it the budget emulation "
                   "would fix the split to the budgets' proportions")
    out += list(doc.get("notes") or [])
    return out


def engine_line(e: dict, parallel: int) -> str:
    """Another engine's part of stage one (tune/stage_one_engine.py) in one line: its candidates, its loads, what it
    left out and why."""
    eng = e.get("engine") or "another engine"
    reused = " (reused from an earlier tune of this search: its loads and time are that tune's)" \
        if e.get("reused_from") and not e.get("afresh") else ""
    per_slot = (f"; it has no unified KV cache, so each of its {parallel} slots holds a {parallel}th of a member's "
                "context" if parallel > 1 else "")
    left = "".join(f"; not searched: {k} ({v})" for k, v in ((e.get("space") or {}).get("not_searched") or {}).items())
    return (f"{eng}: {e.get('members', 0)} candidates — its own default and llama.cpp's front as it runs them — "
            f"measured by {e.get('loads', 0)} real loads in {float(e.get('seconds') or 0):.1f} s (it has no dry "
            f"run: each load stopped once its context was made){reused}, {e.get('front', 0)} on its front"
            f"{per_slot}{left}")


def _stage_two_lines(s2: dict) -> list[str]:
    """What stage two ran: every front member in full (exhaustive), a race (screening, the rest in full, the
    extensions where the pick was open), or, for a tune stored before the race, the real runs."""
    out = []
    real = [b for b in s2.get("real") or [] if b != DEFAULT]
    screened = s2.get("screened_out") or {}
    if s2.get("mode") == "exhaustive":
        out.append(f"stage two (exhaustive): every one of the {len(real)} front members and llama.cpp's default with "
                   f"all its trials, {s2.get('trials', 0)} trials in {float(s2.get('seconds') or 0):.1f} s")
    elif s2.get("mode") == "race":
        out.append(_race_line(s2, real, screened))
        for ext in s2.get("extended") or []:
            out.append(f"stage two (race): the pick was still open ({'; '.join(ext.get('why') or [])}), so "
                       f"{', '.join(ext.get('names') or [])} got trials {ext['trials'][0]}–{ext['trials'][-1]} too")
    else:  # a tune stored before the race
        out.append(f"stage two: {len(real)} front candidates and llama.cpp's default run for real in "
                   f"{float(s2.get('seconds') or 0):.1f} s" + (f"; {len(screened)} stopped after a first trial "
                                                              "(clearly dominated)" if screened else ""))
    return out


def _race_line(s2: dict, real: list[str], screened: dict) -> str:
    """A race's stage two in one line: what was loaded and in which order, what was not and why, what was screened
    and ruled out, the trials against an exhaustive run's, the time and the time budget."""
    timed = s2.get("time_left_out") or []
    skipped = s2.get("not_loaded") or {}
    if "order_reason" in s2:
        unloaded = f"; {len(skipped)} not loaded: they cannot be the pick whatever they measure" if skipped else ""
        loaded = (f"{len(real) - len(skipped)} of the {len(real)} front members loaded after llama.cpp's default, "
                  f"{s2['order_reason']}{unloaded}; each loaded one screened with one trial")
    else:  # a race stored before it left members unloaded
        loaded = f"all {len(real)} front members and llama.cpp's default screened with one trial each"
    return (f"stage two (race): {loaded}; {len(screened) - len(timed)} ruled out by the measurements, the rest "
            f"measured with every trial: {s2.get('trials_before_extension', s2.get('trials', 0))} trials of the "
            f"{s2.get('trials_exhaustive', 0)} an exhaustive run makes"
            + (f", then {s2['trials'] - s2['trials_before_extension']} more where the pick was still open"
               if s2.get("trials_before_extension") is not None and s2["trials"] > s2["trials_before_extension"]
               else "") + f", in {float(s2.get('seconds') or 0):.1f} s"
            + (f"; the time budget ({float(s2['time_budget_s']):g} s) left {len(timed)} unmeasured beyond "
               f"screening: {', '.join(timed)}" if timed else ""))


SHOWN = 8  # the rows a short view of the front keeps


def shown(v: View) -> list[Row]:
    """The rows a short view of the front shows (the memory figure, the forum summary): llama.cpp's default, the
    pick, and the front's configurations with the most context, `SHOWN` in all, in the table's order."""
    keep = {r.build for r in v.rows if r.picked or r.build == DEFAULT}
    rest = sorted((r for r in v.rows if r.on_front and r.build not in keep), key=lambda r: -r.n_ctx)
    keep |= {r.build for r in rest[:max(0, SHOWN - len(keep))]}
    return [r for r in v.rows if r.build in keep]


def front_table(v: View) -> tuple[list[str], list[list[str]]]:
    """The measured front: a row per configuration stage two ran; an Engine column where they ran on more than one
    engine (`[tune] engines`)."""
    k = v.parallel
    quality = any(r.kld for r in v.rows)
    several = len({r.engine for r in v.rows}) > 1
    head = ["Config", "What", *(["Engine"] if several else []), "Context", "Prompt t/s", "Gen t/s",
            f"Aggregate t/s at {k}" if k > 1
            else "Aggregate t/s (1 request)", "Gen vs default", *(["KV mean KLD"] if quality else []),
            *[f"{d} MiB" for d in v.devices], "Front"]
    body = []
    for r in v.rows:
        mark = "pick" if r.picked else ("front" if r.on_front else "")
        body.append([r.build, r.label + (f" ({r.note})" if r.note else ""), *([r.engine] if several else []),
                     f"{r.n_ctx:,}", _fmt(r.prompt),
                     _fmt(r.gen), _fmt(r.agg), r.gen_vs_default or ("baseline" if r.build == DEFAULT else "–"),
                     *([f"{r.kld['mean']:.4f}" if r.kld else ("0 (f16/f16)" if r.kv == "f16/f16" else "–")]
                       if quality else []),
                     *[_fmt(x, 0) for x in (r.devices_mib + [None] * len(v.devices))[: len(v.devices)]], mark])
    return head, body


def candidates_table(v: View) -> tuple[list[str], list[list[str]]]:
    """Every stage-one candidate: its status, context (verified, else predicted) and memory per device."""
    head = ["Status", "Candidate", "Context", "Predicted", "Dry runs" + (" or loads" if v.doc.get("engines") else ""),
            *[f"{d} MiB" for d in v.devices], "Why"]
    order: dict[str | None, int] = {"front": 0, "dominated": 1, "pruned": 2, "infeasible": 3, "unplannable": 4}
    body = []
    def key(c: dict) -> tuple:
        return order.get(c.get("status"), 9), -(c.get("n_ctx") or c.get("predicted_n_ctx") or 0)

    for c in sorted(v.doc.get("candidates") or [], key=key):
        devs = (list(c.get("devices_mib") or []) + [None] * len(v.devices))[: len(v.devices)]
        body.append([c.get("status", "") + (f" ({c['build']})" if c.get("build") else ""), c.get("label", ""),
                     f"{c['n_ctx']:,}" if c.get("n_ctx") else "–",
                     f"{c['predicted_n_ctx']:,}" if c.get("predicted_n_ctx") is not None else "–",
                     str(c.get("dry_runs") or 0), *[_fmt(x, 0) for x in devs], c.get("reason") or ""])
    return head, body


def lines(v: View) -> list[str]:
    return list(v.stage_lines) + [f"undecided: {u}" for u in v.undecided]


def llama_swap(v: View, name: str | None = None) -> str:
    """The pick as a llama-swap configuration entry (YAML: `models: NAME: cmd: …`), llama-swap's `${PORT}` in
    place of a port; paste it under `models:` of llama-swap's config.yaml. Whatever the model's path holds, the YAML
    is one model whose cmd llama-swap splits into exactly the command's words: the name and the cmd are YAML
    double-quoted scalars with everything but printable ASCII escaped (no line break, `#` or `:` can end them), and
    the cmd's words are quoted for llama-swap's POSIX split with `${` and line breaks kept apart from what
    llama-swap reads before splitting (its `${…}` and `${env.…}` macros, its `#` comment lines and trailing
    backslashes: proxy/config/config.go)."""
    words = v.command_words or shlex.split(v.command)
    model = (v.doc.get("model") or {}).get("path") or "MODEL"
    key = name or Path(model).stem
    cmd = " ".join([words[0], "--port", "${PORT}", *(_swap_word(w) for w in words[1:])])
    reason = "".join(c for c in one_line(v.pick.reason) if c.isprintable() and c not in "\u2028\u2029\ufeff")
    return ("# llamalab tune, run " + one_line(v.run_id) + ": " + reason + "\n"
            "models:\n"
            f"  {yaml_quoted(key)}:\n"
            f"    cmd: {yaml_quoted(cmd)}\n")


def _swap_word(word: str) -> str:
    """One word for llama-swap's cmd: shell-quoted (every `${` and line break then lies inside single quotes), each
    `${` split by an empty quote (`$''{`: no macro), each line break with empty quotes either side (no line of the
    cmd starts with `#` or ends with a backslash)."""
    return shlex.quote(word).replace("${", "$''{").replace("\n", "''\n''")


def yaml_quoted(text: str) -> str:
    """A YAML double-quoted scalar of `text` in printable ASCII: `"` and `\\` escaped, every other character outside
    printable ASCII as `\\xHH`, `\\uHHHH` or `\\UHHHHHHHH` (YAML 1.1 and 1.2 read them alike)."""
    out = []
    for c in text:
        o = ord(c)
        if c in '"\\':
            out.append("\\" + c)
        elif 0x20 <= o < 0x7F:
            out.append(c)
        else:
            out.append(f"\\x{o:02x}" if o <= 0xFF else f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
    return '"' + "".join(out) + '"'


def as_json(v: View | None) -> dict:
    if v is None:
        return {}
    return {"run_id": v.run_id, "pick": {"build": v.pick.name, "reason": v.pick.reason, "command": v.command,
                                         "considered": list(v.pick.considered), "stored": v.stored},
            "default_command": v.default_command, "front": [r.__dict__ for r in v.rows], "stages": v.stage_lines,
            "undecided": v.undecided,
            "search": v.doc}
