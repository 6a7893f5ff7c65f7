"""CMake's truth rule for option values [pure]: the one place llamalab reads `ON`/`OFF` the way CMake does."""

from __future__ import annotations

import re

_TRUE_WORDS = frozenset({"ON", "YES", "TRUE", "Y"})
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def cmake_true(value: object) -> bool:
    """Whether CMake reads `value` as true: ON, YES, TRUE, Y (any case) or a non-zero number (`1`, `2`, `0.5`); a
    bool as itself. Everything else is false: OFF, NO, FALSE, N, IGNORE, 0, NOTFOUND, `*-NOTFOUND`, the empty
    string and any other word (a variable's name, which an option value never is)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip()
    if text.upper() in _TRUE_WORDS:
        return True
    return bool(_NUMBER.fullmatch(text)) and float(text) != 0
