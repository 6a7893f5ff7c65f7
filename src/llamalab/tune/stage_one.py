"""Tune's stage one: the search from dry runs alone (llama-server stopped after its memory fit, no weight read).

 1. llama.cpp's default — the study's arguments and nothing else, under the budgets' emulation — for its fitted
    context;
 2. per split mode and micro-batch, two calibration runs (f16/f16 cache, the budgets' proportional layer split, at
    a quarter of the training context and at all of it): the memory model of every candidate of that group;
 3. every combination of the search space predicted from that model and the GGUF header (tune.space.predict: the
    layer split chosen for the most context), pruned to the predicted feasible, non-dominated set;
 4. each survivor verified by a dry run of exactly its command at its predicted context, stepped down where a
    device is over its budget (or up where every device has room), then the front again from verified figures.

A stage one is kept under `$LLAMALAB_HOME/tune/` for the same search, model, build and budgets, made by the same
llamalab (tune/stage_one_cache.py), so a tune run again races the same front without its dry runs.
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..core import proc
from ..core.errors import ConfigError, ModelError
from ..fit import budget, maxctx
from ..llamacpp.build import BuildArtifact
from ..llamacpp.cmake import cmake_true
from ..llamacpp.engines import LLAMA_CPP
from ..logs.dryrun import DryRun
from ..models import gguf
from ..rig import devices
from ..setup import configplan
from ..setup import prepare as session
from ..setup.progress import Progress
from ..study.spec import BuildSpec, Config, SettingSpec, Study, TuneSpec
from . import space as ts
from .records import Default, EngineSearch, Member


def need_context(study: Study) -> int:
    """Tokens K requests of the workload's largest cell hold at once (a unified KV cache)."""
    spec = study.tune or TuneSpec()
    wl = study.workload
    return spec.parallel * (max(wl.prompt_lengths) + max(wl.output_lengths))


@dataclass(frozen=True)
class TuneSetup:
    """A tune's set-up, resolved once: the study as tune runs it, prepared (its llama.cpp build — and a build of each
    other engine `[tune] engines` names —, model and devices), its [tune] section, the binary llama.cpp's members
    run, the budgets and the context every configuration must hold."""

    prep: session.Prepared
    spec: TuneSpec
    art: BuildArtifact  # llama.cpp's build: its default and its members
    budgets: tuple[int, ...] | None
    floor: int  # max([tune] min_context, the tokens K requests of the workload hold)
    others: tuple[BuildArtifact, ...] = ()  # the other engines' builds (the study's builds after the first)

    @classmethod
    def of(cls, prep: session.Prepared) -> TuneSetup:
        study = prep.study
        spec = study.tune or TuneSpec()
        budgets = study.devices.budgets_mib
        return cls(prep=prep, spec=spec, art=prep.artifacts[study.builds[0].name],
                   budgets=tuple(budgets) if budgets else None,
                   floor=max(spec.min_context, need_context(study)),
                   others=tuple(prep.artifacts[b.name] for b in study.builds[1:] if b.name in prep.artifacts))

    @property
    def study(self) -> Study:
        return self.prep.study

    def art_of(self, engine: str) -> BuildArtifact:
        """The build that runs `engine`'s members."""
        return next((a for a in (self.art, *self.others) if a.engine == engine), self.art)

    def build_of(self, engine: str) -> BuildSpec:
        """The study's build of `engine` (its first build for llama.cpp)."""
        name = self.art_of(engine).name
        return next((b for b in self.study.builds if b.name == name), self.study.builds[0])

    def config(self, extra: list[str], engine: str = LLAMA_CPP) -> Config:
        """The study's build of `engine` with `extra` arguments, as tune's one setting."""
        b = self.build_of(engine)
        return Config(build=b.model_copy(update={"args": [*b.args, *extra]}), setting=SettingSpec(name="tune"))


