"""Memory arithmetic over a `Ledger` [pure]: KV bytes per token, MiB ↔ tokens of context, and what pipeline
parallelism's scheduler copies cost.

Units: MiB are 2**20 bytes, as llama.cpp prints them. Buffer names are the printed ones (CUDA0, RPC0[host:port] …).

How the one-copy saving is estimated (`one_copy_saving`)
--------------------------------------------------------
With pipeline parallelism the ggml scheduler keeps `n_copies` copies of every graph input and of every tensor that
crosses into a split on another backend (ggml-backend.cpp: `tensor_id_copy(id, backend, copy)`), each marked as
input+output so the allocator never reuses its memory. So a compute buffer behaves like

    compute(N copies) ≈ base + N × inputs           and       saving with one copy = (N − 1) × inputs.

`inputs` per backend is dominated by the KQ mask — n_kv × n_ubatch elements of f16 with flash attention (f32
without), one per KV cache (an iSWA model has two) — plus the activation entering the device's split,
n_embd × n_ubatch × f32. That gives the *low* estimate. Where a graph has many more splits than devices (ops that
fall back to another backend), every extra split adds inputs the formula does not count; the *high* estimate then
assumes the whole compute buffer scales with the copies: saving = compute × (N − 1) / N. The point estimate is the
low one for a clean pipeline (graph splits ≤ backends + 1) and the high one otherwise.

Checked against real copies=1 logs (CPU + 2 RPC servers, b11312; the 8192 and --fit pairs are fixtures in
tests/fixtures/logs, the other rows were measured the same way):

| case (per device)                         | low   | high  | measured (copies4 − copies1) |
|-------------------------------------------|-------|-------|------------------------------|
| n_ctx 8192, FA, f16/q8_0 (rpc-b11312-*)   | 27.0  | 36.1  | 29.07 (48.10 − 19.03)        |
| n_ctx 4096 / 2048, FA                     | 15.0 / 9.0 | 24.1 / 18.1 | 17.07 / 11.07      |
| n_ctx 8192, FA off (f32 mask)             | 51.0  | 153.0 | 55.01                        |
| seed study, Vulkan, f16/f16, 78592 ctx    | 260   | 361   | 262   (n_embd 5120 assumed)  |
| seed study, Vulkan, f16/q8_0, 88832 ctx   | 290   | 767   | 780                          |

And in tokens: with the same `-fitt` margin, `--fit` gave copies=1 2304 more tokens than copies=4; the estimate
from the copies=4 log says 2068. The seed study's q8_0 case sits at the high end, most likely because that run had
extra splits (its split count is not in the study), which is why many splits switch to the high figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.records import JsonObject
from .records import KvSummary, Ledger

MIB = 1024 * 1024
DEFAULT_UBATCH = 512


# ---------------------------------------------------------------- KV per token

def scaling_caches(led: Ledger) -> list[KvSummary]:
    """The KV caches whose size grows with the context: all but sliding-window ones (or, unlabelled, the largest)."""
    caches = [c for c in led.kv_caches if c.total_cells]
    if not caches:
        return []
    labelled = [c for c in caches if c.swa is False]
    if labelled:
        return labelled
    if any(c.swa for c in caches):
        return [c for c in caches if not c.swa]
    most = max(c.total_cells or 0 for c in caches)  # every one has cells (above)
    return [c for c in caches if c.total_cells == most]


def kv_cells(led: Ledger) -> int | None:
    """Cells (tokens of context) of the KV cache that scales with the context; n_ctx where no summary says."""
    caches = scaling_caches(led)
    if caches:
        return max(c.total_cells or 0 for c in caches)  # every one has cells (`scaling_caches`)
    return led.n_ctx


def kv_bytes_per_token(led: Ledger) -> dict[str, float]:
    """KV bytes one more token of context costs, per buffer name (device or host) that holds KV.

    Basis: the KV MiB printed for each buffer by the context-scaling caches, divided by their cells. Where the
    log has KV buffer lines but no summary, the buffer's whole KV MiB over n_ctx."""
    out: dict[str, float] = {}
    caches = scaling_caches(led)
    for c in caches:
        cells = c.total_cells
        assert cells  # `scaling_caches` keeps only caches with cells
        for name, mib in c.buffers.items():
            out[name] = out.get(name, 0.0) + mib * MIB / cells
    if out:
        return out
    cells = kv_cells(led)
    if not cells:
        return {}
    for table in (led.devices, led.host):
        for name, b in table.items():
            if b.kv_mib:
                out[name] = b.kv_mib * MIB / cells
    return out


