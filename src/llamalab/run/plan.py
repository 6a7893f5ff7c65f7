"""`llamalab plan`: a study's memory answers from llama.cpp's no-alloc dry run, without loading weights.

For every build × setting, llama-server is started with exactly the arguments the study would use (`-np N -kvu`
included) and stopped as soon as its memory fit (`--fit`, on by default) has run: the fit is a no-alloc dry run
(weights and KV cache get dummy buffers, compute buffers are only measured) and it runs before a single weight is
read. Its log, at verbosity 5, holds per device the model / context / compute MiB it projects, the context the fit
chooses, and the scheduler's copies. Where the fit shrank the context, a second dry run at that context gives the
figures the server would load with. (A study that leaves -ngl to the fit lets it also try layer layouts; the
figures are then those of its last measurement.)

Why not `llama-fit-params -fitp on`: it cannot take `-kvu`, and it reserves logits for a whole batch
(n_outputs_max = n_batch) where llama-server reserves one per slot (n_outputs_max = -np). On the tiny model that
is 51 MiB more compute on the last device; on an 8B-shape model ~300 MiB. Its figures are not what the server
loads (benchmarks/plan-validation.md has both).

Accuracy (measured on CPU-RPC, b11312; benchmarks/plan-validation.md): against a full load of the same
configuration, model and context MiB per device, host compute and the first device's compute are identical; the
dry run's compute on the next devices is off by up to n_copies × n_ubatch × n_embd × 4 bytes (the pipeline's
input copies; +32 MiB on an 8B shape with 4 copies), while the rpc-server's own allocation log
(GGML_RPC_DEBUG=1) confirms the full load's figure. Across backends, weights and KV cache per device depend only
on the layer split, cache types and context, so a CPU-RPC plan predicts them for a CUDA rig; compute buffers
depend on each backend's kernels (flash attention, matmul scratch), so CPU-RPC compute is an approximation of
another backend's.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from .. import net, proc
from ..errors import ConfigError
from ..llamacpp import applicability, argv, budget, models, standin
from ..llamacpp import build as buildmod
from ..llamacpp.applicability import NOT_APPLICABLE
from ..llamacpp.build import BuildArtifact
from ..llamacpp.cmake import cmake_true
from ..llamacpp.dryrun import END_OF_FIT, DeviceFigures, DryRun, parse_dry_run, real_load
from ..study.spec import Config, Study, configs
from . import budgetfit, session
from .options import RunOptions
from .progress import Progress

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
SERVER_ONLY = {"-kvu": False, "--kv-unified": False, "-no-kvu": False, "--no-kv-unified": False, "--metrics": False,
               "--host": True, "--port": True, "-cram": True, "--cache-ram": True, "--slot-save-path": True}


def fit_params_args(server_args: Sequence[str]) -> list[str]:
    """A study's llama-server arguments as llama-fit-params takes them (pure): server-only flags dropped. What
    cannot be carried over changes the figures: without -kvu the KV cache is split into -np streams, and
    fit-params reserves logits for a whole batch where the server reserves one row per slot."""
    return argv.without(server_args, with_value={k for k, v in SERVER_ONLY.items() if v},
                        bare={k for k, v in SERVER_ONLY.items() if not v})


# ---------------------------------------------------------------- what llama-cpp-facts.md §1 predicts (pure)


@dataclass(frozen=True)
class Expectation:
    pipeline_parallel: bool
    copies: int
    reason: str


def expected_pipeline(args: Sequence[str], n_devices: int, n_layer: int | None, options: dict[str, str]) -> Expectation:
    """Pipeline parallelism and scheduler copies by llama-cpp-facts.md §1's rules, before anything runs."""
    copies = int(options.get(buildmod.COPIES, buildmod.DEFAULT_COPIES))
    if n_devices <= 1:
        return Expectation(False, 1, "one device")
    if cmake_true(options.get("GGML_BLAS", "")):
        return Expectation(False, 1, "the BLAS backend has no async compute or events")
    sm = argv.value(args, *argv.SPLIT_MODE)
    if sm not in (None, "layer"):
        return Expectation(False, 1, f"-sm {sm}")
    if argv.has(args, "-nkvo", "--no-kv-offload"):
        return Expectation(False, 1, "-nkvo keeps the KV cache on the host")
    if argv.has(args, "-ot", "--override-tensor", "-cmoe", "--cpu-moe", "-ncmoe", "--n-cpu-moe"):
        return Expectation(False, 1, "tensor overrides (-ot, --cpu-moe)")
    ngl = argv.value(args, "-ngl", "--gpu-layers", "--n-gpu-layers")
    if ngl not in (None, "all", "auto", "-1") and n_layer is not None:
        try:
            if int(ngl) <= n_layer:
                return Expectation(False, 1, f"-ngl {ngl} leaves the output layer on the host")
        except ValueError:
            pass
    why = f"{n_devices} devices, all layers offloaded, -sm layer"
    return Expectation(True, copies, why + (f", GGML_SCHED_MAX_COPIES={copies}" if copies != 4 else ""))


