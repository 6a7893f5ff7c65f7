"""`compare`: two stored runs, the configurations both hold, memory per device and speed ratios with intervals."""

from __future__ import annotations

import json

import pytest

import runfixtures
from llamalab.report import data as rdata
from llamalab.report.analysis import compare as cmp
from llamalab.store.db import Store


def load(tmp_path, name: str, document: dict | None = None) -> rdata.RunData:
    with Store(tmp_path / f"{name}.db") as s:
        return rdata.load(s, runfixtures.fill(s, name, document=document))


@pytest.fixture
def demo(tmp_path):
    return load(tmp_path, runfixtures.DEMO)


@pytest.fixture
def conc(tmp_path):
    return load(tmp_path, runfixtures.CONCURRENCY)


def test_a_run_against_itself(demo):
    c = cmp.compare(demo, demo, n_resamples=2000)
    assert len(c["configs"]) == 4 and c["notes"] == [] and c["only_in_a"] == c["only_in_b"] == []
    for cfg in c["configs"]:
        m = cfg["memory"]
        assert all(d["delta_mib"] == 0 for d in m["compute"]) and m["compute_host"]["delta_mib"] == 0
        assert m["n_ctx"] == {"a": 8192, "b": 8192, "delta": 0, "ratio": 1.0}
        for s in cfg["speed"]:
            assert s["ratio"] == 1.0 and s["verdict"] == "no measurable difference"


def test_two_real_runs(demo, conc):
    c = cmp.compare(demo, conc, n_resamples=2000)
    assert [(x["build"], x["setting"]) for x in c["configs"]] == [
        ("copies4", "kv-f16-q8_0"), ("copies4", "kv-f16-f16"), ("copies1", "kv-f16-q8_0"), ("copies1", "kv-f16-f16")]
    first = c["configs"][0]
    assert [d["device"] for d in first["memory"]["compute"]] == ["RPC0", "RPC1"]
    assert first["memory"]["sched_copies"] == {"a": 4, "b": 4}
    metrics = {(s["metric"], s["concurrency"]) for s in first["speed"]}
    assert ("output_tps", 1) in metrics and ("aggregate_output_tps", 1) in metrics
    assert all(s["concurrency"] == 1 for s in first["speed"])  # the demo run measured single streams only
    for s in first["speed"]:
        assert s["n_a"] == 3 and s["n_b"] == 3
        assert s["ci_low"] <= s["ratio"] <= s["ci_high"]
        assert s["verdict"] in ("faster", "slower", "no measurable difference")
    text = cmp.markdown(c)
    assert "| copies4 | kv-f16-q8_0 | compute RPC0 (MiB) | 48.10 | 48.10 | +0.00 |" in text
    assert "| copies4 | kv-f16-q8_0 | sched copies | 4 | 4 |  |" in text and "B/A" in text


def test_devices_match_by_position_across_backends(demo, tmp_path):
    doc = runfixtures.doc()
    for led in doc["tables"]["ledgers"]:
        devs = led["ledger_json"]["devices"]
        for i, name in enumerate(sorted(devs)):
            devs[f"CUDA{i}"] = devs.pop(name)
        led["ledger_json"]["breakdown_final"] = []
        led["ledger_json"]["breakdown_projected"] = []
    doc["tables"]["runs"][0]["id"] = "20261130-000000-c0da01"
    other = load(tmp_path, "cuda", doc)
    c = cmp.compare(demo, other, n_resamples=500)
    assert [d["device"] for d in c["configs"][0]["memory"]["compute"]] == ["RPC0 / CUDA0", "RPC1 / CUDA1"]


def test_configurations_in_one_run_only_and_notes(demo, tmp_path):
    doc = runfixtures.doc()
    t = doc["tables"]
    gone = {c["id"] for c in t["configs"] if c["build"] == "copies1"}
    t["configs"] = [c for c in t["configs"] if c["id"] not in gone]
    t["ledgers"] = [x for x in t["ledgers"] if x["config_id"] not in gone]
    t["buffers"] = [x for x in t["buffers"] if x["config_id"] not in gone]
    t["trials"] = [x for x in t["trials"] if x["config_id"] not in gone]
    t["runs"][0]["id"] = "20261130-000000-07e41a"
    model = t["runs"][0]["model_json"]
    t["runs"][0]["model_json"] = {**model, "fingerprint": "0" * 16, "name": "another model"}
    other = load(tmp_path, "other", doc)
    c = cmp.compare(demo, other, n_resamples=500)
    assert [(x["build"], x["setting"]) for x in c["configs"]] == [("copies4", "kv-f16-q8_0"), ("copies4", "kv-f16-f16")]
    assert c["only_in_a"] == [["copies1", "kv-f16-q8_0"], ["copies1", "kv-f16-f16"]] and c["only_in_b"] == []
    assert any("different model files" in n for n in c["notes"])
    assert "Only in A: copies1 × kv-f16-q8_0, copies1 × kv-f16-f16." in cmp.markdown(c)


def test_compare_is_json_serialisable(demo, conc):
    c = cmp.compare(demo, conc, n_resamples=500)
    assert json.loads(json.dumps(c)) == c


def _other(tmp_path, edit) -> rdata.RunData:
    doc = runfixtures.doc()
    doc["tables"]["runs"][0]["id"] = "20261130-000000-0a7e22"
    edit(doc)
    return load(tmp_path, "other2", doc)


def test_runs_with_different_workloads_are_not_comparable(demo, tmp_path):
    """Issue 16: 2,048- against 256-token prompts used to print "TTFT 0.09× faster" without a word."""
    def longer(doc):
        run = doc["tables"]["runs"][0]
        run["study_toml"] = run["study_toml"].replace("prompt_tokens = 256", "prompt_tokens = 2048")
    other = _other(tmp_path, longer)
    assert other.cells == [(2048, 32)]
    c = cmp.compare(demo, other, n_resamples=500)
    assert any("different workloads" in n and "256+32" in n and "2,048+32" in n for n in c["notes"])
    rows = [s for cfg in c["configs"] for s in cfg["speed"]]
    assert rows and all(s["verdict"] == "not comparable" and s["ratio"] is None for s in rows)
    assert all("workload differs: 256+32 tokens per request in A, 2,048+32 in B" == s["reason"] for s in rows)
    text = cmp.markdown(c)
    assert "faster" not in text.split("## Speed")[1] and "not comparable (workload differs" in text


def test_runs_with_another_output_mode_or_unlike_load_get_no_verdict(demo, tmp_path):
    def natural(doc):
        run = doc["tables"]["runs"][0]
        run["study_toml"] = run["study_toml"].replace('output = "fixed"', 'output = "natural"')
    c = cmp.compare(demo, _other(tmp_path, natural), n_resamples=500)
    rows = [s for cfg in c["configs"] for s in cfg["speed"]]
    assert rows and all(s["verdict"] == "not comparable" and "output mode differs" in s["reason"] for s in rows)

    def load_of(cores):
        def edit(doc):
            for t in doc["tables"]["trials"]:
                t["foreign_load"] = cores
        return edit
    (tmp_path / "quiet").mkdir()
    (tmp_path / "busy").mkdir()
    quiet, busy = _other(tmp_path / "quiet", load_of(0.0)), _other(tmp_path / "busy", load_of(1.5))
    c = cmp.compare(quiet, busy, n_resamples=500)
    rows = [s for cfg in c["configs"] for s in cfg["speed"]]
    assert rows and all(s["verdict"] == "not comparable" and "CPU cores" in s["reason"] for s in rows)
    assert all(s["ratio"] is not None for s in rows)  # same workload: the ratio is shown, without a claim