def total_kv_bytes_per_token(led: Ledger) -> float | None:
    """KV bytes per token over every buffer; None where the log has no KV lines."""
    per = kv_bytes_per_token(led)
    return sum(per.values()) if per else None


def tokens_for_mib(mib: float, bytes_per_token: float) -> int:
    """Tokens of context that `mib` MiB holds at `bytes_per_token` (0 where nothing is known)."""
    if bytes_per_token <= 0 or mib <= 0:
        return 0
    return int(mib * MIB // bytes_per_token)


def context_tokens_for(savings_mib: dict[str, float], per_token: dict[str, float]) -> int | None:
    """Tokens of context that freeing `savings_mib` per device buys: every device holding KV must find room for its
    share of each new token, so the device with the least room per token decides (min over devices)."""
    tokens = [tokens_for_mib(savings_mib.get(name, 0.0), bpt) for name, bpt in per_token.items() if bpt > 0]
    return min(tokens) if tokens else None


# ---------------------------------------------------------------- pipeline-parallel copies

def mask_bytes_per_token(led: Ledger) -> float:
    """Bytes of KQ mask per token of context per copy: n_ubatch elements, f16 with flash attention, f32 without
    (f32 assumed where the log does not say: logs that do not print flash_attn predate it or ran without it)."""
    elem = 2 if led.flash_attn else 4
    return (led.n_ubatch or DEFAULT_UBATCH) * elem


def copy_inputs_mib(led: Ledger, name: str) -> float:
    """MiB of inputs one scheduler copy holds on backend `name`: the KQ mask of each KV cache (on every backend
    that holds KV, and on the host that builds the inputs) and one activation entering the split."""
    b = led.devices.get(name) or led.host.get(name)
    holds_kv = name in led.host or bool(b and b.kv_mib)
    mask = 0.0
    if holds_kv:
        cells = [c.total_cells for c in led.kv_caches if c.total_cells] or ([led.n_ctx] if led.n_ctx else [])
        mask = sum(cells) * mask_bytes_per_token(led)
    act = (led.n_embd or 0) * (led.n_ubatch or DEFAULT_UBATCH) * 4
    return (mask + act) / MIB


@dataclass
class OneCopySaving:
    """Estimated memory given back by building with GGML_SCHED_MAX_COPIES=1 (or otherwise running one copy)."""

    n_copies: int
    per_device: dict[str, float] = field(default_factory=dict)  # point estimate, MiB per device
    low: dict[str, float] = field(default_factory=dict)
    high: dict[str, float] = field(default_factory=dict)
    host_mib: float | None = None  # point estimate over host compute buffers (system RAM)
    tokens: int | None = None  # context the point estimate buys
    tokens_low: int | None = None
    tokens_high: int | None = None
    method: str = "inputs"  # "inputs" (low) or "proportional" (high) chose the point estimate
    basis: str = ""
    n_ctx_train: int | None = None  # the model's training context: no context gain goes past it
    capped: bool = False  # the token figures were cut to n_ctx_train − n_ctx
    at_limit: bool = False  # the log's context is already the model's whole context: no tokens to gain

    def to_json(self) -> JsonObject:
        return {"n_copies": self.n_copies, "per_device_mib": self.per_device, "low_mib": self.low,
                "high_mib": self.high, "host_mib": self.host_mib, "tokens": self.tokens,
                "tokens_low": self.tokens_low, "tokens_high": self.tokens_high, "method": self.method,
                "basis": self.basis, "n_ctx_train": self.n_ctx_train, "capped_at_model_limit": self.capped,
                "at_model_limit": self.at_limit, "estimate": True}


def clean_pipeline(led: Ledger) -> bool | None:
    """True when the graph has no more splits than backends + 1 (one per device plus the host input split)."""
    if led.graph_splits is None:
        return None
    backends = sum(1 for b in led.devices.values() if b.compute_mib) + 1
    return led.graph_splits <= backends


def one_copy_saving(led: Ledger) -> OneCopySaving | None:
    """The estimated saving per device of running pipeline parallelism with one copy instead of `n_copies`.
    None unless pipeline parallelism is on with more than one copy and the log shows compute buffers."""
    n = led.n_copies or (4 if led.pipeline_parallel else None)
    if not led.pipeline_parallel or not n or n < 2:
        return None
    devices = {name: b.compute_mib for name, b in led.devices.items() if b.compute_mib}
    if not devices:
        return None
    known = kv_cells(led) is not None
    low, high = {}, {}
    for name, compute in devices.items():
        high[name] = round(compute * (n - 1) / n, 2)
        if known:  # without the context size there is no mask to count: no low figure
            low[name] = round(min(high[name], (n - 1) * copy_inputs_mib(led, name)), 2)
    clean = clean_pipeline(led)
    method = "proportional" if clean is False or not known else "inputs"
    point = high if method == "proportional" else low
    host = {name: b.compute_mib for name, b in led.host.items() if b.compute_mib}
    host_mib = None
    if host:
        host_mib = round(sum(min(c * (n - 1) / n, (n - 1) * copy_inputs_mib(led, name)) if method == "inputs"
                             else c * (n - 1) / n for name, c in host.items()), 2)
    per_token = {name: bpt + mask_bytes_per_token(led) for name, bpt in kv_bytes_per_token(led).items()
                 if name in devices}
    basis = (f"estimate: {n} scheduler copies hold {n} copies of each graph input; one copy keeps 1. "
             f"low = (copies−1) × (KQ mask {kv_cells(led) or '?'} cells × n_ubatch {led.n_ubatch or DEFAULT_UBATCH}"
             f" × {'f16' if led.flash_attn else 'f32'} + one n_embd × n_ubatch f32 activation); "
             f"high = compute × (copies−1)/copies. "
             + ("Graph splits ≤ backends + 1, so the low figure is used."
                if method == "inputs" and clean else
                "Splits unknown, so the low figure is used." if method == "inputs" else
                "The log does not show the context size, so the high figure is used." if not known else
                f"{led.graph_splits} graph splits for {len(devices)} device(s): extra split inputs are copied too, "
                "so the high figure is used.")
             + " Tokens: freed MiB / (KV bytes per token + mask bytes per token), the tightest device deciding.")
    tokens = context_tokens_for(point, per_token)
    tokens_low = context_tokens_for(low, per_token) if low else None
    tokens_high = context_tokens_for(high, per_token)
    room = room_to_grow(led)
    capped = False
    if room is not None:  # memory freed past the model's training context buys no tokens
        capped = any(t is not None and t > room for t in (tokens, tokens_low, tokens_high))
        tokens, tokens_low, tokens_high = (None if t is None else min(t, room)
                                           for t in (tokens, tokens_low, tokens_high))
        basis += f" Capped at the model's training context (n_ctx_train {led.n_ctx_train:,})."
    return OneCopySaving(
        n_copies=n, per_device=dict(point), low=low, high=high, host_mib=host_mib,
        tokens=tokens, tokens_low=tokens_low, tokens_high=tokens_high, method=method, basis=basis,
        n_ctx_train=led.n_ctx_train, capped=capped, at_limit=room == 0)


def room_to_grow(led: Ledger) -> int | None:
    """Tokens of context the model allows beyond the log's (n_ctx_train − n_ctx, never below 0); None when the
    log does not say both."""
    ctx = kv_cells(led) or led.n_ctx
    if not led.n_ctx_train or not ctx:
        return None
    return max(0, led.n_ctx_train - ctx)


# ---------------------------------------------------------------- stored form

def ledger_record(led: Ledger) -> JsonObject:
    """What the results database keeps of a ledger: `Ledger.to_json()` plus the memory figures derived from it
    (KV bytes per token per buffer, and the one-copy saving estimate), so that reports built from the database
    alone can turn MiB into tokens of context."""
    out = led.to_json()
    out["kv_bytes_per_token"] = {k: round(v, 3) for k, v in kv_bytes_per_token(led).items()}
    saving = one_copy_saving(led)
    out["one_copy_saving"] = saving.to_json() if saving is not None else None
    return out
