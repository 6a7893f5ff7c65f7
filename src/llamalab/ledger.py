"""Memory ledger: llama.cpp log lines in, a `Ledger` out. Pure: no I/O, never raises on any input.

Reads the lines design.md §5.2 lists: per-buffer model / KV / recurrent-state / output / compute MiB, the KV
summary, pipeline-parallel state and scheduler copies, graph nodes and splits, context sizes, offloaded
layers, fit lines and memory-breakdown tables, and allocation failures.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

KINDS = ("model", "kv", "rs", "compute", "output")


@dataclass
class Buffers:
    """MiB per kind of buffer on one device or host buffer type; None where the log printed none."""

    model_mib: float | None = None
    kv_mib: float | None = None
    rs_mib: float | None = None
    compute_mib: float | None = None
    output_mib: float | None = None

    def add(self, kind: str, mib: float) -> None:
        attr = f"{kind}_mib"
        setattr(self, attr, round((getattr(self, attr) or 0.0) + mib, 2))

    def total(self) -> float:
        return round(sum(getattr(self, f"{k}_mib") or 0.0 for k in KINDS), 2)


@dataclass
class KvSummary:
    size_mib: float | None = None
    cells: int | None = None
    layers: int | None = None
    seqs: str | None = None
    k_type: str | None = None
    k_mib: float | None = None
    v_type: str | None = None
    v_mib: float | None = None


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
class Ledger:
    devices: dict[str, Buffers] = field(default_factory=dict)
    host: dict[str, Buffers] = field(default_factory=dict)
    pipeline_parallel: bool | None = None
    n_copies: int | None = None  # as printed in "pipeline parallelism enabled (n_copies=N)"
    sched_copies: int | None = None  # "sched copies = N": the effective number
    pp_enabled_line: bool = False
    pp_retry: bool = False
    compute_alloc_failed: bool = False
    graph_nodes: int | None = None
    graph_splits: int | None = None
    n_ctx: int | None = None
    n_ctx_seq: int | None = None
    n_seq_max: int | None = None
    n_ubatch: int | None = None
    layers_offloaded: int | None = None
    layers_total: int | None = None
    kv: KvSummary | None = None
    fit_ctx_from: int | None = None
    fit_ctx_to: int | None = None
    breakdown_projected: list[BreakdownRow] = field(default_factory=list)
    breakdown_final: list[BreakdownRow] = field(default_factory=list)
    device_memory: dict[str, tuple[int, int]] = field(default_factory=dict)  # name → (total MiB, free MiB)
    build: str | None = None
    errors: list[str] = field(default_factory=list)

    def compute(self, name: str) -> float | None:
        b = self.devices.get(name) or self.host.get(name)
        return b.compute_mib if b else None

    def compute_host_mib(self) -> float | None:
        vals = [b.compute_mib for b in self.host.values() if b.compute_mib is not None]
        return round(sum(vals), 2) if vals else None

    def to_json(self) -> dict:
        def bufs(d: dict[str, Buffers]) -> dict:
            return {k: {a: getattr(v, a) for a in ("model_mib", "kv_mib", "compute_mib", "output_mib", "rs_mib")}
                    for k, v in d.items()}

        out = asdict(self)
        out["devices"] = bufs(self.devices)
        out["host"] = bufs(self.host)
        return out


# ---------------------------------------------------------------- line cleanup

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_PREFIX = re.compile(r"^\s*(?:\d+\.\d{2}\.\d{3}\.\d{3}\s+[DITWE]\s+)")


def clean(line: str) -> str:
    line = _ANSI.sub("", line).replace("\r", "")
    return _PREFIX.sub("", line).strip()


HOST_EXACT = {"CPU", "CPU_Mapped", "AMX", "CPU_REPACK"}


def is_host(name: str) -> bool:
    base = name.split("[", 1)[0]
    return base in HOST_EXACT or base.startswith("CPU") or base.endswith("_Host") or base.upper() == "AMX"


# ---------------------------------------------------------------- patterns

NUM = r"([0-9]+(?:\.[0-9]+)?)"
_BUF = re.compile(r"(?P<name>[A-Za-z][\w\-]*(?:\[[^\]]*\])?)\s+(?P<kind>model |KV |RS |compute |output |)buffer size\s*=\s*" + NUM + r"\s*MiB")
_SCHED_COPIES = re.compile(r"sched copies\s*=\s*(\d+)")
_PP = re.compile(r"pipeline parallelism enabled(?:\s*\(n_copies\s*=\s*(\d+)\))?")
_PP_RETRY = re.compile(r"retrying without pipeline parallelism")
_ALLOC_FAIL = re.compile(r"failed to allocate compute (?:pp )?buffers?|compute buffer allocation failed")
_GRAPH_NEW = re.compile(r"graph: nodes\s*=\s*(\d+),\s*splits\s*=\s*(\d+)")
_GRAPH_NODES = re.compile(r"graph nodes\s*=\s*(\d+)")
_GRAPH_SPLITS = re.compile(r"graph splits\s*=\s*(\d+)")
_CTX_LINE = re.compile(r"(?:llama_context|llama_new_context_with_model|llama_init_from_model):\s+(n_ctx|n_ctx_per_seq|n_ctx_seq|n_seq_max|n_ubatch)\s*=\s*(\d+)")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_KV_SUMMARY = re.compile(
    r"(?:llama_kv_cache|llama_kv_cache_unified|llama_kv_cache_init)\w*:\s+size\s*=\s*" + NUM + r"\s*MiB\s*\(\s*(\d+)\s+cells,\s*(\d+)\s+layers,\s*([\d/]+)\s+seqs\),\s*K\s*\((\w+)\):\s*" + NUM + r"\s*MiB,\s*V\s*\((\w+)\):\s*" + NUM + r"\s*MiB")
_FIT_REDUCED = re.compile(r"context size reduced from (\d+) to (\d+)")
_BREAKDOWN_HEAD = re.compile(r"memory breakdown \[MiB\]")
_BREAKDOWN_ROW = re.compile(r"\|\s*-\s*(?P<name>.+?)\s*\|\s*(?P<rest>.*)\|\s*$")
_DEVICE_MEM = re.compile(r"-\s+(?P<name>\S+)\s+:\s+.*\((\d+) MiB,\s*(\d+) MiB free\)")
_BUILD = re.compile(r"build(?: =|:)?\s*(\d+)\s*\((\w+)\)")


def _num(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _breakdown_row(name: str, rest: str) -> BreakdownRow:
    nums = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", rest)]
    row = BreakdownRow(name=name.strip())
    if len(nums) == 7:
        row.total, row.free, row.self_, row.model, row.context, row.compute, row.unaccounted = nums
    elif len(nums) == 4:  # host row: self = model + context + compute
        row.self_, row.model, row.context, row.compute = nums
    return row


def parse(lines: Iterable[str]) -> Ledger:
    """Parse llama.cpp / llama-server log lines into a Ledger. Never raises."""
    led = Ledger()
    compute: dict[str, float] = {}
    in_breakdown: list[BreakdownRow] | None = None
    fit_phase = True  # breakdown tables before the model loads are projections (fit); after, final
    try:
        for raw in lines:
            try:
                _line(led, clean(str(raw)), compute, state := {"bd": in_breakdown, "fit": fit_phase})
                in_breakdown, fit_phase = state["bd"], state["fit"]
            except Exception as e:  # a malformed line never costs the rest of the log
                led.errors.append(f"{type(e).__name__}: {e}")
    except Exception as e:
        led.errors.append(f"{type(e).__name__}: {e}")
    for name, mib in compute.items():
        (led.host if is_host(name) else led.devices).setdefault(name, Buffers()).compute_mib = mib
    led.pipeline_parallel = _pp_state(led)
    return led


def _pp_state(led: Ledger) -> bool | None:
    if led.sched_copies is not None:
        return led.sched_copies > 1
    if led.pp_retry:
        return False
    if led.pp_enabled_line:
        return True
    return None


def _line(led: Ledger, line: str, compute: dict[str, float], st: dict) -> None:
    if not line:
        return
    if st["bd"] is not None:
        m = _BREAKDOWN_ROW.search(line)
        if m:
            st["bd"].append(_breakdown_row(m.group("name"), m.group("rest")))
            return
        st["bd"] = None
    if _BREAKDOWN_HEAD.search(line):
        table: list[BreakdownRow] = []
        if st["fit"]:
            led.breakdown_projected = table
        else:
            led.breakdown_final = table
        st["bd"] = table
        return
    if "buffer size" in line and "MiB" in line:
        m = _BUF.search(line)
        if m and "ctx size" not in line:
            name, kind, mib = m.group("name"), m.group("kind").strip(), float(m.group(3))
            kind = {"model": "model", "KV": "kv", "RS": "rs", "compute": "compute", "output": "output", "": "model"}[kind]
            if kind == "compute":
                compute[name] = mib
            else:
                (led.host if is_host(name) else led.devices).setdefault(name, Buffers()).add(kind, mib)
            st["fit"] = False
            return
    if m := _SCHED_COPIES.search(line):
        led.sched_copies = int(m.group(1))
    if m := _PP.search(line):
        led.pp_enabled_line = True
        if m.group(1):
            led.n_copies = int(m.group(1))
        return
    if _PP_RETRY.search(line):
        led.pp_retry = True
        compute.clear()
    if _ALLOC_FAIL.search(line):
        led.compute_alloc_failed = True
    if m := _GRAPH_NEW.search(line):
        led.graph_nodes, led.graph_splits = int(m.group(1)), int(m.group(2))
    else:
        if m := _GRAPH_NODES.search(line):
            led.graph_nodes = int(m.group(1))
        if m := _GRAPH_SPLITS.search(line):
            led.graph_splits = int(m.group(1))
    if m := _CTX_LINE.search(line):
        key, val = m.group(1), int(m.group(2))
        if key == "n_ctx":
            led.n_ctx = val
        elif key in ("n_ctx_seq", "n_ctx_per_seq"):
            led.n_ctx_seq = val
        elif key == "n_seq_max":
            led.n_seq_max = val
        elif key == "n_ubatch":
            led.n_ubatch = val
    if m := _OFFLOADED.search(line):
        led.layers_offloaded, led.layers_total = int(m.group(1)), int(m.group(2))
        st["fit"] = False
    if m := _KV_SUMMARY.search(line):
        led.kv = KvSummary(size_mib=float(m.group(1)), cells=int(m.group(2)), layers=int(m.group(3)), seqs=m.group(4),
                           k_type=m.group(5), k_mib=float(m.group(6)), v_type=m.group(7), v_mib=float(m.group(8)))
    if m := _FIT_REDUCED.search(line):
        if led.fit_ctx_from is None:
            led.fit_ctx_from = int(m.group(1))
        led.fit_ctx_to = int(m.group(2))
    if m := _DEVICE_MEM.search(line):
        led.device_memory[m.group("name")] = (int(m.group(2)), int(m.group(3)))
    if led.build is None and "build" in line and (m := _BUILD.search(line)):
        led.build = f"b{m.group(1)}-{m.group(2)}"


# ---------------------------------------------------------------- failures

_FAILURES: list[tuple[re.Pattern, str]] = [
    (re.compile(r"(?:cudaMalloc|ggml_backend_\w*alloc\w*|ggml_gallocr\w*|alloc_tensor_range).*fail|failed to allocate|out of memory|CUDA error: out of memory|ErrorOutOfDeviceMemory|std::bad_alloc", re.I),
     "out of memory"),
    (re.compile(r"error: (?:invalid argument|unknown argument|invalid value)[: ]*(.*)", re.I), "unsupported flag"),
    (re.compile(r"unknown argument:?\s*(.*)|error while handling argument", re.I), "unsupported flag"),
    (re.compile(r"failed to load model|error loading model|llama_model_load: error", re.I), "model load error"),
    (re.compile(r"couldn't bind|address already in use|failed to bind", re.I), "port already in use"),
    (re.compile(r"failed to connect to (?:RPC|rpc)|rpc.*(?:connection refused|failed to connect)|Failed to connect", re.I),
     "could not reach an rpc-server"),
    (re.compile(r"GGML_ASSERT|Segmentation fault|Aborted|terminate called", re.I), "llama.cpp crashed (assertion or signal)"),
]


def failure_reason(lines: Iterable[str]) -> str | None:
    """The most likely reason a llama-server run failed, from its log (None if the log shows none)."""
    found: str | None = None
    detail = ""
    for raw in lines:
        line = clean(str(raw))
        for pat, reason in _FAILURES:
            m = pat.search(line)
            if m:
                if found is None or reason == "out of memory":
                    found, detail = reason, line[:200]
                break
    if found is None:
        return None
    return f"{found} ({detail})" if detail else found