@dataclass(frozen=True)
class StageOne:
    rig: ts.Rig
    layout: ts.ModelLayout
    space: ts.Space
    default: Default
    default_extra: tuple[str, ...]  # arguments the default's build gets beside the study's (budget emulation detail)
    members: tuple[Member, ...]  # every candidate, with what stage one found
    dry_runs: int
    seconds: float
    notes: tuple[str, ...] = ()
    reused_from: str | None = None  # stage one read from the cache of an earlier tune (its key)
    key: str | None = None  # what it is cached under (tune/stage_one_cache.py; None: not cached, no budgets)
    afresh: str | None = None  # why a stage one cached for this search was not reused (made by other code …)
    engines: tuple[EngineSearch, ...] = ()  # other engines' searches, their members among `members` (`joined`)

    @property
    def front(self) -> list[Member]:
        """The verified front, the most context first: every member runs in stage two's race (each engine's front:
        engines are never ordered against each other)."""
        return sorted((m for m in self.members if m.status == "front"), key=lambda m: -(m.n_ctx or 0))

    def joined(self, other: StageOne, engine: str) -> StageOne:
        """This (llama.cpp's) stage one with another engine's (tune/stage_one_engine.py): its members beside these,
        and its search recorded."""
        search = EngineSearch(engine=engine, rig=other.rig, space=other.space, loads=other.dry_runs,
                              seconds=other.seconds, members=len(other.members),
                              front=sum(1 for m in other.members if m.status == "front"),
                              reused_from=other.reused_from, afresh=other.afresh, notes=other.notes)
        return dataclasses.replace(self, members=self.members + other.members, engines=(*self.engines, search))

    def staged(self, kld: dict[str, dict[str, Any]]) -> StageOne:
        """Stage one with the front given its stage-two names (t01 …, the most context first) and each member's KV
        pair's quality (`kld` by pair)."""
        names = {m.candidate.key(): f"t{k:02d}" for k, m in enumerate(self.front, start=1)}
        return dataclasses.replace(self, members=tuple(
            m.staged_as(names[m.candidate.key()], kld.get(m.kv)) if m.candidate.key() in names else m
            for m in self.members))

    def as_dict(self) -> dict[str, Any]:
        return {"rig": dataclasses.asdict(self.rig), "layout": dataclasses.asdict(self.layout),
                "space": dataclasses.asdict(self.space), "default": self.default.as_dict(),
                "default_extra": list(self.default_extra), "records": [m.as_dict() for m in self.members],
                "dry_runs": self.dry_runs, "seconds": self.seconds, "notes": list(self.notes)}


class _Runner:
    """Dry runs of candidate command lines on one device setup, counted."""

    what = "dry run"

    def __init__(self, setup: TuneSetup, dev: devices.DeviceSetup, env: dict[str, str], logs: Path,
                 timeout_s: float, rig: ts.Rig):
        self.setup, self.dev, self.env, self.logs, self.timeout_s, self.rig = setup, dev, env, logs, timeout_s, rig
        self.count = 0

    def measure(self, c: ts.Candidate, n_ctx: int) -> tuple[ts.Measured | None, DryRun]:
        self.count += 1
        log = self.logs / f"dry-{self.count:03d}.log"
        args = session.server_args(self.setup.study, self.setup.config(c.args(n_ctx)), self.dev)
        dr = configplan.dry_run(self.setup.art.binary("llama-server"), self.setup.prep.model_path, args,
                                env=self.env, log_path=log, timeout_s=self.timeout_s)
        if dr.error:
            return None, dr
        return to_measured(dr, self.rig.names, n_ctx), dr


def to_measured(dr: DryRun, names: tuple[str, ...], n_ctx: int) -> ts.Measured:
    """A dry run's figures in the rig's device order (a device it did not use: zeros)."""
    by = {d.name: d for d in dr.devices}
    out = []
    for n in names:
        d = by.get(n)
        out.append(ts.DeviceMib(model=d.model_mib or 0.0, context=d.context_mib or 0.0, compute=d.compute_mib or 0.0,
                                kv_layers=d.kv_layers) if d else ts.DeviceMib())
    h = dr.host
    host = ts.DeviceMib(model=h.model_mib or 0.0, context=h.context_mib or 0.0, compute=h.compute_mib or 0.0)
    return ts.Measured(n_ctx=dr.n_ctx or n_ctx, devices=tuple(out), host=host)


