"""Runs that travel: one run as a versioned JSON document, and back into another database.

`export_chunks` writes every stored row of a run, table by table (JSON columns decoded, so the file reads as JSON),
as a stream of text: a run of 128,000 trials is never one string. `import_file` puts such a document into another
database under the same run id, reading it twice as a stream: once to check every row (`runrows`) before the
database is even opened, once to insert the rows in one transaction. Importing the same run again changes nothing;
a different run under the same id is refused; of two imports of one run at once, the second finds the first's.
Pure apart from the Store calls: the CLI opens the files (an `Opener` gives the file's text in pieces, from the
start, each time it is called).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from .. import __version__
from ..core.errors import ConfigError, StoreError
from ..core.records import JsonObject
from ..core.safetext import json_safe
from . import jsoncol, migrations, runrows
from .db import LOCAL_RUN_COLUMNS, RunExists, Store, legacy_cell, with_trial_cells
from .jsoncol import Row

FORMAT = "llamalab-run"
VERSION = 1
MAX_ROW = 64 << 20  # characters of one row: a row of a run llamalab stored is a few KiB (a tune's search: a few MiB)
TIP = "pass a file written by `llamalab export RUN -o FILE`, unchanged."

Opener = Callable[[], Iterable[str]]


# ---------------------------------------------------------------- JSON columns

def decode_row(row: Row) -> Row:
    """A stored row with each `*_json` column's text decoded (the column keeps its name)."""
    return {k: (jsoncol.decode(v) if k.endswith(jsoncol.SUFFIX) else v) for k, v in row.items()}


def encode_row(row: Row) -> Row:
    """The inverse of `decode_row`: `*_json` values back to the text the store writes."""
    return {k: (jsoncol.encode(v) if k.endswith(jsoncol.SUFFIX) else v) for k, v in row.items()}


def decode_tables(tables: dict[str, list[Row]]) -> dict[str, list[Row]]:
    return {t: [decode_row(r) for r in rows] for t, rows in tables.items()}


def stored_rows(store: Store, run_id: str) -> Iterator[tuple[str, Row, Row]]:
    """(table, row as stored, row with its JSON columns decoded) for every stored row of a run, parents first, each
    checked against `runrows` as it is read (runrows.Invalid at the first that is not valid; the checks between rows
    after the last): what `report`, `compare` and `export` read, in memory that does not grow with the run."""
    check = runrows.Check(run_id)
    for t in Store.RUN_TABLES:
        for raw in store.rows(t, run_id):
            row = decode_row(raw)
            check.row(t, row)
            yield t, raw, row
    check.done()


# ---------------------------------------------------------------- export

def _header(store: Store, rid: str) -> JsonObject:
    return {"format": FORMAT, "version": VERSION, "run_id": rid, "exported": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "exported_by": f"llamalab {__version__}", "schema": store.migrations()}


def _without_local_row(table: str, row: Row) -> Row:
    """A row without what describes its place in one database (the run's owner process, when it was imported)."""
    return {k: v for k, v in row.items() if k not in LOCAL_RUN_COLUMNS} if table == "runs" else row


def export_run(store: Store, run_id: str | None = None) -> JsonObject:
    """The document for one stored run (default: the latest), in memory (`export_chunks` streams it)."""
    rid = store.run(run_id)["id"]
    tables = {t: [_without_local_row(t, decode_row(r)) for r in store.rows(t, rid)] for t in Store.RUN_TABLES}
    return {**_header(store, rid), "tables": tables}


def export_chunks(store: Store, run_id: str | None = None) -> Iterator[str]:
    """The export document of one stored run (default: the latest) as pieces of text, the same bytes `dumps` makes of
    `export_run`: the header indented, then each table's rows one a line. The run is checked first, row by row (a run
    an older llamalab imported unchecked may hold NaN, which JSON cannot): a StoreError before the first piece, never
    half a document."""
    rid = store.run(run_id)["id"]
    try:
        for _ in stored_rows(store, rid):
            pass
    except runrows.Invalid as e:
        raise StoreError(f"run {rid!r} in {store.path} cannot be exported: {e.text}.",
                         tip="it was probably imported by an older llamalab from a damaged or altered file: import "
                             "a good export of it into a new database (--db).") from None
    yield from _chunks(_header(store, rid), {t: (_without_local_row(t, decode_row(r)) for r in store.rows(t, rid))
                                             for t in Store.RUN_TABLES})


