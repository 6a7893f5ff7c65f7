"""Validation of `llamalab plan`: each configuration's dry run next to a full load of the same configuration.

Both run in one device setup (the same rpc-servers or GPUs, the same arguments): first the dry run, then
llama-server with the model's weights until /health answers, whose log the ledger reads. `compare` is pure: it
lines the figures up per device and says, per figure, how far the dry run was off. Used by
tests/plan/test_plan.py (CPU-RPC) and benchmarks/plan_validation.py (any backend; it writes the comparison table).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..core import proc
from ..core.errors import LlamalabError
from ..llamacpp.server import launch
from ..logs import devicelist, dryrun, ledger
from ..setup import configplan
from ..setup import prepare as session
from ..setup.progress import Progress
from ..study.spec import Study, configs, with_budgets
from . import plan as planmod

FIGURES = ("model", "context", "compute")


@dataclass
class LoadFigures:
    """What a full load printed, per device (llama.cpp's device names) and host, in MiB to 0.01."""

    devices: dict[str, dict[str, float | None]] = field(default_factory=dict)
    host: dict[str, float | None] = field(default_factory=dict)
    n_ctx: int | None = None
    sched_copies: int | None = None
    pipeline_parallel: bool | None = None
    load_seconds: float | None = None
    error: str | None = None


def load_figures(lines: list[str]) -> LoadFigures:
    """A full load's figures from its log (pure). RPC buffers all print as RPC0[endpoint]: the endpoint names
    the device, by the log's device list."""
    led = ledger.parse(lines)
    by_endpoint = {d.description: d.name for d in devicelist.parse_devices(lines)}
    out = LoadFigures(n_ctx=led.n_ctx, sched_copies=led.sched_copies, pipeline_parallel=led.pp_enabled_line,
                      error=led.failure)
    for buf, b in led.devices.items():
        name = buf
        if "[" in buf:
            name = by_endpoint.get(buf.split("[", 1)[1].rstrip("]"), buf)
        out.devices[name] = {"model": b.model_mib, "context": _add(b.kv_mib, b.rs_mib), "compute": b.compute_mib}
    host: dict[str, float | None] = {"model": None, "context": None, "compute": None}
    for b in led.host.values():
        host["model"] = _add(host["model"], b.model_mib)
        host["context"] = _add(host["context"], _add(b.kv_mib, b.rs_mib))
        host["compute"] = _add(host["compute"], b.compute_mib)
    out.host = host
    return out


def _add(a: float | None, b: float | None) -> float | None:
    if a is None and b is None:
        return None
    return round((a or 0.0) + (b or 0.0), 2)


@dataclass
class Row:
    build: str
    setting: str
    where: str  # device name or "host"
    figure: str  # model | context | compute | n_ctx | sched_copies
    dry: float | None
    full: float | None
    diff: float | None  # dry − full
    tolerance: float  # what counts as identical for this figure
    ok: bool
    note: str = ""
    fitparams: float | None = None  # llama-fit-params -fitp on, same arguments less -kvu, at the same n_ctx
    device_index: int | None = None  # 0 for the first device, None for host and whole-configuration figures


def compare(cp: configplan.ConfigPlan, load: LoadFigures,
            fitp: dict[str, tuple[int, int, int]] | None = None) -> list[Row]:
    """Dry run against full load, one row per figure (pure).

    Tolerances: model MiB comes from llama.cpp's breakdown table, which prints whole MiB rounded down, so it
    matches when the full load's figure rounds down to it (|diff| < 1); context and compute are printed to 0.01
    MiB by both, so they match within 0.01; n_ctx and copies must be equal."""
    rows: list[Row] = []
    fitp = fitp or {}

    def add(where: str, fig: str, dry: float | None, full: float | None, tol: float, note: str = "",
            index: int | None = None) -> None:
        if dry is None and not full:
            return
        diff = None if dry is None or full is None else round(dry - full, 2)
        ok = diff is not None and (abs(diff) < tol if fig == "model" else abs(diff) <= tol + 1e-9)
        fp = fitp.get("Host" if where == "host" else where)
        fpv = float(fp[FIGURES.index(fig)]) if fp and fig in FIGURES else None
        rows.append(Row(cp.build, cp.setting, where, fig, dry, full, diff, tol, ok, note, fpv, index))

    for i, d in enumerate(cp.devices):
        f = load.devices.get(d.name, {})
        add(d.name, "model", d.model_mib, f.get("model"), 1.0, "whole MiB (table)", i)
        add(d.name, "context", d.context_mib, f.get("context"), 0.01, "", i)
        add(d.name, "compute", d.compute_mib, f.get("compute"), 0.01, "" if i == 0 else "receives split inputs", i)
    if cp.host is not None:
        # the full load's host figures cover every host buffer type; the table's "Host" row leaves out the types
        # ggml does not call host buffers (CPU_REPACK, AMX), which have rows of their own (whole MiB)
        extra = sum(h.model_mib or 0.0 for h in getattr(cp, "host_buffers", []) or [])
        model = None if cp.host.model_mib is None else cp.host.model_mib + extra
        add("host", "model", model, load.host.get("model"), 1.0 + len(getattr(cp, "host_buffers", []) or []),
            "whole MiB (table)")
        add("host", "context", cp.host.context_mib or None, load.host.get("context"), 0.01)
        add("host", "compute", cp.host.compute_mib, load.host.get("compute"), 0.01)
    add("all", "n_ctx", cp.n_ctx, load.n_ctx, 0)
    add("all", "sched_copies", cp.sched_copies, load.sched_copies, 0)
    return rows


input_copies_mib = configplan.input_copies_mib


@dataclass
class Result:
    config: configplan.ConfigPlan
    load: LoadFigures
    rows: list[Row]


def validate(study: Study, prep: session.Prepared, model_full: Path, *, logs: Path, progress: Progress,
             budgets: list[int] | None = None, timeout_s: float = 600.0) -> list[Result]:
    """For every build × setting: dry run (on `prep.model_path`, e.g. a stand-in) and full load (on
    `model_full`, the same model with its weights), in one device setup with the same arguments, under `budgets`
    (in MiB) where given, else the study's `[devices] vram`."""
    study = with_budgets(study, budgets)
    out: list[Result] = []
    for bspec in study.builds:
        art = prep.artifacts.get(bspec.name)
        if art is None:
            continue
        for cfg in [c for c in configs(study) if c.build.name == bspec.name]:
            stem = f"{cfg.build.name}-{cfg.setting.name}".replace("/", "_")
            dev_logs = logs / f"devices-{stem}"
            dev_logs.mkdir(parents=True, exist_ok=True)
            with session.device_setup(prep, art, dev_logs) as dev:
                env = {**art.env(), **dev.env}
                emu = session.budget_emulation(study, art, dev, env, [*study.server.args, *bspec.args])
                progress.message(f"dry run and full load: {cfg.build.name} × {cfg.setting.name}")
                cp = configplan.plan_config(prep, cfg, art, dev, env, emu, logs, timeout_s)
                fitp = None
                if cp.status == "ok" and cp.n_ctx and art.binary("llama-fit-params").is_file():
                    rc, text = proc.capture([str(art.binary("llama-fit-params")), "-m", str(prep.model_path),
                                             *planmod.fit_params_args(cp.args), "-c", str(cp.n_ctx), "-fitp", "on"],
                                            timeout_s=timeout_s, env=env)
                    fitp = dryrun.parse_fit_print(text.splitlines()) if rc == 0 else None
                log_path = logs / f"{stem}-full.log"
                load = LoadFigures()
                try:
                    t0 = time.monotonic()
                    with launch(art.binary("llama-server"), model_full, args=cp.args, log_path=log_path, env=env,
                                host="127.0.0.1", ready_timeout_s=timeout_s):
                        pass
                    load = load_figures(log_path.read_text(errors="replace").splitlines())
                    load.load_seconds = round(time.monotonic() - t0, 2)
                except LlamalabError as e:
                    load.error = e.message.splitlines()[0]
            out.append(Result(cp, load, compare(cp, load, fitp) if cp.status == "ok" and not load.error else []))
    return out


# ---------------------------------------------------------------- the table


def to_json(results: list[Result], meta: dict) -> dict:
    return {"meta": meta, "configs": [{"build": r.config.build, "setting": r.config.setting,
                                       "status": r.config.status, "reason": r.config.reason,
                                       "load_error": r.load.error, "dry_seconds": r.config.seconds,
                                       "load_seconds": r.load.load_seconds, "dry_runs": r.config.dry_runs,
                                       "input_copies_mib": input_copies_mib(r.config),
                                       "args": r.config.args, "rows": [asdict(x) for x in r.rows]}
                                      for r in results]}


def markdown(data: dict) -> str:
    """One table per validation run: configuration, device, figure, dry run, full load, difference."""
    meta = data["meta"]
    head = (f"### {meta.get('title', 'dry run vs full load')}\n\n"
            f"{meta.get('backend')} · llama.cpp {meta.get('llama_cpp')} · model {meta.get('model')} · "
            f"budgets {meta.get('budgets') or 'none'} · {meta.get('when', '')}\n\n"
            "| build | setting | device | figure | dry run | full load | dry − full | identical | llama-fit-params |\n"
            "|---|---|---|---|---:|---:|---:|:-:|---:|\n")
    lines = []
    for c in data["configs"]:
        if c["status"] != "ok" or c["load_error"]:
            lines.append(f"| {c['build']} | {c['setting']} | | | {c['reason'] or ''} | {c['load_error'] or ''} | | | |")
            continue
        for r in c["rows"]:
            lines.append(f"| {c['build']} | {c['setting']} | {r['where']} | {r['figure']} | {_fmt(r['dry'])} | "
                         f"{_fmt(r['full'])} | {_fmt(r['diff'], sign=True)} | {'yes' if r['ok'] else '**no**'} | "
                         f"{_fmt(r.get('fitparams'))} |")
    return head + "\n".join(lines) + "\n"


def _fmt(v, sign: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:+.2f}" if sign else f"{v:.2f}"
    return f"{int(v):+d}" if sign else str(int(v))


def summary_markdown(data: dict) -> str:
    """Per figure: how many rows were identical, and the largest |dry − full|."""
    stats: dict[tuple[str, str], list] = {}
    for c in data["configs"]:
        for r in c["rows"]:
            idx = r.get("device_index")
            kind = r["where"] if idx is None else ("first device" if idx == 0 else "later devices")
            key = (r["figure"], kind if r["figure"] in FIGURES else "")
            s = stats.setdefault(key, [0, 0, 0.0])
            s[0] += 1
            s[1] += 1 if r["ok"] else 0
            s[2] = max(s[2], abs(r["diff"] or 0.0))
    lines = ["| figure | where | identical | largest abs(dry − full) |", "|---|---|---:|---:|"]
    for (fig, where), (n, ok, worst) in sorted(stats.items()):
        lines.append(f"| {fig} | {where} | {ok}/{n} | {worst:.2f} |")
    return "\n".join(lines) + "\n"


def cross_rows(dry: dict, full: dict) -> list[dict]:
    """One run's dry-run figures against another run's full loads (e.g. CPU-RPC plan vs H200 load), matched by
    build, setting, figure and device *position* (RPC1 ↔ CUDA1). Pure."""
    def index(data: dict, value: str) -> dict:
        out = {}
        for c in data["configs"]:
            names = [r["where"] for r in c["rows"] if r["where"] not in ("host", "all")]
            order = list(dict.fromkeys(names))
            for r in c["rows"]:
                pos = r["where"] if r["where"] in ("host", "all") else f"device {order.index(r['where'])}"
                out[(c["build"], c["setting"], pos, r["figure"])] = r[value]
        return out

    a, b = index(dry, "dry"), index(full, "full")
    rows = []
    for key, dv in a.items():
        if key in b:
            fv = b[key]
            err = None if dv is None or fv is None else round(dv - fv, 2)
            rel = None if err is None or not fv else round(100 * err / fv, 1)
            rows.append({"build": key[0], "setting": key[1], "where": key[2], "figure": key[3], "dry": dv,
                         "full": fv, "error": err, "error_pct": rel})
    return rows


def cross_markdown(dry: dict, full: dict) -> str:
    rows = cross_rows(dry, full)
    head = (f"### {dry['meta'].get('label')} dry run vs {full['meta'].get('label')} full load\n\n"
            f"budgets {dry['meta'].get('budgets')} / {full['meta'].get('budgets')}\n\n"
            f"| build | setting | where | figure | {dry['meta'].get('label')} dry | {full['meta'].get('label')} full "
            "| error | error % |\n|---|---|---|---|---:|---:|---:|---:|\n")
    body = "\n".join(f"| {r['build']} | {r['setting']} | {r['where']} | {r['figure']} | {_fmt(r['dry'])} | "
                     f"{_fmt(r['full'])} | {_fmt(r['error'], sign=True)} | "
                     f"{_pct(r['error_pct'])} |" for r in rows)
    return head + body + "\n"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:+.1f}"


