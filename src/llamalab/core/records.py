"""Frozen records passed between stages, and `JsonObject`, the name of the JSON-shaped dicts they travel with."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# A JSON object as `json` decodes it, or a dict about to be encoded (a stored `*_json` column, an export document's
# header, a figure's `as_dict`). Its keys are strings; its values are whatever JSON holds, typed `Any` as `json.loads`
# types them: each reader checks the shape it reads (`store.runrows` for a run read back), and a recursive union would
# make every reader narrow every key it reads.
JsonObject = dict[str, Any]


@dataclass(frozen=True)
class RequestResult:
    """One request's figures: the server's own `timings` and what the client saw."""

    index: int
    prompt_n: int | None = None
    prompt_ms: float | None = None
    prompt_tps: float | None = None
    predicted_n: int | None = None
    predicted_ms: float | None = None
    predicted_tps: float | None = None
    wall_s: float | None = None  # client: request sent → last byte
    ttft_s: float | None = None  # client: request sent → first generated token
    itl_ms: tuple[float, ...] = ()  # client: gaps between generated tokens
    stop_type: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Trial:
    """One measurement: `concurrency` simultaneous requests against one configuration."""

    build: str
    setting: str
    trial: int
    concurrency: int
    requests: tuple[RequestResult, ...]
    wall_s: float  # first request sent → last response done
    started: float = 0.0  # unix time
    foreign_load: float | None = None  # CPU cores other processes used during the trial (sysload.py)
    # The workload cell: tokens of prompt and of output each request asked for (`input_tokens`/`output_tokens`
    # are what the server reported, summed over the requests)
    cell_prompt_tokens: int | None = None
    cell_output_tokens: int | None = None

    @property
    def key(self) -> tuple[str, str, int, int, int | None, int | None]:
        """What identifies a trial within a run (the store's resume key)."""
        return (self.build, self.setting, self.trial, self.concurrency, self.cell_prompt_tokens,
                self.cell_output_tokens)

    def ok_requests(self) -> list[RequestResult]:
        return [r for r in self.requests if r.ok]

    @property
    def errors(self) -> int:
        return sum(1 for r in self.requests if not r.ok)

    @property
    def input_tokens(self) -> int | None:
        vals = [r.prompt_n for r in self.ok_requests() if r.prompt_n is not None]
        return sum(vals) if vals else None

    @property
    def output_tokens(self) -> int | None:
        vals = [r.predicted_n for r in self.ok_requests() if r.predicted_n is not None]
        return sum(vals) if vals else None

    @property
    def input_tps(self) -> float | None:
        """Per-request prompt speed (server timings); the mean over requests when concurrent."""
        vals = [r.prompt_tps for r in self.ok_requests() if r.prompt_tps]
        return sum(vals) / len(vals) if vals else None

    @property
    def output_tps(self) -> float | None:
        vals = [r.predicted_tps for r in self.ok_requests() if r.predicted_tps]
        return sum(vals) / len(vals) if vals else None

    @property
    def aggregate_output_tps(self) -> float | None:
        """Generated tokens of all requests per second of the level's wall time."""
        out = self.output_tokens
        return out / self.wall_s if out and self.wall_s > 0 else None

    @property
    def aggregate_total_tps(self) -> float | None:
        total = (self.input_tokens or 0) + (self.output_tokens or 0)
        return total / self.wall_s if total and self.wall_s > 0 else None

    def as_dict(self) -> JsonObject:
        d = asdict(self)
        d["requests"] = [asdict(r) for r in self.requests]
        return d


@dataclass(frozen=True)
class ConfigOutcome:
    """What happened to one configuration (build × setting) in a run."""

    build: str
    setting: str
    status: str  # "ok" | "failed" | "skipped" | "not-applicable" | "running" | "interrupted"
    reason: str | None = None
    server_argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    log_path: str | None = None
    load_seconds: float | None = None
