"""The only module that starts processes.

Every child gets an argv list (never a shell string), runs in its own process group, and has its output
written to a log file. Live children are registered so that one call (`terminate_all`) can stop every
llama-server and rpc-server llamalab started, e.g. from a signal handler.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

from .errors import LaunchError

_live: set[Child] = set()
_live_lock = threading.Lock()

# Set by the SIGINT/SIGTERM handler. The handler also raises KeyboardInterrupt, but an exception raised while the
# interpreter runs a finalizer (__del__ of a socket, a client …) is printed and dropped; the flag survives that, and
# `check_stop()` at the runner's checkpoints turns it into the KeyboardInterrupt again.
STOP = threading.Event()


def request_stop(signum: int | None = None, frame: FrameType | None = None) -> None:
    """Signal handler for SIGINT and SIGTERM: remember the request and interrupt the main thread."""
    STOP.set()
    raise KeyboardInterrupt


def check_stop() -> None:
    """Raise KeyboardInterrupt if a stop was requested (a checkpoint between units of work)."""
    if STOP.is_set():
        raise KeyboardInterrupt


@dataclass
class Child:
    """A process started in its own process group, with its output going to `log_path`."""

    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] = field(repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def terminate(self, grace_s: float = 5.0) -> int | None:
        """Stop the whole process group: SIGTERM, then SIGKILL after `grace_s`. Idempotent."""
        try:
            if self.popen.poll() is None:
                _signal_group(self.popen.pid, signal.SIGTERM)
                try:
                    self.popen.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    pass
            # The leader may be gone while others in its group live on: always sweep the group.
            _signal_group(self.popen.pid, signal.SIGKILL)
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        finally:
            with _live_lock:
                _live.discard(self)
        return self.popen.poll()

    def __hash__(self) -> int:
        return id(self)

    def log_tail(self, n: int = 20) -> list[str]:
        return tail_lines(self.log_path, n)


def _cannot_start(program: str, e: OSError) -> LaunchError:
    return LaunchError(f"could not start {program}: {e.strerror or e}.",
                       tip="the file is missing, not executable or damaged; for llama.cpp's binaries, `llamalab "
                           "build` checks the cached build and rebuilds what is broken.")


def _die_with_parent() -> None:
    """Runs in the child before exec: on Linux, ask the kernel to SIGKILL it when llamalab dies, so that even a
    SIGKILLed llamalab leaves no llama-server or rpc-server behind."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except Exception:
            pass


