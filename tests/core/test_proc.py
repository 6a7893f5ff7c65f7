"""proc: argv lists only, own process groups, and nothing survives terminate()."""

import os
import sys
import time

import pytest

from llamalab.core import proc


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_spawn_terminate_kills_the_whole_group(tmp_path):
    # the child starts a grandchild that ignores SIGTERM; terminate() must still leave nothing behind
    script = (
        "import subprocess, sys, time\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import signal,time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print(\"ready\", flush=True); time.sleep(60)'])\n"
        "print(g.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    child = proc.spawn([sys.executable, "-c", script], log_path=tmp_path / "c.log")
    deadline = time.time() + 10
    while time.time() < deadline and "ready" not in (tmp_path / "c.log").read_text():
        time.sleep(0.05)
    grandchild = int((tmp_path / "c.log").read_text().split()[0])
    assert child in proc.live_children()
    child.terminate(grace_s=0.5)
    time.sleep(0.2)
    assert not _alive(child.pid) and not _alive(grandchild)
    assert child not in proc.live_children()


def test_run_tees_output_and_reports_status(tmp_path):
    seen = []
    done = proc.run([sys.executable, "-c", "print('a'); print('b'); raise SystemExit(3)"],
                    log_path=tmp_path / "r.log", on_line=seen.append)
    assert done.returncode == 3 and seen == ["a", "b"]
    assert (tmp_path / "r.log").read_text() == "a\nb\n"
    assert proc.tail_lines(tmp_path / "r.log", 1) == ["b"]


def test_capture_missing_program():
    rc, out = proc.capture(["/nonexistent/program-xyz"])
    assert rc == 127


def test_terminate_all_stops_everything(tmp_path):
    kids = [proc.spawn([sys.executable, "-c", "import time; time.sleep(60)"], log_path=tmp_path / f"{i}.log")
            for i in range(3)]
    assert proc.terminate_all(grace_s=1.0) >= 3
    assert all(not _alive(k.pid) for k in kids)


def test_a_stop_request_survives_a_swallowed_interrupt():
    """The SIGINT/SIGTERM handler raises KeyboardInterrupt; if that exception is lost (raised inside a finalizer, say),
    the next checkpoint raises it again."""
    proc.STOP.clear()
    try:
        try:
            proc.request_stop()
        except KeyboardInterrupt:
            pass  # swallowed, as Python does for exceptions raised in __del__
        with pytest.raises(KeyboardInterrupt):
            proc.check_stop()
    finally:
        proc.STOP.clear()
    proc.check_stop()  # no request: nothing happens


def _sigignored(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))


def test_spawn_can_start_a_child_with_sigpipe_ignored(tmp_path):
    """rpc-servers start with SIGPIPE ignored (a client gone mid-request must not kill them); others keep the
    default, which Python's own SIG_IGN must not leak into."""
    pipe_bit = 1 << (13 - 1)
    plain = proc.spawn(["sleep", "30"], log_path=tmp_path / "a.log")
    ignoring = proc.spawn(["sleep", "30"], log_path=tmp_path / "b.log", ignore_sigpipe=True)
    try:
        time.sleep(0.1)
        assert not _sigignored(plain.pid) & pipe_bit
        assert _sigignored(ignoring.pid) & pipe_bit
    finally:
        plain.terminate(grace_s=0.5)
        ignoring.terminate(grace_s=0.5)
