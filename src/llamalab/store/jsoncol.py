"""The store's `*_json` columns [pure]: the one encoder and the one decoder.

A column named `x_json` holds JSON text (`encode`: keys sorted, what JSON cannot hold as its `str`). Reading, one
convention everywhere: NULL, an empty text or text that is not JSON (a damaged or hand-edited database, or JSON nested
too deep to decode) reads as the caller's default, and a value already decoded (a row from an export file) passes
through. A row read for use has each `x_json` column decoded under the key `x` (`columns`); an export file keeps the
column names (`store.exchange`), because that file's format is the store's tables."""

from __future__ import annotations

import json
from typing import Any

SUFFIX = "_json"

# One stored row: column name → its SQLite value (int, float, str, bytes, None) or, decoded, a JSON value. The columns
# are the table's (`store.migrations`), so a row is a dict keyed by name, not one type per table.
Row = dict[str, Any]


def encode(value: Any) -> str | None:
    """The text the store writes for `value` (None stays NULL)."""
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


def decode(text: Any, default: Any = None) -> Any:
    """The value of a `*_json` column's text; `default` for NULL, empty or not-JSON text."""
    if not isinstance(text, (str, bytes)):
        return default if text is None else text
    if not text:
        return default
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # damaged, or nested deeper than Python's stack
        return default


def columns(row: Row) -> Row:
    """`row` with each `x_json` column's text decoded under the key `x`."""
    return {(k[:-len(SUFFIX)] if k.endswith(SUFFIX) else k): (decode(v) if k.endswith(SUFFIX) else v)
            for k, v in row.items()}
