"""`llamalab tune`: the llama-server command for this rig and this model, found by dry runs and proven by real runs.

Stage one (dry runs only, `plan.dry_run`: llama-server stopped after its memory fit, no weight read):
 1. llama.cpp's default — the study's arguments and nothing else, under the budgets' emulation — for its fitted
    context;
 2. per split mode and micro-batch, two calibration runs (f16/f16 cache, the budgets' proportional layer split, at
    a quarter of the training context and at all of it): the memory model of every candidate of that group;
 3. every combination of the search space predicted from that model and the GGUF header (tunespace.predict: the
    layer split chosen for the most context), pruned to the predicted feasible, non-dominated set;
 4. each survivor verified by a dry run of exactly its command at its predicted context, stepped down where a
    device is over its budget (or up where every device has room), then the front again from verified figures.
Stage two: the front (at most `[tune] max_real` of it) and the default run for real through the study runner —
every candidate a build of one binary with its own arguments, so the run's report compares each with the default —
a first trial each, then the remaining trials only for those no measured configuration already beats.
The run is stored with its search (`tunes` table); `report.tune` renders the front, the pick and its command.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import proc
from ..errors import ConfigError, ModelError
from ..llamacpp import budget, maxctx, standin
from ..llamacpp import server as servermod
from ..llamacpp.cmake import cmake_true
from ..rig import devices
from ..store.db import Store
from ..study.spec import BuildSpec, Config, Pass, SettingSpec, Study, TuneSpec, with_budgets
from ..write import atomic_write
from . import plan as planmod
from . import quality, runner, session, tunepick
from . import tunespace as ts
from .options import RunOptions
from .progress import Progress

DEFAULT = "default"  # the build name of llama.cpp's default in a tune run


def tune_study(study: Study) -> Study:
    """The study as tune runs it: its first build, `[tune] parallel` slots, and the workload measured single-stream
    and at K requests."""
    spec = study.tune or TuneSpec()
    k = spec.parallel
    wl = study.workload.model_copy(update={"concurrency": sorted({1, k})})
    return study.model_copy(update={"tune": spec, "builds": study.builds[:1], "workload": wl,
                                    "server": study.server.model_copy(update={"parallel": k})})


def need_context(study: Study) -> int:
    """Tokens K requests of the workload's largest cell hold at once (a unified KV cache)."""
    spec = study.tune or TuneSpec()
    wl = study.workload
    return spec.parallel * (max(wl.prompt_lengths) + max(wl.output_lengths))


# ---------------------------------------------------------------- stage one


@dataclass
class StageOne:
    rig: ts.Rig
    layout: ts.ModelLayout
    space: ts.Space
    default: dict
    default_extra: list[str]  # arguments the default's build gets beside the study's (budget emulation detail)
    records: list[dict]
    chosen: list[tuple[ts.Candidate, int, dict]]  # the front members measured for real: candidate, context, record
    dry_runs: int
    seconds: float
    notes: list[str] = field(default_factory=list)
    reused_from: str | None = None  # stage one read from the cache of an earlier tune (its key)


class _Runner:
    """Dry runs of candidate command lines on one device setup, counted."""

    def __init__(self, prep: session.Prepared, study: Study, art, dev, env: dict, logs: Path, timeout_s: float,
                 rig: ts.Rig):
        self.prep, self.study, self.art, self.dev, self.env = prep, study, art, dev, env
        self.logs, self.timeout_s, self.rig = logs, timeout_s, rig
        self.count = 0

    def args(self, extra: list[str]) -> list[str]:
        b = self.study.builds[0]
        cfg = Config(build=b.model_copy(update={"args": [*b.args, *extra]}), setting=SettingSpec(name="tune"))
        return session.server_args(self.study, cfg, self.dev)

    def measure(self, c: ts.Candidate, n_ctx: int) -> tuple[ts.Measured | None, planmod.DryRun]:
        self.count += 1
        log = self.logs / f"dry-{self.count:03d}.log"
        dr = planmod.dry_run(self.art.binary("llama-server"), self.prep.model_path, self.args(c.args(n_ctx)),
                             env=self.env, log_path=log, timeout_s=self.timeout_s)
        if dr.error:
            return None, dr
        return to_measured(dr, self.rig.names, n_ctx), dr


def to_measured(dr: planmod.DryRun, names: tuple[str, ...], n_ctx: int) -> ts.Measured:
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


