"""The results database: SQLite, WAL mode, named append-only migrations run on open.

Every finished trial is committed before the next one starts, so a crash loses at most the trial in flight.
Reports are built from here, never from a live run.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from .errors import StoreError
from . import memory
from .ledger import Ledger
from .records import ConfigOutcome, Trial

# Append-only: never edit or reorder an entry; add a new one.
MIGRATIONS: list[tuple[str, str]] = [
    ("0001_initial", """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            study TEXT NOT NULL,
            study_toml TEXT NOT NULL,
            study_hash TEXT NOT NULL,
            status TEXT NOT NULL,               -- running | finished | interrupted | failed
            started TEXT NOT NULL,
            finished TEXT,
            host TEXT NOT NULL,
            llamalab_version TEXT NOT NULL,
            model_json TEXT,
            devices_json TEXT,
            options_json TEXT
        );
        CREATE TABLE system_info (
            run_id TEXT PRIMARY KEY REFERENCES runs(id),
            info_json TEXT NOT NULL
        );
        CREATE TABLE builds (
            run_id TEXT NOT NULL REFERENCES runs(id),
            name TEXT NOT NULL,
            status TEXT NOT NULL,               -- ok | skipped | failed
            reason TEXT,
            key TEXT,
            source_version TEXT,
            source_commit TEXT,
            source_origin TEXT,
            options_json TEXT,
            cmake_argv_json TEXT,
            build_seconds REAL,
            reused INTEGER,
            PRIMARY KEY (run_id, name)
        );
        CREATE TABLE configs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL REFERENCES runs(id),
            build TEXT NOT NULL,
            setting TEXT NOT NULL,
            pass INTEGER NOT NULL DEFAULT 0,
            status TEXT NOT NULL,               -- ok | failed | skipped
            reason TEXT,
            server_argv_json TEXT,
            env_json TEXT,
            log_path TEXT,
            devices_json TEXT,
            load_seconds REAL,
            started TEXT,
            finished TEXT
        );
        CREATE TABLE ledgers (
            config_id INTEGER PRIMARY KEY REFERENCES configs(id),
            pipeline_parallel INTEGER,
            sched_copies INTEGER,
            n_ctx INTEGER,
            graph_splits INTEGER,
            ledger_json TEXT NOT NULL
        );
        CREATE TABLE buffers (
            config_id INTEGER NOT NULL REFERENCES configs(id),
            name TEXT NOT NULL,
            is_host INTEGER NOT NULL,
            model_mib REAL, kv_mib REAL, rs_mib REAL, compute_mib REAL, output_mib REAL,
            PRIMARY KEY (config_id, name)
        );
        CREATE TABLE trials (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL REFERENCES runs(id),
            config_id INTEGER NOT NULL REFERENCES configs(id),
            build TEXT NOT NULL,
            setting TEXT NOT NULL,
            trial INTEGER NOT NULL,
            concurrency INTEGER NOT NULL,
            input_tokens INTEGER, input_tps REAL,
            output_tokens INTEGER, output_tps REAL,
            wall_s REAL, aggregate_output_tps REAL, aggregate_total_tps REAL,
            errors INTEGER NOT NULL DEFAULT 0,
            started REAL,
            requests_json TEXT NOT NULL,
            UNIQUE (run_id, build, setting, trial, concurrency)
        );
    """),
    ("0002_crosschecks", """
        CREATE TABLE crosschecks (
            run_id TEXT NOT NULL REFERENCES runs(id),
            build TEXT NOT NULL,
            setting TEXT NOT NULL,
            result_json TEXT NOT NULL,
            error TEXT,
            PRIMARY KEY (run_id, build, setting)
        );
    """),
    ("0003_trial_load", """
        ALTER TABLE trials ADD COLUMN foreign_load REAL;  -- cores used by other processes during the trial
    """),
    ("0004_config_nvml", """
        ALTER TABLE configs ADD COLUMN nvml_json TEXT;  -- per GPU: NVML used MiB of the server vs the ledger
    """),
    ("0005_context_checks", """
        CREATE TABLE context_checks (
            run_id TEXT NOT NULL REFERENCES runs(id),
            build TEXT NOT NULL,
            setting TEXT NOT NULL,
            mode TEXT NOT NULL,                 -- verify | search
            fitted_n_ctx INTEGER,
            verified INTEGER,                   -- the fitted context loaded (and fit the budgets)
            max_loaded_n_ctx INTEGER,           -- the largest context that loaded (search)
            steps_json TEXT NOT NULL,           -- every probe: n_ctx, loaded, per-device MiB, reason
            PRIMARY KEY (run_id, build, setting)
        );
    """),
    ("0006_build_binaries", """
        ALTER TABLE builds ADD COLUMN binary_json TEXT;  -- given binaries (--llama-bin): --version, backends, files
    """),
    # The workload grid: a trial belongs to a cell (prompt tokens × output tokens per request) as well as to a
    # concurrency level, so the unique key grows by the cell. SQLite cannot change a UNIQUE constraint in place:
    # the table is copied. Trials stored before this hold the run's single workload, read from its study file.
    ("0007_trial_cells", lambda db: _trial_cells(db)),
]

_TRIALS_0006 = """
    CREATE TABLE trials_0006 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL REFERENCES runs(id),
        config_id INTEGER NOT NULL REFERENCES configs(id),
        build TEXT NOT NULL,
        setting TEXT NOT NULL,
        trial INTEGER NOT NULL,
        concurrency INTEGER NOT NULL,
        input_tokens INTEGER, input_tps REAL,
        output_tokens INTEGER, output_tps REAL,
        wall_s REAL, aggregate_output_tps REAL, aggregate_total_tps REAL,
        errors INTEGER NOT NULL DEFAULT 0,
        started REAL,
        requests_json TEXT NOT NULL,
        foreign_load REAL,
        cell_prompt_tokens INTEGER,             -- prompt tokens each request asked for (the workload cell)
        cell_output_tokens INTEGER,             -- output tokens each request asked for
        UNIQUE (run_id, build, setting, trial, concurrency, cell_prompt_tokens, cell_output_tokens)
    );
    INSERT INTO trials_0006 (id, run_id, config_id, build, setting, trial, concurrency, input_tokens, input_tps,
        output_tokens, output_tps, wall_s, aggregate_output_tps, aggregate_total_tps, errors, started, requests_json,
        foreign_load)
      SELECT id, run_id, config_id, build, setting, trial, concurrency, input_tokens, input_tps, output_tokens,
        output_tps, wall_s, aggregate_output_tps, aggregate_total_tps, errors, started, requests_json, foreign_load
      FROM trials;
    DROP TABLE trials;
    ALTER TABLE trials_0006 RENAME TO trials
