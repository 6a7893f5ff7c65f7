"""`llamalab plan`: a study's memory answers from llama.cpp's no-alloc dry run, without loading weights.

For every build × setting, the configuration's dry run (`setup.configplan.plan_config`: llama-server started with
exactly the study's arguments and stopped when its memory fit has run) gives per device the model, context and
compute MiB, the fitted context and the scheduler's copies; where a copies-1 baseline fitted another context, it is
measured again at the other's context, so the copies' cost is not mixed with the context's; where a device went over
its budget, every configuration's largest context within the budgets is searched (`fit.budgetfit`). How close
these figures are to a real load, per figure and backend, is `ACCURACY` (benchmarks/plan-validation.md).
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..llamacpp import argv, engines
from ..llamacpp import build as buildmod
from ..llamacpp.build import BuildArtifact
from ..logs.applicability import NOT_APPLICABLE
from ..models import standin
from ..models import synthetic as models
from ..setup import prepare as session
from ..setup.configplan import (
    ConfigPlan,
    check_fit_on,
    mkdir,
    needs_within,
    plan_config,
    within_budgets,
    within_budgets_by_load,
)
from ..setup.options import RunOptions
from ..setup.progress import Progress
from ..study.spec import Study, configs

BASIS_TARGET = "target"  # a dry run on the backend the figure is for


BASIS_PORTABLE = "portable"  # backend-independent: the same on any backend for the same split, cache types, context


BASIS_APPROX = "approx"  # a CPU-RPC estimate of another backend's figure

ACCURACY = {
    "model": "weights per device: the same on every backend for the same layer split (exact on CPU-RPC vs full load)",
    "context": "KV cache per device: layers on the device × cells × cache types; backend-independent "
               "(exact on CPU-RPC vs full load)",
    "compute": "compute buffers: llama.cpp's own projection; on the backend it is for, the first device and the "
               "host are exact and later devices may differ by n_copies × n_ubatch × n_embd × 4 B (pipeline input "
               "copies); from CPU-RPC for another backend an approximation (kernels and scratch differ)",
    "n_ctx": "the context llama.cpp's fit picks from those figures and the budgets",
}


# Arguments llama-fit-params does not take (server-only), and whether each has a value.
# Arguments llama-fit-params does not take (server-only), and whether each has a value.
SERVER_ONLY = {"-kvu": False, "--kv-unified": False, "-no-kvu": False, "--no-kv-unified": False, "--metrics": False,
               "--host": True, "--port": True, "-cram": True, "--cache-ram": True, "--slot-save-path": True}


def fit_params_args(server_args: Sequence[str]) -> list[str]:
    """A study's llama-server arguments as llama-fit-params takes them (pure): server-only flags dropped. What
    cannot be carried over changes the figures: without -kvu the KV cache is split into -np streams, and
    fit-params reserves logits for a whole batch where the server reserves one row per slot."""
    return argv.without(server_args, with_value={k for k, v in SERVER_ONLY.items() if v},
                        bare={k for k, v in SERVER_ONLY.items() if not v})


@dataclass
class CopiesCost:
    setting: str
    build: str  # with copies > 1
    baseline: str  # the same build with GGML_SCHED_MAX_COPIES=1
    copies: int
    devices_mib: dict[str, float]
    host_mib: float | None
    total_mib: float
    n_ctx_delta: int | None  # baseline's fitted context − build's
    at_n_ctx: int | None = None  # the context both compute figures are measured at


@dataclass
class Plan:
    study: str
    backend: str  # where the dry runs ran
    target: str  # the backend the figures are for
    model: dict
    model_standin: bool
    llama_cpp: str
    configs: list[ConfigPlan]
    skipped: dict[str, str]
    copies_costs: list[CopiesCost]
    seconds: float
    notes: list[str] = field(default_factory=list)
    not_applicable: dict[str, str] = field(default_factory=dict)  # build → why it does not apply to the rig

    def basis(self) -> dict[str, str]:
        same = self.target == self.backend
        return {"model": BASIS_TARGET if same else BASIS_PORTABLE,
                "context": BASIS_TARGET if same else BASIS_PORTABLE,
                "compute": BASIS_TARGET if same else BASIS_APPROX,
                "n_ctx": BASIS_TARGET if same else BASIS_APPROX}

    def to_json(self) -> dict:
        d = asdict(self)
        d["basis"] = self.basis()
        d["accuracy"] = ACCURACY
        for c, cp in zip(d["configs"], self.configs, strict=True):
            for dev, fig in zip(c["devices"], cp.devices, strict=True):
                dev["used_mib"] = fig.used_mib
            if cp.host:
                c["host"]["used_mib"] = cp.host.used_mib
            for h, fig in zip(c["host_buffers"], cp.host_buffers, strict=True):
                h["used_mib"] = fig.used_mib
        return d


def copies_costs(plans: Sequence[ConfigPlan], artifacts: dict[str, BuildArtifact],
                 build_args: dict[str, Sequence[str]] | None = None,
                 at_ctx: dict[tuple[str, str, int], ConfigPlan] | None = None) -> list[CopiesCost]:
    """Per setting, each configuration that ran with more than one scheduler copy against the same build and
    arguments with GGML_SCHED_MAX_COPIES=1 (pure). Compute buffers grow with the context, so the compute delta
    compares both at the same context: `at_ctx[(baseline, setting, n_ctx)]` is the baseline measured at the
    other's context where their fitted contexts differ."""
    out = []
    by = {(p.build, p.setting): p for p in plans if p.status == "ok"}
    build_args = build_args or {}
    at_ctx = at_ctx or {}

    def base(name: str) -> tuple:
        return (tuple(sorted(buildmod.split_copies(artifacts[name].options)[0].items())),
                tuple(build_args.get(name, ())))

    for (bname, setting), p in by.items():
        if bname not in artifacts or not p.sched_copies or p.sched_copies <= 1:
            continue
        for oname, oart in artifacts.items():
            q = by.get((oname, setting))
            if q is None or oart.expected_copies != 1 or base(oname) != base(bname):
                continue
            ctx = q.n_ctx - p.n_ctx if p.n_ctx is not None and q.n_ctx is not None else None
            if ctx and p.n_ctx is not None:
                q = at_ctx.get((oname, setting, p.n_ctx))
                if q is None or q.status != "ok":
                    continue
            devs = {d.name: round((d.compute_mib or 0) - (e.compute_mib or 0), 2)
                    for d, e in zip(p.devices, q.devices, strict=False) if d.name == e.name}
            host = (round((p.host.compute_mib or 0) - (q.host.compute_mib or 0), 2)
                    if p.host and q.host else None)
            out.append(CopiesCost(setting=setting, build=bname, baseline=oname, copies=p.sched_copies,
                                  devices_mib=devs, host_mib=host, total_mib=round(sum(devs.values()) + (host or 0), 2),
                                  n_ctx_delta=ctx, at_n_ctx=p.n_ctx))
    return out


