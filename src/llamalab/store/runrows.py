"""The shape of a stored run, as pydantic models: the check at the boundary where a run comes from outside (pure).

`llamalab import` checks an exported document against these models before anything is written, and reports (and
`export`) check a run read back from a database (which an older llamalab may have filled from an unchecked file)
before rendering it. A value of the wrong type, a missing id, or a run id that is not one (`../../x`) is a clear
error naming the place, never a traceback later. Columns a newer llamalab added are allowed here (`extra`) and
refused, with an "upgrade" tip, by the store, which knows its own columns.

Validation is strict: a string is never taken for a number, nor `true` for 1; numbers are finite (no NaN or
Infinity), whole numbers fit SQLite's 64 bits and other numbers lie within ±1e15, so that no report arithmetic
overflows. What reports read inside the JSON columns (the model, the machine, the ledger, the requests) is typed
too; the rest of a JSON column may hold anything JSON holds, nested at most MAX_DEPTH deep.

Rows are checked one at a time (`Check`): a run of 128,000 trials is checked in memory that grows with its
configurations and trial keys, not with its rows.

Why one module of ~700 lines: it is declarative, one pydantic model per stored table and per JSON column the
reports read, and `Check` validates a run against all of them at once; the models are read as one schema.
"""

from __future__ import annotations

import math
import tomllib
from collections import Counter
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..core.records import RequestResult
from . import runids
from .jsoncol import Row

__all__ = ["Check", "Invalid", "ROWS", "ValidationError", "describe"]

MAX_DEPTH = 64  # JSON nested deeper than this in a column is no llamalab's
BIG = 1e15  # MiB, seconds, tokens per second: far beyond any real figure, far below overflow


def _run_id(v: str) -> str:
    if not runids.is_run_id(v):
        raise ValueError(f"{v[:80]!r} is not a llamalab run id (they look like {runids.EXAMPLE})")
    return v


def shallow(value: Any, limit: int = MAX_DEPTH) -> Any:
    """`value` if it is nested at most `limit` deep and holds only finite numbers (checked without recursion)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict | list):
            if depth > limit:
                raise ValueError(f"nested more than {limit} deep")
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
        elif isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{v} is not a finite number")
    return value


def _toml(v: str) -> str:
    """A stored study: TOML that reads back (nested as a study is, not thousands deep), shaped as reports read it
    (`_Study`)."""
    try:
        data = shallow(tomllib.loads(v), 16)
    except (tomllib.TOMLDecodeError, RecursionError, ValueError) as e:
        raise ValueError(f"the stored study is not a TOML study file ({str(e)[:80] or type(e).__name__})") from None
    try:
        _Study.model_validate(data)
    except ValidationError as e:
        raise ValueError(f"the stored study is not a study llamalab wrote: {describe(e, 'study', 1)}") from None
    return v


RunId = Annotated[str, AfterValidator(_run_id)]
Json = Annotated[dict[str, Any], AfterValidator(shallow)]
JsonList = Annotated[list[Any], AfterValidator(shallow)]
SqlInt = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
Count = Annotated[int, Field(ge=0, le=2**63 - 1)]
Real = Annotated[float, Field(ge=-BIG, le=BIG)]
Num = Real | None
Int = SqlInt | None


class _Row(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)

    @model_validator(mode="after")
    def _extra_shallow(self) -> Self:
        if self.model_extra:
            shallow(self.model_extra)
        return self


# ---------------------------------------------------------------- the stored study, as reports read it


class _StudyEntry(_Row):
    """A `[[builds]]` or `[[settings]]` entry."""
    name: str
    label: str | None = None
    args: list[str] = Field(default_factory=list)
    cmake: dict[str, str | SqlInt | bool] = Field(default_factory=dict)
    min_devices: Int = None
    requires: list[str] = Field(default_factory=list)
    bin: str | None = None
    source: str | None = None


class _StudyWorkload(_Row):
    prompt_tokens: Count | list[Count] | None = None
    output_tokens: Count | list[Count] | None = None
    output: str | None = None
    repeats: Int = None
    warmup: Int = None
    concurrency: list[Count] = Field(default_factory=list)
    order: str | None = None
    threshold: Annotated[float, Field(ge=0, lt=1)] | None = None
    request_timeout_s: Num = None


class _StudyServer(_Row):
    args: list[str] = Field(default_factory=list)
    ctx: Int = None
    parallel: Int = None
    host: str | None = None
    fit_target_mib: list[SqlInt] | None = None
    ready_timeout_s: Num = None


class _StudyDevices(_Row):
    backend: str | None = None
    count: Int = None
    host: str | None = None
    vram: list[str] | None = None
    rpc: list[str | dict[str, Any]] = Field(default_factory=list)


class _Study(_Row):
    """A run's effective study (`runs.study_toml`): the keys reports read, typed; the rest as TOML holds it."""
    name: str | None = None
    description: str | None = None
    builds: list[_StudyEntry] = Field(default_factory=list)
    settings: list[_StudyEntry] = Field(default_factory=list)
    workload: _StudyWorkload | None = None
    server: _StudyServer | None = None
    devices: _StudyDevices | None = None
    model: dict[str, Any] | None = None
    source: dict[str, Any] | None = None
    tune: dict[str, Any] | None = None


