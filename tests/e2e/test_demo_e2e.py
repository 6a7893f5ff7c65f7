"""The walking study for real: `llamalab demo --json` builds llama.cpp (cached), starts two rpc-servers and
llama-server per configuration, and the real logs show what pipeline parallelism's copies cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from llamalab.llamacpp import build as buildmod

pytestmark = pytest.mark.llama


@pytest.fixture(scope="module")
def demo_rows(demo_prep, tmp_path_factory):
    data = tmp_path_factory.mktemp("demo-data")
    env = {**os.environ, "LLAMALAB_DATA": str(data)}
    done = subprocess.run([sys.executable, "-m", "llamalab.cli", "demo", "--json"], env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), done.stderr, data


def test_table_has_every_build_setting_and_trial(demo_rows):
    rows, _, _ = demo_rows
    builds = ["copies4", "copies1", "no-pp-override"] + (["no-pp-blas"] if buildmod.openblas_available()[0] else [])
    got = {(r["build"], r["setting"], r["trial"]) for r in rows}
    want = {(b, s, t) for b in builds for s in ("kv-f16-q8_0", "kv-f16-f16") for t in (1, 2, 3)}
    assert got == want
    for r in rows:
        assert r["input_tokens"] == 256 and r["output_tokens"] == 32
        assert r["input_tps"] > 0 and r["output_tps"] > 0
        assert set(r) >= {"build", "setting", "trial", "input_tokens", "input_tps", "output_tokens", "output_tps",
                          "compute_mib", "compute_host_mib", "n_ctx", "copies"}
        assert len(r["compute_mib"]) == 2 and r["n_ctx"] > 0


def test_copies4_costs_more_compute_than_copies1_on_every_device_and_host(demo_rows):
    rows, _, _ = demo_rows
    by = {(r["build"], r["setting"]): r for r in rows}
    for setting in ("kv-f16-q8_0", "kv-f16-f16"):
        c4, c1 = by[("copies4", setting)], by[("copies1", setting)]
        assert c4["copies"] == 4 and c4["pipeline_parallel"] is True
        assert c1["copies"] == 1
        for dev in c4["compute_mib"]:
            assert c4["compute_mib"][dev] > c1["compute_mib"][dev], (setting, dev)
        assert c4["compute_host_mib"] > c1["compute_host_mib"]


def test_runtime_override_turns_pipeline_parallelism_off_with_copies1_buffers(demo_rows):
    rows, _, _ = demo_rows
    by = {(r["build"], r["setting"]): r for r in rows}
    for setting in ("kv-f16-q8_0", "kv-f16-f16"):
        ot, c1 = by[("no-pp-override", setting)], by[("copies1", setting)]
        assert ot["pipeline_parallel"] is False and ot["copies"] == 1
        assert ot["compute_mib"] == c1["compute_mib"] and ot["compute_host_mib"] == c1["compute_host_mib"]


def test_blas_build_turns_pipeline_parallelism_off_or_is_skipped_with_reason(demo_rows):
    rows, stderr, _ = demo_rows
    blas = [r for r in rows if r["build"] == "no-pp-blas"]
    if not buildmod.openblas_available()[0]:
        assert "skipping build no-pp-blas" in stderr and "libopenblas-dev" in stderr
        return
    assert blas and all(r["pipeline_parallel"] is False and r["copies"] == 1 for r in blas)


def test_markdown_report_written_from_the_database(demo_rows):
    _, _, data = demo_rows
    reports = list((data / "runs").glob("*/report.md"))
    assert len(reports) == 1
    text = reports[0].read_text()
    assert "| Build | Setting | Trial |" in text and "copies4" in text and "copies1" in text
