"""`llamalab tune`'s search, pure: the candidates, their memory predicted from calibration dry runs and the model's
header, feasibility under the budgets, dominance and the front; stage two's measured speeds per configuration
(`measures`).

A candidate is one llama-server command line: a split mode (layer with pipeline parallelism, layer without it —
the no-op override `-ot no_such_tensor=CPU` —, tensor, or none), a layer split (`-ts` as layer counts, so that
`-ts 4,5` puts exactly 4 repeating layers on the first device and the rest with the output layer on the second),
K and V cache types, a micro-batch (`-ub`), and for MoE models the experts of the first N layers kept in host
memory (`--n-cpu-moe N`). Its context is the largest (a multiple of 256, at most the model's training context)
whose per-device memory — model + KV cache + compute, as llama.cpp's dry run projects it — stays within every
budget less llama.cpp's margin.

Stage two's measured comparisons (ratios with intervals, the measured front, the pick's rule) are in tune/pick.py;
the reports show what a run decided (report/analysis/tune.py).

Dominance in stage one (before any speed is known) rests on the directions each dimension is known to move:
a candidate is dominated when another holds at least its context and is no worse in every dimension — K and V
types at least as precise (a quantized cache is only worth its precision for the context it buys), a micro-batch
at least as large (prompt speed grows with it, generation does not change), on a GPU rig no more experts in host
memory, and the same layer split unless the devices share one processor (virtual devices of one GPU, local
rpc-servers), where a split moves no work between processors. Split modes are never ordered against each other:
pipeline parallelism is not "never slower" (at -np 4 on an H200 it generated up to 3% slower). Stage two races
the whole front (tune/race.py, tune/pick.py): it drops a member only when the measurements show it cannot be
the pick.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..llamacpp import flags
from ..llamacpp.engines import LLAMA_CPP

NOOP_OVERRIDE = "no_such_tensor=CPU"  # matches no tensor; any override turns pipeline parallelism off
STEP = 256  # contexts are multiples of this (llama.cpp's fit rounds the same way)
DEFAULT_UBATCH = 512  # llama.cpp's -ub
DEFAULT_BATCH = 2048  # llama.cpp's -b

KV_BYTES = flags.KV_BYTES  # bytes per value of each cache type
KV_RANK = flags.KV_RANK  # precision order (higher: closer to the model's own values)
EXPERT_TENSORS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_up_exps")
MIB = float(1 << 20)


# ---------------------------------------------------------------- the rig and the model


@dataclass(frozen=True)
class Rig:
    """The devices a tune searches for: names in llama.cpp's order, and the memory each may use."""

    names: tuple[str, ...]
    budgets_mib: tuple[int, ...]  # free memory per device (the emulated card's, or what the device reports)
    margins_mib: tuple[int, ...]  # llama.cpp's fit margin on each
    backend: str
    shared_processor: bool  # every device runs on one processor: a layer split moves no work between processors
    copies: int = 4  # the build's scheduler copies (GGML_SCHED_MAX_COPIES): pipeline parallelism's
    pp_capable: bool = True  # the build can pipeline (not a BLAS build)

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def avail_mib(self) -> tuple[float, ...]:
        return tuple(float(b - m) for b, m in zip(self.budgets_mib, self.margins_mib, strict=True))

    @property
    def gpu(self) -> bool:
        """Devices that are faster than the host: experts in host memory slow generation down."""
        return self.backend in ("cuda", "rocm", "vulkan", "metal")


@dataclass(frozen=True)
class ModelLayout:
    """Where a model's weights are, from its GGUF header: per repeating layer (and the experts among them), and the
    output layer, which llama.cpp puts on the last device (the input embeddings stay in host memory)."""

    n_layer: int
    n_ctx_train: int
    n_expert: int
    layer_mib: tuple[float, ...]
    expert_mib: tuple[float, ...]
    output_mib: float

    @property
    def moe(self) -> bool:
        return self.n_expert > 1 and any(self.expert_mib)


