"""Issue 17 item 8, with real llama.cpp: llama-server on IPv6 loopback (`--host ::1`) end to end, and a machine
whose ephemeral port range is exhausted (a network namespace with a two-port range, both ports held)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import netns
from llamahelp import FAST, children_of
from llamalab.core import net
from llamalab.store.db import Store

pytestmark = pytest.mark.llama

ONE = ['builds=[{name="copies4"}]', *FAST[1:], "workload.repeats=1"]


def _cli(args: list[str], data: Path, prefix: list[str] = (), timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLAMALAB_DATA": str(data), "PYTHONUNBUFFERED": "1"}
    sets = sum((["--set", o] for o in ONE), [])
    return subprocess.run([*prefix, sys.executable, "-m", "llamalab.cli", *args, *sets], capture_output=True,
                          text=True, env=env, timeout=timeout)


def _ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_host_ipv6_loopback_runs_end_to_end(demo_prep, tmp_path):
    if not _ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback")
    done = _cli(["run", "demo", "--host", "::1", "--json"], tmp_path / "data")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rpc-servers on 127.0.0.1" in done.stderr
    with Store(tmp_path / "data" / "results.db") as store:
        (run,) = store.runs()
        (cfg,) = store.configs(run["id"])
        assert cfg["status"] == "ok" and len(store.trials(run["id"])) == 1
    log = next((tmp_path / "data" / "runs").rglob("llama-server.log")).read_text()
    assert "http://[::1]:" in log or "[::1]" in log  # llama-server says where it listens
    assert net.url("::1", 8080) == "http://[::1]:8080"


def test_an_exhausted_port_range_is_a_clear_error(demo_prep, tmp_path):
    """In a namespace whose ephemeral range is two ports, both held: every start says so, nothing is left behind."""
    why = netns.unavailable()
    if why:
        pytest.skip(why)
    ns = f"llt-{os.getpid()}-p"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    holder = None
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_local_port_range=40000 40001"],
                       check=True)
        holder = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c",
                                   "import socket, time\n"
                                   "s = [socket.socket() for _ in range(2)]\n"
                                   "[x.bind(('127.0.0.1', 0)) for x in s]\n"
                                   "print('held', flush=True); time.sleep(600)"],
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "held"
        done = _cli(["run", "demo"], tmp_path / "data", prefix=["ip", "netns", "exec", ns], timeout=300)
        err = done.stderr
        assert "no free TCP port on 127.0.0.1" in err and "Traceback" not in err, err[-3000:]
        # the demo has [devices] vram budgets, so its devices start once before the run is stored (a budget they
        # cannot stand for stops the study there): with no free port nothing is stored, and the run says why
        assert done.returncode != 0
        db = tmp_path / "data" / "results.db"
        if db.exists():
            with Store(db) as store:
                assert store.runs() == []
        assert "ip_local_port_range" in err  # the tip
        time.sleep(0.5)
        assert not [p for p in children_of(os.getpid()) if p != holder.pid]
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        subprocess.run(["ip", "netns", "del", ns])
