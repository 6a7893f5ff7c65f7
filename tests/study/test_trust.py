"""Issue 17 item 5: a study file from someone else is a script. What in it can run code on this machine or open it
to the network is refused unless the user says --trust-study on the command line; the user's own --set and --host,
and the presets, are trusted. Real CLI on real study files; where code would run, a real CMake or ssh shows it
does run once trusted and does not otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fakellama
from llamalab.core.errors import ConfigError
from llamalab.study import spec as studymod
from llamalab.study import trust


def cli(*args: str, home: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLAMALAB_HOME": str(home), "LLAMALAB_DATA": str(home.parent / "data")}
    return subprocess.run([sys.executable, "-m", "llamalab.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


EVIL = """name = "from-someone-else"
[source]
bin = "./bin"
llama_cpp = "./src"
[server]
host = "0.0.0.0"
args = ["-fa", "on", "--log-file", "{home}/.bashrc"]
[devices]
backend = "cpu-rpc"
host = "0.0.0.0"
[[devices.rpc]]
endpoint = "10.0.0.2:50052"
ssh = "me@10.0.0.2"
ssh_options = ["-o", "ProxyCommand=sh -c 'touch {marker}'", "-F", "/tmp/cfg", "-o", "Port=2222", "-i", "k"]
[[builds]]
name = "evil"
[builds.cmake]
CMAKE_PROJECT_INCLUDE = "/tmp/evil.cmake"
CMAKE_C_COMPILER_LAUNCHER = "sh"
GGML_CUDA = true
LLAMA_BUILD_COMMIT = 'x";system("id");//'
[[settings]]
name = "agent"
args = ["--tools", "all", "--rpc", "1.2.3.4:50052", "-hf", "some/model", "--gpt-oss-20b-default"]
"""


def test_a_hostile_study_file_is_refused_before_anything_runs(tmp_path):
    marker = tmp_path / "pwned"
    f = tmp_path / "evil.toml"
    f.write_text(EVIL.format(home=tmp_path, marker=marker))
    home = tmp_path / "home"
    for cmd in (["run", str(f)], ["build", str(f)], ["plan", str(f)]):
        done = cli(*cmd, home=home)
        assert done.returncode == 2, done.stderr
        err = done.stderr
        for key in ("source.bin", "source.llama_cpp", "server.host", "devices.host", "server.args '--log-file'",
                    "settings[0] (agent).args '--tools'",
                    "'--rpc'", "'-hf'", "'--gpt-oss-20b-default'", "cmake.CMAKE_PROJECT_INCLUDE",
                    "cmake.CMAKE_C_COMPILER_LAUNCHER", "cmake.LLAMA_BUILD_COMMIT", "-o \"ProxyCommand=",
                    "-F '/tmp/cfg'", "--trust-study"):
            assert key in err, (key, err)
        for fine in ("GGML_CUDA", "Port=2222", "-i 'k'", "'-fa'"):
            assert fine not in err, (fine, err)
        assert "Traceback" not in err
    assert not marker.exists() and not home.exists()


def test_cmake_code_runs_only_with_trust_study(tmp_path):
    """CMAKE_PROJECT_INCLUDE runs a CMake script at configure time: refused, then run once the user trusts it."""
    if shutil.which("cmake") is None or shutil.which("cc") is None:
        pytest.skip("needs cmake and a C compiler")
    src = fakellama.make(tmp_path / "fake-llama")
    marker = tmp_path / "configure-ran"
    (tmp_path / "evil.cmake").write_text(f'file(WRITE "{marker}" "code ran at configure")\n')
    f = tmp_path / "s.toml"
    f.write_text(f'name = "s"\n[devices]\nbackend = "cpu"\n[[builds]]\nname = "b"\n'
                 f'cmake = {{ CMAKE_PROJECT_INCLUDE = "{tmp_path / "evil.cmake"}" }}\n')
    home = tmp_path / "home"
    refused = cli("build", str(f), "--llama-cpp", str(src), home=home)
    assert refused.returncode == 2 and "CMAKE_PROJECT_INCLUDE" in refused.stderr and not marker.exists()
    trusted = cli("build", str(f), "--llama-cpp", str(src), "--trust-study", home=home)
    assert trusted.returncode == 0, trusted.stderr
    assert "accepted with --trust-study: builds[0] (b).cmake.CMAKE_PROJECT_INCLUDE" in trusted.stderr
    assert marker.read_text() == "code ran at configure"


def test_ssh_proxycommand_runs_only_with_trust_study(tmp_path):
    """ProxyCommand runs before any connection: refused; trusted, ssh really runs it (the login then fails)."""
    if shutil.which("ssh") is None:
        pytest.skip("needs ssh")
    marker = tmp_path / "proxy-ran"
    f = tmp_path / "s.toml"
    f.write_text(f'name = "s"\n[devices]\nbackend = "rpc"\n[[devices.rpc]]\nendpoint = "127.0.0.1:1"\n'
                 f'ssh = "nobody@127.0.0.1"\nssh_options = ["-o", "ProxyCommand=touch {marker}"]\n'
                 f'[[builds]]\nname = "b"\n')
    home = tmp_path / "home"
    refused = cli("run", str(f), home=home)
    assert refused.returncode == 2 and "ProxyCommand" in refused.stderr and not marker.exists()
    trusted = cli("run", str(f), "--trust-study", home=home, timeout=120)
    assert "accepted with --trust-study" in trusted.stderr and marker.exists()
    assert trusted.returncode != 0 and "Traceback" not in trusted.stderr


def test_the_users_own_overrides_and_the_presets_are_trusted(tmp_path):
    """--set replaces what the file said: the user's choice. (The study is refused later for other reasons — an
    rpc-server at 10.0.0.2 that does not answer — which shows the trust check let it through.)"""
    st, _ = studymod.load("demo", ['builds=[{name="x",cmake={CMAKE_C_COMPILER="/nonexistent/cc"}}]',
                                   'server.host="0.0.0.0"'])
    found = trust.risks(st)
    assert {r.key for r in found} == {"server.host", "builds[0] (x).cmake.CMAKE_C_COMPILER"}
    assert trust.from_file(found, ['builds=[{name="x"}]', 'server.host="0.0.0.0"']) == []
    assert trust.from_file(found, ['workload.repeats=1']) == found
    f = tmp_path / "evil.toml"
    f.write_text(EVIL.format(home=tmp_path, marker=tmp_path / "m"))
    st, _ = studymod.load(str(f))
    left = trust.from_file(trust.risks(st), ["builds=[]", "settings=[]", "server.args=[]", "devices.rpc=[]",
                                             'server.host="127.0.0.1"', "source={}"])
    assert [r.key for r in left] == ["devices.host"]


@pytest.mark.parametrize("key, value, risky", [
    ("GGML_CUDA", True, False), ("GGML_SCHED_MAX_COPIES", 1, False), ("LLAMA_CURL", "OFF", False),
    ("CMAKE_BUILD_TYPE", "Release", False), ("CMAKE_CUDA_ARCHITECTURES", "86;89", False),
    ("BLA_VENDOR", "OpenBLAS", False), ("GGML_BLAS_VENDOR", "OpenBLAS", False),
    ("CMAKE_PROJECT_INCLUDE", "/x.cmake", True), ("CMAKE_PROJECT_llama_INCLUDE_BEFORE", "x", True),
    ("CMAKE_TOOLCHAIN_FILE", "t.cmake", True), ("CMAKE_C_COMPILER", "cc", True),
    ("CMAKE_CXX_COMPILER_LAUNCHER", "ccache", True), ("CMAKE_CUDA_HOST_COMPILER", "g++", True),
    ("CMAKE_C_FLAGS", "-fplugin=x.so", True), ("CMAKE_MODULE_PATH", "/m", True), ("CMAKE_PREFIX_PATH", "/p", True),
    ("BLAS_LIBRARIES", "/evil.so", True), ("OpenBLAS_DIR", "/d", True),
    ("GGML_VULKAN_SHADERS_GEN_TOOLCHAIN", "t", True),
    ("GGML_CCACHE_PROGRAM", "x", True), ("LLAMA_BUILD_COMMIT", 'x"; system("id"); //', True),
    ("GGML_CUDA_ARCHITECTURES", "../../evil", True),
])
def test_cmake_allow_list(key, value, risky):
    assert (trust.cmake_risk(key, value) is not None) == risky


@pytest.mark.parametrize("flag, value, risky", [
    ("-i", "~/.ssh/lab", False), ("-J", "bastion", False), ("-o", "Port=2222", False), ("-o", "User lab", False),
    ("-o", "StrictHostKeyChecking=accept-new", False), ("-o", "ProxyJump=bastion", False),
    ("-F", "~/.ssh/config", True), ("-o", "ProxyCommand=nc %h %p", True), ("-o", "LocalCommand=id", True),
    ("-o", "PermitLocalCommand=yes", True), ("-o", "KnownHostsCommand=/bin/id", True), ("-o", "Match exec id", True),
    ("-o", "PKCS11Provider=/evil.so", True), ("-o", "ForwardAgent=yes", True), ("-o", "RemoteForward 80 x:80", True),
    ("-o", "StrictHostKeyChecking=no", True), ("-o", "UserKnownHostsFile=/dev/null", True), ("-o", "SendEnv *", True),
    ("-o", "proxycommand sh", True),
])
def test_ssh_option_allow_list(flag, value, risky):
    assert (trust.ssh_option_risk(flag, value) is not None) == risky


@pytest.mark.parametrize("override, words", [
    ('settings=[{name="x",args=["-np","3.5"]}]', "-np '3.5': the number of server slots is a whole number"),
    ('settings=[{name="x",args=["--parallel=0"]}]', "--parallel '0'"),
    ('server.args=["--host","0.0.0.0"]', "--host: llamalab sets where llama-server listens; use [server] host"),
    ('builds=[{name="b",args=["--port","9"]}]', "--port: llamalab sets where llama-server listens"),
    ('devices.host="::1"', "rpc-server listens on an IPv4 address only"),
    ('server.host="/tmp/x.sock"', "an IPv4 or IPv6 address"),
    ("server.parallel=3.5", "server.parallel"),
])
def test_flags_llamalab_owns_are_checked_with_the_study(tmp_path, override, words):
    done = cli("run", "demo", "--set", override, home=tmp_path / "home")
    assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "home").exists()


def test_a_settings_own_slots_are_honoured():
    from llamalab.rig import devices
    from llamalab.run import runner
    from llamalab.setup import prepare as session

    st, _ = studymod.load("demo", ['settings=[{name="a",args=["-np","2"]},{name="b"}]', "workload.concurrency=[1,8]"])
    dev = devices.DeviceSetup(backend="cpu", count=1)
    a, b = (session.server_args(st, c, dev) for c in studymod.configs(st)[:2])
    assert runner.n_slots(a) == 2 and a.count("-np") == 1
    assert runner.n_slots(b) == 8 and b[b.index("-np") + 1] == "8"


def test_host_ipv6_other_than_loopback_is_refused_for_rpc_servers(tmp_path):
    done = cli("run", "demo", "--host", "fe80::1", home=tmp_path / "home")
    assert done.returncode == 2 and "rpc-servers listen on an IPv4 address only" in done.stderr


def test_risks_are_pure_and_empty_for_the_presets():
    for name in studymod.preset_names():
        st, _ = studymod.load(name)
        assert trust.risks(st) == [], name
    with pytest.raises(ConfigError):
        studymod.load("demo", ['devices.host="localhost"'])
