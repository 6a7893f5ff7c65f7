"""Remote devices: rpc-servers on other hosts, joined with llama.cpp's RPC backend (docs/rpc.md).

A study names endpoints (`[devices] rpc = ["10.0.0.2:50052"]`). Before a run llamalab checks that each one answers,
asks llama-server what it offers there (`llama-server --rpc … --list-devices`: one line per device with its memory),
and records the topology. With `ssh = "user@host"` llamalab starts the rpc-server on that host itself, with the
binary it built (copied with scp) or one already there, and stops it again on exit, Ctrl-C or failure.

What the RPC protocol does not carry is which backend (CPU, CUDA …) the rpc-server runs: llamalab reads that from
the rpc-server's own start-up lines when it started the server, takes it from the study (`backend = "cuda"`) when
the user states it, and otherwise records "unknown".

rpc-server has no authentication and no encryption: whoever reaches its port can run code on its devices and read
the model and the prompts. llamalab warns for every endpoint that is not loopback or a private address, and never
binds an rpc-server to 0.0.0.0 on its own.

Pure parts (parsing, argv construction, merging) are separate from the parts that touch the network or start
processes; those take their runner (`capture`, `spawn`, `connect`) as an argument so that tests can hand in fakes.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import net, proc
from ..core.errors import ConfigError, LaunchError
from ..core.records import JsonObject
from ..llamacpp import argv
from ..logs import patterns
from ..study.endpoints import is_ipv4, parse_endpoint

if TYPE_CHECKING:
    from ..llamacpp.build import BuildArtifact
    from ..study.spec import RemoteSpec
    from .devices import DeviceSetup

REMOTE_HOME = ".cache/llamalab/rpc-server"  # relative to the remote user's home directory
# ssh takes the first value it is given for an option: BatchMode comes before the study's options (never a password
# prompt), the defaults after them (the study may change a timeout).
SSH_FIRST = ("-o", "BatchMode=yes")
SSH_DEFAULTS = ("-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3")
SECURITY = ("rpc-server has no authentication or encryption: whoever can reach that port can run code on its devices "
            "and read the model and prompts")


def _resolve(host: str) -> list[str]:
    try:
        return sorted({str(ai[4][0]) for ai in socket.getaddrinfo(host, None, socket.AF_INET)})  # IPv4: a str
    except OSError:
        return []


def exposure(host: str, resolve: Callable[[str], list[str]] = _resolve) -> str | None:
    """A warning when `host` is not loopback or a private (RFC 1918, link-local) address; None when it is."""
    if host in ("0.0.0.0", "::"):
        return f"{host} listens on every interface: {SECURITY}. Bind it to a private address instead."
    addrs = [host] if is_ipv4(host) else resolve(host)
    public = [a for a in addrs if not net.is_private(a)]
    if not public:
        return None
    shown = host if public == [host] else f"{host} ({', '.join(public)})"
    return (f"{shown} is not a loopback or private address: {SECURITY}. Keep rpc-servers on a private network, "
            "or reach them through an ssh tunnel (ssh -L 50052:127.0.0.1:50052 host) and use 127.0.0.1:50052.")


def bind_address(spec: RemoteSpec) -> str:
    """Where an rpc-server that llamalab starts listens: `bind`, else the endpoint's own IPv4 address. Never 0.0.0.0
    unless the user wrote it."""
    if spec.bind:
        return spec.bind
    ep = parse_endpoint(spec.endpoint)
    if not is_ipv4(ep.host):
        raise ConfigError(f"devices.rpc {spec.endpoint}: rpc-server binds to an IPv4 address, and {ep.host} is a name.",
                          tip=f"add bind = \"<{ep.host}'s private address>\" to that remote.")
    return ep.host


# ---------------------------------------------------------------- reachability

def reach(host: str, port: int, timeout_s: float = 3.0) -> str | None:
    """None when something accepts TCP connections on host:port; else why not, in words."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"no answer within {timeout_s:g} s (a firewall, or the host is down)"
    except ConnectionRefusedError:
        return "connection refused (nothing listens on that port)"
    except socket.gaierror as e:
        return f"the host name does not resolve ({e.strerror})"
    except OSError as e:
        return e.strerror or str(e)


