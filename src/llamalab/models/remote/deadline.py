"""A hard deadline for one HTTP request, whatever the server does.

httpx's timeouts bound each wait for a byte (`read_s`), not a request: a server that sends one byte every 10 s —
of its headers or of its body — never trips them. `deadline(watch, seconds, …)` bounds the request as a whole: when
the time is up, a timer shuts down the sockets of the client's connections, which wakes the blocked read at once,
and whatever that read raises becomes one `RemoteError` of kind "slow" (not retried: the server had its time).

The sockets come from httpcore's public `trace` request extension (`Watch.trace`, installed on every request of a
client by `Watch.hook`): each new connection reports its stream (`connection.connect_tcp.complete`,
`connection.start_tls.complete`). After the deadline, every further event of that client raises, so a client
library's own retries (huggingface_hub retries a listing five times) stop at once too.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from ...core.errors import ModelError


class Expired(ModelError):
    """A request ran past its deadline (raised inside the client; turned into the caller's error)."""


class _Stream(Protocol):
    def get_extra_info(self, info: str) -> Any: ...


class Watch:
    """The open connections of one HTTP client, and whether its current request ran out of time."""

    KEEP = 16  # streams remembered (a client has a few connections at a time)

    def __init__(self) -> None:
        self.streams: list[_Stream] = []
        self.expired: Expired | None = None
        self.lock = threading.Lock()
        self.count = 0  # requests made
        self.stop_at: int | None = None  # `limit`: the count past which a request is refused
        self.over: Callable[[], ModelError] | None = None
        self.renew: Callable[[], None] | None = None  # a deadline of each request: restarted as each one starts

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's trace callback: remembers each new connection's stream; after a deadline, stops the request."""
        if self.expired is not None:
            raise self.expired
        stream = info.get("return_value") if event.endswith(".complete") else None
        if stream is not None and hasattr(stream, "get_extra_info"):
            with self.lock:
                self.streams = [*self.streams[-(self.KEEP - 1):], stream]

    def hook(self, request: Any) -> None:
        """An httpx `request` event hook that installs `trace` on the request, and counts it (see `limit`)."""
        self.count += 1
        if self.stop_at is not None and self.count > self.stop_at and self.over is not None:
            raise self.over()
        if self.renew is not None and self.expired is None:
            self.renew()
        request.extensions["trace"] = self.trace

    @contextlib.contextmanager
    def limit(self, n: int, over: Callable[[], ModelError]) -> Iterator[None]:
        """At most `n` more requests in the body; the next raises `over()` (a `Link: next` loop that yields nothing
        still ends)."""
        self.stop_at, self.over = self.count + n, over
        try:
            yield
        finally:
            self.stop_at = self.over = None

    def cut(self) -> None:
        """Shut down every remembered connection's socket (a blocked read returns at once)."""
        with self.lock:
            streams = list(self.streams)
        for s in streams:
            try:
                sock = s.get_extra_info("socket")
                if isinstance(sock, socket.socket):
                    sock.shutdown(socket.SHUT_RDWR)
            except (OSError, ValueError, AttributeError):
                pass  # already closed


@contextlib.contextmanager
def deadline(watch: Watch | None, seconds: float, error: Callable[[], ModelError], *,
             each_request: bool = False) -> Iterator[threading.Event]:
    """Run the body with a deadline of `seconds`: past it, the client's connections are cut and whatever the body
    raises then becomes `error()` (a body that finished keeps its result). `each_request`: the deadline starts
    again with each request the body makes through the watched client (a listing of many pages: each page within
    `seconds`). Yields the event that is set when the time is up (a loop over a body checks it between chunks)."""
    expired = threading.Event()
    timers: list[threading.Timer] = []

    def fire() -> None:
        expired.set()
        if watch is not None:
            watch.expired = Expired("deadline")
            watch.cut()

    def start() -> None:
        if timers:
            timers.pop().cancel()
        timer = threading.Timer(seconds, fire)
        timer.daemon = True
        timers.append(timer)
        timer.start()

    start()
    if watch is not None and each_request:
        watch.renew = start
    try:
        yield expired
    except BaseException as e:
        if expired.is_set() and not isinstance(e, KeyboardInterrupt):
            raise error() from None
        raise
    finally:
        for t in timers:
            t.cancel()
        if watch is not None:
            watch.expired = None
            watch.renew = None
