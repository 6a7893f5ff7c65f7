"""`--llama-bin`: a study on llama.cpp binaries llamalab did not build, with no compiler anywhere.

The shared test build's programs and .so files are copied side by side into `llama-b11312/` with run path
`$ORIGIN`, as ggml-org's release archives unpack (rpc-server under its older name), so the copy loads its own
libraries, not the build tree's. The run happens in a subprocess whose PATH holds python alone (no cmake, ninja,
make, cc, c++, gcc, g++, clang: checked inside that process), with an empty LLAMALAB_HOME: nothing can be fetched
or compiled, and afterwards the home holds no source and no build."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import llamahelp
from llamalab.core.errors import ConfigError, SourceError
from llamalab.llamacpp import binaries, source
from llamalab.llamacpp.build import Builder
from llamalab.setup import prepare as session
from llamalab.store.db import Store
from llamalab.study import spec as studymod

pytestmark = pytest.mark.llama

COMPILERS = ("cmake", "ninja", "make", "cc", "c++", "gcc", "g++", "clang", "clang++")
# The demo study (two rpc-servers standing for 300 MiB cards, budgets emulated), one KV setting, one small trial.
SMALL = ['settings=[{name="kv-f16-q8_0",args=["-ctk","f16","-ctv","q8_0"]}]', "workload.repeats=1",
         "workload.prompt_tokens=64", "workload.output_tokens=8", "workload.warmup=0", "workload.concurrency=[1]"]

# Runs llamalab's own command line after proving, in the same process, that no build tool can be found.
NO_COMPILER_MAIN = (
    "import shutil, sys\n"
    f"found = {{t: shutil.which(t) for t in {COMPILERS!r} if shutil.which(t)}}\n"
    "assert not found, f'build tools on PATH: {found}'\n"
    "print('no build tool on PATH:', sys.argv[0], file=sys.stderr)\n"
    "from llamalab.cli import main\n"
    "sys.argv = ['llamalab', *sys.argv[1:]]\n"
    "main()\n")


@pytest.fixture(scope="module")
def built(llama_home):
    """The shared test build (pinned b11312, CPU + RPC, default options): cached, built once for every test."""
    return Builder(source=source.pinned(llama_home), backend="cpu-rpc", home=llama_home, log=lambda s: None
                   ).build("default", {})


@pytest.fixture(scope="module")
def archive(built, tmp_path_factory) -> Path:
    dest = llamahelp.release_like(built.bin_dir, tmp_path_factory.mktemp("release") / "llama-b11312")
    rc, out = subprocess.getstatusoutput(f"ldd {dest / 'llama-server'}")
    resolved = [ln for ln in out.splitlines() if "libllama" in ln or "libggml" in ln]
    assert resolved and all(str(dest) in ln for ln in resolved), out  # its own .so files, not the build tree's
    return dest


def no_compiler_env(tmp_path: Path) -> dict[str, str]:
    tools = tmp_path / "path"
    tools.mkdir()
    (tools / "python3").symlink_to(sys.executable)
    assert not [t for t in COMPILERS if shutil.which(t, path=str(tools))]
    return {**{k: v for k, v in os.environ.items() if k not in ("CC", "CXX", "CMAKE_GENERATOR")},
            "PATH": str(tools), "LLAMALAB_HOME": str(tmp_path / "home"), "LLAMALAB_DATA": str(tmp_path / "data"),
            "PYTHONUNBUFFERED": "1"}


def test_study_on_given_binaries_without_a_compiler(archive, tmp_path):
    env = no_compiler_env(tmp_path)
    sets = [a for s in SMALL for a in ("--set", s)]
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", NO_COMPILER_MAIN, "run", "demo", "--llama-bin", str(archive),
                           "--json", *sets], env=env, capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - t0
    print(f"llamalab run demo --llama-bin: {seconds:.1f} s", file=sys.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no build tool on PATH" in done.stderr
    home = tmp_path / "home"
    assert not (home / "builds").exists() and not (home / "src").exists() and not (home / "downloads").exists(), \
        sorted(p.name for p in home.iterdir())
    assert "building" not in done.stderr

    with Store(tmp_path / "data" / "results.db") as store:
        run = store.runs()[-1]["id"]
        builds = {b["name"]: b for b in store.builds(run)}
        configs = {c["build"]: c for c in store.configs(run)}
        system = store.system(run)
        trials = store.trials(run)
    # the runtime arms ran on the archive; the arms that need a rebuild were skipped, saying why
    for name in ("copies4", "no-pp-override"):
        b = builds[name]
        assert b["status"] == "ok" and b["source_origin"] == f"bin:{archive}", b
        given = json.loads(b["binary_json"])
        assert given["dir"] == str(archive) and given["files"]["ggml-rpc-server"] == "rpc-server"
        assert configs[name]["status"] == "ok", configs[name]["reason"]
        assert json.loads(configs[name]["server_argv_json"])[0] == str(archive / "llama-server")
    assert builds["copies1"]["status"] == "skipped" and "copies variant" in builds["copies1"]["reason"]
    assert "--llama-cpp DIR" in builds["copies1"]["reason"]
    assert builds["no-pp-blas"]["status"] == "skipped" and "-DGGML_BLAS=ON" in builds["no-pp-blas"]["reason"]
    # two rpc-servers from the archive were the devices: pipeline parallelism with 4 copies, and the override's 1
    led4, led_ot = configs["copies4"]["ledger"], configs["no-pp-override"]["ledger"]
    assert led4["sched_copies"] == 4 and led_ot["sched_copies"] == 1
    assert len([d for d in led4["devices"] if d.startswith("RPC")]) == 2
    assert json.loads(configs["copies4"]["devices_json"])["emulation"]["budgets_mib"] == [300, 300]
    assert {t["build"] for t in trials} == {"copies4", "no-pp-override"}
    # the version is stored with the run
    llama = system["llama_cpp"]
    assert llama["origin"] == f"bin:{archive}" and llama["version"] == "b11312"
    (info,) = llama["binaries"]
    assert info["build_number"] == 11312 and source.PINNED.commit.startswith(info["commit"])
    assert "version:" in info["version_text"] and "RPC" in info["backends"] and "CPU" in info["backends"]
    assert info["compiler"] and info["target"]
    # and the report says what ran on what
    report = (tmp_path / "data" / "runs" / run / "report.md").read_text()
    assert f"given binaries in {archive}" in report and "binaries b11312 (0c1e570" in report
    assert "(given binaries)" in report and "copies variant" in report


def test_plan_on_given_binaries_without_a_compiler(archive, tmp_path):
    env = no_compiler_env(tmp_path)
    done = subprocess.run([sys.executable, "-c", NO_COMPILER_MAIN, "plan", "demo", "--llama-bin", str(archive),
                           "--json", "--set", SMALL[0]], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    plan = json.loads(done.stdout)
    ok = {c["build"]: c for c in plan["configs"] if c["status"] == "ok"}
    assert set(ok) == {"copies4", "no-pp-override"}
    assert ok["copies4"]["sched_copies"] == 4 and ok["no-pp-override"]["sched_copies"] == 1
    assert ok["copies4"]["args"] and ok["copies4"]["n_ctx"]
    assert "copies variant" in plan["skipped"]["copies1"]
    assert f"binaries in {archive}" in plan["llama_cpp"]
    assert not (tmp_path / "home" / "builds").exists() and not (tmp_path / "home" / "src").exists()


def test_given_binaries_that_cannot_run_the_study(built, tmp_path):
    # llama-server without its .so files: the loader's own error, and what to do
    alone = llamahelp.release_like(built.bin_dir, tmp_path / "server-only", programs={"llama-server": "llama-server"},
                                   libs=False)
    with pytest.raises(SourceError, match="cannot find the shared library lib") as e:
        binaries.probe(alone)
    assert "beside the programs" in e.value.tip
    # an archive without rpc-server, for a study whose devices are local rpc-servers
    norpc = llamahelp.release_like(built.bin_dir, tmp_path / "no-rpc", programs={"llama-server": "llama-server"})
    st, _ = studymod.load("demo", [f"source.bin={json.dumps(str(norpc))}"])
    with pytest.raises(ConfigError, match="has no rpc-server"):
        session.given_binaries(st, "cpu-rpc", llamahelp.Progress())
    # the same binaries serve a one-device study
    st, _ = studymod.load("demo", [f"source.bin={json.dumps(str(norpc))}", 'devices.backend="cpu"'])
    found = list(session.given_binaries(st, "cpu", llamahelp.Progress()).values())
    b = found[0]
    assert all(x is b for x in found)  # the folder is probed once for every build that runs it
    assert b.version.build_number == 11312 and not b.has("ggml-rpc-server")


def test_given_binaries_beside_a_source_build(archive, llama_home, tmp_data):
    """With a source as well, the copies variant is built from it (cached) and the report says which build ran
    on which binary."""
    src = source.pinned(llama_home)
    store, run = llamahelp.run_study(
        llama_home, tmp_data,
        ['builds=[{name="copies4"},{name="copies1",cmake={GGML_SCHED_MAX_COPIES=1}}]', *SMALL,
         f"source.bin={json.dumps(str(archive))}"], llama_cpp=src.path)
    with store:
        builds = {b["name"]: b for b in store.builds(run)}
        configs = {c["build"]: c for c in store.configs(run)}
    assert builds["copies4"]["source_origin"] == f"bin:{archive}"
    assert builds["copies1"]["source_origin"].startswith("pypi:") and builds["copies1"]["binary_json"] is None
    assert configs["copies4"]["ledger"]["sched_copies"] == 4 and configs["copies1"]["ledger"]["sched_copies"] == 1
    from llamalab.report import data as rdata
    from llamalab.report import markdown
    with Store(tmp_data / "results.db") as s:
        md = markdown.render(rdata.load(s, run))
    assert "the builds ran different llama.cpp binaries" in md
    assert f"copies4 on given binaries b11312 (0c1e570) in {archive}" in md and "copies1 on a build of b11312" in md
