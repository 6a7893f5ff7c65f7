"""Reports of runs whose ledgers hold what issue 18 found dropped: -sm tensor's Meta() buffers (attributed to their
devices), pipeline parallelism that llama.cpp gave up, input buffers and every host buffer type. The real demo run
with the ledgers of real logs (tests/fixtures/logs, SOURCES.md) in place of some of its own."""

from __future__ import annotations

import json

import pytest

import runfixtures
from llamalab.logs import ledger, memory
from llamalab.report import csvfile, formats
from llamalab.report import data as rdata
from llamalab.report.analysis import summary, tables, verdict
from llamalab.run import nvmlcheck
from llamalab.store.db import Store
from testpaths import FIXTURES

LOGS = FIXTURES / "logs"


def record(name: str, **kw) -> dict:
    return memory.ledger_record(ledger.parse((LOGS / f"{name}.log").read_text().splitlines(), **kw))


@pytest.fixture
def run(tmp_path):
    """copies1 × kv-f16-q8_0 ran as -sm tensor; copies4 × kv-f16-f16 had its pipeline dropped by llama.cpp."""
    d = runfixtures.doc()
    t = d["tables"]
    ids = {(c["build"], c["setting"]): c["id"] for c in t["configs"]}
    swap = {ids[("copies1", "kv-f16-q8_0")]: record("rpc-b11312-sm-tensor"),
            ids[("copies4", "kv-f16-f16")]: record("rpc-b11312-pp-dropped")}
    for row in t["ledgers"]:
        if row["config_id"] in swap:
            row["ledger_json"] = swap[row["config_id"]]
    with Store(tmp_path / "results.db") as store:
        yield rdata.load(store, runfixtures.fill(store, document=d))


def test_tensor_split_memory_is_compared_per_device(run):
    (c,) = [m for m in verdict.memory_comparisons(run) if m["setting"] == "kv-f16-q8_0"]
    # layer split (copies4, 48.10 MiB compute on each rpc device) against -sm tensor (16.01 on each)
    assert c["compute_delta_mib"] == {"RPC0": -32.09, "RPC1": -32.09}
    (line,) = [s for s in verdict.memory_sentences(run) if s.startswith("kv-f16-q8_0")]
    assert "compute buffers RPC0 -32.09 MiB, RPC1 -32.09 MiB, host" in line


def test_every_report_says_how_the_meta_buffers_were_attributed(run):
    note = next(n for n in summary.ledger_notes(run) if n.startswith("copies1 × kv-f16-q8_0"))
    assert "largest per-device part" in note and "Not in the log" in note
    for fmt in ("md", "html"):
        assert "-sm tensor: llama.cpp prints each Meta() buffer once" in formats.render(run, fmt)
    doc = json.loads(formats.render(run, "json"))
    assert note in doc["memory_notes"]
    cfg = next(c for c in doc["configs"] if (c["build"], c["setting"]) == ("copies1", "kv-f16-q8_0"))
    assert cfg["ledger"]["meta"]["printed"]["Meta()"]["model_mib"] == 39.66
    assert "/ledger/meta/printed/Meta()/model_mib" in csvfile.configs_csv(run)


def test_the_result_tables_have_the_tensor_splits_devices(run):
    rows = {(r["build"], r["setting"]): r for r in tables.rows(run)}
    assert rows[("copies1", "kv-f16-q8_0")]["compute_mib"] == {"RPC0": 16.01, "RPC1": 16.01}
    head, body = summary.split_table(run)
    row = next(r for r in body if r[:2] == ["copies1", "kv-f16-q8_0"])
    assert row[head.index("Compute RPC0 (MiB)")] == "16.01" and row[head.index("KV RPC1 (MiB)")] == "16.00"


def test_a_dropped_pipeline_is_noted_where_copies_are_compared(run):
    (c,) = [m for m in verdict.memory_comparisons(run) if m["setting"] == "kv-f16-f16"]
    assert c["baseline_pp"] == ledger.DROPPED and c["baseline_pp_dropped"].startswith("ggml_gallocr_reserve_n_impl")
    (line,) = [s for s in verdict.memory_sentences(run) if s.startswith("kv-f16-f16")]
    assert "llama.cpp DROPPED pipeline parallelism in copies4" in line
    assert any("copies4 × kv-f16-f16: llama.cpp DROPPED pipeline parallelism" in n for n in summary.ledger_notes(run))


def test_host_buffer_types_and_input_buffers_have_columns(tmp_path):
    d = runfixtures.doc()
    t = d["tables"]
    first = t["configs"][0]["id"]
    for row in t["ledgers"]:
        if row["config_id"] == first:
            led = record("rpc-b11312-cpu-repack")
            led["host"]["CPU"]["input_mib"] = None
            row["ledger_json"] = led
        else:
            row["ledger_json"]["host"].setdefault("CUDA_Host", {})["input_mib"] = None
    with Store(tmp_path / "results.db") as store:
        run = rdata.load(store, runfixtures.fill(store, document=d))
    head, body = summary.split_table(run)
    assert "Host CPU_REPACK (MiB)" in head and "Host CPU_Mapped (MiB)" in head
    i = head.index("Host CPU_REPACK (MiB)")
    assert body[0][i] == "7.73"


def test_the_driver_check_counts_meta_buffers_on_the_gpus_they_span():
    """The issue's H200 case: two virtual CUDA devices on one GPU; NVML's figure is made up (no GPU here)."""
    lines = ["llama_prepare_model_devices: creating a Meta device for tensor parallelism from 2 devices:",
             "llama_prepare_model_devices: - device 0: CUDA0 (NVIDIA H200)",
             "llama_prepare_model_devices: - device 1: CUDA1 (NVIDIA H200)",
             "load_tensors:       Meta() model buffer size =  7218.64 MiB",
             "sched_reserve:     Meta() compute buffer size =  1000.00 MiB"]
    led = ledger.parse(lines).to_json()
    (row,) = nvmlcheck.compare(led, {0: 17000.0}, 1)
    assert row["devices"] == ["CUDA0", "CUDA1"] and row["ledger_mib"] == 16437.28 and row["meta"]
    (s,) = nvmlcheck.sentences([row])
    assert "no ledger device" not in s and "-sm tensor" in s and "unaccounted +562.72 MiB" in s
    # a Meta() buffer whose devices the log does not name is said to be left out, not silently dropped
    (row,) = nvmlcheck.compare(ledger.parse(lines[3:]).to_json(), {0: 17000.0}, 1)
    assert row["unmapped_mib"] == 8218.64 and "does not name" in nvmlcheck.sentences([row])[0]


@pytest.mark.parametrize("where", ["input", "meta", "dropped"])
def test_a_stored_ledger_with_figures_of_the_wrong_type_is_refused_before_any_report(tmp_path, where):
    """The new figures are checked where a run comes from outside, like the old ones: a string is never a number."""
    from llamalab.core.errors import StoreError

    d = runfixtures.doc()
    led = d["tables"]["ledgers"][0]["ledger_json"]
    if where == "input":
        led["host"]["CPU"]["input_mib"] = "6.01"
    elif where == "meta":
        led["meta"] = record("rpc-b11312-sm-tensor")["meta"] | {"shares": ["0.5", "0.5"]}
    else:
        led["pp_dropped_reason"] = 7
    with Store(tmp_path / "results.db") as store:
        rid = runfixtures.fill(store, document=d)
        with pytest.raises(StoreError, match="cannot be reported"):
            rdata.load(store, rid)
