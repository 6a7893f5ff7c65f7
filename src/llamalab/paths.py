"""Where llamalab keeps things outside the repository."""

from __future__ import annotations

import os
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
