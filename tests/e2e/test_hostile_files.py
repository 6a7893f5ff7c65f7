"""Hostile files and faults around the results database and the files llamalab writes (issue 17): an exported run is
untrusted input, `-o` never replaces anything but a regular file, read-only commands never write, a damaged or
busy database is refused before anything runs, and none of it ends in a traceback. Each case runs the command line
(`cli.entry`, what the `llamalab` script runs, in this process to keep them fast; a few also as a real subprocess)
on real files and a real SQLite database; none needs llama.cpp (they stop before a build: LLAMALAB_HOME stays
empty)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_bad_input_cli import assert_clean_error, llamalab

import fsfaults
import runfixtures
from llamalab import cli
from llamalab.core.errors import ConfigError, StoreError
from llamalab.core.records import ConfigOutcome
from llamalab.store import migrations, owner, runids
from llamalab.store.db import Store
from llamalab.store.exchange import encode_row

RID = runfixtures.doc()["run_id"]
# `run` cases must stop before a build; should one ever get that far, this makes it fail at once ("not a llama.cpp
# source tree") instead of building llama.cpp into the test's home
NO_BUILD = ["--llama-cpp", "/nonexistent/llama.cpp"]


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def call(*args: str, env: dict[str, str | None] | None = None) -> Done:
    """`llamalab ARGS` in this process: the same entry point, error printing and exit codes as the script (a value
    of None in `env` unsets that variable). Any output with "Traceback" in it fails the test."""
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in (env or {})}
    for k, v in (env or {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.entry(list(args))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    done = Done(code, out.getvalue(), err.getvalue())
    # whatever the case asserts besides: no command of the hostile suites ends in a traceback
    assert "Traceback" not in done.stdout + done.stderr, (args, done.stderr[-2000:])
    return done


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """Private data and cache folders: a test that reaches a build would show up as a non-empty home."""
    return {"LLAMALAB_DATA": str(tmp_path / "data"), "LLAMALAB_HOME": str(tmp_path / "home")}


def nothing_built(env: dict[str, str]) -> bool:
    home = Path(env["LLAMALAB_HOME"])
    return not home.exists() or not any(home.iterdir())


def write_doc(path: Path, doc: dict | str) -> Path:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def with_run_id(doc: dict, rid) -> dict:
    doc["run_id"] = rid
    doc["tables"]["runs"][0]["id"] = rid
    for rows in doc["tables"].values():
        for r in rows:
            if "run_id" in r:
                r["run_id"] = rid
    return doc


def stored_db(path: Path, name: str = runfixtures.DEMO) -> Path:
    with Store(path) as s:
        runfixtures.fill(s, name)
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- 1. run ids that are paths

@pytest.mark.parametrize("rid", ["../../../../tmp/escape/x", "/tmp/escape/x", "20261129-092659-dd153e/../../x",
                                 "20261129-092659-DD153E", "", "20261129-092659-dd153e\n"])
def test_import_refuses_a_run_id_that_is_not_one(tmp_path, env, rid):
    f = write_doc(tmp_path / "x.json", with_run_id(runfixtures.doc(), rid))
    db = tmp_path / "d.db"
    done = call("import", str(f), "--db", str(db), env=env)
    assert_clean_error(done, "is not a llamalab run id")
    assert done.returncode == 2
    assert not db.exists()  # refused before the database was even opened


def _plant_id(db: Path, rid: str) -> None:
    """What an older llamalab's import left: a run stored under an id that is a path."""
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE runs SET id=? WHERE id=?", (rid, RID))
        for t in ("system_info", "builds", "configs", "trials", "crosschecks", "context_checks"):
            con.execute(f"UPDATE {t} SET run_id=? WHERE run_id=?", (rid, RID))
    con.close()


def test_report_plots_of_a_stored_path_id_write_nothing(tmp_path, env):
    escape = tmp_path / "escape"
    escape.mkdir()
    db = stored_db(tmp_path / "d.db")
    _plant_id(db, f"../../../../../../../..{escape}/x")
    plots = tmp_path / "plots"
    done = call("report", "--db", str(db), "--plots", str(plots), env=env)
    assert_clean_error(done, "is not a llamalab run id")
    assert list(escape.iterdir()) == [] and not (plots.exists() and any(plots.iterdir()))
    for cmd in (["report", "--db", str(db), "20261129-0926"], ["runs", "--db", str(db)]):  # a prefix cannot reach it
        done = call(*cmd, env=env)
        assert "Traceback" not in done.stderr