def plan_study(study: Study, opts: RunOptions, progress: Progress) -> Plan:
    """Every configuration's dry run under the budgets (--budget over [devices] vram), with the copies' costs and
    the contexts within the budgets where a device went over one."""
    t0 = time.monotonic()
    check_fit_on(study)
    model_path, made = plan_model(study, opts, progress)
    prep = session.prepare(study, replace(opts, model=model_path), progress)
    study = prep.study  # under --budget's budgets
    budgets = study.devices.budgets_mib
    logs = opts.logs_dir or Path(tempfile.mkdtemp(prefix="llamalab-plan-"))
    plans: list[ConfigPlan] = []
    try:
        for bspec in study.builds:
            art = prep.artifacts.get(bspec.name)
            if art is None:
                continue
            cfgs = [c for c in configs(study) if c.build.name == bspec.name]
            with session.device_setup(prep, art, mkdir(logs / f"devices-{bspec.name}".replace("/", "_"))) as dev:
                env = {**art.env(), **dev.env}
                emu = session.budget_emulation(study, art, dev, env, [*study.server.args, *bspec.args])
                for cfg in cfgs:
                    why = prep.inapplicable(cfg)
                    if why:
                        plans.append(ConfigPlan(build=cfg.build.name, setting=cfg.setting.name,
                                                status=NOT_APPLICABLE, reason=why))
                        continue
                    progress.message(f"dry run: {cfg.build.name} × {cfg.setting.name}")
                    plans.append(plan_config(prep, cfg, art, dev, env, emu, logs, opts.timeout_s))
        at_ctx = _baselines_at_ctx(prep, plans, logs, opts.timeout_s, progress)
        _within_budgets(prep, plans, logs, opts.timeout_s, progress)
    finally:
        if opts.logs_dir is None:
            shutil.rmtree(logs, ignore_errors=True)
            for cp in plans:
                cp.logs = []
    notes = []
    if made:
        notes.append(f"planned from a header-only stand-in of {opts.model or study.model.path} ({model_path})")
    if not budgets and prep.backend == "cpu-rpc":
        notes.append("no memory budgets: the context is fitted to this machine's RAM, which every local rpc-server "
                     "reports as its own; pass --budget 16GiB,12GiB to plan for particular cards")
    return Plan(study=study.name, backend=prep.backend, target=opts.target or prep.backend,
                model=prep.model_info.as_dict(), model_standin=made or standin.is_sparse(model_path),
                llama_cpp=", ".join(dict.fromkeys(f"{a.source.version} ({a.source.short_commit})"
                                                  for a in prep.artifacts.values() if a.made)
                                    or [f"{prep.source.version} ({prep.source.short_commit})"])
                + "".join(f"; binaries in {d}" for d in prep.binaries), configs=plans,
                skipped=dict(prep.skipped), not_applicable=dict(prep.not_applicable),
                copies_costs=copies_costs(plans, prep.artifacts, {b.name: b.args for b in study.builds}, at_ctx),
                seconds=round(time.monotonic() - t0, 2), notes=notes)


