"""The lines only ik_llama.cpp prints, and what its log does not say. Pure.

ik_llama.cpp (llamacpp/engines.py) prints its memory lines in llama.cpp's 2024 forms, which the ledger reads as it
reads llama.cpp's (`llm_load_tensors: NAME buffer size`, `llama_kv_cache_init: NAME KV buffer size`,
`llama_init_from_model: KV self size = …, K (f16): …`, `… compute buffer size`, `graph nodes  = N`,
`graph splits = S`, `llama_init_from_model: n_ctx = N`). What is its own (checked on ik-llama-cpp-python 0.1.5,
src/llama.cpp and examples/server; fixtures tests/fixtures/logs/ik-*):

- its layer placement, printed on every load, `--fit` or not (`EngineFit`): `Free memory F MiB on device D is less
  the M MiB safety margin`, a `Layer sizes` table, `Free memory F MiB on device D is less the required compute
  buffer size C MiB`, `Memory required for model tensors + cache: R MiB`, `Memory available on all devices -
  compute: A MiB`, `Setting default device in layer L to D`; with `--fit` on a MoE model `Adding experts CPU
  overrides for layer L`, and `Unable to auto-fit model` where it cannot;
- the devices in its order: `NAME: using device NAME - F MiB free` (RPC0[host:port] for every rpc-server, and a
  `CPU` device where the build has no GPU backend);
- each slot's context: `INFO [ init] new slot | … id_slot=0 n_ctx_slot=N` (n_ctx / -np: it has no unified KV cache);
- markers that tell its log apart: `HAVE_FANCY_SIMD is defined` (or `is NOT defined`) and its own context keys
  (`llama_init_from_model: graph_reuse = 1`, `fused_moe`).

What its log has no line for (`not_printed`), said rather than guessed: the scheduler's copies (it prints
`pipeline parallelism enabled (n_copies=N)` only where it enables it, which needs CUDA — `#ifndef GGML_USE_CUDA
pipeline_parallel = false`; a finished context without that line ran without pipeline parallelism, one copy,
ggml-backend.cpp `n_copies = parallel ? GGML_SCHED_MAX_COPIES : 1`), a memory breakdown table, a unified KV cache,
the KV cache's cells and layers (`KV self size` has neither: the cells are n_ctx), and a fit of the context.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .records import EngineFit, Ledger

IK_LLAMA_CPP = "ik_llama.cpp"  # the engine's name (llamacpp.engines.IK_LLAMA_CPP: logs/ sits below llamacpp/)

MARKERS = ("HAVE_FANCY_SIMD is", "llama_init_from_model: graph_reuse", "llama_init_from_model: fused_moe",
           "Memory required for model tensors + cache:", "Setting default device in layer")

_MARGIN = re.compile(r"Free memory (\d+) MiB on device (\d+) is less the (\d+) MiB safety margin")
_SHORT = re.compile(r"Free memory (\d+) MiB on device (\d+) is less the required compute buffer size")
_REQUIRED = re.compile(r"Memory required for model tensors \+ cache:\s*(\d+) MiB")
_AVAILABLE = re.compile(r"Memory available on all devices - compute:\s*(\d+) MiB")
_LAYER = re.compile(r"Setting default device in layer\s+(\d+) to (\d+)")
_USING = re.compile(r"^(?P<name>\S{1,128}): using device (?P=name) - (\d+) MiB free")
_SLOT = re.compile(r"\bnew slot \|.{0,512}?\bn_ctx_slot=(\d+)")
MAX_LAYERS = 4096


@dataclass
class IkState:
    """What ik_llama.cpp's own lines said so far, for the ledger's one pass."""

    seen: bool = False  # one of its markers
    fit: EngineFit | None = None
    fit_done: bool = False  # the load its placement was for has begun: a new placement starts a new record
    slot_ctx: int | None = None
    order: list[str] = field(default_factory=list)  # devices as it numbers them (`using device`)


def read(ik: IkState, line: str) -> bool:
    """One line: True where it is one of ik_llama.cpp's own and nothing else reads it."""
    if any(m in line for m in MARKERS[:3]):
        ik.seen = True
        return "HAVE_FANCY_SIMD" in line
    if "using device" in line and (m := _USING.match(line.strip())):
        name = m.group("name")
        if name != "CPU" and name not in ik.order and len(ik.order) < 256:
            ik.order.append(name)
        return True
    if "new slot" in line and (m := _SLOT.search(line)):
        ik.slot_ctx = int(m.group(1))
        return True
    if "offloaded" in line and "layers to GPU" in line:
        ik.fit_done = True
        return False  # the ledger reads it too
    return _fit(ik, line)


