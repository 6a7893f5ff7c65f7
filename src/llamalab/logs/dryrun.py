"""llama-server's no-alloc dry run read from its log (verbosity 5): the memory figures its fit projects. Pure.

llama-server started with `--fit` (on by default) runs a dry run before it reads a single weight: weights and KV
cache get dummy buffers, compute buffers are only measured, and the log prints per device the model / context /
compute MiB, the context the fit chooses and the scheduler's copies. `plan.plan` starts and stops the server; this
module reads what it printed. The lines llama.cpp prints for any load (KV summaries, context values, the model's
shape, scheduler copies, graph splits, buffer sizes, breakdown rows, device lines, the fit's outcome) are read by
`ledger`'s readers; only the lines the ledger has no use for are read here (a KV layer's device, the fit's
failure message, llama-fit-params' `-fitp` table).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from . import failures, patterns, rawlines

END_OF_FIT = "common_fit_params: fitting params to free memory took"
# Lines that only a real load prints: a dry run that got here went too far (the fit was off).
_LOAD_MODE = re.compile(r"load_mode = (?!none)")


def real_load(line: str) -> bool:
    """A line only a real load prints (`loading model tensors … load_mode = X` with X not none, `model loaded`,
    `listening on http`)."""
    if "llama_server: model loaded" in line or "listening on http" in line:
        return True
    i = line.find("loading model tensors")
    return i >= 0 and bool(_LOAD_MODE.search(line, i))


@dataclass
class DeviceFigures:
    name: str  # llama.cpp's device name: RPC0, CUDA1, Vulkan0 …
    description: str = ""  # endpoint for RPC, card name otherwise
    total_mib: int | None = None
    free_mib: int | None = None
    model_mib: float | None = None
    context_mib: float | None = None
    compute_mib: float | None = None
    kv_layers: int = 0

    @property
    def used_mib(self) -> float | None:
        parts = [self.model_mib, self.context_mib, self.compute_mib]
        return round(sum(p for p in parts if p is not None), 2) if any(p is not None for p in parts) else None


@dataclass
class DryRun:
    devices: list[DeviceFigures] = field(default_factory=list)
    host: DeviceFigures = field(default_factory=lambda: DeviceFigures(name="Host"))
    # host-resident buffer types llama.cpp's table lists apart from "Host" (their buffer type is not a host buffer
    # to ggml because its data is rearranged: CPU_REPACK, AMX …): weights in system RAM all the same
    host_buffers: list[DeviceFigures] = field(default_factory=list)
    n_ctx: int | None = None
    n_ctx_train: int | None = None
    n_seq_max: int | None = None
    n_ubatch: int | None = None
    n_embd: int | None = None
    kv_unified: bool | None = None
    fit_ctx_from: int | None = None
    fit_ctx_to: int | None = None
    fit_ok: bool | None = None
    fit_message: str | None = None
    pipeline_parallel: bool | None = None  # "pipeline parallelism enabled" printed (also with 1 copy)
    sched_copies: int | None = None  # the effective number of scheduler copies
    graph_splits: int | None = None
    measurements: int = 0  # how many dry measurements the fit made
    finished: bool = False  # the fit's closing line was seen
    error: str | None = None


# Linear in the line, like ledger's patterns: what follows a keyword is bounded or cannot contain the keyword.
_KV_LAYER = re.compile(r"llama_kv_cache: layer\s+\d+: dev = (?P<dev>\S+)")
_FIT_FAIL = re.compile(r"failed to fit params to free device memory: (.*)"
                       r"|encountered an error while trying to fit params[^:]{0,256}: (.*)")
_CONTEXT_KEYS = ("n_ctx", "n_seq_max", "n_ubatch", "kv_unified")  # the context values a dry run reports


def _table_row(line: str) -> tuple[str, str, str] | None:
    """(name, description, numbers) of a `memory_breakdown_print: | - NAME (DESC) | NUMBERS |` row (the ledger's
    reader of breakdown rows; descriptions may nest parentheses: `CUDA0 (H200 (dev p0/v0))` with
    GGML_CUDA_DEVICES)."""
    row = patterns.breakdown_row(line)
    if not row or not line.rstrip().endswith("|"):
        return None
    name, _, desc = row[0].partition(" ")
    desc = desc.strip()
    if desc and not (desc.startswith("(") and desc.endswith(")")):
        return None
    return name, desc[1:-1], row[1]


def _endpoint(buf: str) -> str | None:
    """`RPC0[10.0.0.2:50052]` → `10.0.0.2:50052` (`RPC1[[::1]:50052]` → `[::1]:50052`)."""
    i = buf.find("[")
    return buf[i + 1:-1] if i >= 0 and buf.endswith("]") and len(buf) > i + 2 else None


@dataclass
class _Segment:
    """What one model load (from `loaded meta data` on) printed so far."""

    kv_layers: dict[str, int] = field(default_factory=dict)  # device → KV layers on it
    kv_sizes: list[tuple[float, int]] = field(default_factory=list)  # (MiB, layers) of each KV cache summary
    compute: dict[str, float] = field(default_factory=dict)  # buffer → the largest compute figure printed
    table: list[tuple[str, str, list[int]]] = field(default_factory=list)  # breakdown rows: name, description, MiB
    context: dict[str, str] = field(default_factory=dict)  # n_ctx, n_seq_max, n_ubatch, kv_unified as printed
    copies: int | None = None
    pp_line: bool = False
    splits: int | None = None


@dataclass
class _DryState:
    out: DryRun
    info: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # device → (description, total, free)
    seg: _Segment = field(default_factory=_Segment)  # what this model load printed so far
    last: _Segment | None = None  # the segment whose breakdown table ended (its Host row) last


def _segment_line(seg: _Segment, line: str) -> bool:
    """A line of the current load's figures (KV placement and sizes, compute buffers, context, copies, splits);
    True where the line was one. A breakdown row is `_breakdown_line`'s."""
    if m := _KV_LAYER.search(line):
        if m.group("dev") in seg.kv_layers or len(seg.kv_layers) < patterns.MAX_TABLE_ROWS:
            seg.kv_layers[m.group("dev")] = seg.kv_layers.get(m.group("dev"), 0) + 1
    elif "llama_kv_cache:" in line and (kv := patterns.kv_cache_size(line)) and kv[0] == "kv" and kv[2] is not None:
        if kv[3] is not None and len(seg.kv_sizes) < 64:
            seg.kv_sizes.append((kv[1], kv[3]))
    elif "sched_reserve:" in line and "compute buffer size" in line:
        for buf, kind, mib in patterns.buffers(line):
            if kind == "compute" and (buf in seg.compute or len(seg.compute) < patterns.MAX_TABLE_ROWS):
                seg.compute[buf] = max(mib, seg.compute.get(buf, 0.0))
    elif "llama_context" in line and (cv := patterns.context_value(line)) and cv[0] in _CONTEXT_KEYS:
        seg.context[cv[0]] = cv[1]
    elif "pipeline parallelism enabled" in line:
        seg.pp_line = True
    elif (copies := patterns.sched_copies(line)) is not None:
        seg.copies = copies
    elif (splits := patterns.graph_splits(line)) is not None:
        seg.splits = splits
    else:
        return False
    return True


