"""tunespace: the search's pure parts, on real inputs — synthetic models' GGUF headers (written by models.py, as
llama.cpp reads them) and real dry-run logs of b11312 on two CPU-RPC devices (tests/fixtures/tune/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamalab.fit import maxctx
from llamalab.logs import dryrun
from llamalab.models import gguf, standin
from llamalab.models import synthetic as models
from llamalab.plan import plan
from llamalab.report.analysis import tune as rtune
from llamalab.tune import pick as tunepick
from llamalab.tune import space as ts
from llamalab.tune import stage_one
from testpaths import FIXTURES

FIX = FIXTURES / "tune"
NAMES = ("RPC0", "RPC1")
# the tune-demo study's rig: two devices standing for 300 MiB cards, llama.cpp's margin 64 MiB
RIG = ts.Rig(names=NAMES, budgets_mib=(300, 300), margins_mib=(64, 64), backend="cpu-rpc", shared_processor=True)
GPU = ts.Rig(names=("CUDA0", "CUDA1"), budgets_mib=(16384, 12288), margins_mib=(1024, 1024), backend="cuda",
             shared_processor=True)


def dry(name: str) -> ts.Measured:
    lines = (FIX / f"dry-{name}.log").read_text().splitlines()
    dr = dryrun.parse_dry_run(lines)
    assert dr.error is None, dr.error
    return stage_one.to_measured(dr, NAMES, dr.n_ctx or 0)


def layout(preset: str, tmp_path: Path) -> ts.ModelLayout:
    shape = models.preset(preset)
    path = models.synthetic(shape, tmp_path, data=False)
    hdr = gguf.read_header(path)
    info = models.read_info(path)
    return ts.model_layout(((n, b) for n, _, b in hdr.tensors), info.n_layer, info.n_ctx_train, info.n_expert or 0)


def test_layout_of_the_tiny_models(tmp_path):
    dense = layout("tiny", tmp_path)
    assert (dense.n_layer, dense.n_ctx_train, dense.moe) == (8, 65536, False)
    assert dense.output_mib == pytest.approx(32000 * 512 * 2 / 2**20 + 512 * 4 / 2**20)  # output.weight f16 + norm
    moe = layout("qwen3moe-tiny", tmp_path)
    assert moe.moe and moe.n_expert == 8
    # three projections of 8 experts of 512 × 512 in f16 per layer
    assert moe.expert_mib == pytest.approx((3 * 8 * 512 * 512 * 2 / 2**20,) * 8)


def test_layer_split_matches_llama_cpp(tmp_path):
    """-ts 4,5 (layer counts summing to n_layer + 1): llama.cpp put layers 0-3 on RPC0 and 4-7 plus the output
    layer (8) on RPC1 (its `layer N assigned to device` lines in the fixture)."""
    text = (FIX / "dry-tiny-layer-ts4,5-ub256-f16-c65536.log").read_text()
    assigned = [line.split("assigned to device ")[1].split(",")[0] for line in text.splitlines()
                if "assigned to device" in line]
    expect = ["RPC0" if d == 0 else "RPC1" for d in ts.device_of_layers((4, 5), 8, 2)]
    assert assigned == expect
    assert ts.proportional_ts((236, 236), 8) == (4, 5)
    assert ts.proportional_ts((15360, 11264), 36) == (21, 16)  # 16 + 12 GiB less 1 GiB margins, an 8B shape


def test_weights_per_device_from_the_header(tmp_path):
    """The header's sizes predict llama.cpp's model buffers per device (to its whole-MiB rounding)."""
    lay = layout("tiny", tmp_path)
    m = dry("tiny-layer-ts4,5-ub256-f16-c65536")
    w = ts.weights_mib(lay, (4, 5), 0, 2)
    assert [round(x) for x in w] == [round(d.model) for d in m.devices]
    moe = layout("qwen3moe-tiny", tmp_path)
    base = dry("qwen3moe-tiny-layer-ts4,5-ub512-f16-c65536")
    moved = dry("qwen3moe-tiny-layer-ts4,5-ub512-f16-ncmoe3-c65536")
    w0, w3 = ts.weights_mib(moe, (4, 5), 0, 2), ts.weights_mib(moe, (4, 5), 3, 2)
    assert w0[0] - w3[0] == pytest.approx(base.devices[0].model - moved.devices[0].model, abs=1.0)
    assert w0[1] == w3[1]  # layers 4-7 keep their experts
    assert moved.host.model - base.host.model == pytest.approx(w0[0] - w3[0], abs=1.0)


def calibration(low: str, high: str, split: str, ub: int) -> ts.Calibration:
    return ts.Calibration(split=split, ubatch=ub, ts=(4, 5), n_cpu_moe=0, main_gpu=0, low=dry(low), high=dry(high))


def test_prediction_against_a_verifying_dry_run(tmp_path):
    """From two calibration runs (f16/f16 at 16,384 and 65,536 tokens) the model predicts a q8_0/q8_0 cache with
    the split moved to 5,4: the verifying dry run of exactly that command shows the same per-device MiB."""
    lay = layout("tiny", tmp_path)
    cal = calibration("tiny-layer-ts4,5-ub256-f16-c16384", "tiny-layer-ts4,5-ub256-f16-c65536", "layer", 256)
    c = ts.Candidate("layer", "q8_0", "q8_0", ubatch=256)
    split, p = ts.best_ts(c, cal, lay, RIG)
    assert split == (5, 4)
    assert p.n_ctx == 43520
    real = dry("tiny-layer-ts5,4-ub256-q8_0-q8_0-c43520")
    for pred, meas in zip(p.used_mib, real.used(), strict=True):
        assert pred == pytest.approx(meas, abs=3.0)  # the log's breakdown rows are whole MiB
    assert all(o <= 0 for o in ts.over_budget(real, RIG))
    # less than a step of room is left: the search from this dry run and the predicted slopes ends here
    steps = [43520 + 256 * k for k in range(1, 3)]
    over = {n: tuple(u + s * (n - 43520) for u, s in zip(real.used(), p.slopes, strict=True)) for n in steps}
    res, _ = maxctx.largest_within(lambda n: over[n], RIG.avail_mib, lay.n_ctx_train, slopes=p.slopes,
                                   known={43520: tuple(real.used())})
    assert res.n_ctx == 43520 and res.exact


def test_experts_in_host_memory_predicted_from_the_no_pipeline_group(tmp_path):
    """--n-cpu-moe turns pipeline parallelism off (it is an override): its compute comes from the -ot no-op group,
    its weights from the header. Against the real dry run with --n-cpu-moe 3, per device within 5 MiB."""
    lay = layout("qwen3moe-tiny", tmp_path)
    c = ts.Candidate("layer", ubatch=512, n_cpu_moe=3, ts=(4, 5))
    assert ts.calibration_key(c, RIG) == ("layer-nopp", 512)
    assert ts.calibration_key(ts.Candidate("layer", ubatch=512), RIG) == ("layer", 512)
    cal = calibration("qwen3moe-tiny-layer-nopp-ts4,5-ub512-f16-c16384",
                      "qwen3moe-tiny-layer-nopp-ts4,5-ub512-f16-c65536", "layer-nopp", 512)
    p = ts.predict(c, (4, 5), cal, lay, RIG)
    real = dry("qwen3moe-tiny-layer-ts4,5-ub512-f16-ncmoe3-c65536")
    at = [f + s * 65536 for f, s in zip([u - s * p.n_ctx for u, s in zip(p.used_mib, p.slopes)], p.slopes)]
    for pred, meas in zip(at, real.used(), strict=True):
        assert pred == pytest.approx(meas, abs=5.0)


def test_single_device_split_uses_one_device():
    m = dry("tiny-none-mg0-ub512-f16-c16384")
    assert m.devices[1] == ts.DeviceMib() and m.devices[0].model > 0
    assert ts.Candidate("none", main_gpu=0).args(16384) == ["-ngl", "999", "-fa", "on", "-sm", "none", "-mg", "0",
                                                            "-c", "16384"]


@pytest.mark.parametrize("extra,expect", [
    ({}, ["-ngl", "999", "-fa", "on"]),
    ({"split": "layer-nopp", "ts": (4, 5)}, ["-ngl", "999", "-fa", "on", "-ot", "no_such_tensor=CPU", "-ts", "4,5"]),
    ({"ctk": "q8_0", "ctv": "q4_0", "ubatch": 4096},
     ["-ngl", "999", "-fa", "on", "-ctk", "q8_0", "-ctv", "q4_0", "-ub", "4096", "-b", "4096"]),
    ({"n_cpu_moe": 12, "ubatch": 1024}, ["-ngl", "999", "-fa", "on", "-ub", "1024", "--n-cpu-moe", "12"]),
    ({"split": "tensor"}, ["-ngl", "999", "-fa", "on", "-sm", "tensor"]),
], ids=["defaults", "no-pp", "kv-and-batch", "experts", "tensor"])
def test_candidate_arguments(extra, expect):
    c = ts.Candidate(**{"split": "layer", **extra})
    assert c.args() == expect


A = ts.Candidate("layer", ubatch=512, ts=(4, 5))


@pytest.mark.parametrize("a,ctx_a,b,ctx_b,rig,expect", [
    (A, 30000, ts.Candidate("layer", "q8_0", "q8_0", ts=(4, 5)), 30000, RIG, True),  # same context, more precise
    (A, 20000, ts.Candidate("layer", "q8_0", "q8_0", ts=(4, 5)), 30000, RIG, False),  # the quantized one holds more
    (A, 30000, ts.Candidate("layer", ubatch=256, ts=(4, 5)), 30000, RIG, True),  # a larger micro-batch, same context
    (A, 30000, ts.Candidate("layer", ts=(5, 4)), 29000, RIG, True),  # one processor: the split moves no work
    (A, 30000, ts.Candidate("layer", ts=(5, 4)), 29000,
     ts.Rig(NAMES, (300, 300), (64, 64), "cuda", shared_processor=False), False),  # two GPUs: it may
    (A, 30000, ts.Candidate("layer-nopp", ts=(4, 5)), 30000, RIG, False),  # CPU-RPC: no speed order for PP
    # GPU: no speed order for PP either (at -np 4, 1,024-token prompts on an H200 it generated up to 3% slower)
    (A, 30000, ts.Candidate("layer-nopp", ts=(4, 5)), 30000, GPU, False),
    (ts.Candidate("layer", n_cpu_moe=2), 30000, ts.Candidate("layer", n_cpu_moe=4), 30000, GPU, True),
    (ts.Candidate("layer", n_cpu_moe=2), 30000, ts.Candidate("layer", n_cpu_moe=4), 30000, RIG, False),
    (A, 30000, ts.Candidate("none"), 20000, RIG, False),  # another split mode: no order
], ids=["precision", "precision-buys-context", "ubatch", "split-shared", "split-two-gpus", "pp-cpu", "pp-gpu",
        "experts-gpu", "experts-cpu", "none"])
def test_dominance(a, ctx_a, b, ctx_b, rig, expect):
    assert ts.dominates(a, ctx_a, b, ctx_b, rig) is expect


def test_front_keeps_the_first_of_equals():
    items = [(ts.Candidate("layer", ts=(4, 5)), 1000), (ts.Candidate("layer", ts=(5, 4)), 1000),
             (ts.Candidate("layer", "q8_0", "q8_0", ts=(4, 5)), 2000), (ts.Candidate("layer", ubatch=256), 900)]
    assert ts.front(items, RIG) == [0, 2]
    assert ts.beaten_by(items, 1, RIG) == 0 and ts.beaten_by(items, 3, RIG) == 0


def test_auto_n_cpu_moe_for_30b_a3b_on_16_and_12_gib():
    """30B-A3B in Q8_0 (30.2 GiB) against 26 GiB of cards: the dense part stays, experts of the first layers go."""
    shape = models.preset("30b-a3b")
    per_layer = [0.0] * shape.n_layer
    n_ff = shape.moe.n_ff_exp * shape.n_embd * shape.moe.n_expert
    expert = 3 * n_ff * 34 / 32 / 2**20
    lay = ts.ModelLayout(n_layer=48, n_ctx_train=40960, n_expert=128,
                         layer_mib=tuple(p + expert + 40 for p in per_layer),
                         expert_mib=(expert,) * 48, output_mib=315.0)
    vals = ts.auto_n_cpu_moe(GPU, lay)
    assert vals[0] == 0 and len(vals) == 5 and vals[1] > 0
    assert all(b - a == 6 for a, b in zip(vals[1:], vals[2:]))


def measures(name, n_ctx, gen, prompt=None, agg=None):
    return ts.Measures(name, n_ctx, {"output_tps": gen, "input_tps": prompt or [], "aggregate_output_tps": agg or []})


def test_pick_for_context_keeps_the_default_speed():
    ms = [measures("default", 20000, [50.0, 51.0, 50.5]),
          measures("t01", 65536, [30.0, 31.0, 30.5]),  # more context, measurably slower: out
          measures("t02", 40000, [50.2, 50.9, 50.4]),  # more context, same speed: the pick
          measures("t03", 30000, [51.0, 50.1, 50.7])]
    p = tunepick.pick(ms, "default", "context")
    assert p.name == "t02" and "t01" not in p.considered
    assert tunepick.pick(ms, "default", "context", min_gen_tps=25).name == "t01"  # a floor replaces the default's speed
    assert tunepick.pick(ms, "default", "context", min_context=70000).name == "default"  # nothing holds it
    assert tunepick.pick(ms, "default", "context", default_fits=False).name == "t02"


def test_pick_for_throughput():
    ms = [measures("default", 20000, [50.0, 51.0], agg=[90.0, 91.0]),
          measures("t01", 16000, [49.0, 50.0], agg=[120.0, 121.0]),
          measures("t02", 8000, [49.0, 50.0], agg=[130.0, 131.0])]
    assert tunepick.pick(ms, "default", "throughput", need_context=10000).name == "t01"
    assert tunepick.pick(ms, "default", "throughput").name == "t02"


def test_the_measured_front():
    full = [measures("default", 20000, [50, 51, 50.5]), measures("t01", 30000, [50.4, 50.9, 51.1]),
            measures("t02", 25000, [80, 81, 79.5]), measures("t03", 24000, [60, 61, 60.5])]
    assert rtune.measured_front(full, 0.02) == ["t01", "t02"]
    # a configuration measured once beats nothing: its comparisons are untested
    once = [*full[:1], measures("t09", 90000, [81.0])]
    assert rtune.measured_front(once, 0.02) == ["default", "t09"]


def test_an_untested_configuration_is_no_pick():
    """One trial is no verdict: a configuration the race stopped after its screening trial is not a candidate, and
    neither is one whose comparison with the default has no interval."""
    ms = [measures("default", 20000, [50.0, 51.0, 50.5]), measures("t01", 65536, [50.3]),
          measures("t02", 40000, [50.2, 50.9, 50.4])]
    p = tunepick.pick(ms, "default", "context", min_trials=2)
    assert p.name == "t02" and "t01" not in p.considered
    p1 = tunepick.pick([ms[0], measures("t01", 65536, [50.3, 50.4])], "default", "context")
    assert p1.name == "t01"
    base_once = [measures("default", 20000, [50.0]), measures("t01", 65536, [50.3, 50.4])]
    assert tunepick.pick(base_once, "default", "context").name == "default"  # untested against a one-trial default


def test_replaying_the_race_on_hand_made_measurements():
    """The race's decisions on hand-made measurements: a member whose screening trial is far below the default's
    speed (beyond the spread the default's own trials show) is ruled out on it; the member with the most context
    that meets the floor with all its trials rules out everything with less before its load (issue 44: before, each
    got a server start and a screening trial first); so does the default's context."""
    def m(name, ctx, gen, agg=None):
        return ts.Measures(name, ctx, {"output_tps": gen, "input_tps": [], "aggregate_output_tps": agg or []})

    ms = [m("default", 20000, [50.0, 51.0, 50.5]), m("t01", 60000, [30.0, 31.0, 30.5]),
          m("t02", 40000, [50.4, 50.9, 51.1]), m("t03", 30000, [50.2, 50.7, 50.1]), m("t04", 10000, [55.0, 54.0, 54.5])]
    rule = tunepick.Rule(default="default", goal="context")
    rp = tunepick.replay(ms, ["t01", "t02", "t03", "t04"], rule, 3)
    assert rp.pick.name == tunepick.pick(ms, "default", "context").name == "t02"
    assert set(rp.ruled) == {"t01"} and set(rp.not_loaded) == {"t03", "t04"} and rp.trials == 3 + 1 + 3
    assert "below the floor" in rp.ruled["t01"] and "t02 holds more context" in rp.not_loaded["t03"]
    assert "t02 holds more context" in rp.not_loaded["t04"]  # t02 holds more than the default: it names t02
    alone = tunepick.replay(ms, ["t01", "t04"], rule, 3)  # nothing with more context met the floor: the default's
    assert "fewer than llama.cpp's default (20,000)" in alone.not_loaded["t04"]