def _rig(names: list[str], budgets: list[int], margins: list[int], setup: TuneSetup,
         dev: devices.DeviceSetup) -> ts.Rig:
    prep = setup.prep
    shared = (prep.backend == "cpu-rpc" and not prep.study.devices.rpc) or (
        dev.virtual and len(set(dev.gpu_of)) <= 1) or (len(dev.gpu_of) > 1 and len(set(dev.gpu_of)) == 1)
    blas = cmake_true(setup.art.options.get("GGML_BLAS", ""))
    return ts.Rig(names=tuple(names), budgets_mib=tuple(budgets), margins_mib=tuple(margins), backend=prep.backend,
                  shared_processor=bool(shared), copies=setup.art.expected_copies, pp_capable=not blas)


def _layout(prep: session.Prepared) -> ts.ModelLayout:
    tensors = [t for part in gguf.split_parts(prep.model_path) for t in gguf.read_header(part).tensors]
    info = prep.model_info
    return ts.model_layout(((n, b) for n, _, b in tensors), info.n_layer or 0, info.n_ctx_train or 0,
                           info.n_expert or 0)


def stage_one(setup: TuneSetup, logs: Path, timeout_s: float, progress: Progress) -> StageOne:
    prep, spec = setup.prep, setup.spec
    t0 = time.monotonic()
    layout = _layout(prep)
    if not layout.n_layer or not layout.n_ctx_train:
        raise ConfigError("the model's header does not give its layers and training context, which tune needs.",
                          tip="check the file with `llamalab plan --model M`.")
    art = setup.art
    with session.device_setup(prep, art, configplan.mkdir(logs / "devices")) as dev:
        env = {**art.env(), **dev.env}
        mem = devices.list_memory(art.binary("llama-server"), dev.server_args, env)
        if not mem:
            raise ConfigError("llama.cpp sees no device to tune for (only the CPU).",
                              tip="tune splits a model over devices: use cuda, vulkan, rocm or cpu-rpc.")
        margins = list(setup.study.server.fit_target_mib or [budget.DEFAULT_MARGIN_MIB])
        margins = margins * len(mem) if len(margins) == 1 else margins
        emu = budget.emulate(setup.budgets, mem, margins_mib=margins, user_args=[]) if setup.budgets else None
        budg = list(emu.budgets_mib) if emu else [d.free_mib for d in mem]
        rig = _rig([d.name for d in mem], budg, list(emu.margins_mib) if emu else margins[: len(mem)], setup, dev)
        sp = ts.space(spec.splits, spec.kv, spec.ubatch, spec.n_cpu_moe, rig, layout)
        dr = _Runner(setup, dev, env, logs, timeout_s, rig)
        budgets_txt = ", ".join(f"{b:,}" for b in rig.budgets_mib)
        dims = [", ".join(sp.splits), "KV " + ", ".join(spec.kv), "-ub " + ", ".join(map(str, sp.ubatch))]
        if layout.moe:
            dims.append("--n-cpu-moe " + ", ".join(map(str, sp.n_cpu_moe)))
        progress.message(f"tune stage one: {len(mem)} device(s) ({', '.join(rig.names)}), budgets {budgets_txt} MiB "
                         f"less {', '.join(map(str, rig.margins_mib))} MiB margin; searching {' × '.join(dims)}")
        default, default_extra = _default(setup, dev, env, emu, logs, timeout_s, dr, rig, progress)
        members, calibs = _calibrate(sp, rig, layout, dr, progress)
        members += _predict_and_verify(sp, rig, layout, calibs, dr, setup.floor, progress)
    notes = []
    if not setup.budgets:
        notes.append("no budgets: each device's free memory as llama.cpp reports it is its budget"
                     + (" (every local rpc-server reports this machine's RAM; pass --budget 16GiB,12GiB to tune "
                        "for particular cards)" if prep.backend == "cpu-rpc" else ""))
    return StageOne(rig=rig, layout=layout, space=sp, default=default, default_extra=tuple(default_extra),
                    members=tuple(with_front(members, rig)), dry_runs=dr.count,
                    seconds=round(time.monotonic() - t0, 2), notes=tuple(notes))


