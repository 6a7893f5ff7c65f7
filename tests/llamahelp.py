"""Helpers for tests that run real llama.cpp: a small, fast study and process inspection."""

from __future__ import annotations

import os
import time
from pathlib import Path

from llamalab import runner, study as studymod
from llamalab.progress import Progress
from llamalab.store import Store

# Two builds, one setting, tiny workload: a few seconds per configuration on 2 cores.
FAST = [
    'builds=[{name="copies4"},{name="copies1",cmake={GGML_SCHED_MAX_COPIES=1}}]',
    'settings=[{name="kv-f16-q8_0",args=["-ctk","f16","-ctv","q8_0"]}]',
    "workload.repeats=2", "workload.prompt_tokens=64", "workload.output_tokens=8", "workload.warmup=0",
    "workload.concurrency=[1]",
]


def run_study(home: Path, data: Path, overrides: list[str], progress: Progress | None = None,
              ref: str = "demo", **opts) -> tuple[Store, str]:
    st, text = studymod.load(ref, overrides)
    o = runner.Options(home=home, db=data / "results.db", runs_dir=data / "runs", **opts)
    p = progress or Progress()
    prep = runner.prepare(st, o, p)
    run_id = runner.execute(prep, text, o, p)
    return Store(o.db), run_id


def children_of(pid: int) -> set[int]:
    """Every process whose parent is `pid` (llama-server and rpc-servers run in their own sessions)."""
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.add(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids: set[int], timeout_s: float = 10.0) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = {p for p in pids if alive(p)}
        if not left:
            return set()
        time.sleep(0.1)
    return {p for p in pids if alive(p)}


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def env_for(data: Path, home: Path) -> dict[str, str]:
    return {**os.environ, "LLAMALAB_DATA": str(data), "LLAMALAB_HOME": str(home), "PYTHONUNBUFFERED": "1"}