def model_layout(tensors: Iterable[tuple[str, int]], n_layer: int, n_ctx_train: int, n_expert: int = 0
                 ) -> ModelLayout:
    """From (tensor name, bytes) of a GGUF header. A model without `output.weight` ties its output to the token
    embeddings, which llama.cpp then also places on the output device."""
    layer = [0.0] * n_layer
    expert = [0.0] * n_layer
    output = 0.0
    embd = 0.0
    has_output = False
    for name, nbytes in tensors:
        mib = nbytes / MIB
        if name.startswith("blk."):
            head, _, rest = name[4:].partition(".")
            if head.isdecimal() and int(head) < n_layer:
                il = int(head)
                layer[il] += mib
                if rest.split(".")[0] in EXPERT_TENSORS:
                    expert[il] += mib
        elif name.startswith("output."):
            has_output = has_output or name == "output.weight"
            output += mib
        elif name.startswith("output_norm."):
            output += mib
        elif name == "token_embd.weight":
            embd = mib
    if not has_output:
        output += embd
    return ModelLayout(n_layer=n_layer, n_ctx_train=n_ctx_train, n_expert=n_expert, layer_mib=tuple(layer),
                       expert_mib=tuple(expert), output_mib=output)


# ---------------------------------------------------------------- candidates


@dataclass(frozen=True)
class Candidate:
    split: str  # layer | layer-nopp | tensor | none (ik_llama.cpp: layer | layer-nopp | graph | none)
    ctk: str = "f16"
    ctv: str = "f16"
    ubatch: int = DEFAULT_UBATCH
    n_cpu_moe: int = 0
    ts: tuple[int, ...] | None = None  # layers per device (the last also holds the output layer); ik_llama.cpp:
    # its weights (it places whole layers by their size, KV cache and compute included: tune/stage_one_engine.py)
    main_gpu: int = 0  # -sm none: the one device
    engine: str = LLAMA_CPP  # whose llama-server runs it (llamacpp/engines.py)
    fa_off: bool = False  # -fa off (ik_llama.cpp on RPC devices at 2+ requests at once: tune/stage_one_engine.py)

    @property
    def kv(self) -> str:
        return f"{self.ctk}/{self.ctv}"

    @property
    def own_engine(self) -> bool:
        """llama.cpp's: the engine every tune searches (and whose default every member is measured against)."""
        return self.engine == LLAMA_CPP

    def pipelined(self, rig: Rig) -> bool:
        """Whether llama.cpp turns pipeline parallelism on for it (any tensor override turns it off)."""
        return self.split == "layer" and rig.n > 1 and rig.pp_capable and rig.copies > 1 and not self.n_cpu_moe

    def args(self, n_ctx: int | None = None) -> list[str]:
        """The llama-server arguments (llama.cpp's defaults left out: f16 caches, -ub 512, -b 2048). ik_llama.cpp's
        `none` is a -ts that gives its one device everything (`ts`): its -sm none keeps a buffer type per layer."""
        a = ["-ngl", "999", "-fa", "off" if self.fa_off else "on"]
        if self.split == "layer-nopp":
            a += ["-ot", NOOP_OVERRIDE]
        elif self.split in ("tensor", "graph"):
            a += ["-sm", self.split]
        elif self.split == "none" and self.own_engine:
            a += ["-sm", "none", "-mg", str(self.main_gpu)]
        if self.ts:
            a += ["-ts", ",".join(str(x) for x in self.ts)]
        if self.ctk != "f16":
            a += ["-ctk", self.ctk]
        if self.ctv != "f16":
            a += ["-ctv", self.ctv]
        if self.ubatch != DEFAULT_UBATCH:
            a += ["-ub", str(self.ubatch)]
            if self.ubatch > DEFAULT_BATCH:
                a += ["-b", str(self.ubatch)]
        if self.n_cpu_moe:
            a += ["--n-cpu-moe", str(self.n_cpu_moe)]
        if n_ctx is not None:
            a += ["-c", str(n_ctx)]
        return a

    def split_label(self, rig: Rig) -> str:
        if rig.n == 1:
            return "one device"
        if self.split == "layer":
            return ("layer, pipeline parallel" if self.pipelined(rig) else "layer") + (
                "" if self.own_engine else " (its own placement)")
        if self.split == "none" and not self.own_engine:
            return f"one device ({rig.names[self.main_gpu] if self.main_gpu < rig.n else self.main_gpu})"
        return {"layer-nopp": "layer, no pipeline (-ot no-op)", "tensor": "tensor", "graph": "graph",
                "none": f"none (device {self.main_gpu})"}[self.split]

    def label(self, rig: Rig) -> str:
        parts = [("" if self.own_engine else f"{self.engine}: ") + self.split_label(rig)]
        if self.ts:
            parts.append("-ts " + ",".join(str(x) for x in self.ts))
        parts.append(f"KV {self.kv}")
        parts.append(f"-ub {self.ubatch}")
        if self.n_cpu_moe:
            parts.append(f"--n-cpu-moe {self.n_cpu_moe}")
        if self.fa_off:
            parts.append("-fa off")
        return ", ".join(parts)

    def key(self) -> str:
        ts = ",".join(str(x) for x in self.ts) if self.ts else "-"
        return (f"{self.split}|ts={ts}|kv={self.kv}|ub={self.ubatch}|ncmoe={self.n_cpu_moe}|mg={self.main_gpu}"
                + ("" if self.own_engine else f"|engine={self.engine}") + ("|fa=off" if self.fa_off else ""))


