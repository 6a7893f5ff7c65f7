"""A hostile web server on 127.0.0.1 for remote models (issue 45): files whose bytes are made on the fly (a 1 TiB
file is a function, not a file), served with Range as a lying, stalling or misconfigured server would, and every
request recorded.

Each file (`Hostile.add`) is a size and a `read(a, b)` function, with its misbehaviours as fields of `File`: a HEAD
that is refused or trickles, a body that trickles or is cut, no validators, a compressed answer, a Content-Range of
5,000 digits, a HEAD size that differs from the Range answers', a query string that every request must carry, a
redirect to `data:`. Every loop that waits or trickles is bounded (`File.trickle_max` bytes, the server's stop
event), so a client that never gives up still ends; `requests` holds (method, path with query, Range header) of each
request and `sent` the body bytes sent.
"""

from __future__ import annotations

import gzip
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class File:
    size: int
    read: Callable[[int, int], bytes]  # bytes [a, b)
    head: str = "ok"  # ok | refuse (403, as a URL signed for GET) | 405 | trickle | size:N (HEAD says N bytes)
    body: str = "ok"  # ok | trickle | gzip | digits (a 5,000-digit Content-Range) | data-redirect | no-range (200)
    etag: str | None = '"v1"'  # None: neither ETag nor Last-Modified
    cut: int | None = None  # at most this many body bytes per answer, then the connection closes
    query: str | None = None  # every request must carry this query string, else 403
    trickle_s: float = 0.2  # a byte every this long
    trickle_max: int = 200  # then the answer stops (a bounded loop)


@dataclass
class Hostile:
    files: dict[str, File] = field(default_factory=dict)
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    sent: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def add(self, name: str, f: File) -> str:
        self.files[name] = f
        return f"{self.base}/{name}" + (f"?{f.query}" if f.query else "")

    def add_path(self, name: str, path: Path, **kw) -> str:
        data = Path(path).read_bytes()
        return self.add(name, File(size=len(data), read=lambda a, b: data[a:b], **kw))

    def ranges(self) -> list[tuple[int, int]]:
        """Every Range asked for, as [start, stop)."""
        out = []
        for _, _, r in self.requests:
            if r.startswith("bytes="):
                a, _, b = r[6:].partition("-")
                out.append((int(a), int(b) + 1 if b else -1))
        return out

    def __enter__(self) -> Hostile:
        server = self

        class Handler(_Handler):
            hostile = server

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self._http.shutdown()
        self._http.server_close()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    hostile: Hostile
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass

    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def _plain(self, code: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _trickle(self, data: bytes, f: File) -> None:
        """`data` a byte at a time, every `f.trickle_s`, at most `f.trickle_max` bytes (then the connection ends)."""
        for i in range(min(len(data), f.trickle_max)):
            if self.hostile.stop.wait(f.trickle_s):
                return
            self.wfile.write(data[i:i + 1])
            self.wfile.flush()
        self.close_connection = True

    def _route(self) -> None:
        h = self.hostile
        u = urllib.parse.urlsplit(self.path)
        h.requests.append((self.command, self.path, self.headers.get("Range", "")))
        f = h.files.get(u.path.lstrip("/"))
        if f is None:
            return self._plain(404)
        if f.query is not None and u.query != f.query:
            return self._plain(403)
        if self.command == "HEAD":
            return self._head(f)
        if f.body == "data-redirect":
            return self._plain(302, {"Location": "data:text/plain,hello"})
        if f.body == "no-range":
            return self._answer(200, self._validators(f), f.read(0, f.size))
        self._get(f)

    def _validators(self, f: File) -> dict[str, str]:
        return {"ETag": f.etag, "Last-Modified": "Mon, 07 Dec 2026 10:00:00 GMT"} if f.etag else {}

    def _head(self, f: File) -> None:
        if f.head in ("refuse", "405"):
            return self._plain(403 if f.head == "refuse" else 405)
        size = int(f.head[5:]) if f.head.startswith("size:") else f.size
        lines = [f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nAccept-Ranges: bytes\r\n"]
        lines += [f"{k}: {v}\r\n" for k, v in self._validators(f).items()]
        raw = ("".join(lines) + "\r\n").encode()
        if f.head == "trickle":
            return self._trickle(raw, f)
        self.wfile.write(raw)

    def _get(self, f: File) -> None:
        rng = self.headers.get("Range", "")
        a, _, b = rng[6:].partition("-") if rng.startswith("bytes=") else ("0", "", "")
        start, stop = int(a), min(int(b) + 1 if b else f.size, f.size)
        if start >= f.size:
            return self._plain(416, {"Content-Range": f"bytes */{f.size}"})
        n = stop - start
        total = "9" * 5000 if f.body == "digits" else str(f.size)
        head = {"Content-Range": f"bytes {start}-{stop - 1}/{total}", **self._validators(f)}
        if f.body == "gzip":
            data = gzip.compress(f.read(start, stop))
            return self._answer(206, {**head, "Content-Encoding": "gzip"}, data)
        self.send_response(206)
        for k, v in head.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(n))
        self.end_headers()
        if f.body == "trickle":
            return self._trickle(f.read(start, min(stop, start + f.trickle_max)), f)
        self._body(f, start, start + min(n, f.cut if f.cut is not None else n))

    def _answer(self, code: int, headers: dict[str, str], data: bytes) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self, f: File, start: int, stop: int) -> None:
        at = start
        while at < stop and not self.hostile.stop.is_set():
            chunk = f.read(at, min(stop, at + (1 << 20)))
            self.wfile.write(chunk)
            self.hostile.sent += len(chunk)
            at += len(chunk)
        if f.cut is not None:
            self.close_connection = True


def wait_for(cond: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.02)
