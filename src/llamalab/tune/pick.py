"""`llamalab tune`'s rule for the pick, pure: a measured configuration against another in one speed (ratio,
interval, verdict), the measured front, and the pick for the goal. Stage two's race (tune/race.py) asks it which
configurations can still be the pick — before a member's load (`cannot_win`) and after its screening trial
(`ruled_out`); the run stores what it decided (`Decision`), which the reports (report/analysis/tune.py) show.

A comparison with one trial on a side has a ratio but no interval: its verdict is "untested (one trial)", and the
pick treats it as unknown — never as equal, never as slower. Configurations that are not measurably different are
told apart by what they give the user (context), never by their medians (docs/tune.md, "What the pick means").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import stats
from . import space as ts
from .records import DEFAULT

GEN = "output_tps"  # single-stream generation: goal context's speed
AGG = "aggregate_output_tps"  # aggregate output at K requests: goal throughput's speed
SPEED_WORDS = {"input_tps": "prompt", GEN: "generation", AGG: "aggregate output"}
TIED_SHOWN = 6  # the tied configurations a throughput pick's reason names


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
    tied: tuple[str, ...] = ()  # goal throughput: those not measurably slower than the reference, the pick among them


def _constrained(ms: Sequence[ts.Measures], default: str, floor: int, *, default_fits: bool, min_trials: int,
                 min_gen_tps: float | None, kld: dict[str, float] | None, max_kld: float | None,
                 differs: Mapping[str, str] | None = None) -> tuple[dict[str, str], list[ts.Measures]]:
    """Why each configuration that misses the pick's constraints is out, and those that meet them (pure)."""
    why_out: dict[str, str] = {}
    fits: list[ts.Measures] = []
    klds = kld or {}
    for m in ms:
        gen = m.median(GEN)
        mean_kld = klds.get(m.name)
        if m.name == default and not default_fits:
            why_out[m.name] = "does not fit the budgets"
        elif differs and m.name in differs:
            why_out[m.name] = differs_text(differs[m.name])
        elif m.n_ctx < floor:
            why_out[m.name] = f"holds {m.n_ctx:,} tokens, fewer than {floor:,}"
        elif gen is None:
            why_out[m.name] = "no generation measured"
        elif len(m.samples.get(GEN) or []) < min_trials:
            why_out[m.name] = f"untested: {len(m.samples.get(GEN) or [])} trial(s), fewer than {min_trials}"
        elif max_kld is not None and mean_kld is not None and mean_kld > max_kld:
            why_out[m.name] = f"its KV cache's mean KLD {mean_kld:.4f} is above --max-kld {max_kld:g}"
        elif min_gen_tps is not None and gen < min_gen_tps:
            why_out[m.name] = f"generates {gen:.1f} t/s, under the {min_gen_tps:g} t/s floor"
        else:
            fits.append(m)
    return why_out, fits


def differs_text(words: str) -> str:
    """Why a member is out for its outputs: the output check's verdict against llama.cpp's default."""
    return f"it {words} from llama.cpp's default (the same KV cache: a different computation, never the pick)"


def _as_fast(fits: list[ts.Measures], base: ts.Measures, who: str, threshold: float, metric: str = GEN
             ) -> tuple[list[ts.Measures], dict[str, str]]:
    """Those in `fits` not measurably slower in `metric` than `base` — no "slower" verdict, an interval, and a median
    ratio no more than twice the threshold below 1 — and why each other one is out (pure)."""
    keep, out = [], {}
    word = SPEED_WORDS.get(metric, metric)
    for m in fits:
        v = None if m.name == base.name else compare(base, m, metric, threshold)
        if v is not None and v[1] == stats.UNTESTED:
            out[m.name] = (f"{word} {stats.format_ratio(v[0])} of {who}: untested (one trial on a side), so "
                           "not shown to be as fast")
        elif v is not None and (v[1] == "slower" or v[0].ratio < 1 - 2 * threshold):
            out[m.name] = (f"{word} {stats.format_ratio(v[0])} of {who}: "
                           + ("measurably slower" if v[1] == "slower" else
                              f"not shown to be as fast (median more than {2 * threshold:.0%} below)"))
        else:
            keep.append(m)
    return keep, out