def _record(c: ts.Candidate, rig: ts.Rig, **kw) -> dict:
    rec = {"key": c.key(), "label": c.label(rig), "split": c.split, "ts": list(c.ts) if c.ts else None,
           "ctk": c.ctk, "ctv": c.ctv, "ubatch": c.ubatch, "n_cpu_moe": c.n_cpu_moe, "main_gpu": c.main_gpu,
           "args": c.args(), "pipeline_parallel": c.pipelined(rig), "status": "", "reason": None, "n_ctx": None,
           "predicted_n_ctx": None, "devices_mib": None, "host_mib": None, "dry_runs": 0, "build": None}
    rec.update(kw)
    return rec


def _rig(names: list[str], budgets: list[int], margins: list[int], prep: session.Prepared, art, dev) -> ts.Rig:
    shared = (prep.backend == "cpu-rpc" and not prep.study.devices.rpc) or (
        dev.virtual and len(set(dev.gpu_of)) <= 1) or (len(dev.gpu_of) > 1 and len(set(dev.gpu_of)) == 1)
    blas = cmake_true(art.options.get("GGML_BLAS", ""))
    return ts.Rig(names=tuple(names), budgets_mib=tuple(budgets), margins_mib=tuple(margins), backend=prep.backend,
                  shared_processor=bool(shared), copies=art.expected_copies, pp_capable=not blas)


def _layout(prep: session.Prepared) -> ts.ModelLayout:
    tensors = [t for part in standin.split_parts(prep.model_path) for t in standin.read_header(part).tensors]
    info = prep.model_info
    return ts.model_layout(((n, b) for n, _, b in tensors), info.n_layer or 0, info.n_ctx_train or 0,
                           info.n_expert or 0)


def stage_one(prep: session.Prepared, budgets: list[int] | None, logs: Path, timeout_s: float,
              progress: Progress) -> StageOne:
    study = prep.study
    spec = study.tune or TuneSpec()
    t0 = time.monotonic()
    art = prep.artifacts[study.builds[0].name]
    layout = _layout(prep)
    if not layout.n_layer or not layout.n_ctx_train:
        raise ConfigError("the model's header does not give its layers and training context, which tune needs.",
                          tip="check the file with `llamalab plan --model M`.")
    floor = max(spec.min_context, need_context(study))
    with session.device_setup(prep, art, planmod.mkdir(logs / "devices")) as dev:
        env = {**art.env(), **dev.env}
        mem = devices.list_memory(art.binary("llama-server"), dev.server_args, env)
        if not mem:
            raise ConfigError("llama.cpp sees no device to tune for (only the CPU).",
                              tip="tune splits a model over devices: use cuda, vulkan, rocm or cpu-rpc.")
        margins = list(study.server.fit_target_mib or [budget.DEFAULT_MARGIN_MIB])
        margins = margins * len(mem) if len(margins) == 1 else margins
        emu = budget.emulate(budgets, mem, margins_mib=margins, user_args=[]) if budgets else None
        budg = list(emu.budgets_mib) if emu else [d.free_mib for d in mem]
        rig = _rig([d.name for d in mem], budg, list(emu.margins_mib) if emu else margins[: len(mem)], prep, art, dev)
        sp = ts.space(spec.splits, spec.kv, spec.ubatch, spec.n_cpu_moe, rig, layout)
        dr = _Runner(prep, study, art, dev, env, logs, timeout_s, rig)
        budgets_txt = ", ".join(f"{b:,}" for b in rig.budgets_mib)
        dims = [", ".join(sp.splits), "KV " + ", ".join(spec.kv), "-ub " + ", ".join(map(str, sp.ubatch))]
        if layout.moe:
            dims.append("--n-cpu-moe " + ", ".join(map(str, sp.n_cpu_moe)))
        progress.message(f"tune stage one: {len(mem)} device(s) ({', '.join(rig.names)}), budgets {budgets_txt} MiB "
                         f"less {', '.join(map(str, rig.margins_mib))} MiB margin; searching {' × '.join(dims)}")
        default, default_extra = _default(prep, art, dev, env, emu, logs, timeout_s, dr, rig, progress)
        records, calibs = _calibrate(sp, rig, layout, dr, progress)
        records += _predict_and_verify(sp, rig, layout, calibs, dr, floor, progress)
    chosen = _front(records, rig, spec, floor)
    notes = []
    if not budgets:
        notes.append("no budgets: each device's free memory as llama.cpp reports it is its budget"
                     + (" (every local rpc-server reports this machine's RAM; pass --budget 16GiB,12GiB to tune "
                        "for particular cards)" if prep.backend == "cpu-rpc" else ""))
    return StageOne(rig=rig, layout=layout, space=sp, default=default, default_extra=default_extra, records=records,
                    chosen=chosen, dry_runs=dr.count, seconds=round(time.monotonic() - t0, 2), notes=notes)