# ---------------------------------------------------------------- results


@dataclass
class ConfigPlan:
    build: str
    setting: str
    status: str  # ok | failed | not-applicable (llama.cpp refused it for what the rig lacks, or has no fit for it)
    reason: str | None = None
    n_ctx: int | None = None
    n_ctx_train: int | None = None
    ctx_reduced_from: int | None = None
    fit_ok: bool | None = None
    fit_message: str | None = None
    pipeline_parallel: bool | None = None
    sched_copies: int | None = None
    graph_splits: int | None = None  # the dry run's split count (hand-offs between devices and to the CPU)
    expected: Expectation | None = None
    copies_mismatch: str | None = None
    devices: list[DeviceFigures] = field(default_factory=list)
    host: DeviceFigures | None = None
    host_buffers: list[DeviceFigures] = field(default_factory=list)  # CPU_REPACK, AMX …: system RAM beside "Host"
    budgets_mib: list[int] | None = None
    margins_mib: list[int] | None = None
    fit_targets_mib: list[int] | None = None
    over_budget: dict[str, float] = field(default_factory=dict)  # device → MiB used beyond budget − margin
    # the largest context within every budget and within every budget less the margin (run.budgetfit), searched for
    # where llama.cpp's fit left a device over its budget
    within: dict | None = None
    n_ubatch: int | None = None
    n_embd: int | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    dry_runs: int = 0
    seconds: float = 0.0
    logs: list[str] = field(default_factory=list)


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


# ---------------------------------------------------------------- side effects


def dry_run(binary: Path, model: Path, args: Sequence[str], *, env: dict[str, str], log_path: Path,
            timeout_s: float = 300.0) -> DryRun:
    """Start llama-server with `args`, stop it when its memory fit ends, and read the figures."""
    from ..llamacpp.server import server_argv

    cmd = argv.put(server_argv(binary, model, host="127.0.0.1", port=net.free_port("127.0.0.1"), args=args),
                      "-lv", "5")  # debug: 0.01 MiB buffer sizes and the KV layer placement
    loading: list[str] = []

    def until(line: str) -> bool:
        if real_load(line):
            loading.append(line)
            return True
        return END_OF_FIT in line

    done, stopped = proc.run_until(cmd, log_path=log_path, env=env, timeout_s=timeout_s, until=until)
    dr = parse_dry_run(log_path.read_text(errors="replace").splitlines())
    if loading and not dr.finished:
        dr.error = ("llama-server began loading the weights without a memory fit: is the fit off (--fit off, or "
                    "LLAMA_ARG_FIT=off in the environment)?")
    elif not dr.finished and not stopped and done.returncode == -9:
        dr.error = f"llama-server ran {timeout_s:.0f} s without finishing its memory fit"
    return dr


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


def needs_within(cp: ConfigPlan) -> str | None:
    """Why a planned configuration's context within its budgets must be searched for: a device's projected memory
    exceeds its budget (not only its margin; llama.cpp's "failed" fit with -ngl given is no reason by itself)."""
    if cp.status != "ok" or not cp.budgets_mib:
        return None
    over = [f"{d.name} {d.used_mib:,.0f} > {b:,} MiB" for d, b in zip(cp.devices, cp.budgets_mib, strict=False)
            if d.used_mib is not None and d.used_mib > b]
    return "over budget: " + "; ".join(over) if over else None


def within_budgets(prep: session.Prepared, cfg: Config, art: BuildArtifact, dev, env: dict[str, str],
                   emu: budget.Emulation, logs: Path, timeout_s: float, *, start: int | None = None,
                   reference: Sequence[float] | None = None) -> budgetfit.BudgetFit:
    """One configuration's largest context within every budget (and less the margin): `budgetfit.for_config` over
    this configuration's dry runs at fixed -c, on devices set up by the caller, under the emulation `emu`."""
    return budgetfit.for_config(
        lambda n: plan_config(prep, cfg, art, dev, env, emu, logs, timeout_s, extra_args=["-c", str(n)]),
        [d.name for d in emu.devices], emu.budgets_mib, emu.margins_mib, prep.model_info.n_ctx_train or 0,
        start=start, reference=reference)


def _within_budgets(prep: session.Prepared, plans: list[ConfigPlan], logs: Path,
                    timeout_s: float, progress: Progress) -> None:
    """Where llama.cpp's fit left any configuration's device over its budget, every configuration's largest
    context within the budgets (and within them less the margin), by dry runs at fixed contexts
    (`run.budgetfit`), so that all of them are compared the same way."""
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
            if emu is None:
                continue
            for cp in mine:
                cfg = next(c for c in configs(study) if c.build.name == cp.build and c.setting.name == cp.setting)
                progress.message(f"dry runs: {cp.build} × {cp.setting}, the largest context within the budgets")
                fit = within_budgets(prep, cfg, art, dev, env, emu, logs, timeout_s, start=cp.n_ctx)
                cp.within = {**fit.as_dict(), "why": needs_within(cp) or "like every configuration of the plan"}
                cp.dry_runs += fit.dry_runs


