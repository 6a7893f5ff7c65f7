"""`llamalab plan --model hf://OWNER/REPO`: every quant of a repository under the same budgets, in one table.

Each model of the repository (its header-only stand-in, split parts assembled: `models.remote.source`) gets the
dry runs of `plan.plan.plan_config` with the study's first build and no setting — llama.cpp's default:
 1. under the budgets (their `-fitt`/`-ts` emulation): whether it fits, and the context llama.cpp's fit gives it;
 2. the same with `-ot no_such_tensor=CPU` (pipeline parallelism off, no weight moved): its context then;
 3. with `--context N`: at `-c N`, the layers split as the budgets split them, and no budget limit on this machine
    (the fit then changes nothing): each device's projected use plus llama.cpp's margin is the smallest budget that
    holds N tokens.
The study's devices are started once; every quant is dry-run on them.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..core.errors import ConfigError
from ..fit import budget
from ..models import synthetic as models
from ..models.remote import ref as modelref
from ..models.remote.source import RepoModels, Resolved
from ..setup import configplan
from ..setup import prepare as session
from ..setup.options import RunOptions
from ..setup.progress import Progress
from ..study.spec import Config, SettingSpec, Study

NO_PP = ["-ot", "no_such_tensor=CPU"]


@dataclass
class QuantRow:
    quant: str
    name: str
    files: list[str]
    size_bytes: int
    fetched_bytes: int
    status: str = "ok"  # ok | failed
    reason: str | None = None
    fits: bool | None = None
    n_ctx: int | None = None  # llama.cpp's default under the budgets
    n_ctx_no_pp: int | None = None  # with -ot no_such_tensor=CPU
    over_mib: dict[str, float] = field(default_factory=dict)  # device → MiB over budget − margin at n_ctx
    no_pp_over_mib: dict[str, float] = field(default_factory=dict)
    ctx_reduced_from: int | None = None
    sched_copies: int | None = None
    used_mib: list[float | None] = field(default_factory=list)  # per device at n_ctx
    context: int | None = None  # --context N
    need_mib: list[float] | None = None  # per device: projected use at N + llama.cpp's margin
    need_fits: bool | None = None
    need_note: str | None = None
    n_ctx_train: int | None = None
    dry_runs: int = 0
    seconds: float = 0.0


@dataclass
class RepoPlan:
    ref: str
    study: str
    build: str
    backend: str
    devices: list[str]
    budgets_mib: list[int] | None
    margins_mib: list[int] | None
    context: int | None
    rows: list[QuantRow]
    skipped: list[tuple[str, str]]
    size_bytes: int
    fetched_bytes: int
    llama_cpp: str
    seconds: float
    notes: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)  # the arguments every dry run has (the study's and its build's)

    def to_json(self) -> dict:
        return asdict(self)


def repo_study(study: Study) -> Study:
    """The study as the table runs it: its first build, and no setting (llama.cpp's default arguments)."""
    return study.model_copy(update={"builds": study.builds[:1], "settings": [SettingSpec(name="default")]})


def plan_repo(study: Study, opts: RunOptions, found: RepoModels, progress: Progress) -> RepoPlan:
    """Every model of the repository dry-run under the budgets (--budget over [devices] vram), one row each."""
    t0 = time.monotonic()
    study = repo_study(study)
    configplan.check_fit_on(study)
    items = list(found.models)
    prep = session.prepare(study, dataclasses.replace(opts, model=items[0][1].path), progress)
    study = prep.study  # under --budget's budgets
    b0 = study.builds[0]
    art = prep.artifacts.get(b0.name)
    if art is None:
        raise ConfigError(f"build {b0.name} could not be made: {prep.skipped.get(b0.name)}",
                          tip="the repository table dry-runs the study's first build; check `llamalab build STUDY`.")
    logs = opts.logs_dir or Path(tempfile.mkdtemp(prefix="llamalab-planrepo-"))
    rows: list[QuantRow] = []
    names: list[str] = []
    emu = None
    try:
        with session.device_setup(prep, art, configplan.mkdir(logs / "devices")) as dev:
            env = {**art.env(), **dev.env}
            emu = session.budget_emulation(study, art, dev, env, [*study.server.args, *b0.args])
            for i, (m, res) in enumerate(items):
                progress.message(f"dry runs {i + 1}/{len(items)}: {m.quant} ({m.name})")
                row = _row(m, res, opts.context)
                rows.append(row)
                stem = logs / f"{i:02d}-{m.name}"[:120].replace("/", "_")
                got = _plan_quant(row, res, prep, art, dev, env, emu, stem, opts.timeout_s)
                names = names or got
    finally:
        if opts.logs_dir is None:
            shutil.rmtree(logs, ignore_errors=True)
    rows += [QuantRow(quant=m.quant, name=m.name, files=[f.path for f in m.files], size_bytes=m.size or 0,
                      fetched_bytes=0, status="failed", reason=why, context=opts.context) for m, why in found.failed]
    return RepoPlan(ref=found.ref, study=study.name, build=b0.name, backend=prep.backend, devices=names,
                    budgets_mib=list(emu.budgets_mib) if emu else None,
                    margins_mib=list(emu.margins_mib) if emu else None, context=opts.context, rows=rows,
                    skipped=[(path, why) for path, why in found.skipped], size_bytes=sum(r.size_bytes for r in rows),
                    fetched_bytes=sum(r.fetched_bytes for r in rows),
                    llama_cpp=f"{art.source.version} ({art.source.short_commit})",
                    args=[*study.server.args, *b0.args],
                    seconds=round(time.monotonic() - t0, 2), notes=_notes(found, rows, prep))


def _plan_quant(row: QuantRow, res: Resolved, prep: session.Prepared, art, dev, env: dict[str, str],
                emu: budget.Emulation | None, stem: Path, timeout_s: float) -> list[str]:
    """One model's dry runs into its row (llama.cpp's default, pipeline parallelism off, and at --context's -c);
    returns the devices' names (none where its header could not be read)."""
    t1 = time.monotonic()
    try:
        info = models.read_info(res.path)
    except Exception as e:  # a header llama.cpp would refuse: its row says so, the others go on
        row.status, row.reason = "failed", getattr(e, "message", str(e))
        return []
    b0 = prep.study.builds[0]
    default = Config(build=b0, setting=prep.study.settings[0])
    no_pp = Config(build=b0.model_copy(update={"args": [*b0.args, *NO_PP]}), setting=SettingSpec(name="no-pp"))
    p = dataclasses.replace(prep, model_path=res.path, model_info=info)
    configplan.mkdir(stem)
    d = configplan.plan_config(p, default, art, dev, env, emu, stem, timeout_s)
    n = configplan.plan_config(p, no_pp, art, dev, env, emu, stem, timeout_s)
    row.dry_runs = d.dry_runs + n.dry_runs
    row.n_ctx_train = info.n_ctx_train
    _fill(row, d, n)
    if row.context and row.status == "ok":
        unlimited = dataclasses.replace(emu, fit_targets_mib=emu.margins_mib) if emu else None
        need = configplan.plan_config(p, default, art, dev, env, unlimited, stem, timeout_s,
                                   extra_args=["-c", str(row.context)])
        row.dry_runs += need.dry_runs
        _need(row, need, emu, prep.study.devices.budgets_mib)
    row.seconds = round(time.monotonic() - t1, 2)
    return [x.name for x in d.devices]


def _notes(found: RepoModels, rows: list[QuantRow], prep: session.Prepared) -> list[str]:
    notes = [f"{len(rows)} model(s) of {found.ref}: header-only stand-ins, {_mib(sum(r.fetched_bytes for r in rows))} "
             f"fetched for {_mib(sum(r.size_bytes for r in rows))} of models"]
    if not prep.study.devices.budgets_mib:
        notes.append("no budgets: each device's free memory is its budget" + (
            " (every local rpc-server reports this machine's RAM; pass --budget 16GiB,12GiB for particular cards)"
            if prep.backend == "cpu-rpc" else ""))
    if prep.backend == "cpu-rpc":
        notes.append("dry runs on CPU-RPC: weights and KV cache per device are what any backend loads for the same "
                     "split; compute buffers approximate a GPU backend's")
    return notes


def _row(m: modelref.RepoModel, res: Resolved, context: int | None) -> QuantRow:
    return QuantRow(quant=m.quant, name=m.name, files=[f.path for f in m.files], size_bytes=m.size or res.size,
                    fetched_bytes=res.fetched, context=context)


def _fill(row: QuantRow, d: configplan.ConfigPlan, n: configplan.ConfigPlan) -> None:
    """The default's and the no-pipeline dry runs into the row (pure)."""
    if d.status != "ok":
        row.status, row.reason = "failed", d.reason
        return
    row.fits = _fits(d)
    row.n_ctx, row.over_mib = d.n_ctx, dict(d.over_budget)
    row.ctx_reduced_from = d.ctx_reduced_from
    row.sched_copies = d.sched_copies
    row.used_mib = [x.used_mib for x in d.devices]
    if n.status == "ok":
        row.n_ctx_no_pp, row.no_pp_over_mib = n.n_ctx, dict(n.over_budget)
    if not row.fits:
        row.reason = ("over budget on " + ", ".join(f"{k} by {v:,.0f} MiB" for k, v in d.over_budget.items())
                      if d.over_budget else d.fit_message)


def _fits(cp: configplan.ConfigPlan) -> bool:
    """Every device within its budget less llama.cpp's margin at the fitted context. With budgets that is the test
    (a study's -ngl 999 makes the fit stop, "failed", after it shrank the context, with the layers as given);
    without budgets, the fit's own verdict."""
    if cp.budgets_mib:
        return not cp.over_budget and all(d.used_mib is not None for d in cp.devices)
    return cp.fit_ok is not False


def _need(row: QuantRow, need: configplan.ConfigPlan, emu: budget.Emulation | None,
          budgets: list[int] | None) -> None:
    """The smallest budgets for `row.context` tokens: each device's projected use + its margin (pure)."""
    if need.status != "ok" or need.n_ctx != row.context or need.fit_ok is False or need.ctx_reduced_from:
        row.need_note = (need.reason or need.fit_message or
                         f"the dry run at -c {row.context} did not hold the layout (this machine has too little "
                         "memory to project it)")
        return
    margins = list(emu.margins_mib) if emu else [budget.DEFAULT_MARGIN_MIB] * len(need.devices)
    row.need_mib = [round((d.used_mib or 0) + m, 1) for d, m in zip(need.devices, margins, strict=False)]
    if budgets:
        row.need_fits = all(x <= b for x, b in zip(row.need_mib, budgets, strict=False))


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def dumps(result: RepoPlan) -> str:
    return json.dumps(result.to_json(), indent=2)