# ---------------------------------------------------------------- JSON columns that reports read


class _Buffers(_Row):
    model_mib: Num = None
    kv_mib: Num = None
    rs_mib: Num = None
    compute_mib: Num = None
    output_mib: Num = None
    input_mib: Num = None
    total_mib: Num = None


class _Meta(_Row):
    """-sm tensor: the Meta() buffers as printed and how they were attributed (ledger.split_meta)."""
    printed: dict[str, dict[str, Num]] = Field(default_factory=dict)
    devices: list[str] = Field(default_factory=list)
    shares: list[Real] = Field(default_factory=list)
    shares_from: str | None = None
    kv_total_mib: Num = None
    exact: list[str] = Field(default_factory=list)
    estimated: list[str] = Field(default_factory=list)
    attributed: bool = False
    note: str = ""


class _BreakdownRow(_Row):
    name: str | None = None
    total: Num = None
    free: Num = None
    self_: Num = None
    model: Num = None
    context: Num = None
    compute: Num = None
    unaccounted: Num = None


class _Kv(_Row):
    size_mib: Num = None
    cells: Int = None
    layers: Int = None
    n_stream: Int = None
    k_type: str | None = None
    v_type: str | None = None
    k_mib: Num = None
    v_mib: Num = None
    buffers: dict[str, Real] | None = None


class _Ledger(_Row):
    devices: dict[str, _Buffers] = Field(default_factory=dict)
    host: dict[str, _Buffers] = Field(default_factory=dict)
    pipeline_parallel: bool | None = None
    n_copies: Int = None
    sched_copies: Int = None
    pp_enabled_copies: Int = None
    pp_enabled_line: bool | None = None
    pp_retry: bool | None = None
    pp_dropped_reason: str | None = None
    meta: _Meta | None = None
    wrapper: str | None = None
    graph_splits: Int = None
    n_ctx: Int = None
    n_ctx_seq: Int = None
    n_ctx_train: Int = None
    fit_ctx_from: Int = None
    fit_ctx_to: Int = None
    kv: _Kv | None = None
    kv_caches: list[_Kv] = Field(default_factory=list)
    breakdown_projected: list[_BreakdownRow] = Field(default_factory=list)
    breakdown_final: list[_BreakdownRow] = Field(default_factory=list)
    device_memory: dict[str, list[SqlInt]] = Field(default_factory=dict)
    device_desc: dict[str, str] = Field(default_factory=dict)
    kv_bytes_per_token: dict[str, Real] = Field(default_factory=dict)
    one_copy_saving: Json | None = None


class _Model(_Row):
    """The run's model (`runs.model_json`: the GGUF header's figures)."""
    name: str | None = None
    path: str | None = None
    architecture: str | None = None
    fingerprint: str | None = None
    size_bytes: Num = None
    n_ctx_train: Int = None
    n_embd: Int = None
    n_head: Int = None
    n_head_kv: Int = None
    n_layer: Int = None
    n_tensors: Int = None
    n_vocab: Int = None
    n_expert: Int = None
    splits: Int = None


