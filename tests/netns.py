"""Hosts made of network namespaces, for the cross-host RPC test (test_rpc_netns.py). Test support, not llamalab.

Each "host" is a namespace joined to the root namespace by a veth pair on its own private /24 (10.211.X.0/24: the
root side is .1, the namespace side .2), with the link shaped on both ends: `tc netem delay D rate R` where the kernel
has sch_netem; where it has not (some VM kernels), `tbf rate R` limits the rate and a user-space relay
(netdelay.py) in the namespace adds D per direction. An rpc-server runs inside each namespace, bound to the
namespace's address. Every command is an argv list run through llamalab.core.proc; `down()` removes everything
`up()` made and is safe to call twice or after a partial `up()`.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from llamalab.core import net, proc

RPC_PORT = 50052
RELAY = Path(__file__).with_name("netdelay.py")


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces (ip netns add)"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs iproute2 (ip and tc)"
    name = f"llt-probe-{os.getpid()}"
    rc, out = proc.capture(["ip", "netns", "add", name])
    if rc != 0:
        return f"`ip netns add` failed here: {out.strip()}"
    proc.capture(["ip", "netns", "del", name])
    return None


def sweep_stale() -> list[str]:
    """Delete namespaces that a killed test run left behind (`llt-<pid>-x` whose pid is gone); their veth pairs go
    with them. Returns their names."""
    gone = []
    for line in proc.capture(["ip", "netns", "list"])[1].splitlines():
        m = re.match(r"^(llt-(\d+)-[a-h])\b", line.strip())
        if m and not Path(f"/proc/{m.group(2)}").exists():
            proc.capture(["ip", "netns", "del", m.group(1)])
            gone.append(m.group(1))
    return gone


def _run(*args: str, ns: str | None = None) -> str:
    """Run a command (in namespace `ns`); raise with its output when it fails."""
    argv = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    rc, out = proc.capture(argv, timeout_s=30)
    if rc != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({rc}): {out.strip()}")
    return out


def _free_subnets(n: int) -> list[int]:
    """n third octets X with 10.211.X.0/24 unused on this machine, starting from one derived from the pid."""
    used = _run("ip", "-4", "addr") + _run("ip", "-4", "route")
    start = 10 + (os.getpid() * 7) % 200
    out = []
    for k in range(240):
        x = 10 + (start - 10 + k) % 240
        if f"10.211.{x}." not in used:
            out.append(x)
            if len(out) == n:
                return out
    raise RuntimeError("no free 10.211.X.0/24 subnet")


@dataclass
class Host:
    ns: str
    veth: str  # root side
    peer: str  # namespace side
    gateway: str  # root side address
    address: str  # the namespace's address: where its rpc-server listens
    port: int = RPC_PORT

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.port}"


@dataclass
class Lab:
    count: int = 2
    delay_ms: float = 2.0
    rate: str = "1gbit"
    tag: str = field(default_factory=lambda: str(os.getpid()))
    force_relay: bool = False  # use the relay even where netem exists, or with no delay (to measure the relay)
    delays_ms: list[float] | None = None  # a delay per host, each way (None: `delay_ms` for every host)
    hosts: list[Host] = field(default_factory=list)
    shaping: dict = field(default_factory=dict)
    children: list[proc.Child] = field(default_factory=list)
    _made_ns: list[str] = field(default_factory=list)
    _made_links: list[str] = field(default_factory=list)

    def up(self) -> Lab:
        sweep_stale()
        for i, x in enumerate(_free_subnets(self.count)):
            letter = "abcdefgh"[i]
            h = Host(ns=f"llt-{self.tag}-{letter}", veth=f"llt{self.tag}{letter}r"[:15],
                     peer=f"llt{self.tag}{letter}n"[:15], gateway=f"10.211.{x}.1", address=f"10.211.{x}.2")
            _run("ip", "netns", "add", h.ns)
            self._made_ns.append(h.ns)
            _run("ip", "link", "add", h.veth, "type", "veth", "peer", "name", h.peer)
            self._made_links.append(h.veth)
            _run("ip", "link", "set", h.peer, "netns", h.ns)
            _run("ip", "addr", "add", f"{h.gateway}/24", "dev", h.veth)
            _run("ip", "link", "set", h.veth, "up")
            _run("ip", "addr", "add", f"{h.address}/24", "dev", h.peer, ns=h.ns)
            _run("ip", "link", "set", h.peer, "up", ns=h.ns)
            _run("ip", "link", "set", "lo", "up", ns=h.ns)
            self.hosts.append(h)
        self.shaping = self._shape()
        return self

    def delay_of(self, i: int) -> float:
        """Host i's delay each way, in ms."""
        return self.delays_ms[i] if self.delays_ms is not None else self.delay_ms

    def _shape(self) -> dict:
        """netem on both ends of every link; without sch_netem (or with force_relay): tbf for the rate, and the relay
        for the delay."""
        tbf = ["tbf", "rate", self.rate, "burst", "256kb", "latency", "50ms"]
        ends = [(i, ns, dev) for i, h in enumerate(self.hosts) for ns, dev in ((None, h.veth), (h.ns, h.peer))]
        netem = ["netem", "delay", f"{self.delay_ms:g}ms", "rate", self.rate]
        mode = "netem"
        try:
            if self.force_relay:
                raise RuntimeError("netem not wanted: unknown")
            for i, ns, dev in ends:
                _run("tc", "qdisc", "replace", "dev", dev, "root", "netem", "delay", f"{self.delay_of(i):g}ms",
                     "rate", self.rate, ns=ns)
        except RuntimeError as e:
            if "unknown" not in str(e).lower():
                raise
            delayed = any(self.delay_of(i) > 0 for i in range(len(self.hosts)))
            mode = "tbf+relay" if delayed or self.force_relay else "tbf"
            for _, ns, dev in ends:
                _run("tc", "qdisc", "replace", "dev", dev, "root", *tbf, ns=ns)
        why = "relay asked for" if self.force_relay else "this kernel has no sch_netem"
        return {"mode": mode, "delay_ms_each_way": self.delay_ms, "rate": self.rate,
                "delays_ms_each_way": [self.delay_of(i) for i in range(len(self.hosts))],
                "qdisc": " ".join(netem if mode == "netem" else tbf), "rtt_added_ms": 2 * self.delay_ms,
                "note": {"netem": "tc netem on both ends of each veth pair",
                         "tbf": f"{why}: tc tbf limits the rate on both ends; no delay",
                         "tbf+relay": f"{why}: tc tbf limits the rate on both ends, and a user-space relay in each "
                                      "namespace delays each direction (its own scheduling adds a little)"}[mode]}

    def start_rpc(self, binary: Path, env: dict[str, str], log_dir: Path, threads: int = 1) -> None:
        """An rpc-server in each namespace, bound to the namespace's address (behind the relay in tbf+relay mode)."""
        for i, h in enumerate(self.hosts):
            relay = self.shaping.get("mode") == "tbf+relay"
            port = h.port + 1 if relay else h.port
            c = proc.spawn(["ip", "netns", "exec", h.ns, str(binary), "-H", h.address, "-p", str(port),
                            "-t", str(threads)], log_path=log_dir / f"{h.ns}-rpc-server.log", env=env,
                           ignore_sigpipe=True)  # as docs/rpc.md tells users to start theirs
            self.children.append(c)
            if not net.wait_port(h.address, port, 30, alive=c.alive):
                raise RuntimeError(f"rpc-server in {h.ns} did not listen on {h.address}:{port}: {c.log_tail(10)}")
            if relay:
                # a network costs the hosts no CPU: the relay runs at high priority so that waiting for a core
                # (2 shared cores) adds as little as possible to the delay it models
                r = proc.spawn(["ip", "netns", "exec", h.ns, "nice", "-n", "-15", sys.executable, str(RELAY),
                                h.address, str(h.port), h.address, str(port), f"{self.delay_of(i):g}"],
                               log_path=log_dir / f"{h.ns}-relay.log")
                self.children.append(r)
                if not net.wait_port(h.address, h.port, 30, alive=r.alive):
                    raise RuntimeError(f"relay in {h.ns} did not listen on {h.endpoint}: {r.log_tail(10)}")

    def down(self) -> None:
        for c in reversed(self.children):
            c.terminate(grace_s=3.0)
        self.children.clear()
        for link in self._made_links:
            proc.capture(["ip", "link", "del", link])
        self._made_links.clear()
        for ns in self._made_ns:
            for _ in range(20):
                rc, _ = proc.capture(["ip", "netns", "del", ns])
                if rc == 0 or ns not in proc.capture(["ip", "netns", "list"])[1]:
                    break
                time.sleep(0.1)
        self._made_ns.clear()

