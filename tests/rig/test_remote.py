"""Remote RPC devices without a network: endpoint and study validation, exposure warnings, reachability messages,
what llama-server and rpc-server print about devices, ledgers regrouped by endpoint, and the ssh/scp argv."""

from __future__ import annotations

import shlex
import socket
import subprocess
import time
from pathlib import Path

import pytest

from llamalab.core.errors import ConfigError, LaunchError
from llamalab.logs import ledger
from llamalab.rig import devices, remote
from llamalab.setup import prepare as session
from llamalab.study import endpoints
from llamalab.study import spec as studymod

# ---------------------------------------------------------------- endpoints


@pytest.mark.parametrize("text, host, port", [
    pytest.param("10.0.0.2:50052", "10.0.0.2", 50052, id="ipv4"),
    pytest.param(" 192.168.1.7:1 ", "192.168.1.7", 1, id="spaces"),
    pytest.param("gpu-box.lan:50052", "gpu-box.lan", 50052, id="hostname"),
    pytest.param("localhost:65535", "localhost", 65535, id="localhost"),
])
def test_parse_endpoint(text, host, port):
    ep = endpoints.parse_endpoint(text)
    assert (ep.host, ep.port) == (host, port) and str(ep) == f"{host}:{port}"


@pytest.mark.parametrize("text, says", [
    pytest.param("10.0.0.2", "write host:port", id="no-port"),
    pytest.param("10.0.0.2:0", "1 to 65535", id="port-0"),
    pytest.param("10.0.0.2:70000", "1 to 65535", id="port-big"),
    pytest.param("10.0.0.2:http", "1 to 65535", id="port-name"),
    pytest.param(":50052", "host is missing", id="no-host"),
    pytest.param("[::1]:50052", "not IPv6", id="ipv6-brackets"),
    pytest.param("fe80::1:50052", "not IPv6", id="ipv6"),
    pytest.param("0.0.0.0:50052", "not an address to connect to", id="any"),
    pytest.param("bad_host!:50052", "neither an IPv4 address nor a host name", id="bad-name"),
])
def test_parse_endpoint_rejects(text, says):
    with pytest.raises(ValueError, match=says):
        endpoints.parse_endpoint(text)


def _study(devs: dict) -> studymod.Study:
    return studymod.parse({"name": "x", "builds": [{"name": "a"}], "devices": devs})


def test_study_rpc_strings_and_tables():
    st = _study({"backend": "rpc", "rpc": ["10.0.0.2:50052",
                                          {"endpoint": "10.0.0.3:50052", "ssh": "me@gpu3", "threads": 4,
                                           "ssh_options": ["-i", "~/.ssh/lab", "-o", "Port=2222"]},
                                          {"endpoint": "10.0.0.4:50052", "backend": "cuda"}]})
    a, b, c = st.devices.rpc
    assert (a.endpoint, a.ssh, a.backend) == ("10.0.0.2:50052", None, None)
    assert (b.ssh, b.threads, b.ssh_options) == ("me@gpu3", 4, ["-i", "~/.ssh/lab", "-o", "Port=2222"])
    assert c.backend == "cuda"
    assert _study({}).devices.rpc == []


