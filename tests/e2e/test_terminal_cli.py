"""`llamalab run` on a real terminal (a pseudo-terminal: rich's live display is on) with a hostile study: a study
name and labels full of rich markup and terminal control sequences, and a setting whose llama-server error quotes
markup (`-ctk "[/]"`). The study runs to its end; nothing is read as markup or reaches the terminal as a control
sequence."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from llamahelp import env_for
from llamalab.store.db import Store

pytestmark = pytest.mark.llama

HOSTILE = "\x1b]0;pwned\x07[bold]label[/] \x1b[2J\x1b[H\r\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\\u202e"


def _read_all(fd: int, p: subprocess.Popen, timeout_s: float) -> bytes:
    out = bytearray()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif p.poll() is not None:
            break
    return bytes(out)


def test_run_on_a_terminal_with_hostile_names_labels_and_log_lines(demo_prep, llama_home, tmp_path):
    data = tmp_path / "data"
    h = json.dumps(HOSTILE)  # a TOML basic string: \u001b escapes
    overrides = [
        f"name={h}",
        f'builds=[{{name="copies4",label={h}}}]',
        f'settings=[{{name="ok",label={h},args=["-ctk","f16"]}},{{name="markup",args=["-ctk","[/]"]}}]',
        "workload.repeats=1", "workload.prompt_tokens=16", "workload.output_tokens=4", "workload.warmup=0",
        "workload.concurrency=[1]",
    ]
    argv = [sys.executable, "-m", "llamalab.cli", "run", "demo"]
    for o in overrides:
        argv += ["--set", o]
    master, slave = pty.openpty()
    env = {**env_for(data, llama_home), "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "50"}
    p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    try:
        raw = _read_all(master, p, 600)
        p.wait(timeout=60)
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()
    out = raw.decode("utf-8", "replace")
    assert "Traceback" not in out and "MarkupError" not in out, out[-3000:]
    for bad in ("pwned", "evil.example", "\x1b[2J", "\u202e"):
        assert bad not in out, (bad, out[-2000:])
    # the study ran to its end on the terminal, and says why the "markup" setting failed, quoting "[/]" as written
    with Store(data / "results.db") as s:
        (run,) = s.runs()
        configs = {c["setting"]: c for c in s.configs(run["id"])}
        assert s.run(run["id"])["status"] == "finished"
    assert configs["ok"]["status"] == "ok" and configs["markup"]["status"] == "failed"
    assert "[/]" in configs["markup"]["reason"]
    flat = out.replace("\r", "").replace("\n", "")
    assert "[/]" in flat and "[bold]label[/]" in flat  # the failed setting's reason, the study name in the title
    report = (data / "runs" / run["id"] / "report.md").read_text()
    assert "[bold]label[/] click" in report and "\x1b" not in report and "\x07" not in report