def _fit_line(out: DryRun, line: str) -> None:
    """The model's shape and the fit's context, outcome and end."""
    if shape := patterns.model_shape(line):
        if shape[0] == "n_ctx_train":
            out.n_ctx_train = shape[1]
        elif shape[0] == "n_embd":
            out.n_embd = shape[1]
    elif m := patterns.FIT_REDUCED.search(line):
        out.fit_ctx_from, out.fit_ctx_to = int(m.group(1)), int(m.group(2))
    elif m := _FIT_FAIL.search(line):
        out.fit_ok, out.fit_message = False, (m.group(1) or m.group(2) or "").strip()
    elif patterns.FIT_OK.search(line):
        out.fit_ok = True
    elif END_OF_FIT in line:
        out.finished = True


def _dry_run_line(st: _DryState, line: str) -> None:
    if "common_param:" in line and (dev := patterns.device_line(line)):
        st.info.setdefault(dev[0], dev[1:])
        return
    if "llama_model_loader: loaded meta data" in line:
        st.seg = _Segment()
        return
    seg = st.seg
    if _segment_line(seg, line):
        return
    if "memory_breakdown_print" in line and (row := _table_row(line)):
        if len(seg.table) < patterns.MAX_TABLE_ROWS:
            seg.table.append((row[0], row[1], [int(x) for x in patterns.numbers(row[2])[:16]]))
        if row[0] == "Host":
            st.last = seg
        return
    _fit_line(st.out, line)


def parse_dry_run(lines: Iterable[str]) -> DryRun:
    """Figures from a llama-server log stopped after its memory fit (verbosity 5). Pure; never raises.

    A fit makes one or more measurements (initial parameters; for a shrunk context also the smallest one); the
    figures are those of the last complete measurement, its breakdown table and the buffer lines before it."""
    out = DryRun()
    st = _DryState(out)
    raw_lines = [rawlines.clean(str(x)) for x in lines]
    for line in raw_lines:
        try:
            if line:
                _dry_run_line(st, line)
        except Exception:  # a malformed line (`size = 1.2.3 MiB`) never costs the rest of the log
            continue
    out.measurements = sum(1 for ln in raw_lines if "memory breakdown [MiB]" in ln)
    if st.last is None:
        out.error = failures.failure_reason(raw_lines) or ("the fit printed no memory breakdown" if out.finished else
                                                         "llama-server stopped before its memory fit finished")
        return out
    try:
        _figures(out, st.last, st.info)
    except Exception as e:  # figures of a damaged log: none rather than a traceback
        out.error = f"the log's figures could not be read ({type(e).__name__}: {e})"
    return out