def check_reachable(endpoints: Iterable[str], *, timeout_s: float = 3.0,
                    connect: Callable[[str, int, float], str | None] = reach) -> None:
    """Raise one LaunchError naming every endpoint that does not answer, and what to try."""
    bad = []
    for text in endpoints:
        ep = parse_endpoint(text)
        why = connect(ep.host, ep.port, timeout_s)
        if why:
            bad.append(f"  - {ep}: {why}")
    if bad:
        raise LaunchError("rpc endpoint(s) not reachable:\n" + "\n".join(bad),
                          tip="start `rpc-server -H <its address> -p <port>` there (from the same llama.cpp version: "
                              "the RPC protocol must match), check the firewall between the hosts, or let llamalab "
                              "start it over ssh with ssh = \"user@host\" in that remote's table.")


# ---------------------------------------------------------------- what a remote offers (pure parsing)

@dataclass(frozen=True)
class RemoteDevice:
    """One device behind an rpc-server, as llama.cpp names it in logs and ledgers."""

    endpoint: str
    index: int  # the device's number on that rpc-server
    name: str  # llama-server's global name for it: RPC0, RPC1 …
    total_mib: int | None = None
    free_mib: int | None = None
    backend: str = "unknown"  # what the rpc-server runs it on: cpu, cuda, vulkan, metal …
    description: str = ""  # the rpc-server's own name for it, e.g. "AMD EPYC" or "NVIDIA H200"
    backend_source: str = "unknown"  # "rpc-server log", "declared" or "unknown"

    @property
    def key(self) -> str:
        """The name llama.cpp gives its buffers (`RPC0[10.0.0.2:50052] model buffer size = …`)."""
        return f"RPC{self.index}[{self.endpoint}]"

    def as_dict(self) -> JsonObject:
        return {"endpoint": self.endpoint, "index": self.index, "name": self.name, "key": self.key,
                "total_mib": self.total_mib, "free_mib": self.free_mib, "backend": self.backend,
                "description": self.description, "backend_source": self.backend_source}


def list_devices_argv(llama_server: Path | str, endpoints: Sequence[str]) -> list[str]:
    """llama-server's device listing with the RPC endpoints added. `--rpc` must come first: `--list-devices` prints
    and exits as soon as it is parsed."""
    return [str(llama_server), "--rpc", ",".join(endpoints), "--list-devices"]


def parse_device_lines(lines: Iterable[str]) -> list[tuple[str, str, int, int]]:
    """(name, description, total MiB, free MiB) from `--list-devices` output or an rpc-server's start-up lines
    (`  CPU: AMD EPYC (24105 MiB, 24105 MiB free)`)."""
    return [found for line in lines if (found := patterns.device_line(line))]


def backend_of(device_name: str) -> str:
    """`CUDA0` → cuda, `CPU` → cpu, `Vulkan1` → vulkan, `MTL0` → metal."""
    base = re.sub(r"\d+$", "", device_name).lower()
    return {"mtl": "metal", "rocm": "hip"}.get(base, base)


def server_devices(lines: Iterable[str]) -> list[tuple[str, str, int, int]]:
    """The devices an rpc-server says it serves, from its start-up lines (the block after `Devices:`)."""
    out: list[tuple[str, str, int, int]] = []
    inside = False
    for line in lines:
        if line.strip() == "Devices:":
            inside, out = True, []
            continue
        if inside:
            found = parse_device_lines([line])
            if not found:
                inside = False
                continue
            out += found
    return out


