"""How a llama-server ended, in words: its signal (what it usually means), the log's own reason, its last lines.
Pure functions over real exit statuses (real processes killed by real signals) and real llama.cpp logs."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from llamalab.llamacpp import server
from llamalab.run import workload
from testpaths import FIXTURES

LOGS = FIXTURES / "logs"


def _killed_by(sig: signal.Signals) -> int:
    """The exit status Popen reports for a real process that received `sig`."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    p.send_signal(sig)
    return p.wait(timeout=10)


@pytest.mark.parametrize("sig, words", [
    (signal.SIGKILL, "killed by SIGKILL (killed, possibly out of memory"),
    (signal.SIGILL, "killed by SIGILL (illegal instruction"),
    (signal.SIGSEGV, "killed by SIGSEGV (segmentation fault"),
    (signal.SIGABRT, "killed by SIGABRT (aborted"),
])
def test_exit_status_names_the_signal(sig, words):
    rc = _killed_by(sig)
    assert rc == -sig
    assert server.exit_status(rc).startswith(words)


def test_exit_status_other_cases():
    assert server.exit_status(1) == "exited with status 1"
    assert server.exit_status(0) == "exited with status 0"
    assert server.exit_status(None) == "still running"
    assert server.exit_status(128 + 9).startswith("killed by SIGKILL")  # through a shell
    assert server.exit_status(-200) == "killed by signal 200"


def test_death_reason_prefers_the_logs_reason_then_its_last_line():
    oom = (LOGS / "vulkan-2025-08-compute-oom.log").read_text().splitlines()
    r = server.death_reason(-9, oom)
    assert r.startswith("killed by SIGKILL") and "; out of memory (" in r
    plain = ["main: server is listening on http://127.0.0.1:8080", "",
             "\x1b[32mI\x1b[0m slot update_slots: id  0 | task 3 | prompt processing progress, n_tokens = 64"]
    r = server.death_reason(-4, plain)
    assert r.startswith("killed by SIGILL") and r.endswith(
        "; last log line: I slot update_slots: id  0 | task 3 | prompt processing progress, n_tokens = 64")
    assert server.death_reason(-11, []).endswith("; its log is empty")
    assert server.last_lines(["a", "", " b ", "c" * 400], 2) == ["b", "c" * 300]


def test_special_prefix_is_what_the_tokenizer_puts_before_the_text():
    assert workload.special_prefix([1, 10, 11, 12], [10, 11, 12]) == [1]  # BOS
    assert workload.special_prefix([10, 11, 12], [10, 11, 12]) == []  # no BOS
    assert workload.special_prefix([1, 10, 11, 12, 2], [10, 11, 12]) == [1]  # BOS and EOS
    assert workload.special_prefix([10, 11, 12, 2], [10, 11, 12]) == []  # EOS only
    assert workload.special_prefix([5, 6], [10, 11, 12]) == []  # nothing in common: no prefix claimed
