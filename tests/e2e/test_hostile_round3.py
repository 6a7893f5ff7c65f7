"""Hostile inputs, round three (issue 26): `-o` that cannot destroy its own input, escape sequences that never reach a
terminal, memory that does not grow with the input, a trust gate that reads flags as llama.cpp spells them, and no
traceback for any of the 16 inputs that made one on 68344b3. Every case runs the command line (`cli.entry`, in this
process, as test_hostile_files.py does, or the `llamalab` entry point in its own process where time, memory or a
second process matter) on real files and databases; none needs llama.cpp (the commands that start it stop before a
build: LLAMALAB_HOME stays empty). Every output is searched for "Traceback" (`clean`, `assert_clean_error`)."""

from __future__ import annotations

import copy
import json
import os
import resource
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_bad_input_cli import SMALL, assert_clean_error
from test_hostile_files import NO_BUILD, RID, call, digest, env, nothing_built, stored_db, write_doc  # noqa: F401
from test_hostile_files import _mutate as _bad

import runfixtures
from llamalab.models import synthetic as models
from llamalab.store.db import Store

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[H\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\\x9b31m\u202eevil\u2066"
pytestmark = pytest.mark.spread
RAW = ("\x1b", "\x9b", "\u202e", "\u2066", "\x07")


def clean(done) -> None:
    """A command that succeeded, and said nothing of a traceback."""
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def _export(tmp_path: Path, doc: dict, name: str = "x.json") -> Path:
    return write_doc(tmp_path / name, doc)


# ---------------------------------------------------------------- 3. -o never destroys what the command reads

@pytest.mark.parametrize("cmd", [["export"], ["report"], ["report", "--format", "json"], ["report", "--format", "csv"]])
def test_output_onto_the_database_it_reads_is_refused(tmp_path, env, cmd):
    db = stored_db(tmp_path / "x.db")
    before = digest(db)
    link = tmp_path / "hard-link.db"
    os.link(db, link)
    for target in (db, link, tmp_path / "." / "x.db"):
        done = call(*cmd, "--db", str(db), "-o", str(target), env=env)
        assert_clean_error(done, "is the file this command reads", "-o")
        assert done.returncode == 2
    assert digest(db) == before
    assert RID in call("runs", "--db", str(db), env=env).stdout  # every run still there


def test_output_onto_the_databases_wal_is_refused(tmp_path, env):
    """While another process has the database open (a run in progress), SQLite keeps its -wal and -shm beside it."""
    db = stored_db(tmp_path / "x.db")
    holder = Store(db)  # read-write: WAL mode, -wal and -shm exist while it is open
    try:
        holder.db.execute("BEGIN IMMEDIATE")
        holder.db.execute("UPDATE runs SET host=host")
        for suffix in ("-wal", "-shm"):
            target = Path(str(db) + suffix)
            assert target.exists()
            before = target.read_bytes()
            done = call("report", "--db", str(db), "-o", str(target), env=env)
            assert_clean_error(done, "is the file this command reads")
            assert target.read_bytes() == before
        holder.db.execute("ROLLBACK")
    finally:
        holder.close()


def test_stub_onto_its_own_model_is_refused(tmp_path, env):
    model = models.write_synthetic(SMALL, tmp_path / "m.gguf")
    before = digest(model)
    done = call("stub", str(model), "-o", str(model), env=env)
    assert_clean_error(done, "is the file this command reads")
    assert digest(model) == before


def test_a_read_only_output_file_is_refused_with_a_tip(tmp_path, env):
    db = stored_db(tmp_path / "x.db")
    out = tmp_path / "kept.json"
    out.write_text("keep me")
    out.chmod(0o444)
    done = call("export", "--db", str(db), "-o", str(out), env=env)
    assert_clean_error(done, "is read-only (mode 0444)", f"chmod u+w {out}")
    assert out.read_text() == "keep me" and stat.S_IMODE(out.stat().st_mode) == 0o444


def test_an_overwritten_file_keeps_its_mode(tmp_path, env):
    db = stored_db(tmp_path / "x.db")
    for cmd, mode in ((["export"], 0o600), (["report", "--format", "json"], 0o640)):
        out = tmp_path / f"private-{mode:o}.out"
        out.write_text("old")
        out.chmod(mode)
        clean(call(*cmd, "--db", str(db), "-o", str(out), env=env))
        assert stat.S_IMODE(out.stat().st_mode) == mode and out.read_text() != "old"
    new = tmp_path / "new.json"
    clean(call("export", "--db", str(db), "-o", str(new), env=env))
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~_umask()


def _umask() -> int:
    m = os.umask(0o022)
    os.umask(m)
    return m


@pytest.mark.parametrize("length", [246, 250, 255])
def test_names_up_to_255_bytes_are_written(tmp_path, env, length):
    db = stored_db(tmp_path / "x.db")
    out = tmp_path / ("r" * (length - 5) + ".json")
    assert len(out.name) == length
    clean(call("export", "--db", str(db), "-o", str(out), env=env))
    assert json.loads(out.read_text())["run_id"] == RID
    clean(call("report", "--db", str(db), "--format", "json", "-o", str(out), env=env))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_plots_are_all_or_nothing_and_the_tip_names_plots(tmp_path, env):
    db = stored_db(tmp_path / "x.db")
    rid = RID
    plots = tmp_path / "plots"
    (plots / f"{rid}-compute.svg").mkdir(parents=True)  # in the way of the last plot written
    out = tmp_path / "report.html"
    done = call("report", "--db", str(db), "--format", "html", "-o", str(out), "--plots", str(plots), env=env)
    assert_clean_error(done, "(--plots) is a directory", "give --plots another folder")
    assert not out.exists()  # nothing written: not the report, not the plots before it
    assert sorted(p.name for p in plots.iterdir()) == [f"{rid}-compute.svg"]


def test_the_csv_companion_is_all_or_nothing_and_named(tmp_path, env):
    db = stored_db(tmp_path / "x.db")
    (tmp_path / "run.configs.csv").mkdir()
    done = call("report", "--db", str(db), "--format", "csv", "-o", str(tmp_path / "run.csv"), env=env)
    assert_clean_error(done, "run.configs.csv (beside -o (the configurations CSV)) is a directory")
    assert "give -o a new file name" not in done.stderr  # the tip names what is in the way
    assert not (tmp_path / "run.csv").exists()


# ---------------------------------------------------------------- 4. no control sequence reaches the terminal

def _hostile_export(tmp_path: Path) -> tuple[Path, dict]:
    doc = runfixtures.hostile_doc()
    t = doc["tables"]
    t["trials"][0]["requests_json"][0]["error"] = f"server said {HOSTILE}"
    t["configs"][0]["reason"] = f"log line {HOSTILE}"
    t["runs"][0]["host"] = f"rig{HOSTILE}"
    return _export(tmp_path, doc, "hostile.json"), doc


def test_csv_report_and_export_to_a_terminal_carry_no_control_sequence(tmp_path, env):
    path, doc = _hostile_export(tmp_path)
    db = tmp_path / "d.db"
    clean(call("import", str(path), "--db", str(db), env=env))
    for cmd in (["report", "--format", "csv"], ["export"], ["report", "--format", "json"], ["report"]):
        done = call(*cmd, "--db", str(db), env=env)
        clean(done)
        assert not [c for c in RAW if c in done.stdout], (cmd, [c for c in RAW if c in done.stdout])
    # the export still holds every character, escaped: it imports as the same run
    again = tmp_path / "again.json"
    again.write_text(call("export", "--db", str(db), env=env).stdout)
    assert json.loads(again.read_text())["tables"]["configs"][0]["reason"] == f"log line {HOSTILE}"
    done = call("import", str(again), "--db", str(db), env=env)
    clean(done)
    assert "identical; nothing to do" in done.stdout


# ---------------------------------------------------------------- 5. memory that does not grow with the input

_MEASURED = ("import sys\nfrom llamalab import cli\nrc = cli.entry(sys.argv[1:])\n"
             "hwm = next(ln for ln in open('/proc/self/status') if ln.startswith('VmHWM'))\n"
             "sys.stderr.write('\\nVmHWM ' + hwm.split()[1] + '\\n')\nsys.exit(rc)\n")


def _peak_rss_mb(argv: list[str], env: dict) -> tuple[int, float, str]:
    """Exit code, peak RSS (MB) and stderr of `llamalab ARGV` in its own process. The peak is the process's own
    VmHWM, read as it ends: a fork's rusage would count the pytest worker it was copied from."""
    done = subprocess.run([sys.executable, "-c", _MEASURED, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env={**os.environ, **env}, timeout=600)
    err, _, kib = done.stderr.rpartition("\nVmHWM ")
    return done.returncode, int(kib) / 1024, err


def test_inspect_streams_a_log_of_short_lines(tmp_path, env):
    """16 MB of short lines: `read().splitlines()` held the text and every line (68344b3: 2.47 GB for 100 MB; about
    7 bytes of RSS per byte of these lines, 125 MB here); a stream holds one piece (35 MB: the interpreter)."""
    block = "".join("llama_context: CUDA0 compute buffer size = 1.00 MiB\n" if i % 64 == 0 else f"slot {i}: ok\n"
                    for i in range(4096))
    path = tmp_path / "short.log"
    with open(path, "w") as f:
        for _ in range(16 * 2**20 // len(block)):
            f.write(block)
    rc, rss, err = _peak_rss_mb(["inspect", "--json", str(path)], env)
    assert rc == 0 and "Traceback" not in err, err
    assert rss < 80, f"{rss:.0f} MB"


def test_inspect_of_one_endless_line_holds_its_ends_only(tmp_path, env):
    path = tmp_path / "one-line.log"
    with open(path, "w") as f:
        f.write("load_tensors: CUDA0 model buffer size = 7.00 MiB")
        for _ in range(120):
            f.write(" " * 2**20)
        f.write("end\n")
    rc, rss, err = _peak_rss_mb(["inspect", str(path)], env)
    assert rc == 0 and "Traceback" not in err, err
    assert rss < 100, f"{rss:.0f} MB"  # 68344b3 held the 120 MB line, twice


def _many_trials(tmp_path: Path, n: int) -> Path:
    doc = runfixtures.doc(runfixtures.GRID)
    trials = doc["tables"]["trials"]
    per = max(t["trial"] for t in trials)
    out = []
    k = 0
    while len(out) < n:
        for t in trials[: n - len(out)]:
            out.append({**t, "id": len(out) + 1, "trial": t["trial"] + k * per})
        k += 1
    doc["tables"]["trials"] = out
    return _export(tmp_path, doc, f"trials-{n}.json")


@pytest.mark.slow
def test_import_report_and_export_of_32000_trials_are_linear(tmp_path, env):
    """Issue 26 item 1 and 5: on 68344b3 the import of 32,000 trials took 88 s and the report 76 s (list.count in a
    comprehension: quadratic), the export held the whole document (1.39 GB for 128,000 trials). Bounds with a
    wide margin over what a linear pass takes here (benchmarks/hostile-sizes has the figures): CPU seconds and
    peak RSS of each command in its own process."""
    path = _many_trials(tmp_path, 32_000)
    db = tmp_path / "d.db"
    for argv, cpu_s, rss_mb in ((["import", str(path), "--db", str(db)], 30, 250),
                                (["report", "--db", str(db), "-o", str(tmp_path / "r.md")], 40, 350),
                                (["export", "--db", str(db), "-o", str(tmp_path / "e.json")], 30, 250)):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        rc, rss, err = _peak_rss_mb(argv, env)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        assert rc == 0 and "Traceback" not in err, err
        assert cpu < cpu_s and rss < rss_mb, (argv[0], f"{cpu:.1f} s CPU", f"{rss:.0f} MB")
    assert json.loads((tmp_path / "e.json").read_text())["tables"]["trials"][-1]["trial"] > 32_000 // 144


# ---------------------------------------------------------------- 6. the trust gate reads llama.cpp's spelling

STUDY = 'name = "x"\n[[builds]]\nname = "a"\n[[settings]]\nname = "s"\nargs = {args}\n'
SPELLINGS = ["--log_file", "--slot_save_path", "--hf_repo", "--mcp_servers_config", "--media_path",
             "--log_prompts_dir", "--log-file=/tmp/x", "--log_file=/tmp/x"]
READERS = ["--api-key-file", "--ssl-key-file", "--chat-template-file", "--lora", "-md", "--prompt-cache",
           "--webui-config-file", "--ssl_cert_file", "-m"]


@pytest.mark.parametrize("flag", SPELLINGS + READERS)
@pytest.mark.parametrize("cmd", [["run"], ["plan"], ["build"], ["tune"], ["bisect", "b1", "b2", "--config"]])
def test_every_command_that_starts_llama_cpp_refuses_them_without_trust(tmp_path, env, cmd, flag):
    args = [flag] if "=" in flag else [flag, "/tmp/llamalab-test-target"]
    study = tmp_path / "s.toml"
    study.write_text(STUDY.format(args=json.dumps(args)))
    done = call(*cmd, str(study), *NO_BUILD, env=env) if cmd[0] != "bisect" else \
        call(*cmd, str(study), "--repo", str(tmp_path), env=env)
    assert_clean_error(done, "can run code on this machine or open it to the network", flag.split("=")[0])
    assert done.returncode == 2
    assert nothing_built(env) and not Path("/tmp/llamalab-test-target").exists()


def test_a_fullwidth_digit_is_no_slot_count(tmp_path, env):
    for value in ("１", "٣", "4"):
        done = call("plan", "demo", *NO_BUILD, "--set", f'server.args=["-np", "{value}"]', env=env)
        if value == "4":
            assert "-np" not in done.stderr
        else:
            assert_clean_error(done, f"-np {value!r}: the number of server slots is a whole number")


# ---------------------------------------------------------------- 7, 8. no traceback, and the small gaps

def test_study_files_that_are_not_text_or_nest_too_deeply(tmp_path, env):
    bad = tmp_path / "latin1.toml"
    bad.write_bytes('name = "caf\xe9"\n[[builds]]\nname = "a"\n'.encode("latin-1"))
    deep = tmp_path / "deep.toml"
    deep.write_text('name = "x"\n[[builds]]\nname = "a"\n[workload]\nrepeats = ' + "[" * 5000 + "]" * 5000 + "\n")
    for cmd, words in (([str(bad)], "is not UTF-8 text"), ([str(deep)], "nests its tables or arrays too deeply"),
                       (["demo", "--set", "workload.concurrency=" + "[" * 5000 + "]" * 5000], "nests arrays"),
                       (["demo", "--set", "x." * 5000 + "y=1"], "unknown key x")):
        for command in ("run", "plan"):
            done = call(command, *cmd, *NO_BUILD, env=env)
            assert_clean_error(done, words)
            assert done.returncode == 2
    assert nothing_built(env)


@pytest.mark.parametrize("value, words", [
    ("99999999999999999999999", "less than or equal to 10000"),
    ("true", "Input should be a valid integer"),
    ("0", "greater than or equal to 1"),
])
def test_repeats_are_bounded_whole_numbers(tmp_path, env, value, words):
    db = tmp_path / "d.db"
    done = call("run", "demo", *NO_BUILD, "--db", str(db), "--set", f"workload.repeats={value}", env=env)
    assert_clean_error(done, "workload.repeats", words)
    assert not db.exists()  # no run started, none left failed with 0 trials


@pytest.mark.parametrize("key, value", [("workload.request_timeout_s", "nan"), ("workload.request_timeout_s", "inf"),
                                        ("server.ctx", "4294967296"), ("workload.concurrency", "[1, 99999999]"),
                                        ("workload.prompt_tokens", "true")])
def test_other_study_numbers_are_finite_and_bounded(tmp_path, env, key, value):
    done = call("plan", "demo", *NO_BUILD, "--set", f"{key}={value}", env=env)
    assert_clean_error(done, key)


def _speed(value):
    return _bad(lambda d: d["tables"]["trials"][0].__setitem__("output_tps", value))


def _system(key, value):
    return _bad(lambda d: d["tables"]["system_info"][0]["info_json"].__setitem__(key, value))


def _model(key, value):
    return _bad(lambda d: d["tables"]["runs"][0]["model_json"].__setitem__(key, value))


def _deep_study(d):
    d["tables"]["runs"][0]["study_toml"] += "\nx = " + "[" * 50_000 + "]" * 50_000 + "\n"


# (case, make the document, what import says) — each of these passed import on 68344b3 and crashed report/compare
IMPORTED = [
    ("nan-speed", _speed(float("nan")), "output_tps: Input should be a finite number"),
    ("infinite-speed", _speed(float("inf")), "output_tps: Input should be a finite number"),
    ("huge-speed", _speed(1e308), "output_tps: Input should be less than or equal to"),
    ("huge-ttft", _bad(lambda d: d["tables"]["trials"][0]["requests_json"][0].__setitem__("ttft_s", 1e308)),
     "ttft_s: Input should be less than or equal to"),
    ("gpus-a-string", _system("gpus", "RTX"), "info_json.gpus: Input should be a valid list"),
    ("gpus-of-numbers", _system("gpus", [1]), "info_json.gpus[0]: Input should be a valid dictionary"),
    ("llama-cpp-a-list", _system("llama_cpp", [1]), "info_json.llama_cpp: Input should be a valid dictionary"),
    ("ram-a-string", _system("ram_mib", "lots"), "info_json.ram_mib: Input should be a valid number"),
    ("loadavg-a-string", _system("loadavg", "x"), "info_json.loadavg: Input should be a valid list"),
    ("size-bytes-a-list", _model("size_bytes", [1]), "model_json.size_bytes: Input should be a valid number"),
    ("n-ctx-train-a-string", _model("n_ctx_train", "x"), "model_json.n_ctx_train: Input should be a valid integer"),
    ("study-50000-deep", _bad(_deep_study), "the stored study is not a TOML study file"),
    ("trial-2**70", _bad(lambda d: d["tables"]["trials"][0].__setitem__("trial", 2**70)),
     "trial: Input should be less than or equal to 9223372036854775807"),
    ("json-column-deep", _bad(lambda d: d["tables"]["runs"][0].__setitem__("devices_json", _nested(100))),
     "devices_json: Value error, nested more than 64 deep"),
    ("version-minus-5", _bad(lambda d: d.__setitem__("version", -5)), "is a version -5 export"),
    ("version-true", _bad(lambda d: d.__setitem__("version", True)), "is a version True export"),
]


def _nested(n: int) -> dict:
    v: dict = {}
    for _ in range(n):
        v = {"a": v}
    return v


@pytest.mark.parametrize("make, words", [pytest.param(m, w, id=i) for i, m, w in IMPORTED])
def test_imports_that_68344b3_took_are_refused_in_words(tmp_path, env, make, words):
    f = tmp_path / "x.json"
    f.write_text(json.dumps(make(), allow_nan=True))
    db = tmp_path / "d.db"
    done = call("import", str(f), "--db", str(db), env=env)
    assert_clean_error(done, words.replace("Value error, ", ""))
    assert done.returncode == 2
    assert not db.exists()


PLANTED = [  # what an older llamalab's unchecked import left in a database
    ("trials", "output_tps", "'NaN'", None),
    ("trials", "output_tps", "1e999", None),  # SQLite reads it as Infinity
    ("system_info", "info_json", None, lambda v: {**v, "gpus": "RTX"}),
    ("runs", "model_json", None, lambda v: {**v, "size_bytes": [1]}),
    ("runs", "study_toml", None, lambda v: v + "\nx = " + "[" * 50_000 + "]" * 50_000 + "\n"),
    ("trials", "requests_json", None, lambda v: "[" * 100_000 + "]" * 100_000),
]


@pytest.mark.parametrize("table, column, sql, change", PLANTED)
def test_reports_of_runs_an_older_import_stored_say_what_is_wrong(tmp_path, env, table, column, sql, change):
    db = stored_db(tmp_path / "d.db")
    con = sqlite3.connect(db)
    with con:
        where = f"rowid=(SELECT MIN(rowid) FROM {table})"
        if sql is not None:
            con.execute(f"UPDATE {table} SET {column}={sql} WHERE {where}")
        else:
            (old,) = con.execute(f"SELECT {column} FROM {table} WHERE {where}").fetchone()
            new = change(json.loads(old) if column.endswith("_json") else old)
            con.execute(f"UPDATE {table} SET {column}=? WHERE {where}",
                        (new if isinstance(new, str) else json.dumps(new),))
    con.close()
    for cmd in (["report"], ["report", "--format", "json"], ["report", "--format", "csv"], ["compare", RID, RID],
                ["export"]):
        done = call(*cmd, "--db", str(db), env=env)
        assert "Traceback" not in done.stdout + done.stderr, (cmd, done.stderr)
        if done.returncode != 0:
            assert_clean_error(done, f"run '{RID}'", "cannot be")
        else:  # a column that no longer decodes reads as missing, as every damaged JSON column does
            assert (table, column) == ("trials", "requests_json"), (cmd, done.stdout[:200])


@pytest.mark.parametrize("split, words", [("nan,inf", "is not a list of numbers"),
                                          ("1,inf", "is not a list of numbers"),
                                          ("-1,2", "numbers ≥ 0"), ("0,0", "at least one above 0")])
def test_inspect_tensor_split_must_be_proportions(tmp_path, env, split, words):
    log = runfixtures.RUNS.parent / "logs"
    path = sorted(log.glob("*.log"))[0]
    done = call("inspect", "--tensor-split", split, str(path), env=env)
    assert_clean_error(done, words)
    assert "NaN" not in done.stdout


def test_two_imports_of_one_run_at_once(tmp_path, env):
    """Both processes check the file, then put it in one transaction each: the second finds the first's run inside
    its own transaction and compares (68344b3: 'UNIQUE constraint failed: runs.id' for one of them)."""
    path = _many_trials(tmp_path, 3000)
    db = tmp_path / "d.db"
    Store(db).close()
    procs = [subprocess.Popen([sys.executable, "-m", "llamalab.cli", "import", str(path), "--db", str(db)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "Traceback" not in out + err and "UNIQUE" not in err, err
    said = sorted(out for out, _ in outs)
    assert said[0].startswith("imported run") and "identical; nothing to do" in said[1], said
    with Store(db, readonly=True) as s:
        assert [r["trials"] for r in s.runs()] == [3000]


def test_an_import_file_that_changes_between_its_two_readings_is_refused(tmp_path, env, monkeypatch):
    """The file is read twice (checked, then inserted): the second reading must be the bytes the first checked."""
    from llamalab.cli import results as cli_results

    good = runfixtures.doc()
    path = _export(tmp_path, good)
    swapped = copy.deepcopy(good)
    swapped["tables"]["trials"][0]["output_tps"] = 1.0
    real = cli_results._Source.pieces

    def pieces(self, check=False):
        if check:
            path.write_text(json.dumps(swapped))
        return real(self, check)

    monkeypatch.setattr(cli_results._Source, "pieces", pieces)
    db = tmp_path / "d.db"
    done = call("import", str(path), "--db", str(db), env=env)
    assert_clean_error(done, "changed while it was being imported")
    with Store(db, readonly=True) as s:
        assert s.runs() == []


def test_the_issue_26_commands_end_without_a_traceback_in_their_own_process(tmp_path, env):
    """A few of the cases above through the installed entry point, as a user runs them."""
    from test_bad_input_cli import llamalab

    db = stored_db(tmp_path / "x.db")
    done = llamalab("export", RID, "--db", str(db), "-o", str(db), env=env)
    assert_clean_error(done, "is the file this command reads")
    f = tmp_path / "nan.json"
    f.write_text(json.dumps(_speed(float("nan"))(), allow_nan=True))
    assert_clean_error(llamalab("import", str(f), "--db", str(tmp_path / "n.db"), env=env), "finite number")
    study = tmp_path / "s.toml"
    study.write_text(STUDY.format(args=json.dumps(["--log_file", "/tmp/llamalab-test-target"])))
    assert_clean_error(llamalab("bisect", "b1", "b2", "--config", str(study), "--repo", str(tmp_path), env=env),
                       "--log_file")
    started = time.monotonic()
    assert_clean_error(llamalab("run", "demo", *NO_BUILD, "--set", "workload.repeats=99999999999999999999999",
                                env=env), "workload.repeats")
    assert time.monotonic() - started < 60


# ---------------------------------------------------------------- 7. every JSON column, every key, a wrong type

WRONG = ["x", [1], {"a": 1}, 2**70, True, 1e308]


def _json_keys(doc: dict, depth: int):
    """(table, column, path) of every key of every JSON column of the first row of each table, `depth` deep."""
    def walk(v, path):
        if path:
            yield path
        if len(path) < depth:
            if isinstance(v, dict):
                for k, x in v.items():
                    yield from walk(x, path + (k,))
            elif isinstance(v, list) and v:
                yield from walk(v[0], path + (0,))
    for t, rows in doc["tables"].items():
        for col, v in (rows[0].items() if rows else ()):
            if col.endswith("_json") and v is not None:
                for p in walk(v, ()):
                    yield t, col, p


def _sweep(tmp_path: Path, env: dict, name: str, depth: int, wrong: list, shard: tuple[int, int] = (0, 1)) -> int:
    """Import and report each case of the run `name` changed `depth` deep; the cases i with i % n == k of the
    shard (k, n)."""
    base = runfixtures.doc(name)
    rid = base["run_id"]
    rendered = 0
    for i, (t, col, path) in enumerate(_json_keys(base, depth)):
        if i % shard[1] != shard[0]:
            continue
        for j, bad in enumerate(wrong):
            # a copy of the one JSON value changed, the rest shared: the document written is the same as from a
            # deep copy of all of it, at a fraction of the time (the tune run's has 1,290 cases)
            rows = base["tables"][t]
            d = {**base, "tables": {**base["tables"], t: [{**rows[0], col: copy.deepcopy(rows[0][col])}, *rows[1:]]}}
            node = d["tables"][t][0][col]
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = bad
            f = tmp_path / f"{i}-{j}.json"
            f.write_text(json.dumps(d))
            db = tmp_path / f"{i}-{j}.db"
            done = call("import", str(f), "--db", str(db), env=env)  # `call` fails the test on any traceback
            if done.returncode == 0:  # what import takes, every report must render or refuse in words
                rendered += 1
                for cmd in (["report"], ["report", "--format", "json"], ["compare", rid, rid]):
                    done = call(*cmd, "--db", str(db), env=env)
                    assert done.returncode == 0 or "error:" in done.stderr, (t, col, path, bad, done.stderr)
            f.unlink()
    return rendered


@pytest.mark.slow
def test_a_wrong_type_anywhere_in_a_json_column_is_refused_or_rendered(tmp_path, env):
    """Every key of every JSON column of the demo run set to a string: import refuses it in words, or the reports
    render it (68344b3: gpus, llama_cpp, loadavg, ram_mib, size_bytes, n_ctx_train … crashed report or compare; the
    fast suite has those cases one by one, in IMPORTED). The deep sweep below found the typed fields of runrows."""
    _sweep(tmp_path, env, runfixtures.DEMO, 1, ["x"])


# The tune run's 1,290 cases (about 190 s) in 6 shards, the others' whole: `make test` runs them on whichever worker
# is free (the module is marked `spread`); together they are every case.
SHARDS = {runfixtures.DEMO: 1, runfixtures.TUNE: 6, runfixtures.VERSIONS: 1}


@pytest.mark.slow
@pytest.mark.parametrize("name, shard", [pytest.param(name, (k, n), id=f"{name}-{k + 1}of{n}")
                                         for name, n in SHARDS.items() for k in range(n)])
def test_a_wrong_type_anywhere_two_levels_deep_is_refused_or_rendered(tmp_path, env, name, shard):
    _sweep(tmp_path, env, name, 2, WRONG, shard)


def test_a_stored_study_of_another_shape_is_refused_or_rendered(tmp_path, env):
    """The run's study as stored (TOML): every key a report reads set to a string, a number or a list. 68344b3
    crashed even the import (`workload = "x"`) and report (`builds = -1`, `builds[0].name = [1]`, `cmake = "x"`)."""
    import tomllib

    from llamalab.study import spec

    base = runfixtures.doc()
    study = tomllib.loads(base["tables"]["runs"][0]["study_toml"])
    paths = [(k,) for k in study] + [(k, a) for k, v in study.items() if isinstance(v, dict) for a in v]
    paths += [(k, 0, a) for k, v in study.items() if isinstance(v, list) and v and isinstance(v[0], dict) for a in v[0]]
    for i, path in enumerate(paths):
        for j, bad in enumerate(["x", -1]):
            s = copy.deepcopy(study)
            node = s
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = bad
            d = copy.deepcopy(base)
            d["tables"]["runs"][0]["study_toml"] = spec.toml_text(s)
            f = _export(tmp_path, d, f"s{i}-{j}.json")
            db = tmp_path / f"s{i}-{j}.db"
            if call("import", str(f), "--db", str(db), env=env).returncode == 0:
                for cmd in (["report"], ["compare", RID, RID]):
                    done = call(*cmd, "--db", str(db), env=env)
                    assert done.returncode == 0 or "error:" in done.stderr, (path, bad, done.stderr)


def test_an_export_piped_into_import_is_read_twice_all_the_same(tmp_path, env):
    """`ssh rig llamalab export | llamalab import /dev/stdin`: a pipe cannot be read twice, so it is kept in a
    temporary file first (a guard: 68344b3 read the whole text once)."""
    db = tmp_path / "d.db"
    text = (runfixtures.RUNS / f"{runfixtures.DEMO}.json").read_text()
    done = subprocess.run([sys.executable, "-m", "llamalab.cli", "import", "/dev/stdin", "--db", str(db)], input=text,
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert f"imported run {RID}" in done.stdout