def _die_with_parent_no_sigpipe() -> None:
    """`_die_with_parent`, and SIGPIPE ignored (an ignored signal stays ignored across exec). For a server whose
    clients may go away mid-request: llama.cpp's rpc-server writes its replies with plain send(), so a reply to a
    client that closed its socket (a llama-server killed once its memory fit is printed) raises SIGPIPE and the
    rpc-server dies (exit -13) for every later client; with SIGPIPE ignored the send fails with EPIPE, the
    rpc-server drops that client and accepts the next."""
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    _die_with_parent()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    ignore_sigpipe: bool = False,
) -> Child:
    """Start `argv` in a new process group with stdout and stderr appended to `log_path`. `ignore_sigpipe`: the
    child starts with SIGPIPE ignored (`_die_with_parent_no_sigpipe` says why: rpc-servers)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return _start(argv, log_path, log, env, cwd, ignore_sigpipe=ignore_sigpipe)


def _start(argv: Sequence[str], log_path: Path, stdout: int | IO[bytes], env: Mapping[str, str] | None,
           cwd: Path | None, *, ignore_sigpipe: bool = False) -> Child:
    """Popen in a new session (its own process group), dying with llamalab, registered as live."""
    argv = [str(a) for a in argv]
    try:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent_no_sigpipe if ignore_sigpipe else _die_with_parent,
        )
    except OSError as e:
        raise _cannot_start(argv[0], e) from None
    child = Child(argv=argv, log_path=log_path, popen=popen)
    with _live_lock:
        _live.add(child)
    return child


@dataclass(frozen=True)
class Finished:
    argv: list[str]
    returncode: int
    log_path: Path
    seconds: float


def run(
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    timeout_s: float | None = None,
) -> Finished:
    """Run `argv` to completion in its own process group, appending its output to `log_path`.

    `on_line` sees each output line as it arrives (progress display). Returns the exit status; the caller
    decides what a non-zero status means. The group is killed if the caller is interrupted.
    """
    start = time.monotonic()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        child = _start(argv, log_path, subprocess.PIPE, env, cwd)
        popen = child.popen
        argv = child.argv
        try:
            assert popen.stdout is not None
            for raw in popen.stdout:
                check_stop()
                log.write(raw)
                if on_line is not None:
                    on_line(raw.decode("utf-8", "replace").rstrip("\r\n"))
                if timeout_s is not None and time.monotonic() - start > timeout_s:
                    break
            popen.wait(timeout=None if timeout_s is None else max(1.0, timeout_s - (time.monotonic() - start)))
        except BaseException:
            child.terminate(grace_s=2.0)
            raise
        finally:
            with _live_lock:
                _live.discard(child)
    rc = popen.poll()
    if rc is None:  # timed out
        child.terminate(grace_s=2.0)
        rc = -9
    return Finished(argv=argv, returncode=rc, log_path=log_path, seconds=time.monotonic() - start)


def run_until(
    argv: Sequence[str],
    *,
    log_path: Path,
    until: Callable[[str], bool],
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
) -> tuple[Finished, bool]:
    """Run `argv`, teeing its output to `log_path`, and kill its process group (SIGKILL, no grace) as soon as
    `until(line)` is true for an output line. Returns (how it ended, whether `until` stopped it).

    For a process whose useful work is done before its expensive work starts, e.g. llama-server's no-alloc
    memory fit, which runs before any weight is read.
    """
    argv = [str(a) for a in argv]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    start = time.monotonic()
    stopped = False
    with open(log_path, "ab") as log:
        try:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=full_env, start_new_session=True,
                                     preexec_fn=_die_with_parent)
        except OSError as e:
            raise _cannot_start(argv[0], e) from None
        child = Child(argv=argv, log_path=log_path, popen=popen)
        with _live_lock:
            _live.add(child)
        timer = threading.Timer(timeout_s, lambda: _signal_group(popen.pid, signal.SIGKILL))
        timer.daemon = True
        timer.start()
        try:
            assert popen.stdout is not None
            for raw in popen.stdout:
                check_stop()
                log.write(raw)
                if until(raw.decode("utf-8", "replace").rstrip("\r\n")):
                    stopped = True
                    break
        finally:
            timer.cancel()
            if stopped:  # its work is done: no SIGTERM handler needs to run
                _signal_group(popen.pid, signal.SIGKILL)
            child.terminate(grace_s=2.0)
    rc = popen.poll()
    timed_out = not stopped and time.monotonic() - start >= timeout_s
    return Finished(argv=argv, returncode=-9 if rc is None or timed_out else rc, log_path=log_path,
                    seconds=time.monotonic() - start), stopped


def capture(argv: Sequence[str], *, timeout_s: float = 30.0, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """Run a short command and return (exit status, combined output). Missing program → (127, message); a file
    that cannot be executed (no permission, not a program for this machine) → (126, message)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    try:
        done = subprocess.run(
            [str(a) for a in argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            env=full_env,
            start_new_session=True,
        )
    except FileNotFoundError as e:
        return 127, str(e)
    except OSError as e:  # EACCES, ENOEXEC (a damaged binary, another architecture, a script without #!)
        return 126, str(e)
    except subprocess.TimeoutExpired as e:
        out = e.output.decode("utf-8", "replace") if isinstance(e.output, bytes) else (e.output or "")
        return 124, out
    return done.returncode, done.stdout.decode("utf-8", "replace")


def live_children() -> list[Child]:
    with _live_lock:
        return [c for c in _live if c.alive()]


def terminate_all(grace_s: float = 3.0) -> int:
    """Stop every child still running; returns how many were stopped."""
    with _live_lock:
        children = list(_live)
    for c in children:
        c.terminate(grace_s=grace_s)
    return len(children)


def tail_lines(path: Path, n: int = 20) -> list[str]:
    """The last `n` lines of a text file (empty if it does not exist)."""
    try:
        with open(path, "rb") as f:
            return [ln.decode("utf-8", "replace").rstrip("\r\n") for ln in deque(f, maxlen=n)]
    except OSError:
        return []
