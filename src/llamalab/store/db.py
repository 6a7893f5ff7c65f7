"""The results database: SQLite, WAL mode, named append-only migrations run on open.

Every finished trial is committed before the next one starts, so a crash loses at most the trial in flight.
Reports are built from here, never from a live run.

Commands that only read (runs, report, compare, export) open the file read-only (`mode=ro`) and never migrate
it: a database of an older schema is copied into memory and migrated there, so the file stays as it was.
A run records the process that measures it (`owner.py`); a run whose owner lives is never joined or resumed,
and a second run on the same database is refused while one is being measured.

Why one module of ~650 lines: it is the `Store` class, one SQLite connection and its transactions; every method
is a few lines of SQL over the same tables, and splitting the class would split its transaction rules.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from ..core.errors import ConfigError, StoreError
from ..core.records import ConfigOutcome, JsonObject, Trial
from ..logs import memory
from ..logs.records import Ledger
from . import jsoncol, runids
from . import migrations as migrationsmod
from . import owner as ownermod
from .jsoncol import Row
from .migrations import legacy_cell

if TYPE_CHECKING:
    from ..llamacpp.build import BuildArtifact

__all__ = ["LOCAL_RUN_COLUMNS", "RunExists", "Store", "legacy_cell", "with_trial_cells"]


def with_trial_cells(tables: dict[str, list[Row]], legacy: tuple[int, int] | None = None) -> dict[str, list[Row]]:
    """A run's tables (as `dump_run` or an export gives them) with every trial's workload cell filled in: trials
    from before the grid have none, and carry their run's single workload (`legacy`, else read from the runs row)."""
    trials = tables.get("trials") or []
    if all(t.get("cell_prompt_tokens") is not None and t.get("cell_output_tokens") is not None for t in trials):
        return tables
    if legacy is None:
        runs = tables.get("runs") or [{}]
        legacy = legacy_cell(runs[0].get("study_toml"))
    prompt, output = legacy
    filled = [{**t, "cell_prompt_tokens": t.get("cell_prompt_tokens") if t.get("cell_prompt_tokens") is not None
               else prompt,
               "cell_output_tokens": t.get("cell_output_tokens") if t.get("cell_output_tokens") is not None
               else output} for t in trials]
    return {**tables, "trials": filled}


class RunExists(StoreError):
    """The run to restore is already in the database (found inside the transaction that would have added it)."""


