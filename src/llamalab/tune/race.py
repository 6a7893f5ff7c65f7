"""Tune's stage two: the verified front and llama.cpp's default run for real through the study runner — every
member a build of its engine's binary with its own arguments (llama.cpp's, or ik_llama.cpp's where `[tune] engines`
names it), so the run's report compares each with the default — as a race
(docs/tune.md): no load for a member that cannot be the pick whatever it measures, a screening trial for each of
the others, the remaining trials only for those the measurements cannot yet rule out, and more trials where the
pick is still open. `--exhaustive` runs every member with all its trials: the oracle the race is checked against.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from ..llamacpp import argv as argvmod
from ..llamacpp import server as servermod
from ..llamacpp.build import BuildArtifact
from ..llamacpp.engines import LLAMA_CPP
from ..quality import outputs as qout
from ..quality.kv import is_synthetic
from ..run import runner
from ..setup.options import RunOptions
from ..setup.progress import Progress
from ..store.db import Store
from ..study.spec import BuildSpec, Config, Pass, SettingSpec, Study, TuneSpec
from . import pick as tunepick
from . import space as ts
from .records import DEFAULT, ledger_contexts
from .stage_one import StageOne, TuneSetup


def exhaustive(spec: TuneSpec) -> bool:
    return spec.exhaustive or not spec.screen


def front_builds(setup: TuneSetup, one: StageOne) -> list[BuildSpec]:
    """Stage two's builds: llama.cpp's default (the first build's binary), then each front member under its
    stage-two name (`one` staged), a copy of its engine's build (`TuneSetup.build_of`: the first build for
    llama.cpp's members) with the member's arguments; their flags checked against their engine's binary."""
    b0 = setup.study.builds[0]
    builds = [b0.model_copy(update={"name": DEFAULT, "label": "llama.cpp's default (--fit, no flags)",
                                    "args": [*b0.args, *one.default_extra]})]
    for m in one.front:
        base = setup.build_of(m.candidate.engine)
        builds.append(base.model_copy(update={"name": m.build, "label": f"{m.label}, -c {m.n_ctx:,}",
                                              "args": [*base.args, *m.candidate.args(m.n_ctx)]}))
    for b in builds[1:]:
        art = artifact_of(setup, b)
        servermod.check_flags(art.binary("llama-server"), [*setup.study.server.args, *b.args], env=art.env(),
                              engine=art.engine)
    return builds


def artifact_of(setup: TuneSetup, build: BuildSpec) -> BuildArtifact:
    """The binary a stage-two build runs: its engine's build's (llama.cpp's default and members: the first build's),
    under the stage-two build's name."""
    return dataclasses.replace(setup.art_of(build.engine or LLAMA_CPP), name=build.name)


def single_trials(trials: list[dict[str, Any]]) -> int:
    """Trials run: one per configuration and trial number (each measures every level of the workload)."""
    return len({(t["build"], t["trial"]) for t in trials})


def measures(store: Store, run_id: str, ctx_of: dict[str, int], parallel: int) -> list[ts.Measures]:
    """What the run has measured so far, per configuration (the context each server ran with)."""
    return ts.measures(store.trials(run_id), ctx_of, parallel, ledger_contexts(store.configs(run_id)))


@dataclass(frozen=True)
class OutputCheck:
    """What the race needs to judge a member's outputs against llama.cpp's default's (quality/outputs.py): each
    member's KV pair and engine, the default's KV pair, and whether the model is synthetic (only identity counts
    there). A member of another engine (ik_llama.cpp) is judged against llama.cpp's default like any other: what
    the user runs today is the reference, and a change of engine that changes the outputs is what the check is for
    (docs/tune.md, "Engines")."""

    kv_of: dict[str, str]
    default_kv: str
    synthetic: bool
    engine_of: dict[str, str] = field(default_factory=dict)  # member → its engine, where not llama.cpp

    @classmethod
    def of(cls, setup: TuneSetup, one: StageOne) -> OutputCheck:
        args = [*setup.study.server.args, *setup.study.builds[0].args]
        k = argvmod.value(args, "-ctk", "--cache-type-k") or "f16"
        v = argvmod.value(args, "-ctv", "--cache-type-v") or "f16"
        return cls(kv_of={str(m.build): m.kv for m in one.front}, default_kv=f"{k}/{v}",
                   synthetic=is_synthetic(setup.prep.model_info.name),
                   engine_of={str(m.build): m.candidate.engine for m in one.front if not m.candidate.own_engine})

    def differing(self, store: Store, run_id: str) -> dict[str, str]:
        """The members measured so far whose outputs, with the default's KV cache, differ from the default's
        (member → the verdict's words). A member with another KV pair is not judged so: what its cache changes is a
        quality cost (its KLD, the KV quality check's), not a fault — unless it runs on another engine one of whose
        members, with the default's KV cache, computes differently: then the engine does, whatever its cache
        (`engine_verdicts`)."""
        rows: dict[str, list[dict[str, Any]]] = {}
        for r in store.outputs(run_id):
            rows.setdefault(str(r["build"]), []).append(r)
        base = qout.repetitions(qout.by_mode(rows.get(DEFAULT, [])))
        out: dict[str, str] = {}
        for name, kv in self.kv_of.items():
            if kv != self.default_kv or name not in rows or not base:
                continue
            mine = qout.first_repetition(qout.by_mode(rows[name]))
            v = qout.judge(DEFAULT, base, mine, None, synthetic=self.synthetic)
            if v.kind == qout.DIFFERS:
                out[name] = v.words
        return {**out, **engine_verdicts(out, self.engine_of)}

    def rule(self, rule: tunepick.Rule, store: Store, run_id: str) -> tunepick.Rule:
        """`rule` with the members that compute differently so far (`Rule.differs`)."""
        return dataclasses.replace(rule, differs=self.differing(store, run_id) or None)


def judged_first(order: list[str], check: OutputCheck) -> list[str]:
    """The load order with each other engine's first member that has the default's KV pair moved ahead of that
    engine's other members (pure): its outputs are judged against the default's (`OutputCheck`), and where they
    differ so does the engine (`engine_verdicts`), so its other members need no load. llama.cpp's members keep
    their places."""
    out = list(order)
    for engine in dict.fromkeys(check.engine_of.values()):
        mine = [n for n in out if check.engine_of.get(n) == engine]
        judge = next((n for n in mine if check.kv_of.get(n) == check.default_kv), None)
        if judge is None or judge == mine[0]:
            continue
        out.remove(judge)
        out.insert(out.index(mine[0]), judge)
    return out


def engine_verdicts(differs: dict[str, str], engine_of: dict[str, str]) -> dict[str, str]:
    """The other members of an engine one of whose members, with the default's KV cache, computes differently from
    llama.cpp's default (`differs`: member → the verdict's words): each with the words that say so (pure). A
    member of llama.cpp is never judged by another's verdict: they share the default's engine."""
    out: dict[str, str] = {}
    for name, engine in engine_of.items():
        if name in differs:
            continue
        judged = sorted(n for n in differs if engine_of.get(n) == engine)
        if judged:
            out[name] = f"runs on {engine}, whose {judged[0]} (the default's KV cache) {differs[judged[0]]}"
    return out


def stage_two(setup: TuneSetup, one: StageOne, rule: tunepick.Rule, opts: RunOptions, progress: Progress
              ) -> tuple[str, Study, dict[str, Any]]:
    """The race over the front (`Race`), stored as a run: its id, the study it ran and what the search records
    of it."""
    spec = setup.spec
    builds = front_builds(setup, one)
    s2 = setup.study.model_copy(update={"builds": builds,
                                        "settings": [SettingSpec(name="tune", label=f"tune: {spec.goal}")]})
    prep2 = dataclasses.replace(setup.prep, study=s2, skipped={},
                                artifacts={b.name: artifact_of(setup, b) for b in builds})
    race = Race(s2, spec, one, rule, opts.seconds if opts.seconds is not None else spec.seconds,
                OutputCheck.of(setup, one))
    t2 = time.monotonic()
    # no search of contexts within the budgets after the passes (the runner's, where llama.cpp's fit left a device
    # over its budget): stage one verified every member's context by dry runs already, so it would only spend time
    ropts = dataclasses.replace(opts, model=setup.prep.model_path, resume=None, budget_context="off")
    run_id = runner.execute(prep2, None, ropts, progress, passes=race.passes(), skip=race.skip, cut=race.cut)
    with Store(opts.db) as store:
        before_extension = single_trials(store.trials(run_id))
    race.extend(prep2, ropts, run_id, progress)
    stage2_s = round(time.monotonic() - t2, 2)
    with Store(opts.db) as store:
        trials = store.trials(run_id)
    return run_id, s2, {
        "real": [DEFAULT, *(m.build for m in one.front)], "screened_out": race.ruled,
        "not_loaded": race.not_loaded, "order": race.order, "order_reason": race.order_reason,
        "seconds": stage2_s, "screen": not exhaustive(spec), "mode": race.mode,
        "time_budget_s": race.budget_s, "time_left_out": race.timed_out, "extended": race.extended,
        "trials": single_trials(trials), "trials_exhaustive": len(builds) * s2.workload.repeats,
        "trials_before_extension": before_extension, "outputs_differ": race.differ}


class Race:
    """Stage two as a race over the whole verified front (docs/tune.md): the default, then each member in the order
    `tunepick.load_order` gives (the most context first), each in at most one server start: none where what is
    known before its load shows it cannot be the pick (`tunepick.cannot_win`: its verified context or KV quality
    against the constraints, or a configuration measured in full before it that holds more context and meets the
    speed floor), else a screening trial, then its remaining trials on the same server unless the measurements
    already show it cannot be the pick (`tunepick.ruled_out`, against the configurations measured with all their
    trials before it), or the time budget is spent. `exhaustive`: every configuration with all its trials, nothing
    ruled out (the oracle the race is checked against)."""

    def __init__(self, study: Study, spec: TuneSpec, one: StageOne, rule: tunepick.Rule, budget_s: float | None,
                 check: OutputCheck | None = None):
        self.study, self.spec, self.one, self.base_rule, self.check = study, spec, one, rule, check
        self.rule = rule
        self.differ: dict[str, str] = {}  # member → why its outputs rule it out (the output check)
        self.mode = "exhaustive" if exhaustive(spec) else "race"
        self.budget_s = budget_s
        self.ctx_of = {DEFAULT: one.default.n_ctx or 0} | {str(m.build): int(m.n_ctx or 0) for m in one.front}
        self.order, self.order_reason = tunepick.load_order([(str(m.build), int(m.n_ctx or 0)) for m in one.front],
                                                            rule)
        if check is not None and check.engine_of:
            self.order = judged_first(self.order, check)
            self.order_reason += ("; each other engine's member with llama.cpp's default KV cache before that "
                                  "engine's others, so that its outputs are judged against the default's first")
        self.not_loaded: dict[str, str] = {}  # member → why it was not loaded (cannot be the pick)
        self.ruled: dict[str, str] = {}  # member → why it got no trial after its screening trial
        self.timed_out: list[str] = []
        self.extended: list[dict[str, Any]] = []
        self.t0: float | None = None

    def passes(self) -> list[Pass]:
        """One server start per configuration: the default, then the members in `order`."""
        n = self.study.workload.repeats
        self.t0 = time.monotonic()
        rank = {name: i for i, name in enumerate([DEFAULT, *self.order])}
        builds = sorted(self.study.builds, key=lambda b: rank.get(b.name, len(rank)))
        return [Pass(config=Config(build=b, setting=self.study.settings[0]), trials=tuple(range(1, n + 1)))
                for b in builds]

    def _judge(self, store: Store, run_id: str) -> None:
        """The rule with the members measured so far whose outputs differ from the default's (`OutputCheck`)."""
        if self.check is not None:
            self.rule = self.check.rule(self.base_rule, store, run_id)
            self.differ = dict(self.rule.differs or {})

    def _full(self, store: Store, run_id: str, but: str) -> list[ts.Measures]:
        """The configurations other than `but` measured so far with all their trials."""
        n = self.study.workload.repeats
        return [m for m in measures(store, run_id, self.ctx_of, self.spec.parallel)
                if m.name != but and len(m.samples.get("output_tps") or []) >= n]

    def skip(self, store: Store, run_id: str, p: Pass) -> str | None:
        """Before a member's load: why it cannot be the pick whatever it measures (`tunepick.cannot_win`), so it is
        not loaded; None to load it."""
        name = p.config.build.name
        self._judge(store, run_id)
        if self.mode == "exhaustive" or name == DEFAULT:
            return None
        why = tunepick.cannot_win(name, self.ctx_of.get(name, 0), self._full(store, run_id, name), self.rule)
        if why:
            self.not_loaded[name] = why
        return why

    def _over_time(self) -> bool:
        return self.budget_s is not None and self.t0 is not None and time.monotonic() - self.t0 > self.budget_s

    def extend(self, prep: Any, opts: RunOptions, run_id: str, progress: Progress) -> None:
        """Where the measurements leave the pick open (`tunepick.undecided_names`: a member with more context whose
        interval reaches the speed floor, or a pick whose interval reaches below it), more trials of those, the
        pick and the configuration that sets the floor — `repeats` more a round, up to `[tune] max_repeats`
        (default twice `repeats`), while the time budget lasts. The race only; an exhaustive run keeps its trials."""
        n = self.study.workload.repeats
        cap = self.spec.max_repeats or 2 * n
        have = n
        while self.mode == "race" and have < cap and not self._over_time():
            with Store(opts.db) as store:
                ms = measures(store, run_id, self.ctx_of, self.spec.parallel)
                self._judge(store, run_id)
            nxt = tunepick.more_trials(ms, self.rule, n, have, cap)
            if nxt is None:
                break
            names, more, why = nxt
            progress.message(f"tune stage two: the pick is still open ({'; '.join(why)}): "
                             f"{len(more)} more trial(s) of {', '.join(names)}")
            self.extended.append({"names": names, "trials": list(more), "why": why})
            passes = [Pass(config=Config(build=b, setting=self.study.settings[0]), trials=more)
                      for b in self.study.builds if b.name in names]
            runner.execute(prep, None, dataclasses.replace(opts, resume=run_id, fresh=False), progress, passes=passes)
            have = more[-1]

    def cut(self, store: Store, run_id: str, p: Pass, trial: int) -> str | None:
        """After a member's screening trial: why its remaining trials are not run, or None."""
        name = p.config.build.name
        if self.mode == "exhaustive" or name == DEFAULT or trial != 1:
            return None
        self._judge(store, run_id)
        if self._over_time():
            self.timed_out.append(name)
            self.ruled[name] = f"the time budget of {self.budget_s:g} s ([tune] seconds, --seconds) is spent"
            return self.ruled[name]
        me = next((m for m in measures(store, run_id, self.ctx_of, self.spec.parallel) if m.name == name), None)
        full = self._full(store, run_id, name)
        why = "its screening trial measured nothing" if me is None else tunepick.ruled_out(me, full, self.rule)
        if why:
            self.ruled[name] = why
        return why
