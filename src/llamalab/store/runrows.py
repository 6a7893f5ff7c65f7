"""The shape of a stored run, as pydantic models: the check at the boundary where a run comes from outside (pure).

`llamalab import` checks an exported document against these models before anything is written, and reports check
a run read back from a database (which an older llamalab may have filled from an unchecked file) before rendering
it. A value of the wrong type, a missing id, or a run id that is not one (`../../x`) is a clear error naming the
place, never a traceback later. Columns a newer llamalab added are allowed here (`extra`) and refused, with an
"upgrade" tip, by the store, which knows its own columns.

Validation is strict and works on JSON text (`validate_json`): a string is never taken for a number, and JSON
arrays stand for tuples.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from . import runids
from ..records import RequestResult

__all__ = ["Export", "Tables", "ValidationError", "describe"]


def _run_id(v: str) -> str:
    if not runids.is_run_id(v):
        raise ValueError(f"{v[:80]!r} is not a llamalab run id (they look like {runids.EXAMPLE})")
    return v


RunId = Annotated[str, AfterValidator(_run_id)]
Json = dict[str, Any]
Num = float | None
Int = int | None


class _Row(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


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
    shares: list[float] = Field(default_factory=list)
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
    buffers: dict[str, float] | None = None


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
    device_memory: dict[str, list[int]] = Field(default_factory=dict)
    device_desc: dict[str, str] = Field(default_factory=dict)
    kv_bytes_per_token: dict[str, float] = Field(default_factory=dict)
    one_copy_saving: Json | None = None


# ---------------------------------------------------------------- one model per table


class RunRow(_Row):
    id: RunId
    study: str
    study_toml: str
    study_hash: str
    status: Literal["running", "finished", "interrupted", "failed"]
    started: str
    finished: str | None = None
    host: str
    llamalab_version: str | None = None
    model_json: Json | None = None
    devices_json: Json | None = None
    options_json: Json | None = None


class SystemRow(_Row):
    info_json: Json


class BuildRow(_Row):
    name: str
    status: Literal["ok", "skipped", "failed", "not-applicable"]
    reason: str | None = None
    key: str | None = None
    source_version: str | None = None
    source_commit: str | None = None
    source_origin: str | None = None
    options_json: Json | None = None
    cmake_argv_json: list[str] | None = None
    build_seconds: Num = None
    reused: Int = None
    binary_json: Json | None = None


class ConfigRow(_Row):
    id: int
    build: str
    setting: str
    status: Literal["ok", "failed", "skipped", "running", "interrupted", "not-applicable"]
    pass_: int = Field(default=0, alias="pass")
    reason: str | None = None
    server_argv_json: list[str] | None = None
    env_json: dict[str, str] | None = None
    log_path: str | None = None
    devices_json: Json | None = None
    load_seconds: Num = None
    started: str | None = None
    finished: str | None = None
    nvml_json: Json | None = None


class LedgerRow(_Row):
    config_id: int
    pipeline_parallel: Int = None
    sched_copies: Int = None
    n_ctx: Int = None
    graph_splits: Int = None
    ledger_json: _Ledger


class BufferRow(_Row):
    config_id: int
    name: str
    is_host: int
    model_mib: Num = None
    kv_mib: Num = None
    rs_mib: Num = None
    compute_mib: Num = None
    output_mib: Num = None


class _Request(_Row):
    index: int
    prompt_n: Int = None
    prompt_ms: Num = None
    prompt_tps: Num = None
    predicted_n: Int = None
    predicted_ms: Num = None
    predicted_tps: Num = None
    wall_s: Num = None
    ttft_s: Num = None
    itl_ms: list[float] = Field(default_factory=list)
    stop_type: str | None = None
    error: str | None = None


assert set(_Request.model_fields) == set(RequestResult.__dataclass_fields__), "keep _Request in step with records"


class TrialRow(_Row):
    id: Int = None
    config_id: int
    build: str
    setting: str
    trial: int
    concurrency: int
    input_tokens: Int = None
    input_tps: Num = None
    output_tokens: Int = None
    output_tps: Num = None
    wall_s: Num = None
    aggregate_output_tps: Num = None
    aggregate_total_tps: Num = None
    errors: int = 0
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


class TuneRow(_Row):
    result_json: Json


class BudgetFitRow(_Row):
    build: str
    setting: str
    budget_n_ctx: Int = None
    margin_n_ctx: Int = None
    verified: Int = None
    result_json: Json


class Tables(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    runs: Annotated[list[RunRow], Field(min_length=1, max_length=1)]
    system_info: list[SystemRow] = Field(default_factory=list)
    builds: list[BuildRow] = Field(default_factory=list)
    configs: list[ConfigRow] = Field(default_factory=list)
    ledgers: list[LedgerRow] = Field(default_factory=list)
    buffers: list[BufferRow] = Field(default_factory=list)
    trials: list[TrialRow] = Field(default_factory=list)
    crosschecks: list[CrosscheckRow] = Field(default_factory=list)
    context_checks: list[ContextCheckRow] = Field(default_factory=list)
    tunes: Annotated[list[TuneRow], Field(max_length=1)] = Field(default_factory=list)
    budget_fits: list[BudgetFitRow] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> "Tables":
        ids = [c.id for c in self.configs]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"configs: id(s) {dup} appear more than once")
        known = set(ids)
        for t in ("ledgers", "buffers", "trials"):
            dangling = sorted({r.config_id for r in getattr(self, t) if r.config_id not in known})
            if dangling:
                raise ValueError(f"{t} point(s) at configuration(s) {dangling} that configs does not hold")
        keys = [(t.build, t.setting, t.trial, t.concurrency, t.cell_prompt_tokens, t.cell_output_tokens)
                for t in self.trials]
        dup_t = sorted({k for k in keys if keys.count(k) > 1}, key=str)
        if dup_t:
            raise ValueError(f"trials: {dup_t[0]} (build, setting, trial, concurrency, prompt and output tokens)"
                             " is stored more than once")
        return self


class Export(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    format: Literal["llamalab-run"]
    version: int
    run_id: RunId
    exported: str | None = None
    exported_by: str | None = None
    schema_: list[str] = Field(default_factory=list, alias="schema")
    tables: Tables

    @model_validator(mode="after")
    def _same_run(self) -> "Export":
        if self.tables.runs[0].id != self.run_id:
            raise ValueError(f"run_id {self.run_id} is not the id of the run in tables.runs "
                             f"({self.tables.runs[0].id})")
        return self


def describe(e: ValidationError, limit: int = 3) -> str:
    """The first few problems of a validation error, each with its place: `tables.trials[3].output_tps: …`."""
    parts = []
    for err in e.errors()[:limit]:
        where = ""
        for p in err["loc"]:
            where += f"[{p}]" if isinstance(p, int) else (f".{p}" if where else str(p))
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if err["type"] in ("missing", "value_error") or isinstance(got, dict | list) else f" (got {got!r:.60})"
        parts.append(f"{where or 'the document'}: {msg}{shown}")
    more = len(e.errors()) - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