def offers(endpoints: Sequence[str], listed: Iterable[str], *,
           server_logs: Mapping[str, Sequence[str]] | None = None,
           declared: Mapping[str, str | None] | None = None) -> dict[str, list[RemoteDevice]]:
    """Endpoint → its devices, from `--list-devices` output; the backend from the rpc-server's own log where
    llamalab started it, else as declared in the study, else unknown."""
    server_logs = server_logs or {}
    declared = declared or {}
    out: dict[str, list[RemoteDevice]] = {ep: [] for ep in endpoints}
    for name, desc, total, free in parse_device_lines(listed):
        if desc in out and name.startswith("RPC"):
            out[desc].append(RemoteDevice(endpoint=desc, index=len(out[desc]), name=name, total_mib=total,
                                          free_mib=free))
    for ep, devs in out.items():
        own = server_devices(server_logs.get(ep, ()))
        for i, d in enumerate(devs):
            if i < len(own):
                devs[i] = replace(d, backend=backend_of(own[i][0]), description=own[i][1],
                                  backend_source="rpc-server log")
            elif declared.get(ep):
                devs[i] = replace(d, backend=str(declared[ep]), backend_source="declared")
    return out


def query_offers(llama_server: Path, endpoints: Sequence[str], *, env: Mapping[str, str] | None = None,
                 server_logs: Mapping[str, Sequence[str]] | None = None,
                 declared: Mapping[str, str | None] | None = None,
                 capture: Callable[..., tuple[int, str]] = proc.capture) -> dict[str, list[RemoteDevice]]:
    """Ask llama-server what each endpoint offers. An endpoint with no device is an error that says why it may be."""
    if not endpoints:
        return {}
    rc, out = capture(list_devices_argv(llama_server, endpoints), timeout_s=60.0, env=env)
    found = offers(endpoints, out.splitlines(), server_logs=server_logs, declared=declared)
    empty = [ep for ep, devs in found.items() if not devs]
    if rc != 0 or empty:
        tail = "\n".join("    " + ln for ln in out.splitlines()[-8:])
        which = ", ".join(empty) if empty else ", ".join(endpoints)
        raise LaunchError(f"llama-server saw no device at {which} (exit status {rc}). Its output ends:\n{tail}",
                          tip="the rpc-server there must come from the same llama.cpp version as llamalab's build "
                              "(the RPC protocol version must match): run `rpc-server --help` there, or let llamalab "
                              "start its own build over ssh.")
    return found


def describe(devs: Mapping[str, Sequence[RemoteDevice]]) -> list[str]:
    """One line per remote device, for progress output."""
    lines = []
    for ds in devs.values():
        for d in ds:
            mem = f"{d.total_mib} MiB, {d.free_mib} MiB free" if d.total_mib is not None else "memory unknown"
            desc = f" {d.description}" if d.description else ""
            if d.backend == "unknown":
                what = (f"backend unknown ({mem}; the RPC protocol does not say: add backend = \"cpu\" or \"cuda\" "
                        "to its table to record it)")
            else:
                source = "as declared" if d.backend_source == "declared" else f"from {d.backend_source}"
                what = f"{d.backend.upper()}{desc} ({mem}; backend {source})"
            lines.append(f"{d.key}: {what}")
    return lines


_RPC_BUFFER = re.compile(r"RPC(?P<index>\d+)\[(?P<endpoint>.+)\]")  # fullmatch: `RPC1[[::1]:50052]` too


def ledger_by_endpoint(ledger: Mapping[str, Any]) -> dict[str, dict[str, JsonObject]]:
    """A stored ledger's device buffers regrouped by rpc endpoint: endpoint → {"RPC0": {model_mib, kv_mib, …}}."""
    out: dict[str, dict[str, JsonObject]] = {}
    for name, bufs in (ledger.get("devices") or {}).items():
        if m := _RPC_BUFFER.fullmatch(name):
            out.setdefault(m.group("endpoint"), {})[f"RPC{m.group('index')}"] = dict(bufs)
    return out


