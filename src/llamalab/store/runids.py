"""Run ids: the one shape llamalab gives them, checked wherever an id comes from outside (pure).

A run id is `YYYYmmdd-HHMMSS-xxxxxx` (six lower-case hex digits), e.g. `20261129-094846-c8ccf3`. Ids name folders
(`runs/<id>/`) and files (`<id>-compute.png`), so one taken from an imported file or the command line must be
exactly that shape and nothing else: no `/`, no `..`, no absolute path.
"""

from __future__ import annotations

import re
import time
import uuid

from ..core.errors import ConfigError

RUN_ID = re.compile(r"\A[0-9]{8}-[0-9]{6}-[0-9a-f]{6}\Z")
# A leading part of an id, as `llamalab report 20261129-0948` accepts it (only digits, '-' and hex, in place).
_PREFIX = re.compile(r"\A[0-9]{1,8}(?:-[0-9]{0,6}(?:-[0-9a-f]{0,6})?)?\Z")
EXAMPLE = "20261129-094846-c8ccf3"


def new() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def is_run_id(value: object) -> bool:
    return isinstance(value, str) and RUN_ID.match(value) is not None


def check(value: object, where: str = "run id") -> str:
    """`value` if it is a whole run id; a ConfigError naming `where` otherwise."""
    if not is_run_id(value):
        raise ConfigError(f"{where} {_show(value)} is not a llamalab run id (they look like {EXAMPLE}).",
                          tip="`llamalab runs` lists the stored runs and their ids.")
    return value  # type: ignore[return-value]


def check_ref(value: str, where: str = "run id") -> str:
    """A run id or a leading part of one, as a command line gives it."""
    if not isinstance(value, str) or not (RUN_ID.match(value) or _PREFIX.match(value)):
        raise ConfigError(f"{where} {_show(value)} is not a llamalab run id or the start of one "
                          f"(they look like {EXAMPLE}).",
                          tip="`llamalab runs` lists the stored runs and their ids.")
    return value


def _show(value: object) -> str:
    s = repr(value)
    return s if len(s) <= 80 else s[:77] + "..."