def _default(prep, art, dev, env, emu, logs, timeout_s, dr: _Runner, rig: ts.Rig, progress: Progress
             ) -> tuple[dict, list[str]]:
    """llama.cpp's default under the budgets. On a real rig of these cards its fit first tries the split by free
    memory (the budgets' proportions, which the emulation's -ts reproduces); only where that needs no change does
    the server keep that split. Otherwise the fit places the layers itself (and, for MoE models, experts in host
    memory), which it does here too when no -ts is given: `-ts 0,…,0` (llama.cpp's "no split given") keeps
    budget.emulate from adding one."""
    study = prep.study
    b = study.builds[0]
    cfg = Config(build=b, setting=SettingSpec(name="tune"))
    progress.message("dry run: llama.cpp's default (no flags) under the budgets")
    first = planmod.plan_config(prep, cfg, art, dev, env, emu, logs, timeout_s)
    dr.count += first.dry_runs
    extra: list[str] = []
    cp = first
    no_change = any("no changes needed" in Path(p).read_text(errors="replace") for p in first.logs[:1])
    if emu is not None and rig.n > 1 and emu.tensor_split and not no_change:
        extra = ["-ts", ",".join("0" for _ in range(rig.n))]
        cfg2 = Config(build=b.model_copy(update={"args": [*b.args, *extra]}), setting=SettingSpec(name="tune"))
        cp = planmod.plan_config(prep, cfg2, art, dev, env, dataclasses.replace(emu, tensor_split=None), logs,
                                 timeout_s)
        dr.count += cp.dry_runs
    _check_loads(prep, cp)
    devs = {d.name: d for d in cp.devices}
    used = [devs[n].used_mib if n in devs else 0.0 for n in rig.names]
    over = [round(u - a, 2) for u, a in zip(used, rig.avail_mib, strict=True) if u is not None]
    rec = {"n_ctx": cp.n_ctx, "status": cp.status, "reason": cp.reason, "fit_ok": cp.fit_ok,
           "fit_message": cp.fit_message, "ctx_reduced_from": cp.ctx_reduced_from,
           "pipeline_parallel": cp.pipeline_parallel, "sched_copies": cp.sched_copies,
           "devices_mib": used, "host_mib": cp.host.used_mib if cp.host else None,
           "over_budget": any(o > 0 for o in over), "fit_split": bool(extra), "args": list(b.args)}
    return rec, extra


# what llama.cpp says when it cannot read the model itself, whatever the flags: nothing can be searched then
_UNREADABLE = ("model load error", "the model file is not a GGUF file")
_ERROR_LINE = re.compile(r"^\S+ E ")  # an error line of llama.cpp's log ("0.00.135.079 E llama_model_load: …")