@dataclass(frozen=True)
class Space:
    """The values searched per dimension, and each dimension left out with the reason."""

    splits: tuple[str, ...]
    kv: tuple[tuple[str, str], ...]
    ubatch: tuple[int, ...]
    n_cpu_moe: tuple[int, ...]
    not_searched: dict[str, str] = field(default_factory=dict)

    def candidates(self, rig: Rig) -> list[Candidate]:
        """Every combination (the layer split of each is chosen later, by prediction). Without pipeline
        parallelism to turn off, `layer-nopp` is `layer` and is left out; so is it with experts in host memory."""
        main = max(range(rig.n), key=lambda i: (rig.budgets_mib[i], -i)) if rig.n else 0
        out = []
        for split in self.splits:
            for ncmoe in self.n_cpu_moe:
                if split == "layer-nopp" and ncmoe:
                    continue  # --n-cpu-moe is an override already: pipeline parallelism is off either way
                for ctk, ctv in self.kv:
                    for ub in self.ubatch:
                        out.append(Candidate(split=split, ctk=ctk, ctv=ctv, ubatch=ub, n_cpu_moe=ncmoe,
                                             main_gpu=main if split == "none" else 0))
        return out


def space(splits: Sequence[str], kv: Sequence[str], ubatch: Sequence[int], n_cpu_moe: Sequence[int] | None,
          rig: Rig, model: ModelLayout) -> Space:
    """What applies to this rig and model of the dimensions asked for."""
    skipped: dict[str, str] = {}
    use = []
    for s in splits:
        if rig.n == 1 and s != "layer":
            skipped[f"split {s}"] = "one device: nothing to split"
            continue
        if s == "layer-nopp" and not (rig.pp_capable and rig.copies > 1):
            skipped["split layer-nopp"] = ("this build has no pipeline parallelism to turn off"
                                           + ("" if rig.pp_capable else " (a BLAS build)")
                                           + (" (GGML_SCHED_MAX_COPIES=1)" if rig.copies <= 1 else ""))
            continue
        use.append(s)
    if rig.n > 1 and "layer" not in use and "layer-nopp" not in use:
        skipped["-ts"] = "no layer split searched"
    elif rig.n == 1:
        skipped["-ts"] = "one device"
    pairs = tuple(tuple(p.split("/", 1)) for p in kv)
    if model.moe:
        ncm = tuple(sorted(set(n_cpu_moe))) if n_cpu_moe is not None else auto_n_cpu_moe(rig, model)
        ncm = tuple(n for n in ncm if n <= model.n_layer) or (0,)
    else:
        ncm = (0,)
        skipped["--n-cpu-moe"] = "a dense model: no experts"
    return Space(splits=tuple(use), kv=pairs, ubatch=tuple(sorted(set(ubatch))), n_cpu_moe=ncm,  # type: ignore[arg-type]
                 not_searched=skipped)


