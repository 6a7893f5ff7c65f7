"""`llamalab tune`: the llama-server command for this rig and this model, found by dry runs and proven by real runs.

The set-up is resolved once (`prepare`: the study as tune runs it, its one build, model and devices, as a
`TuneSetup`); then stage one (tune/stage_one.py: the search from dry runs; tune/stage_one_cache.py: reused for the
same search, model, build and budgets, made by the same llamalab), the front's KV pairs' quality (quality/kv.py),
and stage two (tune/race.py: the whole verified front and llama.cpp's default raced for real). The run is stored
with its search (`tunes.result_json`) and with what it decided (`tune_picks.pick_json`: the pick, its reason and
the rule, tune/pick.py `Decision`), which
report/analysis/tune.py renders with the front and the pick's command.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..llamacpp import engines
from ..quality import kv as quality
from ..setup import configplan
from ..setup import prepare as session
from ..setup.options import RunOptions
from ..setup.progress import Progress
from ..store.db import Store
from ..study.spec import BuildSpec, Study, TuneSpec, with_budgets
from . import pick as tunepick
from . import race as racemod
from . import stage_one as s1
from . import stage_one_cache
from .records import DEFAULT


def tune_study(study: Study) -> Study:
    """The study as tune runs it: its first build (llama.cpp's) and a build of each other engine `[tune] engines`
    names (`engine_builds`), `[tune] parallel` slots, and the workload measured single-stream and at K requests."""
    spec = study.tune or TuneSpec()
    k = spec.parallel
    wl = study.workload.model_copy(update={"concurrency": sorted({1, k})})
    # stage two compares each member's generated tokens with the default's; the logits of its KV pair are the
    # KV quality check's (quality/kv.py), not a llama-perplexity run per member
    outputs = study.outputs.model_copy(update={"logits": False})
    return study.model_copy(update={"tune": spec, "builds": engine_builds(study, spec), "workload": wl,
                                    "outputs": outputs, "server": study.server.model_copy(update={"parallel": k})})


def engine_builds(study: Study, spec: TuneSpec) -> list[BuildSpec]:
    """The builds a tune runs (pure): the study's first, whose engine must be llama.cpp's (its default is what every
    member is measured against), then for each other engine of `[tune] engines` the study's first build of that
    engine, else one of its pinned release named after it."""
    first = study.builds[0]
    if first.engine not in (None, engines.LLAMA_CPP):
        raise ConfigError(f"tune's first build must be llama.cpp's, and build {first.name} is {first.engine}'s: "
                          "llama.cpp's default is what every member is measured against.",
                          tip=ENGINES_TIP)
    out = [first]
    for engine in spec.engines:
        if engine == engines.LLAMA_CPP:
            continue
        own = next((b for b in study.builds[1:] if b.engine == engine), None)
        if own is None:
            name = engine if engine not in {b.name for b in study.builds} else f"{engine}-tune"
            own = BuildSpec(name=name, label=f"{engine} (its pinned release)", engine=engine)
        out.append(own)
    return out


ENGINES_TIP = ("put a llama.cpp build first; `--engines llama.cpp,ik_llama.cpp` (or [tune] engines) races "
               "ik_llama.cpp's members beside llama.cpp's, and `llamalab run engines` compares the engines' defaults.")


def prepare(study: Study, opts: RunOptions, progress: Progress) -> s1.TuneSetup:
    """The tune's set-up, once: the study as tune runs it under the budgets (--budget over [devices] vram), checked
    for the memory fit its dry runs read, built and prepared (`setup.prepare`)."""
    study = tune_study(study)
    configplan.check_fit_on(study)
    prep = session.prepare(with_budgets(study, opts.budgets_mib or study.devices.budgets_mib), opts, progress)
    for b in prep.study.builds:
        if b.name not in prep.artifacts:
            raise ConfigError(f"build {b.name} could not be made: {prep.skipped.get(b.name)}",
                              tip="tune runs the study's first build (and one of each other engine it names); check "
                                  "`llamalab build STUDY`.")
    name = prep.study.builds[0].name
    if (engine := prep.artifacts[name].engine) != engines.LLAMA_CPP:  # a checkout or binaries of another engine
        raise ConfigError(f"tune's first build must be llama.cpp's, and build {name} is {engine}'s: llama.cpp's "
                          "default is what every member is measured against.", tip=ENGINES_TIP)
    return s1.TuneSetup.of(prep)


@dataclass
class TuneResult:
    run_id: str | None  # None: stage one only, nothing run or stored
    doc: dict[str, Any]


def run_tune(study: Study, opts: RunOptions, progress: Progress) -> TuneResult:
    """Stage one (the search, from dry runs), the front's KV pairs' quality, and stage two (the race) unless the
    model is a header-only stand-in; the run, the search and the decision are stored."""
    t0 = time.monotonic()
    setup = prepare(study, opts, progress)
    spec = setup.spec
    logs = opts.logs_dir or Path(tempfile.mkdtemp(prefix="llamalab-tune-"))
    try:
        one = stage_one_cache.made_or_cached(setup, logs, opts.home, fresh=opts.fresh, timeout_s=opts.timeout_s,
                                             progress=progress)
        kld = quality.for_front(setup.prep, setup.art, [m.kv for m in one.front], spec, logs, opts.home, progress)
    finally:
        if opts.logs_dir is None:
            shutil.rmtree(logs, ignore_errors=True)
    counts = s1.counts(one)
    progress.message(f"tune stage one: {counts['enumerated']} candidates, {one.dry_runs} dry runs in "
                     f"{one.seconds:.1f} s"
                     + "".join(f" ({e.engine}: {e.loads} loads in {e.seconds:.1f} s)" for e in one.engines)
                     + f" → {counts['front']} on the front"
                     + ("" if opts.stage_one_only else ", every one raced in stage two"
                        + (" (exhaustive: every one with all its trials)" if racemod.exhaustive(spec) else "")))
    study = setup.study
    if opts.stage_one_only:  # a stand-in has no weights to run: the search is the answer
        doc = {**search_doc(setup, one, counts), "stage2": None, "seconds": round(time.monotonic() - t0, 2),
               "threshold": study.workload.threshold,
               "chosen": [{"label": m.label, "n_ctx": m.n_ctx,
                           "args": [*setup.build_of(m.candidate.engine).args, *m.candidate.args(m.n_ctx)],
                           "devices_mib": list(m.devices_mib) if m.devices_mib is not None else None,
                           **({} if m.candidate.own_engine else {"engine": m.candidate.engine})}
                          for m in one.front]}
        return TuneResult(run_id=None, doc=doc)
    one = one.staged(kld.by_pair)
    search = {**search_doc(setup, one, counts), "threshold": study.workload.threshold}
    rule = tunepick.Rule.of_search(search)
    run_id, s2, stage2 = racemod.stage_two(setup, one, rule, opts, progress)
    doc = {**search, "quality": kld.as_dict(), "stage2": stage2, "seconds": round(time.monotonic() - t0, 2),
           "threshold": s2.workload.threshold, "repeats": s2.workload.repeats, "notes": [*one.notes, *kld.notes]}
    with Store(opts.db) as store:
        ms = racemod.measures(store, run_id, race_contexts(one), spec.parallel)
        # the members whose outputs (with the default's KV cache) differ from the default's are out
        rule = racemod.OutputCheck.of(setup, one).rule(rule, store, run_id)
        decision = tunepick.decide(ms, rule, s2.workload.repeats)
        store.save_tune(run_id, doc, decision.as_dict())
    return TuneResult(run_id=run_id, doc=doc)


def race_contexts(one: s1.StageOne) -> dict[str, int]:
    """The context each configuration of stage two was tuned to, by build."""
    return {DEFAULT: one.default.n_ctx or 0} | {str(m.build): int(m.n_ctx or 0) for m in one.front}


def search_doc(setup: s1.TuneSetup, one: s1.StageOne, counts: dict[str, Any]) -> dict[str, Any]:
    """What stage one found, as the `tunes` table stores it (stage two adds its own keys)."""
    spec, prep = setup.spec, setup.prep
    return {
        "version": 1,
        "goal": spec.goal, "min_context": spec.min_context, "min_gen_tps": spec.min_gen_tps,
        "parallel": spec.parallel, "need_context": s1.need_context(setup.study), "max_kld": spec.max_kld,
        "rig": {"devices": list(one.rig.names), "budgets_mib": list(one.rig.budgets_mib),
                "margins_mib": list(one.rig.margins_mib), "backend": one.rig.backend,
                "shared_processor": one.rig.shared_processor, "copies": one.rig.copies,
                "budgets_given": bool(setup.budgets)},
        "model": {"path": str(prep.model_path), "n_layer": one.layout.n_layer, "n_ctx_train": one.layout.n_ctx_train,
                  "n_expert": one.layout.n_expert},
        "space": {"splits": list(one.space.splits), "kv": ["/".join(p) for p in one.space.kv],
                  "ubatch": list(one.space.ubatch), "n_cpu_moe": list(one.space.n_cpu_moe),
                  "not_searched": one.space.not_searched},
        "default": one.default.as_dict(),
        "candidates": [m.as_dict() for m in one.members],
        "stage1": {**counts, "dry_runs": one.dry_runs, "seconds": one.seconds, "reused_from": one.reused_from,
                   "key": one.key, "afresh": one.afresh},
        "notes": list(one.notes),
        **({"engines": [e.as_dict() for e in one.engines]} if one.engines else {}),
    }

