"""Which process owns a run, and whether that process still lives.

A run being measured records its owner: the process id, the host name and the process's start time (on Linux,
the boot id and the start tick from /proc, so a reused pid or a reboot does not look like the same process).
A run whose owner is gone (killed with SIGKILL, a crash, a full disk) is interrupted, whatever its stored status
says, and may be resumed; a run whose owner lives is never joined by a second llamalab.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Owner:
    pid: int
    host: str
    started: str | None  # "<boot id>/<start tick>" on Linux, None where it cannot be read


def start_token(pid: int) -> str | None:
    """What identifies this incarnation of `pid`: boot id and start time in clock ticks (Linux), else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 20:
        return None
    return f"{boot}/{fields[19]}"  # field 22 of stat: starttime (fields here start at field 3)


def current() -> Owner:
    pid = os.getpid()
    return Owner(pid=pid, host=socket.gethostname(), started=start_token(pid))


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, OverflowError, ValueError):
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")  # a zombie has finished


def alive(pid: int | None, host: str | None, started: str | None) -> bool:
    """Whether the owner recorded for a run may still be running it. An owner on another host cannot be checked
    from here and counts as alive; a run without an owner (made by an older llamalab, or imported) does not."""
    if pid is None or not isinstance(pid, int) or pid <= 0:
        return False
    if host != socket.gethostname():
        return True
    if not _exists(pid):
        return False
    if started is None:
        return True
    now = start_token(pid)
    return now is None or now == started
