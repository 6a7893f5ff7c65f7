"""Tune's stage one for another engine (`[tune] engines`, `--engines llama.cpp,ik_llama.cpp`): ik_llama.cpp's members,
measured by real loads.

ik_llama.cpp has no dry run of its memory: no fit of the context to stop after (its `--fit` only moves MoE experts),
and its `--dry-run` allocates every buffer, starts the server and serves, with compute buffers unlike a real load's
(docs/engines.md). So each of its configurations is measured by a real load stopped once its context is made
(`setup.configplan.load_plan`: the figures are the load's own), which reads the weights — seconds on a large model.
The search is kept to few loads:

- **Its members are llama.cpp's front, as ik_llama.cpp runs it** (`plan`): for each member of llama.cpp's verified
  front, the same K/V types, micro-batch and `--n-cpu-moe`, with the split mode ik_llama.cpp has for it — its layer
  split for `layer` and `layer-nopp` (it runs pipeline parallelism only on CUDA and with more than one scheduler
  copy, its default being one: elsewhere the two are one configuration), the same split kept apart where it does
  run it; one device for `none`; its `-sm graph` for `tensor`, on CUDA only (on RPC devices it aborts at its first
  decode: ggml-backend.cpp `GGML_ASSERT(*this_node_backend_id == j)`). Plus **ik_llama.cpp's own default**: its
  cache types (f16/f16), micro-batch (512), flash attention (on) and layer placement, with every layer on the
  devices (`-ngl 999`: its own default, 0, keeps them all in host memory, which no device budget describes). The
  dimensions' trade-offs (a cache's precision for context, a micro-batch for prompt speed) are the same in both
  engines, so a candidate llama.cpp's search pruned has no counterpart here: what its front holds is what is
  worth a load.
- **Its layer placement is its own.** ik_llama.cpp places whole layers by their size with their KV cache and
  compute at the context asked for (src/llama.cpp, "Setting default device in layer"); its `-ts` are the weights
  of that placement, not layer counts (`-ts 3,6` put 5 of the tiny model's 8 layers on the first device), and the
  placement moves with the context. Its layer split takes the budgets' proportions as weights — what llamalab
  gives it in a run too — and is not searched. One device is a `-ts` that gives it everything: its `-sm none`
  keeps a buffer type per layer and spreads them over RPC devices.
- **Each member's context** is the largest within every budget less the margin, searched by loads
  (`stage_one.verify`, the search llama.cpp's members get by dry runs) from the context its llama.cpp counterpart
  holds, with the slopes of its first load: about three loads a member, each exact.
- **Its front is its own** (`stage_one.with_front` over its members): engines are never ordered against each
  other; stage two races both fronts against llama.cpp's default.

What it cannot run is left out with the reason (`Space.not_searched`): K/V types whose flash-attention kernels the
build leaves out (`GGML_IQK_FA_ALL_QUANTS=OFF`, engines.kernel_cut); and on RPC devices with 2 or more requests at
once, flash attention itself (its rpc-server aborts, `GGML_ASSERT(S > 0)`: docs/engines.md), so there its members
run with `-fa off`, which a quantized V cache cannot.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..llamacpp import engines
from ..llamacpp.build import BuildArtifact
from ..llamacpp.cmake import cmake_true
from ..logs.dryrun import DeviceFigures, DryRun
from ..rig import devices
from ..setup import configplan
from ..setup import prepare as session
from ..setup.progress import Progress
from ..study.spec import Config
from . import space as ts
from .records import Member
from .stage_one import StageOne, TuneSetup, to_measured, verify, with_front

RPC_BACKENDS = frozenset({"cpu-rpc", "rpc"})  # where ik_llama.cpp's rpc-server aborts on 2+ sequences with FA
FULL_V = frozenset({"f32", "f16", "bf16"})  # V cache types that need no flash attention


def engine_rig(rig: ts.Rig, art: BuildArtifact) -> ts.Rig:
    """llama.cpp's rig as another engine's build runs on it: the same devices, budgets and margins, its own copies,
    and pipeline parallelism only on the backends where that engine runs it (pure)."""
    eng = engines.get(art.engine)
    return dataclasses.replace(rig, copies=art.expected_copies,
                               pp_capable=rig.pp_capable and rig.backend in eng.pp_backends)


def _kv_left_out(ctk: str, ctv: str, fa_off: bool, cut: bool) -> str | None:
    if fa_off and ctv not in FULL_V:
        return "a quantized V cache needs flash attention, which is off here"
    if cut and not fa_off and {ctk, ctv} & engines.IK_FA_CUT_TYPES:
        return (f"this build leaves out the flash-attention kernels of {', '.join(sorted(engines.IK_FA_CUT_TYPES))} "
                f"caches ({', '.join(engines.IK_FA_CUT)}=OFF: engines.kernel_cut; a tune that searches such a cache "
                "builds without the cut)")
    return None


def _split_of(split: str, rig: ts.Rig) -> str | None:
    """The engine's counterpart of a llama.cpp split mode on this rig (None: it has none here)."""
    if rig.n == 1:
        return "layer"
    if split == "layer-nopp":
        return "layer-nopp" if rig.pp_capable and rig.copies > 1 else "layer"
    if split == "tensor":
        return "graph" if rig.backend == "cuda" else None
    return split