def _figures(out: DryRun, seg: _Segment, info: dict[str, tuple[str, int, int]]) -> None:
    devices = _table_devices(out, seg, info)
    _compute_figures(out, seg, info, devices)
    _kv_figures(seg, devices)
    out.devices = list(devices.values())
    ctx = seg.context
    out.n_ctx = int(ctx["n_ctx"]) if ctx.get("n_ctx", "").isdecimal() else None
    out.n_seq_max = int(ctx["n_seq_max"]) if ctx.get("n_seq_max", "").isdecimal() else None
    out.n_ubatch = int(ctx["n_ubatch"]) if ctx.get("n_ubatch", "").isdecimal() else None
    out.kv_unified = {"true": True, "false": False}.get(ctx.get("kv_unified", ""))
    out.sched_copies = seg.copies
    out.graph_splits = seg.splits
    # llama.cpp's flag (its "enabled" line prints with 1 copy too); the copies say whether anything is pipelined
    out.pipeline_parallel = seg.pp_line


def _table_devices(out: DryRun, seg: _Segment, info: dict[str, tuple[str, int, int]]) -> dict[str, DeviceFigures]:
    """The breakdown table's rows: the host's figures into `out.host`, host buffer types into `out.host_buffers`,
    the devices returned (with their free memory before anything was loaded)."""
    devices: dict[str, DeviceFigures] = {}
    for name, desc, nums in seg.table:
        if name == "Host":
            if len(nums) >= 4:
                out.host.model_mib, out.host.context_mib, out.host.compute_mib = map(float, nums[1:4])
            continue
        if len(nums) < 7 and name not in info:  # `| - CPU_REPACK | self = model + context + compute |`
            h = DeviceFigures(name=name, description=desc)
            if len(nums) >= 4:
                h.model_mib, h.context_mib, h.compute_mib = map(float, nums[1:4])
            out.host_buffers.append(h)
            continue
        d = DeviceFigures(name=name, description=desc)
        if len(nums) >= 7:
            d.total_mib, d.free_mib = nums[0], nums[1]
            d.model_mib, d.context_mib, d.compute_mib = float(nums[3]), float(nums[4]), float(nums[5])
        if name in info:  # free memory before anything was loaded (the table's "free" is read later)
            d.description = d.description or info[name][0]
            d.total_mib, d.free_mib = info[name][1], info[name][2]
        devices[name] = d
    return devices


def _compute_figures(out: DryRun, seg: _Segment, info: dict[str, tuple[str, int, int]],
                     devices: dict[str, DeviceFigures]) -> None:
    """Compute buffers to 0.01 MiB; both RPC devices print as RPC0[endpoint]: keyed by endpoint. A buffer type
    printed twice in one dry run is one buffer: two backends sharing a buffer type (CPU and BLAS both use the
    CPU's) share one compute buffer in a real load, which prints it once; the dry run prints it per backend."""
    by_endpoint = {desc: name for name, (desc, _, _) in info.items()}
    host_compute = 0.0
    seen_host = False
    for buf, mib in seg.compute.items():  # the largest figure printed for each buffer
        if rawlines.is_host(buf):
            host_compute += mib
            seen_host = True
            continue
        ep = _endpoint(buf)
        name = by_endpoint.get(ep) if ep else buf
        if name in devices:
            devices[name].compute_mib = mib
    if seen_host:
        out.host.compute_mib = round(host_compute, 2)


def _kv_figures(seg: _Segment, devices: dict[str, DeviceFigures]) -> None:
    """KV cache to 0.01 MiB: layers per device × bytes per layer, where every layer's cache has the same size."""
    if len(seg.kv_sizes) != 1:
        return
    total, layers = seg.kv_sizes[0]
    counted = sum(seg.kv_layers.values())
    if layers and counted == layers:
        for dev, n in seg.kv_layers.items():
            if dev in devices:
                devices[dev].context_mib = round(total * n / layers, 2)
                devices[dev].kv_layers = n


_FITP_ROW = re.compile(r"^(?P<name>[A-Za-z][\w.\-]*)\s+(?P<model>\d+)\s+(?P<context>\d+)\s+(?P<compute>\d+)\s*$")


def parse_fit_print(lines: Iterable[str]) -> dict[str, tuple[int, int, int]]:
    """`llama-fit-params … -fitp on` output: device (or Host) → (model, context, compute) MiB, rounded down."""
    out = {}
    for raw in lines:
        m = _FITP_ROW.match(str(raw).strip())
        if m:
            out[m.group("name")] = (int(m.group("model")), int(m.group("context")), int(m.group("compute")))
    return out
