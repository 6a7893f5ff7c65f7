"""The run loop: study → source → builds → devices → server → ledger → workload → store.

It drives a run through every stage from the set-up `setup.prepare` prepares (which `plan` and `tune` share). All
builds finish before any timing starts. Each finished trial is stored before the next starts; a configuration that
fails is recorded with its reason and the study goes on.

Why one module of ~630 lines: `execute` and the pass it runs (`_Pass`: start the devices and the server, read its
ledger, run the workload, store each trial) share the run's store, log folders and progress; the checks that run
after the passes (crosscheck, context checks, contexts within the budgets) follow in the order they run.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__
from ..core import proc
from ..core.errors import LaunchError, LlamalabError, WorkloadError
from ..core.records import ConfigOutcome
from ..fit import budgetfit, maxctx
from ..llamacpp import argv as argvmod
from ..llamacpp import crosscheck, engines
from ..llamacpp.build import BuildArtifact
from ..llamacpp.server import launch
from ..logs import applicability, ledger, order, records
from ..logs.applicability import NOT_APPLICABLE
from ..logs.failures import failure_reason
from ..machine import sysinfo
from ..quality import logits
from ..setup import configplan
from ..setup.options import RunOptions
from ..setup.progress import Progress
from ..store.db import Store
from ..study.spec import Config, Pass, configs, expand, to_toml
from . import drivercheck, references, workload

if TYPE_CHECKING:
    from ..llamacpp.server import Server
from ..setup.prepare import (
    Prepared,
    budget_emulation,
    check_budgets,
    device_setup,
    emulate_budgets,
    server_args,
    study_hash,
)


def n_slots(args: list[str]) -> int:
    """The -np the server runs with (`llamacpp.argv.n_slots`)."""
    return argvmod.n_slots(args)


def fitting_levels(levels: list[int], shape: workload.Shape, led: records.Ledger) -> tuple[list[int], list[int]]:
    """Concurrency levels whose requests fit in the context the server has (unified KV: they share n_ctx), and
    the ones that do not — those are reported, not run into a wall of 'context size exceeded' errors."""
    if not led.n_ctx:
        return list(levels), []
    need = shape.prompt_tokens + shape.output_tokens
    per_seq = led.n_ctx_seq or led.n_ctx
    ok = [c for c in levels if c * need <= led.n_ctx and need <= per_seq]
    return ok, [c for c in levels if c not in ok]


def check_copies(led: records.Ledger, art: BuildArtifact) -> str | None:
    """A copies variant whose log shows another number of copies ran the wrong library: say so. (Given binaries
    were built with whatever copies their maker chose: the log says which, and the report shows it.)"""
    if not art.made or led.sched_copies is None or not led.pipeline_parallel and led.sched_copies == 1:
        return None
    if led.sched_copies != art.expected_copies:
        return (f"the log says sched copies = {led.sched_copies}, but build {art.name} was made with "
                f"GGML_SCHED_MAX_COPIES={art.expected_copies}: the variant library was not the one loaded")
    return None


def llama_cpp_info(prep: Prepared) -> dict:
    """What the run stores as its llama.cpp: the source it built from (or the given binaries' version), and every
    folder of given binaries with its --version output, backends and programs."""
    info = prep.source.as_dict()
    sources = {a.source.key: a.source for a in prep.artifacts.values() if a.made}
    if len(sources) > 1:  # a versions study: every source its builds were made from
        info["sources"] = [s.as_dict() for s in sources.values()]
    if prep.binaries:
        info["binaries"] = [b.as_dict() for b in prep.binaries.values()]
    return info


def run_engines(prep: Prepared) -> dict:
    """What the run's options record of its engines: build → engine, for each build not of llama.cpp (none: every
    build is llama.cpp's, as in every run before engines)."""
    other = {name: a.engine for name, a in prep.artifacts.items() if a.engine != engines.LLAMA_CPP}
    return {"engines": other} if other else {}


Cut = Callable[[Store, str, Pass, int], str | None]
Skip = Callable[[Store, str, Pass], str | None]


class Count:
    """Trials stored (or never to run) out of the run's total: the progress line's figures. Trials that will never
    run are counted as done, so that the total stays true."""

    def __init__(self, total: int) -> None:
        self.done = 0
        self.total = total

    def add(self, n: int = 1) -> None:
        self.done += n


def execute(prep: Prepared, study_toml: str | None, opts: RunOptions, progress: Progress, *,
            passes: list[Pass] | None = None, skip: Skip | None = None, cut: Cut | None = None) -> str:
    """Run every pass of the study into the store; returns the run id. The run records the effective study
    (file plus overrides) as TOML, whatever `study_toml` held. `passes` replaces the study's own order (expand);
    `skip`, asked before each pass, may return why that pass is not run (it is then left out, with the reason
    shown), so a caller can stop measuring a configuration that earlier passes already settled; `cut`, asked after
    each trial of a pass (with the trial number, every cell and level of it stored), may return why the pass's
    remaining trials are not run — on the same server start, so deciding costs no reload."""
    study = prep.study
    study_toml = to_toml(study)
    shash = study_hash(study, prep.model_path)
    check_budgets(prep, progress)  # before any row is written: a budget these devices cannot stand for stops here
    with Store(opts.db) as store:
        run_id, resumed = store.begin_run(study.name, study_toml, shash, version=__version__, resume=opts.resume,
                                          fresh=opts.fresh, model=prep.model_info.as_dict(),
                                          options={"backend": prep.backend, "db": str(opts.db),
                                                   **run_engines(prep)},
                                          devices=prep.topology or None)
        if resumed and not opts.resume:
            progress.message(f"resuming unfinished run {run_id} of this study (pass --fresh to start anew)")
        try:
            if not resumed:
                store.save_system(run_id, sysinfo.collect(llama_cpp_info(prep)))
            _record_builds(prep, store, run_id)
            inapplicable = _record_inapplicable(prep, store, run_id)
            _run_passes(prep, store, run_id, opts.runs_dir / run_id / "logs", progress,
                        expand(study) if passes is None else passes, inapplicable, skip, cut)
            _afterwards(prep, store, run_id, opts, progress)
            proc.check_stop()
            # nothing measured (every configuration failed, or none could run) is a failed run, not a finished one
            store.set_run_status(run_id, "finished" if store.done_trials(run_id) else "failed")
        except KeyboardInterrupt:
            proc.terminate_all()
            _mark_run(store, run_id, "interrupted", progress)
            raise
        except BaseException:
            proc.terminate_all()
            _mark_run(store, run_id, "failed", progress)
            raise
    return run_id


def _record_builds(prep: Prepared, store: Store, run_id: str) -> None:
    """Each build of the study as it stands: made (or given), not applicable to the rig, failed or skipped."""
    for spec in prep.study.builds:
        if spec.name in prep.artifacts:
            store.save_build(run_id, spec.name, "ok", artifact=prep.artifacts[spec.name])
        elif spec.name in prep.not_applicable:
            store.save_build(run_id, spec.name, NOT_APPLICABLE, reason=prep.not_applicable[spec.name])
        else:
            reason = prep.skipped.get(spec.name) or ""
            store.save_build(run_id, spec.name, "failed" if reason.startswith("build failed") else "skipped",
                             reason=reason)


def _run_passes(prep: Prepared, store: Store, run_id: str, logs: Path, progress: Progress, passes: list[Pass],
                inapplicable: set[tuple[str, str]], skip: Skip | None, cut: Cut | None) -> None:
    """The passes with trials left to run (a resumed run skips what it stored), in order."""
    done = store.done_trials(run_id)
    levels = prep.study.workload.concurrency
    cells = prep.study.workload.cells()
    # a trial is done when every cell at every level is stored (the keys are `Trial.key`'s)
    todo = [(i, p, tuple(t for t in p.trials
                         if any((p.config.build.name, p.config.setting.name, t, c, prompt, output) not in done
                                for c in levels for prompt, output in cells)))
            for i, p in enumerate(passes) if p.config.build.name in prep.artifacts
            and (p.config.build.name, p.config.setting.name) not in inapplicable]
    todo = [(i, p, ts) for i, p, ts in todo if ts]
    per_trial = len(levels) * len(cells)  # trials stored per trial number: one per cell and level
    count = Count(sum(len(ts) * per_trial for _, _, ts in todo))
    for i, p, trials in todo:
        proc.check_stop()
        key = (p.config.build.name, p.config.setting.name)
        if key in inapplicable:  # llama.cpp refused it on an earlier pass: said once, not tried again
            count.add(len(trials) * per_trial)
            continue
        why = skip(store, run_id, p) if skip is not None else None
        if why:
            progress.message(f"not measuring {p.config.build.name} × {p.config.setting.name} further: {why}")
            count.add(len(trials) * per_trial)
            continue
        if _run_pass(prep, store, run_id, p, trials, done, logs, i, progress, count, cut) == NOT_APPLICABLE:
            inapplicable.add(key)
            count.add(len(trials) * per_trial)  # they will never run: the progress total stays true


def _afterwards(prep: Prepared, store: Store, run_id: str, opts: RunOptions, progress: Progress) -> None:
    """What runs after the study's passes: every configuration's logits against its baseline's, the crosscheck, the
    contexts within the budgets, the context checks."""
    logs = opts.runs_dir / run_id / "logs"
    if len(prep.study.builds) > 1:
        logits.check(prep, store, run_id, logs, progress)
    if opts.crosscheck:
        _crosscheck(prep, store, run_id, logs, progress)
    if opts.budget_context != "off" and prep.study.devices.budgets_mib:
        # an engine without a fit ran at a context searched within the budgets: every configuration's is searched,
        # so that all are compared within the same budgets
        searched = any(not engines.get(a.engine).fit_target for a in prep.artifacts.values())
        _budget_fits(prep, store, run_id, logs, progress, always=opts.budget_context == "always" or searched)
    if opts.max_context != "off":
        _context_checks(prep, store, run_id, logs, progress, opts.max_context, opts.max_context_probes)


def _record_inapplicable(prep: Prepared, store: Store, run_id: str) -> set[tuple[str, str]]:
    """The configurations that do not apply to this rig: each that llamalab rules out (min_devices) stored once as
    a configuration that never started, with the reason, and those llama.cpp refused in an earlier attempt of this
    run (a resumed run does not try them again). Returns their (build, setting) keys."""
    stored = {(c["build"], c["setting"]) for c in store.configs(run_id) if c["status"] == NOT_APPLICABLE}
    for cfg in configs(prep.study):
        key = (cfg.build.name, cfg.setting.name)
        why = prep.inapplicable(cfg)
        if why and key not in stored:
            cid = store.start_config(run_id, ConfigOutcome(build=key[0], setting=key[1], status=NOT_APPLICABLE,
                                                           reason=why))
            store.finish_config(cid, NOT_APPLICABLE)
            stored.add(key)
    return stored


def _mark_run(store: Store, run_id: str, status: str, progress: Progress) -> None:
    """Record how a run ended after an error, without hiding that error: a database that cannot be written (a
    full disk) leaves the run as it was, and its owner's exit makes it interrupted (resumable) all the same."""
    try:
        store.set_run_status(run_id, status)
    except Exception as e:  # noqa: BLE001 - the error being raised is the one to report
        progress.warn(f"could not mark run {run_id} {status}: {e}")


def _finish_config(store: Store, config_id: int, status: str, reason: str, progress: Progress) -> None:
    try:
        store.finish_config(config_id, status, reason=reason)
    except Exception as e:  # noqa: BLE001
        progress.warn(f"could not record the configuration's end ({status}: {reason}): {e}")


def run_outcome(store: Store, run_id: str) -> tuple[list[str], int, bool]:
    """How a run's configurations ended: (a line per configuration that failed, the number of configurations
    the study meant to measure, whether anything was measured). A configuration's last attempt counts (a resumed
    run may repeat a failed one); a build that failed counts for each of its configurations; a build skipped
    for a missing optional requirement (OpenBLAS) does not, and neither does an arm that does not apply to the
    rig (llamalab's min_devices or llama.cpp's own refusal): that is what the rig is, not a failure."""
    run = store.run(run_id)
    try:
        settings = [s.get("name") for s in tomllib.loads(run["study_toml"]).get("settings") or []] or ["default"]
    except tomllib.TOMLDecodeError:
        settings = []
    last: dict[tuple[str, str], dict] = {}
    for row in store.configs(run_id):
        last[(row["build"], row["setting"])] = row
    failed = []
    total = 0
    for b in store.builds(run_id):
        if b["status"] in ("skipped", NOT_APPLICABLE):
            continue
        for st in settings:
            c = last.get((b["name"], st))
            if c is not None and c["status"] == NOT_APPLICABLE:
                continue
            total += 1
            if b["status"] == "failed":
                failed.append(f"{b['name']} × {st}: {(b['reason'] or 'build failed').splitlines()[0]}")
                continue
            if c is not None and c["status"] != "ok":
                failed.append(f"{b['name']} × {st}: {(c['reason'] or c['status']).splitlines()[0]}")
    return failed, total, bool(store.done_trials(run_id))


def _crosscheck(prep: Prepared, store: Store, run_id: str, logs: Path, progress: Progress) -> None:
    """llama-bench on the first configuration that ran, with the same binary, devices and settings."""
    stored = store.trials(run_id)
    measured = {(t["build"], t["setting"]) for t in stored}
    cfg = next((c for c in configs(prep.study) if c.build.name in prep.artifacts
                and (c.build.name, c.setting.name) in measured), None)
    if cfg is None:
        progress.warn("crosscheck skipped: no configuration has trials")
        return
    art = prep.artifacts[cfg.build.name]
    if not art.binary("llama-bench").is_file():
        progress.warn(f"crosscheck skipped: there is no llama-bench in {art.bin_dir}")
        return
    wl = prep.study.workload
    prompt, output = wl.cells()[0]  # the workload's first cell: llama-bench runs one prompt and one output length
    log_dir = logs / "crosscheck"
    log_dir.mkdir(parents=True, exist_ok=True)
    progress.message(f"crosscheck: llama-bench on {cfg.build.name} × {cfg.setting.name}, {prompt}-token prompts")
    with device_setup(prep, art, log_dir) as dev:
        argvs, untranslated = crosscheck.bench_argv(art.binary("llama-bench"), prep.model_path,
                                                    server_args(prep.study, cfg, dev, art.engine), prompt=prompt,
                                                    gen=output, reps=max(3, wl.repeats))
        bench, error = crosscheck.run_bench(argvs, log_dir / "llama-bench.log", {**art.env(), **dev.env})
    trials = [t for t in stored if t["build"] == cfg.build.name and t["setting"] == cfg.setting.name
              and (t.get("cell_prompt_tokens"), t.get("cell_output_tokens")) == (prompt, output)]
    result = crosscheck.compare(bench, trials)
    result["prompt_tokens"], result["output_tokens"] = prompt, output
    result["untranslated_server_args"] = untranslated
    store.save_crosscheck(run_id, cfg.build.name, cfg.setting.name, result, error)
    for line in crosscheck.sentences(result):
        progress.message("crosscheck: " + line)
    if error:
        progress.warn("crosscheck: " + error)


def _context_checks(prep: Prepared, store: Store, run_id: str, logs: Path, progress: Progress, mode: str,
                    probes: int) -> None:
    """For every configuration that ran: load its fitted context again with fit off (verify), and with `search`
    bisect -c up to the model's training context for the largest that loads (within the budgets, if any)."""
    budgets = prep.study.devices.budgets_mib
    hi = prep.model_info.n_ctx_train or 0
    fitted_by = {(c["build"], c["setting"]): (c.get("ledger") or {}).get("n_ctx")
                 for c in store.configs(run_id) if c["status"] == "ok"}
    fits = {k: {kk: vv for kk, vv in v.items() if kk != "verified"} for k, v in store.budget_fits(run_id).items()}
    for cfg in configs(prep.study):
        fitted = fitted_by.get((cfg.build.name, cfg.setting.name))
        if cfg.build.name not in prep.artifacts or not fitted:
            continue
        label = f"{cfg.build.name} × {cfg.setting.name}"
        probe = _ContextProbe(prep, cfg, logs, progress)
        if mode == "verify":
            res = maxctx.search(fitted, fitted, probe, max_probes=1)
        else:
            res = maxctx.search(fitted, max(fitted, hi), probe, max_probes=probes)
        verified = bool(res.steps and res.steps[0]["n_ctx"] == fitted // maxctx.STEP * maxctx.STEP
                        and res.steps[0]["loaded"])
        store.save_context_check(run_id, cfg.build.name, cfg.setting.name, mode, fitted, verified, res.max_loaded,
                                 res.steps)
        progress.message(f"context check {label}: fitted {fitted:,} {'loads' if verified else 'DOES NOT load'}"
                         + (f"; largest that loads: {res.max_loaded:,}" if mode == "search" and res.max_loaded else ""))
        fit = fits.get((cfg.build.name, cfg.setting.name))
        if fit and (fit.get("budget") or {}).get("n_ctx"):
            _verify_budget_fit(store, run_id, cfg, fit, probe, budgets, progress)


class _ContextProbe:
    """One configuration's context check loads: each `probe(n)` starts llama-server with -c n and fit off (under the
    budgets' emulation) in a folder of its own, and says whether it loaded within every budget."""

    def __init__(self, prep: Prepared, cfg: Config, logs: Path, progress: Progress) -> None:
        self.prep, self.cfg, self.logs, self.progress = prep, cfg, logs, progress
        self.art = prep.artifacts[cfg.build.name]
        self.loads = 0

    def __call__(self, n: int) -> dict:
        prep, cfg, art = self.prep, self.cfg, self.art
        self.loads += 1
        log_dir = self.logs / f"context-{cfg.build.name}-{cfg.setting.name}-{self.loads}".replace("/", "_")
        log_dir.mkdir(parents=True, exist_ok=True)
        self.progress.message(f"context check {cfg.build.name} × {cfg.setting.name}: loading with -c {n}")
        with device_setup(prep, art, log_dir) as dev:
            env = {**art.env(), **dev.env}
            args, _ = emulate_budgets(prep.study, art, dev, env, server_args(prep.study, cfg, dev, art.engine))
            probe_args = maxctx.probe_args(args, n, fit=engines.get(art.engine).fit_target)
            try:
                with launch(art.binary("llama-server"), prep.model_path, args=probe_args,
                            log_path=log_dir / "llama-server.log", env=env, host=prep.study.server.host,
                            ready_timeout_s=prep.study.server.ready_timeout_s, engine=art.engine) as srv:
                    led = ledger.parse(srv.log_lines(), tensor_split=argvmod.tensor_split(probe_args))
            except LaunchError as e:
                return {"loaded": False, "reason": e.message.splitlines()[0]}
        names = report_device_names(led)
        totals = [led.devices[name].total() for name in names]
        ok, why = maxctx.within_budgets(totals, prep.study.devices.budgets_mib)
        return {"loaded": ok and led.n_ctx == n, "device_mib": dict(zip(names, totals, strict=False)),
                "reason": why, "n_ctx_loaded": led.n_ctx}


def needs_budget_fit(led: dict, budgets: list[int]) -> str | None:
    """Why a configuration's context within its budgets must be searched for, or None: a device's allocated buffers
    exceed its budget, so that context would not load on such a card (with -ngl given, llama.cpp's fit shrinks the
    context for the total memory and stops before placing layers per device; it reports that as a failed fit even
    where every device stays within its budget, which is then no reason to search)."""
    ok, why = maxctx.within_budgets(order.device_totals(led), budgets)
    return None if ok else why


def _budget_fits(prep: Prepared, store: Store, run_id: str, logs: Path, progress: Progress, *, always: bool) -> None:
    """For every configuration that ran whose context llama.cpp's fit did not keep within every device's budget
    (or every one, `always`): the largest context within the budgets, and within them less the margin, by dry
    runs (`fit.budgetfit`). A resumed run keeps the searches it stored."""
    budgets = prep.study.devices.budgets_mib or []
    stored = store.budget_fits(run_id)
    ledgers: dict[tuple[str, str], dict] = {(c["build"], c["setting"]): led for c in store.configs(run_id)
                                            if c["status"] == "ok" and (led := c.get("ledger"))}
    whys = {k: needs_budget_fit(led, budgets) for k, led in ledgers.items()}
    first = next((f"{k[0]} × {k[1]}: {w}" for k, w in whys.items() if w), None)
    if first is None and not always:
        return
    for cfg in configs(prep.study):
        key = (cfg.build.name, cfg.setting.name)
        led = ledgers.get(key)
        if led is None or key in stored or cfg.build.name not in prep.artifacts:
            continue
        # every configuration, so that all are compared within the same budgets
        why = whys.get(key) or ("asked for" if always else f"like every configuration, since {first}")
        proc.check_stop()
        art = prep.artifacts[cfg.build.name]
        log_dir = logs / f"budget-{cfg.build.name}-{cfg.setting.name}".replace("/", "_")
        log_dir.mkdir(parents=True, exist_ok=True)
        progress.message(f"context within the budgets, {cfg.build.name} × {cfg.setting.name} ({why}): dry runs")
        with device_setup(prep, art, log_dir) as dev:
            env = {**art.env(), **dev.env}
            emu = budget_emulation(prep.study, art, dev, env, server_args(prep.study, cfg, dev, art.engine))
            if emu is None:
                continue
            fit = configplan.within_budgets(prep, cfg, art, dev, env, emu, log_dir, 300.0, start=led.get("n_ctx"),
                                         reference=order.device_totals(led))
        doc = {**fit.as_dict(), "why": why, "fitted_n_ctx": led.get("n_ctx")}
        store.save_budget_fit(run_id, cfg.build.name, cfg.setting.name, doc)
        progress.message(f"context within the budgets, {cfg.build.name} × {cfg.setting.name}: "
                         + budgetfit.summary(fit) + f" ({fit.dry_runs} dry runs, {fit.seconds:.1f} s)")


def _verify_budget_fit(store: Store, run_id: str, cfg, fit: dict, probe: Callable[[int], dict],
                       budgets: list[int] | None, progress: Progress, max_loads: int = 4) -> None:
    """Load the context within the budgets for real (`--max-context verify`): where a device goes over its budget
    after all (the dry run's figures are projections), step down by that device's overflow over its MiB per token
    and load again, at most `max_loads` loads in all; the largest that loads within every budget is stored as
    verified (`verify.n_ctx_loaded_within`)."""
    label = f"{cfg.build.name} × {cfg.setting.name}"
    n: int | None = int(fit["budget"]["n_ctx"])
    steps: list[dict] = []
    good = None
    while n is not None and len(steps) < max_loads:
        step = {"n_ctx": n, **probe(n)}
        steps.append(step)
        if step["loaded"]:
            good = n
            break
        totals = list((step.get("device_mib") or {}).values())
        if not totals or not budgets:
            break  # it did not start at all: no overflow to step down by
        per = budgets * len(totals) if len(budgets) == 1 else budgets
        n = budgetfit.step_down(fit, n, [t - b for t, b in zip(totals, per, strict=False)])
    verify = {**steps[0], "steps": steps, "n_ctx_loaded_within": good}
    store.save_budget_fit(run_id, cfg.build.name, cfg.setting.name, {**fit, "verify": verify},
                          verified=good == int(fit["budget"]["n_ctx"]))
    first = steps[0]
    progress.message(f"context check {label}: {first['n_ctx']:,} tokens within the budgets "
                     + ("loads within every budget" if first["loaded"] else
                        f"does NOT load within the budgets ({first.get('reason') or 'not loaded'})"
                        + (f"; {good:,} does" if good else "")))


def report_device_names(led: records.Ledger) -> list[str]:
    """Device buffer names in llama.cpp's device order (as the reports order them)."""
    return order.device_names(led.to_json())


def rpc_said(log_dir: Path, message: str) -> str:
    """Where llama-server says an rpc-server crashed: what each local rpc-server's own log says ("" otherwise)."""
    if "rpc-server crashed" not in message:
        return ""
    said = []
    for path in sorted(log_dir.glob("rpc-server-*.log")):
        why = failure_reason(path.read_text(errors="replace").splitlines())
        if why:
            said.append(f"{path.stem}: {why}")
    return (" — " + "; ".join(said)) if said else ""


def _pass_log_dir(logs: Path, index: int, p: Pass) -> Path:
    """The folder of one server start's logs: a resumed pass gets fresh ones (a log describes exactly one start)."""
    name = f"{index:03d}-{p.config.build.name}-{p.config.setting.name}".replace("/", "_")
    log_dir = logs / name
    attempt = 1
    while log_dir.exists():
        log_dir = logs / f"{name}-retry{attempt}"
        attempt += 1
    log_dir.mkdir(parents=True)
    return log_dir


class _Pass:
    """One server start of a configuration and its trials, with the state the workload's callbacks share: the
    trials stored so far in this pass, the run's count, the grid of cells and levels that fit."""

    def __init__(self, prep: Prepared, store: Store, run_id: str, p: Pass, trials: tuple[int, ...], done: set,
                 progress: Progress, count: Count, cut: Cut | None) -> None:
        self.prep, self.store, self.run_id, self.p, self.trials = prep, store, run_id, p, trials
        self.done, self.progress, self.count, self.cut = done, progress, count, cut
        self.cfg = p.config
        self.art = prep.artifacts[self.cfg.build.name]
        self.label = f"{self.cfg.build.name} × {self.cfg.setting.name}"
        self.config_id = 0
        self.loaded = False
        self.split: list[float] | None = None  # the -ts the server ran with (tensorsplit.split_meta)
        self.in_pass = 0
        self.grid: list[tuple[workload.Shape, list[int]]] = []
        self.srv: Server | None = None
        self.cut_short = False  # a race stopped its trials: no reference generation either

    def on_trial(self, t) -> None:
        proc.check_stop()  # a stop requested during the trial: it is not stored half-trusted
        self.in_pass += 1
        if t.key in self.done:
            return
        self.store.save_trial(self.run_id, self.config_id, t)
        self.done.add(t.key)
        self.count.add()
        if t.errors and self.srv is not None and self.srv.ended():  # a dead server fails every request after it
            raise LaunchError(self.srv.death("during the workload"))
        if self.in_pass < len(self.trials) * self.per_trial():  # the next pass announces its own
            self.progress.trial(min(self.count.done + 1, self.count.total), self.count.total, self.label)
        if t.errors:
            self.progress.warn(f"{self.label} trial {t.trial} at concurrency {t.concurrency}: "
                               f"{t.errors} request(s) failed: {t.requests[0].error}")

    def go_on(self, trial: int) -> bool:
        why = self.cut(self.store, self.run_id, self.p, trial) if self.cut is not None else None
        if why:
            self.cut_short = True
            self.progress.message(f"not measuring {self.label} further: {why}")
            left = [t for t in self.trials if t > trial]
            self.count.add(len(left) * self.per_trial())  # the progress total stays true
        return why is None

    def per_trial(self) -> int:
        """Trials stored per trial number: one per cell and level that fits."""
        return sum(len(lv) for _, lv in self.grid)

    def make_grid(self, led: records.Ledger) -> None:
        """The workload's cells, each with the concurrency levels whose requests fit in the server's context."""
        wl = self.prep.study.workload
        for prompt, output in wl.cells():
            shape = workload.Shape(prompt_tokens=prompt, output_tokens=output,
                                   natural=wl.output == "natural", timeout_s=wl.request_timeout_s)
            levels, too_big = fitting_levels(wl.concurrency, shape, led)
            if too_big:
                note = (f"concurrency {', '.join(map(str, too_big))} not run: that many requests of "
                        f"{shape.prompt_tokens}+{shape.output_tokens} tokens do not fit in n_ctx {led.n_ctx}")
                self.progress.warn(f"{self.label}: {note}")
                self.store.note_config(self.config_id, note)
                # they will never run: count them as done so the progress total stays true
                self.count.add(len(self.trials) * len(too_big))
            self.grid.append((shape, levels))

    def note_load(self, lines: list[str], led: records.Ledger) -> None:
        """What the load's log says that the configuration's row should carry: no fit, pipeline parallelism
        dropped, a copies variant that loaded the wrong library (a LaunchError)."""
        no_fit = applicability.fit_refusal(lines)
        if no_fit:  # the context is not fitted to the memory: say so with the configuration
            n_ctx = f"{led.n_ctx:,}" if led.n_ctx else "?"
            self.store.note_config(self.config_id, f"context not fitted to the memory: llama.cpp's fit says "
                                                   f"\"{no_fit}\"; it ran with n_ctx {n_ctx}")
        if led.pp_retry:  # llama.cpp ran this configuration without pipeline parallelism: say so, once
            note = (f"llama.cpp dropped pipeline parallelism (compute buffers did not fit: "
                    f"{led.pp_dropped_reason}); this configuration ran with it off")
            self.progress.warn(f"{self.label}: {note}")
            self.store.note_config(self.config_id, note)
        if led.pipeline_parallel is False and self.art.backend not in engines.get(self.art.engine).pp_backends \
                and self.art.expected_copies > 1:
            note = (f"built with {engines.COPIES}={self.art.expected_copies}, but {self.art.engine} runs pipeline "
                    f"parallelism only on {', '.join(sorted(engines.get(self.art.engine).pp_backends))} builds: it ran "
                    "without it (its log has no \"pipeline parallelism enabled\" line)")
            self.progress.message(f"{self.label}: {note}")
        wrong = check_copies(led, self.art)
        if wrong:
            raise LaunchError(wrong, tip="rebuild the variant (delete its folder under the build cache).")

    def serve(self, log_dir: Path) -> float | None:
        """Start the server on the study's devices, run the workload, store the ledgers and the driver's figures;
        returns the load time."""
        prep, cfg, art = self.prep, self.cfg, self.art
        with device_setup(prep, art, log_dir) as dev:
            env = {**art.env(), **dev.env}
            args, emulation = emulate_budgets(prep.study, art, dev, env, server_args(prep.study, cfg, dev, art.engine))
            if emulation is None and prep.study.devices.budgets_mib and not argvmod.has(args, *argvmod.CTX_SIZE) \
                    and not engines.get(art.engine).fit_target:
                args, emulation = self.engine_context(dev, env, log_dir, args)
            # slot actions (erasing the KV cache between levels) need a save path; nothing is saved there
            (log_dir / "slots").mkdir(exist_ok=True)
            args += ["--slot-save-path", str(log_dir / "slots")]
            self.store.set_config_command(self.config_id, [str(art.binary("llama-server")), "-m",
                                                           str(prep.model_path), *args],
                                          env, {**dev.as_dict(), "emulation": emulation})
            self.progress.message(f"starting llama-server for {self.label} ({dev.description})")
            checker = drivercheck.for_setup(prep.backend, dev)  # a device-wide source reads its baseline now
            self.split = argvmod.tensor_split(args)  # -sm tensor: how the Meta() device's buffers divide
            with launch(art.binary("llama-server"), prep.model_path, args=args, log_path=log_dir / "llama-server.log",
                        env=env, host=prep.study.server.host, ready_timeout_s=prep.study.server.ready_timeout_s,
                        engine=art.engine) as srv:
                self.srv, self.loaded = srv, True
                lines = srv.log_lines()
                led = ledger.parse(lines, tensor_split=self.split)
                self.store.save_ledger(self.config_id, led)
                self.note_load(lines, led)
                driver_load = checker.read({srv.child.pid}) if checker else None
                self.make_grid(led)
                self.progress.trial(self.count.done + 1, self.count.total, self.label)
                self.measure(srv, args)
                self.references(srv, args)
                if checker:
                    driver_run = checker.read({srv.child.pid})
                    self.store.save_nvml(self.config_id, {
                        "after_load": checker.compare(led.to_json(), driver_load),
                        "after_workload": checker.compare(led.to_json(), driver_run),
                        "source": checker.source, "scope": checker.scope,
                    })
            # the final ledger (with exit-time breakdown tables) is read after the server stops
            led = ledger.parse((log_dir / "llama-server.log").read_text(errors="replace").splitlines(),
                               tensor_split=self.split)
            self.store.save_ledger(self.config_id, led)
        return srv.load_seconds

    def engine_context(self, dev, env: dict[str, str], log_dir: Path, args: list[str]) -> tuple[list[str], dict]:
        """An engine without a fit of the context under budgets: the context llamalab found within them
        (configplan.engine_context, stored as the configuration's search within the budgets), as -c."""
        key = (self.cfg.build.name, self.cfg.setting.name)
        stored = self.store.budget_fits(self.run_id).get(key)
        n, doc = configplan.engine_context(self.prep, self.cfg, self.art, dev, env, log_dir / "context-search",
                                           stored)
        if stored is None:
            self.store.save_budget_fit(self.run_id, *key, doc)
        if n is None:
            raise LaunchError(f"no context of {self.art.engine} fits the budgets: {budgetfit.summary(doc)}",
                              tip="raise [devices] vram (or --budget), or lower [server] fit_target_mib.")
        self.progress.message(f"{self.label}: {self.art.engine} has no fit of the context; runs at -c {n} "
                              f"({budgetfit.summary(doc)})")
        return [*args, "-c", str(n)], {"engine_context": {"n_ctx": n, "why": doc.get("why")}}

    def measure(self, srv, args: list[str]) -> None:
        wl = self.prep.study.workload
        try:
            if any(levels for _, levels in self.grid):
                workload.measure(srv.url, build=self.cfg.build.name, setting=self.cfg.setting.name,
                                 trials=self.trials, cells=self.grid, warmup=wl.warmup, on_trial=self.on_trial,
                                 n_slots=n_slots(args), go_on=self.go_on,
                                 erase_lost_ok=engines.get(self.art.engine).erase_answer_lost)
        except WorkloadError:
            if not srv.ended():
                raise
        if not srv.alive():  # a dead server is the cause, whatever the client saw
            raise LaunchError(srv.death("during the workload"))

    def references(self, srv: Server, args: list[str]) -> None:
        """The configuration's reference generation (run/references.py) on this server, once — the baseline's (the
        study's first build) twice, its A/A — unless `[outputs] check` is off or a race stopped its trials. A failure
        is stored with the configuration's outputs (its trials stand) and said."""
        study = self.prep.study
        spec, wl = study.outputs, study.workload
        levels = [lv for _, levels in self.grid for lv in levels]
        if not spec.check or self.cut_short or not levels:
            return
        name, setting = self.cfg.build.name, self.cfg.setting.name
        have = {(r["mode"], r["rep"]) for r in self.store.outputs(self.run_id)
                if (r["build"], r["setting"]) == (name, setting)}
        plan = references.Plan(prompts=spec.prompts, prompt_tokens=min(spec.prompt_tokens, min(wl.prompt_lengths)),
                               tokens=spec.tokens, top=spec.top, concurrency=max(levels),
                               timeout_s=wl.request_timeout_s, engine=self.art.engine)
        for rep in range(1, (2 if name == study.builds[0].name else 1) + 1):
            if ("single", rep) in have:
                continue
            self.progress.message(f"{self.label}: reference generation{' (again: A/A)' if rep > 1 else ''}")
            try:
                made = references.generate(srv.url, plan, n_slots(args))
            except WorkloadError as e:
                if not srv.alive():
                    raise LaunchError(srv.death("during the reference generation")) from e
                self.progress.warn(f"{self.label}: the reference generation failed, its outputs are not compared: "
                                   f"{e.message}")
                made = {"single": {"sequences": [], "error": e.message}}
            for mode, result in made.items():
                self.store.save_outputs(self.run_id, name, setting, mode, rep, result)

    def failed(self, log_dir: Path, e: LaunchError | WorkloadError) -> str:
        """A server that did not start or died: not applicable where llama.cpp refused what the rig, build or model
        lacks before it loaded, else failed; returns which."""
        log_path = log_dir / "llama-server.log"
        lines = log_path.read_text(errors="replace").splitlines() if log_path.exists() else []
        said = None if self.loaded else applicability.refusal(lines)
        if said:  # not a failure: this rig (or build, or model) cannot run it, and llama.cpp says why
            self.progress.message(f"{self.label} does not apply to this rig: llama.cpp says \"{said}\" "
                                  "(not tried again)")
            self.store.finish_config(self.config_id, NOT_APPLICABLE, reason=f"llama.cpp: {said}")
        else:
            message = e.message + rpc_said(log_dir, e.message)
            self.progress.warn(f"{self.label} failed: {message}")  # with the server log's last lines where it died
            self.store.finish_config(self.config_id, "failed", reason=message)
        if lines:
            self.store.save_ledger(self.config_id, ledger.parse(lines, tensor_split=self.split))
        return NOT_APPLICABLE if said else "failed"


def _run_pass(prep: Prepared, store: Store, run_id: str, p: Pass, trials: tuple[int, ...], done: set,
              logs: Path, index: int, progress: Progress, count: Count, cut: Cut | None = None) -> str:
    """One server start of a configuration and its trials; returns how the configuration ended (ok, failed, or
    not-applicable where llama.cpp refused it at load for what the rig, build or model lacks)."""
    log_dir = _pass_log_dir(logs, index, p)
    run = _Pass(prep, store, run_id, p, trials, done, progress, count, cut)
    outcome = ConfigOutcome(build=run.cfg.build.name, setting=run.cfg.setting.name, status="running",
                            log_path=str(log_dir / "llama-server.log"))
    run.config_id = store.start_config(run_id, outcome, pass_no=index)
    try:
        load_seconds = run.serve(log_dir)
        store.finish_config(run.config_id, "ok", load_seconds=load_seconds)
        return "ok"
    except KeyboardInterrupt:
        _finish_config(store, run.config_id, "interrupted", "stopped by SIGINT/SIGTERM", progress)
        raise
    except (LaunchError, WorkloadError) as e:
        return run.failed(log_dir, e)
    except BaseException as e:
        # any other error stops the study; the configuration does not stay "running"
        why = e.message if isinstance(e, LlamalabError) else f"{type(e).__name__}: {e}"
        _finish_config(store, run.config_id, "failed", f"the study stopped: {why}", progress)
        raise
