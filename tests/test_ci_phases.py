"""scripts/ci-phases.py, the phase table .ci/run prints: on a build cache, a bisect's counts and a JUnit file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

SCRIPT = Path(__file__).parent.parent / "scripts" / "ci-phases.py"


def test_phase_table(tmp_path):
    tree = tmp_path / "home" / "builds" / "b11312-x" / "cpu-rpc-y"
    for t, counts in ((tree, {"hits": 0, "misses": 202}), (tree / "variants" / "copies1", {"hits": 8, "misses": 1})):
        t.mkdir(parents=True)
        (t / "llamalab-build.json").write_text(json.dumps({"seconds": 264.03, "targets": ["llama-server"],
                                                            "ccache": counts}))
    old = tmp_path / "home" / "builds" / "b11434-z" / "cpu-rpc-y"
    old.mkdir(parents=True)
    (old / "llamalab-build.json").write_text(json.dumps({"seconds": 272, "targets": ["llama-server"]}))
    os.utime(old / "llamalab-build.json", (1_000_000, 1_000_000))
    b = tmp_path / "pt" / "pytest-0" / "popen-gw1" / "test_bisect0" / "home" / "bisect" / "r" / "build" / "k"
    b.mkdir(parents=True)
    (b / "ccache-abc.json").write_text(json.dumps({"hits": 193, "misses": 2}))
    (tmp_path / "phases").write_text("apt 60\nmake test 1292\n")
    (tmp_path / "parallel.xml").write_text(
        '<testsuites><testsuite tests="2" time="3.1"><testcase classname="tests.test_a" name="x" time="2.5">'
        '<properties><property name="cpu_s" value="0.5"/><property name="child_cpu_s" value="1.9"/></properties>'
        '</testcase><testcase classname="tests.test_b" name="z" time="7"><properties>'
        '<property name="cpu_s" value="6.2"/><property name="child_cpu_s" value="0.0"/></properties></testcase>'
        '</testsuite></testsuites>')
    (tmp_path / "timed.xml").write_text('<testsuites><testsuite tests="1" time="1.2">'
                                        '<testcase classname="tests.test_a" name="y" time="1"/>'
                                        '</testsuite></testsuites>')
    out = subprocess.run([sys.executable, str(SCRIPT), "--home", str(tmp_path / "home"), "--phases",
                          str(tmp_path / "phases"), "--junit", str(tmp_path / "parallel.xml"),
                          str(tmp_path / "timed.xml"), str(tmp_path / "absent.xml"), "--bisect-root",
                          str(tmp_path / "pt"), "--since", "2000000"],
                         capture_output=True, text=True, check=True).stdout
    assert "| make test | 1292 |" in out
    assert "| b11312-x/cpu-rpc-y | 264 | llama-server | 0 / 202 (0%) |" in out
    assert "| b11312-x/cpu-rpc-y/variants/copies1 | 264 | llama-server | 8 / 9 (89%) |" in out
    assert "| b11434-z/cpu-rpc-y | reused | llama-server | — |" in out
    assert "| bisect: test_bisect0 commit abc | — | — | 193 / 195 (99%) |" in out
    assert out.index("tests.test_b | 7 | 6 + 0 | 1") < out.index("tests.test_a | 4 | 0 + 2 | 2")  # timed: no CPU
    shutil.rmtree(tmp_path / "pt")  # under pytest's basetemp, which .ci/run's table reads: no made-up bisect row
    assert "| **all** | **10** | **7 + 2** | **3** |" in out  # both passes, their workers' time summed
    assert "| parallel | 3 | 2 |" in out and "| timed | 1 | 1 |" in out  # each pass's wall time


def test_each_test_records_its_cpu_and_its_childrens(tmp_path):
    """tests/conftest.py puts each test's CPU seconds into the JUnit XML: the pytest process's own, and those of the
    processes it started and reaped (a test that burns 0.3 s itself and starts a child that burns 0.6 s)."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < {}: pass\n"
    (tmp_path / "test_burn.py").write_text(
        "import subprocess, sys\n\n\ndef test_burn():\n"
        f"    exec({burn.format(0.3)!r})\n"
        f"    subprocess.run([sys.executable, '-c', {burn.format(0.6)!r}], check=True)\n")
    xml = tmp_path / "t.xml"
    # where `-p conftest` finds tests/conftest.py, ahead of whatever PYTHONPATH already held
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent),
                                                                      os.environ.get("PYTHONPATH")]))}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", "-p", "no:xdist",
                    f"--junitxml={xml}", "test_burn.py"], cwd=tmp_path, env=env, check=True, capture_output=True)
    props = {p.get("name"): float(p.get("value")) for p in ET.parse(xml).getroot().iter("property")}
    assert 0.3 <= props["cpu_s"] < 3 and 0.6 <= props["child_cpu_s"] < 3, props