# Columns that describe a run's place in one database, not the run: not exported as facts, not compared.
LOCAL_RUN_COLUMNS = ("owner_pid", "owner_host", "owner_started", "imported")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class Store:
    def __init__(self, path: Path, *, readonly: bool = False):
        """Open the results database at `path`. Read-write (the default) creates it and applies migrations;
        `readonly` opens an existing file without writing to it, ever (see the module's docstring)."""
        self.path = Path(path)
        self.readonly = readonly
        if readonly:
            if not self.path.is_file():
                raise StoreError(f"there is no results database at {self.path}.",
                                 tip="check --db (or LLAMALAB_DATA); `llamalab demo` or `llamalab run` creates one.")
            self.db = self._open_readonly()
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot make the folder {self.path.parent} for the results database: {e.strerror}.",
                             tip="pass --db with a path in a writable folder, or set LLAMALAB_DATA.") from e
        try:
            self.db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
            self.db.row_factory = sqlite3.Row
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.DatabaseError as e:
            raise self.error(e) from e

    def _open_readonly(self) -> sqlite3.Connection:
        uri = self.path.resolve().as_uri() + "?mode=ro"
        try:
            try:
                db = sqlite3.connect(uri, uri=True, timeout=30.0, isolation_level=None)
                names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            except sqlite3.OperationalError:
                # a WAL database in a folder or on a file system this process may not write: SQLite cannot make
                # its shared-memory file, so read the file as it is (nothing can be writing it either)
                db = sqlite3.connect(uri + "&immutable=1", uri=True, timeout=30.0, isolation_level=None)
                names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            db.row_factory = sqlite3.Row
            if migrationsmod.TABLE not in names:
                db.close()
                raise StoreError(f"{self.path} is not a llamalab results database (it has no llamalab tables).",
                                 tip="check --db (or LLAMALAB_DATA); llamalab reads only databases it made.")
            applied = migrationsmod.applied(db)
            self._refuse_newer(applied)
            if migrationsmod.pending(applied):
                # an older schema: read a migrated copy in memory; the file is not touched
                mem = sqlite3.connect(":memory:", isolation_level=None)
                db.backup(mem)
                db.close()
                mem.row_factory = sqlite3.Row
                self.db = mem
                self._migrate()
                return mem
            return db
        except sqlite3.DatabaseError as e:
            raise self.error(e) from e

    def error(self, e: sqlite3.Error) -> StoreError:
        """A SQLite failure on this database, in words, with what to do."""
        text = str(e)
        low = text.lower()
        if "full" in low:
            return StoreError(f"could not write to {self.path}: the disk is full ({text}).",
                              tip="free some space (or pass --db on another disk); rerunning the same command "
                                  "resumes an unfinished run.")
        if "i/o error" in low:
            return StoreError(f"could not read or write {self.path}: {text} (a full disk, a file size limit or a "
                              "failing disk).",
                              tip="free some space or check the disk; rerunning the same command resumes an "
                                  "unfinished run.")
        if "readonly" in low or "read-only" in low:
            return StoreError(f"cannot write to {self.path}: it is read-only ({text}).",
                              tip="commands that only read (runs, report, compare, export) work on it; pass --db "
                                  "with a writable file to run or import.")
        if "malformed" in low or "not a database" in low or "corrupt" in low:
            return StoreError(f"{self.path} is damaged: {text}.",
                              tip="move it aside and pass --db with a new file; `sqlite3 FILE .recover` may save "
                                  "what is left of it.")
        if "unable to open" in low:
            return StoreError(f"cannot open {self.path}: {text}.",
                              tip="check that the file and its folder can be read (and written, to run or import), "
                                  "or pass --db with another path.")
        return StoreError(f"{self.path} is not a usable llamalab database: {text}",
                          tip="pass --db with another path, or move this file aside.")

    def check(self) -> None:
        """SQLite's quick check of every page: a damaged database is refused before a study runs into it."""
        try:
            rows = [r[0] for r in self.db.execute("PRAGMA quick_check(5)")]
        except sqlite3.DatabaseError as e:
            raise self.error(e) from e
        if rows != ["ok"]:
            raise StoreError(f"{self.path} is damaged: {'; '.join(rows)}.",
                             tip="move it aside and pass --db with a new file; `sqlite3 FILE .recover` may save "
                                 "what is left of it.")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.close()
        except sqlite3.Error:
            pass
        if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.IntegrityError):
            raise self.error(exc) from exc

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            if self.db.in_transaction:  # SQLite rolls back by itself on some errors (a full disk)
                try:
                    self.db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise
        self.db.execute("COMMIT")

    def _refuse_newer(self, applied: list[str]) -> None:
        unknown = migrationsmod.unknown(applied)
        if unknown:
            raise StoreError(
                f"{self.path} was written by a newer llamalab (it has migration(s) {', '.join(unknown)}).",
                tip="upgrade llamalab (pip install -U llamalab), or pass --db with another database file.")

    def _migrate(self) -> None:
        """Bring the schema up to date (store/migrations.py); a database from a newer llamalab is refused."""
        self._refuse_newer(migrationsmod.applied(self.db))
        migrationsmod.migrate(self.db)

    # ------------------------------------------------------------ writing

    def new_run(self, study: str, study_toml: str, study_hash: str, *, version: str,
                model: JsonObject | None = None, devices: JsonObject | None = None,
                options: JsonObject | None = None) -> str:
        """A new run owned by this process (see `begin_run`, which also refuses to start beside a live one)."""
        with self.tx() as db:
            return self._insert_run(db, study, study_toml, study_hash, version=version, model=model, devices=devices,
                                    options=options)

    def _insert_run(self, db: sqlite3.Connection, study: str, study_toml: str, study_hash: str, *, version: str,
                    model: JsonObject | None, devices: JsonObject | None, options: JsonObject | None) -> str:
        run_id = runids.new()
        me = ownermod.current()
        db.execute(
            "INSERT INTO runs (id, study, study_toml, study_hash, status, started, host, llamalab_version,"
            " model_json, devices_json, options_json, owner_pid, owner_host, owner_started)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, study, study_toml, study_hash, "running", _now(), socket.gethostname(), version,
             _j(model), _j(devices), _j(options), me.pid, me.host, me.started))
        return run_id

    def begin_run(self, study: str, study_toml: str, study_hash: str, *, version: str, resume: str | None = None,
                  fresh: bool = False, model: JsonObject | None = None,
                  devices: JsonObject | None = None, options: JsonObject | None = None) -> tuple[str, bool]:
        """The run this process will measure, claimed in one transaction: `resume` (an id or the start of one),
        else (unless `fresh`) the latest unfinished run of this study made here, else a new run. Returns
        (run id, resumed). Refused while another llamalab measures a run in this database on this host (two runs
        would share the devices and disturb each other's timings), and for a run that was imported or that
        another study made."""
        with self.tx() as db:
            self.refuse_if_busy()
            if resume:
                row = self.resumable(resume)
                run_id = row["id"]
                if row["study_hash"] != study_hash:
                    raise ConfigError(
                        f"run {run_id} is of study {row['study']!r} with other settings or another model; "
                        "resuming it with this study would mix results.",
                        tip="rerun with exactly the study file, --set overrides and --model of that run, or drop "
                            "--resume.")
            elif not fresh:
                run_id = self.unfinished_run(study_hash)
            else:
                run_id = None
            if run_id is None:
                return self._insert_run(db, study, study_toml, study_hash, version=version, model=model,
                                        devices=devices, options=options), False
            me = ownermod.current()
            db.execute("UPDATE runs SET status='running', finished=NULL, owner_pid=?, owner_host=?, owner_started=?"
                       " WHERE id=?", (me.pid, me.host, me.started, run_id))
            # configurations the previous owner was measuring when it died
            db.execute("UPDATE configs SET status='interrupted', finished=?, reason=COALESCE(reason || '; ', '')"
                       " || 'llamalab stopped while it ran (killed or crashed)' WHERE run_id=? AND status='running'",
                       (_now(), run_id))
            return run_id, True

    def resumable(self, ref: str) -> sqlite3.Row:
        """The run `ref` names, if this process may resume it: made here (not imported), with a proper id, and not
        being measured by another live llamalab."""
        row = self.run(ref)
        run_id = runids.check(row["id"], "the stored run's id")
        if row["imported"]:
            raise ConfigError(
                f"run {run_id} was imported (made on {row['host']}); an imported run is never resumed here.",
                tip="finish it on the machine that made it and export it again, or start a new run (drop --resume).")
        if row["status"] == "running" and _owner_live(row):
            raise StoreError(f"run {run_id} is being measured by llamalab (pid {row['owner_pid']}) on "
                             f"{row['owner_host']}; it cannot be resumed while that process runs.",
                             tip="wait for it or stop it first, or start a new run (drop --resume).")
        return row

    def live_runs(self) -> list[Row]:
        """Runs whose stored status is running and whose owner is a live process on this host."""
        host = socket.gethostname()
        rows = self.db.execute("SELECT id, study, started, owner_pid, owner_host, owner_started FROM runs"
                               " WHERE status='running' AND owner_host=?", (host,)).fetchall()
        return [dict(r) for r in rows if _owner_live(r)]

    def refuse_if_busy(self) -> None:
        """A StoreError while another llamalab process on this host measures a run in this database."""
        live = self.live_runs()
        if live:
            r = live[0]
            raise StoreError(
                f"another llamalab (pid {r['owner_pid']}) is measuring run {r['id']} of study {r['study']!r} in "
                f"{self.path} since {r['started']}. A second run now would share the devices with it and disturb "
                "the timings of both, so this one does not start.",
                tip=f"wait for it to finish (or stop it: kill {r['owner_pid']}), then rerun this command; "
                    "`llamalab runs` shows it as running.")

    def set_run_status(self, run_id: str, status: str) -> None:
        with self.tx() as db:
            db.execute("UPDATE runs SET status=?, finished=? WHERE id=?",
                       (status, _now() if status != "running" else None, run_id))

    def save_system(self, run_id: str, info: JsonObject) -> None:
        with self.tx() as db:
            db.execute("INSERT OR REPLACE INTO system_info VALUES (?, ?)", (run_id, _j(info)))

    def save_build(self, run_id: str, name: str, status: str, *, reason: str | None = None,
                   artifact: BuildArtifact | None = None) -> None:
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
            return _rowid(cur)

    def set_config_command(self, config_id: int, argv: list[str], env: dict[str, str], devices: JsonObject) -> None:
        with self.tx() as db:
            db.execute("UPDATE configs SET server_argv_json=?, env_json=?, devices_json=? WHERE id=?",
                       (_j(argv), _j(env), _j(devices), config_id))

    def note_config(self, config_id: int, note: str) -> None:
        """A remark on a configuration that ran (e.g. a concurrency level that could not run); kept in `reason`."""
        with self.tx() as db:
            db.execute("UPDATE configs SET reason = CASE WHEN reason IS NULL THEN ? ELSE reason || '; ' || ? END"
                       " WHERE id=?", (note, note, config_id))

    def save_nvml(self, config_id: int, nvml: JsonObject) -> None:
        with self.tx() as db:
            db.execute("UPDATE configs SET nvml_json=? WHERE id=?", (_j(nvml), config_id))

    def finish_config(self, config_id: int, status: str, reason: str | None = None,
                      load_seconds: float | None = None) -> None:
        with self.tx() as db:
            db.execute("UPDATE configs SET status=?, reason=COALESCE(?, reason),"
                       " load_seconds=COALESCE(?, load_seconds), finished=? WHERE id=?",
                       (status, reason, load_seconds, _now(), config_id))

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
                           verified: bool | None, max_loaded: int | None, steps: list[JsonObject]) -> None:
        with self.tx() as db:
            db.execute("INSERT OR REPLACE INTO context_checks VALUES (?,?,?,?,?,?,?,?)",
                       (run_id, build, setting, mode, fitted, None if verified is None else int(verified), max_loaded,
                        _j(steps)))

    def save_budget_fit(self, run_id: str, build: str, setting: str, result: JsonObject,
                        verified: bool | None = None) -> None:
        """A configuration's context within its budgets (`fit.budgetfit`), with its verifying load where made."""
        with self.tx() as db:
            db.execute("INSERT OR REPLACE INTO budget_fits VALUES (?,?,?,?,?,?,?)",
                       (run_id, build, setting, (result.get("budget") or {}).get("n_ctx"),
                        (result.get("margin") or {}).get("n_ctx"), None if verified is None else int(verified),
                        _j(result)))

    def budget_fits(self, run_id: str) -> dict[tuple[str, str], JsonObject]:
        """(build, setting) → the stored search, with `verified` (None where no load checked it)."""
        out = {}
        for r in self.db.execute("SELECT build, setting, verified, result_json FROM budget_fits WHERE run_id=?",
                                 (run_id,)):
            doc = jsoncol.decode(r["result_json"]) or {}
            verified = None if r["verified"] is None else bool(r["verified"])
            out[(r["build"], r["setting"])] = {**doc, "verified": verified}
        return out

    def save_tune(self, run_id: str, result: JsonObject, pick: JsonObject | None = None) -> None:
        """A tune's search (`result`) and what it decided (`pick`: tune/pick.py `Decision.as_dict`)."""
        with self.tx() as db:
            db.execute("INSERT OR REPLACE INTO tunes VALUES (?,?)", (run_id, _j(result)))
            if pick is not None:
                db.execute("INSERT OR REPLACE INTO tune_picks VALUES (?,?)", (run_id, _j(pick)))

    def tune(self, run_id: str) -> JsonObject | None:
        """What `llamalab tune` stored with the run (None for other runs)."""
        row = self.db.execute("SELECT result_json FROM tunes WHERE run_id=?", (run_id,)).fetchone()
        return jsoncol.decode(row[0]) if row else None

    def save_outputs(self, run_id: str, build: str, setting: str, mode: str, rep: int, result: JsonObject) -> None:
        """A configuration's reference generation (run/references.py): one mode, one repetition."""
        with self.tx() as db:
            db.execute("INSERT OR REPLACE INTO outputs VALUES (?,?,?,?,?,?)",
                       (run_id, build, setting, mode, rep, _j(result)))

    def outputs(self, run_id: str) -> list[Row]:
        """Every reference generation of the run, `result_json` decoded under `result`."""
        return self._decoded("SELECT build, setting, mode, rep, result_json FROM outputs WHERE run_id=? "
                             "ORDER BY rowid", (run_id,), "result_json")

    def save_output_logits(self, run_id: str, build: str, setting: str, baseline: str, result: JsonObject) -> None:
        """A configuration's logits against its baseline's (quality/logits.py)."""
        with self.tx() as db:
            db.execute("INSERT OR REPLACE INTO output_logits VALUES (?,?,?,?,?)",
                       (run_id, build, setting, baseline, _j(result)))

    def output_logits(self, run_id: str) -> list[Row]:
        return self._decoded("SELECT build, setting, baseline, result_json FROM output_logits WHERE run_id=? "
                             "ORDER BY rowid", (run_id,), "result_json")

    def save_crosscheck(self, run_id: str, build: str, setting: str, result: JsonObject, error: str | None) -> None:
        with self.tx() as db:
            db.execute("INSERT OR REPLACE INTO crosschecks VALUES (?,?,?,?,?)",
                       (run_id, build, setting, _j(result), error))

    # ------------------------------------------------------------ reading

    def _decoded(self, sql: str, params: tuple[object, ...], column: str) -> list[Row]:
        """Rows as dicts, with the JSON text of `column` (`x_json`) decoded under `x` (None where NULL)."""
        out = []
        for r in self.db.execute(sql, params):
            d = dict(r)
            raw = d.pop(column)
            d[column.removesuffix(jsoncol.SUFFIX)] = jsoncol.decode(raw)
            out.append(d)
        return out

    def crosschecks(self, run_id: str) -> list[Row]:
        return self._decoded("SELECT * FROM crosschecks WHERE run_id=?", (run_id,), "result_json")

    def run(self, run_id: str | None = None) -> sqlite3.Row:
        """One run by its id or the start of it (`20261129-0948`); the latest without one."""
        row: sqlite3.Row | None
        if run_id is None:
            row = self.db.execute("SELECT * FROM runs ORDER BY started DESC, rowid DESC LIMIT 1").fetchone()
            if row is None:
                raise StoreError(f"{self.path} holds no runs yet.",
                                 tip="run `llamalab demo` or `llamalab run STUDY` first.")
            return row
        runids.check_ref(run_id)  # digits, hex and '-' only: no LIKE wildcards, no paths
        row = self.db.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        if row is None:
            like: list[sqlite3.Row] = self.db.execute("SELECT * FROM runs WHERE id LIKE ? ORDER BY started DESC",
                                                      (run_id + "%",)).fetchall()
            if len(like) == 1:
                return like[0]
            if len(like) > 1:
                raise StoreError(f"{run_id!r} is the start of {len(like)} runs' ids in {self.path}.",
                                 tip="give more of the id; `llamalab runs` lists them.")
            raise StoreError(f"no run {run_id!r} in {self.path}.", tip="`llamalab runs` lists the stored runs.")
        return row

    def runs(self) -> list[Row]:
        """Every run, oldest first: id, study, status, started, finished, host, trials, live, imported. A run
        stored as running whose owner is gone (killed, crashed) is shown as interrupted, with live false."""
        rows = self.db.execute(
            "SELECT r.id, r.study, r.status, r.started, r.finished, r.host, r.imported, r.owner_pid, r.owner_host,"
            " r.owner_started, (SELECT COUNT(*) FROM trials t WHERE t.run_id = r.id) AS trials"
            " FROM runs r ORDER BY r.started, r.rowid").fetchall()
        out = []
        for r in rows:
            d = dict(r)
            pid, host, started = d.pop("owner_pid"), d.pop("owner_host"), d.pop("owner_started")
            live = d["status"] == "running" and not d["imported"] and ownermod.alive(pid, host, started)
            if d["status"] == "running" and not live:
                d["status"] = "interrupted"
            d["live"] = live
            d["imported"] = bool(d["imported"])
            out.append(d)
        return out

    def builds(self, run_id: str) -> list[Row]:
        return [dict(r) for r in self.db.execute("SELECT * FROM builds WHERE run_id=? ORDER BY rowid", (run_id,))]

    def configs(self, run_id: str) -> list[Row]:
        return self._decoded("SELECT c.*, l.ledger_json FROM configs c LEFT JOIN ledgers l ON l.config_id = c.id"
                             " WHERE c.run_id=? ORDER BY c.id", (run_id,), "ledger_json")

    def trials(self, run_id: str) -> list[Row]:
        return self._decoded("SELECT * FROM trials WHERE run_id=? ORDER BY id", (run_id,), "requests_json")

    def system(self, run_id: str) -> JsonObject | None:
        row = self.db.execute("SELECT info_json FROM system_info WHERE run_id=?", (run_id,)).fetchone()
        return jsoncol.decode(row[0]) if row else None

    def done_trials(self, run_id: str) -> set[tuple[str, str, int, int, int | None, int | None]]:
        """The keys (`Trial.key`) of the run's clean trials: build, setting, trial, concurrency and the workload
        cell's prompt and output tokens."""
        return {tuple(r) for r in self.db.execute(
            "SELECT build, setting, trial, concurrency, cell_prompt_tokens, cell_output_tokens FROM trials"
            " WHERE run_id=? AND errors = 0", (run_id,))}

    def unfinished_run(self, study_hash: str) -> str | None:
        """The latest unfinished run of this study made on this host whose owner is gone (an imported run is
        never resumed, and a run that another live llamalab measures is never joined)."""
        rows = self.db.execute("SELECT id, status, owner_pid, owner_host, owner_started FROM runs WHERE study_hash=?"
                               " AND status IN ('running','interrupted') AND host=? AND imported IS NULL"
                               " ORDER BY started DESC, rowid DESC", (study_hash, socket.gethostname())).fetchall()
        for r in rows:
            if not runids.is_run_id(r["id"]):
                continue
            if r["status"] == "running" and _owner_live(r):
                continue
            run_id: str = r["id"]
            return run_id
        return None

    # ------------------------------------------------------------ whole runs (reports, export / import)

    # The tables that hold one run, parents first (the order rows are inserted in).
    RUN_TABLES = ("runs", "system_info", "builds", "configs", "ledgers", "buffers", "trials", "crosschecks",
                  "context_checks", "tunes", "budget_fits", "tune_picks", "outputs", "output_logits")
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
        "tunes": "SELECT * FROM tunes WHERE run_id=? ORDER BY rowid",
        "budget_fits": "SELECT * FROM budget_fits WHERE run_id=? ORDER BY rowid",
        "tune_picks": "SELECT * FROM tune_picks WHERE run_id=? ORDER BY rowid",
        "outputs": "SELECT * FROM outputs WHERE run_id=? ORDER BY rowid",
        "output_logits": "SELECT * FROM output_logits WHERE run_id=? ORDER BY rowid",
    }

    def columns(self, table: str) -> list[str]:
        if table not in self.RUN_TABLES:
            raise StoreError(f"no table {table!r} in a llamalab database.")
        return [r[1] for r in self.db.execute(f"PRAGMA table_info({table})")]

    def migrations(self) -> list[str]:
        """The migrations this database records (its schema), oldest first."""
        return migrationsmod.applied(self.db)

    def has_run(self, run_id: str) -> bool:
        return self.db.execute("SELECT 1 FROM runs WHERE id=?", (run_id,)).fetchone() is not None

    def buffers(self, run_id: str) -> list[Row]:
        return [dict(r) for r in self.db.execute(self._DUMP["buffers"], (run_id,))]

    def dump_run(self, run_id: str) -> dict[str, list[Row]]:
        """Every stored row of one run, table by table, exactly as stored (JSON columns stay text)."""
        return {t: list(self.rows(t, run_id)) for t in self.RUN_TABLES}

    def rows(self, table: str, run_id: str) -> Iterator[Row]:
        """The stored rows of one table of a run, one at a time, exactly as stored (JSON columns stay text)."""
        try:
            for r in self.db.execute(self._DUMP[table], (run_id,)):
                yield dict(r)
        except sqlite3.DatabaseError as e:
            raise self.error(e) from e

    def count(self, table: str, run_id: str) -> int:
        """How many rows of `table` the run has."""
        return int(self.db.execute(f"SELECT COUNT(*) FROM ({self._DUMP[table]})", (run_id,)).fetchone()[0])

    def restore_run(self, tables: dict[str, list[Row]]) -> str:
        """Insert a run as `dump_run` gives it (from this or another database) in one transaction; returns its id
        (see `restore`)."""
        runs = tables.get("runs") or []
        if len(runs) != 1:
            raise StoreError(f"a run to restore needs exactly one runs row, not {len(runs)}.")
        run_id = runids.check(runs[0].get("id"), "the run's id")
        tables = with_trial_cells(tables)
        configs = [r.get("id") for r in tables.get("configs") or []]
        self.restore(run_id, ((t, r) for t in self.RUN_TABLES for r in tables.get(t) or []), configs)
        return run_id

    def restore(self, run_id: str, rows: Iterable[tuple[str, Row]], config_ids: Sequence[int | None]) -> None:
        """Insert a run's rows (table, row as stored), in any order of tables, in one transaction. Configuration
        ids are given anew (`config_ids`: the run's, in order, known before the rows come), ledgers, buffers and
        trials follow their configuration, trial ids are new. The run is marked imported (so it is never resumed
        here) and has no owner in this database. RunExists where the run is already here: checked inside the
        transaction, so of two processes restoring one run at once the second finds the first's."""
        runids.check(run_id, "the run's id")
        cols = {t: set(self.columns(t)) for t in self.RUN_TABLES}
        here = {"owner_pid": None, "owner_host": None, "owner_started": None, "imported": _now()}
        try:
            with self.tx() as db:
                db.execute("PRAGMA defer_foreign_keys=ON")  # a file may list trials before their configurations
                if self.has_run(run_id):
                    raise RunExists(f"run {run_id} is already in {self.path}.")
                base = max([db.execute("SELECT COALESCE(MAX(id), 0) FROM configs").fetchone()[0],
                            *[r[0] for r in db.execute("SELECT seq FROM sqlite_sequence WHERE name='configs'")]])
                ids = {old: base + 1 + i for i, old in enumerate(config_ids)}
                if len(ids) != len(config_ids):
                    raise StoreError("the run's configuration ids appear more than once; nothing was imported.")
                for t, row in rows:
                    extra = set(row) - cols.get(t, set())
                    if t not in cols or extra:
                        raise StoreError(f"table {t} of this llamalab has no column(s) {', '.join(sorted(extra))}.",
                                         tip="upgrade llamalab (pip install -U llamalab) to read this run.")
                    if t == "runs":
                        row = {**row, **here}
                    elif t == "configs":
                        row = {**row, "id": ids[row["id"]], "run_id": run_id}
                    elif t in ("ledgers", "buffers", "trials"):
                        if row.get("config_id") not in ids:
                            raise StoreError(f"a row of {t} points at a configuration that the run does not hold.")
                        row = {**row, "config_id": ids[row["config_id"]]}
                        if t == "trials":
                            row = {**{k: v for k, v in row.items() if k != "id"}, "run_id": run_id}
                    else:
                        row = {**row, "run_id": run_id}
                    _insert(db, t, row)
        except sqlite3.IntegrityError as e:
            raise StoreError(f"the run's rows contradict each other or this database ({e}); nothing was imported.",
                             tip="export the run again from the database that holds it.") from e
        except sqlite3.DatabaseError as e:
            raise self.error(e) from e


def _owner_live(row: sqlite3.Row | Row) -> bool:
    """Whether another live process measures the run of this row (this process itself does not count: a run it
    left running, e.g. in a test, is its own to resume)."""
    me = ownermod.current()
    if (row["owner_pid"], row["owner_host"], row["owner_started"]) == (me.pid, me.host, me.started):
        return False
    return ownermod.alive(row["owner_pid"], row["owner_host"], row["owner_started"])


def _insert(db: sqlite3.Connection, table: str, row: Row) -> int:
    """One row; its column names were checked against the table's (`Store.columns`) by the caller."""
    cols = list(row)
    cur = db.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                     [row[c] for c in cols])
    return _rowid(cur)


def _rowid(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT just made (SQLite sets it for every INSERT)."""
    rowid = cur.lastrowid
    assert rowid is not None, "an INSERT sets lastrowid"
    return rowid


_j = jsoncol.encode