def condensed_markdown(data: dict) -> str:
    """One row per configuration: each figure as `dry / full` (one number where both agree)."""
    def cell(rows: dict, where: str, fig: str) -> str:
        r = rows.get((where, fig))
        if r is None:
            return "–"
        if r["ok"] and fig != "model":
            return _fmt(r["full"])
        return f"{_fmt(r['dry'])} / {_fmt(r['full'])}"

    devs: list[str] = []
    for c in data["configs"]:
        for r in c["rows"]:
            if r.get("device_index") is not None and r["where"] not in devs:
                devs.append(r["where"])
    head = ["build", "setting", "n_ctx", "copies"]
    for d in devs:
        head += [f"{d} model", f"{d} context", f"{d} compute"]
    head += ["host compute", "fit-params compute"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    for c in data["configs"]:
        rows = {(r["where"], r["figure"]): r for r in c["rows"]}
        if not rows:
            out.append(f"| {c['build']} | {c['setting']} | {c['reason'] or c['load_error'] or ''} |")
            continue
        cells = [c["build"], c["setting"], cell(rows, "all", "n_ctx"), cell(rows, "all", "sched_copies")]
        for d in devs:
            cells += [cell(rows, d, "model"), cell(rows, d, "context"), cell(rows, d, "compute")]
        cells.append(cell(rows, "host", "compute"))
        fp = [rows.get((w, "compute"), {}).get("fitparams") for w in [*devs, "host"]]
        cells.append(" / ".join(_fmt(v) for v in fp))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