def _fit(ik: IkState, line: str) -> bool:  # noqa: C901 - a flat dispatch over the placement's lines
    if not any(k in line for k in ("Free memory", "Memory required", "Memory available", "Setting default device",
                                   "Adding experts CPU overrides", "Unable to auto-fit")):
        return False
    if ik.fit is None or ik.fit_done:
        ik.fit, ik.fit_done = EngineFit(), False
    fit = ik.fit
    ik.seen = ik.seen or "Memory required" in line or "Setting default device" in line
    if m := _MARGIN.search(line):
        fit.margin_mib = int(m.group(3))
    elif m := _REQUIRED.search(line):
        fit.required_mib = int(m.group(1))
        return True
    elif m := _AVAILABLE.search(line):
        fit.available_mib = int(m.group(1))
        return True
    elif m := _LAYER.search(line):
        layer, device = int(m.group(1)), int(m.group(2))
        if layer < MAX_LAYERS:
            fit.layer_device += [-1] * (layer + 1 - len(fit.layer_device))
            fit.layer_device[layer] = device
        return True
    elif "Adding experts CPU overrides" in line:
        fit.expert_overrides += 1
        return True
    elif "Unable to auto-fit" in line:
        fit.failed = "Unable to auto-fit model"
        return False  # also a failure the ledger's failure reader sees
    if (_MARGIN.search(line) or _SHORT.search(line)) and len(fit.warnings) < 64:
        fit.warnings.append(line.strip()[:240])
        return True
    return False


NO_COPIES = ("ik_llama.cpp prints no scheduler copies: it prints \"pipeline parallelism enabled (n_copies=N)\" only "
             "where it enables it (CUDA builds); this context finished without that line, so it ran without "
             "pipeline parallelism, with one copy")
NOT_PRINTED = {
    "breakdown": "ik_llama.cpp prints no memory breakdown table (the buffer lines are the figures)",
    "kv_unified": "ik_llama.cpp has no unified KV cache: each slot has n_ctx / -np cells (n_ctx_seq, from its "
                  "`new slot … n_ctx_slot` line)",
    "kv_layers": "ik_llama.cpp's `KV self size` line gives no cells or layers: the cells are n_ctx",
    "fit_ctx": "ik_llama.cpp has no fit of the context: n_ctx is the one it was given (or the model's)",
    "n_seq_max": "ik_llama.cpp prints no n_seq_max (its slots are the server's -np)",
}


def finish(ik: IkState, led: Ledger) -> None:
    """The ledger's engine, ik_llama.cpp's placement and slot context, its device order, and every figure its log
    has no line for, said (`not_printed`)."""
    if not ik.seen:
        return
    led.engine = IK_LLAMA_CPP
    led.engine_fit = ik.fit
    if ik.slot_ctx is not None:
        led.n_ctx_seq = ik.slot_ctx
    for name in ik.order:
        desc = name[name.find("[") + 1:-1] if name.endswith("]") and "[" in name else ""
        led.device_desc.setdefault(name, desc)
    led.not_printed = dict(NOT_PRINTED)
    if led.sched_copies is None and led.pp_enabled_copies is None and not led.pp_enabled_line \
            and led.graph_splits is not None and not led.context_failed:
        led.pipeline_parallel = False
        led.not_printed["sched_copies"] = NO_COPIES
