"""What a study may write for an rpc endpoint, an ssh target and ssh options: syntax checks, pure. The study model
validates its fields with them and rig/remote.py uses them on the way to the network; they sit below both."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_PORT = 50052
SSH_OPTIONS_WITH_VALUE = ("-i", "-F", "-o", "-J")  # the options ssh and scp share and spell alike

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")
_SSH_TARGET = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_.-]*@)?[A-Za-z0-9][A-Za-z0-9.-]*$")


@dataclass(frozen=True, order=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def is_ipv4(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv4Address)
    except ValueError:
        return False


def parse_endpoint(text: str) -> Endpoint:
    """`host:port` as llama.cpp's RPC client takes it: an IPv4 address or a host name, and a port.
    Raises ValueError with a sentence that says what is wrong."""
    s = str(text).strip()
    if s.startswith("[") or s.count(":") > 1:
        raise ValueError(f"{text!r}: llama.cpp's RPC client takes an IPv4 address or a host name, not IPv6")
    host, sep, port_s = s.partition(":")
    if not sep:
        raise ValueError(f"{text!r}: write host:port, e.g. 10.0.0.2:{DEFAULT_PORT} (rpc-server's default port)")
    if not port_s.isdecimal() or not 1 <= int(port_s) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    if not host:
        raise ValueError(f"{text!r}: the host is missing")
    if not is_ipv4(host) and not _HOSTNAME.match(host):
        raise ValueError(f"{text!r}: {host!r} is neither an IPv4 address nor a host name")
    if host in ("0.0.0.0",) or host.startswith("0."):
        raise ValueError(f"{text!r}: 0.0.0.0 is where a server listens, not an address to connect to")
    return Endpoint(host, int(port_s))


def is_hostname(host: str) -> bool:
    return bool(_HOSTNAME.match(host))


def check_ssh_target(target: str) -> str:
    if not _SSH_TARGET.match(target):
        raise ValueError(f"{target!r}: write user@host or host (letters, digits, . _ -)")
    return target


def check_ssh_options(options: Sequence[str]) -> list[str]:
    """Only options that ssh and scp both take with the same meaning: -i FILE, -F FILE, -o KEY=VALUE, -J HOST.
    (`-p PORT` means different things to them: write -o Port=PORT.)"""
    out = list(options)
    if len(out) % 2:
        raise ValueError(f"{out}: give options in pairs, e.g. [\"-i\", \"~/.ssh/lab\", \"-o\", \"Port=2222\"]")
    for flag, value in zip(out[::2], out[1::2]):
        if flag not in SSH_OPTIONS_WITH_VALUE:
            raise ValueError(f"{flag!r}: only {', '.join(SSH_OPTIONS_WITH_VALUE)} are allowed (ssh and scp share "
                             "them); for a port write -o Port=N")
        if not value or value.startswith("-"):
            raise ValueError(f"{flag} needs a value")
    return out
