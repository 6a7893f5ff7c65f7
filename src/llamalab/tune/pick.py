"""`llamalab tune`'s rule for the pick, pure: a measured configuration against another in one speed (ratio,
interval, verdict), the measured front, and the pick for the goal. Stage two's race (tune/race.py) asks it which
configurations can still be the pick; the run stores what it decided (`Decision`), which the reports
(report/analysis/tune.py) show.

A comparison with one trial on a side has a ratio but no interval: its verdict is "untested (one trial)", and the
pick treats it as unknown — never as equal, never as slower.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import stats
from . import space as ts
from .records import DEFAULT


def compare(base: ts.Measures, cand: ts.Measures, metric: str, threshold: float) -> tuple[stats.Ratio, str] | None:
    """cand / base in one speed: ratio with its bootstrap interval, and the verdict."""
    bx, cx = base.samples.get(metric) or [], cand.samples.get(metric) or []
    if not bx or not cx or min(bx) <= 0:
        return None
    r = stats.ratio(bx, cx)
    return r, stats.verdict(r, threshold)


def measured_front(ms: Sequence[ts.Measures], threshold: float) -> list[str]:
    """Names of the measured configurations no other beats: at least the context, no speed measurably slower (nor a
    median more than twice the threshold below, as `pick` requires), and ahead in context or measurably faster in
    a speed."""
    out = []
    for c in ms:
        beaten = False
        for d in ms:
            if d.name == c.name or d.n_ctx < c.n_ctx:
                continue
            cmp = [v for m in ts.SPEEDS if (v := compare(c, d, m, threshold)) is not None]
            if any(v[1] in ("slower", stats.UNTESTED) or v[0].ratio < 1 - 2 * threshold for v in cmp):
                continue
            if d.n_ctx > c.n_ctx or any(v[1] == "faster" for v in cmp):
                beaten = True
                break
        if not beaten:
            out.append(c.name)
    return out


@dataclass(frozen=True)
class Pick:
    name: str
    reason: str
    considered: tuple[str, ...]  # the configurations that met the constraints
    floor: str | None = None  # whose generation set the speed floor (goal context without --min-gen-tps)


def _constrained(ms: Sequence[ts.Measures], default: str, floor: int, *, default_fits: bool, min_trials: int,
                 min_gen_tps: float | None, kld: dict[str, float] | None, max_kld: float | None
                 ) -> tuple[dict[str, str], list[ts.Measures]]:
    """Why each configuration that misses the pick's constraints is out, and those that meet them (pure)."""
    why_out: dict[str, str] = {}
    fits: list[ts.Measures] = []
    klds = kld or {}
    for m in ms:
        gen = m.median("output_tps")
        mean_kld = klds.get(m.name)
        if m.name == default and not default_fits:
            why_out[m.name] = "does not fit the budgets"
        elif m.n_ctx < floor:
            why_out[m.name] = f"holds {m.n_ctx:,} tokens, fewer than {floor:,}"
        elif gen is None:
            why_out[m.name] = "no generation measured"
        elif len(m.samples.get("output_tps") or []) < min_trials:
            why_out[m.name] = f"untested: {len(m.samples.get('output_tps') or [])} trial(s), fewer than {min_trials}"
        elif max_kld is not None and mean_kld is not None and mean_kld > max_kld:
            why_out[m.name] = f"its KV cache's mean KLD {mean_kld:.4f} is above --max-kld {max_kld:g}"
        elif min_gen_tps is not None and gen < min_gen_tps:
            why_out[m.name] = f"generates {gen:.1f} t/s, under the {min_gen_tps:g} t/s floor"
        else:
            fits.append(m)
    return why_out, fits


def _as_fast(fits: list[ts.Measures], base: ts.Measures, who: str, threshold: float
             ) -> tuple[list[ts.Measures], dict[str, str]]:
    """Those in `fits` not measurably slower in generation than `base`, and why each other one is out (pure)."""
    keep, out = [], {}
    for m in fits:
        v = None if m.name == base.name else compare(base, m, "output_tps", threshold)
        if v is not None and v[1] == stats.UNTESTED:
            out[m.name] = (f"generation {stats.format_ratio(v[0])} of {who}: untested (one trial on a side), so "
                           "not shown to be as fast")
        elif v is not None and (v[1] == "slower" or v[0].ratio < 1 - 2 * threshold):
            out[m.name] = (f"generation {stats.format_ratio(v[0])} of {who}: "
                           + ("measurably slower" if v[1] == "slower" else
                              f"not shown to be as fast (median more than {2 * threshold:.0%} below)"))
        else:
            keep.append(m)
    return keep, out


