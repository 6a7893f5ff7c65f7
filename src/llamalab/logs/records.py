"""The ledger's records: a device's buffers by kind, one KV cache's summary line, a row of llama.cpp's memory
breakdown table, and the `Ledger` of one model load (`logs.ledger.parse` fills it). Pure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

KINDS = ("model", "kv", "rs", "compute", "output", "input")


MIB = 1024 * 1024


@dataclass
class Buffers:
    """MiB per kind of buffer on one device or host buffer type; None where the log printed none."""

    model_mib: float | None = None
    kv_mib: float | None = None
    rs_mib: float | None = None
    compute_mib: float | None = None
    output_mib: float | None = None
    input_mib: float | None = None  # early 2024: graph inputs in a buffer of their own (`CUDA_Host input buffer`)

    def add(self, kind: str, mib: float) -> None:
        attr = f"{kind}_mib"
        setattr(self, attr, round((getattr(self, attr) or 0.0) + mib, 2))

    def total(self) -> float:
        return round(sum(getattr(self, f"{k}_mib") or 0.0 for k in KINDS), 2)


@dataclass
class KvSummary:
    """One `size = …` (or `KV self size = …`) line: a KV cache (or, with kind "rs", a recurrent-state cache)."""

    size_mib: float | None = None
    cells: int | None = None  # per stream, as printed
    layers: int | None = None
    seqs: str | None = None  # as printed: "4/1", "1"
    n_stream: int = 1
    k_type: str | None = None
    k_mib: float | None = None
    v_type: str | None = None
    v_mib: float | None = None
    kind: str = "kv"  # "kv" or "rs"
    swa: bool | None = None  # True for the sliding-window cache of an iSWA model
    buffers: dict[str, float] = field(default_factory=dict)  # the buffer lines printed for this cache

    @property
    def total_cells(self) -> int | None:
        return self.cells * max(1, self.n_stream) if self.cells else None


@dataclass
class BreakdownRow:
    name: str
    total: float | None = None
    free: float | None = None
    self_: float | None = None
    model: float | None = None
    context: float | None = None
    compute: float | None = None
    unaccounted: float | None = None


@dataclass
class EngineFit:
    """ik_llama.cpp's own placement of the layers, which it prints on every load (with `--fit` or not; logs/iklines.py):
    its margin, what the model and cache need, what the devices offer less compute, the device each layer goes to
    (its device numbers: 0 is the CPU on a build without a GPU backend), its warnings, and a failed auto-fit."""

    margin_mib: int | None = None  # "Free memory F MiB on device D is less the M MiB safety margin"
    required_mib: int | None = None  # "Memory required for model tensors + cache: R MiB"
    available_mib: int | None = None  # "Memory available on all devices - compute: A MiB"
    layer_device: list[int] = field(default_factory=list)  # "Setting default device in layer L to D", by layer
    warnings: list[str] = field(default_factory=list)  # "Free memory … is less the …", as printed
    expert_overrides: int = 0  # "Adding experts CPU overrides for layer L" (--fit on a MoE model)
    failed: str | None = None  # "Unable to auto-fit model"


@dataclass
class Ledger:
    devices: dict[str, Buffers] = field(default_factory=dict)
    host: dict[str, Buffers] = field(default_factory=dict)
    pipeline_parallel: bool | None = None
    n_copies: int | None = None  # as printed: `sched copies = N` where printed, else `(n_copies=N)`
    sched_copies: int | None = None  # "sched copies = N": the effective number
    pp_enabled_copies: int | None = None  # the N of "pipeline parallelism enabled (n_copies=N)"
    pp_enabled_line: bool = False
    pp_retry: bool = False
    compute_alloc_failed: bool = False
    # {"buffer": name, "mib": size} per failed allocation
    alloc_failures: list[dict[str, Any]] = field(default_factory=list)
    context_failed: bool = False
    graph_nodes: int | None = None  # prompt-processing graph where pp and tg differ
    graph_splits: int | None = None
    graph_nodes_tg: int | None = None
    graph_splits_tg: int | None = None
    n_ctx: int | None = None
    n_ctx_seq: int | None = None  # n_ctx_seq or n_ctx_per_seq
    n_seq_max: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    flash_attn: bool | None = None
    kv_unified: bool | None = None
    n_embd: int | None = None
    n_layer: int | None = None
    n_ctx_train: int | None = None
    layers_offloaded: int | None = None
    layers_total: int | None = None
    kv: KvSummary | None = None  # the largest KV cache (the one that scales with context)
    kv_caches: list[KvSummary] = field(default_factory=list)
    rs_caches: list[KvSummary] = field(default_factory=list)
    fit_ctx_from: int | None = None
    fit_ctx_to: int | None = None
    fit_status: str | None = None  # "ok" | "failed"
    fit_args: str | None = None  # what llama-fit-params printed
    breakdown_projected: list[BreakdownRow] = field(default_factory=list)  # first table of the fit (initial params)
    breakdown_projected_tables: list[list[BreakdownRow]] = field(default_factory=list)
    breakdown_final: list[BreakdownRow] = field(default_factory=list)
    device_memory: dict[str, tuple[int, int]] = field(default_factory=dict)  # name → (total MiB, free MiB)
    device_desc: dict[str, str] = field(default_factory=dict)  # name → description (an rpc device's endpoint)
    draft: bool = False  # a draft model / draft context was loaded and is included in the buffers
    mmproj_compute: dict[str, float] = field(default_factory=dict)  # clip (multimodal projector) compute buffers
    lora: dict[str, float] = field(default_factory=dict)
    build: str | None = None
    # -sm tensor: the printed Meta() buffers and how they were attributed (see split_meta)
    meta: dict[str, Any] | None = None
    pp_dropped_reason: str | None = None  # the allocation that failed before llama.cpp retried without the pipeline
    wrapper: str | None = None  # "ollama" where the lines came from ollama's records or its server log
    failure: str | None = None  # failure_reason() of the same lines
    n_loads: int = 0  # model loads seen; the ledger describes the last
    errors: list[str] = field(default_factory=list)
    # the engine whose lines these are, where they say (ik_llama.cpp: logs/iklines.py); None: llama.cpp's or unknown
    engine: str | None = None
    engine_fit: EngineFit | None = None  # ik_llama.cpp's own layer placement (EngineFit)
    # a figure the engine's log has no line for → why, and what the ledger says instead (never a guess)
    not_printed: dict[str, str] = field(default_factory=dict)

    def compute_host_mib(self) -> float | None:
        vals = [b.compute_mib for b in self.host.values() if b.compute_mib is not None]
        return round(sum(vals), 2) if vals else None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: every field, with `devices`/`host` as {name: {model_mib, kv_mib, compute_mib, output_mib,
        rs_mib, input_mib, total_mib}} (MiB as printed, 2 decimals; null where the log had no such line). Under
        `-sm tensor` `devices` holds the Meta() buffers attributed to the devices they span; `meta` keeps what
        llama.cpp printed and how it was attributed."""

        def bufs(d: dict[str, Buffers]) -> dict[str, Any]:
            return {k: {**{a: getattr(v, a) for a in ("model_mib", "kv_mib", "compute_mib", "output_mib", "rs_mib",
                                                      "input_mib")},
                        "total_mib": v.total()} for k, v in d.items()}

        out = asdict(self)
        out["devices"] = bufs(self.devices)
        out["host"] = bufs(self.host)
        out["device_memory"] = {k: list(v) for k, v in self.device_memory.items()}
        return out