def test_study_rpc_toml_and_override(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('name = "x"\n[[builds]]\nname = "a"\n[devices]\nbackend = "rpc"\n'
                 'rpc = ["10.0.0.2:50052", { endpoint = "10.0.0.3:50052", ssh = "me@h3" }]\n')
    st, _ = studymod.load(str(f))
    assert [r.endpoint for r in st.devices.rpc] == ["10.0.0.2:50052", "10.0.0.3:50052"]
    st, _ = studymod.load(str(f), ['devices.rpc=["10.0.0.9:1"]'])
    assert [r.endpoint for r in st.devices.rpc] == ["10.0.0.9:1"]


@pytest.mark.parametrize("devs, key, says", [
    pytest.param({"rpc": ["10.0.0.2"]}, "devices.rpc[0].endpoint", "host:port", id="no-port"),
    pytest.param({"rpc": [{"endpoint": "10.0.0.2:1", "port": 3}]}, "devices.rpc[0].port", "unknown key",
                 id="unknown-key"),
    pytest.param({"rpc": ["10.0.0.2:1", "10.0.0.2:1"]}, "devices", "listed twice", id="duplicate"),
    pytest.param({"backend": "rpc"}, "devices", "needs remote endpoints", id="rpc-without-remotes"),
    pytest.param({"backend": "rpc", "count": 2, "rpc": ["10.0.0.2:1"]}, "devices", "count is the number of local",
                 id="rpc-with-count"),
    pytest.param({"backend": "cpu", "rpc": ["10.0.0.2:1"]}, "devices", "built without RPC", id="cpu-with-remotes"),
    pytest.param({"rpc": [{"endpoint": "10.0.0.2:1", "rpc_server_path": "/x"}]}, "devices.rpc[0]",
                 "only to an rpc-server llamalab starts", id="path-without-ssh"),
    pytest.param({"rpc": [{"endpoint": "10.0.0.2:1", "ssh": "u@h", "backend": "cuda"}]}, "devices.rpc[0]",
                 "reads it from the rpc-server", id="backend-with-ssh"),
    pytest.param({"rpc": [{"endpoint": "10.0.0.2:1", "ssh": "-oProxyCommand=x"}]}, "devices.rpc[0].ssh",
                 "user@host", id="ssh-option-injection"),
    pytest.param({"rpc": [{"endpoint": "10.0.0.2:1", "ssh": "u@h", "ssh_options": ["-p", "22"]}]},
                 "devices.rpc[0].ssh_options", "Port=N", id="ssh-p"),
    pytest.param({"rpc": [{"endpoint": "10.0.0.2:1", "ssh": "u@h", "ssh_options": ["-i"]}]},
                 "devices.rpc[0].ssh_options", "pairs", id="ssh-odd"),
    pytest.param({"rpc": [{"endpoint": "10.0.0.2:1", "ssh": "u@h", "bind": "gpu3"}]}, "devices.rpc[0].bind",
                 "IPv4", id="bind-name"),
    pytest.param({"rpc": [{"endpoint": "10.0.0.2:1", "backend": "CUDA!"}]}, "devices.rpc[0].backend",
                 "lower case", id="backend-name"),
])
def test_study_rpc_errors_name_the_key(devs, key, says):
    with pytest.raises(ConfigError) as e:
        _study(devs)
    assert key in e.value.message and says in e.value.message


def test_auto_backend_with_remotes_and_no_gpu(monkeypatch):
    monkeypatch.setattr(session.gpu, "probe", lambda: [])
    assert session.resolve_backend(_study({"rpc": ["10.0.0.2:1"]})) == "rpc"
    assert session.resolve_backend(_study({})) == "cpu-rpc"


# ---------------------------------------------------------------- security


@pytest.mark.parametrize("host", ["127.0.0.1", "10.211.3.2", "192.168.1.7", "172.16.0.1", "169.254.1.1", "localhost"])
def test_private_hosts_raise_no_warning(host):
    assert remote.exposure(host, resolve=lambda h: ["127.0.0.1"]) is None


@pytest.mark.parametrize("host, resolved, shows", [
    pytest.param("8.8.8.8", [], "8.8.8.8 is not a loopback or private address", id="public-ip"),
    pytest.param("gpu.example.com", ["93.184.216.34"], "gpu.example.com (93.184.216.34)", id="public-name"),
    pytest.param("0.0.0.0", [], "listens on every interface", id="any"),
])
def test_public_hosts_warn(host, resolved, shows):
    w = remote.exposure(host, resolve=lambda h: resolved)
    assert w and shows in w and "no authentication" in w


def test_private_name_is_resolved_not_trusted_by_spelling():
    assert remote.exposure("gpu3.lan", resolve=lambda h: ["10.0.0.3"]) is None
    assert remote.exposure("gpu3.lan", resolve=lambda h: ["10.0.0.3", "93.184.216.34"])


def test_bind_address_is_the_endpoints_never_any():
    st = _study({"rpc": [{"endpoint": "10.0.0.3:50052", "ssh": "me@h3"},
                         {"endpoint": "gpu4:50052", "ssh": "me@gpu4"},
                         {"endpoint": "gpu5:50052", "ssh": "me@gpu5", "bind": "10.0.0.5"}]})
    a, b, c = st.devices.rpc
    assert remote.bind_address(a) == "10.0.0.3"
    with pytest.raises(ConfigError, match="bind ="):
        remote.bind_address(b)
    assert remote.bind_address(c) == "10.0.0.5"


# ---------------------------------------------------------------- reachability and preflight


def test_unreachable_endpoints_are_named_with_the_reason():
    why = {"10.0.0.2": None, "10.0.0.3": "connection refused (nothing listens on that port)",
           "10.0.0.4": "no answer within 3 s (a firewall, or the host is down)"}
    with pytest.raises(LaunchError) as e:
        remote.check_reachable(["10.0.0.2:50052", "10.0.0.3:50052", "10.0.0.4:1"],
                               connect=lambda h, p, t: why[h])
    msg = e.value.message
    assert "10.0.0.2" not in msg
    assert "10.0.0.3:50052: connection refused" in msg and "10.0.0.4:1: no answer" in msg
    assert "rpc-server -H" in e.value.tip and "ssh" in e.value.tip


def test_reach_says_why_over_a_real_socket(loopback):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert remote.reach("127.0.0.1", port, 1.0) is None
    assert remote.reach("127.0.0.1", port, 1.0) == "connection refused (nothing listens on that port)"


@pytest.mark.parametrize("raised, words", [
    (ConnectionRefusedError(111, "Connection refused"), "connection refused (nothing listens on that port)"),
    (TimeoutError(), "no answer within 2.5 s (a firewall, or the host is down)"),
    (socket.gaierror(-2, "Name or service not known"),
     "the host name does not resolve (Name or service not known)"),
    (OSError(101, "Network is unreachable"), "Network is unreachable"),
])
def test_reach_puts_each_failure_in_words(monkeypatch, raised, words):
    def connect(address, timeout):
        assert address == ("gpu-box", 50052) and timeout == 2.5
        raise raised

    monkeypatch.setattr(remote.socket, "create_connection", connect)
    assert remote.reach("gpu-box", 50052, 2.5) == words


class Recorder:
    """A `capture` that records argv and answers from a table keyed by a word of the remote command."""

    def __init__(self, answers: dict[str, tuple[int, str]] | None = None):
        self.calls: list[list[str]] = []
        self.answers = answers or {}

    def __call__(self, argv, timeout_s=30.0, env=None):
        self.calls.append(list(argv))
        for word, answer in self.answers.items():
            if word in " ".join(argv):
                return answer
        return 0, ""


def test_preflight_warns_checks_and_logs_in():
    st = _study({"rpc": ["8.8.8.8:50052", {"endpoint": "10.0.0.3:50052", "ssh": "me@h3",
                                           "rpc_server_path": "/opt/rpc-server"}]})
    warnings: list[str] = []
    rec = Recorder()
    remote.preflight(st.devices.rpc, warnings.append, capture=rec,
                     connect=lambda h, p, t: None if h == "8.8.8.8" else "refused")
    assert len(warnings) == 1 and "8.8.8.8:50052" in warnings[0]
    assert [c[-1] for c in rec.calls] == ["true", "test -x /opt/rpc-server"]
    assert all(c[0] == "ssh" and "BatchMode=yes" in c and "me@h3" in c for c in rec.calls)


def test_preflight_ssh_failure_says_what_to_do():
    st = _study({"rpc": [{"endpoint": "10.0.0.3:50052", "ssh": "me@h3"}]})
    rec = Recorder({"true": (255, "me@h3: Permission denied (publickey).")})
    with pytest.raises(LaunchError) as e:
        remote.preflight(st.devices.rpc, lambda w: None, capture=rec, connect=lambda h, p, t: "refused")
    assert "Permission denied" in e.value.message and "BatchMode" in e.value.tip


def test_preflight_refuses_to_start_where_something_listens():
    st = _study({"rpc": [{"endpoint": "10.0.0.3:50052", "ssh": "me@h3"}]})
    with pytest.raises(LaunchError, match="already listens at 10.0.0.3:50052"):
        remote.preflight(st.devices.rpc, lambda w: None, capture=Recorder(), connect=lambda h, p, t: None)


# ---------------------------------------------------------------- what a remote offers

LISTED = """\
load_backend: loaded RPC backend from /x/libggml-rpc.so
Available devices:
  CUDA0: NVIDIA H200 (143156 MiB, 142000 MiB free)
  RPC0: 10.0.0.2:50052 (24105 MiB, 24000 MiB free)
  RPC1: 10.0.0.3:50052 (81559 MiB, 80000 MiB free)
  RPC2: 10.0.0.3:50052 (81559 MiB, 81000 MiB free)
""".splitlines()

SERVER_LOG = """\
Starting RPC server v7.0.0
  endpoint       : 10.0.0.3:50052
  local cache    : n/a
Devices:
  CUDA0: NVIDIA A100-SXM4-80GB (81559 MiB, 80000 MiB free)
  CUDA1: NVIDIA A100-SXM4-80GB (81559 MiB, 81000 MiB free)
  transport      : TCP
Accepted client connection
""".splitlines()


def test_list_devices_argv_puts_rpc_first():
    argv = remote.list_devices_argv("/b/llama-server", ["10.0.0.2:50052", "10.0.0.3:50052"])
    assert argv == ["/b/llama-server", "--rpc", "10.0.0.2:50052,10.0.0.3:50052", "--list-devices"]


def test_offers_from_listing_server_log_and_declaration():
    found = remote.offers(["10.0.0.2:50052", "10.0.0.3:50052"], LISTED,
                          server_logs={"10.0.0.3:50052": SERVER_LOG}, declared={"10.0.0.2:50052": "cpu"})
    (a,), (b0, b1) = found["10.0.0.2:50052"], found["10.0.0.3:50052"]
    assert (a.name, a.key, a.total_mib, a.free_mib, a.backend, a.backend_source) == \
        ("RPC0", "RPC0[10.0.0.2:50052]", 24105, 24000, "cpu", "declared")
    assert (b0.name, b0.key, b0.backend, b0.description, b0.backend_source) == \
        ("RPC1", "RPC0[10.0.0.3:50052]", "cuda", "NVIDIA A100-SXM4-80GB", "rpc-server log")
    assert (b1.name, b1.key, b1.free_mib) == ("RPC2", "RPC1[10.0.0.3:50052]", 81000)
    lines = remote.describe(found)
    assert lines[0].startswith("RPC0[10.0.0.2:50052]: CPU (24105 MiB") and "as declared" in lines[0]
    assert "CUDA NVIDIA A100-SXM4-80GB" in lines[1]


def test_offers_unknown_backend_says_how_to_record_it():
    found = remote.offers(["10.0.0.2:50052"], LISTED)
    [d] = found["10.0.0.2:50052"]
    assert d.backend == "unknown"
    assert 'add backend = "cpu"' in remote.describe(found)[0]


@pytest.mark.parametrize("name, backend", [("CPU", "cpu"), ("CUDA0", "cuda"), ("Vulkan1", "vulkan"), ("MTL0", "metal")])
def test_backend_of(name, backend):
    assert remote.backend_of(name) == backend


def test_query_offers_fails_clearly_when_an_endpoint_offers_nothing():
    out = "\n".join(LISTED[:4] + ["RPC server version mismatch: 10.0.0.9:50052"])
    with pytest.raises(LaunchError) as e:
        remote.query_offers(Path("/b/llama-server"), ["10.0.0.2:50052", "10.0.0.9:50052"],
                            capture=lambda argv, timeout_s, env: (0, out))
    assert "10.0.0.9:50052" in e.value.message and "version mismatch" in e.value.message
    assert "same llama.cpp version" in e.value.tip


def test_query_offers_without_endpoints_runs_nothing():
    assert remote.query_offers(Path("/nope"), [], capture=lambda *a, **k: pytest.fail("ran")) == {}


def test_ledger_by_endpoint():
    led = ledger.parse([
        "load_tensors: RPC0[10.0.0.2:50052] model buffer size =    30.02 MiB",
        "load_tensors: RPC0[10.0.0.3:50052] model buffer size =    49.26 MiB",
        "load_tensors: RPC1[10.0.0.3:50052] model buffer size =    12.00 MiB",
        "load_tensors:   CPU_Mapped model buffer size =    31.25 MiB",
        "llama_kv_cache: RPC0[10.0.0.2:50052] KV buffer size =    30.62 MiB",
        "sched_reserve: RPC0[10.0.0.2:50052] compute buffer size =    48.10 MiB",
        "sched_reserve: CUDA0 compute buffer size =    48.10 MiB",
    ]).to_json()
    by = remote.ledger_by_endpoint(led)
    assert set(by) == {"10.0.0.2:50052", "10.0.0.3:50052"}
    assert by["10.0.0.2:50052"]["RPC0"]["model_mib"] == 30.02
    assert by["10.0.0.2:50052"]["RPC0"]["kv_mib"] == 30.62
    assert by["10.0.0.2:50052"]["RPC0"]["compute_mib"] == 48.1
    assert set(by["10.0.0.3:50052"]) == {"RPC0", "RPC1"}


# ---------------------------------------------------------------- joining remotes to local devices


def _found(*eps: str) -> dict:
    return {ep: [remote.RemoteDevice(endpoint=ep, index=0, name=f"RPC{i}", total_mib=100, free_mib=90,
                                     backend="cpu", backend_source="declared")]
            for i, ep in enumerate(eps)}


def test_merge_with_local_rpc_servers():
    local = devices.DeviceSetup(backend="cpu-rpc", count=2, server_args=("--rpc", "127.0.0.1:1,127.0.0.1:2"),
                                endpoints=("127.0.0.1:1", "127.0.0.1:2"), description="2 local rpc-server processes")
    eps = ["10.0.0.2:50052", "10.0.0.3:50052"]
    d = remote.merge_setup(local, eps, _found(*eps))
    assert d.server_args == ("--rpc", "127.0.0.1:1,127.0.0.1:2,10.0.0.2:50052,10.0.0.3:50052")
    assert (d.backend, d.count) == ("cpu-rpc", 4)
    assert [r["key"] for r in d.as_dict()["remotes"]] == ["RPC0[10.0.0.2:50052]", "RPC0[10.0.0.3:50052]"]
    assert d.description.startswith("2 local rpc-server processes + remote rpc-servers 10.0.0.2:50052 (CPU)")


def test_merge_with_cuda_and_with_nothing():
    cuda = devices.DeviceSetup(backend="cuda", count=1, env={"CUDA_VISIBLE_DEVICES": "0"}, description="1 CUDA GPU(s)")
    d = remote.merge_setup(cuda, ["10.0.0.2:50052"], _found("10.0.0.2:50052"))
    assert d.server_args == ("--rpc", "10.0.0.2:50052") and d.env == {"CUDA_VISIBLE_DEVICES": "0"} and d.count == 2
    with devices.none() as nothing:
        d = remote.merge_setup(nothing, ["10.0.0.2:50052"], _found("10.0.0.2:50052"))
    assert (d.backend, d.count, d.server_args) == ("rpc", 1, ("--rpc", "10.0.0.2:50052"))


def test_topology_records_remotes():
    st = _study({"rpc": ["10.0.0.2:50052", {"endpoint": "10.0.0.3:50052", "ssh": "me@h3"}]})
    t = remote.topology("rpc", 0, _found("10.0.0.2:50052", "10.0.0.3:50052"), st.devices.rpc)
    assert t["backend"] == "rpc" and t["local_count"] == 0
    assert [(r["endpoint"], r["managed_by"]) for r in t["remotes"]] == [("10.0.0.2:50052", None),
                                                                       ("10.0.0.3:50052", "ssh me@h3")]


# ---------------------------------------------------------------- ssh and scp argv


def test_ssh_argv_quotes_the_remote_command():
    cmd = ["/opt/my dir/rpc-server", "-H", "10.0.0.3", "-p", "50052", "; rm -rf ~"]
    argv = remote.ssh_argv("me@h3", cmd, ["-i", "/k"], tty=True)
    assert argv[0] == "ssh" and argv[argv.index("me@h3") + 1] == "--"
    assert "BatchMode=yes" in argv and "-tt" in argv and argv.index("-i") < argv.index("me@h3")
    # ssh keeps the first value of an option: BatchMode cannot be undone, the defaults can be changed
    assert argv.index("BatchMode=yes") < argv.index("-i") < argv.index("ConnectTimeout=10")
    assert shlex.split(argv[-1]) == cmd  # the remote shell gets back exactly the argv
    assert "-T" in remote.ssh_argv("me@h3", ["true"]) and "-tt" not in remote.ssh_argv("me@h3", ["true"])


def test_scp_argv():
    argv = remote.scp_argv("me@h3", [Path("/b/ggml-rpc-server"), Path("/b/libggml.so.0")], ".cache/x",
                           ["-o", "Port=2222"])
    assert argv[:3] == ["scp", "-q", "-p"] and "BatchMode=yes" in argv
    assert argv[-3:] == ["/b/ggml-rpc-server", "/b/libggml.so.0", "me@h3:.cache/x/"]
    assert argv.index("Port=2222") < argv.index("/b/ggml-rpc-server")


def test_files_to_copy_takes_sonames_and_the_variant_library(tmp_path):
    base, variant = tmp_path / "bin", tmp_path / "variant"
    base.mkdir()
    variant.mkdir()
    (base / "ggml-rpc-server").write_text("x")
    for lib in ("libggml-base", "libggml", "libggml-cpu", "libggml-rpc"):
        (base / f"{lib}.so.0.25.3").write_text(lib)
        (base / f"{lib}.so.0").symlink_to(f"{lib}.so.0.25.3")
        (base / f"{lib}.so").symlink_to(f"{lib}.so.0")
    (base / "libllama.so.0").write_text("no")
    (variant / "libggml-base.so.0").write_text("variant")
    art = type("Art", (), {"bin_dir": base, "lib_dir": variant, "binary": lambda self, n: base / n})()
    files = remote.files_to_copy(art)
    assert sorted(files) == ["ggml-rpc-server", "libggml-base.so.0", "libggml-cpu.so.0", "libggml-rpc.so.0",
                             "libggml.so.0"]
    assert files["libggml-base.so.0"] == variant / "libggml-base.so.0"
    stamp = remote.content_stamp(files)
    (variant / "libggml-base.so.0").write_text("changed")
    assert remote.content_stamp(files) != stamp


def test_start_and_stop_commands_work_in_a_posix_shell(tmp_path):
    """The shell snippets run by the remote's /bin/sh, here run by the local one."""
    pidfile = str(tmp_path / "rpc.pid")
    echo = remote.start_command("echo", "10.0.0.3", 50052, 2, pidfile, lib_dir="/l b")
    out = subprocess.run(["sh", "-c", shlex.join(echo)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "-H 10.0.0.3 -p 50052 -t 2"
    assert int(Path(pidfile).read_text())
    sleeper = remote.start_command("sleep", "10.0.0.3", 50052, None, pidfile)
    assert sleeper[-4:] == ["-H", "10.0.0.3", "-p", "50052"]
    p = subprocess.Popen(sleeper[:5] + ["30"])  # the same snippet, running `sleep 30`
    for _ in range(250):
        if Path(pidfile).exists() and Path(pidfile).read_text().strip() == str(p.pid):
            break
        time.sleep(0.02)
    assert Path(pidfile).read_text().strip() == str(p.pid)
    subprocess.run(["sh", "-c", shlex.join(remote.stop_command(pidfile))], check=True)
    assert p.wait(5) != 0 and not Path(pidfile).exists()
    subprocess.run(["sh", "-c", shlex.join(remote.stop_command(pidfile))], check=True)  # twice: still fine


def test_the_remote_rpc_server_starts_with_sigpipe_ignored(tmp_path):
    """A client gone mid-request must not kill the rpc-server llamalab starts over ssh (proc.spawn's
    ignore_sigpipe says why): the start snippet ignores SIGPIPE, and exec keeps it ignored."""
    probe = tmp_path / "probe"
    probe.write_text('#!/bin/sh\ngrep SigIgn: /proc/$$/status\n')
    probe.chmod(0o755)
    cmd = remote.start_command(str(probe), "10.0.0.3", 50052, None, str(tmp_path / "rpc.pid"))
    out = subprocess.run(["sh", "-c", shlex.join(cmd)], capture_output=True, text=True, check=True).stdout
    assert int(out.split()[1], 16) & (1 << (13 - 1)), out


def test_prepare_dir_command_copies_again_until_a_copy_completed(tmp_path):
    d = tmp_path / "rpc" / "abc"
    cmd = remote.prepare_dir_command(str(d))
    assert subprocess.run(["sh", "-c", shlex.join(cmd)]).returncode == 3 and d.is_dir()
    (d / "ggml-rpc-server").write_text("half a binary")  # an interrupted scp
    assert subprocess.run(["sh", "-c", shlex.join(cmd)]).returncode == 3
    subprocess.run(["sh", "-c", shlex.join(remote.mark_complete_command(str(d)))], check=True)
    assert subprocess.run(["sh", "-c", shlex.join(cmd)]).returncode == 0


@pytest.mark.parametrize("given, used", [("~/llama.cpp/rpc-server", "llama.cpp/rpc-server"), ("~", "."),
                                         ("/opt/rpc-server", "/opt/rpc-server"), ("bin/rpc", "bin/rpc")])
def test_remote_paths_from_home(given, used):
    assert remote.remote_path(given) == used


def _fake_art(tmp_path):
    base = tmp_path / "bin"
    base.mkdir()
    (base / "ggml-rpc-server").write_text("x")
    (base / "libggml-base.so.0").write_text("y")
    return type("Art", (), {"bin_dir": base, "lib_dir": None, "binary": lambda self, n: base / n})()


@pytest.mark.parametrize("there, calls", [
    pytest.param((0, ""), ["ssh"], id="already-copied"),
    pytest.param((3, ""), ["ssh", "scp", "ssh"], id="copy-then-mark"),
])
def test_install_copies_once_per_content(tmp_path, there, calls):
    spec = _study({"rpc": [{"endpoint": "10.0.0.3:50052", "ssh": "me@h3", "remote_dir": "~/rpc"}]}).devices.rpc[0]
    rec = Recorder({"mkdir": there})
    where = remote.install(spec, _fake_art(tmp_path), capture=rec)
    assert where.startswith("rpc/") and len(where) == len("rpc/") + 16
    assert [c[0] for c in rec.calls] == calls
    if "scp" in calls:
        assert rec.calls[1][-1] == f"me@h3:{where}/" and rec.calls[2][-1] == f"touch {where}/.complete"


def test_install_scp_failure_says_what_to_do(tmp_path):
    spec = _study({"rpc": [{"endpoint": "10.0.0.3:50052", "ssh": "me@h3"}]}).devices.rpc[0]
    rec = Recorder({"mkdir": (3, ""), "scp": (1, "scp: .cache/llamalab: No space left on device")})
    with pytest.raises(LaunchError) as e:
        remote.install(spec, _fake_art(tmp_path), capture=rec)
    assert "No space left" in e.value.message and "scp" in e.value.message


# What ssh printed in CI when the sshd in a test namespace dropped a new connection before key exchange (exit 255)
DROPPED = (255, "kex_exchange_identification: read: Connection reset by peer\r\n"
                "Connection reset by 10.211.99.2 port 22")


@pytest.mark.parametrize("rc, out, dropped", [
    pytest.param(*DROPPED, True, id="reset-before-kex"),
    pytest.param(255, "kex_exchange_identification: Connection closed by remote host\nConnection closed by 10.0.0.3 "
                 "port 22", True, id="closed-before-kex"),
    pytest.param(255, "Connection timed out during banner exchange\nConnection to 10.0.0.3 port 22 timed out", True,
                 id="banner-timeout"),
    pytest.param(1, "scp: Connection closed by 10.0.0.3 port 22", True, id="scp-closed"),
    pytest.param(255, "me@h3: Permission denied (publickey).", False, id="refused-login"),
    pytest.param(255, "Host key verification failed.", False, id="host-key"),
    pytest.param(255, "ssh: connect to host 10.0.0.3 port 22: Connection refused", False, id="no-sshd"),
    pytest.param(255, "ssh: Could not resolve hostname nowhere: Name or service not known", False, id="no-name"),
    pytest.param(0, "Connection reset by nothing: the command's own output", False, id="success"),
])
def test_a_connection_dropped_while_set_up_is_told_apart(rc, out, dropped):
    assert remote.connection_dropped(rc, out) is dropped


class Flaky(Recorder):
    """A `capture` whose first `drops` calls end as a dropped connection."""

    def __init__(self, drops: int, then: tuple[int, str] = (0, "")):
        super().__init__()
        self.drops, self.then = drops, then

    def __call__(self, argv, timeout_s=30.0, env=None):
        self.calls.append(list(argv))
        return DROPPED if len(self.calls) <= self.drops else self.then


@pytest.fixture
def no_waits(monkeypatch):
    waits: list[float] = []
    monkeypatch.setattr(remote.time, "sleep", waits.append)
    return waits


def test_a_dropped_ssh_connection_is_tried_again(no_waits):
    spec = _study({"rpc": [{"endpoint": "10.0.0.3:50052", "ssh": "me@h3"}]}).devices.rpc[0]
    rec = Flaky(drops=2)
    remote.check_login(spec, capture=rec)
    assert len(rec.calls) == 3 and no_waits == list(remote.RETRY_WAITS_S)


def test_a_connection_dropped_every_time_is_reported_with_what_ssh_said(no_waits):
    spec = _study({"rpc": [{"endpoint": "10.0.0.3:50052", "ssh": "me@h3"}]}).devices.rpc[0]
    rec = Flaky(drops=99)
    with pytest.raises(LaunchError) as e:
        remote.check_login(spec, capture=rec)
    assert len(rec.calls) == 1 + len(remote.RETRY_WAITS_S)
    assert "Connection reset by 10.211.99.2 port 22" in e.value.message and "exit status 255" in e.value.message


def test_a_refused_login_is_not_tried_again(no_waits):
    spec = _study({"rpc": [{"endpoint": "10.0.0.3:50052", "ssh": "me@h3"}]}).devices.rpc[0]
    rec = Recorder({"true": (255, "me@h3: Permission denied (publickey).")})
    with pytest.raises(LaunchError):
        remote.check_login(spec, capture=rec)
    assert len(rec.calls) == 1 and no_waits == []


def test_install_tries_a_dropped_copy_again(tmp_path, no_waits):
    spec = _study({"rpc": [{"endpoint": "10.0.0.3:50052", "ssh": "me@h3"}]}).devices.rpc[0]
    answers = iter([(3, ""), (1, "scp: Connection closed by 10.0.0.3 port 22"), (0, ""), (0, "")])
    calls: list[list[str]] = []

    def capture(argv, timeout_s=30.0, env=None):
        calls.append(list(argv))
        return next(answers)

    remote.install(spec, _fake_art(tmp_path), capture=capture)
    assert [c[0] for c in calls] == ["ssh", "scp", "scp", "ssh"] and no_waits == [1.0]
