"""ik_llama.cpp's part of tune's stage one (tune/stage_one_engine.py), pure: which members it gets from llama.cpp's
front and its own default, what it leaves out and why, where each search starts, and the search by loads itself
over a measure function (a linear memory model standing for the loads, as fit/maxctx's tests do)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from llamalab.llamacpp import source
from llamalab.llamacpp.build import BuildArtifact
from llamalab.logs.dryrun import DryRun
from llamalab.tune import space as ts
from llamalab.tune import stage_one_engine as eng
from llamalab.tune.records import Member

IK = "ik_llama.cpp"
RPC = ts.Rig(("RPC0", "RPC1"), (300, 280), (64, 64), "cpu-rpc", shared_processor=True, copies=4)
CUDA = ts.Rig(("CUDA0", "CUDA1"), (16384, 12288), (1024, 1024), "cuda", shared_processor=False, copies=4)
CUT = {"GGML_IQK_FA_ALL_QUANTS": "OFF"}


def _art(options: dict | None = None, backend: str = "cpu-rpc") -> BuildArtifact:
    src = source.Source(path=Path("/s"), origin="pypi:x", build_number=None, commit=None, engine=IK)
    return BuildArtifact(name="ik", key="k", source=src, backend=backend, options=options or {}, bin_dir=Path("/b"),
                         engine=IK)


def _front(rig: ts.Rig) -> list[ts.Candidate]:
    """llama.cpp's front on the demo rig (test_tune_e2e.py's splits): layer with and without pipeline parallelism,
    none, with two cache pairs."""
    return [ts.Candidate("layer-nopp", "q8_0", "q8_0", ts=(4, 5)), ts.Candidate("layer", "q8_0", "q8_0", ts=(5, 4)),
            ts.Candidate("layer-nopp", ts=(4, 5)), ts.Candidate("none", "q8_0", "q4_0", main_gpu=0),
            ts.Candidate("none", main_gpu=0)]


def test_the_engine_rig_has_its_own_copies_and_pipeline_parallelism():
    rig = eng.engine_rig(RPC, _art())
    assert (rig.names, rig.budgets_mib, rig.margins_mib) == (RPC.names, RPC.budgets_mib, RPC.margins_mib)
    assert rig.copies == 1 and not rig.pp_capable  # ik_llama.cpp pipelines on CUDA only, one copy by default
    four = eng.engine_rig(CUDA, _art({"GGML_SCHED_MAX_COPIES": "4"}, "cuda"))
    assert four.copies == 4 and four.pp_capable


def test_on_cpu_rpc_its_default_and_llama_cpps_front_as_it_runs_them():
    rig = eng.engine_rig(RPC, _art(CUT))
    cands, space = eng.plan(_front(RPC), rig, ("layer", "layer-nopp", "tensor", "none"), CUT, parallel=1)
    got = [(c.split, c.kv, c.ts, c.main_gpu) for c in cands]
    assert got == [("layer", "f16/f16", (300, 280), 0),  # its own default: f16, -ub 512, its placement by the budgets
                   ("layer", "q8_0/q8_0", (300, 280), 0),  # llama.cpp's layer and layer-nopp: one without PP
                   ("none", "f16/f16", (1, 0), 0)]  # one device: a -ts that gives it everything
    assert all(c.engine == IK and not c.fa_off and not c.own_engine for c in cands)
    assert "q4_0" in space.not_searched["KV q8_0/q4_0"] and "GGML_IQK_FA_ALL_QUANTS=OFF" in \
        space.not_searched["KV q8_0/q4_0"]
    assert "CUDA only" in space.not_searched["split graph"] and "one scheduler copy" in \
        space.not_searched["split layer-nopp"] and "weights" in space.not_searched["-ts"]
    assert space.splits == ("layer", "none") and space.ubatch == (512,)
    # without the kernel cut (a study that names a q4_0 cache builds without it) the pair is searched
    uncut, sp = eng.plan(_front(RPC), rig, ("layer",), {}, parallel=1)
    assert ("none", "q8_0/q4_0") in {(c.split, c.kv) for c in uncut} and "KV q8_0/q4_0" not in sp.not_searched


def test_its_arguments_label_and_key():
    rig = eng.engine_rig(RPC, _art())
    one = ts.Candidate("none", "q8_0", "q8_0", ts=(1, 0), engine=IK)
    assert one.args(4096) == ["-ngl", "999", "-fa", "on", "-ts", "1,0", "-ctk", "q8_0", "-ctv", "q8_0", "-c", "4096"]
    assert one.label(rig) == "ik_llama.cpp: one device (RPC0), -ts 1,0, KV q8_0/q8_0, -ub 512"
    layer = ts.Candidate("layer", ts=(300, 280), engine=IK, fa_off=True)
    assert layer.args() == ["-ngl", "999", "-fa", "off", "-ts", "300,280"]
    assert layer.label(rig) == "ik_llama.cpp: layer (its own placement), -ts 300,280, KV f16/f16, -ub 512, -fa off"
    assert layer.key().endswith("|engine=ik_llama.cpp|fa=off")
    # llama.cpp's candidates keep the arguments, labels and keys every stored tune has
    mine = ts.Candidate("none", main_gpu=1)
    assert mine.args() == ["-ngl", "999", "-fa", "on", "-sm", "none", "-mg", "1"]
    assert mine.key() == "none|ts=-|kv=f16/f16|ub=512|ncmoe=0|mg=1" and mine.label(RPC) == \
        "none (device 1), KV f16/f16, -ub 512"
    assert ts.Candidate("graph", engine=IK).args() == ["-ngl", "999", "-fa", "on", "-sm", "graph"]


def test_engines_are_never_ordered_against_each_other():
    mine, theirs = ts.Candidate("layer", ts=(4, 5)), ts.Candidate("layer", ts=(4, 5), engine=IK)
    assert not ts.no_worse(mine, theirs, RPC) and not ts.no_worse(theirs, mine, RPC)
    assert ts.front([(mine, 1000), (theirs, 900)], RPC) == [0, 1]


def test_members_keep_their_engine_through_the_stored_shape():
    rig = eng.engine_rig(RPC, _art())
    m = Member.of(ts.Candidate("layer", "q8_0", "q8_0", ts=(300, 280), engine=IK, fa_off=True), rig,
                  status="front", n_ctx=54528, devices_mib=[236.0, 199.0])
    d = m.as_dict()
    assert d["engine"] == IK and d["fa_off"] is True and d["args"][:4] == ["-ngl", "999", "-fa", "off"]
    back = Member.from_dict(d)
    assert back.candidate == m.candidate and back.label == m.label
    llama = Member.of(ts.Candidate("layer", ts=(4, 5)), RPC, status="front", n_ctx=100).as_dict()
    assert "engine" not in llama and "fa_off" not in llama  # llama.cpp's stored shape is unchanged
    assert Member.from_dict(llama).candidate.engine == "llama.cpp"


def test_at_two_requests_on_rpc_devices_flash_attention_is_off_and_no_quantized_v_cache():
    """ik_llama.cpp's rpc-server aborts with flash attention on 2+ sequences in a batch (docs/engines.md)."""
    rig = eng.engine_rig(RPC, _art())
    cands, space = eng.plan(_front(RPC) + [ts.Candidate("layer", "q8_0", "f16", ts=(5, 4))], rig, ("layer",), {},
                            parallel=2)
    assert all(c.fa_off and c.ctv == "f16" for c in cands)
    assert {c.kv for c in cands} == {"f16/f16", "q8_0/f16"}  # a quantized K cache needs no flash attention
    assert "GGML_ASSERT(S > 0)" in space.not_searched["flash attention"]
    assert "needs flash attention" in space.not_searched["KV q8_0/q8_0"]
    # on CUDA, at any number of requests, it keeps flash attention
    cuda, _ = eng.plan(_front(CUDA), eng.engine_rig(CUDA, _art(backend="cuda")), ("layer",), {}, parallel=4)
    assert not any(c.fa_off for c in cuda)


