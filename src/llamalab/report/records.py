"""The typed records `report.data.load` hands to every renderer [pure, a leaf: imports nothing of llamalab].

Each is a `TypedDict`: a plain dict at run time (the renderers' `row["key"]`, the JSON report and `csvfile` work on
them as they are), whose keys mypy checks. A stored `x_json` column appears decoded, once, in `report.data`, under
the key `x` (`model_json` → `model`, `server_argv_json` → `server_argv` …): no renderer decodes JSON text. Keys keep
the stored column order, so the JSON report that prints them is the store's rows, readable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

JsonValue = Any  # a decoded `*_json` column: what the JSON holds (runrows checked its shape), None where NULL


class RunRecord(TypedDict, total=False):
    """The `runs` row."""
    id: str
    study: str
    study_toml: str | None
    study_hash: str | None
    status: str
    started: str | None
    finished: str | None
    host: str | None
    llamalab_version: str | None
    model: JsonValue  # the model's header figures (model_json)
    devices: dict[str, Any] | None  # the study's devices as run (devices_json)
    options: JsonValue  # backend and run options (options_json)
    owner_pid: int | None
    owner_host: str | None
    owner_started: str | None
    imported: str | None


class BuildRecord(TypedDict, total=False):
    """A `builds` row."""
    run_id: str
    name: str
    status: str
    reason: str | None
    key: str | None
    source_version: str | None
    source_commit: str | None
    source_origin: str | None
    options: JsonValue  # the -D options the build added (options_json)
    cmake_argv: list[str] | None  # cmake_argv_json
    build_seconds: float | None
    reused: int | None
    binary: JsonValue  # given binaries: version, commit, dir … (binary_json)


class Emulation(TypedDict, total=False):
    """The budget emulation a configuration ran under (`devices.emulation`)."""
    budgets_mib: list[int]


class ConfigRecord(TypedDict, total=False):
    """A `configs` row with its ledger (the `ledgers` row's ledger_json, None where none was stored)."""
    id: int
    run_id: str
    build: str
    setting: str
    status: str
    reason: str | None
    server_argv: JsonValue  # the llama-server argv it ran (server_argv_json)
    env: dict[str, str] | None  # env_json
    log_path: str | None
    devices: JsonValue  # devices_json: remotes, emulation …
    load_seconds: float | None
    started: str | None
    finished: str | None
    nvml: JsonValue  # nvml_json
    ledger: dict[str, Any] | None


class LedgerRecord(TypedDict, total=False):
    """A `ledgers` row."""
    config_id: int
    pipeline_parallel: int | None
    sched_copies: int | None
    n_ctx: int | None
    graph_splits: int | None
    ledger: JsonValue  # ledger_json


class TrialRecord(TypedDict, total=False):
    """A `trials` row: `requests` decoded (requests_json), or, for a run loaded with `requests=False`, `figures`
    (`report.data.Figures`) in its place."""
    id: int
    run_id: str
    config_id: int
    build: str
    setting: str
    trial: int
    concurrency: int
    input_tokens: int | None
    input_tps: float | None
    output_tokens: int | None
    output_tps: float | None
    wall_s: float | None
    aggregate_output_tps: float | None
    aggregate_total_tps: float | None
    errors: int
    started: str | None
    requests: JsonValue
    figures: Any
    foreign_load: float | None
    cell_prompt_tokens: int | None
    cell_output_tokens: int | None


class CrosscheckRecord(TypedDict, total=False):
    run_id: str
    build: str
    setting: str
    result: JsonValue  # result_json
    error: str | None


class ContextCheckRecord(TypedDict, total=False):
    run_id: str
    build: str
    setting: str
    mode: str
    fitted_n_ctx: int | None
    verified: int | None
    max_loaded_n_ctx: int | None
    steps: JsonValue  # steps_json


class TuneRecord(TypedDict, total=False):
    run_id: str
    result: JsonValue  # result_json: the tune's stages, candidates and pick


class BudgetFitRecord(TypedDict, total=False):
    run_id: str
    build: str
    setting: str
    budget_n_ctx: int | None
    margin_n_ctx: int | None
    verified: int | None
    result: JsonValue  # result_json


def emulation(config: Mapping[str, Any]) -> Emulation:
    """The budget emulation of a configuration ({} where it ran without one)."""
    dev = config.get("devices") or {}
    emu = dev.get("emulation") if isinstance(dev, dict) else None
    return emu if isinstance(emu, dict) else {}  # type: ignore[return-value]


def server_argv(config: Mapping[str, Any]) -> list[str]:
    """The llama-server argv a configuration ran, as strings ([] where none was stored)."""
    argv = config.get("server_argv")
    return [str(a) for a in argv] if isinstance(argv, list) else []