def pick(ms: Sequence[ts.Measures], default: str, goal: str, *, min_context: int = 0, min_gen_tps: float | None = None,
         need_context: int = 0, threshold: float = 0.02, default_fits: bool = True, min_trials: int = 1,
         kld: dict[str, float] | None = None, max_kld: float | None = None) -> Pick:
    """The configuration for the goal. Context: the most context among those that hold `min_context` (and the K
    requests' `need_context`) and whose generation is at least `min_gen_tps` — without a floor, not measurably
    slower than the default's (no "slower" verdict, and a median ratio no more than twice the threshold below 1,
    so that a wide interval on a noisy machine does not pass a slow candidate); ties go to the faster generation.
    Throughput: the highest aggregate output t/s at K requests among those that hold the context asked for (and
    meet a generation floor if one is given); ties go to more context. The default is a candidate too, unless it
    does not fit the budgets (`default_fits`). Its speed is the floor, as what the user has without tuning — but a
    default that does not fit is not something these cards can run: where nothing that fits is as fast as it (an
    MoE model whose experts must leave the GPUs), the floor is the fastest configuration that fits instead, and
    the reason says so. A configuration measured with fewer than `min_trials` single-stream trials (a race
    stopped it after its screening trial) is untested, not a candidate; so is one whose generation against the
    floor's has no interval. `kld` (configuration → mean KL divergence of its KV cache types against f16/f16) with
    `max_kld` rules out caches that change the output more than that."""
    by = {m.name: m for m in ms}
    floor = max(min_context, need_context)
    why_out, fits = _constrained(ms, default, floor, default_fits=default_fits, min_trials=min_trials,
                                 min_gen_tps=min_gen_tps, kld=kld, max_kld=max_kld)

    def as_fast(base: ts.Measures | None, who: str) -> tuple[list[ts.Measures], dict[str, str]]:
        if min_gen_tps is not None or goal != "context" or base is None:
            return list(fits), {}
        return _as_fast(fits, base, who, threshold)

    ok, slower = as_fast(by.get(default), "the default's")
    speed_floor = "the default"
    floor_of: str | None = default if by.get(default) is not None else None
    if not ok and not default_fits and fits:
        # the default cannot run on these cards: the fastest configuration that can sets the pace instead
        fastest = max(fits, key=lambda m: m.median("output_tps") or 0.0)
        ok, slower = as_fast(fastest, f"{fastest.name}'s")
        floor_of = fastest.name
        speed_floor = (f"{fastest.name}, the fastest configuration that fits (llama.cpp's default does not fit "
                       f"the budgets and everything that fits is slower than it)")
    why_out |= slower
    if not ok:
        return Pick(default, "no configuration met the constraints (" + "; ".join(
            f"{k}: {v}" for k, v in list(why_out.items())[:4]) + "): keep llama.cpp's default"
            + ("" if default_fits else ", which does not fit the budgets either (relax --min-gen-tps or "
               "--min-context)"), ())
    if goal == "throughput":
        def key(m: ts.Measures):
            return (m.median("aggregate_output_tps") or m.median("output_tps") or 0.0, m.n_ctx)
        best = max(ok, key=key)
        val = best.median("aggregate_output_tps") or best.median("output_tps") or 0.0
        reason = f"the highest aggregate output ({val:,.1f} t/s) with at least {floor:,} tokens of context"
    else:
        best = max(ok, key=lambda m: (m.n_ctx, m.median("output_tps") or 0.0))
        floor_txt = (f"generating at least {min_gen_tps:g} t/s" if min_gen_tps is not None
                     else f"generating not measurably slower than {speed_floor}")
        reason = f"the most context ({best.n_ctx:,} tokens) {floor_txt}"
    uses_floor = goal == "context" and min_gen_tps is None
    return Pick(best.name, reason, tuple(m.name for m in ok), floor_of if uses_floor else None)