@pytest.mark.parametrize("ref", ["../x", "%", "2026_", "/etc/passwd"])
def test_command_line_run_ids_are_checked(tmp_path, env, ref):
    db = stored_db(tmp_path / "d.db")
    for cmd in (["report", ref], ["export", ref], ["compare", RID, ref]):
        done = call(*cmd, "--db", str(db), env=env)
        assert_clean_error(done, "is not a llamalab run id or the start of one")
    done = call("run", "demo", *NO_BUILD, "--resume", ref, "--db", str(db), env=env)
    assert_clean_error(done, "--resume")
    assert nothing_built(env)


def test_a_plot_file_that_is_a_symlink_is_not_followed(tmp_path, env):
    db = stored_db(tmp_path / "d.db")
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / f"{RID}-compute.png").symlink_to(outside)
    done = call("report", "--db", str(db), "--plots", str(plots), env=env)
    assert_clean_error(done, "is a symbolic link")
    assert outside.read_text() == "keep me" and (plots / f"{RID}-compute.png").is_symlink()


# ---------------------------------------------------------------- 1. an imported run never resumes

def test_an_imported_run_is_never_resumed(tmp_path, env):
    """The export claims everything that made a plain `run` resume it before: unfinished, this host, and a live
    owner (this very test's pid); none of it is believed."""
    doc = runfixtures.doc()
    run = doc["tables"]["runs"][0]
    run.update(status="interrupted", host=socket.gethostname(), owner_pid=os.getpid(),
               owner_host=socket.gethostname(), owner_started=owner.start_token(os.getpid()), imported=None)
    db = tmp_path / "d.db"
    done = call("import", str(write_doc(tmp_path / "x.json", doc)), "--db", str(db), env=env)
    assert done.returncode == 0, done.stderr
    assert "never resumed here" in done.stdout
    with Store(db) as s:
        row = s.run(RID)
        assert row["imported"] and row["owner_pid"] is None
        assert s.unfinished_run(run["study_hash"]) is None
        with pytest.raises(ConfigError, match="imported .* never resumed"):
            s.resumable(RID)
        new_id, resumed = s.begin_run("demo", run["study_toml"], run["study_hash"], version="0")
        assert not resumed and new_id != RID
        s.set_run_status(new_id, "finished")
    done = call("run", "demo", *NO_BUILD, "--resume", RID, "--db", str(db), env=env)
    assert_clean_error(done, "was imported", "never resumed here")
    assert nothing_built(env)
    done = call("runs", "--db", str(db), "--json", env=env)
    imported = next(r for r in json.loads(done.stdout) if r["id"] == RID)
    assert (imported["imported"], imported["live"], imported["status"]) == (True, False, "interrupted")


# ---------------------------------------------------------------- 2. -o replaces only regular files

def _special(tmp_path: Path, kind: str) -> tuple[Path, int]:
    p = tmp_path / f"out-{kind}"
    if kind == "symlink":
        (tmp_path / "target.txt").write_text("keep me")
        p.symlink_to(tmp_path / "target.txt")
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a /dev/null of our own
    elif kind == "directory":
        p.mkdir()
    return p, os.lstat(p).st_mode


@pytest.mark.parametrize("kind, words", [("symlink", "is a symbolic link"), ("fifo", "is a named pipe"),
                                         ("device", "is a character device"), ("directory", "is a directory")])
@pytest.mark.parametrize("cmd", [["export"], ["report", "--format", "json"], ["report", "--format", "csv"]])
def test_output_never_replaces_anything_but_a_regular_file(tmp_path, env, kind, words, cmd):
    db = stored_db(tmp_path / "d.db")
    out, mode = _special(tmp_path, kind)
    done = call(*cmd, "--db", str(db), "-o", str(out), env=env)
    assert_clean_error(done, words, "-o")
    assert done.returncode == 2
    assert os.lstat(out).st_mode == mode
    if kind == "symlink":
        assert (tmp_path / "target.txt").read_text() == "keep me"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".llamalab-")]  # no temporary file left


