"""The hybrid qwen35 synthetic model (the architecture of Qwen3.5/3.6, whose 27B shape is the `qwen36-27b` preset)
loads and serves requests in llama.cpp b11312 for real: a scaled-down sibling on two CPU-RPC devices, with pipeline
parallelism, its recurrent-state buffers and KV cache in the ledger — proof that the tensor set is the one
llama.cpp expects."""

from __future__ import annotations

import pytest

from llamahelp import run_study

pytestmark = pytest.mark.llama


def test_qwen35_tiny_runs_with_pipeline_parallelism(llama_home, tmp_path):
    store, run_id = run_study(llama_home, tmp_path / "data", [
        'model.preset="qwen35-tiny"', 'builds=[{name="copies4"}]',
        'settings=[{name="kv-f16-q8_0",args=["-ctk","f16","-ctv","q8_0"]}]',
        "workload.repeats=1", "workload.prompt_tokens=64", "workload.output_tokens=8", "workload.warmup=0",
        "workload.concurrency=[1]"])
    (c,) = store.configs(run_id)
    assert c["status"] == "ok", c.get("reason")
    led = c["ledger"]
    assert led["pipeline_parallel"] is True and led["sched_copies"] == 4
    devs = led["devices"]
    assert len(devs) == 2
    # 8 layers: 2 full-attention layers with a KV cache, 6 gated-delta-net layers with recurrent state
    assert all((b.get("kv_mib") or 0) > 0 and (b.get("rs_mib") or 0) > 0 for b in devs.values()), devs
    (t,) = store.trials(run_id)
    assert t["errors"] == 0 and t["output_tokens"] == 8