# ---------------------------------------------------------------- the race (stage two)


@dataclass(frozen=True)
class Rule:
    """What the pick is for, as `pick` takes it: the goal, the floors and the threshold."""

    default: str
    goal: str
    threshold: float = 0.02
    floor_ctx: int = 0  # max(min_context, need_context)
    min_gen_tps: float | None = None
    default_fits: bool = True
    kld: dict[str, float] | None = None
    max_kld: float | None = None

    def pick(self, ms: Sequence[ts.Measures], repeats: int) -> Pick:
        """`pick` under this rule, a configuration with fewer than min(2, repeats) trials untested."""
        return pick(ms, self.default, self.goal, min_context=self.floor_ctx, min_gen_tps=self.min_gen_tps,
                    threshold=self.threshold, default_fits=self.default_fits, min_trials=min(2, repeats),
                    kld=self.kld, max_kld=self.max_kld)

    @classmethod
    def of_search(cls, doc: Mapping[str, Any]) -> Rule:
        """The rule of a tune's search as the `tunes` table stores it (goal, floors, threshold, whether llama.cpp's
        default fits, each staged member's KV quality): the one place a tune's rule is made, for its race and for
        the reports of a run stored before its pick was."""
        default = doc.get("default") or {}
        kld = {str(c["build"]): float(c["kld"]["mean"]) for c in doc.get("candidates") or []
               if c.get("build") and isinstance(c.get("kld"), dict) and c["kld"].get("mean") is not None}
        return cls(default=DEFAULT, goal=doc.get("goal") or "context", threshold=float(doc.get("threshold") or 0.02),
                   floor_ctx=max(int(doc.get("min_context") or 0), int(doc.get("need_context") or 0)),
                   min_gen_tps=doc.get("min_gen_tps"), default_fits=not default.get("over_budget"), kld=kld,
                   max_kld=doc.get("max_kld"))

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Rule:
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})


@dataclass(frozen=True)
class Decision:
    """What a tune run decided when its race ended: the pick and its reason, the rule it was made under, and what
    the measurements left open. Stored with the run (`tune_picks.pick_json`) and read back by every report, so a later
    change to the rule never changes the pick shown for a run measured before it."""

    pick: Pick
    rule: Rule
    repeats: int
    undecided: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"build": self.pick.name, "reason": self.pick.reason, "considered": list(self.pick.considered),
                "floor": self.pick.floor, "undecided": list(self.undecided), "repeats": self.repeats,
                "rule": self.rule.as_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Decision:
        return cls(pick=Pick(str(d["build"]), str(d["reason"]), tuple(d.get("considered") or ()), d.get("floor")),
                   rule=Rule.from_dict(d.get("rule") or {"default": DEFAULT, "goal": "context"}),
                   repeats=int(d.get("repeats") or 1), undecided=tuple(d.get("undecided") or ()))


def decide(ms: Sequence[ts.Measures], rule: Rule, repeats: int) -> Decision:
    """The pick under `rule` over what a run measured, with what its measurements leave open."""
    chosen = rule.pick(ms, repeats)
    return Decision(pick=chosen, rule=rule, repeats=repeats, undecided=tuple(undecided(ms, chosen, rule, repeats)))


def spread(full: Sequence[ts.Measures], metric: str) -> float | None:
    """The largest trial-to-trial spread measured in the run, (max − min) / median of one speed over each fully
    measured configuration with at least two trials; None where none has two."""
    out = []
    for m in full:
        xs = m.samples.get(metric) or []
        if len(xs) >= 2 and m.median(metric):
            out.append((max(xs) - min(xs)) / (m.median(metric) or 1.0))
    return max(out) if out else None