class _Gpu(_Row):
    name: str | None = None
    index: Int = None
    total_mib: Num = None
    driver: str | None = None
    compute_capability: str | None = None


class _Binaries(_Row):
    dir: str | None = None


class _Source(_Row):
    """The llama.cpp a run used (`system_info.info_json.llama_cpp`)."""
    version: str | None = None
    commit: str | None = None
    build_number: Int = None
    dirty: bool | None = None
    origin: str | None = None
    path: str | None = None
    binaries: list[_Binaries] = Field(default_factory=list)


class _System(_Row):
    """The machine (`system_info.info_json`)."""
    cpu: str | None = None
    cores: Int = None
    ram_mib: Num = None
    os: str | None = None
    python: str | None = None
    llamalab: str | None = None
    gpus: list[_Gpu] = Field(default_factory=list)
    gpu_driver: str | None = None
    gpu_tools: Json | None = None
    llama_cpp: _Source | None = None
    loadavg: list[Real] = Field(default_factory=list)


class _Options(_Row):
    backend: str | None = None
    engines: dict[str, Literal["ik_llama.cpp"]] | None = None  # build → its engine, where not llama.cpp


class _Remote(_Row):
    """One remote rpc-server's device as a configuration stored it (rig.remote.RemoteDevice)."""
    key: str | None = None
    endpoint: str | None = None
    name: str | None = None
    index: Int = None
    backend: str | None = None
    backend_source: str | None = None
    description: str | None = None
    total_mib: Num = None
    free_mib: Num = None


class _Emulation(_Row):
    budgets_mib: list[Real] | None = None


class _ConfigDevices(_Row):
    """What a configuration ran on (`configs.devices_json`): the parts reports read."""
    remotes: list[_Remote] = Field(default_factory=list)
    emulation: _Emulation | None = None


# ---------------------------------------------------------------- one model per table


class RunRow(_Row):
    id: RunId
    study: str
    study_toml: Annotated[str, AfterValidator(_toml)]
    study_hash: str
    status: Literal["running", "finished", "interrupted", "failed"]
    started: str
    finished: str | None = None
    host: str
    llamalab_version: str | None = None
    model_json: _Model | None = None
    devices_json: Json | None = None
    options_json: _Options | None = None


class SystemRow(_Row):
    info_json: _System


class BuildRow(_Row):
    name: str
    status: Literal["ok", "skipped", "failed", "not-applicable"]
    reason: str | None = None
    key: str | None = None
    source_version: str | None = None
    source_commit: str | None = None
    source_origin: str | None = None
    options_json: dict[str, str | SqlInt | bool] | None = None
    cmake_argv_json: list[str] | None = None
    build_seconds: Num = None
    reused: Int = None
    binary_json: Json | None = None


class ConfigRow(_Row):
    id: Count
    build: str
    setting: str
    status: Literal["ok", "failed", "skipped", "running", "interrupted", "not-applicable"]
    pass_: Count = Field(default=0, alias="pass")
    reason: str | None = None
    server_argv_json: list[str] | None = None
    env_json: dict[str, str] | None = None
    log_path: str | None = None
    devices_json: _ConfigDevices | None = None
    load_seconds: Num = None
    started: str | None = None
    finished: str | None = None
    nvml_json: Json | None = None


class LedgerRow(_Row):
    config_id: Count
    pipeline_parallel: Int = None
    sched_copies: Int = None
    n_ctx: Int = None
    graph_splits: Int = None
    ledger_json: _Ledger


class BufferRow(_Row):
    config_id: Count
    name: str
    is_host: SqlInt
    model_mib: Num = None
    kv_mib: Num = None
    rs_mib: Num = None
    compute_mib: Num = None
    output_mib: Num = None


class _Request(_Row):
    index: Count
    prompt_n: Int = None
    prompt_ms: Num = None
    prompt_tps: Num = None
    predicted_n: Int = None
    predicted_ms: Num = None
    predicted_tps: Num = None
    wall_s: Num = None
    ttft_s: Num = None
    itl_ms: list[Real] = Field(default_factory=list)
    stop_type: str | None = None
    error: str | None = None