def plan(front: Sequence[ts.Candidate], rig: ts.Rig, splits: Sequence[str], options: Mapping[str, object],
         parallel: int, engine: str = engines.IK_LLAMA_CPP) -> tuple[list[ts.Candidate], ts.Space]:
    """The engine's candidates — its own default first, then the counterparts of llama.cpp's front (`front`, in its
    order; `splits`: the split modes the tune searches) — and the space they span, with what is left out and why
    (pure). `rig`: the engine's (`engine_rig`); `options`: its build's CMake options."""
    skipped: dict[str, str] = {}
    fa_off = rig.backend in RPC_BACKENDS and parallel > 1
    if fa_off:
        skipped["flash attention"] = (f"{engine}'s rpc-server aborts with flash attention on 2 or more sequences in a "
                                      f"batch (GGML_ASSERT(S > 0)), and {parallel} requests run at once: -fa off")
    cut = engine == engines.IK_LLAMA_CPP and any(k in options and not cmake_true(str(options[k]))
                                                 for k in engines.IK_FA_CUT)
    main = max(range(rig.n), key=lambda i: (rig.budgets_mib[i], -i)) if rig.n else 0
    weights = tuple(rig.budgets_mib) if rig.n > 1 else None

    def make(split: str, ctk: str, ctv: str, ub: int, ncmoe: int) -> ts.Candidate:
        split_ts = tuple(int(i == main) for i in range(rig.n)) if split == "none" else \
            None if split == "graph" else weights
        return ts.Candidate(split=split, ctk=ctk, ctv=ctv, ubatch=ub, n_cpu_moe=ncmoe, ts=split_ts,
                            main_gpu=main if split == "none" else 0, engine=engine, fa_off=fa_off)

    out = [make("layer", "f16", "f16", ts.DEFAULT_UBATCH, 0)]  # its own default
    combos = []
    for c in front:
        if (why := _kv_left_out(c.ctk, c.ctv, fa_off, cut)) is not None:
            skipped[f"KV {c.kv}"] = why
            continue
        combos.append((c.ctk, c.ctv, c.ubatch, c.n_cpu_moe))
        if (split := _split_of(c.split, rig)) is not None:
            out.append(make(split, c.ctk, c.ctv, c.ubatch, c.n_cpu_moe))
    if "tensor" in splits and rig.n > 1:
        if rig.backend == "cuda":
            out += [make("graph", *combo) for combo in dict.fromkeys(combos)]
        else:
            skipped["split graph"] = (f"{engine}'s counterpart of -sm tensor runs on CUDA only: on RPC devices it "
                                      "aborts at its first decode (GGML_ASSERT(*this_node_backend_id == j))")
    if "layer-nopp" in splits and rig.n > 1 and not (rig.pp_capable and rig.copies > 1):
        skipped["split layer-nopp"] = (f"{engine} runs no pipeline parallelism on this build and backend (CUDA only, "
                                       "and its default is one scheduler copy): its layer split is already without")
    if rig.n > 1:
        skipped["-ts"] = (f"{engine} places whole layers by their size with their KV cache and compute; its -ts are "
                          "weights (the budgets'), not layer counts")
    cands = list({c.key(): c for c in out}.values())
    space = ts.Space(splits=tuple(dict.fromkeys(c.split for c in cands)),
                     kv=tuple(dict.fromkeys((c.ctk, c.ctv) for c in cands)),
                     ubatch=tuple(sorted({c.ubatch for c in cands})),
                     n_cpu_moe=tuple(sorted({c.n_cpu_moe for c in cands})), not_searched=skipped)
    return cands, space