def pick(ms: Sequence[ts.Measures], default: str, goal: str, *, min_context: int = 0, min_gen_tps: float | None = None,
         need_context: int = 0, threshold: float = 0.02, default_fits: bool = True, min_trials: int = 1,
         kld: dict[str, float] | None = None, max_kld: float | None = None,
         differs: Mapping[str, str] | None = None) -> Pick:
    """The configuration for the goal. Context: the most context among those that hold `min_context` (and the K
    requests' `need_context`) and whose generation is at least `min_gen_tps` — without a floor, not measurably
    slower than the default's (no "slower" verdict, and a median ratio no more than twice the threshold below 1,
    so that a wide interval on a noisy machine does not pass a slow candidate); ties go to the faster generation.
    Throughput (`throughput_pick`): the most context among those whose aggregate output at K requests is not
    measurably slower, by the same test, than the fastest's — or than the default's where nothing is measurably
    faster than it — among those that hold the context asked for (and meet a generation floor if one is given).
    The default is a candidate too, unless it does not fit the budgets (`default_fits`). Its speed is the floor, as
    what the user has without tuning — but a default that does not fit is not something these cards can run: where
    nothing that fits is as fast as it (an MoE model whose experts must leave the GPUs), the floor is the fastest
    configuration that fits instead, and the reason says so. A configuration measured with fewer than `min_trials`
    single-stream trials (a race stopped it after its screening trial) is untested, not a candidate; so is one
    whose speed against the floor's has no interval. `kld` (configuration → mean KL divergence of its KV cache
    types against f16/f16) with `max_kld` rules out caches that change the output more than that; `differs`
    (configuration → the output check's words) rules out one that computes differently from the default."""
    by = {m.name: m for m in ms}
    floor = max(min_context, need_context)
    why_out, fits = _constrained(ms, default, floor, default_fits=default_fits, min_trials=min_trials,
                                 min_gen_tps=min_gen_tps, kld=kld, max_kld=max_kld, differs=differs)

    def as_fast(base: ts.Measures | None, who: str) -> tuple[list[ts.Measures], dict[str, str]]:
        if min_gen_tps is not None or goal != "context" or base is None:
            return list(fits), {}
        return _as_fast(fits, base, who, threshold)

    ok, slower = as_fast(by.get(default), "the default's")
    speed_floor = "the default"
    floor_of: str | None = default if by.get(default) is not None else None
    if not ok and not default_fits and fits:
        # the default cannot run on these cards: the fastest configuration that can sets the pace instead
        fastest = max(fits, key=lambda m: m.median(GEN) or 0.0)
        ok, slower = as_fast(fastest, f"{fastest.name}'s")
        floor_of = fastest.name
        speed_floor = (f"{fastest.name}, the fastest configuration that fits (llama.cpp's default does not fit "
                       f"the budgets and everything that fits is slower than it)")
    why_out |= slower
    if goal == "throughput" and ok:
        return throughput_pick(ok, default, threshold) or _nothing_met(
            default, {**why_out, "aggregate output": "none measured at K requests"}, default_fits)
    if not ok:
        return _nothing_met(default, why_out, default_fits)
    best = max(ok, key=lambda m: (m.n_ctx, m.median(GEN) or 0.0))
    floor_txt = (f"generating at least {min_gen_tps:g} t/s" if min_gen_tps is not None
                 else f"generating not measurably slower than {speed_floor}")
    reason = f"the most context ({best.n_ctx:,} tokens) {floor_txt}"
    return Pick(best.name, reason, tuple(m.name for m in ok), floor_of if min_gen_tps is None else None)


def _nothing_met(default: str, why_out: dict[str, str], default_fits: bool) -> Pick:
    return Pick(default, "no configuration met the constraints (" + "; ".join(
        f"{k}: {v}" for k, v in list(why_out.items())[:4]) + "): keep llama.cpp's default"
        + ("" if default_fits else ", which does not fit the budgets either (relax --min-gen-tps or "
           "--min-context)"), ())