assert set(_Request.model_fields) == set(RequestResult.__dataclass_fields__), "keep _Request in step with records"


class TrialRow(_Row):
    id: Int = None
    config_id: Count
    build: str
    setting: str
    trial: Count
    concurrency: Count
    input_tokens: Int = None
    input_tps: Num = None
    output_tokens: Int = None
    output_tps: Num = None
    wall_s: Num = None
    aggregate_output_tps: Num = None
    aggregate_total_tps: Num = None
    errors: Count = 0
    started: Num = None
    requests_json: list[_Request]
    foreign_load: Num = None
    cell_prompt_tokens: Int = None  # the workload cell (prompt and output tokens per request); absent before the grid
    cell_output_tokens: Int = None


class CrosscheckRow(_Row):
    build: str
    setting: str
    result_json: Json
    error: str | None = None


class ContextCheckRow(_Row):
    build: str
    setting: str
    mode: Literal["verify", "search"]
    fitted_n_ctx: Int = None
    verified: Int = None
    max_loaded_n_ctx: Int = None
    steps_json: list[Json]


class _TuneKld(_Row):
    """One K/V pair's quality against f16/f16 (quality/kld.py `Kld`)."""
    kv: str | None = None
    mean: Real | None = None
    mean_err: Real | None = None
    p99: Real | None = None
    same_top_pct: Real | None = None
    same_top_err: Real | None = None
    ppl_ratio: Real | None = None
    positions: Int = None
    cached: bool | None = None


class _TuneConfig(_Row):
    """A configuration of a tune's search (`tunes.result_json`: `default`, each of `candidates`)."""
    build: str | None = None
    label: str | None = None
    status: str | None = None
    reason: str | None = None
    args: list[str] | None = None
    n_ctx: Int = None
    predicted_n_ctx: Int = None
    devices_mib: list[Real | None] | None = None
    host_mib: Num = None
    over_budget: bool | None = None
    fit_split: bool | None = None
    kld: _TuneKld | None = None
    ctk: str | None = None
    ctv: str | None = None


class _TuneQuality(_Row):
    by_pair: dict[str, _TuneKld] = Field(default_factory=dict)
    measured: bool | None = None
    method: str | None = None
    corpus: Json = Field(default_factory=dict)


class _TuneExtension(_Row):
    names: list[str] = Field(default_factory=list)
    trials: list[SqlInt] = Field(default_factory=list)
    why: list[str] = Field(default_factory=list)


class _TuneRig(_Row):
    devices: list[str] = Field(default_factory=list)
    budgets_mib: list[Real] = Field(default_factory=list)
    margins_mib: list[Real] = Field(default_factory=list)
    budgets_given: bool | None = None


class _TuneSpace(_Row):
    splits: list[str] = Field(default_factory=list)
    kv: list[str] = Field(default_factory=list)
    ubatch: list[SqlInt] = Field(default_factory=list)
    n_cpu_moe: list[SqlInt] | None = None
    not_searched: dict[str, str] = Field(default_factory=dict)


class _TuneStage1(_Row):
    by_status: dict[str, SqlInt] = Field(default_factory=dict)
    enumerated: Int = None
    dry_runs: Int = None
    seconds: Num = None


class _TuneStage2(_Row):
    real: list[str] = Field(default_factory=list)
    screened_out: dict[str, str] = Field(default_factory=dict)
    seconds: Num = None
    mode: str | None = None
    trials: Int = None
    trials_exhaustive: Int = None
    trials_before_extension: Int = None
    time_budget_s: Num = None
    time_left_out: list[str] = Field(default_factory=list)
    extended: list[_TuneExtension] = Field(default_factory=list)


class _TuneModel(_Row):
    path: str | None = None
    n_expert: Int = None