def starts(cands: Sequence[ts.Candidate], front: Sequence[Member], rig: ts.Rig, fallback: int) -> dict[str, int]:
    """Where each candidate's search starts (pure): the most context a llama.cpp member it is the counterpart of
    holds (same K/V types, micro-batch and --n-cpu-moe, and split), else the most any llama.cpp member of its K/V
    types holds, else `fallback`."""
    out: dict[str, int] = {}
    for c in cands:
        same = [int(m.n_ctx or 0) for m in front if (m.candidate.kv, m.candidate.ubatch, m.candidate.n_cpu_moe) ==
                (c.kv, c.ubatch, c.n_cpu_moe) and _split_of(m.candidate.split, rig) == c.split]
        kin = [int(m.n_ctx or 0) for m in front if m.candidate.kv == c.kv]
        out[c.key()] = max(same or kin or [fallback])
    return out


class Loads:
    """Real loads of the engine's llama-server, each stopped once its context is made (`configplan.load_plan`),
    counted: what its candidates are measured with (`stage_one.Measures`)."""

    what = "load"

    def __init__(self, setup: TuneSetup, art: BuildArtifact, dev: devices.DeviceSetup, env: dict[str, str],
                 logs: Path, timeout_s: float, rig: ts.Rig):
        self.setup, self.art, self.dev, self.env, self.logs = setup, art, dev, env, logs
        self.timeout_s, self.rig = timeout_s, rig
        self.count = 0

    def measure(self, c: ts.Candidate, n_ctx: int) -> tuple[ts.Measured | None, DryRun]:
        self.count += 1
        cfg = self.setup.config(c.args(n_ctx), engine=self.art.engine)
        cfg = Config(build=cfg.build.model_copy(update={"name": f"load-{self.count:03d}"}), setting=cfg.setting)
        cp = configplan.load_plan(self.setup.prep, cfg, self.art, self.dev, self.env, self.logs, self.timeout_s)
        if cp.status != "ok" or not cp.devices:
            return None, DryRun(error=cp.reason or "the load printed no device buffers")
        dr = DryRun(devices=list(cp.devices), host=cp.host or DeviceFigures(name="Host"), n_ctx=cp.n_ctx)
        return to_measured(dr, self.rig.names, n_ctx), dr


def search_one(c: ts.Candidate, start: int, rig: ts.Rig, loads: Loads, floor: int, cap: int) -> Member:
    """One candidate's largest context within every budget less the margin, by loads: the first at `start`, the
    next where the line through it (its KV cache and outputs per token) meets the tightest budget, then on the
    line through the two nearest (`stage_one.verify`)."""
    n0 = max(ts.STEP, min(start or cap, cap) // ts.STEP * ts.STEP)
    first, d = loads.measure(c, n0)
    if first is None:
        return Member.of(c, rig, status="infeasible", reason=f"the load failed: {d.error}", predicted_n_ctx=n0,
                         dry_runs=1)
    slopes = tuple(dm.context / max(first.n_ctx, 1) for dm in first.devices)
    p = ts.Prediction(n_ctx=n0, raw=float(n0), used_mib=tuple(first.used()), slopes=slopes)
    return verify(c, p, rig, loads, floor, cap, known={n0: first})


def search(setup: TuneSetup, art: BuildArtifact, one: StageOne, logs: Path, timeout_s: float,
           progress: Progress) -> StageOne:
    """The engine's stage one beside llama.cpp's `one`: its candidates (`plan`), each one's context by loads, its
    front; as a StageOne of its own (cached apart: tune/stage_one_cache.py), which `StageOne.joined` adds to
    llama.cpp's."""
    t0 = time.monotonic()
    rig = engine_rig(one.rig, art)
    front = [m for m in one.front if m.candidate.own_engine]
    cands, space = plan([m.candidate for m in front], rig, setup.spec.splits, art.options, setup.spec.parallel,
                        art.engine)
    first = starts(cands, front, rig, one.default.n_ctx or one.layout.n_ctx_train)
    progress.message(f"tune stage one, {art.engine}: {len(cands)} candidates (its own default and llama.cpp's front "
                     f"as it runs them), each measured by real loads (it has no dry run)")
    members: list[Member] = []
    with session.device_setup(setup.prep, art, configplan.mkdir(logs / f"devices-{art.engine}")) as dev:
        loads = Loads(setup, art, dev, {**art.env(), **dev.env}, configplan.mkdir(logs / art.engine), timeout_s, rig)
        for c in cands:
            progress.message(f"load: {c.label(rig)}, from -c {first[c.key()]:,}")
            members.append(search_one(c, first[c.key()], rig, loads, setup.floor, one.layout.n_ctx_train))
    notes = (f"{art.engine}'s members were measured by {loads.count} real loads (each stopped once its context was "
             "made: it has no dry run), their placement its own",)
    return StageOne(rig=rig, layout=one.layout, space=space, default=one.default, default_extra=(),
                    members=tuple(with_front(members, rig)), dry_runs=loads.count,
                    seconds=round(time.monotonic() - t0, 2), notes=notes)