def passes_floor(p: ts.Measures, default: ts.Measures | None, rule: Rule) -> bool:
    """Whether a fully measured configuration meets the pick's speed floor for good: at least --min-gen-tps, or
    (without one) not measurably slower in generation than the fully measured default, as `pick` decides it —
    a floor that later measurements of other configurations cannot move."""
    gen = p.median("output_tps")
    if gen is None:
        return False
    if rule.min_gen_tps is not None:
        return gen >= rule.min_gen_tps
    if default is None:
        return False
    if p.name == default.name:
        return rule.default_fits
    v = compare(default, p, "output_tps", rule.threshold)
    return v is not None and v[1] not in ("slower", stats.UNTESTED) and v[0].ratio >= 1 - 2 * rule.threshold


def ruled_out(m: ts.Measures, full: Sequence[ts.Measures], rule: Rule) -> str | None:
    """Why `m`, measured with its screening trial only, cannot be the pick — so the race gives it no more trials —
    or None. `full`: the configurations measured with every trial so far (the default among them). Each reason is
    one the measurements show, never an assumed order of the dimensions:

    - a constraint it fails for good (context floor, --max-kld, no generation measured);
    - goal context: a fully measured configuration with more context meets the speed floor for good (the pick has
      at least that much context), or the default (which fits) holds more than it;
    - its screening trial is below what the pick needs by more than the largest trial-to-trial spread measured in
      this run: below the speed floor (goal context; for --min-gen-tps, or the default's median where the default
      fits), or below a fully measured configuration's aggregate output (goal throughput)."""
    by = {x.name: x for x in full}
    default = by.get(rule.default)
    if m.n_ctx < rule.floor_ctx:
        return f"holds {m.n_ctx:,} tokens, fewer than the {rule.floor_ctx:,} needed"
    mean_kld = (rule.kld or {}).get(m.name)
    if rule.max_kld is not None and mean_kld is not None and mean_kld > rule.max_kld:
        return f"its KV cache's mean KLD {mean_kld:.4f} is above --max-kld {rule.max_kld:g}"
    gen = m.median("output_tps")
    if gen is None:
        return "its screening trial measured no generation"
    if rule.goal == "context":
        if default is not None and rule.default_fits and m.n_ctx < default.n_ctx:
            return (f"holds {m.n_ctx:,} tokens, fewer than llama.cpp's default ({default.n_ctx:,}), which is as fast "
                    "as itself: it cannot be the pick for the most context")
        better = [p for p in full if p.name != m.name and p.n_ctx > m.n_ctx and passes_floor(p, default, rule)]
        if better:
            p = max(better, key=lambda x: x.n_ctx)
            return (f"{p.name} holds more context ({p.n_ctx:,} > {m.n_ctx:,} tokens) and meets the speed floor "
                    f"with all its trials: the pick has at least {p.n_ctx:,}")
        s = spread(full, "output_tps")
        default_gen = default.median("output_tps") if default is not None else None
        floor = rule.min_gen_tps if rule.min_gen_tps is not None else (
            default_gen * (1 - 2 * rule.threshold) if rule.default_fits and default_gen else None)
        if s is not None and floor is not None and gen < floor * (1 - s):
            return (f"its screening trial generates {gen:,.1f} t/s, below the floor of {floor:,.1f} t/s by more than "
                    f"the largest trial-to-trial spread measured in this run ({s:.0%})")
        return None
    agg = m.median("aggregate_output_tps") or gen
    s = spread(full, "aggregate_output_tps")
    rivals = [p for p in full if p.name != m.name and p.n_ctx >= rule.floor_ctx and p.median("aggregate_output_tps")
              and (rule.min_gen_tps is None or (p.median("output_tps") or 0) >= rule.min_gen_tps)
              and (p.name != rule.default or rule.default_fits)]
    if s is not None and rivals:
        p = max(rivals, key=lambda x: x.median("aggregate_output_tps") or 0.0)
        best = p.median("aggregate_output_tps") or 0.0
        if agg < best * (1 - s) * (1 - rule.threshold):
            return (f"its screening trial's aggregate output, {agg:,.1f} t/s, is below {p.name}'s {best:,.1f} t/s by "
                    f"more than the largest trial-to-trial spread measured in this run ({s:.0%})")
    return None


