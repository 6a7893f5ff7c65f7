"""How busy the machine is with work that is not ours: CPU cores used by processes outside llamalab's own
process tree (llamalab, its llama-servers and rpc-servers) while a trial ran. Linux /proc; None elsewhere.

A speed figure taken while something else used the CPU is noisy; the report says so instead of hiding it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Snapshot:
    when: float
    busy_ticks: int  # all CPUs, all processes: user + nice + system + irq + softirq + steal
    ours_ticks: int  # our process tree (including children that already exited and were waited for)


def _busy_ticks() -> int | None:
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    vals = [int(x) for x in first[1:]]
    # user nice system idle iowait irq softirq steal
    return vals[0] + vals[1] + vals[2] + vals[5] + vals[6] + (vals[7] if len(vals) > 7 else 0)


def _proc_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    # utime stime cutime cstime are fields 14-17 (1-based) of the whole line; index 11-14 after ")" split
    return sum(int(x) for x in fields[11:15])


def _tree(root: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = {root}, [root]
    while todo:
        for k in kids.get(todo.pop(), []):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


def snapshot(root: int | None = None) -> Snapshot | None:
    busy = _busy_ticks()
    if busy is None:
        return None
    pids = _tree(root or os.getpid())
    return Snapshot(when=time.monotonic(), busy_ticks=busy, ours_ticks=sum(_proc_ticks(p) for p in pids))


def foreign_cores(a: Snapshot | None, b: Snapshot | None) -> float | None:
    """Average number of cores other processes kept busy between two snapshots (never below 0)."""
    if a is None or b is None or b.when <= a.when:
        return None
    other = (b.busy_ticks - a.busy_ticks) - (b.ours_ticks - a.ours_ticks)
    return round(max(0.0, other / _TICK / (b.when - a.when)), 2)