def _baselines_at_ctx(prep: session.Prepared, plans: list[ConfigPlan], logs: Path,
                      timeout_s: float, progress: Progress) -> dict[tuple[str, str, int], ConfigPlan]:
    """Where a copies-1 baseline fitted another context than the build it is compared with, measure the
    baseline again at that build's context, so that the copies' cost is not mixed with the context's."""
    study = prep.study
    need: dict[str, set[tuple[str, int]]] = {}
    for cc_plan in plans:
        if cc_plan.status != "ok" or not cc_plan.sched_copies or cc_plan.sched_copies <= 1 or cc_plan.n_ctx is None:
            continue
        for q in plans:
            art = prep.artifacts.get(q.build)
            if (q.setting == cc_plan.setting and q.status == "ok" and art is not None and art.expected_copies == 1
                    and q.n_ctx != cc_plan.n_ctx):
                need.setdefault(q.build, set()).add((q.setting, cc_plan.n_ctx))
    out: dict[tuple[str, str, int], ConfigPlan] = {}
    for bname, wanted in need.items():
        art = prep.artifacts[bname]
        bspec = next(b for b in study.builds if b.name == bname)
        with session.device_setup(prep, art, mkdir(logs / f"devices-{bname}-ctx".replace("/", "_"))) as dev:
            env = {**art.env(), **dev.env}
            emu = session.budget_emulation(study, art, dev, env, [*study.server.args, *bspec.args])
            for setting, n_ctx in sorted(wanted):
                cfg = next(c for c in configs(study) if c.build.name == bname and c.setting.name == setting)
                progress.message(f"dry run: {bname} × {setting} at n_ctx {n_ctx} (for the copies' cost)")
                out[(bname, setting, n_ctx)] = plan_config(prep, cfg, art, dev, env, emu, logs, timeout_s,
                                                           extra_args=["-c", str(n_ctx)])
    return out


def _within_budgets(prep: session.Prepared, plans: list[ConfigPlan], logs: Path,
                    timeout_s: float, progress: Progress) -> None:
    """Where llama.cpp's fit left any configuration's device over its budget, every configuration's largest
    context within the budgets (and within them less the margin), by dry runs at fixed contexts
    (`fit.budgetfit`), so that all of them are compared the same way."""
    if not prep.study.devices.budgets_mib or not any(needs_within(cp) for cp in plans):
        return
    study = prep.study
    for bspec in study.builds:
        art = prep.artifacts.get(bspec.name)
        mine = [cp for cp in plans if cp.build == bspec.name and cp.status == "ok"]
        if art is None or not mine:
            continue
        with session.device_setup(prep, art, mkdir(logs / f"devices-{bspec.name}-within".replace("/", "_"))) as dev:
            env = {**art.env(), **dev.env}
            emu = session.budget_emulation(study, art, dev, env, [*study.server.args, *bspec.args])
            by_load = emu is None and not engines.get(art.engine).fit_target  # no fit to dry-run: loads
            if emu is None and not by_load:
                continue
            for cp in mine:
                cfg = next(c for c in configs(study) if c.build.name == cp.build and c.setting.name == cp.setting)
                progress.message(f"{'loads' if by_load else 'dry runs'}: {cp.build} × {cp.setting}, the largest "
                                 "context within the budgets")
                fit = within_budgets(prep, cfg, art, dev, env, emu, logs, timeout_s, start=cp.n_ctx) \
                    if emu is not None else within_budgets_by_load(prep, cfg, art, dev, env, logs, timeout_s,
                                                                   start=cp.n_ctx)
                cp.within = {**fit.as_dict(), "why": needs_within(cp) or "like every configuration of the plan",
                             **({"engine": art.engine} if emu is None else {})}  # searched by loads
                cp.dry_runs += fit.dry_runs


def plan_model(study: Study, opts: RunOptions, progress: Progress) -> tuple[Path, bool]:
    """The model to plan with: the user's file (or a stand-in made from its header), else the study's synthetic
    model written header-only (a dry run never reads tensor data)."""
    ref = opts.model or (Path(study.model.path) if study.model.path else None)
    if ref is None:
        shape = models.preset(study.model.preset or "tiny")
        return models.synthetic(shape, opts.home, data=False), False
    path, made = standin.ensure(Path(ref), opts.home)
    if made:
        progress.message(f"{ref} holds only the start of its model: planning from a sparse stand-in {path}")
    return path, made


def dumps(plan: Plan) -> str:
    import json

    def default(o):
        if isinstance(o, Path):
            return str(o)
        if isinstance(o, float) and math.isnan(o):
            return None
        raise TypeError(type(o).__name__)

    return json.dumps(plan.to_json(), indent=2, default=default)