class _Tune(_Row):
    """What `llamalab tune` stored (`tunes.result_json`): the parts report/analysis/tune.py reads."""
    default: _TuneConfig | None = None
    candidates: list[_TuneConfig] = Field(default_factory=list)
    goal: str | None = None
    parallel: Annotated[int, Field(ge=1, le=4096)] | None = None
    threshold: Annotated[float, Field(ge=0, lt=1)] | None = None
    min_context: Count | None = None
    min_gen_tps: Annotated[float, Field(ge=0, le=BIG)] | None = None
    need_context: Count | None = None
    model: _TuneModel | None = None
    rig: _TuneRig | None = None
    space: _TuneSpace | None = None
    stage1: _TuneStage1 | None = None
    stage2: _TuneStage2 | None = None
    notes: list[str] = Field(default_factory=list)
    quality: _TuneQuality | None = None
    max_kld: Num = None
    repeats: Int = None


class _TuneRule(_Row):
    default: str | None = None
    goal: str | None = None
    threshold: Annotated[float, Field(ge=0, lt=1)] | None = None
    floor_ctx: Count | None = None
    min_gen_tps: Annotated[float, Field(ge=0, le=BIG)] | None = None
    default_fits: bool | None = None
    kld: dict[str, Real] | None = None
    max_kld: Num = None
    differs: dict[str, str] | None = None  # members whose outputs differ from the default's (the output check)


class _TunePick(_Row):
    """What a tune decided (`tune_picks.pick_json`: tune/pick.py `Decision`)."""
    build: str
    reason: str
    considered: list[str] = Field(default_factory=list)
    floor: str | None = None
    tied: list[str] = Field(default_factory=list)  # goal throughput: those not measurably slower than the reference
    undecided: list[str] = Field(default_factory=list)
    repeats: Annotated[int, Field(ge=1, le=4096)] | None = None
    rule: _TuneRule | None = None


class TuneRow(_Row):
    result_json: _Tune


class TunePickRow(_Row):
    pick_json: _TunePick


class _Limit(_Row):
    """One answer of a search for the context within the budgets (fit/budgetfit.py `Limit`)."""
    n_ctx: Int = None
    exact: bool | None = None
    over_mib: Num = None
    worst: str | None = None
    over_at: Int = None
    error: str | None = None


class _BudgetVerify(_Row):
    n_ctx: Int = None
    loaded: bool | None = None
    reason: str | None = None
    device_mib: dict[str, Real] = Field(default_factory=dict)
    n_ctx_loaded_within: Int = None


class _BudgetFit(_Row):
    """`budget_fits.result_json`: the parts report/analysis/context.py reads."""
    budget: _Limit | None = None
    margin: _Limit | None = None
    verify: _BudgetVerify | None = None
    fitted_n_ctx: Int = None
    why: str | None = None


class BudgetFitRow(_Row):
    build: str
    setting: str
    budget_n_ctx: Int = None
    margin_n_ctx: Int = None
    verified: Int = None
    result_json: _BudgetFit


class _Generated(_Row):
    """One generated sequence of a reference generation (quality/outputs.py `Generated`)."""
    prompt: Count = 0
    tokens: list[SqlInt] = Field(default_factory=list)
    pieces: list[str] = Field(default_factory=list)
    top: list[list[JsonList]] = Field(default_factory=list)  # per position: [token id, log-probability] …


class _References(_Row):
    sequences: list[_Generated] = Field(default_factory=list)
    prompts: JsonList = Field(default_factory=list)
    n_predict: Count | None = None
    n_probs: Count | None = None
    concurrency: Count | None = None
    seconds: Num = None
    error: str | None = None


class OutputRow(_Row):
    build: str
    setting: str
    mode: Literal["single", "parallel"]
    rep: Annotated[int, Field(ge=1, le=16)]
    result_json: _References


class OutputLogitsRow(_Row):
    build: str
    setting: str
    baseline: str
    result_json: Json


# The model of each table's rows (the store's tables that hold one run, parents first).
ROWS: dict[str, type[_Row]] = {
    "runs": RunRow, "system_info": SystemRow, "builds": BuildRow, "configs": ConfigRow, "ledgers": LedgerRow,
    "buffers": BufferRow, "trials": TrialRow, "crosschecks": CrosscheckRow, "context_checks": ContextCheckRow,
    "tunes": TuneRow, "budget_fits": BudgetFitRow, "tune_picks": TunePickRow, "outputs": OutputRow,
    "output_logits": OutputLogitsRow,
}