def test_on_cuda_tensor_is_its_graph_split_and_a_copies_build_keeps_layer_nopp_apart():
    rig = eng.engine_rig(CUDA, _art({"GGML_SCHED_MAX_COPIES": "4"}, "cuda"))
    front = [ts.Candidate("layer", ts=(20, 17)), ts.Candidate("layer-nopp", "q8_0", "q8_0", ts=(21, 16))]
    cands, space = eng.plan(front, rig, ("layer", "layer-nopp", "tensor"), {}, parallel=1)
    got = [(c.split, c.kv) for c in cands]
    assert got == [("layer", "f16/f16"), ("layer-nopp", "q8_0/q8_0"), ("graph", "f16/f16"), ("graph", "q8_0/q8_0")]
    assert "split graph" not in space.not_searched and "split layer-nopp" not in space.not_searched
    assert next(c for c in cands if c.split == "graph").ts is None  # graph splits by its own rule
    assert next(c for c in cands if c.split == "layer").ts == (16384, 12288)


def test_each_search_starts_from_its_llama_cpp_counterparts_context():
    rig = eng.engine_rig(RPC, _art())
    front = [Member.of(c, RPC, status="front", n_ctx=n) for c, n in
             zip(_front(RPC), [55552, 29184, 34560, 30000, 16384], strict=True)]
    cands, _ = eng.plan([m.candidate for m in front], rig, ("layer",), {}, parallel=1)
    got = eng.starts(cands, front, rig, 21760)
    by = {(c.split, c.kv): got[c.key()] for c in cands}
    # layer q8_0: the larger of llama.cpp's layer (29,184) and layer-nopp (55,552), both its counterparts
    assert by == {("layer", "f16/f16"): 34560, ("layer", "q8_0/q8_0"): 55552, ("none", "f16/f16"): 16384,
                  ("none", "q8_0/q4_0"): 30000}
    lone = ts.Candidate("layer", "q4_0", "q4_0", engine=IK)
    assert eng.starts([lone], front, rig, 21760) == {lone.key(): 21760}  # nothing of its cache: the fallback


