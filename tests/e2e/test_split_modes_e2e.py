"""The split-modes preset for real on the CPU rig (two local rpc-servers, the tiny synthetic model), trimmed with
--set: every mode runs or is "not applicable" with its reason, said once, and the run does not fail for it.

What b11312 does there (the fixtures in tests/fixtures/applicability are logs of the same): `-sm row` is refused
("device RPC0 does not support split buffers": RPC devices have no split buffers); `-sm tensor` runs on a Meta
device of the two rpc-servers, without a fit ("llama_params_fit is not implemented for SPLIT_MODE_TENSOR"), at the
model's training context; `-sm none` runs on RPC0 alone. With one device, tensor, row and none need 2 (min_devices).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llamahelp import env_for
from llamalab.report import data as rdata
from llamalab.report import document, markdown
from llamalab.run import runner
from llamalab.store.db import Store

pytestmark = pytest.mark.llama

TRIM = ["workload.repeats=2", 'workload.order="interleaved"', "workload.prompt_tokens=32",
        "workload.output_tokens=4", "workload.warmup=0", "workload.concurrency=[1]",
        'settings=[{name="kv-f16",args=["-ctk","f16","-ctv","f16"]},{name="kv-f16-q8_0",args=["-ctk","f16","-ctv","q8_0"]}]']
ROW = "llama.cpp: device RPC0 does not support split buffers"


def run_cli(home, data, overrides: list[str]) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "llamalab.cli", "run", "split-modes", "--db", str(data / "results.db")]
    for o in overrides:
        argv += ["--set", o]
    return subprocess.run(argv, env=env_for(data, home), capture_output=True, text=True, timeout=900)


def test_split_modes_on_two_rpc_devices(demo_prep, llama_home, tmp_path):
    res = run_cli(llama_home, tmp_path, TRIM)
    assert res.returncode == 0, res.stderr[-3000:]  # an arm the rig cannot run is no failed configuration
    said = [ln.split("] ", 1)[-1] for ln in res.stderr.splitlines() if "does not apply to this rig" in ln]
    # llama.cpp is asked once per configuration (two settings), never again on the second round of passes
    assert len(said) == 2 and all("sm-row ×" in ln and "device RPC0 does not support split buffers" in ln
                                  for ln in said), said
    assert not [ln for ln in res.stderr.splitlines() if "warning:" in ln or "error:" in ln]
    with Store(tmp_path / "results.db") as store:
        rid = store.runs()[-1]["id"]
        assert store.run(rid)["status"] == "finished"
        assert runner.run_outcome(store, rid)[0] == []
        cfgs = store.configs(rid)
        row = [c for c in cfgs if c["build"] == "sm-row"]
        assert sorted((c["setting"], c["status"], c["reason"]) for c in row) == [
            ("kv-f16", "not-applicable", ROW), ("kv-f16-q8_0", "not-applicable", ROW)]
        ok = {(c["build"], c["setting"]) for c in cfgs if c["status"] == "ok"}
        assert ok == {(b, s) for b in ("copies4", "copies1", "no-pp-override", "sm-tensor", "sm-none")
                      for s in ("kv-f16", "kv-f16-q8_0")}
        assert len(store.done_trials(rid)) == 10 * 2  # two trials of every configuration that applies
        tensor = [c for c in cfgs if c["build"] == "sm-tensor"]
        assert all('"llama_params_fit is not implemented for SPLIT_MODE_TENSOR"' in c["reason"] for c in tensor)
        assert all(c["ledger"]["pipeline_parallel"] is False for c in tensor)
        data = rdata.load(store, rid)
    md = markdown.render(data)
    section = md.split("## Not applicable on this rig\n\n", 1)[1].split("\n\n", 1)[0]
    assert section == f"- sm-row: not applicable on this rig — {ROW}"  # once, for every setting
    assert "sm-row" not in md.split("## Not measured", 1)[-1].split("##", 1)[0]
    doc = json.loads(json.dumps(document.document(data), default=str))
    assert doc["not_applicable"] == [{"build": "sm-row", "settings": ["kv-f16", "kv-f16-q8_0"], "reason": ROW,
                                      "every_setting": True, "by": "llama.cpp"}]


def test_one_device_rules_out_the_modes_that_need_two(demo_prep, llama_home, tmp_path):
    res = run_cli(llama_home, tmp_path, [*TRIM[2:-1], "workload.repeats=1", "devices.count=1",
                                         'settings=[{name="kv-f16",args=["-ctk","f16","-ctv","f16"]}]'])
    assert res.returncode == 0, res.stderr[-3000:]
    said = [ln.split("] ", 1)[-1] for ln in res.stderr.splitlines() if "does not apply to this rig" in ln]
    need = "it needs at least 2 devices and this rig has 1 (cpu-rpc)"
    assert sorted(said) == sorted(f"build {b} does not apply to this rig: {need}"
                                  for b in ("sm-tensor", "sm-row", "sm-none")), said
    assert "starting llama-server for sm-" not in res.stderr  # never started
    with Store(tmp_path / "results.db") as store:
        rid = store.runs()[-1]["id"]
        builds = {b["name"]: (b["status"], b["reason"]) for b in store.builds(rid)}
        assert {b: builds[b] for b in ("sm-tensor", "sm-row", "sm-none")} == dict.fromkeys(
            ("sm-tensor", "sm-row", "sm-none"), ("not-applicable", need))
        assert all(b["key"] is None for b in store.builds(rid) if b["status"] == "not-applicable")  # not built
        data = rdata.load(store, rid)
    section = markdown.render(data).split("## Not applicable on this rig\n\n", 1)[1].split("\n\n", 1)[0]
    assert section.splitlines() == [f"- {b}: not applicable on this rig — {need}"
                                    for b in ("sm-tensor", "sm-row", "sm-none")]
