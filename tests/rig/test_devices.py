"""rig.devices with the real rpc-server: a client that goes away mid-request must not take the rpc-server down.

llama.cpp's rpc-server answers with plain send(): when the client closed its socket before the answer (as a
llama-server does when llamalab kills it the moment its memory fit is printed), the answer's second send() raises
SIGPIPE, and with SIGPIPE's default action the rpc-server died (exit -13) and every later dry run or trial of the
study failed with "Failed to connect to 127.0.0.1:PORT" (a CI failure of
`test_tune_moe_searches_experts_in_host_memory`).
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

from llamalab.core import proc
from llamalab.rig import devices

pytestmark = pytest.mark.llama

RPC_CMD_HELLO = 14  # ggml-rpc.cpp: static_assert(RPC_CMD_HELLO == 14)
HELLO_REQ_SIZE = 24  # sizeof(rpc_msg_hello_req): RPC_CONN_CAPS_SIZE bytes (transport.h)


def _hello_and_hang_up(endpoint: str) -> None:
    """Ask for the rpc-server's HELLO answer and close the socket without reading it (an orderly close: FIN)."""
    host, port = endpoint.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(bytes([RPC_CMD_HELLO]) + struct.pack("<Q", HELLO_REQ_SIZE) + bytes(HELLO_REQ_SIZE))


def _sigpipe_ignored(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        ign = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    return bool(ign & (1 << (13 - 1)))  # SIGPIPE is 13


def test_rpc_servers_outlive_clients_that_hang_up_mid_request(demo_prep, tmp_path):
    art = demo_prep.artifacts["copies4"]
    with devices.local_rpc(art, 2, tmp_path, threads=1) as dev:
        servers = [c for c in proc.live_children() if c.argv[0].endswith("ggml-rpc-server")
                   and any(c.argv[c.argv.index("-p") + 1] == ep.rsplit(":", 1)[1] for ep in dev.endpoints)]
        assert len(servers) == 2 and all(_sigpipe_ignored(c.pid) for c in servers)
        for _ in range(20):
            for ep in dev.endpoints:
                _hello_and_hang_up(ep)
        time.sleep(0.2)
        # both still serve: llama-server sees their two devices and their memory
        mem = devices.list_memory(art.binary("llama-server"), dev.server_args, env=art.env())
        assert [d.name for d in mem] == ["RPC0", "RPC1"], mem
    logs = [(tmp_path / f"rpc-server-{i}.log").read_text() for i in range(2)]
    assert all(log.count("Accepted client connection") >= 21 for log in logs), logs[0][-500:]