class _LinearLoads:
    """Loads of a memory model linear in the context (fixed MiB + MiB per token, per device), counted."""

    what = "load"

    def __init__(self, fixed: tuple[float, ...], per_token: tuple[float, ...], fail_over: int | None = None):
        self.fixed, self.per_token, self.fail_over = fixed, per_token, fail_over
        self.count = 0
        self.asked: list[int] = []

    def measure(self, c: ts.Candidate, n: int) -> tuple[ts.Measured | None, DryRun]:
        self.count += 1
        self.asked.append(n)
        if self.fail_over is not None and n > self.fail_over:
            return None, DryRun(error="llama-server ended before its context was made (-6)")
        devs = tuple(ts.DeviceMib(model=f, context=p * n) for f, p in zip(self.fixed, self.per_token, strict=True))
        return ts.Measured(n_ctx=n, devices=devs), DryRun(n_ctx=n)


@pytest.mark.parametrize("start", [55552, 8192, 65536])
def test_the_search_by_loads_ends_exact_in_a_few_loads(start):
    rig = eng.engine_rig(RPC, _art())
    c = ts.Candidate("layer", "q8_0", "q8_0", ts=(300, 280), engine=IK)
    loads = _LinearLoads(fixed=(80.0, 120.0), per_token=(0.0029, 0.0016))
    m = eng.search_one(c, start, rig, loads, floor=544, cap=65536)
    # the truth: device 1 reaches 216 MiB (280 - 64) at (216 - 120) / 0.0016 = 60,000 tokens; device 0 (236 MiB)
    # at 156 / 0.0029 = 53,793: the largest multiple of 256 within both is 53,760
    assert m.status == "verified" and m.n_ctx == 53760 and m.exact
    assert m.dry_runs == loads.count <= 4, loads.asked
    assert m.devices_mib is not None and all(u <= a for u, a in zip(m.devices_mib, rig.avail_mib, strict=True))


def test_a_load_that_fails_or_holds_too_little_is_infeasible_with_the_reason():
    rig = eng.engine_rig(RPC, _art())
    c = ts.Candidate("layer", ts=(300, 280), engine=IK)
    failed = eng.search_one(c, 30000, rig, _LinearLoads((80.0, 120.0), (0.001, 0.001), fail_over=0), 544, 65536)
    assert failed.status == "infeasible" and failed.reason.startswith("the load failed: llama-server ended")
    small = eng.search_one(c, 30000, rig, _LinearLoads((80.0, 200.0), (0.001, 0.001)), 20000, 65536)
    assert small.status == "infeasible" and "fewer than 20,000" in small.reason
    over = eng.search_one(c, 30000, rig, _LinearLoads((80.0, 230.0), (0.001, 0.001)), 544, 65536)
    assert over.status == "infeasible" and over.reason.startswith("over a budget even at")


def test_its_front_is_taken_within_the_engine():
    from llamalab.tune.stage_one import with_front

    rig = eng.engine_rig(RPC, _art())

    def mk(kv: str, n: int) -> Member:
        return Member.of(ts.Candidate("layer", *kv.split("/"), ts=(300, 280), engine=IK), rig, status="verified",
                         n_ctx=n)

    got = with_front([mk("f16/f16", 30000), mk("q8_0/q8_0", 54000), mk("q8_0/q8_0", 20000)], rig)
    assert [m.status for m in got] == ["front", "front", "dominated"]
    assert dataclasses.replace(got[0], status="x").candidate.engine == IK
