"""The results database: migrations produce the expected schema; a newer database is refused clearly."""

import sqlite3

import pytest

from llamalab.core.errors import StoreError
from llamalab.core.records import ConfigOutcome, RequestResult, Trial
from llamalab.logs.ledger import parse
from llamalab.store import db as storemod
from llamalab.store import migrations


def _columns(db, table):
    return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]


def test_schema_after_migrations(tmp_path):
    with storemod.Store(tmp_path / "r.db") as s:
        tables = {r[0] for r in s.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"runs", "system_info", "builds", "configs", "ledgers", "buffers", "trials", "_migrations"} <= tables
        assert _columns(s.db, "trials")[:8] == ["id", "run_id", "config_id", "build", "setting", "trial",
                                                 "concurrency", "input_tokens"]
        assert {"server_argv_json", "env_json", "devices_json", "status", "reason"} <= set(_columns(s.db, "configs"))
        assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert [r[0] for r in s.db.execute("SELECT name FROM _migrations")] == migrations.names()


def test_reopening_applies_nothing_twice(tmp_path):
    storemod.Store(tmp_path / "r.db").close()
    with storemod.Store(tmp_path / "r.db") as s:
        assert s.db.execute("SELECT COUNT(*) FROM _migrations").fetchone()[0] == len(migrations.MIGRATIONS)


def test_database_from_a_newer_llamalab_is_refused(tmp_path):
    storemod.Store(tmp_path / "r.db").close()
    db = sqlite3.connect(tmp_path / "r.db")
    db.execute("INSERT INTO _migrations VALUES ('9999_from_the_future', 'x')")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer llamalab") as e:
        storemod.Store(tmp_path / "r.db")
    assert "--db" in e.value.tip


def test_not_a_database(tmp_path):
    (tmp_path / "r.db").write_text("hello, I am a text file" * 100)
    with pytest.raises(StoreError, match="is damaged: file is not a database"):
        storemod.Store(tmp_path / "r.db")


def test_trial_round_trip_and_resume_keys(tmp_path):
    with storemod.Store(tmp_path / "r.db") as s:
        rid = s.new_run("demo", "name='demo'", "h1", version="0")
        cid = s.start_config(rid, ConfigOutcome(build="copies4", setting="kv", status="running"))
        s.save_ledger(cid, parse(["sched_reserve: RPC0[127.0.0.1:1] compute buffer size =    48.10 MiB",
                                  "sched_reserve: reserve took 2.08 ms, sched copies = 4"]))
        req = RequestResult(index=0, prompt_n=256, prompt_tps=2000.5, predicted_n=32, predicted_tps=200.25,
                            wall_s=0.3, ttft_s=0.12, itl_ms=(5.0, 5.1))
        s.save_trial(rid, cid, Trial("copies4", "kv", 1, 1, (req,), wall_s=0.3, cell_prompt_tokens=256,
                                     cell_output_tokens=32))
        assert s.done_trials(rid) == {("copies4", "kv", 1, 1, 256, 32)}
        assert s.unfinished_run("h1") == rid
        t = s.trials(rid)[0]
        assert (t["input_tokens"], t["output_tps"], t["requests"][0]["itl_ms"]) == (256, 200.25, [5.0, 5.1])
        c = s.configs(rid)[0]
        assert c["ledger"]["sched_copies"] == 4
        s.set_run_status(rid, "finished")
        assert s.unfinished_run("h1") is None
        with pytest.raises(sqlite3.IntegrityError):  # a trial is never stored twice
            s.save_trial(rid, cid, Trial("copies4", "kv", 1, 1, (req,), wall_s=0.3, cell_prompt_tokens=256,
                                         cell_output_tokens=32))
        # the same trial number and level in another cell of the workload grid is another trial
        s.save_trial(rid, cid, Trial("copies4", "kv", 1, 1, (req,), wall_s=0.3, cell_prompt_tokens=2048,
                                     cell_output_tokens=32))
        assert len(s.done_trials(rid)) == 2


def test_trials_stored_before_the_grid_get_their_runs_single_cell(tmp_path):
    """A database made by a llamalab before migration 0006: its trials are copied into the new table with the
    workload cell of their run's study file (the defaults where it set none)."""
    db = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    db.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied TEXT NOT NULL)")
    for m in migrations.MIGRATIONS[:6]:  # up to 0006_build_binaries
        m.apply(db)
        db.execute("INSERT INTO _migrations VALUES (?, 'then')", (m.name,))
    for rid, toml in (("a", "name = 'x'\n[workload]\nprompt_tokens = 2048\noutput_tokens = 128\n"),
                      ("b", "name = 'y'\n")):
        db.execute("INSERT INTO runs (id, study, study_toml, study_hash, status, started, host, llamalab_version)"
                   " VALUES (?, 'x', ?, 'h', 'finished', 'now', 'host', '0')", (rid, toml))
        db.execute("INSERT INTO configs (run_id, build, setting, status) VALUES (?, 'copies4', 'kv', 'ok')", (rid,))
        db.execute("INSERT INTO trials (run_id, config_id, build, setting, trial, concurrency, requests_json,"
                   " foreign_load) VALUES (?, (SELECT MAX(id) FROM configs), 'copies4', 'kv', 1, 4, '[]', 0.5)",
                   (rid,))
    db.close()
    with storemod.Store(tmp_path / "old.db") as s:
        assert s.done_trials("a") == {("copies4", "kv", 1, 4, 2048, 128)}
        assert s.done_trials("b") == {("copies4", "kv", 1, 4, 256, 32)}
        assert s.trials("a")[0]["foreign_load"] == 0.5