def _dump(value: object, indent: int | None = None) -> str:
    """`value` as JSON: on one line (a row: json's C encoder, ten times the speed of an indented dump), or as
    `json.dumps(..., indent=1)` writes it `indent` blanks deep (the header); what would reach a terminal as a control
    (C1 controls, bidirectional overrides) escaped as \\uXXXX (`safetext.json_safe`): the same value, safe to cat."""
    if indent is None:
        return json_safe(json.dumps(value, ensure_ascii=False, allow_nan=False))
    text = json.dumps(value, indent=1, ensure_ascii=False, allow_nan=False)
    return json_safe(text.replace("\n", "\n" + " " * indent) if indent else text)


def _chunks(header: JsonObject, tables: dict[str, Iterable[Row]]) -> Iterator[str]:
    out = ["{\n"]
    for k, v in header.items():
        out.append(f" {_dump(k, 0)}: {_dump(v, 1)},\n")
    out.append(' "tables": {')
    yield "".join(out)
    names = list(tables)
    for i, t in enumerate(names):
        first = True
        yield f'\n  {_dump(t, 0)}: ['
        buf: list[str] = []
        for row in tables[t]:
            buf.append(("\n   " if first else ",\n   ") + _dump(row))  # one row a line
            first = False
            if len(buf) >= 256:
                yield "".join(buf)
                buf = []
        buf.append("]" if first else "\n  ]")
        buf.append("," if i < len(names) - 1 else "")
        yield "".join(buf)
    yield "\n }\n}\n"


def dumps(doc: JsonObject) -> str:
    return "".join(_chunks({k: v for k, v in doc.items() if k != "tables"}, doc.get("tables") or {}))


# ---------------------------------------------------------------- reading a document as a stream

class Malformed(ValueError):
    """The text is not JSON (or nests too deeply to read)."""


_WS = re.compile(r"[ \t\n\r]*")
_DELIMS = " \t\n\r,]}:"
_DECODER = json.JSONDecoder()


class _Text:
    """Text read on demand from pieces: a window that grows where a value runs past its end (to twice its size at
    each retry, so a long value costs linear time) and drops what has been read."""

    def __init__(self, pieces: Iterable[str]):
        self.it = iter(pieces)
        self.buf = ""
        self.pos = 0
        self.eof = False

    def more(self, at_least: int = 0) -> bool:
        if self.eof:
            return False
        parts = [self.buf[self.pos:]]
        size = len(parts[0])
        while True:
            try:
                piece = next(self.it)
            except StopIteration:
                self.eof = True
                break
            parts.append(piece)
            size += len(piece)
            if size >= at_least and piece:
                break
        self.buf, self.pos = "".join(parts), 0
        return True

    def peek(self) -> str:
        while True:
            blank = _WS.match(self.buf, self.pos)
            assert blank is not None  # `[ \t\n\r]*` matches everywhere, if only the empty string
            self.pos = blank.end()
            if self.pos < len(self.buf) or not self.more():
                return self.buf[self.pos:self.pos + 1]

    def take(self, ch: str, what: str) -> None:
        if self.peek() != ch:
            got = self.buf[self.pos:self.pos + 20]
            raise Malformed(f"expected {ch!r} {what} at {got!r}" if got else f"the text ends before {ch!r} {what}")
        self.pos += 1

    def value(self) -> object:
        """The next JSON value, as `json` decodes it."""
        self.peek()
        while True:
            try:
                v, end = _DECODER.raw_decode(self.buf, self.pos)
                # an object, array or string ends with its own closing character; a number or literal only where a
                # delimiter follows it (`1.` may go on as `1.5e3` in the next piece)
                if self.eof or end < len(self.buf) and (self.buf[self.pos] in '{["' or self.buf[end] in _DELIMS):
                    self.pos = end
                    return v
            except json.JSONDecodeError as e:
                # a mistake well inside the window is one (more text cannot mend it); at its end, or a string not
                # closed yet, the value may only go on in the next piece
                inside = e.pos < len(self.buf) - 16 and not e.msg.startswith("Unterminated string")
                if self.eof or inside:
                    raise Malformed(str(e)) from None
            except RecursionError:
                raise Malformed("nested too deeply") from None
            if len(self.buf) - self.pos > MAX_ROW:
                raise Malformed(f"a value longer than {MAX_ROW >> 20} MiB")
            self.more(2 * (len(self.buf) - self.pos) + 1)


