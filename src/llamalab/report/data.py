"""A run as stored: what every renderer takes. Loaded from the database only, never from a live run."""

from __future__ import annotations

import json
import sys
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from ..core.errors import ConfigError, StoreError
from ..logs.order import device_names, without_endpoint
from ..store import jsoncol
from ..store.db import Store
from . import records
from .records import BuildRecord, ConfigRecord, RunRecord, TrialRecord

if TYPE_CHECKING:
    from ..study.spec import BuildSpec, Study


@dataclass
class RunData:
    run: RunRecord
    builds: list[BuildRecord]
    configs: list[ConfigRecord]  # each with its `ledger` (None where none was stored)
    trials: list[TrialRecord]
    system: dict | None = None
    study_toml: str = ""
    extra: dict = field(default_factory=dict)
    # the run's stored rows by table, each `x_json` column decoded under `x` (`records.readable`), but trials
    tables: dict[str, list[dict]] = field(default_factory=dict)
    has_requests: bool = True  # False: each trial has its `figures` instead of its `requests` (see `load`)
    # with has_requests False: every stored trial row again, readable, requests and all, read from the database
    # one at a time (CSV and JSON print every request: they stream them)
    stored_trials: Callable[[], Iterator[TrialRecord]] | None = None
    # what a report module computes from the run alone, kept by name so that each figure is computed once per report
    memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def id(self) -> str:
        return self.run["id"]

    @cached_property
    def study(self) -> dict:
        """The run's effective study file, parsed once ({} where it cannot be read)."""
        import tomllib

        try:
            d = tomllib.loads(self.study_toml or "")
        except (tomllib.TOMLDecodeError, TypeError, RecursionError):
            return {}
        return d if isinstance(d, dict) else {}

    @cached_property
    def study_spec(self) -> Study | None:
        """The run's effective study through the study model (`llamalab.study.spec`), once; None where this
        llamalab's model rejects it (a study stored by another version, or altered): the readers below then take the
        file's own keys, as far as they go."""
        from ..study import spec

        try:
            return spec.parse(self.study, "the run's stored study")
        except ConfigError:
            return None

    def study_names(self, table: Literal["builds", "settings"]) -> list[str]:
        """The names of the study's `[[builds]]` or `[[settings]]`, in the file's order."""
        if (st := self.study_spec) is not None:
            return [e.name for e in (st.builds if table == "builds" else st.settings)]
        return [e["name"] for e in self.study.get(table) or [] if isinstance(e, dict) and "name" in e]

    def build_spec(self, name: str) -> BuildSpec:
        """The study's `[[builds]]` entry of that name (an empty one named so where the study does not list it)."""
        from ..study.spec import BuildSpec

        if (st := self.study_spec) is not None:  # (a stored name the study lacks may be one it would refuse)
            return next((b for b in st.builds if b.name == name), BuildSpec.model_construct(name=name))
        raw = next((e for e in self.study.get("builds") or [] if isinstance(e, dict) and e.get("name") == name), {})
        # a study the model rejects: its entry's keys as they are (a renderer reads them as it read the file's)
        return BuildSpec.model_construct(**{"name": name, **{k: v for k, v in raw.items() if isinstance(k, str)}})

    def build_label(self, name: str) -> str:
        return self.build_spec(name).label or name

    def engine(self, name: str) -> str:
        """The engine a build ran (the run's options record those not llama.cpp's: run.runner.run_engines)."""
        opts = self.run.get("options")
        engines = opts.get("engines") if isinstance(opts, dict) else None
        got = engines.get(name) if isinstance(engines, dict) else None
        return got if isinstance(got, str) else "llama.cpp"

    @property
    def server_args(self) -> list[str]:
        """The study's `[server] args`."""
        if (st := self.study_spec) is not None:
            return list(st.server.args)
        return list((self.study.get("server") or {}).get("args") or [])

    @property
    def threshold(self) -> float | None:
        """The study's `[workload] threshold`, where it gives one that can be one."""
        v = self.study_spec.workload.threshold if self.study_spec is not None else \
            (self.study.get("workload") or {}).get("threshold")
        return float(v) if isinstance(v, (int, float)) and v >= 0 else None

    def ok_configs(self) -> list[ConfigRecord]:
        """The last successful configuration row per (build, setting) — the one whose ledger describes it."""
        out: dict[tuple[str, str], ConfigRecord] = {}
        for c in self.configs:
            if c["status"] == "ok" and c.get("ledger"):
                out[(c["build"], c["setting"])] = c
        return list(out.values())

    @cached_property
    def default_cell(self) -> tuple[int, int]:
        """The workload cell of trials that carry none (runs from before the grid, RunData made by hand)."""
        from ..store.migrations import legacy_cell

        return legacy_cell(self.study_toml)

    def cell(self, trial: Mapping[str, Any]) -> tuple[int, int]:
        """(prompt tokens, output tokens) each request of the trial asked for."""
        p, o = trial.get("cell_prompt_tokens"), trial.get("cell_output_tokens")
        d = self.default_cell
        return (d[0] if p is None else int(p), d[1] if o is None else int(o))

    @cached_property
    def cells(self) -> list[tuple[int, int]]:
        """Every workload cell the run's trials measured, by prompt then output tokens."""
        return sorted({self.cell(t) for t in self.trials})

    @property
    def output_mode(self) -> str:
        """`fixed` (exactly the output tokens asked for) or `natural` (stop at end of text)."""
        v = self.study_spec.workload.output if self.study_spec is not None else \
            (self.study.get("workload") or {}).get("output")
        return v if v in ("fixed", "natural") else "fixed"

    @property
    def model(self) -> dict:
        """The run's model header figures (`runs.model_json`; {} where none were stored)."""
        m = self.run.get("model")
        return m if isinstance(m, dict) else {}

    def n_ctx_train(self, ledger: dict | None = None) -> int | None:
        """The model's training context: from a ledger (`print_info: n_ctx_train`), else the run's model header."""
        v = (ledger or {}).get("n_ctx_train")
        if not v:
            model = self.model
            v = model.get("n_ctx_train")
        return int(v) if v else None

    def server_argv(self, build: str, setting: str) -> list[str]:
        """The llama-server command the last successful configuration of (build, setting) ran ([] where unknown)."""
        for c in reversed(self.configs):
            if c["build"] == build and c["setting"] == setting and c["status"] == "ok":
                return records.server_argv(c)
        return []

    def ledger_for(self, build: str, setting: str) -> dict | None:
        for c in reversed(self.configs):
            if c["build"] == build and c["setting"] == setting and c.get("ledger") and c["status"] == "ok":
                return c["ledger"]
        return None