# ---------------------------------------------------------------- ssh management (argv construction, pure)

def ssh_argv(target: str, command: Sequence[str], options: Sequence[str] = (), *, tty: bool = False) -> list[str]:
    """`ssh … target -- 'command'`. ssh hands the remote side one string to its shell, so the argv is quoted with
    shlex.join there; nothing the study says is interpreted by a shell. With `tty`, closing the connection hangs
    up the remote session, which stops what runs in it even if llamalab could not say goodbye."""
    return ["ssh", *SSH_FIRST, *options, *SSH_DEFAULTS, "-tt" if tty else "-T", target, "--",
            shlex.join([str(c) for c in command])]


def scp_argv(target: str, files: Sequence[Path], remote_dir: str, options: Sequence[str] = ()) -> list[str]:
    return ["scp", "-q", "-p", *SSH_FIRST, *options, *SSH_DEFAULTS, *[str(f) for f in files],
            f"{target}:{remote_dir}/"]


_SONAME = re.compile(r"^libggml[\w-]*\.so\.\d+$")


def files_to_copy(art: BuildArtifact) -> dict[str, Path]:
    """rpc-server and the ggml libraries it loads (by their SONAME), a copies variant's own library first."""
    files = {"ggml-rpc-server": art.binary("ggml-rpc-server")}
    for d in [art.bin_dir] + ([art.lib_dir] if art.lib_dir else []):  # later wins: the variant's library
        for p in sorted(Path(d).glob("libggml*.so.*")):
            if _SONAME.match(p.name):
                files[p.name] = p
    return files