# events of `scan`: ("key", NAME, value) for a top-level key but "tables"; ("tables", None, value) where "tables" is
# not an object; ("table", NAME, None) where a table starts, then ("row", NAME, row) for each of its rows, or
# ("table", NAME, value) where a table is not a list
Event = tuple[str, str | None, object]


def scan(pieces: Iterable[str]) -> Iterator[Event]:
    """A JSON object of the export's shape as events, reading `pieces` once, holding one row at a time [pure]."""
    t = _Text(pieces)
    t.take("{", "at the start")
    if t.peek() == "}":
        t.pos += 1
    else:
        while True:
            key = t.value()
            if not isinstance(key, str):
                raise Malformed(f"a key that is not a string ({key!r:.40})")
            t.take(":", f"after {key!r:.40}")
            if key != "tables":
                yield "key", key, t.value()
            elif t.peek() != "{":
                yield "tables", None, t.value()
            else:
                yield from _tables(t)
            c = t.peek()
            t.take("," if c == "," else "}", "between keys")
            if c != ",":
                break
    if t.peek():
        raise Malformed(f"extra data after the document ({t.buf[t.pos:t.pos + 20]!r})")


def _tables(t: _Text) -> Iterator[Event]:
    t.take("{", "")
    if t.peek() == "}":
        t.pos += 1
        return
    while True:
        name = t.value()
        if not isinstance(name, str):
            raise Malformed(f"a table name that is not a string ({name!r:.40})")
        t.take(":", f"after {name!r:.40}")
        if t.peek() != "[":
            yield "table", name, t.value()
        else:
            yield "table", name, None
            t.take("[", "")
            if t.peek() == "]":
                t.pos += 1
            else:
                while True:
                    yield "row", name, t.value()
                    c = t.peek()
                    t.take("," if c == "," else "]", "between rows")
                    if c != ",":
                        break
        c = t.peek()
        t.take("," if c == "," else "}", "between tables")
        if c != ",":
            return


def events_of(doc: JsonObject) -> Iterator[Event]:
    """The events `scan` gives for the text of `doc` (a document already in memory)."""
    for k, v in doc.items():
        if k != "tables":
            yield "key", k, v
        elif not isinstance(v, dict):
            yield "tables", None, v
        else:
            for name, rows in v.items():
                if not isinstance(rows, list):
                    yield "table", name, rows
                    continue
                yield "table", name, None
                for r in rows:
                    yield "row", name, r


# ---------------------------------------------------------------- import: the check

@dataclass
class Checked:
    """What the first reading of a document found: its run, the configuration ids in order, the rows per table."""
    name: str
    run_id: str
    run: Row
    config_ids: list[int]
    counts: dict[str, int]
    header: JsonObject = field(default_factory=dict)

    @property
    def legacy(self) -> tuple[int, int]:
        return legacy_cell(self.run.get("study_toml"))


def _bad(name: str, what: str, tip: str = TIP) -> ConfigError:
    return ConfigError(f"{name} {what}", tip=tip)