def undecided(ms: Sequence[ts.Measures], chosen: Pick, rule: Rule, repeats: int) -> list[str]:
    """What the measurements leave open about the pick (goal context, against the configuration whose generation
    set the floor): a configuration with more context than the pick that the floor's median rule ruled out
    although its interval reaches the floor, and a pick whose own interval reaches below it — more trials could
    change the pick. Each line starts with the configuration's name."""
    return [line for _, line in undecided_names(ms, chosen, rule, repeats)]


def undecided_names(ms: Sequence[ts.Measures], chosen: Pick, rule: Rule, repeats: int) -> list[tuple[str, str]]:
    by = {m.name: m for m in ms}
    p, ref = by.get(chosen.name), by.get(chosen.floor or "")
    if p is None or ref is None or rule.goal != "context" or rule.min_gen_tps is not None:
        return []
    cut = 1 - 2 * rule.threshold
    n = min(len(ref.samples.get("output_tps") or []), len(p.samples.get("output_tps") or []))
    whose = "the default's" if ref.name == rule.default else f"{ref.name}'s"
    out = []
    for m in ms:
        if m.name in (p.name, ref.name, rule.default) or m.n_ctx <= p.n_ctx:
            continue
        v = compare(ref, m, "output_tps", rule.threshold)
        if v is None or v[1] == "slower" or not v[0].has_interval:
            continue
        if v[0].ratio < cut and (v[0].ci_high or 0) >= cut:
            out.append((m.name, f"{m.name} ({m.n_ctx:,} tokens) generates {stats.format_ratio(v[0])} of {whose}: "
                                f"its interval reaches the floor, so more than {n} trials could make it the pick"))
    if p.name != ref.name:
        v = compare(ref, p, "output_tps", rule.threshold)
        if v is not None and v[0].has_interval and (v[0].ci_low or 1) < cut:
            out.append((p.name, f"the pick {p.name} generates {stats.format_ratio(v[0])} of {whose}: its interval "
                                f"reaches below the floor, so more than {n} trials could rule it out"))
    return out


def more_trials(ms: Sequence[ts.Measures], rule: Rule, repeats: int, have: int, cap: int
                ) -> tuple[list[str], tuple[int, ...], list[str]] | None:
    """Where the pick is still open after `have` trials (`undecided_names`): the configurations to give more
    trials — the open ones, the pick and the configuration that sets the floor — the trial numbers (`repeats` more,
    at most to `cap`), and why; None where the pick is decided or no trial is left."""
    if have >= cap:
        return None
    chosen = rule.pick(ms, repeats)
    open_ = undecided_names(ms, chosen, rule, repeats)
    if not open_:
        return None
    names = list(dict.fromkeys([*(x for x, _ in open_), chosen.name, *([chosen.floor] if chosen.floor else [])]))
    return names, tuple(range(have + 1, min(cap, have + repeats) + 1)), [w for _, w in open_]


@dataclass(frozen=True)
class Replay:
    pick: Pick
    ruled: dict[str, str]  # member → why the race gave it no more trials
    trials: int  # trials the race would have run (one per configuration and trial number)


def replay(ms: Sequence[ts.Measures], order: Sequence[str], rule: Rule, repeats: int) -> Replay:
    """The race over measurements an exhaustive run made (every configuration with all its trials, `ms`): the
    decisions stage two's race would have taken had it measured these same trials — the default first, then the
    members in `order` (most context first), each ruled out or given its remaining trials — and the pick from what
    the race would have kept. The oracle check: this pick is the exhaustive run's own."""
    by = {m.name: m for m in ms}

    def first(m: ts.Measures) -> ts.Measures:
        return ts.Measures(m.name, m.n_ctx, {k: v[:1] for k, v in m.samples.items()})

    full: list[ts.Measures] = [by[rule.default]] if rule.default in by else []
    kept: list[ts.Measures] = list(full)
    ruled: dict[str, str] = {}
    for name in order:
        m = by.get(name)
        if m is None or name == rule.default:
            continue
        why = ruled_out(first(m), full, rule) if repeats > 1 else None
        if why:
            ruled[name] = why
            kept.append(first(m))
        else:
            full.append(m)
            kept.append(m)
    trials = sum(min(repeats, len(m.samples.get("output_tps") or [])) for m in kept)
    return Replay(pick=rule.pick(kept, repeats), ruled=ruled, trials=trials)
