"""A configuration's dry run: its memory figures from llama.cpp's no-alloc fit, without loading weights — what
`llamalab plan`, `bisect` and tune's stage one measure with, and the run's search for contexts within the budgets.

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

An engine without a fit of the context to dry-run (ik_llama.cpp: its `--fit` only moves MoE experts, its
`--dry-run` allocates every buffer, starts the server and serves, and its compute buffers then differ from a real
load's: 8.49/8.00/4.01 MiB against 8.00/8.00/4.51 on the tiny model's two rpc-servers and the CPU) is measured by a
real load instead (`load_plan`): llama-server started with the configuration's arguments and stopped as soon as its
context has reserved its graph (`graph splits = S`, the context's last line), its figures read by the ledger. It
reads the weights (seconds on a large model), and its figures are the load's own. The largest context within the
budgets is searched over such loads at fixed -c (`within_budgets_by_load`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core import net, proc
from ..core.errors import ConfigError
from ..fit import budget, budgetfit
from ..llamacpp import argv, engines
from ..llamacpp import build as buildmod
from ..llamacpp.build import BuildArtifact
from ..llamacpp.cmake import cmake_true
from ..logs import applicability, ledger, order
from ..logs.applicability import NOT_APPLICABLE
from ..logs.dryrun import END_OF_FIT, DeviceFigures, DryRun, parse_dry_run, real_load
from ..logs.records import Buffers, Ledger
from ..study.spec import Config, Study
from . import prepare as session


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
    # the largest context within every budget and within every budget less the margin (fit.budgetfit), searched for
    # where llama.cpp's fit left a device over its budget
    within: dict | None = None
    n_ubatch: int | None = None
    n_embd: int | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    dry_runs: int = 0
    seconds: float = 0.0
    logs: list[str] = field(default_factory=list)


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


def plan_config(prep: session.Prepared, cfg: Config, art: BuildArtifact, dev, env: dict[str, str],
                 emu: budget.Emulation | None, logs: Path, timeout_s: float,
                 extra_args: Sequence[str] = ()) -> ConfigPlan:
    """One configuration's dry run(s): the study's llama-server arguments, with the budgets' -fitt/-ts (an engine
    without a fit of the context: a load stopped once its context is made, `load_plan`)."""
    if not engines.get(art.engine).fit_target:
        return load_plan(prep, cfg, art, dev, env, logs, timeout_s, extra_args)
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


END_OF_CONTEXT = "graph splits"  # ik_llama.cpp's context prints it last (`llama_init_from_model: graph splits = S`)


def load_plan(prep: session.Prepared, cfg: Config, art: BuildArtifact, dev, env: dict[str, str], logs: Path,
              timeout_s: float, extra_args: Sequence[str] = ()) -> ConfigPlan:
    """One configuration's memory by a real load stopped once its context is made (module docstring): what an engine
    without a fit of the context is planned with."""
    from ..llamacpp.server import server_argv

    args = [*session.server_args(prep.study, cfg, dev, art.engine), *extra_args]
    stem = f"{cfg.build.name}-{cfg.setting.name}{''.join(extra_args)}-load".replace("/", "_")
    log_path = logs / f"{stem}.log"
    cp = ConfigPlan(build=cfg.build.name, setting=cfg.setting.name, status="ok", args=args, env=env, dry_runs=1,
                    logs=[str(log_path)], budgets_mib=prep.study.devices.budgets_mib,
                    fit_message=f"{art.engine} has no fit of the context: a real load, stopped once its context "
                                "was made")
    t0 = time.monotonic()
    cmd = server_argv(art.binary("llama-server"), prep.model_path, host="127.0.0.1",
                      port=net.free_port("127.0.0.1"), args=args, engine=art.engine)
    done, stopped = proc.run_until(cmd, log_path=log_path, env=env, timeout_s=timeout_s,
                                   until=lambda line: END_OF_CONTEXT in line)
    cp.seconds = round(time.monotonic() - t0, 2)
    lines = _read_lines(log_path)
    led = ledger.parse(lines)
    said = applicability.refusal(lines)
    if said or not stopped:
        cp.status = NOT_APPLICABLE if said else "failed"
        cp.reason = f"{art.engine}: {said}" if said else (
            f"llama-server ended before its context was made ({done.returncode}): "
            + (led.failure or (lines[-1][:200] if lines else "no output")))
        return cp
    _load_figures(cp, led)
    cp.n_ctx_train = prep.model_info.n_ctx_train
    cp.expected = expected_pipeline(args, len(cp.devices), prep.model_info.n_layer, art.options)
    return cp


def _load_figures(cp: ConfigPlan, led: Ledger) -> None:
    """A load's ledger as a plan's figures: per device (in the engine's order) model, context (KV and outputs) and
    compute MiB, the host's, the context, pipeline parallelism, copies and splits."""
    def figures(name: str, b: Buffers, desc: str = "") -> DeviceFigures:
        ctx = [x for x in (b.kv_mib, b.output_mib, b.rs_mib) if x is not None]
        return DeviceFigures(name=name, description=desc, model_mib=b.model_mib,
                             context_mib=round(sum(ctx), 2) if ctx else None, compute_mib=b.compute_mib)

    js = led.to_json()
    # rpc-servers as llama.cpp numbers them (RPC0, RPC1 … in --rpc's order; ik prints each as RPC0[host:port]), the
    # endpoint as the description, as a dry run's figures name them
    names = order.device_names(js)
    rpc = [n for n in names if n.startswith("RPC") and n.endswith("]")]
    cp.devices = [figures(f"RPC{rpc.index(n)}" if n in rpc else n, led.devices[n], led.device_desc.get(n, ""))
                  for n in names]
    host = Buffers()
    for b in led.host.values():
        for kind in ("model", "kv", "rs", "compute", "output"):
            if (v := getattr(b, f"{kind}_mib")) is not None:
                host.add(kind, v)
    cp.host = figures("Host", host)
    cp.n_ctx, cp.n_ubatch, cp.n_embd = led.n_ctx, led.n_ubatch, led.n_embd
    cp.pipeline_parallel, cp.graph_splits = led.pipeline_parallel, led.graph_splits
    cp.sched_copies = led.n_copies if led.n_copies is not None else (1 if led.pipeline_parallel is False else None)


def within_budgets_by_load(prep: session.Prepared, cfg: Config, art: BuildArtifact, dev, env: dict[str, str],
                           logs: Path, timeout_s: float, *, start: int | None = None) -> budgetfit.BudgetFit:
    """The largest context within every budget (and within every budget less the margin: `[server]
    fit_target_mib`, else llama.cpp's 1024 MiB) of a configuration on an engine without a fit of the context, by
    loads at fixed -c (`load_plan`; a load's figures are its own: nothing is kept free for a dry run's error)."""
    budgets = prep.study.devices.budgets_mib or []
    cap = prep.model_info.n_ctx_train or 0
    first = load_plan(prep, cfg, art, dev, env, logs, timeout_s, ["-c", str(_start(start, cap))]) if cap else None
    if first is None or first.status != "ok" or not first.devices:
        why = "the model's header gives no training context" if not cap else \
            (first.reason if first is not None and first.reason else "the load printed no device buffers")
        none = budgetfit.Limit(n_ctx=None, exact=False, error=why)
        return budgetfit.BudgetFit(devices=[], budgets_mib=list(budgets), margins_mib=[], allowance_mib=[], cap=cap,
                                   budget=none, margin=none, dry_runs=1)
    names = [d.name for d in first.devices]
    per = budgets * len(names) if len(budgets) == 1 else budgets
    margins = prep.study.server.fit_target_mib or [budget.DEFAULT_MARGIN_MIB]
    margins = margins * len(names) if len(margins) == 1 else margins

    def measure(n: int):
        cp = load_plan(prep, cfg, art, dev, env, logs, timeout_s, ["-c", str(n)])
        if cp.status != "ok":
            return cp.reason or cp.status
        by = {d.name: d.used_mib or 0.0 for d in cp.devices}
        return [by.get(x, 0.0) for x in names]

    n0 = _start(start, cap)
    fit = budgetfit.search(measure, names, per, margins, [0.0] * len(names), cap,
                           known={n0: tuple(d.used_mib or 0.0 for d in first.devices)})
    fit.dry_runs += 1
    return fit


ENGINE_CONTEXT = ("{engine} has no fit of the context (its --fit only moves MoE experts, and it has no -fitt to "
                  "emulate a budget with): llamalab searched the largest context within every budget less the margin "
                  "by loads at fixed -c, and ran it there")


def engine_context(prep: session.Prepared, cfg: Config, art: BuildArtifact, dev, env: dict[str, str], logs: Path,
                   stored: dict | None) -> tuple[int | None, dict]:
    """The context a configuration of an engine without a fit of the context runs at under the study's budgets
    (what llama.cpp's fit aims for: within every budget less the margin; within every budget where nothing fits
    the margin), and the search as `budget_fits` stores it; a search stored before (a resumed run, a later pass) is
    reused. None where not even 256 tokens fit."""
    doc = stored
    if not doc or "margin" not in doc:
        fit = within_budgets_by_load(prep, cfg, art, dev, env, mkdir(logs), 300.0)
        doc = {**fit.as_dict(), "why": ENGINE_CONTEXT.format(engine=art.engine), "fitted_n_ctx": None,
               "engine": art.engine}
    n = (doc.get("margin") or {}).get("n_ctx") or (doc.get("budget") or {}).get("n_ctx")
    return (int(n) if n else None), doc


def _start(start: int | None, cap: int) -> int:
    """The first context to load: `start` (else the model's), in whole steps of 256, at most the model's."""
    from ..fit import maxctx

    return max(maxctx.STEP, min(start or cap, cap) // maxctx.STEP * maxctx.STEP) if cap else maxctx.STEP


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

