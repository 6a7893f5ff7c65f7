"""llama-server: argv (pure), and a launch context manager that waits for /health and always tears down."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ..core import net, proc
from ..core.errors import ConfigError, LaunchError
from ..logs.failures import failure_reason
from ..logs.rawlines import clean
from . import argv, engines, flags


def server_argv(binary: Path, model: Path, *, host: str, port: int, args: Sequence[str],
                engine: str = engines.LLAMA_CPP) -> list[str]:
    """The llama-server command line. `-lv 4` makes llama.cpp's ggml/llama info lines (the ledger's input) print;
    ik_llama.cpp prints them at any verbosity and gets `--log-disable` (no ./llama.log): engines.OWN_ARGS."""
    eng = engines.get(engine)
    return [str(binary), "-m", str(model), "--host", host, "--port", str(port), *engines.log_args(eng), "--metrics",
            *eng.server_extra, *[str(a) for a in args]]


_FLAG_LINE = re.compile(r"^((?:-{1,2}[A-Za-z][\w-]*)(?:,\s+-{1,2}[A-Za-z][\w-]*)*)")


# Flags ik_llama.cpp takes that its --help does not list (its common/common.cpp parses them)
IK_UNLISTED = ("-ot", "--override-tensor")


def known_flags(help_text: str, engine: str = engines.LLAMA_CPP) -> set[str]:
    """Every flag `llama-server --help` lists (the column at the start of its lines, e.g. `-c,    --ctx-size N`:
    llama.cpp's at the start of the line, ik_llama.cpp's after 2 or 9 blanks; descriptions continue after 34 or
    more), with ik_llama.cpp's unlisted ones."""
    flags: set[str] = set(IK_UNLISTED) if engine == engines.IK_LLAMA_CPP else set()
    for line in help_text.splitlines():
        m = _FLAG_LINE.match(line.strip())
        if m and not line.startswith(" " * 12):
            flags.update(f.strip() for f in m.group(1).split(","))
    return flags


def unknown_flags(args: Sequence[str], known: set[str]) -> list[str]:
    """Arguments that look like flags llama-server does not know (negative numbers are values, not flags; a long
    option is looked up as llama.cpp reads it, `--log_file` as `--log-file`)."""
    out = []
    for a in args:
        if a.startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?", a) and argv.name_of(a) not in known:
            out.append(a)
    return out


def check_flags(binary: Path, args: Sequence[str], env: Mapping[str, str] | None = None,
                engine: str = engines.LLAMA_CPP) -> None:
    """Refuse, before anything runs, arguments this llama-server does not know (ik_llama.cpp's `--help` exits 1:
    its text is read all the same)."""
    rc, text = proc.capture([str(binary), "--help"], timeout_s=30, env=env)
    known = known_flags(text, engine)
    if (rc != 0 and engine == engines.LLAMA_CPP) or len(known) < 20:
        return  # could not read the help; llama-server itself will complain, and that is recorded
    bad = unknown_flags(args, known)
    if bad:
        why = [w for a in bad if (w := flags.lacks(engine, a))]
        raise ConfigError(
            f"{engine}'s llama-server ({binary}) does not know the argument(s) {', '.join(bad)}"
            + (f" ({'; '.join(why)})" if why else "") + ".",
            tip="give an engine's own flags in the args of its builds ([[builds]] args), not in [server] args; "
                "check the spelling against `llama-server --help` for this build; flags change between llama.cpp "
                "versions (run `llamalab doctor` to see the version)." if why else
                "check the spelling against `llama-server --help` for this build; flags change between llama.cpp "
                "versions (run `llamalab doctor` to see the version).")


_SIGNALS = {
    signal.SIGKILL: "killed, possibly out of memory (the kernel's OOM killer sends SIGKILL)",
    signal.SIGILL: "illegal instruction: the CPU refused an instruction — code built for another CPU, or a fault in a "
                   "CPU kernel",
    signal.SIGSEGV: "segmentation fault: llama.cpp crashed",
    signal.SIGBUS: "bus error: a memory-mapped file shrank, or memory could not be mapped",
    signal.SIGFPE: "arithmetic exception: llama.cpp crashed",
    signal.SIGABRT: "aborted: llama.cpp stopped on a failed check",
    signal.SIGTERM: "terminated by another process",
}