def load(store: Store, run_id: str | None = None, *, requests: bool = True) -> RunData:
    """One stored run, checked (`runrows`, row by row) before any renderer sees it: a database that an older llamalab
    filled from an unchecked import may hold values of the wrong type, and that is an error with a tip, not a crash.
    Each trial row is read, decoded and checked once; `tables` keeps the other tables' rows as stored.

    `requests=False` keeps of each trial's requests only what the speed figures take (`Figures`, under `figures`):
    enough for Markdown, HTML, the terminal and `compare`, in a fifth of the memory (a run of 128,000 trials of up to
    8 requests each: 780 MB of request objects otherwise). CSV and JSON, which print every request, then read them
    again row by row (`stored_trials`, while `store` is open)."""
    import gc

    from ..store import exchange, runrows

    rid = store.run(run_id)["id"]
    tables: dict[str, list[dict]] = {}
    trials: list[TrialRecord] = []
    collecting = gc.isenabled()
    gc.disable()  # the rows hold no cycles: a collection per 700 new objects would make the load quadratic-ish
    try:
        for t, _raw, row in exchange.stored_rows(store, rid):  # each row checked, its JSON columns decoded once
            if t == "trials":
                trials.append(_readable_trial(row, requests))
            else:
                tables.setdefault(t, []).append(readable(row))
        run: RunRecord = tables["runs"][0]  # type: ignore[assignment]
        system = tables.get("system_info") or []
        return RunData(run=run, builds=tables.get("builds", []),  # type: ignore[arg-type]
                       configs=_configs(tables), trials=trials,
                       system=system[0].get("info") if system else None, study_toml=run.get("study_toml") or "",
                       tables=tables, has_requests=requests,
                       stored_trials=None if requests else lambda: _stored_trials(store, rid))
    except runrows.Invalid as e:
        problem = e.text
    finally:
        if collecting:
            gc.enable()
    raise StoreError(f"run {rid!r} in {store.path} cannot be reported: {problem}.",
                     tip="it was probably imported by an older llamalab from a damaged or altered file: import a "
                         "good export of it into a new database (--db).")


def readable(row: Mapping[str, Any]) -> dict:
    """A row whose `x_json` columns hold decoded values (`exchange.decode_row`) with each under the key `x`, in its
    place: the one renaming every record takes."""
    return {(k[:-len(jsoncol.SUFFIX)] if k.endswith(jsoncol.SUFFIX) else k): v for k, v in row.items()}