def _default(setup: TuneSetup, dev: devices.DeviceSetup, env: dict[str, str], emu: budget.Emulation | None,
             logs: Path, timeout_s: float, dr: _Runner, rig: ts.Rig, progress: Progress
             ) -> tuple[Default, list[str]]:
    """llama.cpp's default under the budgets. On a real rig of these cards its fit first tries the split by free
    memory (the budgets' proportions, which the emulation's -ts reproduces); only where that needs no change does
    the server keep that split. Otherwise the fit places the layers itself (and, for MoE models, experts in host
    memory), which it does here too when no -ts is given: `-ts 0,…,0` (llama.cpp's "no split given") keeps
    budget.emulate from adding one."""
    prep, art = setup.prep, setup.art
    b = setup.study.builds[0]
    progress.message("dry run: llama.cpp's default (no flags) under the budgets")
    first = configplan.plan_config(prep, setup.config([]), art, dev, env, emu, logs, timeout_s)
    dr.count += first.dry_runs
    extra: list[str] = []
    cp = first
    no_change = any("no changes needed" in Path(p).read_text(errors="replace") for p in first.logs[:1])
    if emu is not None and rig.n > 1 and emu.tensor_split and not no_change:
        extra = ["-ts", ",".join("0" for _ in range(rig.n))]
        cp = configplan.plan_config(prep, setup.config(extra), art, dev, env,
                                    dataclasses.replace(emu, tensor_split=None), logs, timeout_s)
        dr.count += cp.dry_runs
    _check_loads(prep, cp)
    devs = {d.name: d for d in cp.devices}
    used = [devs[n].used_mib if n in devs else 0.0 for n in rig.names]
    over = [round(u - a, 2) for u, a in zip(used, rig.avail_mib, strict=True) if u is not None]
    return Default(n_ctx=cp.n_ctx, status=cp.status, reason=cp.reason, fit_ok=cp.fit_ok,
                   fit_message=cp.fit_message, ctx_reduced_from=cp.ctx_reduced_from,
                   pipeline_parallel=cp.pipeline_parallel, sched_copies=cp.sched_copies, devices_mib=tuple(used),
                   host_mib=cp.host.used_mib if cp.host else None, over_budget=any(o > 0 for o in over),
                   fit_split=bool(extra), args=tuple(b.args)), extra


# what llama.cpp says when it cannot read the model itself, whatever the flags: nothing can be searched then
_UNREADABLE = ("model load error", "the model file is not a GGUF file")
_ERROR_LINE = re.compile(r"^\S+ E ")  # an error line of llama.cpp's log ("0.00.135.079 E llama_model_load: …")


def _check_loads(prep: session.Prepared, cp: configplan.ConfigPlan) -> None:
    """A ModelError, with llama.cpp's words, where its default dry run could not read the model: every candidate's
    would fail the same way, and a stage one of only such failures must not be kept for reuse."""
    if cp.status != "failed" or not (cp.reason or "").startswith(_UNREADABLE):
        return
    tail = [ln for log in cp.logs[:1] for ln in proc.tail_lines(Path(log), 40)]
    said = [ln for ln in tail if _ERROR_LINE.match(ln)][-4:] or tail[-4:]
    raise ModelError(f"llama.cpp could not load {prep.model_path} in tune's first dry run: {cp.reason}"
                     + "".join(f"\n  {ln}" for ln in said),
                     tip="check the file with `llamalab plan --model M`; an architecture this llama.cpp does not "
                         "know needs a newer one (--llama-cpp DIR or --llama-bin DIR). A stand-in that went "
                         "missing is made again on the next run.")