@pytest.mark.parametrize("kind, words", [("symlink", "is a symbolic link"), ("fifo", "is a named pipe")])
def test_stub_output_never_replaces_anything_but_a_regular_file(tmp_path, env, kind, words):
    from test_bad_input_cli import SMALL

    from llamalab.models import synthetic as models

    model = models.write_synthetic(SMALL, tmp_path / "m.gguf")
    out, mode = _special(tmp_path, kind)
    done = call("stub", str(model), "-o", str(out), env=env)
    assert_clean_error(done, words)
    assert os.lstat(out).st_mode == mode
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_output_overwrites_a_regular_file(tmp_path, env):
    db = stored_db(tmp_path / "d.db")
    out = tmp_path / "run.json"
    out.write_text("old")
    done = call("export", "--db", str(db), "-o", str(out), env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["run_id"] == RID


def test_output_into_a_read_only_folder(tmp_path, env):
    db = stored_db(tmp_path / "d.db")
    with fsfaults.readonly(tmp_path / "ro") as ro:
        for cmd in (["export", "-o", f"{ro}/x.json"], ["report", "--format", "csv", "-o", f"{ro}/x.csv"],
                    ["report", "-o", f"{ro}/sub/x.md"], ["report", "--plots", f"{ro}/plots"]):
            done = call(*cmd, "--db", str(db), env=env)
            assert_clean_error(done, "cannot write", "Read-only file system" if os.geteuid() == 0 else "ermission")
            assert done.returncode == 2
        assert list(ro.iterdir()) == []


# ---------------------------------------------------------------- 8. exports that are not exports

def _deep(doc: dict) -> str:
    text = json.dumps(doc)
    return text[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"


def _mutate(change):
    def make():
        d = runfixtures.doc()
        change(d)
        return d
    return make


def _set(path: str, value):
    def change(d):
        *head, last = path.split(".")
        obj = d
        for k in head:
            obj = obj[int(k)] if k.isdigit() else obj[k]
        if value is KeyError:
            del obj[int(last) if last.isdigit() else last]
        else:
            obj[int(last) if last.isdigit() else last] = value
    return change


def _all(table: str, key: str, value):
    def change(d):
        for r in d["tables"][table]:
            if value is KeyError:
                del r[key]
            else:
                r[key] = value
    return change


BAD_EXPORTS = [
    ("no-id", _mutate(_set("tables.runs.0.id", KeyError)), "tables.runs[0].id: Field required"),
    ("null-id", _mutate(_set("tables.runs.0.id", None)), "tables.runs[0].id: Input should be a valid string"),
    ("integer-id", _mutate(_set("tables.runs.0.id", 7)), "tables.runs[0].id: Input should be a valid string"),
    ("integer-schema", _mutate(_set("schema", 5)), '"schema" must be a list of migration names'),
    ("string-version", _mutate(_set("version", "1")), "is a version '1' export"),
    ("deep-nesting", lambda: _deep(runfixtures.doc()), "nests its JSON too deeply"),
    ("configs-without-id", _mutate(_all("configs", "id", KeyError)), "tables.configs[0].id: Field required"),
    ("configs-string-id", _mutate(_all("configs", "id", "1")), "tables.configs[0].id: Input should be a valid integer"),
    ("trials-wrong-type", _mutate(_all("trials", "output_tps", "fast")),
     "tables.trials[0].output_tps: Input should be a valid number (got 'fast')"),
    ("requests-not-a-list", _mutate(_all("trials", "requests_json", 7)),
     "tables.trials[0].requests_json: Input should be a valid list"),
    ("request-wrong-type", _mutate(_set("tables.trials.0.requests_json.0.predicted_tps", "1e9")),
     "tables.trials[0].requests_json[0].predicted_tps: Input should be a valid number"),
    ("ledger-wrong-type", _mutate(_set("tables.ledgers.0.ledger_json.n_ctx", [1])),
     "tables.ledgers[0].ledger_json.n_ctx: Input should be a valid integer"),
    ("buffers-of-strings", _mutate(_set("tables.ledgers.0.ledger_json.devices", {"RPC0": {"compute_mib": "x"}})),
     "ledger_json.devices.RPC0.compute_mib: Input should be a valid number"),
    ("bool-for-int", _mutate(_all("trials", "errors", True)),
     "tables.trials[0].errors: Input should be a valid integer"),
    ("unknown-status", _mutate(_set("tables.runs.0.status", "finished; rm -rf")),
     "tables.runs[0].status: Input should be"),
    ("other-run-id", _mutate(_set("run_id", "20261129-000000-000000")), "is not the id of the run in tables.runs"),
    ("duplicate-config-ids", _mutate(_all("configs", "id", 1)), "configs: id(s) [1] appear more than once"),
    ("dangling-trial", _mutate(_all("trials", "config_id", 99)), "trials point(s) at configuration(s) [99]"),
    ("duplicate-trial", _mutate(lambda d: d["tables"]["trials"].append(d["tables"]["trials"][0])),
     "is stored more than once"),
    ("tables-a-list", _mutate(_set("tables", [])), "holds no run"),
    ("row-a-string", _mutate(_set("tables.builds", ["x"])), '"tables.builds" is not a list of rows'),
]


@pytest.mark.parametrize("make, words", [pytest.param(m, w, id=i) for i, m, w in BAD_EXPORTS])
def test_a_bad_export_is_refused_clearly(tmp_path, env, make, words):
    f = write_doc(tmp_path / "x.json", make())
    db = tmp_path / "d.db"
    done = call("import", str(f), "--db", str(db), env=env)
    assert_clean_error(done, words)
    assert done.returncode == 2
    assert not db.exists()


def test_report_of_wrong_typed_rows_an_older_import_stored(tmp_path, env):
    """An older llamalab imported without checking: the database holds text where numbers belong. `report` and
    `compare` say which run and which value, instead of crashing in a renderer."""
    db = stored_db(tmp_path / "d.db")
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE trials SET output_tps='fast' WHERE id=(SELECT MIN(id) FROM trials)")
    con.close()
    for cmd in (["report"], ["report", "--format", "html"], ["compare", RID, RID]):
        done = call(*cmd, "--db", str(db), env=env)
        assert_clean_error(done, f"run '{RID}'", "cannot be reported", "output_tps", "'fast'")


# ---------------------------------------------------------------- 10. read-only commands never write

READERS = [["runs"], ["runs", "--json"], ["report"], ["report", "--format", "json"], ["export"],
           ["compare", RID, RID]]


def test_someone_elses_sqlite_file_is_left_alone(tmp_path, env):
    db = tmp_path / "other.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE notes (x TEXT)")
    con.execute("INSERT INTO notes VALUES ('mine')")
    con.commit()
    con.close()
    before = digest(db)
    for cmd in READERS:
        done = call(*cmd, "--db", str(db), env=env)
        assert_clean_error(done, "is not a llamalab results database")
    assert digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]  # no -wal, no -shm
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert [r[0] for r in con.execute("SELECT name FROM sqlite_master")] == ["notes"]
    con.close()