def _configs(tables: dict[str, list[dict]]) -> list[ConfigRecord]:
    """Each stored configuration with its ledger, in id order (what `Store.configs` reads)."""
    ledgers = {r["config_id"]: r.get("ledger") for r in tables.get("ledgers", [])}
    return [{**c, "ledger": ledgers.get(c["id"])} for c in tables.get("configs", [])]


def _stored_trials(store: Store, rid: str) -> Iterator[TrialRecord]:
    from ..store import exchange, runrows

    for raw in store.rows("trials", rid):
        row = exchange.decode_row(raw)
        try:
            runrows.ROWS["trials"].model_validate(row)
        except runrows.ValidationError as e:  # changed since it was loaded
            raise StoreError(f"run {rid!r} in {store.path} cannot be reported: {runrows.describe(e, 'a trial')}.",
                             tip="report it again once nothing writes to it.") from None
        yield _readable_trial(row)


@dataclass(frozen=True, slots=True)
class Figures:
    """What the speed figures take from a trial's requests (those without an error): each one's time to first token
    (ms), every inter-token gap (ms), and the aggregate prompt t/s (prompt tokens of all of them per second until
    the last had its first token: they are sent together)."""
    ttfts_ms: array
    itls_ms: array
    aggregate_input_tps: float | None


def request_figures(requests: list[dict] | None) -> Figures:
    ok = [r for r in requests or [] if not r.get("error")]
    ttfts = array("d", (r["ttft_s"] * 1000.0 for r in ok if r.get("ttft_s") is not None))
    itls = array("d", (float(g) for r in ok for g in r.get("itl_ms") or ()))
    prompts = [r for r in ok if r.get("prompt_n") and r.get("ttft_s")]
    last = max((r["ttft_s"] for r in prompts), default=0)
    agg = sum(r["prompt_n"] for r in prompts) / last if prompts and last > 0 else None
    return Figures(ttfts, itls, agg)


def figures(trial: TrialRecord) -> Figures:
    """A trial's `Figures`: kept by `load(requests=False)`, else made from its requests."""
    f = trial.get("figures")
    return f if isinstance(f, Figures) else request_figures(trial.get("requests"))


_SHARED = ("run_id", "build", "setting")  # the same few strings in every trial row: kept once


def _readable_trial(row: dict, requests: bool = True) -> TrialRecord:
    """A trial row (JSON columns decoded) as reports read it: `requests_json` under `requests`, in its place (or
    its `figures` there, without `requests`)."""
    out = {}
    for k, v in row.items():
        if k == "requests_json" and not requests:
            k, v = "figures", request_figures(v)
        elif k.endswith(jsoncol.SUFFIX):
            k = k[:-len(jsoncol.SUFFIX)]
        elif k in _SHARED and isinstance(v, str):
            v = sys.intern(v)
        out[k] = v
    return out  # type: ignore[return-value]


def file_id(data: RunData) -> str:
    """The run's id checked for use in a file name (digits, hex and '-': `store.runids`)."""
    from ..store import runids

    return runids.check(data.id, "the run's id")


def device_labels(names: list[str]) -> list[str]:
    """Stable column names for devices: printed names without endpoints; position-numbered where they collide
    (every local rpc-server's device prints as RPC0[host:port], on a different port each run)."""
    bases = [without_endpoint(n) for n in names]
    if len(set(bases)) == len(bases):
        return bases
    stems = [b.rstrip("0123456789") for b in bases]
    return [f"{s}{i}" for i, s in enumerate(stems)]


def compute_by_label(ledger: dict) -> dict[str, float | None]:
    names = device_names(ledger)
    return {lab: ledger["devices"][n].get("compute_mib") for lab, n in zip(device_labels(names), names)}


def host_by_type(ledger: dict) -> dict[str, float]:
    """Every host buffer type (CPU, CPU_Mapped, CPU_REPACK, AMX, CUDA_Host …) with its total MiB (weights, KV,
    compute, output and input together), in the log's order."""
    kinds = ("model_mib", "kv_mib", "rs_mib", "compute_mib", "output_mib", "input_mib")
    return {name: round(sum(b.get(k) or 0.0 for k in kinds), 2) for name, b in (ledger.get("host") or {}).items()}


def host_compute(ledger: dict) -> float | None:
    vals = [b.get("compute_mib") for b in ledger.get("host", {}).values() if b.get("compute_mib") is not None]
    return round(sum(vals), 2) if vals else None


def dumps(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, default=str)