def exit_status(returncode: int | None) -> str:
    """How a process ended, in words: its signal (with what it usually means) or its exit status [pure]."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode)
        except ValueError:
            return f"killed by signal {-returncode}"
        meaning = _SIGNALS.get(sig)
        return f"killed by {sig.name}" + (f" ({meaning})" if meaning else "")
    if returncode > 128 and returncode - 128 in signal.Signals._value2member_map_:  # through a shell
        return exit_status(128 - returncode)
    return f"exited with status {returncode}"


def last_lines(lines: Sequence[str], n: int = 12) -> list[str]:
    """The last `n` non-blank log lines, cleaned (no colours or prefixes) and cut to 300 characters [pure]."""
    out = [c[:300] for c in (clean(x) for x in lines) if c]
    return out[-n:]


def death_reason(returncode: int | None, lines: Sequence[str]) -> str:
    """One line on why llama-server ended: its signal or status, and the log's own reason or its last line [pure]."""
    said = failure_reason(lines)
    tail = last_lines(lines, 1)
    return exit_status(returncode) + (f"; {said}" if said else f"; last log line: {tail[0]}" if tail
                                      else "; its log is empty")


@dataclass
class Server:
    url: str
    child: proc.Child
    log_path: Path
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    load_seconds: float = 0.0

    def log_lines(self) -> list[str]:
        try:
            return self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return []

    def alive(self) -> bool:
        return self.child.alive()

    def ended(self, within_s: float = 2.0) -> bool:
        """True when the server has exited, waiting up to `within_s` for it (a request fails as soon as the dying
        process closes its socket, a moment before its exit status exists)."""
        try:
            self.child.popen.wait(timeout=within_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def death(self, when: str) -> str:
        """The message for a server that ended `when` ("during the workload"): how it ended, then its last lines."""
        lines = self.log_lines()
        tail = "\n".join("    " + ln for ln in last_lines(lines))
        return (f"llama-server died {when}: {death_reason(self.child.returncode, lines)}. Log: {self.log_path}"
                + (f"\nLast lines:\n{tail}" if tail else ""))


@contextmanager
def launch(
    binary: Path,
    model: Path,
    *,
    args: Sequence[str],
    log_path: Path,
    env: Mapping[str, str] | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    ready_timeout_s: float = 600.0,
    engine: str = engines.LLAMA_CPP,
) -> Iterator[Server]:
    """Start llama-server, wait until /health says ok, yield it, and stop its process group on exit."""
    if not Path(binary).is_file():
        raise LaunchError(f"llama-server not found at {binary}",
                          tip="rebuild with `llamalab build`, or check --server-bin.")
    fixed_port = port is not None
    for attempt in range(3):
        use_port = port if port is not None else net.free_port(host)  # fixed_port: port is not None
        argv = server_argv(binary, model, host=host, port=use_port, args=args, engine=engine)
        child = proc.spawn(argv, log_path=log_path, env=env)
        server = Server(url=net.url(host, use_port), child=child, log_path=log_path, argv=argv, env=dict(env or {}))
        try:
            start = time.monotonic()
            _wait_ready(server, ready_timeout_s)
            server.load_seconds = time.monotonic() - start
        except LaunchError as e:
            child.terminate()
            # another program took the port between choosing and binding: choose another one
            if not fixed_port and "port already in use" in e.message and attempt < 2:
                continue
            raise
        except BaseException:
            child.terminate()
            raise
        break
    try:
        yield server
    finally:
        child.terminate()


def _wait_ready(server: Server, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while True:
            if not server.alive():
                lines = server.log_lines()
                tail = "\n".join("    " + ln for ln in last_lines(lines))
                raise LaunchError(
                    f"llama-server did not start: {death_reason(server.child.returncode, lines)}. "
                    f"Log: {server.log_path}\nLast lines:\n{tail}",
                    tip="the log's last lines name the cause; an unknown flag or an out-of-memory error is the usual "
                        "one.",
                )
            try:
                r = client.get(server.url + "/health")
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            proc.check_stop()
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"llama-server was not ready after {timeout_s:.0f} s (GET /health never answered 200). "
                    f"Log: {server.log_path}",
                    tip="a large model may need longer: raise [server] ready_timeout_s in the study.",
                )
            time.sleep(0.2)