def mkdir(path: Path) -> Path:
    """`path`, made with its parents where missing."""
    path.mkdir(parents=True, exist_ok=True)
    return path


def check_fit_on(study: Study) -> None:
    """A study that turns llama.cpp's memory fit off cannot be planned: the fit is what a dry run reads."""
    for args in [study.server.args, *(b.args for b in study.builds), *(s.args for s in study.settings)]:
        if argv.value(args, "-fit", "--fit") in ("off", "0", "false"):
            raise ConfigError("this study turns llama.cpp's memory fit off (--fit off), and the fit is the dry run "
                              "`llamalab plan` reads.", tip="drop --fit off for planning (--set server.args=[...]).")


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


def plan_config(prep: session.Prepared, cfg: Config, art: BuildArtifact, dev, env: dict[str, str],
                 emu: budget.Emulation | None, logs: Path, timeout_s: float,
                 extra_args: Sequence[str] = ()) -> ConfigPlan:
    """One configuration's dry run(s): the study's llama-server arguments, with the budgets' -fitt/-ts."""
    study = prep.study
    args = session.server_args(study, cfg, dev)
    if emu is not None:
        args = argv.replaced(args, emu.args())
    args = [*args, *extra_args]
    t0 = time.monotonic()
    stem = f"{cfg.build.name}-{cfg.setting.name}{''.join(extra_args)}".replace("/", "_")
    cp = ConfigPlan(build=cfg.build.name, setting=cfg.setting.name, status="ok", args=args, env=env,
                    budgets_mib=list(emu.budgets_mib) if emu else None,
                    margins_mib=list(emu.margins_mib) if emu else None,
                    fit_targets_mib=list(emu.fit_targets_mib) if emu else None)
    binary, model = art.binary("llama-server"), prep.model_path
    first = dry_run(binary, model, args, env=env, log_path=logs / f"{stem}.log", timeout_s=timeout_s)
    cp.logs.append(str(logs / f"{stem}.log"))
    cp.dry_runs = 1
    final = first
    if first.error is None and first.fit_ctx_to is not None and not argv.has(args, *argv.CTX_SIZE):
        # the fit shrank the context: measure what the server would load at that context
        final = dry_run(binary, model, [*args, "-c", str(first.fit_ctx_to)], env=env,
                        log_path=logs / f"{stem}-c{first.fit_ctx_to}.log", timeout_s=timeout_s)
        cp.logs.append(str(logs / f"{stem}-c{first.fit_ctx_to}.log"))
        cp.dry_runs = 2
    cp.seconds = round(time.monotonic() - t0, 2)
    lines = [ln for log in cp.logs for ln in _read_lines(Path(log))]
    said, no_fit = applicability.refusal(lines), applicability.fit_refusal(lines)
    if said or no_fit:  # this rig, build or model cannot run it, or a dry run (llama.cpp's fit) cannot plan it
        cp.status = NOT_APPLICABLE
        cp.reason = (f"llama.cpp: {said}" if said else
                     f"no dry run (it is llama.cpp's fit): llama.cpp says \"{no_fit}\"")
        return cp
    if final.error:
        cp.status, cp.reason = "failed", final.error
        return cp
    cp.n_ctx, cp.n_ctx_train = final.n_ctx, first.n_ctx_train
    cp.ctx_reduced_from = first.fit_ctx_from
    cp.fit_ok, cp.fit_message = first.fit_ok, first.fit_message
    cp.pipeline_parallel, cp.sched_copies = final.pipeline_parallel, final.sched_copies
    cp.graph_splits = final.graph_splits
    cp.devices, cp.host, cp.host_buffers = final.devices, final.host, final.host_buffers
    cp.n_ubatch, cp.n_embd = final.n_ubatch, first.n_embd
    cp.expected = expected_pipeline(args, len(final.devices), prep.model_info.n_layer, art.options)
    got = final.sched_copies if final.sched_copies is not None else None
    if got is not None and got != cp.expected.copies:
        cp.copies_mismatch = (f"expected {cp.expected.copies} sched copies ({cp.expected.reason}), the dry run "
                              f"shows {got}")
    if emu is not None:
        for d, b, m in zip(cp.devices, emu.budgets_mib, emu.margins_mib, strict=False):
            over = (d.used_mib or 0) - (b - m)
            if over > 0:
                cp.over_budget[d.name] = round(over, 2)
    return cp


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


# ---------------------------------------------------------------- figures the views and checks share


def input_copies_mib(cp: ConfigPlan) -> float | None:
    """n_copies × n_ubatch × n_embd × 4 bytes in MiB: how far a later device's dry-run compute figure was from
    the full load's on CPU-RPC (the pipeline's copies of a split's f32 input)."""
    return budgetfit.input_copies_mib(cp)


def dumps(plan: Plan) -> str:
    import json

    def default(o):
        if isinstance(o, Path):
            return str(o)
        if isinstance(o, float) and math.isnan(o):
            return None
        raise TypeError(type(o).__name__)

    return json.dumps(plan.to_json(), indent=2, default=default)

