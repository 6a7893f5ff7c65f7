"""SIGINT / SIGTERM during a build, a load or a request: llamalab stops cleanly, kills every process it started,
marks the run interrupted, and --resume completes it."""

from __future__ import annotations

import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from llamahelp import FAST, children_of, cmdline, env_for, wait_gone

pytestmark = pytest.mark.llama


def _start(data, home, *extra):
    argv = [sys.executable, "-m", "llamalab.cli", "demo"]
    for o in FAST:
        argv += ["--set", o]
    return subprocess.Popen(argv + list(extra), env=env_for(data, home), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        for k in children_of(todo.pop()):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


def _wait_line(p, needle: str, timeout_s: float = 600) -> list[str]:
    """Read stderr (in a thread, so a silent child cannot block us) until a line contains `needle`."""
    if not hasattr(p, "_lines"):
        p._lines = queue.Queue()
        threading.Thread(target=lambda: [p._lines.put(ln) for ln in p.stderr], daemon=True).start()
    lines = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = p._lines.get(timeout=0.05)
        except queue.Empty:
            if p.poll() is not None:
                raise AssertionError(f"llamalab exited before {needle!r}: " + "".join(lines[-20:])) from None
            continue
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"no {needle!r} within {timeout_s}s: " + "".join(lines[-20:]))


def _rest(p) -> list[str]:
    """Whatever stderr lines the reader thread has queued (for failure messages)."""
    out = []
    while hasattr(p, "_lines") and not p._lines.empty():
        out.append(p._lines.get_nowait())
    return out[-30:]


def _run_status(data):
    con = sqlite3.connect(data / "results.db")
    try:
        return con.execute("SELECT id, status FROM runs").fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("stage, needle", [
    pytest.param("load", "starting llama-server", id="during-load"),
    pytest.param("request", "trial 2/", id="during-request"),
])
def test_interrupt_stops_everything_and_resume_completes(demo_prep, llama_home, tmp_path, sig, stage, needle):
    data = tmp_path / "data"
    p = _start(data, llama_home)
    _wait_line(p, needle)
    kids = _descendants(p.pid)
    if stage == "load":
        assert any("ggml-rpc-server" in cmdline(k) or "llama-server" in cmdline(k) for k in kids)
    p.send_signal(sig)
    rc = p.wait(timeout=60)
    assert rc == 130, (rc, "".join(_rest(p)))
    assert wait_gone(kids) == set(), [cmdline(k) for k in kids]
    ((run_id, status),) = _run_status(data)
    assert status == "interrupted"
    done = subprocess.run([sys.executable, "-m", "llamalab.cli", "demo", *sum((["--set", o] for o in FAST), []),
                           "--resume", run_id, "--json"], env=env_for(data, llama_home),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _run_status(data) == [(run_id, "finished")]


def test_interrupt_during_a_build_leaves_no_compiler_behind(demo_prep, llama_home, tmp_path):
    # a fresh build cache that shares the extracted source: the build starts from scratch
    home = tmp_path / "home"
    home.mkdir()
    (home / "src").symlink_to(llama_home / "src")
    (home / "downloads").symlink_to(llama_home / "downloads", target_is_directory=True)
    (home / "models").symlink_to(llama_home / "models")
    p = _start(tmp_path / "data", home)
    _wait_line(p, "building llama.cpp")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any("cc1" in cmdline(k) or "ninja" in cmdline(k)
                                                  for k in _descendants(p.pid)):
        time.sleep(0.1)
    kids = _descendants(p.pid)
    assert any("cmake" in cmdline(k) for k in kids)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 130
    assert wait_gone(kids, timeout_s=30) == set(), [cmdline(k) for k in kids if cmdline(k)]
    assert not (tmp_path / "data" / "results.db").exists() or _run_status(tmp_path / "data") == []