def check(events: Iterable[Event], name: str = "the file") -> Checked:
    """Read a document's events once and check everything before anything is written: its format, version and
    schema, that it holds one run, and every row of every table against `runrows` (types, the run id's shape,
    references between rows). A clear ConfigError for anything else. Where a row is wrong, the rest is still read
    for what says more (a document that is not an export at all, a table llamalab does not have)."""
    header: JsonObject = {}
    chk = runrows.Check()
    first_bad: str | None = None
    tables_seen = False
    run: Row | None = None
    try:
        for kind, key, value in events:
            if kind == "key":
                assert key is not None  # a top-level key's event names it
                header[key] = value
                continue
            tables_seen = True
            if kind == "tables" or (kind == "table" and key == "runs" and value is not None):
                raise _bad(name, 'holds no run (its "tables" must have exactly one row in "runs").')
            assert key is not None  # only a "tables" event has no name
            if kind == "table":
                if key not in Store.RUN_TABLES or value is not None:
                    raise _bad(name, f'is wrong: "tables.{key}" is not a list of rows of a llamalab run table.')
                continue
            if not isinstance(value, dict):
                raise _bad(name, f'is wrong: "tables.{key}" is not a list of rows of a llamalab run table.')
            if key == "runs":
                run = value
            if first_bad is None:
                try:
                    chk.row(key, value)
                except runrows.Invalid as e:
                    first_bad = e.text
            else:
                chk.counts[key] += 1
    except Malformed as e:
        raise _malformed(name, e) from None
    _check_header(header, name)
    if not tables_seen or chk.counts["runs"] != 1:
        raise _bad(name, 'holds no run (its "tables" must have exactly one row in "runs").')
    rid = header.get("run_id")
    if first_bad is None:
        first_bad = _between_rows(chk, rid)
    if first_bad is not None:
        raise _bad(name, f"is not a valid llamalab run export: {first_bad}.")
    assert run is not None
    return Checked(name, str(rid), run, chk.config_ids, dict(chk.counts), header)


def _malformed(name: str, e: Malformed) -> ConfigError:
    """The error for a document `scan` could not read."""
    text = str(e)
    if "nested too deeply" in text:
        return _bad(name, "nests its JSON too deeply to be a llamalab run export.")
    if text.startswith("a value longer than"):
        return _bad(name, f"is not a llamalab run export: it holds {text}.")
    return _bad(name, f"is not JSON ({text}).", "pass a file written by `llamalab export RUN -o FILE`.")


def _between_rows(chk: runrows.Check, rid: object) -> str | None:
    """What the checks between rows (`Check.done`) and the header's run id find wrong; None where nothing is."""
    try:
        chk.done()
        if chk.run is not None and rid != chk.run.id:
            raise runrows.Invalid(f"run_id {str(rid)[:80]} is not the id of the run in tables.runs ({chk.run.id})")
    except runrows.Invalid as e:
        return e.text
    return None


def _check_header(header: JsonObject, name: str) -> None:
    if header.get("format") != FORMAT:
        raise _bad(name, f'is not a llamalab run export (no "format": "{FORMAT}").',
                   "pass a file written by `llamalab export RUN -o FILE`; `llamalab report --format json` output is "
                   "a report, not an export.")
    v = header.get("version")
    if not isinstance(v, int) or isinstance(v, bool) or v > VERSION:
        raise _bad(name, f"is a version {v!r:.40} export; this llamalab reads up to version {VERSION}.",
                   "upgrade llamalab (pip install -U llamalab) to import it.")
    if v < 1:
        raise _bad(name, f"is a version {v} export; llamalab export versions start at 1.")
    schema = header.get("schema") or []
    if not isinstance(schema, list) or not all(isinstance(m, str) for m in schema):
        raise _bad(name, f'is wrong: "schema" must be a list of migration names, not {_short(schema)}.')
    newer = migrations.unknown(schema)
    if newer:
        raise _bad(name, f"was exported by a newer llamalab (schema {', '.join(newer)}).",
                   "upgrade llamalab (pip install -U llamalab) to import it.")


def loads(text: str, name: str = "the file") -> JsonObject:
    """Parse and check an exported document held in memory (`check`); the document."""
    check(scan([text]), name)
    doc: JsonObject = json.loads(text)  # `check` found an object
    return doc


# ---------------------------------------------------------------- import: the rows

@dataclass(frozen=True)
class ImportResult:
    run_id: str
    imported: bool  # False: the same run was already there, nothing changed
    trials: int
    configs: int
    host: str
    status: str = "finished"

    @property
    def message(self) -> str:
        if not self.imported:
            return f"run {self.run_id} is already in this database, identical; nothing to do."
        text = (f"imported run {self.run_id} from {self.host}: {self.configs} configuration(s), "
                f"{self.trials} trial(s).")
        if self.status != "finished":
            text += (f" Its status is {self.status}: it did not finish on its machine, and an imported run is never "
                     "resumed here; finish it there and export it again to bring the rest.")
        return text