def _old_schema_db(path: Path, upto: int = 1) -> Path:
    """A database exactly as llamalab with the first `upto` migrations left it, holding the demo run."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied TEXT NOT NULL)")
    for m in migrations.MIGRATIONS[:upto]:
        m.apply(con)
        con.execute("INSERT INTO _migrations VALUES (?, 'then')", (m.name,))
    tables = runfixtures.doc()["tables"]
    for t, rows in tables.items():
        for row in rows:
            r = encode_row(row)
            con.execute(f"INSERT INTO {t} ({', '.join(r)}) VALUES ({', '.join('?' * len(r))})", list(r.values()))
    con.commit()
    con.close()
    return path


def test_an_older_schema_is_read_without_migrating_it(tmp_path, env):
    db = _old_schema_db(tmp_path / "old.db")
    before = digest(db)
    for cmd in READERS:
        done = call(*cmd, "--db", str(db), env=env)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
    assert RID in call("runs", "--db", str(db), env=env).stdout
    assert "| copies4 | kv-f16-q8_0 | 1 |" in call("report", "--db", str(db), env=env).stdout
    assert digest(db) == before
    con = sqlite3.connect(db)
    assert [r[0] for r in con.execute("SELECT name FROM _migrations")] == ["0001_initial"]
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    con.close()
    # a write command migrates it (and only then)
    assert call("import", str(runfixtures.RUNS / f"{runfixtures.CONCURRENCY}.json"), "--db", str(db),
                    env=env).returncode == 0
    with Store(db, readonly=True) as s:
        assert s.migrations() == migrations.names()


def test_a_read_only_database_can_be_read(tmp_path, env):
    folder = tmp_path / "ro"
    folder.mkdir()
    stored_db(folder / "results.db")
    names = sorted(p.name for p in folder.iterdir())
    with fsfaults.readonly(folder):
        for cmd in READERS:
            done = call(*cmd, "--db", str(folder / "results.db"), env=env)
            assert done.returncode == 0, (cmd, done.stderr)
        assert RID in call("runs", "--db", str(folder / "results.db"), env=env).stdout
        done = call("import", str(runfixtures.RUNS / f"{runfixtures.CONCURRENCY}.json"), "--db",
                        str(folder / "results.db"), env=env)
        assert_clean_error(done)  # writing is refused, in words
        assert sorted(p.name for p in folder.iterdir()) == names


# ---------------------------------------------------------------- 8. damaged database, read-only HOME

def _damage(db: Path) -> None:
    size = db.stat().st_size
    page = 4096
    with open(db, "r+b") as f:
        f.seek((size // page // 2) * page)
        f.write(b"\xff" * 2 * page)
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA quick_check").fetchone()[0] != "ok"  # the damage is there to find
    except sqlite3.DatabaseError:
        pass
    finally:
        con.close()


def test_run_refuses_a_damaged_database_before_building_anything(tmp_path, env):
    db = stored_db(tmp_path / "d.db", runfixtures.BUDGET)
    _damage(db)
    done = call("run", "demo", *NO_BUILD, "--db", str(db), env=env)
    assert_clean_error(done, f"{db} is damaged", ".recover")
    assert nothing_built(env)
    done = call("report", "--db", str(db), env=env)
    assert "Traceback" not in done.stderr


def test_read_only_home(tmp_path):
    home = tmp_path / "home"
    with fsfaults.readonly(home):
        e = {"HOME": str(home), "LLAMALAB_DATA": None, "LLAMALAB_HOME": None}
        for cmd, words in ((["import", str(runfixtures.RUNS / f"{runfixtures.DEMO}.json")], "cannot make the folder"),
                           (["run", "demo", *NO_BUILD], "cannot make the folder"),
                           (["runs"], "there is no results database")):
            assert_clean_error(call(*cmd, env=e), words, str(home))
        assert list(home.iterdir()) == []


# ---------------------------------------------------------------- 3. two runs on one database

HOLDER = """
import sys, time
from llamalab.core.records import ConfigOutcome
from llamalab.store.db import Store
s = Store(sys.argv[1])
rid, _ = s.begin_run("demo", 'name = "demo"', "hash-of-demo", version="0")
s.start_config(rid, ConfigOutcome(build="copies4", setting="kv", status="running"))
print(rid, flush=True)
time.sleep(600)
"""


def test_a_live_run_is_never_joined_and_a_killed_one_resumes(tmp_path, env):
    """A first llamalab holds a run (a real process, its real row); a second `run`, `--fresh` or `--resume` of it
    is refused before anything is built. Once the first is killed, the run reads as interrupted and resumes."""
    db = tmp_path / "d.db"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], stdout=subprocess.PIPE, text=True)
    try:
        rid = holder.stdout.readline().strip()
        assert runids.is_run_id(rid)
        for extra in ([], ["--fresh"], ["--resume", rid]):
            done = call("run", "demo", *NO_BUILD, "--db", str(db), *extra, env=env)
            assert_clean_error(done, f"another llamalab (pid {holder.pid}) is measuring run {rid}",
                               "disturb the timings", f"kill {holder.pid}")
            assert done.returncode == 1
        assert nothing_built(env)
        runs = json.loads(call("runs", "--db", str(db), "--json", env=env).stdout)
        assert [(r["id"], r["status"], r["live"]) for r in runs] == [(rid, "running", True)]
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    runs = json.loads(call("runs", "--db", str(db), "--json", env=env).stdout)
    assert [(r["id"], r["status"], r["live"]) for r in runs] == [(rid, "interrupted", False)]
    assert "interrupted" in call("runs", "--db", str(db), env=env).stdout
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM runs").fetchone()[0] == "running"  # nobody could write; liveness tells
    con.close()
    with Store(db) as s:
        assert s.unfinished_run("hash-of-demo") == rid
        assert s.begin_run("demo", 'name = "demo"', "hash-of-demo", version="0") == (rid, True)
        assert s.run(rid)["owner_pid"] == os.getpid()
        cfg = s.configs(rid)[0]
        assert cfg["status"] == "interrupted" and "killed or crashed" in cfg["reason"]


def test_a_reused_pid_is_not_the_owner():
    me = owner.current()
    assert owner.alive(me.pid, me.host, me.started)
    assert not owner.alive(me.pid, me.host, "another-boot/123")  # same pid, another process start
    assert not owner.alive(None, me.host, None) and not owner.alive(2**22 + 7, me.host, None)
    assert owner.alive(1, "some-other-host", None)  # cannot be checked from here: never joined


def test_two_claims_at_once_make_one_owner(tmp_path):
    """The check and the claim are one transaction: of two processes starting on one database, one gets it."""
    db = tmp_path / "d.db"
    Store(db).close()
    script = ("import sys; from llamalab.store.db import Store; from llamalab.core.errors import StoreError\n"
              "s = Store(sys.argv[1])\n"
              "try:\n    print(s.begin_run('demo', 'x', 'h', version='0')[0], flush=True)\nexcept StoreError:\n"
              "    print('refused', flush=True)\n"
              "import time; time.sleep(5)\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(db)], stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    try:
        answers = sorted(p.stdout.readline().strip() for p in procs)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert answers[-2:] == ["refused", "refused"] and runids.is_run_id(answers[0])


# ---------------------------------------------------------------- 8. a full disk

def test_a_full_disk_is_an_error_in_words_and_the_run_reads_interrupted(tmp_path):
    with fsfaults.tiny_fs(tmp_path / "small", "512k") as small:
        db = small / "results.db"
        script = ("import sys\nfrom llamalab.store.db import Store\nfrom llamalab.core.records import ConfigOutcome\n"
                  "with Store(sys.argv[1]) as s:\n"
                  "    rid, _ = s.begin_run('demo', 'x', 'h', version='0')\n"
                  "    print(rid, flush=True); sys.stdin.readline()\n"
                  "    for i in range(100000):\n"
                  "        s.note_config(s.start_config(rid, ConfigOutcome(build='b', setting='x' * 4000,"
                  " status='running')), 'y' * 4000)\n")
        p = subprocess.Popen([sys.executable, "-c", script, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        rid = p.stdout.readline().strip()
        fsfaults.fill(small)
        _, err = p.communicate("go\n", timeout=120)
        assert p.returncode != 0
        assert "StoreError" in err and "the disk is full" in err and "free some space" in err
        with Store(db, readonly=True) as s:
            (r,) = s.runs()
            assert (r["id"], r["status"], r["live"]) == (rid, "interrupted", False)


# ---------------------------------------------------------------- the script itself

def test_the_llamalab_script_prints_errors_not_tracebacks(tmp_path, env):
    """A few of the cases above through the installed entry point in its own process."""
    f = write_doc(tmp_path / "x.json", with_run_id(runfixtures.doc(), "../../../../tmp/escape/x"))
    assert_clean_error(llamalab("import", str(f), "--db", str(tmp_path / "d.db"), env=env), "is not a llamalab run id")
    db = stored_db(tmp_path / "s.db")
    os.mkfifo(tmp_path / "fifo")
    done = llamalab("export", "--db", str(db), "-o", str(tmp_path / "fifo"), env=env)
    assert_clean_error(done, "is a named pipe")
    assert done.returncode == 2
    _damage(db)
    done = llamalab("run", "demo", *NO_BUILD, "--db", str(db), env=env)
    assert_clean_error(done, "is damaged")
    assert nothing_built(env)