def _check_loads(prep: session.Prepared, cp: planmod.ConfigPlan) -> None:
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
               ) -> tuple[list[dict], dict[tuple[str, int], ts.Calibration | str]]:
    """Two dry runs per split mode and micro-batch; a split mode whose dry run fails is recorded with llama.cpp's
    reason (-sm tensor: its fit is not implemented in b11312, so no dry run can plan it)."""
    cap = layout.n_ctx_train
    lo_ctx = max(ts.STEP, cap // 4 // ts.STEP * ts.STEP)
    main = max(range(rig.n), key=lambda i: (rig.budgets_mib[i], -i))
    base_ncmoe = min(sp.n_cpu_moe)
    out: dict[tuple[str, int], ts.Calibration | str] = {}
    records: list[dict] = []
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
                if split == "tensor" or not any(r.get("split") == split and r["status"] == "unplannable"
                                                for r in records):
                    records.append(_record(c0, rig, status="unplannable", dry_runs=2 if hi else 1,
                                           reason=f"the dry run gives no figures: {why}"))
                continue
            out[(split, ub)] = ts.Calibration(split=split, ubatch=ub, ts=c0.ts, n_cpu_moe=base_ncmoe,
                                              main_gpu=c0.main_gpu, low=lo, high=hi)
    return records, out


def _predict_and_verify(sp: ts.Space, rig: ts.Rig, layout: ts.ModelLayout,
                        calibs: dict[tuple[str, int], ts.Calibration | str], dr: _Runner, floor: int,
                        progress: Progress) -> list[dict]:
    cap = layout.n_ctx_train
    records: list[dict] = []
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
            records.append(_record(c, rig, status="infeasible", reason=why + " (predicted)", predicted_n_ctx=p.n_ctx,
                                   devices_mib=[round(u, 2) for u in p.used_mib]))
            continue
        predicted.append((c, p))
    items = [(c, p.n_ctx) for c, p in predicted]
    keep = set(ts.front(items, rig))
    beater = {i: ts.beaten_by(items, i, rig) for i in range(len(predicted)) if i not in keep}
    progress.message(f"tune stage one: {len(predicted)} feasible by prediction, {len(keep)} on the predicted front: "
                     "verifying each by a dry run")
    verified: dict[int, dict] = {}
    for i in sorted(keep):
        c, p = predicted[i]
        verified[i] = _verify(c, p, rig, dr, floor, cap)
    # a pruning stands only if what pruned it holds, verified, at least the context predicted for the pruned one:
    # where the prediction was wrong (its pruner failed, or holds less), the pruned candidate is verified too
    for i, j in sorted(beater.items()):
        if j is not None and int(verified.get(j, {}).get("n_ctx") or 0) < predicted[i][1].n_ctx:
            c, p = predicted[i]
            verified[i] = _verify(c, p, rig, dr, floor, cap)
            verified[i]["reason"] = verified[i].get("reason") or (
                f"verified although pruned by prediction: {predicted[j][0].label(rig)} holds less than predicted")
    for i, j in sorted(beater.items()):
        if i in verified:
            continue
        c, p = predicted[i]
        by = predicted[j][0] if j is not None else c
        records.append(_record(c, rig, status="pruned", predicted_n_ctx=p.n_ctx,
                               devices_mib=[round(u, 2) for u in p.used_mib],
                               reason=f"predicted {p.n_ctx:,} tokens; {by.label(rig)} is predicted to hold at least "
                                      "as many and gives up nothing it keeps"))
    records += [verified[i] for i in sorted(verified)]
    return records


def _verify(c: ts.Candidate, p: ts.Prediction, rig: ts.Rig, dr: _Runner, floor: int, cap: int) -> dict:
    """Dry runs of the candidate's exact command, from its predicted context and the predicted MiB per token, to
    the largest context (a multiple of 256) that keeps every device within its budget less the margin: the search
    `run`'s and `plan`'s contexts within budgets use too (`llamacpp.maxctx.largest_within`), exact when it ends."""
    measured: dict[int, ts.Measured] = {}
    last_error: list[str] = []

    def measure(n: int):
        m, d = dr.measure(c, n)
        if m is None:
            last_error.append(d.error or "failed")
            return d.error or "the dry run gave no figures"
        measured[n] = m
        return m.used()

    start = max(p.n_ctx, ts.STEP) if p.n_ctx else None
    res, _ = maxctx.largest_within(measure, rig.avail_mib, cap, start=start, slopes=p.slopes, max_runs=6)
    runs = len(measured) + len(last_error)
    if res.n_ctx is None or res.n_ctx not in measured:
        worst = measured[min(measured)] if measured else None
        why = (f"the dry run failed: {last_error[-1]}" if last_error and not measured else
               f"over a budget even at {min(measured):,} tokens" if worst else "no context was left to try")
        return _record(c, rig, status="infeasible", reason=why, predicted_n_ctx=p.n_ctx, dry_runs=runs,
                       devices_mib=[round(u, 2) for u in worst.used()] if worst else None)
    best = measured[res.n_ctx]
    if best.n_ctx < floor:
        return _record(c, rig, status="infeasible", reason=f"holds {best.n_ctx:,} tokens, fewer than {floor:,}",
                       predicted_n_ctx=p.n_ctx, dry_runs=runs, n_ctx=best.n_ctx)
    return _record(c, rig, status="verified", predicted_n_ctx=p.n_ctx, n_ctx=best.n_ctx, dry_runs=runs,
                   devices_mib=[round(u, 2) for u in best.used()], host_mib=round(best.host.used, 2),
                   exact=res.exact)


def candidate_of(rec: dict) -> ts.Candidate:
    return ts.Candidate(split=rec["split"], ctk=rec["ctk"], ctv=rec["ctv"], ubatch=rec["ubatch"],
                        n_cpu_moe=rec["n_cpu_moe"], ts=tuple(rec["ts"]) if rec.get("ts") else None,
                        main_gpu=rec.get("main_gpu") or 0)


def _front(records: list[dict], rig: ts.Rig, spec: TuneSpec, floor: int) -> list[tuple[ts.Candidate, int, dict]]:
    """Verified candidates → the front (statuses `front` / `dominated`): every member runs in stage two's race, the
    most context first."""
    ver = [r for r in records if r["status"] == "verified"]
    items = [(candidate_of(r), int(r["n_ctx"])) for r in ver]
    keep = ts.front(items, rig)
    for i, r in enumerate(ver):
        if i in keep:
            r["status"] = "front"
            continue
        j = ts.beaten_by(items, i, rig)
        r["status"] = "dominated"
        r["reason"] = (f"{items[j][0].label(rig)} holds {items[j][1]:,} tokens and gives up nothing this keeps"
                       if j is not None else "dominated")
    members = [(items[i][0], items[i][1], ver[i]) for i in keep]
    return sorted(members, key=lambda m: -m[1])


# ---------------------------------------------------------------- stage one, reused


def stage_one_key(prep: session.Prepared, budgets: list[int] | None) -> str | None:
    """What stage one's dry runs depend on, hashed: the search (the study's [tune] dimensions and floors, its
    workload's sizes, server and build arguments), the model file (path, size, modification time), the build, the
    backend and devices, and the budgets. None without budgets: then each device's budget is what it reports free,
    which changes from run to run."""
    if not budgets:
        return None
    st = prep.study
    spec = st.tune or TuneSpec()
    art = prep.artifacts[st.builds[0].name]
    try:
        stat = prep.model_path.stat()
    except OSError:
        return None
    what = {
        "tune": spec.model_dump(include={"splits", "kv", "ubatch", "n_cpu_moe", "min_context", "parallel"}),
        "need": need_context(st), "server": st.server.model_dump(), "args": list(st.builds[0].args),
        "devices": st.devices.model_dump(), "budgets": list(budgets),
        "model": [str(prep.model_path), stat.st_size, stat.st_mtime_ns], "build": [art.key, art.source.key],
        "backend": prep.backend,
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _dump_stage_one(one: StageOne) -> str:
    index = {id(r): i for i, r in enumerate(one.records)}
    return json.dumps({"rig": dataclasses.asdict(one.rig), "layout": dataclasses.asdict(one.layout),
                       "space": dataclasses.asdict(one.space), "default": one.default,
                       "default_extra": one.default_extra, "records": one.records,
                       "chosen": [index[id(r)] for _, _, r in one.chosen], "dry_runs": one.dry_runs,
                       "seconds": one.seconds, "notes": one.notes})


def _load_stage_one(text: str, key: str) -> StageOne | None:
    """A cached stage one, or None where the file does not read as one (it is then made again)."""
    try:
        d = json.loads(text)
        records = d["records"]
        rig_fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in d["rig"].items()}
        layout_fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in d["layout"].items()}
        rig = ts.Rig(**rig_fields)
        layout = ts.ModelLayout(**layout_fields)
        sp = d["space"]
        space = ts.Space(splits=tuple(sp["splits"]), kv=tuple(tuple(p) for p in sp["kv"]),
                         ubatch=tuple(sp["ubatch"]), n_cpu_moe=tuple(sp["n_cpu_moe"]),
                         not_searched=dict(sp["not_searched"]))
        chosen = [(candidate_of(records[i]), int(records[i]["n_ctx"]), records[i]) for i in d["chosen"]]
        return StageOne(rig=rig, layout=layout, space=space, default=d["default"], default_extra=d["default_extra"],
                        records=records, chosen=chosen, dry_runs=int(d["dry_runs"]), seconds=float(d["seconds"]),
                        notes=list(d["notes"]), reused_from=key)
    except (ValueError, KeyError, TypeError, IndexError):
        return None


