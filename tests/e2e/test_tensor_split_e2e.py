"""Issue 18: a study with a `-sm tensor` arm, on real llama.cpp (CPU + two local rpc-servers, the default build).

llama.cpp prints `-sm tensor`'s buffers once each, as `Meta() … buffer size` (the largest per-device part); the
run must store them attributed to the two devices, with the -ts it ran with, so that the table, the memory
comparison against layer split and every report show per-device figures."""

from __future__ import annotations

import pytest

from llamahelp import run_study
from llamalab.report import data as rdata
from llamalab.report import formats
from llamalab.report.analysis import tables, verdict

pytestmark = pytest.mark.llama

ARMS = [
    'builds=[{name="layer"},{name="tensor",args=["-sm","tensor","-ts","3,1"]}]',
    'settings=[{name="c2048",args=["-c","2048","-fit","off"]}]',
    "server.fit_target_mib=[]", "devices.vram=[]",
    "workload.repeats=1", "workload.prompt_tokens=32", "workload.output_tokens=8", "workload.warmup=0",
    "workload.concurrency=[1]", 'workload.output="natural"',
]


def test_a_tensor_split_arm_shows_its_memory_per_device(demo_prep, llama_home, tmp_path):
    store, rid = run_study(llama_home, tmp_path, ARMS)
    assert {c["build"]: c["status"] for c in store.configs(rid)} == {"layer": "ok", "tensor": "ok"}
    led = {c["build"]: c["ledger"] for c in store.configs(rid)}
    meta = led["tensor"]["meta"]
    # the run passed its -ts on: device 0 holds three quarters of the KV cache, device 1 the rest
    assert meta["attributed"] and meta["shares"] == [0.75, 0.25] and meta["shares_from"] == "-ts"
    devs = [led["tensor"]["devices"][d] for d in meta["devices"]]
    assert [d["kv_mib"] for d in devs] == [meta["printed"]["Meta()"]["kv_mib"],
                                           round(meta["kv_total_mib"] - meta["printed"]["Meta()"]["kv_mib"], 2)]
    assert devs[0]["kv_mib"] == 3 * devs[1]["kv_mib"]
    assert all(d["compute_mib"] == meta["printed"]["Meta()"]["compute_mib"] for d in devs)
    assert not any(n.startswith("Meta(") for n in led["tensor"]["devices"])

    data = rdata.load(store, rid)
    rows = {r["build"]: r for r in tables.rows(data)}
    assert set(rows["tensor"]["compute_mib"]) == set(rows["layer"]["compute_mib"]) == {"RPC0", "RPC1"}
    (cmp_,) = verdict.memory_comparisons(data)
    assert cmp_["candidate"] == "tensor" and all(v is not None for v in cmp_["compute_delta_mib"].values())
    md = formats.render(data, "md")
    assert "c2048: tensor vs layer" in md and "compute buffers RPC0" in md
    assert "-sm tensor: llama.cpp prints each Meta() buffer once" in md
