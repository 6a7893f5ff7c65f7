"""Small network helpers: free loopback ports, waiting for a TCP listener, address classes."""

from __future__ import annotations

import errno
import ipaddress
import socket
import time
from collections.abc import Callable

from .errors import LaunchError


def is_ipv6(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address)
    except ValueError:
        return False


def url(host: str, port: int) -> str:
    """`http://host:port`, with an IPv6 address in brackets (`http://[::1]:8080`)."""
    return f"http://[{host}]:{port}" if is_ipv6(host) else f"http://{host}:{port}"


def free_port(host: str = "127.0.0.1") -> int:
    """A port that nothing listens on right now (the OS picks it). IPv4 or IPv6, as `host` is."""
    try:
        with socket.socket(socket.AF_INET6 if is_ipv6(host) else socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port: int = s.getsockname()[1]
            return port
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise LaunchError(f"no free TCP port on {host}: every port of the ephemeral range "
                              "(net.ipv4.ip_local_port_range) is taken.",
                              tip="something holds all ports of net.ipv4.ip_local_port_range (see `ss -tan | wc -l`); "
                                  "close it, or widen the range (sysctl net.ipv4.ip_local_port_range).") from None
        if e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) or isinstance(e, socket.gaierror):
            raise LaunchError(f"cannot listen on {host}: {e.strerror or e}.",
                              tip="use an address of this machine (127.0.0.1 keeps servers on loopback); IPv6 needs "
                                  "IPv6 enabled on the interface.") from None
        raise LaunchError(f"cannot open a TCP port on {host}: {e.strerror or e}.",
                          tip="check the address and the machine's network settings.") from None


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_port(host: str, port: int, timeout_s: float, alive: Callable[[], bool] = lambda: True) -> bool:
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