def _stage_one_or_cached(prep: session.Prepared, budgets: list[int] | None, logs: Path, opts: RunOptions,
                         progress: Progress) -> StageOne:
    """Stage one, or the same stage one an earlier tune made (same search, model file, build, devices and budgets:
    `stage_one_key`), so that a tune run again — with --exhaustive, another goal or floor — races the same front
    without its dry runs. --fresh makes it again."""
    key = stage_one_key(prep, budgets)
    path = opts.home / "tune" / f"stage1-{key}.json" if key else None
    if path is not None and not opts.fresh and path.is_file():
        one = _load_stage_one(path.read_text(encoding="utf-8", errors="replace"), key or "")
        if one is not None:
            progress.message(f"tune stage one: reused from an earlier tune of this search, model, build and budgets "
                             f"({one.dry_runs} dry runs, {one.seconds:.1f} s; --fresh makes it again)")
            return one
    one = stage_one(prep, budgets, logs, opts.timeout_s, progress)
    if path is not None:
        atomic_write(path, _dump_stage_one(one))
    return one


# ---------------------------------------------------------------- stage two and the whole


@dataclass
class TuneResult:
    run_id: str | None  # None: stage one only, nothing run or stored
    doc: dict


def run_tune(study: Study, opts: RunOptions, progress: Progress) -> TuneResult:
    """Stage one (the search, from dry runs), the front's KV pairs' quality, and stage two (the race) unless the
    model is a header-only stand-in; the run and the search are stored."""
    t0 = time.monotonic()
    study = tune_study(study)
    spec = study.tune or TuneSpec()
    planmod.check_fit_on(study)
    # the budgets in MiB in the study tune stores and keys stage one by (--budget over [devices] vram)
    study = with_budgets(study, opts.budgets_mib or study.devices.budgets_mib)
    budgets = study.devices.budgets_mib
    prep = session.prepare(study, opts, progress)
    if study.builds[0].name not in prep.artifacts:
        raise ConfigError(f"build {study.builds[0].name} could not be made: {prep.skipped.get(study.builds[0].name)}",
                          tip="tune runs the study's first build; check `llamalab build STUDY`.")
    logs = opts.logs_dir or Path(tempfile.mkdtemp(prefix="llamalab-tune-"))
    try:
        one = _stage_one_or_cached(prep, budgets, logs, opts, progress)
        kld = quality.for_front(prep, one, spec, logs, opts.home, progress)
    finally:
        if opts.logs_dir is None:
            shutil.rmtree(logs, ignore_errors=True)
    counts = _counts(one)
    progress.message(f"tune stage one: {counts['enumerated']} candidates, {one.dry_runs} dry runs in "
                     f"{one.seconds:.1f} s → {counts['front']} on the front"
                     + ("" if opts.stage_one_only else ", every one raced in stage two"
                        + (" (exhaustive: every one with all its trials)" if _exhaustive(spec) else "")))
    if opts.stage_one_only:  # a stand-in has no weights to run: the search is the answer
        doc = {**_search_doc(study, spec, one, counts, budgets, prep), "stage2": None,
               "seconds": round(time.monotonic() - t0, 2), "threshold": study.workload.threshold,
               "chosen": [{"label": c.label(one.rig), "n_ctx": ctx, "args": [*study.builds[0].args, *c.args(ctx)],
                           "devices_mib": rec.get("devices_mib")} for c, ctx, rec in one.chosen]}
        return TuneResult(run_id=None, doc=doc)
    run_id, s2, stage2 = _stage_two(prep, spec, one, kld, opts, progress)
    doc = {
        **_search_doc(study, spec, one, counts, budgets, prep),
        "quality": kld.as_dict(),
        "stage2": stage2,
        "seconds": round(time.monotonic() - t0, 2),
        "threshold": s2.workload.threshold,
        "repeats": s2.workload.repeats,
        "notes": one.notes + kld.notes,
    }
    with Store(opts.db) as store:
        store.save_tune(run_id, doc)
    return TuneResult(run_id=run_id, doc=doc)


