"""Small network helpers: free loopback ports, waiting for a TCP listener, address classes."""

from __future__ import annotations

import ipaddress
import socket
import time


def free_port(host: str = "127.0.0.1") -> int:
    """A port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_port(host: str, port: int, timeout_s: float, alive=lambda: True) -> bool:
    """Wait until something accepts connections on host:port; stop early when `alive()` turns false."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if port_open(host, port):
            return True
        if not alive():
            return False
        time.sleep(0.05)
    return False


def is_private(host: str) -> bool:
    """Loopback or a private (RFC 1918 / ULA / link-local) address: where an unauthenticated rpc-server may listen."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost"
    return ip.is_loopback or ip.is_private or ip.is_link_local