def _rows(events: Iterable[Event], legacy: tuple[int, int]) -> Iterator[tuple[str, Row]]:
    """(table, row as the store writes it) for each row, trials from before the grid with their run's one cell."""
    for kind, table, row in events:
        if kind == "row":
            assert isinstance(table, str) and isinstance(row, dict)
            if table == "trials":
                row = _with_cell(row, legacy)
            yield table, encode_row(row)


def _with_cell(trial: Row, legacy: tuple[int, int]) -> Row:
    return with_trial_cells({"trials": [trial]}, legacy)["trials"][0]


def import_file(store: Store, events: Callable[[], Iterable[Event]], checked: Checked) -> ImportResult:
    """Put a checked document (`check` of the same events) into `store` under its own id, reading its events once
    more. The run already there (put there by another import a moment ago, too) is compared row by row."""
    result = ImportResult(checked.run_id, True, checked.counts.get("trials", 0), checked.counts.get("configs", 0),
                          str(checked.run.get("host")), str(checked.run.get("status")))
    try:
        store.restore(checked.run_id, _rows(events(), checked.legacy), checked.config_ids)
    except RunExists:
        why = _difference(store, checked, events)
        if why is None:
            return ImportResult(result.run_id, False, result.trials, result.configs, result.host, result.status)
        raise StoreError(f"{store.path} already holds a different run with the id {checked.run_id}: {why}.",
                         tip="import it into another database with --db, or re-export the run once it has "
                             "finished on its machine.") from None
    return result


def import_run(store: Store, doc: JsonObject) -> ImportResult:
    """Put an exported document held in memory (checked with `loads`) into `store` under its own id."""
    return import_file(store, lambda: events_of(doc), check(events_of(doc)))


# ---------------------------------------------------------------- comparing runs as stored

def canonical_row(table: str, row: Row, position: int, config_pos: Mapping[int | None, int]) -> Row:
    """A decoded row with database-local ids (configuration and trial row ids) replaced by position, and the runs
    row's database-local columns (owner, when it was imported) and empty values left out, so one run stored in two
    databases compares equal."""
    r = _without_local_row(table, dict(row))
    if table in ("configs", "trials"):
        r.pop("id", None)
        if table == "configs":
            r["position"] = position
    if "config_id" in r:
        r["config_id"] = config_pos.get(r["config_id"], r["config_id"])
    return {k: v for k, v in r.items() if v is not None}


def canonical(tables: dict[str, list[Row]]) -> dict[str, list[Row]]:
    """Every table of a run, decoded, each row `canonical_row`."""
    pos: dict[int | None, int] = {c.get("id"): i for i, c in enumerate(tables.get("configs") or [])}
    return {t: [canonical_row(t, r, i, pos) for i, r in enumerate(tables.get(t) or [])] for t in Store.RUN_TABLES}


def _difference(store: Store, checked: Checked, events: Callable[[], Iterable[Event]]) -> str | None:
    """The first way the stored run differs from the document, in words; None where they are the same run. Both are
    read as streams: the row counts first, then each table row by row."""
    rid = checked.run_id
    for t in Store.RUN_TABLES:
        here, there = store.count(t, rid), checked.counts.get(t, 0)
        if here != there:
            return f"{here} {t} row(s) here, {there} in the file"
    pos_here: dict[int | None, int] = {c["id"]: i for i, c in enumerate(store.rows("configs", rid))}
    pos_there: dict[int | None, int] = {cid: i for i, cid in enumerate(checked.config_ids)}
    stored = {t: store.rows(t, rid) for t in Store.RUN_TABLES}
    index = dict.fromkeys(Store.RUN_TABLES, 0)
    legacy = checked.legacy
    for kind, table, row in events():
        if kind != "row":
            continue
        assert isinstance(table, str) and isinstance(row, dict)
        i = index[table]
        index[table] += 1
        if table == "trials":
            row = _with_cell(row, legacy)
        x = canonical_row(table, decode_row(next(stored[table])), i, pos_here)
        y = canonical_row(table, row, i, pos_there)
        if x != y:
            k = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))[0]
            return f"{table} row {i + 1} differs in {k} ({_short(x.get(k))} here, {_short(y.get(k))} in the file)"
    return None


def _short(v: object) -> str:
    s = json.dumps(v, default=str)
    return s if len(s) <= 60 else s[:57] + "..."
