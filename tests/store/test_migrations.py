"""Migrations as code (store/migrations.py): databases made by the older runner, which split SQL text on ';', are
recognised by the names they recorded and only what they lack is applied; the schema the functions build is the one
that runner built; registration refuses a migration out of order; a failing migration leaves nothing behind.

The databases in tests/fixtures/databases were made by the store code of commits 07bba02 and ba736bf (make.py
there)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from llamalab.core.errors import StoreError
from llamalab.report import data as rdata
from llamalab.store import migrations
from llamalab.store.db import Store
from testpaths import FIXTURES

OLD = FIXTURES / "databases"
NAMES_0008 = ["0001_initial", "0002_crosschecks", "0003_trial_load", "0004_config_nvml", "0005_context_checks",
              "0006_build_binaries", "0007_trial_cells", "0008_run_owner"]
GRID_RUN = "20261201-060532-ab7ce2"    # tests/fixtures/runs/demo-grid.json, in v0008.db
BUDGET_RUN = "20261129-094846-c8ccf3"  # tests/fixtures/runs/demo-budget-concurrency.json, in v0004.db


def copy(name: str, tmp_path: Path) -> Path:
    dest = tmp_path / name
    shutil.copyfile(OLD / name, dest)
    return dest


def recorded(path: Path) -> list[tuple[str, str]]:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT name, applied FROM _migrations ORDER BY name").fetchall()
    finally:
        con.close()


def schema(path: Path) -> dict[str, str]:
    """Every table and index as SQLite keeps it, blanks collapsed (the text of each CREATE, with the columns that
    ALTER TABLE added)."""
    con = sqlite3.connect(path)
    try:
        return {name: " ".join(sql.split()) for name, sql in
                con.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")}
    finally:
        con.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_migrations_keep_the_names_older_databases_recorded():
    assert migrations.names()[:8] == NAMES_0008
    assert [n for n, _ in recorded(OLD / "v0008.db")] == NAMES_0008


def test_a_database_the_old_runner_fully_migrated_is_not_migrated_again(tmp_path):
    db = copy("v0008.db", tmp_path)
    before_rows, before_schema = recorded(db), schema(db)
    with Store(db) as s:
        assert s.migrations() == migrations.names()  # only the migrations after 0008 were applied
        tables = s.dump_run(GRID_RUN)
    assert recorded(db)[:8] == before_rows  # the same rows, applied times unchanged: nothing ran twice
    after = schema(db)
    assert {k: after[k] for k in before_schema} == before_schema  # what 0001-0008 made is as the old runner left it
    doc = json.loads((FIXTURES / "runs" / "demo-grid.json").read_text())
    assert len(tables["trials"]) == len(doc["tables"]["trials"]) == 144
    assert sorted(t["output_tps"] for t in tables["trials"]) == sorted(t["output_tps"] for t in doc["tables"]["trials"])


def test_a_database_the_old_runner_left_at_0004_gets_only_what_it_lacks(tmp_path):
    db = copy("v0004.db", tmp_path)
    old_rows = recorded(db)
    assert [n for n, _ in old_rows] == NAMES_0008[:4]
    with Store(db) as s:
        assert s.migrations() == migrations.names()
        trials = s.trials(BUDGET_RUN)
        run = s.run(BUDGET_RUN)
    assert recorded(db)[:4] == old_rows  # the four it had keep their rows
    assert len(trials) == 48 and {(t["cell_prompt_tokens"], t["cell_output_tokens"]) for t in trials} == {(256, 32)}
    assert run["owner_pid"] is None and run["imported"] is None  # 0008's columns, empty for an old run
    # the schema it ends with is the one a new database gets
    fresh = tmp_path / "fresh.db"
    Store(fresh).close()
    assert schema(db) == schema(fresh)


def test_the_functions_build_the_schema_the_old_runner_built(tmp_path):
    """A new database has, table by table, the CREATE text (blanks aside) of a database the old runner made."""
    fresh = tmp_path / "fresh.db"
    Store(fresh).close()
    new = schema(fresh)
    old = schema(OLD / "v0008.db")
    assert {k: new[k] for k in old} == old
    assert "cell_prompt_tokens INTEGER, -- prompt tokens each request asked for" in old["trials"]


def test_the_schema_of_the_last_sql_text_runner_is_rebuilt_exactly(tmp_path):
    """v0010.db: a new database made by the last llamalab whose migrations were SQL text (ten of them). A new one
    made now has every table it has, with the same CREATE text; opening it changes nothing."""
    fresh = tmp_path / "fresh.db"
    Store(fresh).close()
    old, new = schema(OLD / "v0010.db"), schema(fresh)
    assert {k: new[k] for k in old} == old and "tunes" in old
    db = copy("v0010.db", tmp_path)
    before = recorded(db)
    Store(db).close()
    assert recorded(db)[:10] == before and [n for n, _ in before] == [*NAMES_0008, "0009_not_applicable",
                                                                      "0010_tunes"]


def test_a_read_only_open_of_an_old_database_migrates_a_copy_in_memory(tmp_path):
    db = copy("v0004.db", tmp_path)
    before = digest(db)
    with Store(db, readonly=True) as s:
        assert s.migrations() == migrations.names()
        data = rdata.load(s, BUDGET_RUN)
        assert len(data.trials) == 48
    assert digest(db) == before and recorded(db)[-1][0] == "0004_config_nvml"


def test_a_read_only_open_of_a_current_database_reads_the_file(tmp_path):
    db = copy("v0008.db", tmp_path)
    Store(db).close()  # brought up to this llamalab's schema
    with Store(db, readonly=True) as s:
        assert s.db.execute("PRAGMA database_list").fetchone()[2] == str(db.resolve())


def test_registration_refuses_a_gap_a_repeat_or_a_bad_name(monkeypatch):
    monkeypatch.setattr(migrations, "MIGRATIONS", list(migrations.MIGRATIONS))
    n = len(migrations.MIGRATIONS)

    def named(name):
        def fn(db):
            pass
        fn.__name__ = name
        return fn

    with pytest.raises(ValueError, match="out of order"):
        migrations.migration(named(f"m{n + 2:04d}_skips_one"))
    with pytest.raises(ValueError, match="out of order"):
        migrations.migration(named(f"m{n:04d}_same_number_again"))
    with pytest.raises(ValueError, match="m<4 digits>"):
        migrations.migration(named("add_a_column"))
    assert len(migrations.MIGRATIONS) == n
    migrations.migration(named(f"m{n + 1:04d}_next"))
    assert migrations.names()[-1] == f"{n + 1:04d}_next"


def test_a_new_migration_runs_once_and_a_failing_one_leaves_nothing(tmp_path, monkeypatch):
    db = tmp_path / "r.db"
    Store(db).close()
    monkeypatch.setattr(migrations, "MIGRATIONS", list(migrations.MIGRATIONS))
    n = len(migrations.MIGRATIONS) + 1
    calls = []

    def add(conn):
        calls.append(1)
        conn.execute("ALTER TABLE configs ADD COLUMN planted TEXT")

    def broken(conn):
        conn.execute("ALTER TABLE configs ADD COLUMN half TEXT")
        raise sqlite3.OperationalError("planted failure after one statement")

    add.__name__, broken.__name__ = f"m{n:04d}_planted", f"m{n + 1:04d}_broken"
    migrations.migration(add)
    migrations.migration(broken)
    with pytest.raises(StoreError, match="planted failure"):
        Store(db)
    con = sqlite3.connect(db)
    cols = [r[1] for r in con.execute("PRAGMA table_info(configs)")]
    names = [r[0] for r in con.execute("SELECT name FROM _migrations")]
    con.close()
    assert "planted" in cols and "half" not in cols  # the good one committed, the broken one rolled back whole
    assert names[-1] == f"{n:04d}_planted"
    migrations.MIGRATIONS.pop()  # the broken one fixed by leaving it out: the next open applies nothing again
    Store(db).close()
    assert calls == [1]


def test_a_database_from_a_newer_llamalab_is_refused_before_any_migration(tmp_path):
    db = copy("v0004.db", tmp_path)
    con = sqlite3.connect(db)
    con.execute("INSERT INTO _migrations VALUES ('0099_from_the_future', 'x')")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="newer llamalab .*0099_from_the_future"):
        Store(db)
    assert [n for n, _ in recorded(db)] == [*NAMES_0008[:4], "0099_from_the_future"]