def content_stamp(files: Mapping[str, Path]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0")
        with open(files[name], "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def remote_path(path: str) -> str:
    """A path on the remote host as the study wrote it, with a leading `~/` made relative (ssh starts in the home
    folder; a quoted `~` would not expand)."""
    if path in ("~", "~/"):
        return "."
    return path[2:] if path.startswith("~/") else path


COMPLETE = ".complete"  # written after a copy finished, so that an interrupted scp is copied again


def prepare_dir_command(remote_dir: str) -> list[str]:
    """mkdir the folder; exit 0 when a finished copy of rpc-server is already there, 3 when it must be copied."""
    return ["sh", "-c", f'mkdir -p "$0" && {{ test -f "$0/{COMPLETE}" || exit 3; }}', remote_dir]


def mark_complete_command(remote_dir: str) -> list[str]:
    return ["touch", f"{remote_dir}/{COMPLETE}"]


def start_command(binary: str, bind: str, port: int, threads: int | None, pidfile: str,
                  lib_dir: str | None = None) -> list[str]:
    """Run rpc-server in the foreground of the ssh session, its pid written to `pidfile` for `stop_command`, with
    SIGPIPE ignored (it stays ignored across exec): rpc-server writes replies with plain send(), and a client gone
    mid-request (a llama-server killed after its memory fit) would otherwise kill it (proc.spawn's ignore_sigpipe)."""
    argv = [binary, "-H", bind, "-p", str(port)] + (["-t", str(threads)] if threads else [])
    env = ["env", f"LD_LIBRARY_PATH={lib_dir}"] if lib_dir else []
    return ["sh", "-c", 'trap "" PIPE; echo $$ > "$0" && exec "$@"', pidfile, *env, *argv]


def stop_command(pidfile: str) -> list[str]:
    """Stop the rpc-server whose pid `start_command` wrote, if it still runs; remove the pidfile."""
    return ["sh", "-c", 'p=$(cat "$0" 2>/dev/null) && [ -n "$p" ] && kill "$p" 2>/dev/null; rm -f "$0"; exit 0',
            pidfile]


def check_command(path: str) -> list[str]:
    return ["test", "-x", path]


# ---------------------------------------------------------------- ssh management (effects)

@dataclass
class Managed:
    """An rpc-server llamalab started over ssh: the ssh child and its output (the rpc-server's start-up lines)."""

    spec: RemoteSpec
    child: proc.Child
    pidfile: str
    log_lines: list[str] = field(default_factory=list)


def _ssh_fail(spec: RemoteSpec, what: str, rc: int, out: str) -> LaunchError:
    tail = "\n".join("    " + ln for ln in out.strip().splitlines()[-6:])
    return LaunchError(f"{what} on {spec.ssh} failed (exit status {rc}):\n{tail}",
                       tip=f"check `ssh {spec.ssh} true` works without a password prompt (llamalab runs ssh with "
                           "BatchMode=yes: use a key, e.g. ssh-copy-id); pass -i/-F/-o options in ssh_options.")


# What ssh (or scp) prints when the server dropped the connection before it was set up: an sshd throttling new
# connections (MaxStartups drops some of them at random once several are unauthenticated), restarting, or short of
# processes. Worth another try; a refused login, an unknown host key or a name that does not resolve is not.
_DROPPED = re.compile(r"kex_exchange_identification|ssh_exchange_identification|Connection reset by|"
                      r"Connection closed by|Connection timed out during banner exchange")
RETRY_WAITS_S = (1.0, 2.0)


def connection_dropped(rc: int, out: str) -> bool:
    """True where an ssh or scp command failed because the connection was dropped while being set up."""
    return rc != 0 and _DROPPED.search(out) is not None


def _over_ssh(capture: Callable[..., tuple[int, str]], argv: list[str], timeout_s: float) -> tuple[int, str]:
    """`capture(argv)`, tried again (after 1 s, then 2 s) while the connection is dropped during set-up."""
    rc, out = capture(argv, timeout_s=timeout_s)
    for wait in RETRY_WAITS_S:
        if not connection_dropped(rc, out):
            break
        time.sleep(wait)
        rc, out = capture(argv, timeout_s=timeout_s)
    return rc, out


def check_login(spec: RemoteSpec, capture: Callable[..., tuple[int, str]] = proc.capture) -> None:
    """ssh works without a prompt, and the rpc-server named by rpc_server_path is there."""
    assert spec.ssh
    rc, out = _over_ssh(capture, ssh_argv(spec.ssh, ["true"], spec.ssh_options), 30.0)
    if rc != 0:
        raise _ssh_fail(spec, "ssh", rc, out)
    if spec.rpc_server_path:
        rc, out = _over_ssh(capture, ssh_argv(spec.ssh, check_command(remote_path(spec.rpc_server_path)),
                                              spec.ssh_options), 30.0)
        if rc != 0:
            raise LaunchError(f"rpc_server_path {spec.rpc_server_path} is not an executable on {spec.ssh}.",
                              tip="give the full path of rpc-server there, or leave rpc_server_path out so that "
                                  "llamalab copies the one it built.")


def install(spec: RemoteSpec, art: BuildArtifact, capture: Callable[..., tuple[int, str]] = proc.capture) -> str:
    """Copy llamalab's rpc-server and its libraries to the remote (once per content); returns the remote folder."""
    assert spec.ssh
    files = files_to_copy(art)
    if not files["ggml-rpc-server"].is_file():
        raise LaunchError(f"rpc-server not found at {files['ggml-rpc-server']}",
                          tip="the build needs -DGGML_RPC=ON and the ggml-rpc-server target.")
    remote_dir = f"{remote_path(spec.remote_dir or REMOTE_HOME)}/{content_stamp(files)}"
    rc, out = _over_ssh(capture, ssh_argv(spec.ssh, prepare_dir_command(remote_dir), spec.ssh_options), 30.0)
    if rc == 3:
        rc, out = _over_ssh(capture, scp_argv(spec.ssh, list(files.values()), remote_dir, spec.ssh_options), 600.0)
        if rc != 0:
            raise _ssh_fail(spec, "copying rpc-server with scp", rc, out)
        rc, out = _over_ssh(capture, ssh_argv(spec.ssh, mark_complete_command(remote_dir), spec.ssh_options), 30.0)
        if rc != 0:
            raise _ssh_fail(spec, f"touch {remote_dir}/{COMPLETE}", rc, out)
    elif rc != 0:
        raise _ssh_fail(spec, f"mkdir {remote_dir}", rc, out)
    return remote_dir


@contextmanager
def managed(spec: RemoteSpec, art: BuildArtifact, log_dir: Path, *, ready_timeout_s: float = 30.0,
            capture: Callable[..., tuple[int, str]] = proc.capture,
            spawn: Callable[..., proc.Child] = proc.spawn) -> Iterator[Managed]:
    """Start an rpc-server on `spec.ssh`, wait until its endpoint answers, yield, and stop it — on normal exit,
    Ctrl-C or failure alike. Two ways down: closing the ssh connection hangs up its terminal (the rpc-server
    dies with it), and an explicit `kill` of the pid it wrote."""
    ssh = spec.ssh
    assert ssh
    ep = parse_endpoint(spec.endpoint)
    bind = bind_address(spec)
    if spec.rpc_server_path:
        binary, lib_dir = remote_path(spec.rpc_server_path), None
    else:
        lib_dir = install(spec, art, capture)
        binary = f"{lib_dir}/ggml-rpc-server"
    home = remote_path(spec.remote_dir or REMOTE_HOME)
    pidfile = f"{home}/rpc-{ep.port}-{uuid.uuid4().hex[:8]}.pid"
    if spec.rpc_server_path:
        rc, out = _over_ssh(capture, ssh_argv(ssh, ["mkdir", "-p", home], spec.ssh_options), 30.0)
        if rc != 0:
            raise _ssh_fail(spec, f"mkdir {home}", rc, out)
    log_path = log_dir / f"rpc-server-{ep.host}-{ep.port}.log"
    argv = ssh_argv(ssh, start_command(binary, bind, ep.port, spec.threads, pidfile, lib_dir), spec.ssh_options,
                    tty=True)
    with ExitStack() as stack:
        child = spawn(argv, log_path=log_path)
        stack.callback(child.terminate)
        stack.callback(lambda: _over_ssh(capture, ssh_argv(ssh, stop_command(pidfile), spec.ssh_options), 30.0))
        if not net.wait_port(ep.host, ep.port, ready_timeout_s, alive=child.alive):
            tail = "\n".join("    " + ln for ln in child.log_tail(10))
            raise LaunchError(f"the rpc-server started over ssh on {spec.ssh} did not answer at {ep} within "
                              f"{ready_timeout_s:g} s. Log: {log_path}\n{tail}",
                              tip=f"check that {bind} is an address of {spec.ssh}, that port {ep.port} is free there, "
                                  "and that no firewall stands between; on a host with another CPU or OS, give "
                                  "rpc_server_path of an rpc-server built there (llamalab's build is native to this "
                                  "machine).")
        m = Managed(spec=spec, child=child, pidfile=pidfile)
        for _ in range(40):  # the start-up lines arrive through ssh a moment after the port opens
            m.log_lines = [ln.replace("\r", "") for ln in child.log_tail(40)]
            if server_devices(m.log_lines):
                break
            time.sleep(0.05)
        yield m


# ---------------------------------------------------------------- joining remote devices to a device setup

def merge_setup(dev: DeviceSetup, endpoints: Sequence[str],
                found: Mapping[str, Sequence[RemoteDevice]]) -> DeviceSetup:
    """The local setup with the remote endpoints added to its `--rpc` list (local rpc-servers first)."""
    args = list(dev.server_args)
    rpc = argv.value(args, "--rpc")
    local: list[str] = rpc.split(",") if rpc is not None else []
    args = argv.without(args, with_value={"--rpc"})
    all_eps = local + [e for e in endpoints if e not in local]
    n_remote = sum(len(found.get(e, ())) for e in endpoints)
    def backends(ep: str) -> str:
        names = {d.backend.upper() if d.backend != "unknown" else "?" for d in found.get(ep, ())}
        return ", ".join(sorted(names)) or "?"

    if (named := argv.value(args, "-dev")) is not None:  # named local devices (two Vulkan devices on one GPU):
        names = [d.key for e in endpoints for d in found.get(e, ())]  # name the remote ones too, first, where
        args = argv.put(args, "-dev", ",".join([*names, named]))  # llama.cpp puts RPC devices by default

    remote_desc = "; ".join(f"{e} ({backends(e)})" for e in endpoints)
    desc = (f"{dev.description} + " if dev.description and dev.count else "") + f"remote rpc-servers {remote_desc}"
    return replace(dev, backend=dev.backend if dev.count else "rpc", count=dev.count + n_remote,
                   server_args=(*args, "--rpc", ",".join(all_eps)), endpoints=tuple(all_eps), description=desc,
                   remotes=tuple(d.as_dict() for e in endpoints for d in found.get(e, ())))


@contextmanager
def attached(dev: DeviceSetup, specs: Sequence[RemoteSpec], art: BuildArtifact,
             log_dir: Path) -> Iterator[DeviceSetup]:
    """Start the ssh-managed rpc-servers among `specs`, ask every endpoint what it offers, and yield `dev` with
    the remotes added. Managed servers stop when the block ends, however it ends."""
    with ExitStack() as stack:
        logs: dict[str, list[str]] = {}
        for spec in specs:
            if spec.ssh:
                logs[spec.endpoint] = stack.enter_context(managed(spec, art, log_dir)).log_lines
        eps = [s.endpoint for s in specs]
        check_reachable([e for e in eps if e not in logs])
        found = query_offers(art.binary("llama-server"), eps, env=art.env(), server_logs=logs,
                             declared={s.endpoint: s.backend for s in specs})
        yield merge_setup(dev, eps, found)


def preflight(specs: Sequence[RemoteSpec], warn: Callable[[str], None],
              capture: Callable[..., tuple[int, str]] = proc.capture,
              connect: Callable[[str, int, float], str | None] = reach) -> None:
    """Before any build: warn about exposed endpoints, check the unmanaged ones answer, and that ssh works for the
    managed ones (and that nothing already listens where llamalab would start a server)."""
    for spec in specs:
        ep = parse_endpoint(spec.endpoint)
        if w := exposure(ep.host):
            warn(f"endpoint {ep}: {w}")
        if spec.ssh and spec.bind and (w := exposure(spec.bind)):
            warn(f"rpc-server on {spec.ssh} binds {spec.bind}: {w}")
    check_reachable([s.endpoint for s in specs if not s.ssh], connect=connect)
    for spec in specs:
        if spec.ssh:
            bind_address(spec)
            check_login(spec, capture)
            ep = parse_endpoint(spec.endpoint)
            if connect(ep.host, ep.port, 3.0) is None:
                raise LaunchError(f"something already listens at {ep}, where llamalab would start an rpc-server "
                                  f"over ssh on {spec.ssh}.",
                                  tip="stop it, choose another port in the endpoint, or drop ssh = … to use the "
                                      "server that runs there.")


def topology(backend: str, local_count: int, found: Mapping[str, Sequence[RemoteDevice]],
             specs: Sequence[RemoteSpec]) -> JsonObject:
    """What a run records in runs.devices_json: the local part and each remote endpoint with its devices."""
    by_ep = {s.endpoint: s for s in specs}
    return {
        "backend": backend, "local_count": local_count,
        "remotes": [{"endpoint": ep, "managed_by": f"ssh {by_ep[ep].ssh}" if ep in by_ep and by_ep[ep].ssh else None,
                     "devices": [d.as_dict() for d in devs]}
                    for ep, devs in found.items()],
    }