def _calibrate(sp: ts.Space, rig: ts.Rig, layout: ts.ModelLayout, dr: _Runner, progress: Progress
               ) -> tuple[list[Member], dict[tuple[str, int], ts.Calibration | str]]:
    """Two dry runs per split mode and micro-batch; a split mode whose dry run fails is recorded with llama.cpp's
    reason (-sm tensor: its fit is not implemented in b11312, so no dry run can plan it)."""
    cap = layout.n_ctx_train
    lo_ctx = max(ts.STEP, cap // 4 // ts.STEP * ts.STEP)
    main = max(range(rig.n), key=lambda i: (rig.budgets_mib[i], -i))
    base_ncmoe = min(sp.n_cpu_moe)
    out: dict[tuple[str, int], ts.Calibration | str] = {}
    members: list[Member] = []
    groups = list(sp.splits)
    if "layer" in groups and "layer-nopp" not in groups and rig.n > 1 and any(sp.n_cpu_moe):
        groups.append("layer-nopp")  # calibration only: the compute of layer splits with experts in host memory
    for split in groups:
        for ub in sp.ubatch:
            c0 = ts.Candidate(split=split, ubatch=ub, n_cpu_moe=base_ncmoe, main_gpu=main if split == "none" else 0,
                              ts=ts.proportional_ts(rig.avail_mib, layout.n_layer)
                              if split in ("layer", "layer-nopp") and rig.n > 1 else None)
            progress.message(f"dry run: calibrating {c0.split_label(rig)}, -ub {ub}")
            hi, dhi = dr.measure(c0, cap)
            lo, dlo = dr.measure(c0, lo_ctx) if hi is not None else (None, dhi)
            if hi is None or lo is None:
                bad = dhi if hi is None else dlo
                why = (bad.fit_message if bad.fit_ok is False and bad.fit_message else None) or bad.error or "failed"
                out[(split, ub)] = why
                if split == "tensor" or not any(m.candidate.split == split and m.status == "unplannable"
                                                for m in members):
                    members.append(Member.of(c0, rig, status="unplannable", dry_runs=2 if hi else 1,
                                             reason=f"the dry run gives no figures: {why}"))
                continue
            out[(split, ub)] = ts.Calibration(split=split, ubatch=ub, ts=c0.ts, n_cpu_moe=base_ncmoe,
                                              main_gpu=c0.main_gpu, low=lo, high=hi)
    return members, out


def _predict_and_verify(sp: ts.Space, rig: ts.Rig, layout: ts.ModelLayout,
                        calibs: dict[tuple[str, int], ts.Calibration | str], dr: _Runner, floor: int,
                        progress: Progress) -> list[Member]:
    cap = layout.n_ctx_train
    members: list[Member] = []
    predicted: list[tuple[ts.Candidate, ts.Prediction]] = []
    for c in sp.candidates(rig):
        cal = calibs.get(ts.calibration_key(c, rig))
        if not isinstance(cal, ts.Calibration):
            continue  # the group's failure is recorded once
        tsplit, p = ts.best_ts(c, cal, layout, rig)
        c = dataclasses.replace(c, ts=tsplit)
        if p.n_ctx < max(floor, ts.STEP):
            why = ("its weights alone exceed a budget" if p.raw < 0 else
                   f"predicted to hold {p.n_ctx:,} tokens, fewer than the {max(floor, ts.STEP):,} needed")
            members.append(Member.of(c, rig, status="infeasible", reason=why + " (predicted)",
                                     predicted_n_ctx=p.n_ctx, devices_mib=[round(u, 2) for u in p.used_mib]))
            continue
        predicted.append((c, p))
    items = [(c, p.n_ctx) for c, p in predicted]
    keep = set(ts.front(items, rig))
    beater = {i: ts.beaten_by(items, i, rig) for i in range(len(predicted)) if i not in keep}
    progress.message(f"tune stage one: {len(predicted)} feasible by prediction, {len(keep)} on the predicted front: "
                     "verifying each by a dry run")
    verified: dict[int, Member] = {}
    for i in sorted(keep):
        c, p = predicted[i]
        verified[i] = verify(c, p, rig, dr, floor, cap)
    # a pruning stands only if what pruned it holds, verified, at least the context predicted for the pruned one:
    # where the prediction was wrong (its pruner failed, or holds less), the pruned candidate is verified too
    for i, j in sorted(beater.items()):
        if j is not None and int((verified[j].n_ctx if j in verified else 0) or 0) < predicted[i][1].n_ctx:
            c, p = predicted[i]
            v = verify(c, p, rig, dr, floor, cap)
            verified[i] = dataclasses.replace(v, reason=v.reason or (
                f"verified although pruned by prediction: {predicted[j][0].label(rig)} holds less than predicted"))
    for i, j in sorted(beater.items()):
        if i in verified:
            continue
        c, p = predicted[i]
        by = predicted[j][0] if j is not None else c
        members.append(Member.of(c, rig, status="pruned", predicted_n_ctx=p.n_ctx,
                                 devices_mib=[round(u, 2) for u in p.used_mib],
                                 reason=f"predicted {p.n_ctx:,} tokens; {by.label(rig)} is predicted to hold at "
                                        "least as many and gives up nothing it keeps"))
    members += [verified[i] for i in sorted(verified)]
    return members


class Measures(Protocol):
    """What measures a candidate at a context: dry runs (`_Runner`) or, for an engine without one, real loads
    stopped once the context is made (tune/stage_one_engine.py); `what` names one in a reason."""

    what: str

    def measure(self, c: ts.Candidate, n_ctx: int) -> tuple[ts.Measured | None, DryRun]: ...


def verify(c: ts.Candidate, p: ts.Prediction, rig: ts.Rig, dr: Measures, floor: int, cap: int,
           known: dict[int, ts.Measured] | None = None) -> Member:
    """Dry runs (or loads) of the candidate's exact command, from its predicted context and the predicted MiB per
    token, to the largest context (a multiple of 256) that keeps every device within its budget less the margin:
    the search `run`'s and `plan`'s contexts within budgets use too (`fit.maxctx.largest_within`), exact when it
    ends. `known`: what was measured of it already (n_ctx → figures)."""
    measured: dict[int, ts.Measured] = dict(known or {})
    last_error: list[str] = []

    def measure(n: int) -> list[float] | str:
        m, d = dr.measure(c, n)
        if m is None:
            last_error.append(d.error or "failed")
            return d.error or f"the {dr.what} gave no figures"
        measured[n] = m
        return m.used()

    start = max(p.n_ctx, ts.STEP) if p.n_ctx else None
    res, _ = maxctx.largest_within(measure, rig.avail_mib, cap, start=start, slopes=p.slopes, max_runs=6,
                                   known={n: tuple(m.used()) for n, m in measured.items()})
    runs = len(measured) + len(last_error)
    if res.n_ctx is None or res.n_ctx not in measured:
        worst = measured[min(measured)] if measured else None
        why = (f"the {dr.what} failed: {last_error[-1]}" if last_error and not measured else
               f"over a budget even at {min(measured):,} tokens" if worst else "no context was left to try")
        return Member.of(c, rig, status="infeasible", reason=why, predicted_n_ctx=p.n_ctx, dry_runs=runs,
                         devices_mib=[round(u, 2) for u in worst.used()] if worst else None)
    best = measured[res.n_ctx]
    if best.n_ctx < floor:
        return Member.of(c, rig, status="infeasible", reason=f"holds {best.n_ctx:,} tokens, fewer than {floor:,}",
                         predicted_n_ctx=p.n_ctx, dry_runs=runs, n_ctx=best.n_ctx)
    return Member.of(c, rig, status="verified", predicted_n_ctx=p.n_ctx, n_ctx=best.n_ctx, dry_runs=runs,
                     devices_mib=[round(u, 2) for u in best.used()], host_mib=round(best.host.used, 2),
                     exact=res.exact)


def with_front(members: list[Member], rig: ts.Rig) -> list[Member]:
    """The members with every verified one marked `front` or `dominated` (with what dominates it), from the verified
    figures (pure)."""
    ver = [i for i, m in enumerate(members) if m.status == "verified"]
    items = [(members[i].candidate, int(members[i].n_ctx or 0)) for i in ver]
    keep = set(ts.front(items, rig))
    out = list(members)
    for k, i in enumerate(ver):
        if k in keep:
            out[i] = dataclasses.replace(members[i], status="front")
            continue
        j = ts.beaten_by(items, k, rig)
        out[i] = dataclasses.replace(members[i], status="dominated", reason=(
            f"{items[j][0].label(rig)} holds {items[j][1]:,} tokens and gives up nothing this keeps"
            if j is not None else "dominated"))
    return out


def counts(one: StageOne) -> dict[str, Any]:
    by: dict[str, int] = {}
    for m in one.members:
        by[m.status] = by.get(m.status, 0) + 1
    return {"enumerated": len(one.members), "front": by.get("front", 0), "by_status": by, "real": len(one.front)}