def throughput_pick(ok: Sequence[ts.Measures], default: str, threshold: float) -> Pick | None:
    """Goal throughput among the configurations that meet the constraints (`ok`; pure). Where llama.cpp's default is
    among them and nothing is measurably faster than it, the default stays the pick (nothing buys aggregate output
    over what the user has), the tied said. Otherwise the reference is the fastest (highest median aggregate output
    at K requests); the tied are those not measurably slower than it (no "slower" verdict, an interval, a median no
    more than twice the threshold below — goal context's test); the pick is the one of them with the most context
    (then the higher median). So noise never trades context away: a configuration whose lead is within the
    intervals wins nothing over one that holds more. None where none measured aggregate output."""
    cands = [m for m in ok if m.samples.get(AGG)]
    if not cands:
        return None
    fastest = max(cands, key=lambda m: (m.median(AGG) or 0.0, m.n_ctx))
    base = next((m for m in cands if m.name == default), None)
    faster = [m.name for m in cands if base is not None and m is not base
              and (v := compare(base, m, AGG, threshold)) is not None and v[1] == "faster"]
    ref = base if base is not None and not faster else fastest
    tied, _ = _as_fast(cands, ref, "the reference's", threshold, AGG)
    ranked = sorted(tied, key=lambda m: (-m.n_ctx, m.name))
    names = [f"{m.name} ({m.n_ctx:,} tokens, {m.median(AGG) or 0.0:,.1f} t/s)" for m in ranked[:TIED_SHOWN]]
    more = f" and {len(ranked) - TIED_SHOWN} more" if len(ranked) > TIED_SHOWN else ""
    said = f"tied: {', '.join(names)}{more}" if len(ranked) > 1 else "none other is"
    if ref is base:  # nothing buys aggregate output over what the user has: the default stays the pick
        reason = (f"keep llama.cpp's default ({ref.median(AGG) or 0.0:,.1f} t/s): no configuration is measurably "
                  f"faster in aggregate output; not measurably slower than it — {said}")
        return Pick(ref.name, reason, tuple(m.name for m in ok), None, tuple(m.name for m in ranked))
    best = max(tied, key=lambda m: (m.n_ctx, m.median(AGG) or 0.0))
    who = (f"the fastest, {ref.name} ({ref.median(AGG) or 0.0:,.1f} t/s"
           + (f"; measurably faster than llama.cpp's default: {', '.join(faster)})" if faster else ")"))
    reason = (f"the most context ({best.n_ctx:,} tokens) among the configurations not measurably slower in aggregate "
              f"output than {who}: {said}")
    return Pick(best.name, reason, tuple(m.name for m in ok), None, tuple(m.name for m in ranked))


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
    # members whose outputs (with the default's KV cache) differ from the default's: the output check's words
    differs: dict[str, str] | None = None

    def pick(self, ms: Sequence[ts.Measures], repeats: int) -> Pick:
        """`pick` under this rule, a configuration with fewer than min(2, repeats) trials untested."""
        return pick(ms, self.default, self.goal, min_context=self.floor_ctx, min_gen_tps=self.min_gen_tps,
                    threshold=self.threshold, default_fits=self.default_fits, min_trials=min(2, repeats),
                    kld=self.kld, max_kld=self.max_kld, differs=self.differs)

    def kld_over(self, name: str) -> str | None:
        """Why `name`'s KV cache is out under --max-kld (its KLD measured above it), or None."""
        mean_kld = (self.kld or {}).get(name)
        if self.max_kld is not None and mean_kld is not None and mean_kld > self.max_kld:
            return f"its KV cache's mean KLD {mean_kld:.4f} is above --max-kld {self.max_kld:g}"
        return None

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
                "floor": self.pick.floor, "tied": list(self.pick.tied), "undecided": list(self.undecided),
                "repeats": self.repeats, "rule": self.rule.as_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Decision:
        return cls(pick=Pick(str(d["build"]), str(d["reason"]), tuple(d.get("considered") or ()), d.get("floor"),
                             tuple(d.get("tied") or ())),
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


def eligible(p: ts.Measures, rule: Rule) -> bool:
    """Whether a configuration measured with all its trials meets the pick's constraints, the speed floor aside: it
    fits the budgets (llama.cpp's default may not), holds the context asked for, its KV cache is within --max-kld,
    it computes what the default computes (the output check), and it generates (at least --min-gen-tps where
    given) — for good, since no later measurement of another configuration changes any of these."""
    gen = p.median(GEN)
    return (gen is not None and p.n_ctx >= rule.floor_ctx and rule.kld_over(p.name) is None
            and p.name not in (rule.differs or {})
            and (p.name != rule.default or rule.default_fits)
            and (rule.min_gen_tps is None or gen >= rule.min_gen_tps))


def passes_floor(p: ts.Measures, default: ts.Measures | None, rule: Rule) -> bool:
    """Whether a fully measured configuration can be the pick for goal context as far as speed goes, for good:
    `eligible`, and at least --min-gen-tps, or (without one) not measurably slower in generation than the fully
    measured default, as `pick` decides it — llama.cpp's default passing its own floor — a floor that later
    measurements of other configurations cannot move."""
    if not eligible(p, rule):
        return False
    if rule.min_gen_tps is not None or p.name == rule.default:
        return True
    if default is None:
        return False
    v = compare(default, p, GEN, rule.threshold)
    return v is not None and v[1] not in ("slower", stats.UNTESTED) and v[0].ratio >= 1 - 2 * rule.threshold


def cannot_win(name: str, n_ctx: int, full: Sequence[ts.Measures], rule: Rule) -> str | None:
    """Why a front member cannot be the pick whatever it measures — so the race does not load it — or None. From
    its verified context and its KV pair's quality (stage one and the quality runs, before stage two) and from the
    configurations measured with all their trials before its turn (llama.cpp's default first):

    - a constraint it fails for good: fewer tokens than --min-context (and K requests), a KV pair above --max-kld,
      outputs that differ from the default's (the output check, once its reference generation is stored);
    - goal context: a configuration measured with all its trials that holds more context meets the speed floor for
      good (`passes_floor`), so the pick holds at least that much — llama.cpp's default where it fits and its own
      speed is the floor (or it generates at least --min-gen-tps), or a member before it."""
    if n_ctx < rule.floor_ctx:
        return f"holds {n_ctx:,} tokens, fewer than the {rule.floor_ctx:,} needed"
    if (why := rule.kld_over(name)) is not None:
        return why
    if rule.differs and name in rule.differs:
        return differs_text(rule.differs[name])
    if rule.goal != "context":
        return None
    default = next((x for x in full if x.name == rule.default), None)
    better = [p for p in full if p.name != name and p.n_ctx > n_ctx and passes_floor(p, default, rule)]
    if not better:
        return None
    p = max(better, key=lambda x: (x.n_ctx, x.name == rule.default))
    if p.name == rule.default:
        meets = ("fits the budgets and whose own speed is the floor" if rule.min_gen_tps is None else
                 f"generates {p.median(GEN) or 0.0:,.1f} t/s with all its trials, at least --min-gen-tps "
                 f"{rule.min_gen_tps:g}")
        return (f"holds {n_ctx:,} tokens, fewer than llama.cpp's default ({p.n_ctx:,}), which {meets}: it cannot "
                "be the pick for the most context")
    return (f"{p.name} holds more context ({p.n_ctx:,} > {n_ctx:,} tokens) and meets the speed floor with all its "
            f"trials: the pick has at least {p.n_ctx:,}")


def _least_gen(full: Sequence[ts.Measures], rule: Rule) -> tuple[float, str] | None:
    """Goal context: the least single-stream generation median the pick can have, known for good from the
    configurations measured with all their trials — --min-gen-tps; or, below llama.cpp's default's median by twice
    the threshold (`pick`'s median rule), the default's where it fits, else the lower of the default's and the
    fastest fitting configuration's (the floor moves to the fastest that fits only where nothing is as fast as the
    default). None where nothing sets one yet."""
    if rule.min_gen_tps is not None:
        return rule.min_gen_tps, f"--min-gen-tps {rule.min_gen_tps:g}"
    default = next((x for x in full if x.name == rule.default), None)
    dg = default.median(GEN) if default is not None else None
    if dg is None:
        return None
    cut = 1 - 2 * rule.threshold
    if rule.default_fits:
        return dg * cut, f"the default's {dg:,.1f} t/s less {2 * rule.threshold:.0%}"
    fitting = [p for p in full if p.name != rule.default and eligible(p, rule)]
    if not fitting:
        return None
    fastest = max(fitting, key=lambda x: x.median(GEN) or 0.0)
    fg = fastest.median(GEN) or 0.0
    if dg <= fg:
        return dg * cut, f"the default's {dg:,.1f} t/s less {2 * rule.threshold:.0%}"
    return fg * cut, (f"{fastest.name}'s {fg:,.1f} t/s less {2 * rule.threshold:.0%}: the default does not fit, "
                      "and the floor is at least the lower of its speed and the fastest that fits")


def _least_agg(full: Sequence[ts.Measures], rule: Rule) -> tuple[float, str] | None:
    """Goal throughput: the least aggregate output median the pick can have, known for good — twice the threshold
    below the reference's lowest possible median: llama.cpp's default's where it meets the constraints (the
    reference is it or something faster), else the fastest configuration measured in full that meets them."""
    rivals = [p for p in full if eligible(p, rule) and p.median(AGG)]
    default = next((p for p in rivals if p.name == rule.default), None)
    ref = default if default is not None else max(rivals, key=lambda x: x.median(AGG) or 0.0, default=None)
    if ref is None:
        return None
    val = ref.median(AGG) or 0.0
    who = "llama.cpp's default's" if ref is default else f"{ref.name}'s"
    return val * (1 - 2 * rule.threshold), f"{who} {val:,.1f} t/s less {2 * rule.threshold:.0%}"


def ruled_out(m: ts.Measures, full: Sequence[ts.Measures], rule: Rule) -> str | None:
    """Why `m`, measured with its screening trial only, cannot be the pick — so the race gives it no more trials —
    or None. `full`: the configurations measured with every trial so far (the default among them). Each reason is
    one the measurements show, never an assumed order of the dimensions: what `cannot_win` finds before a load, no
    generation measured, or a screening trial below the least speed the pick can have (`_least_gen`: goal context;
    `_least_agg`: goal throughput) by more than the largest trial-to-trial spread measured in this run."""
    if (why := cannot_win(m.name, m.n_ctx, full, rule)) is not None:
        return why
    gen = m.median(GEN)
    if gen is None:
        return "its screening trial measured no generation"
    if rule.goal == "context":
        metric, got, least = GEN, gen, _least_gen(full, rule)
        what = f"its screening trial generates {gen:,.1f} t/s"
    else:
        metric, got, least = AGG, m.median(AGG) or gen, _least_agg(full, rule)
        what = f"its screening trial's aggregate output is {m.median(AGG) or gen:,.1f} t/s"
    s = spread(full, metric)
    if s is None or least is None or got >= least[0] * (1 - s):
        return None
    return (f"{what}, below the floor of {least[0]:,.1f} t/s ({least[1]}) by more than the largest trial-to-trial "
            f"spread measured in this run ({s:.0%})")


def load_order(front: Sequence[tuple[str, int]], rule: Rule) -> tuple[list[str], str]:
    """The order stage two loads the front members in (after llama.cpp's default, which sets the floor), and why:
    the most context first. For goal context that is the order that decides the race soonest: the first member
    that meets the speed floor with all its trials is the pick, and every member after it holds less context, so
    none of them is loaded (`cannot_win`). For goal throughput stage one gives no speed to order by; the pick is the
    most context among the tied, so the same order."""
    order = [name for name, _ in sorted(front, key=lambda x: -x[1])]
    if rule.goal == "context":
        why = ("the most context first: the first member that meets the speed floor with all its trials is the pick, "
               "and no member with less context is loaded after it")
    else:
        why = ("the most context first (stage one measures no speed to order by; ties in aggregate output go to "
               "the most context)")
    return order, why


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
    ruled: dict[str, str]  # member → why the race gave it no more trials after its screening trial
    trials: int  # trials the race would have run (one per configuration and trial number)
    not_loaded: dict[str, str] = field(default_factory=dict)  # member → why the race would not have loaded it


def replay(ms: Sequence[ts.Measures], order: Sequence[str], rule: Rule, repeats: int) -> Replay:
    """The race over measurements an exhaustive run made (every configuration with all its trials, `ms`): the
    decisions stage two's race would have taken had it measured these same trials — the default first, then the
    members in `order` (most context first), each not loaded (`cannot_win`), ruled out after its screening trial
    (`ruled_out`) or given its remaining trials — and the pick from what the race would have kept. The oracle check:
    this pick is the exhaustive run's own."""
    by = {m.name: m for m in ms}

    def first(m: ts.Measures) -> ts.Measures:
        return ts.Measures(m.name, m.n_ctx, {k: v[:1] for k, v in m.samples.items()})

    full: list[ts.Measures] = [by[rule.default]] if rule.default in by else []
    kept: list[ts.Measures] = list(full)
    ruled: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name in order:
        m = by.get(name)
        if m is None or name == rule.default:
            continue
        if (why := cannot_win(name, m.n_ctx, full, rule)) is not None:
            skipped[name] = why
            continue
        why = ruled_out(first(m), full, rule) if repeats > 1 else None
        if why:
            ruled[name] = why
            kept.append(first(m))
        else:
            full.append(m)
            kept.append(m)
    trials = sum(min(repeats, len(m.samples.get(GEN) or [])) for m in kept)
    return Replay(pick=rule.pick(kept, repeats), ruled=ruled, trials=trials, not_loaded=skipped)
