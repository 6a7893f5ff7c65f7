"""`llamalab tune --engines llama.cpp,ik_llama.cpp` for real on the CPU demo rig (two local rpc-servers), llama.cpp
b11312 and ik_llama.cpp from ik-llama-cpp-python 0.1.5 — the trees test_engines_e2e.py and the demo build, reused
(no compile of its own: the narrow cache types keep ik_llama.cpp's kernel cut, engines.kernel_cut).

Gemma 3 270M (a real model, so the output check excuses near ties) under 1 GiB budgets, one request at a time (at
two, ik_llama.cpp's rpc-server aborts with flash attention: docs/engines.md), every member with all its trials
(--exhaustive, so every ik_llama.cpp member is measured), a floor of 1 t/s: stage one's dry runs give llama.cpp's
front, real loads ik_llama.cpp's; the pick is the most context among both engines' members, ties to the faster
generation; its command starts its own engine's llama-server. On this 2-core VM the whole tune took about 50 s:
the pick there was ik_llama.cpp's own default (its CPU kernels generate faster at the same 32,768 tokens), and
its one-device member held only 12,032 tokens (its compute buffer holds the logits of a whole micro-batch, 514.5 MiB
for Gemma 3's 262,144-token vocabulary: docs/engines.md).

On the synthetic tiny model ik_llama.cpp breaks exact logit ties its own way, so its member with llama.cpp's
default KV cache "computes differently" — the intended verdict there — and none of its members can be the pick."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llamalab.llamacpp import binaries, engines
from llamalab.report import data as rdata
from llamalab.report.analysis import tune as rtune
from llamalab.store.db import Store
from llamalab.tune import pick as tunepick

pytestmark = pytest.mark.llama

IK = engines.IK_LLAMA_CPP
NARROW = ["--set", 'tune.kv=["f16/f16","q8_0/q8_0"]', "--set", "tune.ubatch=[512]",
          "--set", "workload.prompt_tokens=128", "--set", "workload.output_tokens=16"]


def _tune(tmp_path, llama_home, *args: str) -> tuple[dict, rdata.RunData, rtune.View, float]:
    env = {**os.environ, "LLAMALAB_DATA": str(tmp_path / "data"), "LLAMALAB_HOME": str(llama_home)}
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "llamalab.cli", "tune", "tune-demo", "--json", "--engines",
                           f"llama.cpp,{IK}", "--parallel", "1", "--exhaustive", "--min-gen-tps", "1", *NARROW, *args],
                          env=env, capture_output=True, text=True, timeout=1500)
    wall = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout)
    with Store(tmp_path / "data" / "results.db", readonly=True) as store:
        data = rdata.load(store, out["run_id"])
    v = rtune.view(data)
    assert v is not None
    return out, data, v, wall


@pytest.fixture(scope="module")
def gemma_tune(tmp_path_factory, llama_home, gemma):
    out, data, v, wall = _tune(tmp_path_factory.mktemp("tune-engines"), llama_home, "--model", str(gemma),
                               "--budget", "1GiB,1GiB", "--set", 'tune.splits=["layer","none"]')
    print(f"\ntune --engines llama.cpp,{IK} on Gemma 3 270M: {wall:.1f} s wall; pick {v.pick.name} "
          f"({next(r.label for r in v.rows if r.build == v.pick.name)}); {v.stage_lines}", file=sys.stderr)
    return out, data, v


def _ik_members(v: rtune.View) -> list[dict]:
    return [c for c in v.doc["candidates"] if c.get("engine") == IK]


def test_ik_members_came_from_loads_and_were_measured(gemma_tune):
    _, data, v = gemma_tune
    search = v.doc["engines"][0]
    assert search["engine"] == IK and search["loads"] >= len(_ik_members(v)) >= 2
    assert search["space"]["not_searched"]["-ts"].startswith(f"{IK} places whole layers")
    # its own default is among its members: f16/f16, -ub 512, its own placement by the budgets' weights
    assert any(c["split"] == "layer" and c["ts"] == [1024, 1024] and (c["ctk"], c["ctv"], c["ubatch"]) ==
               ("f16", "f16", 512) for c in _ik_members(v))
    staged = [c for c in _ik_members(v) if c.get("build")]
    assert staged, "no ik_llama.cpp member reached stage two"
    ok = {c["build"]: c for c in data.ok_configs()}
    for c in staged:
        cfg = ok[c["build"]]
        assert data.engine(c["build"]) == IK
        argv = cfg["server_argv"]
        # its own binary, its own flags: no -kvu or -fitt, the CPU's 0 in front of its -ts on CPU + RPC
        assert "/builds/ik-" in argv[0] and "-kvu" not in argv and "-fitt" not in argv
        assert argv[argv.index("-ts") + 1].startswith("0,")
        # it ran at the context its loads verified, within every budget less the margin
        led = cfg["ledger"]
        assert led["n_ctx"] == c["n_ctx"] and led.get("engine") == IK
        assert all(u <= 1024 - 64 for u in c["devices_mib"])
        trials = [t for t in data.trials if t["build"] == c["build"]]
        assert len(trials) == 3 and all(t["output_tps"] > 0 and t["errors"] == 0 for t in trials)


def test_the_pick_is_among_both_engines_members_with_its_reason(gemma_tune):
    out, data, v = gemma_tune
    engine_of = {r.build: r.engine for r in v.rows}
    considered = set(v.pick.considered)
    assert {engine_of[b] for b in considered} == {"llama.cpp", IK}, (considered, engine_of)
    # the stored pick is the rule's over the stored measurements
    again = tunepick.decide(rtune.measures_of(data, v), v.rule, v.repeats)
    assert (again.pick.name, again.pick.reason) == (v.pick.name, v.pick.reason) == \
        (out["pick"]["build"], out["pick"]["reason"])
    by = {m.name: m for m in rtune.measures_of(data, v)}
    pick = by[v.pick.name]
    assert pick.n_ctx == max(by[b].n_ctx for b in considered)
    tied = [by[b] for b in considered if by[b].n_ctx == pick.n_ctx]
    assert pick.median("output_tps") == max(m.median("output_tps") for m in tied)  # ties go to the faster
    assert v.pick.reason.startswith(f"the most context ({pick.n_ctx:,} tokens)")
    # the report names each row's engine
    head, body = rtune.front_table(v)
    col = head.index("Engine")
    assert {row[0]: row[col] for row in body} == engine_of
    # the output check judged ik_llama.cpp's members against llama.cpp's default: on a real model near ties are
    # excused, and a member that computes differently is never the pick
    judged = {r["build"] for r in data.tables.get("outputs") or []}
    assert {c["build"] for c in _ik_members(v) if c.get("build")} <= judged
    assert v.pick.name not in (v.rule.differs or {})


def _engine_of_binary(path: str) -> str:
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    return binaries.engine_of(Path(path), version.stdout + version.stderr)


def test_the_picks_command_starts_its_engines_llama_server(gemma_tune):
    out, data, v = gemma_tune
    words = v.command_words
    assert out["pick"]["command"] == v.command and v.command.startswith(words[0])
    if data.engine(v.pick.name) == IK:
        assert words[0] == data.server_argv(v.pick.name, "tune")[0] and _engine_of_binary(words[0]) == IK
        assert words[-2:] == ["-np", "1"] and "-kvu" not in words
    else:
        assert words[0] == "llama-server" and words[-3:] == ["-np", "1", "-kvu"]
    # and every other configuration's command: ik_llama.cpp's by the path it ran from, llama.cpp's by its name
    for r in v.rows:
        w = rtune.command_words(data, r.build, 1, "M")
        ran = data.server_argv(r.build, "tune")[0]
        if r.engine == IK:
            assert w[0] == ran and _engine_of_binary(w[0]) == IK and "-kvu" not in w
        else:
            assert w[0] == "llama-server" and _engine_of_binary(ran) == "llama.cpp" and w[-1] == "-kvu"
    swap = rtune.llama_swap(v)
    assert f'cmd: "{words[0]} --port ${{PORT}}' in swap


def test_on_a_synthetic_model_ik_computes_differently_and_is_never_the_pick(tmp_path, llama_home):
    """The tiny synthetic model: ik_llama.cpp's member with the default's f16/f16 cache parts from llama.cpp's
    default where the default's choice is an exact tie broken otherwise — "computes differently", the intended
    verdict — and so does, by its engine, its member with another cache; the pick is llama.cpp's."""
    out, data, v, wall = _tune(tmp_path, llama_home, "--set", 'tune.splits=["layer"]')
    print(f"\ntune --engines on the tiny model: {wall:.1f} s wall; pick {v.pick.name}; differs "
          f"{v.rule.differs}", file=sys.stderr)
    ik = {c["build"]: c for c in _ik_members(v) if c.get("build")}
    assert ik and all(data.engine(b) == IK for b in ik)
    differs = v.rule.differs or {}
    own = [b for b, c in ik.items() if (c["ctk"], c["ctv"]) == ("f16", "f16")]
    assert own and all(differs[b].startswith("computes differently") for b in own), differs
    assert all(b in differs for b in ik)  # the others by their engine's verdict
    assert data.engine(v.pick.name) == "llama.cpp" and v.command.startswith("llama-server ")
    row = next(r for r in v.rows if r.build == own[0])
    assert row.note.startswith("not the pick: it computes differently")
