"""Runs that travel: one run as a versioned JSON document, and back into another database.

`export_run` gives every stored row of a run, table by table (JSON columns decoded, so the file reads as JSON);
`import_run` puts such a document into another database under the same run id. Importing the same run again
changes nothing; a different run under the same id is refused. Pure apart from the Store calls: the CLI reads
and writes the files.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from .. import __version__
from . import jsoncol, migrations, runrows
from ..errors import ConfigError, StoreError
from .db import LOCAL_RUN_COLUMNS, Store, with_trial_cells

FORMAT = "llamalab-run"
VERSION = 1


# ---------------------------------------------------------------- JSON columns

def decode_row(row: dict) -> dict:
    """A stored row with each `*_json` column's text decoded (the column keeps its name)."""
    return {k: (jsoncol.decode(v) if k.endswith(jsoncol.SUFFIX) else v) for k, v in row.items()}


def encode_row(row: dict) -> dict:
    """The inverse of `decode_row`: `*_json` values back to the text the store writes."""
    return {k: (jsoncol.encode(v) if k.endswith(jsoncol.SUFFIX) else v) for k, v in row.items()}


def decode_tables(tables: dict[str, list[dict]]) -> dict[str, list[dict]]:
    return {t: [decode_row(r) for r in rows] for t, rows in tables.items()}


# ---------------------------------------------------------------- export

def export_run(store: Store, run_id: str | None = None) -> dict:
    """The document for one stored run (default: the latest)."""
    rid = store.run(run_id)["id"]
    return {
        "format": FORMAT,
        "version": VERSION,
        "run_id": rid,
        "exported": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "exported_by": f"llamalab {__version__}",
        "schema": store.migrations(),
        "tables": _without_local(decode_tables(store.dump_run(rid))),
    }


def _without_local(tables: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """The run without what describes its place in one database (its owner process, when it was imported)."""
    return {**tables, "runs": [{k: v for k, v in r.items() if k not in LOCAL_RUN_COLUMNS} for r in tables["runs"]]}


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------- import

def loads(text: str, name: str = "the file") -> dict:
    """Parse and check an exported document; a clear ConfigError for anything else. The document is untrusted
    input: every table and column is checked against `runrows` (types, the run id's shape, references between
    rows) before anything is written."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{name} is not JSON ({e}).",
                          tip="pass a file written by `llamalab export RUN -o FILE`.") from e
    except RecursionError as e:
        raise ConfigError(f"{name} nests its JSON too deeply to be a llamalab run export.",
                          tip="pass a file written by `llamalab export RUN -o FILE`.") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ConfigError(f"{name} is not a llamalab run export (no \"format\": \"{FORMAT}\").",
                          tip="pass a file written by `llamalab export RUN -o FILE`; "
                              "`llamalab report --format json` output is a report, not an export.")
    v = doc.get("version")
    if not isinstance(v, int) or isinstance(v, bool) or v > VERSION:
        raise ConfigError(f"{name} is a version {v!r} export; this llamalab reads up to version {VERSION}.",
                          tip="upgrade llamalab (pip install -U llamalab) to import it.")
    schema = doc.get("schema") or []
    if not isinstance(schema, list) or not all(isinstance(m, str) for m in schema):
        raise ConfigError(f"{name}: \"schema\" must be a list of migration names, not {_short(schema)}.",
                          tip="pass a file written by `llamalab export RUN -o FILE`.")
    newer = migrations.unknown(schema)
    if newer:
        raise ConfigError(f"{name} was exported by a newer llamalab (schema {', '.join(newer)}).",
                          tip="upgrade llamalab (pip install -U llamalab) to import it.")
    tables = doc.get("tables")
    if not isinstance(tables, dict) or not isinstance(tables.get("runs"), list) or len(tables["runs"]) != 1:
        raise ConfigError(f"{name} holds no run (its \"tables\" must have exactly one row in \"runs\").",
                          tip="pass a file written by `llamalab export RUN -o FILE`.")
    for t, rows in tables.items():
        if t not in Store.RUN_TABLES or not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ConfigError(f"{name}: \"tables.{t}\" is not a list of rows of a llamalab run table.",
                              tip="pass a file written by `llamalab export RUN -o FILE`, unchanged.")
    try:
        runrows.Export.model_validate_json(text)
    except runrows.ValidationError as e:
        raise ConfigError(f"{name} is not a valid llamalab run export: {runrows.describe(e)}.",
                          tip="pass a file written by `llamalab export RUN -o FILE`, unchanged.") from e
    return doc


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


def import_run(store: Store, doc: dict) -> ImportResult:
    """Put an exported run (checked with `loads`) into `store` under its own id."""
    tables = with_trial_cells(doc["tables"])  # an export from before the workload grid: one cell per run
    run = tables["runs"][0]
    rid = run["id"]
    result = ImportResult(rid, True, len(tables.get("trials", [])), len(tables.get("configs", [])),
                          str(run.get("host")), str(run.get("status")))
    if store.has_run(rid):
        here = canonical(_without_local(decode_tables(store.dump_run(rid))))
        there = canonical(_without_local(tables))
        if here == there:
            return ImportResult(rid, False, result.trials, result.configs, result.host, result.status)
        raise StoreError(f"{store.path} already holds a different run with the id {rid}: {difference(here, there)}.",
                         tip="import it into another database with --db, or re-export the run once it has "
                             "finished on its machine.")
    store.restore_run({t: [encode_row(r) for r in rows] for t, rows in tables.items()})
    return result


# ---------------------------------------------------------------- comparing runs as stored

def canonical(tables: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Decoded tables with database-local ids (configuration and trial row ids) replaced by position and the runs
    row's database-local columns (owner, when it was imported) left out, so one run stored in two databases compares
    equal."""
    pos = {c.get("id"): i for i, c in enumerate(tables.get("configs") or [])}
    out: dict[str, list[dict]] = {}
    for t in Store.RUN_TABLES:
        rows = []
        for r in tables.get(t) or []:
            r = dict(r)
            if t == "runs":
                r = {k: v for k, v in r.items() if k not in LOCAL_RUN_COLUMNS}
            if t in ("configs", "trials"):
                r.pop("id", None)
                if t == "configs":
                    r["position"] = len(rows)
            if "config_id" in r:
                r["config_id"] = pos.get(r["config_id"], r["config_id"])
            rows.append({k: v for k, v in r.items() if v is not None})
        out[t] = rows
    return out


def difference(here: dict[str, list[dict]], there: dict[str, list[dict]]) -> str:
    """The first way two canonical runs differ, in words."""
    for t in Store.RUN_TABLES:
        a, b = here.get(t, []), there.get(t, [])
        if len(a) != len(b):
            return f"{len(a)} {t} row(s) here, {len(b)} in the file"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
                k = keys[0]
                return f"{t} row {i + 1} differs in {k} ({_short(x.get(k))} here, {_short(y.get(k))} in the file)"
    return "no difference"


def _short(v) -> str:
    s = json.dumps(v, default=str)
    return s if len(s) <= 60 else s[:57] + "..."
