"""Device order and labels in reports: llama.cpp's device order, though the store keeps ledger keys sorted."""

from __future__ import annotations

import pytest

import runfixtures
from llamalab.report.data import compute_by_label, device_names


@pytest.mark.parametrize("name", runfixtures.names())
def test_rpc_devices_follow_the_rpc_flag_order(name):
    """Real runs: every local rpc-server prints as RPC0[host:port]; the report's RPC0/RPC1 must be the first and
    second endpoints given to --rpc, whatever order their ports sort in. (A device a configuration put nothing on
    prints no buffer: ik_llama.cpp's one-device member of tune-engines has RPC0 alone.)"""
    t = runfixtures.doc(name)["tables"]
    argv = {c["id"]: c["server_argv_json"] for c in t["configs"]}
    checked = 0
    for led in t["ledgers"]:
        args = argv[led["config_id"]]
        endpoints = args[args.index("--rpc") + 1].split(",")
        got = [n.split("[", 1)[1].rstrip("]") for n in device_names(led["ledger_json"])]
        assert got == [e for e in endpoints if e in got] and got[:1] == endpoints[:1]
        checked += 1
    assert checked >= 4


@pytest.mark.parametrize("ledger,expected", [
    pytest.param({"devices": {"CUDA10": {}, "CUDA2": {}, "CUDA0": {}}}, ["CUDA0", "CUDA2", "CUDA10"],
                 id="natural-order-without-breakdown"),
    pytest.param({"devices": {"CUDA1": {}, "CUDA0": {}},
                  "breakdown_final": [{"name": "CUDA1 (NVIDIA H200)"}, {"name": "CUDA0 (NVIDIA H200)"},
                                      {"name": "Host"}]},
                 ["CUDA1", "CUDA0"], id="breakdown-order-wins"),
    pytest.param({"devices": {"RPC0[10.0.0.3:50052]": {}, "RPC0[10.0.0.2:50052]": {}},
                  "breakdown_projected": [{"name": "RPC0 (10.0.0.3:50052)"}, {"name": "RPC0 (10.0.0.2:50052)"}]},
                 ["RPC0[10.0.0.3:50052]", "RPC0[10.0.0.2:50052]"], id="remote-endpoints"),
])
def test_device_names(ledger, expected):
    assert device_names(ledger) == expected


def test_labels_of_a_real_ledger():
    led = runfixtures.doc()["tables"]["ledgers"][0]["ledger_json"]
    assert list(led["devices"]) == sorted(led["devices"])  # as stored: sorted by endpoint, not in device order
    assert compute_by_label(led) == {"RPC0": 48.1, "RPC1": 48.1}


def test_the_stored_study_is_read_through_the_study_model(tmp_path):
    """A real run's study file comes to the renderers as the study model has it (typed, its defaults filled in)."""
    from llamalab.report import data as rdata
    from llamalab.store.db import Store
    from llamalab.study.spec import BuildSpec, Study

    with Store(tmp_path / "r.db") as store:
        d = rdata.load(store, runfixtures.fill(store, runfixtures.DEMO))
    assert isinstance(d.study_spec, Study)
    assert d.study_names("builds") == [b.name for b in d.study_spec.builds] and "copies4" in d.study_names("builds")
    b = d.build_spec("copies1")
    assert isinstance(b, BuildSpec) and b.cmake == {"GGML_SCHED_MAX_COPIES": 1}
    assert d.build_label("copies4") == "Pipeline parallelism, 4 sched copies"
    assert d.build_spec("not-in-the-study") == BuildSpec(name="not-in-the-study")
    assert d.threshold == 0.02 and d.output_mode == "fixed"


def test_a_study_the_model_rejects_is_read_by_its_keys(tmp_path):
    """A stored study this llamalab's model refuses (a key of another version, a wrong type) still labels the report
    from the keys it has, as the file spells them."""
    from llamalab.report import data as rdata
    from llamalab.store.db import Store

    doc = runfixtures.doc(runfixtures.DEMO)
    run = doc["tables"]["runs"][0]
    run["study_toml"] = run["study_toml"].replace("[workload]", "[workload]\nfrom_a_newer_llamalab = true\n", 1)
    run["study_toml"] = run["study_toml"].replace("threshold = 0.02", "threshold = 0.05")
    with Store(tmp_path / "r.db") as store:
        d = rdata.load(store, runfixtures.fill(store, document=doc))
    assert d.study_spec is None
    assert "copies4" in d.study_names("builds")
    assert d.build_label("copies4") == "Pipeline parallelism, 4 sched copies"
    assert d.build_spec("copies1").cmake == {"GGML_SCHED_MAX_COPIES": 1}
    assert d.threshold == 0.05
