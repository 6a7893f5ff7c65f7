"""Bad input gets one paragraph that says what to do — an `error:` line and a `tip:` line — and never a traceback.
Each case runs the real command line in a subprocess."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from llamalab.models import synthetic as models

SMALL = models.ModelShape("t", n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_vocab=600, n_ctx_train=512)


def llamalab(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llamalab.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=600)


def assert_clean_error(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode not in (0, 1) or "error:" in done.stderr, done.stderr
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert "error:" in done.stderr and "tip:" in done.stderr, done.stderr
    for w in words:
        assert w in done.stderr, (w, done.stderr)


@pytest.fixture
def files(tmp_path):
    good = models.write_synthetic(SMALL, tmp_path / "good.gguf")
    (tmp_path / "not.gguf").write_bytes(b"PK\x03\x04" + b"zip" * 100)
    raw = good.read_bytes()
    (tmp_path / "truncated.gguf").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "unknown-key.toml").write_text('name = "x"\n[[builds]]\nname = "a"\n[workload]\nrepeat = 3\n')
    (tmp_path / "wrong-type.toml").write_text('name = "x"\n[[builds]]\nname = "a"\n[workload]\nrepeats = "three"\n')
    return tmp_path


@pytest.mark.parametrize("args, words, code", [
    pytest.param(["run", "demo", "--model", "{d}/missing.gguf"], ["does not exist"], 2, id="missing-model"),
    pytest.param(["run", "demo", "--model", "{d}/not.gguf"], ["not a GGUF file"], 2, id="not-gguf"),
    pytest.param(["run", "demo", "--model", "{d}/truncated.gguf"], ["truncated"], 2, id="truncated-gguf"),
    pytest.param(["run", "{d}/unknown-key.toml"], ["unknown key workload.repeat"], 2, id="unknown-study-key"),
    pytest.param(["run", "{d}/wrong-type.toml"], ["workload.repeats"], 2, id="wrong-type"),
    pytest.param(["run", "pipline-parallel"], ["unknown study preset"], 2, id="unknown-preset"),
    pytest.param(["run", "demo", "--set", "workload.repeats"], ["has no '='"], 2, id="bad-override"),
    pytest.param(["run", "demo", "--llama-cpp", "{d}"], ["is not a llama.cpp source tree"], 1, id="not-llama-cpp"),
    pytest.param(["report", "--db", "{d}/nope.db"], ["no results database"], 1, id="missing-db"),
    pytest.param(["plan", "demo", "--budget", "sixteen"], ["not a memory size"], 2, id="bad-budget"),
])
def test_bad_input(files, args, words, code):
    done = llamalab(*[a.format(d=files) for a in args], env={"LLAMALAB_DATA": str(files / "data"),
                                                             "LLAMALAB_HOME": str(files / "home")})
    assert_clean_error(done, *words)
    assert done.returncode == code


def test_database_from_a_newer_llamalab(files):
    db = files / "r.db"
    assert llamalab("runs", "--db", str(db)).returncode != 0  # no database yet: refused, not created
    from llamalab.store.db import Store

    Store(db).close()
    con = sqlite3.connect(db)
    con.execute("INSERT INTO _migrations VALUES ('9999_future', 'x')")
    con.commit()
    con.close()
    assert_clean_error(llamalab("runs", "--db", str(db)), "newer llamalab")


def test_no_cmake_on_path(files):
    """A machine without CMake: the build cannot start, and the message says what to install."""
    src = files / "llama.cpp"
    for f in ("CMakeLists.txt", "include/llama.h", "ggml/include/ggml.h"):
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        (src / f).write_text("")
    (src / "tools" / "server").mkdir(parents=True)
    bare = files / "bin"
    bare.mkdir()
    (bare / "python3").symlink_to(sys.executable)
    done = llamalab("build", "demo", "--llama-cpp", str(src),
                    env={"PATH": str(bare), "LLAMALAB_HOME": str(files / "home")})
    assert_clean_error(done, "cmake is not installed", "llamalab doctor")


@pytest.mark.llama
def test_unknown_llama_server_flag_is_refused_before_running(demo_prep, tmp_path):
    done = llamalab("run", "demo", "--set", 'settings=[{name="x",args=["--flash-atention","on"]}]',
                    env={"LLAMALAB_DATA": str(tmp_path)})
    assert_clean_error(done, "does not know the argument(s) --flash-atention")
    assert not (tmp_path / "runs").exists()  # nothing ran