def _front_builds(prep: session.Prepared, one: StageOne, kld: quality.Quality) -> list[BuildSpec]:
    """Stage two's builds, all of the first build's binary: llama.cpp's default, then each front member (its
    record gets the build's name and its KV pair's quality); their flags checked against the binary."""
    study = prep.study
    art0 = prep.artifacts[study.builds[0].name]
    b0 = study.builds[0]
    builds = [b0.model_copy(update={"name": DEFAULT, "label": "llama.cpp's default (--fit, no flags)",
                                    "args": [*b0.args, *one.default_extra]})]
    for k, (c, ctx, rec) in enumerate(one.chosen, start=1):
        name = f"t{k:02d}"
        rec["build"] = name
        rec["kld"] = kld.by_pair.get(c.kv)
        builds.append(b0.model_copy(update={"name": name, "label": f"{c.label(one.rig)}, -c {ctx:,}",
                                            "args": [*b0.args, *c.args(ctx)]}))
    for b in builds[1:]:
        servermod.check_flags(art0.binary("llama-server"), [*study.server.args, *b.args], env=art0.env())
    return builds


def _stage_two(prep: session.Prepared, spec: TuneSpec, one: StageOne, kld: quality.Quality, opts: RunOptions,
               progress: Progress) -> tuple[str, Study, dict]:
    """The race over the front (`_Race`), stored as a run: its id, the study it ran and what the search records
    of it."""
    art0 = prep.artifacts[prep.study.builds[0].name]
    builds = _front_builds(prep, one, kld)
    s2 = prep.study.model_copy(update={"builds": builds,
                                       "settings": [SettingSpec(name="tune", label=f"tune: {spec.goal}")]})
    prep2 = dataclasses.replace(prep, study=s2, skipped={},
                                artifacts={b.name: dataclasses.replace(art0, name=b.name) for b in builds})
    race = _Race(s2, spec, one, kld, opts.seconds if opts.seconds is not None else spec.seconds)
    t2 = time.monotonic()
    ropts = dataclasses.replace(opts, model=prep.model_path, resume=None)
    run_id = runner.execute(prep2, None, ropts, progress, passes=race.passes(), cut=race.cut)
    with Store(opts.db) as store:
        before_extension = _single_trials(store.trials(run_id))
    race.extend(prep2, ropts, run_id, progress)
    stage2_s = round(time.monotonic() - t2, 2)
    with Store(opts.db) as store:
        trials = store.trials(run_id)
    return run_id, s2, {
        "real": [DEFAULT, *(rec["build"] for _, _, rec in one.chosen)], "screened_out": race.ruled,
        "seconds": stage2_s, "screen": not _exhaustive(spec), "mode": race.mode,
        "time_budget_s": race.budget_s, "time_left_out": race.timed_out, "extended": race.extended,
        "trials": _single_trials(trials), "trials_exhaustive": len(builds) * s2.workload.repeats,
        "trials_before_extension": before_extension}


