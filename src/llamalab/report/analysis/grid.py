"""Where pipeline parallelism pays: its gain in every cell of the workload grid (prompt length × concurrency level),
and one sentence saying from which prompt length and how many parallel requests it pays on this rig.

The gain is the pipeline build's speed over the same build without pipeline parallelism — the study's baseline
(more than one scheduler copy) against a build with one copy that moved no weight (a `GGML_SCHED_MAX_COPIES=1`
build first, else the first such build in study order) — in aggregate prompt t/s (how fast the level's prompts are
processed) and aggregate output t/s. Ratio of medians over trials with a 95% bootstrap interval and a verdict, as in
`speed`; two sides under unlike foreign CPU load get none. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core import stats
from ..data import RunData
from . import speed
from .summary import study_cmake_of
from .verdict import study_builds, study_settings, weights_moved

GAIN_METRICS = ("aggregate_input_tps", "aggregate_output_tps")
WORDS = {"aggregate_input_tps": "prompt", "aggregate_output_tps": "output"}


@dataclass(frozen=True)
class Pair:
    setting: str
    pp: str  # the build with pipeline parallelism (more than one copy)
    no_pp: str  # the same without it (one copy, no weight moved)
    copies: int


def pair(data: RunData, setting: str | None = None) -> Pair | None:
    """The pipeline build and its no-pipeline twin in a setting (default: the first setting that has both)."""
    for s in ([setting] if setting else study_settings(data)):
        ledgers = {b: led for b in study_builds(data) if (led := data.ledger_for(b, s))}
        builds = [b for b in study_builds(data) if b in ledgers]
        if not builds:
            continue
        base = ledgers[builds[0]]
        if not (base.get("sched_copies") or 0) > 1:
            continue
        twins = [b for b in builds[1:] if (ledgers[b].get("sched_copies") or 1) == 1
                 and not weights_moved(base, ledgers[b])]
        twins.sort(key=lambda b: (str(study_cmake_of(data, b).get("GGML_SCHED_MAX_COPIES")) != "1",
                                  builds.index(b)))
        if twins:
            return Pair(s, builds[0], twins[0], int(base["sched_copies"]))
    return None


def gains(data: RunData, p: Pair | None = None, *, seed: int = 0, n_resamples: int = 10_000) -> list[dict]:
    """One row per prompt length × output length × level × metric measured on both sides: `ratio` = pipeline /
    no pipeline (above 1: pipeline parallelism is faster), interval, verdict ("faster" means it pays)."""
    p = p or pair(data)
    if p is None:
        return []
    t = speed.threshold_of(data)
    by_key = speed.cells(data)
    out = []
    for (b, s, prompt, output, level), cell in sorted(by_key.items(), key=lambda kv: kv[0][2:]):
        if b != p.pp or s != p.setting:
            continue
        twin = by_key.get((p.no_pp, s, prompt, output, level))
        if twin is None:
            continue
        for name in GAIN_METRICS:
            xs, _ = twin.samples(name)
            ys, _ = cell.samples(name)
            if not xs or not ys:
                continue
            r = stats.ratio(xs, ys, seed=seed, n_resamples=n_resamples)
            why = speed.comparable(twin.foreign_load, cell.foreign_load)
            out.append({"metric": name, "prompt_tokens": prompt, "output_tokens": output, "concurrency": level,
                        "pipeline": p.pp, "no_pipeline": p.no_pp, "setting": s,
                        "ratio": round(r.ratio, 4), "ci_low": None if r.ci_low is None else round(r.ci_low, 4),
                        "ci_high": None if r.ci_high is None else round(r.ci_high, 4),
                        "n": min(r.n_baseline, r.n_candidate),
                        "verdict": speed.NOT_COMPARABLE if why else stats.verdict(r, t, True), "reason": why})
    return out


def _levels_text(levels: list[int]) -> str:
    if len(levels) == 1:
        return "1 request" if levels[0] == 1 else f"{levels[0]} parallel requests"
    return f"{levels[0]}–{levels[-1]} parallel requests" if levels[0] > 1 else \
        f"1–{levels[-1]} requests at a time"


def crossover(data: RunData, rows: list[dict] | None = None, p: Pair | None = None) -> str:
    """One sentence: from which prompt length and how many parallel requests pipeline parallelism pays here."""
    p = p or pair(data)
    if p is None:
        return ""
    rows = gains(data, p) if rows is None else rows
    if not rows:
        return (f"{p.pp} and {p.no_pp} have no workload cell measured on both sides, so where pipeline parallelism "
                "pays is not known.")
    cells = sorted({(r["prompt_tokens"], r["concurrency"]) for r in rows})
    verdicts: dict[tuple[int, int], dict[str, str]] = {}
    for r in rows:
        verdicts.setdefault((r["prompt_tokens"], r["concurrency"]), {})[r["metric"]] = r["verdict"]
    pays = {c for c, v in verdicts.items() if "faster" in v.values()}
    costs = {c for c, v in verdicts.items() if "slower" in v.values()}
    unlike = {c for c, v in verdicts.items() if speed.NOT_COMPARABLE in v.values()}
    untested = {c for c, v in verdicts.items() if stats.UNTESTED in v.values()} - pays - costs - unlike
    who = f"Pipeline parallelism ({p.pp}, {p.copies} copies, against {p.no_pp})"
    levels = sorted({lv for _, lv in cells})
    prompts = sorted({pr for pr, _ in cells})
    span = (f"{len(prompts)} prompt length{'s' if len(prompts) != 1 else ''} × {len(levels)} concurrency "
            f"level{'s' if len(levels) != 1 else ''}")
    if untested and untested == set(cells):
        s = (f"{who} is untested on this rig: each of the {len(cells)} cells ({span}) was measured with one trial, "
             "which gives a ratio but no interval (run more repeats)")
    elif not pays:
        s = f"{who} never pays measurably on this rig: in none of the {len(cells)} cells ({span}) is aggregate " \
            "prompt or output t/s faster beyond the threshold with an interval that excludes 1"
    else:
        s = _pays_text(who, rows, cells, pays)
        rest = set(cells) - pays - costs - unlike - untested
        if rest:
            s += "; elsewhere it makes no measurable difference"
    if costs:
        s += ("; it is slower at " + ", ".join(f"{pr:,} tokens × {lv}" for pr, lv in sorted(costs)))
    if unlike:
        s += f"; {len(unlike)} cell(s) not comparable (foreign CPU load)"
    if untested and untested != set(cells):
        s += f"; {len(untested)} cell(s) untested (one trial: a ratio, no interval)"
    skipped = _skipped(data, p)
    if skipped:
        s += f"; not run (the context does not hold them): {skipped}"
    return s + "."


def _pays_text(who: str, rows: list[dict], cells: list[tuple[int, int]], pays: set[tuple[int, int]]) -> str:
    """Where pipeline parallelism pays, for a grid where it pays somewhere: the prompt length from which it pays at
    each run of levels, then the cells where it pays outside those."""
    levels = sorted({lv for _, lv in cells})
    starts = _pay_starts(levels, cells, pays)
    groups = _level_groups(levels, starts)
    covered = {(pr, lv) for lv in levels if (st := starts[lv]) is not None for pr, l2 in cells
               if l2 == lv and pr >= st}
    what = sorted({WORDS[r["metric"]] for r in rows if r["verdict"] == "faster"})
    parts = [f"from {st:,}-token prompts at {_levels_text(lvs)}" for st, lvs in groups]
    s = f"{who} pays on this rig (aggregate {' and '.join(what)} t/s faster) " + "; ".join(parts) \
        if parts else f"{who} pays on this rig only in scattered cells"
    stray = sorted(pays - covered)
    if stray:
        s += ("; also at " if parts else ": ") + ", ".join(f"{pr:,} tokens × {lv}" for pr, lv in stray)
    return s


def _pay_starts(levels: list[int], cells: list[tuple[int, int]], pays: set[tuple[int, int]]) -> dict[int, int | None]:
    """Per level, the shortest prompt from which every longer measured prompt pays (None: the longest does not)."""
    starts: dict[int, int | None] = {}
    for lv in levels:
        here = sorted(pr for pr, l2 in cells if l2 == lv)
        start = None
        for pr in reversed(here):
            if (pr, lv) in pays:
                start = pr
            else:
                break
        starts[lv] = start
    return starts


def _level_groups(levels: list[int], starts: dict[int, int | None]) -> list[tuple[int, list[int]]]:
    """Adjacent levels that pay from the same prompt length, as (that length, the levels)."""
    groups: list[tuple[int, list[int]]] = []
    for lv in levels:
        st = starts[lv]
        if st is None:
            continue
        if groups and groups[-1][0] == st and levels.index(groups[-1][1][-1]) == levels.index(lv) - 1:
            groups[-1][1].append(lv)
        else:
            groups.append((st, [lv]))
    return groups


def _skipped(data: RunData, p: Pair) -> str:
    for c in data.configs:
        reason = c.get("reason") or ""
        if c["build"] == p.pp and c["setting"] == p.setting and "not run" in reason:
            return "; ".join(x.strip() for x in reason.split(";") if "not run" in x)
    return ""


def table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Prompt lengths down, concurrency levels across; each cell "prompt 1.11× [1.08, 1.14] faster / output …"."""
    levels = sorted({r["concurrency"] for r in rows})
    prompts = sorted({(r["prompt_tokens"], r["output_tokens"]) for r in rows})
    many_outputs = len({o for _, o in prompts}) > 1
    head = ["Prompt tokens"] + [("1 request" if lv == 1 else f"{lv} requests") for lv in levels]
    body = []
    for pr, out in prompts:
        line = [f"{pr:,}" + (f" (+{out:,} out)" if many_outputs else "")]
        for lv in levels:
            here = [r for r in rows if (r["prompt_tokens"], r["output_tokens"], r["concurrency"]) == (pr, out, lv)]
            line.append(" / ".join(f"{WORDS[r['metric']]} {_ratio(r)} {_word(r['verdict'])}" for r in here)
                        if here else "not run")
        body.append(line)
    return head, body


def _ratio(r: dict) -> str:
    iv = f" [{r['ci_low']:.2f}, {r['ci_high']:.2f}]" if r.get("ci_low") is not None else ""
    return f"{r['ratio']:.2f}×{iv}"


def _word(v: str) -> str:
    return {"faster": "pays", "slower": "costs", "no measurable difference": "same",
            stats.UNTESTED: "untested"}.get(v, v)
