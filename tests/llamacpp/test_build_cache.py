"""The build cache on damage (issue 17 items 8 and 12): a cached program that is missing, not executable,
overwritten or does not start, a deleted variant library, the cache reached through a symlink.

Real CMake and a real compiler build a small stand-in for llama.cpp (the same target names and output layout:
`bin/llama-server`, `bin/libggml-base.so`, a copies variant that rebuilds only ggml-base): seconds, not the 40
minutes of llama.cpp, and the shared build in ~/.cache/llamalab is never touched. `llamalab build --llama-cpp`
is the real CLI on it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fakellama
from llamalab.core import proc
from llamalab.core.errors import LaunchError
from llamalab.llamacpp import build, source

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("cc") is None,
                                reason="needs cmake and a C compiler")

@pytest.fixture(scope="module")
def fake_src(tmp_path_factory) -> Path:
    return fakellama.make(tmp_path_factory.mktemp("fake-llama"))


def builder(src: Path, home: Path, logs: list[str] | None = None) -> build.Builder:
    """A Builder on the stand-in source, treated like the pinned sdist (immutable: reused without running cmake)."""
    s = source.Source(path=src, origin="pypi:fake==1", build_number=1, commit="f" * 40)
    return build.Builder(source=s, backend="cpu", home=home, jobs=2, log=(logs.append if logs is not None else
                                                                         lambda m: None))


def runs(art: build.BuildArtifact) -> str:
    return subprocess.run([str(art.binary("llama-server"))], capture_output=True, text=True, check=True,
                          env={**os.environ, **art.env()}).stdout


def test_a_cached_build_is_reused_and_a_damaged_program_rebuilt(fake_src, tmp_path):
    home = tmp_path / "home"
    first = builder(fake_src, home).build("copies4", {})
    assert not first.reused and "copies=4" in runs(first)
    again = builder(fake_src, home).build("copies4", {})
    assert again.reused

    server = first.binary("llama-server")
    for damage, words in ((lambda p: p.chmod(0o644), "not executable"),
                          (lambda p: p.write_bytes(b"garbage"), "not a program or library"),
                          (lambda p: p.write_bytes(b""), "empty"),
                          (lambda p: p.unlink(), "missing")):
        damage(server)
        logs: list[str] = []
        art = builder(fake_src, home, logs).build("copies4", {})
        assert not art.reused and "copies=4" in runs(art), damage
        assert any("damaged" in m and words in m for m in logs), logs


def test_a_damaged_library_that_passes_the_file_checks_is_caught_by_running_it(fake_src, tmp_path):
    home = tmp_path / "home"
    art = builder(fake_src, home).build("copies4", {})
    lib = sorted(art.bin_dir.glob("libggml-base.so.*.*"))[0]
    lib.write_bytes(lib.read_bytes()[:64])  # the ELF header survives, the rest is gone
    logs: list[str] = []
    again = builder(fake_src, home, logs).build("copies4", {})
    assert not again.reused and "copies=4" in runs(again)
    assert any("damaged" in m or "does not run" in m for m in logs), logs


def test_a_deleted_variant_library_is_rebuilt(fake_src, tmp_path):
    home = tmp_path / "home"
    v = builder(fake_src, home).build("copies1", {"GGML_SCHED_MAX_COPIES": 1})
    assert v.lib_dir is not None and "copies=1" in runs(v)
    for p in v.lib_dir.glob("libggml-base.so*"):
        p.unlink()
    logs: list[str] = []
    again = builder(fake_src, home, logs).build("copies1", {"GGML_SCHED_MAX_COPIES": 1})
    assert not again.reused and "copies=1" in runs(again)  # not the base tree's copies=4 library
    assert any("libggml-base.so" in m and "missing" in m for m in logs), logs


def test_the_cache_reached_through_a_symlink_reuses_its_builds(fake_src, tmp_path):
    real = tmp_path / "real-home"
    builder(fake_src, real).build("copies4", {})
    builder(fake_src, real).build("copies1", {"GGML_SCHED_MAX_COPIES": 1})
    link = tmp_path / "link-home"
    link.symlink_to(real)
    logs: list[str] = []
    a = builder(fake_src, link, logs).build("copies4", {})
    b = builder(fake_src, link, logs).build("copies1", {"GGML_SCHED_MAX_COPIES": 1})
    assert a.reused and b.reused and not any("building" in m for m in logs), logs
    assert str(a.bin_dir).startswith(str(real.resolve()))


def test_a_marker_written_through_a_symlink_still_matches(fake_src, tmp_path):
    """A cache built before this fix through a symlinked home recorded the link's spelling: still reused."""
    real = tmp_path / "real-home"
    art = builder(fake_src, real).build("copies4", {})
    marker = art.bin_dir.parent / "llamalab-build.json"
    meta = json.loads(marker.read_text())
    link = tmp_path / "link"
    link.symlink_to(real)
    meta["configure"] = [str(x).replace(str(real.resolve()), str(link)) for x in meta["configure"]]
    marker.write_text(json.dumps(meta))
    assert builder(fake_src, real).build("copies4", {}).reused


def test_llamalab_build_cli_repairs_a_damaged_cached_binary(fake_src, tmp_path):
    """The real CLI: `llamalab build --llama-cpp DIR` twice, the second time after llama-server lost its x bit."""
    env = {**os.environ, "LLAMALAB_HOME": str(tmp_path / "home"), "LLAMALAB_DATA": str(tmp_path / "data")}
    cmd = [sys.executable, "-m", "llamalab.cli", "build", "demo", "--llama-cpp", str(fake_src), "--json",
           "--set", "devices.backend=cpu", "--set", 'builds=[{name="copies4"}]']
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    server = Path(json.loads(first.stdout)[0]["bin_dir"]) / "llama-server"
    server.chmod(0o644)
    second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "llama-server: not executable" in second.stderr and os.access(server, os.X_OK)


def test_spawning_a_program_that_cannot_run_is_a_launch_error(tmp_path):
    """What a non-executable or garbage binary does to llama-server's start: a LaunchError with a tip, no OSError."""
    bad = tmp_path / "llama-server"
    bad.write_bytes(b"garbage")
    for mode in (0o644, 0o755):
        bad.chmod(mode)
        with pytest.raises(LaunchError) as e:
            proc.spawn([str(bad), "--version"], log_path=tmp_path / "log")
        assert "could not start" in e.value.message and "llamalab build" in e.value.tip
    assert proc.capture([str(bad)])[0] == 126