def _search_doc(study: Study, spec: TuneSpec, one: StageOne, counts: dict, budgets: list[int] | None,
                prep: session.Prepared) -> dict:
    """What stage one found, as the `tunes` table stores it (stage two adds its own keys)."""
    return {
        "version": 1,
        "goal": spec.goal, "min_context": spec.min_context, "min_gen_tps": spec.min_gen_tps,
        "parallel": spec.parallel, "need_context": need_context(study), "max_kld": spec.max_kld,
        "rig": {"devices": list(one.rig.names), "budgets_mib": list(one.rig.budgets_mib),
                "margins_mib": list(one.rig.margins_mib), "backend": one.rig.backend,
                "shared_processor": one.rig.shared_processor, "copies": one.rig.copies, "budgets_given": bool(budgets)},
        "model": {"path": str(prep.model_path), "n_layer": one.layout.n_layer, "n_ctx_train": one.layout.n_ctx_train,
                  "n_expert": one.layout.n_expert},
        "space": {"splits": list(one.space.splits), "kv": ["/".join(p) for p in one.space.kv],
                  "ubatch": list(one.space.ubatch), "n_cpu_moe": list(one.space.n_cpu_moe),
                  "not_searched": one.space.not_searched},
        "default": one.default,
        "candidates": one.records,
        "stage1": {**counts, "dry_runs": one.dry_runs, "seconds": one.seconds, "reused_from": one.reused_from},
        "notes": one.notes,
    }


def _exhaustive(spec: TuneSpec) -> bool:
    return spec.exhaustive or not spec.screen


