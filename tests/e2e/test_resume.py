"""A crash at minute 55 must not cost the first 54: SIGKILL llamalab mid-study, then --resume completes it
with no trial lost or duplicated, and no llama-server or rpc-server is left behind."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from llamahelp import FAST, children_of, cmdline, env_for, wait_gone

pytestmark = pytest.mark.llama

OVERRIDES = [o if not o.startswith("workload.repeats") else "workload.repeats=3" for o in FAST]


def _trials(db):
    if not db.exists():
        return []
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT build, setting, trial, concurrency, output_tps FROM trials ORDER BY id").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


def _argv(*extra):
    argv = [sys.executable, "-m", "llamalab.cli", "demo"]
    for o in OVERRIDES:
        argv += ["--set", o]
    return argv + list(extra)


def test_sigkill_then_resume_loses_and_duplicates_nothing(demo_prep, llama_home, tmp_path):
    data = tmp_path / "data"
    db = data / "results.db"
    p = subprocess.Popen(_argv(), env=env_for(data, llama_home), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    kids: set[int] = set()
    while time.monotonic() < deadline and len(_trials(db)) < 4:  # the first configuration done, the second begun
        kids |= children_of(p.pid)
        assert p.poll() is None, p.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    kids |= children_of(p.pid)
    before = _trials(db)
    assert 4 <= len(before) < 6
    assert any("llama-server" in cmdline(k) for k in kids), "expected a running llama-server to orphan"
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    # llama-server and rpc-servers die with llamalab (PR_SET_PDEATHSIG): nothing is orphaned
    assert wait_gone(kids) == set()

    con = sqlite3.connect(db)
    run_id, status = con.execute("SELECT id, status FROM runs").fetchone()
    con.close()
    assert status == "running"  # SIGKILL left no chance to mark it; resume finds it anyway

    done = subprocess.run(_argv("--resume", run_id, "--json"), env=env_for(data, llama_home),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    after = _trials(db)
    keys = [t[:4] for t in after]
    assert len(keys) == len(set(keys)) == 6  # 2 builds × 1 setting × 3 trials, each exactly once
    assert after[: len(before)] == before  # the trials stored before the kill are kept as they were
    # only configurations with trials missing start a server again: one whose 3 trials were stored is not re-measured
    complete = [k for k in {t[:2] for t in before} if sum(1 for t in before if t[:2] == k) == 3]
    assert len(complete) == 1 and done.stderr.count("starting llama-server for") == 1, done.stderr[-3000:]
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM runs WHERE id=?", (run_id,)).fetchone()[0] == "finished"
    assert con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    con.close()


def test_rerunning_the_same_study_resumes_by_default(demo_prep, llama_home, tmp_path):
    data = tmp_path / "data"
    db = data / "results.db"
    p = subprocess.Popen(_argv(), env=env_for(data, llama_home), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and len(_trials(db)) < 1:
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)  # a clean stop: the run is marked interrupted
    assert p.wait(timeout=60) == 130
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM runs").fetchone()[0] == "interrupted"
    con.close()
    done = subprocess.run(_argv(), env=env_for(data, llama_home), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming unfinished run" in done.stderr
    assert len({t[:4] for t in _trials(db)}) == len(_trials(db)) == 6
