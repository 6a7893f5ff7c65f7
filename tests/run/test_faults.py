"""`llamalab run` under faults that end a study or a configuration (issue 17), with real llama.cpp (CPU + two local
rpc-servers, the tiny synthetic model, the shared cached build): honest exit codes when configurations fail, no
configuration row left "running" after any error, a second run refused while one is live, and a disk that fills
up mid-run. Each runs the `llamalab` script in its own process, as a user would."""

from __future__ import annotations

import errno
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fsfaults
from llamahelp import FAST, env_for, run_study
from llamalab.setup.progress import Progress

pytestmark = pytest.mark.llama

ONE_BUILD = ['builds=[{name="copies4"}]'] + [o for o in FAST[1:] if not o.startswith("workload.repeats")] + [
    "workload.repeats=1"]
BAD = '{name="bad",args=["-ctk","nonsense"]}'  # llama-server refuses the cache type and exits at start
GOOD = '{name="ok",args=[]}'


def _argv(overrides: list[str], *extra: str) -> list[str]:
    argv = [sys.executable, "-m", "llamalab.cli", "demo"]
    for o in overrides:
        argv += ["--set", o]
    return argv + list(extra)


def _run(data: Path, home: Path, overrides: list[str], *extra: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(_argv(overrides, *extra), env=env_for(data, home), capture_output=True, text=True,
                          timeout=timeout)


def _rows(db: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


def _clean(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-3000:]


def test_some_configurations_failed_exits_3(demo_prep, llama_home, tmp_path):
    done = _run(tmp_path, llama_home, ONE_BUILD + [f"settings=[{GOOD},{BAD}]"])
    _clean(done)
    assert done.returncode == 3, done.stderr[-3000:]
    assert "1 of 2 configuration(s) failed: copies4 × bad:" in done.stderr
    db = tmp_path / "results.db"
    assert _rows(db, "SELECT status FROM runs") == [("finished",)]
    assert sorted(_rows(db, "SELECT setting, status FROM configs")) == [("bad", "failed"), ("ok", "ok")]


def test_nothing_measured_exits_4_and_the_run_is_failed(demo_prep, llama_home, tmp_path):
    done = _run(tmp_path, llama_home, ONE_BUILD + [f"settings=[{BAD}]"])
    _clean(done)
    assert done.returncode == 4, done.stderr[-3000:]
    assert "nothing was measured: every configuration failed (copies4 × bad:" in done.stderr
    db = tmp_path / "results.db"
    assert _rows(db, "SELECT status FROM runs") == [("failed",)]
    assert _rows(db, "SELECT status FROM configs") == [("failed",)]
    assert _rows(db, "SELECT COUNT(*) FROM trials") == [(0,)]


def test_a_budget_the_devices_cannot_stand_for_stops_before_any_row(demo_prep, llama_home, tmp_path):
    """A budget larger than the devices' free memory is known only once they run: they are started and asked
    before the run is stored, so nothing is written and nothing is left running."""
    done = _run(tmp_path, llama_home, ONE_BUILD + ['devices.vram=["100TiB"]'])
    _clean(done)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "error: a budget of 104857600 MiB cannot be emulated" in done.stderr
    assert _rows(tmp_path / "results.db", "SELECT COUNT(*) FROM runs") == [(0,)]
    assert not (tmp_path / "runs").exists()


class FailAtTrial(Progress):
    """An error that is neither a launch nor a workload error, raised mid-configuration (here: a full disk while
    the progress line is written at trial `at`)."""

    def __init__(self, at: int):
        self.at = at

    def trial(self, k: int, n: int, label: str) -> None:
        if k == self.at:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")


def test_an_error_that_stops_the_study_leaves_no_row_running(demo_prep, llama_home, tmp_path):
    with pytest.raises(OSError, match="injected"):
        run_study(llama_home, tmp_path, FAST, progress=FailAtTrial(at=2))
    db = tmp_path / "results.db"
    assert _rows(db, "SELECT status FROM runs") == [("failed",)]
    ((status, reason),) = _rows(db, "SELECT status, reason FROM configs")
    assert status == "failed" and reason == "the study stopped: OSError: [Errno 28] No space left on device (injected)"
    assert _rows(db, "SELECT COUNT(*) FROM trials") == [(1,)]  # the trial before the error is kept


def _wait_for_trials(db: Path, p: subprocess.Popen, n: int, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while _rows(db, "SELECT COUNT(*) FROM trials") < [(n,)]:
        assert p.poll() is None, p.stderr.read()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_a_second_run_is_refused_while_the_first_measures(demo_prep, llama_home, tmp_path):
    """The first run is paused (SIGSTOP) once it has stored a trial, so that it is certainly live while the second
    starts, whatever the machine's speed; then it goes on and finishes untouched."""
    db = tmp_path / "results.db"
    first = subprocess.Popen(_argv(FAST, "--json"), env=env_for(tmp_path, llama_home), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_trials(db, first, 1)
        first.send_signal(signal.SIGSTOP)
        try:
            second = _run(tmp_path, llama_home, FAST, "--fresh", timeout=120)
        finally:
            first.send_signal(signal.SIGCONT)
        _clean(second)
        assert second.returncode == 1, second.stderr[-3000:]
        assert f"another llamalab (pid {first.pid}) is measuring run" in second.stderr
        assert "disturb the timings of both" in second.stderr
        out, err = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, err[-3000:]
    assert len(json.loads(out)) == 4  # 2 builds × 2 trials, the first run's own
    assert _rows(db, "SELECT status FROM runs") == [("finished",)]
    assert {s for (s,) in _rows(db, "SELECT status FROM configs")} == {"ok"}
    assert len(set(_rows(db, "SELECT build, setting, trial, concurrency FROM trials"))) == 4


def test_a_full_disk_mid_run_is_an_error_in_words_and_the_run_resumes(demo_prep, llama_home, tmp_path):
    with fsfaults.tiny_fs(tmp_path / "data", "8m") as data:
        db = data / "results.db"
        p = subprocess.Popen(_argv(FAST), env=env_for(data, llama_home), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            _wait_for_trials(db, p, 1)
            fsfaults.fill(data)
            out, err = p.communicate(timeout=600)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert "Traceback" not in out + err, err[-3000:]
        assert p.returncode not in (0, None)
        assert "error:" in err and "tip:" in err and "full" in err, err[-3000:]
        listed = subprocess.run([sys.executable, "-m", "llamalab.cli", "runs", "--json"],
                                env=env_for(data, llama_home), capture_output=True, text=True, timeout=60)
        ((run,),) = [json.loads(listed.stdout)]
        assert (run["status"], run["live"]) == ("interrupted", False)
        (data / "filler").unlink()
        done = _run(data, llama_home, FAST, "--json")
        _clean(done)
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"resuming unfinished run {run['id']}" in done.stderr
        assert _rows(db, "SELECT id, status FROM runs") == [(run["id"], "finished")]
        assert "running" not in {s for (s,) in _rows(db, "SELECT status FROM configs")}
        assert len(set(_rows(db, "SELECT build, setting, trial, concurrency FROM trials WHERE errors=0"))) == 4