class Invalid(ValueError):
    """A run that is not one llamalab could have stored: `text` says where and what (`tables.trials[3].output_tps:
    Input should be a finite number`)."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


# a trial's key: build, setting, trial, concurrency, and the workload cell's prompt and output tokens
TrialKey = tuple[str, str, int, int, int | None, int | None]


class Check:
    """A run's rows checked one at a time: `row(table, row)` validates the row against its table's model (its JSON
    columns decoded); `done()` makes the checks between rows: one runs row, at most one tunes row, configuration ids
    unique, every ledger, buffer and trial row pointing at a configuration of the run, no trial stored twice (by
    build, setting, trial, concurrency and workload cell). Duplicates are counted (`Counter`, sets), never searched
    for row by row: linear in the rows."""

    def __init__(self, run_id: str | None = None):
        self.run_id = run_id
        self.counts: Counter[str] = Counter()
        self.config_ids: list[int] = []  # in the order the rows came
        self.run: RunRow | None = None
        self._ids: Counter[int] = Counter()
        self._refs: dict[str, set[int]] = {"ledgers": set(), "buffers": set(), "trials": set()}
        self._keys: set[TrialKey] = set()
        self._dup_keys: set[TrialKey] = set()

    def row(self, table: str, row: Row) -> _Row:
        i = self.counts[table]
        self.counts[table] += 1
        model = ROWS.get(table)
        if model is None:
            raise Invalid(f'"tables.{table}" is not a table of a llamalab run')
        if not isinstance(row, dict):
            raise Invalid(f"tables.{table}[{i}]: a row is an object, not {type(row).__name__}")
        try:
            m = model.model_validate(row)
        except ValidationError as e:
            raise Invalid(describe(e, f"tables.{table}[{i}]")) from None
        # ROWS gives each table its one model: the isinstance tests are the table tests, for the type checker
        if isinstance(m, RunRow):
            self.run = m
            if self.run_id is not None and m.id != self.run_id:
                raise Invalid(f"run_id {self.run_id} is not the id of the run in tables.runs ({m.id})")
        elif isinstance(m, ConfigRow):
            self.config_ids.append(m.id)
            self._ids[m.id] += 1
        elif isinstance(m, LedgerRow | BufferRow | TrialRow):
            self._refs[table].add(m.config_id)
            if isinstance(m, TrialRow):
                key = (m.build, m.setting, m.trial, m.concurrency, m.cell_prompt_tokens, m.cell_output_tokens)
                if key in self._keys:
                    self._dup_keys.add(key)
                self._keys.add(key)
        return m

    def done(self) -> None:
        if self.counts["runs"] != 1:
            raise Invalid(f"tables.runs: a run export holds exactly one run, not {self.counts['runs']}")
        for t in ("tunes", "tune_picks"):
            if self.counts[t] > 1:
                raise Invalid(f"tables.{t}: at most one per run, not {self.counts[t]}")
        dup = sorted(i for i, n in self._ids.items() if n > 1)
        if dup:
            raise Invalid(f"configs: id(s) {dup} appear more than once")
        for t, refs in self._refs.items():
            dangling = sorted(refs - self._ids.keys())
            if dangling:
                raise Invalid(f"{t} point(s) at configuration(s) {dangling} that configs does not hold")
        if self._dup_keys:
            first = min(self._dup_keys, key=str)
            raise Invalid(f"trials: {first} (build, setting, trial, concurrency, prompt and output tokens) is stored "
                          "more than once")


def describe(e: ValidationError, where: str = "", limit: int = 3) -> str:
    """The first few problems of a validation error, each with its place: `tables.trials[3].output_tps: …`."""
    parts = []
    for err in e.errors()[:limit]:
        at = where
        for p in err["loc"]:
            at += f"[{p}]" if isinstance(p, int) else (f".{p}" if at else str(p))
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        plain = err["type"] in ("missing", "value_error") or isinstance(got, dict | list)
        shown = "" if plain else f" (got {got!r:.60})"
        parts.append(f"{at or 'the document'}: {msg}{shown}")
    more = len(e.errors()) - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
