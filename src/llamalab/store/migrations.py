"""The results database's schema as code: one function per migration, applied in order, each recorded by name.

A migration is a function that takes the open connection and changes the schema (and moves data where it must),
one `db.execute` per statement. `@migration` registers it; its name is the function's without the leading `m`
(`m0008_run_owner` is recorded as `0008_run_owner`), and it must be the next number: a number used twice, a gap, or a
misspelt name stops the import of this module, so two branches that both add the same number cannot both land
unnoticed.

To add one, append at the end of this file:

    @migration
    def m0011_what_it_does(db: sqlite3.Connection) -> None:
        db.execute("ALTER TABLE configs ADD COLUMN thing TEXT")  # what the column holds

Never edit, rename or reorder a migration that has shipped: databases record the names they have applied, and a
name they hold that this list lacks makes them "newer" (refused). `migrate` runs each pending migration and its
`_migrations` row in one transaction, so a crash leaves every migration applied whole or not at all.

Databases made before migrations were code (SQL text split on ';') recorded the same names, so they are recognised
as they are and only what they lack is applied (tests/store/test_migrations.py opens such databases).
"""

from __future__ import annotations

import re
import sqlite3
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass

TABLE = "_migrations"
_NAME = re.compile(r"m(\d{4})_[a-z0-9_]+")


@dataclass(frozen=True)
class Migration:
    name: str  # as recorded in the database: "0001_initial"
    apply: Callable[[sqlite3.Connection], None]


MIGRATIONS: list[Migration] = []


def migration(fn: Callable[[sqlite3.Connection], None]) -> Callable[[sqlite3.Connection], None]:
    """Register `fn` as the next migration (see the module's docstring)."""
    m = _NAME.fullmatch(fn.__name__)
    if not m:
        raise ValueError(f"a migration's function is named m<4 digits>_<what it does>, not {fn.__name__}")
    if int(m.group(1)) != len(MIGRATIONS) + 1:
        raise ValueError(f"migration {fn.__name__} is out of order: the next migration is number "
                         f"{len(MIGRATIONS) + 1:04d}")
    MIGRATIONS.append(Migration(fn.__name__[1:], fn))
    return fn


def names() -> list[str]:
    return [m.name for m in MIGRATIONS]


def applied(db: sqlite3.Connection) -> list[str]:
    """The migrations this database records, oldest first (none for a database without the table)."""
    if not db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (TABLE,)).fetchone():
        return []
    return [r[0] for r in db.execute(f"SELECT name FROM {TABLE} ORDER BY name")]


def unknown(done: list[str]) -> list[str]:
    """Recorded migrations this llamalab does not have: the database was written by a newer one."""
    known = set(names())
    return [n for n in done if n not in known]


def pending(done: list[str]) -> list[Migration]:
    return [m for m in MIGRATIONS if m.name not in set(done)]


def migrate(db: sqlite3.Connection) -> list[str]:
    """Apply every pending migration, in order, each in its own transaction with its `_migrations` row; returns the
    names applied. `db` is in autocommit mode (isolation_level=None). The caller refuses a newer database first
    (`unknown`)."""
    db.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (name TEXT PRIMARY KEY, applied TEXT NOT NULL)")
    done = []
    for m in pending(applied(db)):
        db.execute("BEGIN IMMEDIATE")
        try:
            m.apply(db)
            db.execute(f"INSERT INTO {TABLE} VALUES (?, ?)", (m.name, time.strftime("%Y-%m-%dT%H:%M:%S%z")))
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        done.append(m.name)
    return done


def legacy_cell(study_toml: str | None) -> tuple[int, int]:
    """The one workload cell of a run stored before the grid (its study's scalar `[workload]` tokens; the
    defaults where the study file did not set them or cannot be read)."""
    try:
        wl = (tomllib.loads(study_toml or "").get("workload") or {})
    except (tomllib.TOMLDecodeError, TypeError):
        wl = {}

    def one(v: object, default: int) -> int:
        if isinstance(v, list) and len(v) == 1:
            v = v[0]
        return v if isinstance(v, int) and not isinstance(v, bool) else default

    return one(wl.get("prompt_tokens"), 256), one(wl.get("output_tokens"), 32)


# ---------------------------------------------------------------- the migrations, oldest first (append only)

@migration
def m0001_initial(db: sqlite3.Connection) -> None:
    db.execute("""
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
        )""")
    db.execute("""
        CREATE TABLE system_info (
            run_id TEXT PRIMARY KEY REFERENCES runs(id),
            info_json TEXT NOT NULL
        )""")
    db.execute("""
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
        )""")
    db.execute("""
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
        )""")
    db.execute("""
        CREATE TABLE ledgers (
            config_id INTEGER PRIMARY KEY REFERENCES configs(id),
            pipeline_parallel INTEGER,
            sched_copies INTEGER,
            n_ctx INTEGER,
            graph_splits INTEGER,
            ledger_json TEXT NOT NULL
        )""")
    db.execute("""
        CREATE TABLE buffers (
            config_id INTEGER NOT NULL REFERENCES configs(id),
            name TEXT NOT NULL,
            is_host INTEGER NOT NULL,
            model_mib REAL, kv_mib REAL, rs_mib REAL, compute_mib REAL, output_mib REAL,
            PRIMARY KEY (config_id, name)
        )""")
    db.execute("""
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
        )""")