def auto_n_cpu_moe(rig: Rig, model: ModelLayout) -> tuple[int, ...]:
    """--n-cpu-moe values to search: 0, and from the fewest layers whose experts must leave the devices for the
    weights alone to fit (the header's sizes against the budgets, less a tenth for KV cache and compute), three
    more steps of an eighth of the layers each. More experts in host memory buy context and cost speed."""
    dense = sum(model.layer_mib) - sum(model.expert_mib) + model.output_mib
    room = sum(rig.avail_mib) * 0.9
    need = 0
    moved = 0.0
    while need < model.n_layer and dense + sum(model.expert_mib) - moved > room:
        moved += model.expert_mib[need]
        need += 1
    step = max(1, model.n_layer // 8)
    vals = {0, need} | {min(model.n_layer, need + k * step) for k in range(1, 4)}
    return tuple(sorted(vals))


# ---------------------------------------------------------------- where the layers go


def proportional_ts(budgets: Sequence[float], n_layer: int) -> tuple[int, ...]:
    """Layer counts (summing to n_layer + 1, the output layer included) in proportion to the budgets: llama.cpp's
    split for `-ts B0,B1,…`, as whole layers, each device at least one."""
    total = n_layer + 1
    n = len(budgets)
    s = float(sum(budgets)) or 1.0
    cum = [round(total * sum(budgets[: i + 1]) / s) for i in range(n)]
    counts = [cum[0]] + [cum[i] - cum[i - 1] for i in range(1, n)]
    return _at_least_one(counts, total)


def _at_least_one(counts: list[int], total: int) -> tuple[int, ...]:
    counts = [max(1, c) for c in counts]
    while sum(counts) > total:
        i = max(range(len(counts)), key=lambda j: counts[j])
        counts[i] -= 1
    return tuple(counts)


def device_of_layers(ts: Sequence[int] | None, n_layer: int, n_devices: int, main: int = 0) -> list[int]:
    """The device of each layer 0 … n_layer (the last is the output layer) for layer counts `ts` (None: all on
    `main`, as -sm none does)."""
    if not ts:
        return [main] * (n_layer + 1)
    out = []
    for i, c in enumerate(ts):
        out += [i] * c
    return (out + [len(ts) - 1] * (n_layer + 1))[: n_layer + 1]


def weights_mib(model: ModelLayout, ts: Sequence[int] | None, n_cpu_moe: int, n_devices: int, main: int = 0
                ) -> list[float]:
    """Weights per device from the header: each device's layers (less the experts of the first n_cpu_moe layers,
    which stay in host memory) and the output layer on its device."""
    devs = device_of_layers(ts, model.n_layer, n_devices, main)
    out = [0.0] * n_devices
    for il in range(model.n_layer):
        out[devs[il]] += model.layer_mib[il] - (model.expert_mib[il] if il < n_cpu_moe else 0.0)
    out[devs[model.n_layer]] += model.output_mib
    return out


def kv_layers(model: ModelLayout, ts: Sequence[int] | None, n_devices: int, main: int = 0) -> list[int]:
    devs = device_of_layers(ts, model.n_layer, n_devices, main)
    out = [0] * n_devices
    for il in range(model.n_layer):
        out[devs[il]] += 1
    return out


def kv_ratio(ctk: str, ctv: str) -> float:
    """A cache's bytes against f16/f16 (K and V of equal width, as in every model llamalab writes)."""
    return (KV_BYTES[ctk] + KV_BYTES[ctv]) / (2 * KV_BYTES["f16"])


# ---------------------------------------------------------------- dry-run figures and the memory model


@dataclass(frozen=True)
class DeviceMib:
    model: float = 0.0
    context: float = 0.0
    compute: float = 0.0
    kv_layers: int = 0

    @property
    def used(self) -> float:
        return self.model + self.context + self.compute


@dataclass(frozen=True)
class Measured:
    """One dry run: per device in the rig's order (a device the candidate does not use has zeros), and the host."""

    n_ctx: int
    devices: tuple[DeviceMib, ...]
    host: DeviceMib = DeviceMib()

    def used(self) -> list[float]:
        return [d.used for d in self.devices]


@dataclass(frozen=True)
class Calibration:
    """Two dry runs of one split mode and micro-batch at the proportional split, f16/f16, with `n_cpu_moe`: the
    memory model of every candidate of that group. Weights move with the header's sizes, the KV cache scales with
    layers × cache bytes × context, and compute buffers are linear in the context between the two runs."""

    split: str
    ubatch: int
    ts: tuple[int, ...] | None
    n_cpu_moe: int
    main_gpu: int
    low: Measured
    high: Measured

    def kv_mib_per_layer_token(self) -> float:
        """f16/f16 KV cache per layer per token (MiB), from the larger run."""
        layers = sum(d.kv_layers for d in self.high.devices)
        total = sum(d.context for d in self.high.devices)
        return total / (layers * self.high.n_ctx) if layers and self.high.n_ctx else 0.0

    def compute_line(self, i: int) -> tuple[float, float]:
        """(intercept, slope per token) of device i's compute buffer."""
        lo, hi = self.low.devices[i].compute, self.high.devices[i].compute
        dc = self.high.n_ctx - self.low.n_ctx
        slope = (hi - lo) / dc if dc else 0.0
        return lo - slope * self.low.n_ctx, max(slope, 0.0)


def calibration_key(c: Candidate, rig: Rig) -> tuple[str, int]:
    """The calibration group a candidate's memory is predicted from: its split mode and micro-batch, where a layer
    split that is not pipelined (experts in host memory are an override too) takes the no-pipeline group's
    compute buffers — pipeline parallelism's copies are most of a device's compute buffer."""
    split = c.split
    if split == "layer" and rig.n > 1 and not c.pipelined(rig):
        split = "layer-nopp"
    return split, c.ubatch


@dataclass(frozen=True)
class Prediction:
    n_ctx: int  # the largest multiple of STEP within every budget, at most the training context (0: none fits)
    raw: float  # the uncapped solution (tokens); where the weights alone do not fit, minus the worst overflow (MiB)
    used_mib: tuple[float, ...]  # per device at n_ctx
    slopes: tuple[float, ...]  # MiB per token per device


def predict(c: Candidate, ts: tuple[int, ...] | None, cal: Calibration, model: ModelLayout, rig: Rig) -> Prediction:
    """A candidate's context and memory per device from its group's calibration (pure arithmetic, no run)."""
    n = rig.n
    w_cal = weights_mib(model, cal.ts, cal.n_cpu_moe, n, cal.main_gpu)
    w_new = weights_mib(model, ts, c.n_cpu_moe, n, c.main_gpu)
    layers = kv_layers(model, ts, n, c.main_gpu)
    kv = cal.kv_mib_per_layer_token() * kv_ratio(c.ctk, c.ctv)
    avail = rig.avail_mib
    fixed, slopes = [], []
    for i in range(n):
        a, b = cal.compute_line(i)
        used_layers = layers[i] or (w_new[i] > 0)
        fixed.append(cal.high.devices[i].model + w_new[i] - w_cal[i] + (a if used_layers else 0.0))
        slopes.append(layers[i] * kv + (b if used_layers else 0.0))
    rooms = [avail[i] - fixed[i] for i in range(n)]
    raw = math.inf
    if min(rooms) < 0:
        raw = min(rooms)  # MiB the worst device is over with no context at all (negative: climbs toward a fit)
    else:
        for i in range(n):
            if slopes[i] > 0:
                raw = min(raw, rooms[i] / slopes[i])
    cap = model.n_ctx_train
    ctx = cap if raw >= cap else max(0, int(raw // STEP) * STEP)
    return Prediction(n_ctx=ctx, raw=raw, used_mib=tuple(fixed[i] + slopes[i] * ctx for i in range(n)),
                      slopes=tuple(slopes))


def best_ts(c: Candidate, cal: Calibration, model: ModelLayout, rig: Rig) -> tuple[tuple[int, ...] | None, Prediction]:
    """The layer split with the most predicted context: from the proportional split, move one layer at a time to
    wherever the context grows (the context is a minimum over devices, so this climbs to its peak)."""
    if c.split not in ("layer", "layer-nopp") or rig.n == 1:
        return None, predict(c, None, cal, model, rig)
    ts = proportional_ts(rig.avail_mib, model.n_layer)
    best = predict(c, ts, cal, model, rig)
    improved = True
    while improved:
        improved = False
        for i in range(rig.n):
            for j in range(rig.n):
                if i == j or ts[i] <= 1:
                    continue
                t = list(ts)
                t[i] -= 1
                t[j] += 1
                p = predict(c, tuple(t), cal, model, rig)
                if p.raw > best.raw + 1e-9:
                    ts, best, improved = tuple(t), p, True
    return ts, best


def over_budget(m: Measured, rig: Rig) -> list[float]:
    """MiB beyond budget − margin per device (≤ 0: within)."""
    return [u - a for u, a in zip(m.used(), rig.avail_mib, strict=True)]


# ---------------------------------------------------------------- dominance and the front


def no_worse(a: Candidate, b: Candidate, rig: Rig) -> bool:
    """Whether a is at least as good as b in every speed and quality dimension (see the module's docstring). Engines
    are never ordered against each other, nor is flash attention on against off."""
    if a.engine != b.engine or a.fa_off != b.fa_off:
        return False
    if KV_RANK[a.ctk] < KV_RANK[b.ctk] or KV_RANK[a.ctv] < KV_RANK[b.ctv]:
        return False
    if a.ubatch < b.ubatch:
        return False
    if (a.n_cpu_moe > b.n_cpu_moe) if rig.gpu else (a.n_cpu_moe != b.n_cpu_moe):
        return False
    if a.split != b.split:  # no split mode is assumed faster than another, pipeline parallelism included
        return False
    if a.split == "none" and a.main_gpu != b.main_gpu:
        return False
    if not rig.shared_processor and (a.ts or ()) != (b.ts or ()):
        return False
    return True


def dominates(a: Candidate, ctx_a: int, b: Candidate, ctx_b: int, rig: Rig) -> bool:
    """a holds at least b's context, is no worse in any dimension, and is better somewhere (or equal and first)."""
    return ctx_a >= ctx_b and no_worse(a, b, rig) and (ctx_a > ctx_b or not no_worse(b, a, rig))


def beaten_by(items: Sequence[tuple[Candidate, int]], i: int, rig: Rig) -> int | None:
    """The index of a pair that dominates pair i (of equals, the one listed first wins), or None."""
    c, ctx = items[i]
    for j, (d, dctx) in enumerate(items):
        if j == i:
            continue
        if dominates(d, dctx, c, ctx, rig) or (j < i and dctx == ctx and no_worse(d, c, rig) and no_worse(c, d, rig)):
            return j
    return None


def front(items: Sequence[tuple[Candidate, int]], rig: Rig) -> list[int]:
    """Indexes of the non-dominated (candidate, context) pairs; of equals, the first one listed."""
    return [i for i in range(len(items)) if beaten_by(items, i, rig) is None]


# ---------------------------------------------------------------- stage two: measured speeds


SPEEDS = ("input_tps", "output_tps", "aggregate_output_tps")  # prompt t/s, generation t/s, aggregate at K


@dataclass
class Measures:
    """One measured configuration: its context and the per-trial samples of each speed (single stream for prompt
    and generation, at K requests for the aggregate)."""

    name: str
    n_ctx: int
    samples: dict[str, list[float]] = field(default_factory=dict)

    def median(self, metric: str) -> float | None:
        xs = self.samples.get(metric) or []
        return statistics.median(xs) if xs else None


def measures(trials: Iterable[Mapping[str, Any]], ctx: dict[str, int], parallel: int,
             real_ctx: dict[str, int] | None = None
             ) -> list[Measures]:
    """Stored trial rows → one Measures per build, from the first workload cell the rows hold: prompt and
    generation t/s of the single-stream trials, aggregate output t/s of the trials at `parallel` requests (single
    stream too when that is 1). A trial with failed requests is left out. The context is the one the server ran
    with where known (`real_ctx`, from its ledger), else `ctx`."""
    rows = [t for t in trials if not t.get("errors")]
    cell = (rows[0].get("cell_prompt_tokens"), rows[0].get("cell_output_tokens")) if rows else None
    by: dict[str, Measures] = {}
    for t in rows:
        if (t.get("cell_prompt_tokens"), t.get("cell_output_tokens")) != cell:
            continue
        name = t["build"]
        m = by.get(name)
        if m is None:
            m = by[name] = Measures(name, int((real_ctx or {}).get(name) or ctx.get(name) or 0),
                                    {k: [] for k in SPEEDS})
        level = int(t["concurrency"])
        if level == 1:
            for k in ("input_tps", "output_tps"):
                if (t.get(k) or 0) > 0:
                    m.samples[k].append(float(t[k]))
        if level == parallel and (t.get("aggregate_output_tps") or 0) > 0:
            m.samples["aggregate_output_tps"].append(float(t["aggregate_output_tps"]))
    return list(by.values())
