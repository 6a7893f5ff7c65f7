"""Where llamalab keeps things outside the repository."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def cache_home() -> Path:
    """Sources, builds and synthetic models: `$LLAMALAB_HOME`, else `~/.cache/llamalab`."""
    env = os.environ.get("LLAMALAB_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "llamalab"


def data_home() -> Path:
    """Results database and run folders: `$LLAMALAB_DATA`, else `~/.local/share/llamalab`."""
    env = os.environ.get("LLAMALAB_DATA")
    return Path(env).expanduser() if env else Path.home() / ".local" / "share" / "llamalab"


def default_db() -> Path:
    return data_home() / "results.db"


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock on `path` (made with its folder if missing), so two llamalab processes never build one
    tree or assemble one model file at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