def _single_trials(trials: list[dict]) -> int:
    """Trials run: one per configuration and trial number (each measures every level of the workload)."""
    return len({(t["build"], t["trial"]) for t in trials})


class _Race:
    """Stage two as a race over the whole verified front (docs/tune.md): the default, then each member — the most
    context first — each in one server start: a screening trial, then its remaining trials on the same server
    unless the measurements already show it cannot be the pick (`tunepick.ruled_out`, against the configurations
    measured with all their trials before it), or the time budget is spent. `exhaustive`: every configuration with
    all its trials, nothing ruled out (the oracle the race is checked against)."""

    def __init__(self, study: Study, spec: TuneSpec, one: StageOne, kld: quality.Quality,
                 budget_s: float | None):
        self.study, self.spec, self.one = study, spec, one
        self.mode = "exhaustive" if _exhaustive(spec) else "race"
        self.budget_s = budget_s
        self.ctx_of = {DEFAULT: one.default.get("n_ctx") or 0} | {rec["build"]: int(rec["n_ctx"])
                                                                   for _, _, rec in one.chosen}
        self.rule = tunepick.Rule(
            default=DEFAULT, goal=spec.goal, threshold=study.workload.threshold,
            floor_ctx=max(spec.min_context, need_context(study)), min_gen_tps=spec.min_gen_tps,
            default_fits=not one.default.get("over_budget"),
            kld={rec["build"]: v for _, _, rec in one.chosen if (v := (rec.get("kld") or {}).get("mean"))
                 is not None}, max_kld=spec.max_kld)
        self.ruled: dict[str, str] = {}
        self.timed_out: list[str] = []
        self.extended: list[dict] = []
        self.t0: float | None = None

    def passes(self) -> list[Pass]:
        """One server start per configuration, in the builds' order: the default, then the members by context."""
        n = self.study.workload.repeats
        self.t0 = time.monotonic()
        return [Pass(config=Config(build=b, setting=self.study.settings[0]), trials=tuple(range(1, n + 1)))
                for b in self.study.builds]

    def _measures(self, store: Store, run_id: str) -> list[ts.Measures]:
        """What the run has measured so far, per configuration (the context each server ran with)."""
        return ts.measures(store.trials(run_id), self.ctx_of, self.spec.parallel, _ledger_ctx(store, run_id))

    def extend(self, prep: session.Prepared, opts: RunOptions, run_id: str, progress: Progress) -> None:
        """Where the measurements leave the pick open (`tunepick.undecided_names`: a member with more context whose
        interval reaches the speed floor, or a pick whose interval reaches below it), more trials of those, the
        pick and the configuration that sets the floor — `repeats` more a round, up to `[tune] max_repeats`
        (default twice `repeats`), while the time budget lasts. The race only; an exhaustive run keeps its trials."""
        n = self.study.workload.repeats
        cap = self.spec.max_repeats or 2 * n
        have = n
        while self.mode == "race" and have < cap:
            if self.budget_s is not None and self.t0 is not None and time.monotonic() - self.t0 > self.budget_s:
                break
            with Store(opts.db) as store:
                ms = self._measures(store, run_id)
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
        if self.budget_s is not None and self.t0 is not None and time.monotonic() - self.t0 > self.budget_s:
            self.timed_out.append(name)
            self.ruled[name] = f"the time budget of {self.budget_s:g} s ([tune] seconds, --seconds) is spent"
            return self.ruled[name]
        ms = self._measures(store, run_id)
        n = self.study.workload.repeats
        full = [m for m in ms if m.name != name and len(m.samples.get("output_tps") or []) >= n]
        me = next((m for m in ms if m.name == name), None)
        why = "its screening trial measured nothing" if me is None else tunepick.ruled_out(me, full, self.rule)
        if why:
            self.ruled[name] = why
        return why

def _counts(one: StageOne) -> dict:
    by: dict[str, int] = {}
    for r in one.records:
        by[r["status"]] = by.get(r["status"], 0) + 1
    return {"enumerated": len(one.records), "front": by.get("front", 0), "by_status": by,
            "real": len(one.chosen)}


def _ledger_ctx(store: Store, run_id: str) -> dict[str, int]:
    out = {}
    for c in store.configs(run_id):
        led = c.get("ledger") or {}
        if c["status"] == "ok" and led.get("n_ctx"):
            out[c["build"]] = int(led["n_ctx"])
    return out