"""


def _trial_cells(db: sqlite3.Connection) -> None:
    for stmt in _TRIALS_0006.split(";"):
        if stmt.strip():
            db.execute(stmt)
    for run_id, toml_text in db.execute("SELECT id, study_toml FROM runs").fetchall():
        prompt, output = legacy_cell(toml_text)
        db.execute("UPDATE trials SET cell_prompt_tokens=?, cell_output_tokens=? WHERE run_id=?"
                   " AND cell_prompt_tokens IS NULL", (prompt, output, run_id))


def legacy_cell(study_toml: str | None) -> tuple[int, int]:
    """The one workload cell of a run stored before the grid (its study's scalar `[workload]` tokens; the
    defaults where the study file did not set them or cannot be read)."""
    import tomllib

    try:
        wl = (tomllib.loads(study_toml or "").get("workload") or {})
    except (tomllib.TOMLDecodeError, TypeError):
        wl = {}

    def one(v, default: int) -> int:
        if isinstance(v, list) and len(v) == 1:
            v = v[0]
        return v if isinstance(v, int) and not isinstance(v, bool) else default

    return one(wl.get("prompt_tokens"), 256), one(wl.get("output_tokens"), 32)


def with_trial_cells(tables: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """A run's tables (as `dump_run` or an export gives them) with every trial's workload cell filled in: trials
    from before the grid have none, and carry their run's single workload."""
    trials = tables.get("trials") or []
    if all(t.get("cell_prompt_tokens") is not None and t.get("cell_output_tokens") is not None for t in trials):
        return tables
    runs = tables.get("runs") or [{}]
    prompt, output = legacy_cell(runs[0].get("study_toml"))
    filled = [{**t, "cell_prompt_tokens": t.get("cell_prompt_tokens") if t.get("cell_prompt_tokens") is not None
               else prompt,
               "cell_output_tokens": t.get("cell_output_tokens") if t.get("cell_output_tokens") is not None
               else output} for t in trials]
    return {**tables, "trials": filled}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class Store:
    def __init__(self, path: Path, *, create: bool = True):
        self.path = Path(path)
        if not create and not self.path.is_file():
            raise StoreError(f"there is no results database at {self.path}.",
                             tip="check --db (or LLAMALAB_DATA); `llamalab demo` or `llamalab run` creates one.")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
            self.db.row_factory = sqlite3.Row
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} is not a usable llamalab database: {e}",
                             tip="pass --db with another path, or move this file aside.") from e

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _migrate(self) -> None:
        self.db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied TEXT NOT NULL)")
        applied = [r[0] for r in self.db.execute("SELECT name FROM _migrations ORDER BY name")]
        known = [name for name, _ in MIGRATIONS]
        unknown = [a for a in applied if a not in known]
        if unknown:
            raise StoreError(
                f"{self.path} was written by a newer llamalab (it has migration(s) {', '.join(unknown)}).",
                tip="upgrade llamalab (pip install -U llamalab), or pass --db with another database file.")
        for name, sql in MIGRATIONS:
            if name in applied:
                continue
            with self.tx() as db:
                if callable(sql):  # a migration that also moves data
                    sql(db)
                else:
                    for stmt in sql.split(";"):
                        if stmt.strip():
                            db.execute(stmt)
                db.execute("INSERT INTO _migrations VALUES (?, ?)", (name, _now()))

    # ------------------------------------------------------------ writing

    def new_run(self, study: str, study_toml: str, study_hash: str, *, version: str,
                model: dict | None = None, devices: dict | None = None, options: dict | None = None) -> str:
        run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        with self.tx() as db:
            db.execute(
                "INSERT INTO runs (id, study, study_toml, study_hash, status, started, host, llamalab_version,"
                " model_json, devices_json, options_json) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, study, study_toml, study_hash, "running", _now(), socket.gethostname(), version,
                 _j(model), _j(devices), _j(options)))
        return run_id

    def set_run_status(self, run_id: str, status: str) -> None:
        with self.tx() as db:
            db.execute("UPDATE runs SET status=?, finished=? WHERE id=?",
                       (status, _now() if status != "running" else None, run_id))

    def update_run(self, run_id: str, *, model: dict | None = None, devices: dict | None = None) -> None:
        with self.tx() as db:
            if model is not None:
                db.execute("UPDATE runs SET model_json=? WHERE id=?", (_j(model), run_id))
            if devices is not None:
                db.execute("UPDATE runs SET devices_json=? WHERE id=?", (_j(devices), run_id))

    def save_system(self, run_id: str, info: dict) -> None:
        with self.tx() as db:
            db.execute("INSERT OR REPLACE INTO system_info VALUES (?, ?)", (run_id, _j(info)))

    def save_build(self, run_id: str, name: str, status: str, *, reason: str | None = None,
                   artifact=None) -> None:
        a = artifact
        with self.tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO builds (run_id, name, status, reason, key, source_version, source_commit,"
                " source_origin, options_json, cmake_argv_json, build_seconds, reused, binary_json)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, name, status, reason,
                 a.key if a else None, a.source.version if a else None, a.source.commit if a else None,
                 a.source.origin if a else None, _j(a.options) if a else None,
                 _j(list(a.cmake_argv)) if a else None, a.build_seconds if a else None,
                 int(a.reused) if a else None, _j(a.given) if a else None))

    def start_config(self, run_id: str, outcome: ConfigOutcome, pass_no: int = 0) -> int:
        with self.tx() as db:
            cur = db.execute(
                "INSERT INTO configs (run_id, build, setting, pass, status, reason, server_argv_json, env_json,"
                " log_path, load_seconds, started) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, outcome.build, outcome.setting, pass_no, outcome.status, outcome.reason,
                 _j(list(outcome.server_argv)), _j(outcome.env), outcome.log_path, outcome.load_seconds, _now()))
            return int(cur.lastrowid)

    def set_config_command(self, config_id: int, argv: list[str], env: dict[str, str], devices: dict) -> None:
        with self.tx() as db:
            db.execute("UPDATE configs SET server_argv_json=?, env_json=?, devices_json=? WHERE id=?",
                       (_j(argv), _j(env), _j(devices), config_id))

    def note_config(self, config_id: int, note: str) -> None:
        """A remark on a configuration that ran (e.g. a concurrency level that could not run); kept in `reason`."""
        with self.tx() as db:
            db.execute("UPDATE configs SET reason = CASE WHEN reason IS NULL THEN ? ELSE reason || '; ' || ? END"
                       " WHERE id=?", (note, note, config_id))

    def save_nvml(self, config_id: int, nvml: dict) -> None:
        with self.tx() as db:
            db.execute("UPDATE configs SET nvml_json=? WHERE id=?", (_j(nvml), config_id))

    def finish_config(self, config_id: int, status: str, reason: str | None = None,
                      load_seconds: float | None = None) -> None:
        with self.tx() as db:
            db.execute("UPDATE configs SET status=?, reason=COALESCE(?, reason), load_seconds=COALESCE(?, load_seconds),"
                       " finished=? WHERE id=?", (status, reason, load_seconds, _now(), config_id))

    def save_ledger(self, config_id: int, led: Ledger) -> None:
        with self.tx() as db:
            db.execute("INSERT OR REPLACE INTO ledgers VALUES (?,?,?,?,?,?)",
                       (config_id, None if led.pipeline_parallel is None else int(led.pipeline_parallel),
                        led.sched_copies, led.n_ctx, led.graph_splits,
                        json.dumps(memory.ledger_record(led), default=str)))  # not sorted: device order is the log's
            db.execute("DELETE FROM buffers WHERE config_id=?", (config_id,))
            for is_host, table in ((0, led.devices), (1, led.host)):
                for name, b in table.items():
                    db.execute("INSERT INTO buffers VALUES (?,?,?,?,?,?,?,?)",
                               (config_id, name, is_host, b.model_mib, b.kv_mib, b.rs_mib, b.compute_mib,
                                b.output_mib))

    def save_trial(self, run_id: str, config_id: int, t: Trial) -> None:
        """Store a finished trial. A trial stored earlier with failed requests (a fault) may be replaced by a
        clean repeat on resume; a clean trial is never stored twice."""
        with self.tx() as db:
            db.execute("DELETE FROM trials WHERE run_id=? AND build=? AND setting=? AND trial=? AND concurrency=?"
                       " AND cell_prompt_tokens IS ? AND cell_output_tokens IS ? AND errors > 0",
                       (run_id, t.build, t.setting, t.trial, t.concurrency, t.cell_prompt_tokens,
                        t.cell_output_tokens))
            db.execute(
                "INSERT INTO trials (run_id, config_id, build, setting, trial, concurrency, input_tokens, input_tps,"
                " output_tokens, output_tps, wall_s, aggregate_output_tps, aggregate_total_tps, errors, started,"
                " requests_json, foreign_load, cell_prompt_tokens, cell_output_tokens)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, config_id, t.build, t.setting, t.trial, t.concurrency, t.input_tokens, t.input_tps,
                 t.output_tokens, t.output_tps, t.wall_s, t.aggregate_output_tps, t.aggregate_total_tps,
                 t.errors, t.started, _j([asdict(r) for r in t.requests]), t.foreign_load, t.cell_prompt_tokens,
                 t.cell_output_tokens))

    def save_context_check(self, run_id: str, build: str, setting: str, mode: str, fitted: int | None,
                           verified: bool | None, max_loaded: int | None, steps: list[dict]) -> None:
        with self.tx() as db:
            db.execute("INSERT OR REPLACE INTO context_checks VALUES (?,?,?,?,?,?,?,?)",
                       (run_id, build, setting, mode, fitted, None if verified is None else int(verified), max_loaded,
                        _j(steps)))

    def save_crosscheck(self, run_id: str, build: str, setting: str, result: dict, error: str | None) -> None:
        with self.tx() as db:
            db.execute("INSERT OR REPLACE INTO crosschecks VALUES (?,?,?,?,?)",
                       (run_id, build, setting, _j(result), error))

    # ------------------------------------------------------------ reading

    def _decoded(self, sql: str, params: tuple, column: str) -> list[dict]:
        """Rows as dicts, with the JSON text of `column` (`x_json`) decoded under `x` (None where NULL)."""
        out = []
        for r in self.db.execute(sql, params):
            d = dict(r)
            raw = d.pop(column)
            d[column.removesuffix("_json")] = json.loads(raw) if raw else None
            out.append(d)
        return out

    def crosschecks(self, run_id: str) -> list[dict]:
        return self._decoded("SELECT * FROM crosschecks WHERE run_id=?", (run_id,), "result_json")

    def run(self, run_id: str | None = None) -> sqlite3.Row:
        if run_id is None:
            row = self.db.execute("SELECT * FROM runs ORDER BY started DESC, rowid DESC LIMIT 1").fetchone()
            if row is None:
                raise StoreError(f"{self.path} holds no runs yet.", tip="run `llamalab demo` or `llamalab run STUDY` first.")
            return row
        row = self.db.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        if row is None:
            like = self.db.execute("SELECT * FROM runs WHERE id LIKE ? ORDER BY started DESC", (run_id + "%",)).fetchall()
            if len(like) == 1:
                return like[0]
            raise StoreError(f"no run {run_id!r} in {self.path}.", tip="`llamalab runs` lists the stored runs.")
        return row

    def runs(self) -> list[dict]:
        rows = self.db.execute(
            "SELECT r.id, r.study, r.status, r.started, r.finished, r.host,"
            " (SELECT COUNT(*) FROM trials t WHERE t.run_id = r.id) AS trials FROM runs r ORDER BY r.started, r.rowid"
        ).fetchall()
        return [dict(r) for r in rows]

    def builds(self, run_id: str) -> list[dict]:
        return [dict(r) for r in self.db.execute("SELECT * FROM builds WHERE run_id=? ORDER BY rowid", (run_id,))]

    def configs(self, run_id: str) -> list[dict]:
        return self._decoded("SELECT c.*, l.ledger_json FROM configs c LEFT JOIN ledgers l ON l.config_id = c.id"
                             " WHERE c.run_id=? ORDER BY c.id", (run_id,), "ledger_json")

    def trials(self, run_id: str) -> list[dict]:
        return self._decoded("SELECT * FROM trials WHERE run_id=? ORDER BY id", (run_id,), "requests_json")

    def system(self, run_id: str) -> dict | None:
        row = self.db.execute("SELECT info_json FROM system_info WHERE run_id=?", (run_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def done_trials(self, run_id: str) -> set[tuple[str, str, int, int, int | None, int | None]]:
        """The keys (`Trial.key`) of the run's clean trials: build, setting, trial, concurrency and the workload
        cell's prompt and output tokens."""
        return {tuple(r) for r in self.db.execute(
            "SELECT build, setting, trial, concurrency, cell_prompt_tokens, cell_output_tokens FROM trials"
            " WHERE run_id=? AND errors = 0", (run_id,))}

    def unfinished_run(self, study_hash: str) -> str | None:
        """The latest unfinished run of this study made on this host (an imported run from another rig is
        never resumed here by default)."""
        row = self.db.execute("SELECT id FROM runs WHERE study_hash=? AND status IN ('running','interrupted')"
                              " AND host=? ORDER BY started DESC LIMIT 1", (study_hash, socket.gethostname())).fetchone()
        return row[0] if row else None

    # ------------------------------------------------------------ whole runs (reports, export / import)

    # The tables that hold one run, parents first (the order rows are inserted in).
    RUN_TABLES = ("runs", "system_info", "builds", "configs", "ledgers", "buffers", "trials", "crosschecks",
                  "context_checks")
    _DUMP = {
        "runs": "SELECT * FROM runs WHERE id=? ORDER BY rowid",
        "system_info": "SELECT * FROM system_info WHERE run_id=? ORDER BY rowid",
        "builds": "SELECT * FROM builds WHERE run_id=? ORDER BY rowid",
        "configs": "SELECT * FROM configs WHERE run_id=? ORDER BY id",
        "ledgers": "SELECT l.* FROM ledgers l JOIN configs c ON c.id = l.config_id WHERE c.run_id=?"
                   " ORDER BY l.config_id",
        "buffers": "SELECT b.* FROM buffers b JOIN configs c ON c.id = b.config_id WHERE c.run_id=?"
                   " ORDER BY b.config_id, b.rowid",
        "trials": "SELECT * FROM trials WHERE run_id=? ORDER BY id",
        "crosschecks": "SELECT * FROM crosschecks WHERE run_id=? ORDER BY rowid",
        "context_checks": "SELECT * FROM context_checks WHERE run_id=? ORDER BY rowid",
    }

    def columns(self, table: str) -> list[str]:
        if table not in self.RUN_TABLES:
            raise StoreError(f"no table {table!r} in a llamalab database.")
        return [r[1] for r in self.db.execute(f"PRAGMA table_info({table})")]

    def migrations(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT name FROM _migrations ORDER BY name")]

    def has_run(self, run_id: str) -> bool:
        return self.db.execute("SELECT 1 FROM runs WHERE id=?", (run_id,)).fetchone() is not None

    def buffers(self, run_id: str) -> list[dict]:
        return [dict(r) for r in self.db.execute(self._DUMP["buffers"], (run_id,))]

    def dump_run(self, run_id: str) -> dict[str, list[dict]]:
        """Every stored row of one run, table by table, exactly as stored (JSON columns stay text)."""
        return {t: [dict(r) for r in self.db.execute(self._DUMP[t], (run_id,))] for t in self.RUN_TABLES}

    def restore_run(self, tables: dict[str, list[dict]]) -> str:
        """Insert a run as `dump_run` gives it (from this or another database) in one transaction; returns its id.
        Config and trial ids are given anew; ledgers, buffers and trials follow their configuration."""
        runs = tables.get("runs") or []
        if len(runs) != 1:
            raise StoreError(f"a run to restore needs exactly one runs row, not {len(runs)}.")
        tables = with_trial_cells(tables)
        run_id = runs[0]["id"]
        if self.has_run(run_id):
            raise StoreError(f"run {run_id} is already in {self.path}.")
        for t in self.RUN_TABLES:
            extra = {k for row in tables.get(t) or [] for k in row} - set(self.columns(t))
            if extra:
                raise StoreError(f"table {t} of this llamalab has no column(s) {', '.join(sorted(extra))}.",
                                 tip="upgrade llamalab (pip install -U llamalab) to read this run.")

        def insert(db: sqlite3.Connection, table: str, row: dict) -> int:
            cols = list(row)
            cur = db.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                             [row[c] for c in cols])
            return int(cur.lastrowid)

        ids: dict[int, int] = {}
        with self.tx() as db:
            for t in ("runs", "system_info", "builds"):
                for row in tables.get(t) or []:
                    insert(db, t, {**row, **({"run_id": run_id} if t != "runs" else {})})
            for row in tables.get("configs") or []:
                ids[row["id"]] = insert(db, "configs", {**{k: v for k, v in row.items() if k != "id"},
                                                        "run_id": run_id})
            for t in ("ledgers", "buffers"):
                for row in tables.get(t) or []:
                    insert(db, t, {**row, "config_id": ids[row["config_id"]]})
            for row in tables.get("trials") or []:
                insert(db, "trials", {**{k: v for k, v in row.items() if k != "id"}, "run_id": run_id,
                                      "config_id": ids[row["config_id"]]})
            for t in ("crosschecks", "context_checks"):
                for row in tables.get(t) or []:
                    insert(db, t, {**row, "run_id": run_id})
        return run_id


def _j(v) -> str | None:
    return None if v is None else json.dumps(v, sort_keys=True, default=str)