@migration
def m0002_crosschecks(db: sqlite3.Connection) -> None:
    db.execute("""
        CREATE TABLE crosschecks (
            run_id TEXT NOT NULL REFERENCES runs(id),
            build TEXT NOT NULL,
            setting TEXT NOT NULL,
            result_json TEXT NOT NULL,
            error TEXT,
            PRIMARY KEY (run_id, build, setting)
        )""")


@migration
def m0003_trial_load(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE trials ADD COLUMN foreign_load REAL")  # cores used by other processes during the trial


@migration
def m0004_config_nvml(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE configs ADD COLUMN nvml_json TEXT")  # per GPU: NVML used MiB of the server vs the ledger


@migration
def m0005_context_checks(db: sqlite3.Connection) -> None:
    db.execute("""
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
        )""")


@migration
def m0006_build_binaries(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE builds ADD COLUMN binary_json TEXT")  # given binaries (--llama-bin): --version, backends


@migration
def m0007_trial_cells(db: sqlite3.Connection) -> None:
    """The workload grid: a trial belongs to a cell (prompt tokens × output tokens per request) as well as to a
    concurrency level, so the unique key grows by the cell. SQLite cannot change a UNIQUE constraint in place: the
    table is copied. Trials stored before this hold their run's single workload, read from its study file."""
    db.execute("""
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
        )""")
    db.execute("""
        INSERT INTO trials_0006 (id, run_id, config_id, build, setting, trial, concurrency, input_tokens, input_tps,
            output_tokens, output_tps, wall_s, aggregate_output_tps, aggregate_total_tps, errors, started,
            requests_json, foreign_load)
          SELECT id, run_id, config_id, build, setting, trial, concurrency, input_tokens, input_tps, output_tokens,
            output_tps, wall_s, aggregate_output_tps, aggregate_total_tps, errors, started, requests_json, foreign_load
          FROM trials""")
    db.execute("DROP TABLE trials")
    db.execute("ALTER TABLE trials_0006 RENAME TO trials")
    for run_id, toml_text in db.execute("SELECT id, study_toml FROM runs").fetchall():
        prompt, output = legacy_cell(toml_text)
        db.execute("UPDATE trials SET cell_prompt_tokens=?, cell_output_tokens=? WHERE run_id=?"
                   " AND cell_prompt_tokens IS NULL", (prompt, output, run_id))


@migration
def m0008_run_owner(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE runs ADD COLUMN owner_pid INTEGER")   # the llamalab process measuring the run (owner.py)
    db.execute("ALTER TABLE runs ADD COLUMN owner_host TEXT")
    db.execute("ALTER TABLE runs ADD COLUMN owner_started TEXT")  # boot id / start tick of that process
    db.execute("ALTER TABLE runs ADD COLUMN imported TEXT")       # when `llamalab import` brought it (never resumed)


@migration
def m0009_not_applicable(db: sqlite3.Connection) -> None:
    """No column changes: builds.status and configs.status may now be 'not-applicable' (an arm the rig cannot run,
    with llama.cpp's reason or llamalab's min_devices in `reason`), which is no failure. The name is what counts:
    an older llamalab, which would count such a run as failed or refuse to report it, refuses this database (and
    its exports) as one from a newer llamalab instead."""


@migration
def m0010_tunes(db: sqlite3.Connection) -> None:
    db.execute("""
        CREATE TABLE tunes (
            run_id TEXT PRIMARY KEY REFERENCES runs(id),
            result_json TEXT NOT NULL           -- `llamalab tune`: the search, its dry runs, the front (tune.py)
        )""")


@migration
def m0011_budget_fits(db: sqlite3.Connection) -> None:
    db.execute("""
        CREATE TABLE budget_fits (
            run_id TEXT NOT NULL REFERENCES runs(id),
            build TEXT NOT NULL,
            setting TEXT NOT NULL,
            budget_n_ctx INTEGER,               -- the largest context within every device's budget (dry runs)
            margin_n_ctx INTEGER,               -- the same within every budget less llama.cpp's fit margin
            verified INTEGER,                   -- budget_n_ctx loaded for real within the budgets (--max-context)
            result_json TEXT NOT NULL,          -- the search (fit/budgetfit.py) and the verifying load's step
            PRIMARY KEY (run_id, build, setting)
        )""")


@migration
def m0012_tune_picks(db: sqlite3.Connection) -> None:
    db.execute("""
        CREATE TABLE tune_picks (
            run_id TEXT PRIMARY KEY REFERENCES runs(id),
            pick_json TEXT NOT NULL             -- what the tune decided: the pick, its reason, the rule (Decision)
        )""")


@migration
def m0013_outputs(db: sqlite3.Connection) -> None:
    db.execute("""
        CREATE TABLE outputs (
            run_id TEXT NOT NULL REFERENCES runs(id),
            build TEXT NOT NULL,
            setting TEXT NOT NULL,
            mode TEXT NOT NULL,                 -- single | parallel (K requests at once)
            rep INTEGER NOT NULL,               -- 1; the baseline's 2 is its A/A
            result_json TEXT NOT NULL,          -- prompts, generated tokens, their top candidates (run/references.py)
            PRIMARY KEY (run_id, build, setting, mode, rep)
        )""")
    db.execute("""
        CREATE TABLE output_logits (
            run_id TEXT NOT NULL REFERENCES runs(id),
            build TEXT NOT NULL,
            setting TEXT NOT NULL,
            baseline TEXT NOT NULL,             -- the build whose logits these are compared with
            result_json TEXT NOT NULL,          -- llama-perplexity --kl-divergence (quality/logits.py)
            PRIMARY KEY (run_id, build, setting)
        )""")
