"""A GGUF header over HTTP Range requests, and a whole file when asked for (resumable).

`Fetcher.read(a, b)` is one Range request with timeouts, retries with backoff and Ctrl-C checks between them; a
server that answers a Range request with the whole file (200) is refused before its body is read. `header` reads
a remote GGUF header progressively: a small first read, then what the parser asks for (the hostile GGUF reader of
`standin`, its bounds included), with read-ahead sized from what it has seen so far (a 262k-token vocabulary is
fetched in one or two requests, the tensor table in one). Two tokenizer arrays of fixed-size numbers — the
scores and the token types, 8 bytes per token — are seeked over, not fetched: they hold nothing a memory fit
reads, and the stand-in gets the values llama.cpp itself uses where a model has none (score 0.0, type NORMAL).

The HTTP transport is passed in (`httpx.MockTransport` in tests). Everything else here is file work.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TypeVar

import httpx

from ...core import proc
from ...core.errors import ModelError
from .. import gguf

T = TypeVar("T")

# The two arrays the stand-in fills instead of fetching: key → (GGUF item type, the fill item's bytes)
FILLED = {"tokenizer.ggml.scores": (6, struct.pack("<f", 0.0)),  # llama.cpp: score 0.0 without scores
          "tokenizer.ggml.token_type": (5, struct.pack("<i", 1))}  # LLAMA_TOKEN_TYPE_NORMAL without types


@dataclass(frozen=True)
class Policy:
    connect_s: float = 10.0
    read_s: float = 30.0  # no byte for this long: the server stalled
    request_s: float = 300.0  # one header request as a whole (a trickling server)
    retries: int = 4
    backoff_s: float = 0.5  # the first wait; doubled after each retry, at most 8 s
    first_read: int = 32 << 10  # then the parser says what it needs (a split's later parts: a few KiB)
    max_header: int = 128 << 20  # a remote header larger than this is refused (real ones: up to ~20 MB)


class RemoteError(ModelError):
    """A remote model could not be read; `kind` says why (auth, missing, no-range, network, stalled, server)."""

    def __init__(self, kind: str, message: str, tip: str):
        super().__init__(message, tip=tip)
        self.kind = kind


NETWORK_TIP = ("check the network (a proxy: HTTPS_PROXY); local model files still work without it "
               "(--model ~/models/m.gguf).")
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)


def client(transport: httpx.BaseTransport | None, policy: Policy) -> httpx.Client:
    """An httpx client with the policy's timeouts; redirects followed (httpx drops Authorization on a redirect to
    another host, as a signed blob URL wants)."""
    timeout = httpx.Timeout(policy.read_s, connect=policy.connect_s)
    return httpx.Client(transport=transport, timeout=timeout, follow_redirects=True,
                        headers={"User-Agent": "llamalab", "Accept-Encoding": "identity"})


@dataclass
class Head:
    size: int | None
    etag: str | None
    last_modified: str | None


def wait(policy: Policy, attempt: int) -> None:
    """The backoff before retry `attempt` (1, 2 …); a Ctrl-C meanwhile stops at once."""
    delay = min(8.0, policy.backoff_s * 2 ** (attempt - 1))
    if proc.STOP.wait(delay):
        raise KeyboardInterrupt
    proc.check_stop()


def retry(policy: Policy, call: Callable[[], T], transient: Callable[[BaseException], bool]) -> T:
    """`call()` again after a transient failure (`transient(e)`), up to policy.retries times with backoff."""
    attempt = 0
    while True:
        proc.check_stop()
        try:
            return call()
        except Exception as e:
            attempt += 1
            if not transient(e) or attempt > policy.retries:
                raise
            wait(policy, attempt)


@dataclass
class Fetcher:
    """Range reads of one URL. `what` names the model in messages; `auth_tip` is the tip for 401/403."""

    url: str
    http: httpx.Client
    policy: Policy = field(default_factory=Policy)
    what: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    auth_tip: str = "the server wants credentials; llamalab sends none to plain URLs."
    fetched: int = 0  # body bytes received
    requests: int = 0
    size: int | None = None  # the file's size, from Content-Range

    def label(self) -> str:
        """What the fetcher reads, for messages: its `what`, else its URL."""
        return self.what or self.url

    def status_error(self, r: httpx.Response) -> RemoteError:
        """The error an HTTP error status of this fetcher's server stands for, with a tip."""
        code = r.status_code
        if code in (401, 403):
            return RemoteError("auth", f"{self.label()}: the server refused access ({code}).", self.auth_tip)
        if code in (404, 410):
            return RemoteError("missing", f"{self.label()}: no such file on the server ({code}).",
                               "check the URL or the name; the file may have been moved or deleted.")
        if code == 416:
            return RemoteError("damaged", f"{self.label()}: the server has fewer bytes than the header needs "
                               "(416 Range Not Satisfiable).", "the file is truncated or not a GGUF model.")
        return RemoteError("server", f"{self.label()}: the server answered {code} {r.reason_phrase}.",
                           "try again later; if it persists, the server is misconfigured.")

    def transient(self, e: BaseException) -> bool:
        """Whether a failed request is worth retrying (a busy or stalled server, a timeout, a transport error)."""
        if isinstance(e, RemoteError):
            return e.kind in ("server-busy", "stalled")
        return isinstance(e, (httpx.TimeoutException, httpx.TransportError))

    def network_error(self, e: BaseException) -> ModelError:
        """The error a failed request stands for once retries are spent, in words, with a tip."""
        host = httpx.URL(self.url).host
        if isinstance(e, RemoteError):
            if e.kind == "server-busy":
                return RemoteError("server", e.message + f" (after {self.policy.retries} retries)", e.tip or "")
            return e
        if isinstance(e, httpx.TimeoutException):
            return RemoteError("stalled", f"{self.label()}: {host} stopped answering ({type(e).__name__} after "
                               f"{self.policy.retries} retries with backoff).",
                               "the server is slow or stalled: try again later, or use a mirror.")
        return RemoteError("network", f"{self.label()}: cannot reach {host} ({type(e).__name__}: {e}); no network "
                           "here?", NETWORK_TIP)

    def whole(self, out: BinaryIO, size: int, progress: Callable[[int, int], None] | None = None) -> int:
        """The whole file in one GET into `out` (a server without Range support, with --download only)."""
        got = 0
        self.requests += 1
        try:
            with self.http.stream("GET", self.url, headers=self.headers) as r:
                if r.status_code != 200:
                    raise self.status_error(r)
                for chunk in r.iter_bytes(1 << 20):
                    got += len(chunk)
                    if got > size:
                        raise RemoteError("server", f"{self.label()}: the server sent more than the {size:,} bytes "
                                          "it announced.", "the file changed meanwhile; try again.")
                    out.write(chunk)
                    self.fetched += len(chunk)
                    if progress:
                        progress(got, size)
                    proc.check_stop()
        except httpx.HTTPError as e:
            raise self.network_error(e) from None
        if got != size:
            raise RemoteError("stalled", f"{self.label()}: the server sent {got:,} of {size:,} bytes.",
                              "try again (a server without Range support cannot resume a download).")
        return got

    def head(self) -> Head:
        """HEAD of the URL: its size and ETag (None where HEAD is refused)."""
        def once() -> Head:
            self.requests += 1
            r = self.http.head(self.url, headers=self.headers)
            if r.status_code in (405, 501):
                return Head(None, None, None)
            if r.status_code in (429,) or r.status_code >= 500:
                raise RemoteError("server-busy", f"{self.label()}: the server answered {r.status_code}.",
                                  "try again later.")
            if r.status_code >= 400:
                raise self.status_error(r)
            length = r.headers.get("content-length")
            return Head(size=int(length) if length and length.isdecimal() else None, etag=r.headers.get("etag"),
                        last_modified=r.headers.get("last-modified"))

        try:
            return retry(self.policy, once, self.transient)
        except (httpx.HTTPError, RemoteError) as e:
            raise self.network_error(e) from None

    def read(self, start: int, stop: int) -> bytes:
        """Bytes [start, stop) of the file by one Range request (retried on timeouts, 429 and 5xx)."""
        if stop <= start:
            return b""
        try:
            return retry(self.policy, lambda: self._read_once(start, stop), self.transient)
        except (httpx.HTTPError, RemoteError) as e:
            raise self.network_error(e) from None

    def _read_once(self, start: int, stop: int) -> bytes:
        want = stop - start
        self.requests += 1
        deadline = time.monotonic() + self.policy.request_s
        headers = {**self.headers, "Range": f"bytes={start}-{stop - 1}"}
        with self.http.stream("GET", self.url, headers=headers) as r:
            if r.status_code == 200:
                raise RemoteError("no-range", f"{self.label()}: the server ignores Range requests (it answered "
                                  "200 with the whole file), so its header cannot be read alone.",
                                  "pass --download (plan, run, tune, bisect) to fetch the whole model, or download "
                                  "it yourself and pass the file (or its first MiB: head -c 64M model.gguf > "
                                  "head.gguf).")
            if r.status_code == 429 or r.status_code >= 500:
                raise RemoteError("server-busy", f"{self.label()}: the server answered {r.status_code}.",
                                  "try again later.")
            if r.status_code != 206:
                raise self.status_error(r)
            m = _CONTENT_RANGE.match(r.headers.get("content-range", ""))
            if not m or int(m.group(1)) != start or int(m.group(2)) < start:
                raise RemoteError("server", f"{self.label()}: the server's Content-Range "
                                  f"{r.headers.get('content-range')!r} does not answer bytes={start}-{stop - 1}.",
                                  "the server does not implement Range requests correctly; use --download.")
            if m.group(3) != "*":
                self.size = int(m.group(3))
            out = bytearray()
            for chunk in r.iter_bytes(1 << 16):
                out += chunk
                self.fetched += len(chunk)
                if len(out) >= want:
                    break
                if time.monotonic() > deadline:
                    raise RemoteError("stalled", f"{self.label()}: {want:,} bytes took more than "
                                      f"{self.policy.request_s:.0f} s.", "the server is too slow; try again later.")
                proc.check_stop()
        if len(out) < min(want, int(m.group(2)) - start + 1):
            raise RemoteError("stalled", f"{self.label()}: the server closed the connection after {len(out):,} of "
                              f"{want:,} bytes.", "try again; the server dropped the transfer.")
        return bytes(out[:want])


# ---------------------------------------------------------------- the header, progressively


SKIP_THROUGH = 64 << 10  # a forward seek shorter than this is fetched through (strings in an array)


class _RangeFile:
    """A read-only, forward-only file over a Fetcher: what the header parser reads is fetched on demand (with
    read-ahead from `expect` hints); what it seeks over is fetched only where a read-ahead already covered it."""

    def __init__(self, fetcher: Fetcher, size: int, policy: Policy):
        self.fetcher, self.size, self.policy = fetcher, size, policy
        self.runs: list[tuple[int, bytearray]] = []  # fetched byte runs, in file order
        self.pos = 0
        self.expect_end = 0
        self.first = True

    def expect(self, n: int) -> None:
        """The parser will read about `n` more bytes from here on."""
        self.expect_end = self.pos + max(0, int(n))

    def tell(self) -> int:
        return self.pos

    def seek(self, off: int, whence: int = os.SEEK_SET) -> int:
        self.pos = off if whence == os.SEEK_SET else self.pos + off
        return self.pos

    def _covered(self, a: int) -> tuple[int, bytearray] | None:
        for start, data in reversed(self.runs):
            if start <= a <= start + len(data):
                return start, data
            if start + len(data) < a:
                break
        return None

    def read(self, n: int) -> bytes:
        a, b = self.pos, min(self.pos + n, self.size)
        run = self._covered(a)
        if run is None and self.runs and a - (self.runs[-1][0] + len(self.runs[-1][1])) < SKIP_THROUGH:
            run = self.runs[-1]  # a short skip (a string in an array): fetched through, no gap
        if run is None or run[0] + len(run[1]) < b:
            have_to = run[0] + len(run[1]) if run else a
            ahead = self.policy.first_read if self.first else 64 << 10
            # the parser's hint where it has one (the rest of a token list, of the tensor table), else read-ahead
            stop = max(b, self.expect_end) if self.expect_end > have_to else max(b, have_to + ahead)
            stop = min(stop, self.size)
            data = self.fetcher.read(have_to, stop)
            self.first = False
            if run is None:
                self.runs.append((a, bytearray(data)))
            else:
                run[1].extend(data)
            run = self._covered(a)
            if run is None:
                raise RemoteError("server", f"{self.fetcher.label()}: no bytes came for {a:,}.", "try again.")
        start, buf = run
        out = bytes(buf[a - start:b - start])
        self.pos = a + len(out)
        return out

    def gaps(self, end: int) -> list[tuple[int, int]]:
        """Byte ranges of [0, end) that were never fetched."""
        out, at = [], 0
        for start, data in self.runs:
            if start > at:
                out.append((at, min(start, end)))
            at = max(at, start + len(data))
            if at >= end:
                break
        if at < end:
            out.append((at, end))
        return [(a, b) for a, b in out if a < b]

    def bytes_at(self, a: int, b: int) -> bytes:
        for start, data in self.runs:
            if start <= a and b <= start + len(data):
                return bytes(data[a - start:b - start])
        raise KeyError((a, b))


@dataclass(frozen=True)
class RemoteHeader:
    header: gguf.Header
    head: bytes  # the stand-in's first data_offset bytes
    size: int  # the remote file's size
    fetched: int  # bytes received for it
    requests: int
    filled: tuple[str, ...] = ()  # the arrays filled instead of fetched


def header(fetcher: Fetcher, size: int | None = None, policy: Policy | None = None) -> RemoteHeader:
    """The GGUF header of the file behind `fetcher`, read with the hostile reader's checks; `size` is the file's
    size where the caller knows it (else the first read's Content-Range says it)."""
    policy = policy or fetcher.policy
    first = None
    if size is None:
        first = fetcher.read(0, policy.first_read)
        if fetcher.size is None:
            raise RemoteError("server", f"{fetcher.label()}: the server did not say the file's size "
                              "(Content-Range bytes a-b/SIZE).", "use --download, or a server that answers Range "
                              "requests with the total size.")
        size = fetcher.size
    if size > gguf.MAX_MODEL + gguf.MAX_HEADER:
        raise gguf.damaged(f"the server says the file is {size:,} bytes")
    f = _RangeFile(fetcher, size, policy)
    if first is not None:
        f.runs.append((0, bytearray(first)))
        f.first = False
    avail = min(size, policy.max_header)
    try:
        hdr = gguf.parse_header(gguf.Reader(f, avail))
    except gguf.HeaderIncomplete:
        if avail < size:
            raise gguf.damaged(f"its header runs past {policy.max_header >> 20} MiB, more than any model's "
                                  "(refused before fetching more)") from None
        raise gguf.damaged("its header runs past the end of the file (a truncated file?)") from None
    lay = hdr.layout
    if lay.file_size > size:
        raise gguf.damaged(f"its tensors need {lay.file_size:,} bytes but the file is {size:,}")
    fills, filled = _fills(hdr)
    head = _assemble(fetcher, f, lay, fills)
    return RemoteHeader(header=hdr, head=bytes(head), size=size, fetched=fetcher.fetched,
                        requests=fetcher.requests, filled=tuple(filled))


def _fills(hdr: gguf.Header) -> tuple[list[tuple[int, int, bytes]], list[str]]:
    """The tokenizer arrays filled instead of fetched: (start, end, item) of each, and their keys."""
    fills: list[tuple[int, int, bytes]] = []
    filled = []
    for key, (itype, item) in FILLED.items():
        v = hdr.kv.get(key)
        if isinstance(v, gguf.ArrayInfo) and v.item_type == itype and v.offset >= 0:
            fills.append((v.offset, v.offset + v.length * len(item), item))
            filled.append(key)
    return fills, filled


def _assemble(fetcher: Fetcher, f: _RangeFile, lay: gguf.Layout, fills: list[tuple[int, int, bytes]]) -> bytearray:
    """The header's bytes: what was read, the gaps fetched verbatim, filled or padded."""
    segments = [(s, bytes(d[:max(0, lay.data_offset - s)])) for s, d in f.runs if s < lay.data_offset]
    for a, b in f.gaps(lay.data_offset):
        fill = next(((fa, item) for fa, fb, item in fills if fa <= a and b <= fb), None)
        if fill is not None:
            segments.append((a, b"\0" * (b - a)))  # filled below, item by item
        elif b == lay.data_offset and b - a < lay.alignment:
            segments.append((a, b"\0" * (b - a)))  # the padding before the tensor data
        else:  # seeked over and needed verbatim (a long array of numbers that is not a tokenizer's)
            segments.append((a, fetcher.read(a, b)))
    head = bytearray()
    for a, data in sorted(segments):
        if a != len(head):
            raise RemoteError("server", f"{fetcher.label()}: the header could not be assembled at byte {a:,}.",
                              "report this: it is a bug of llamalab's range reader.")
        head += data
    for a, b in f.gaps(lay.data_offset):  # an item half fetched, half filled is all fill: never a mixed value
        for fa, fb, item in fills:
            if fa <= a and b <= fb:
                n = len(item)
                lo, hi = fa + (a - fa) // n * n, min(fb, fa + -(-(b - fa) // n) * n)
                head[lo:hi] = item * ((hi - lo) // n)
    return head


# ---------------------------------------------------------------- a whole file (--download)


def download(fetcher: Fetcher, dest: Path, size: int, *, sha256: str | None = None,
             progress: Callable[[int, int], None] | None = None, chunk: int = 8 << 20) -> Path:
    """The whole file into `dest` (through `dest.part`, resumed where an earlier download stopped), its size and
    (where published) its sha256 checked before it is renamed into place."""
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.is_file() else 0
    if have > size:
        part.unlink()
        have = 0
    with open(part, "ab") as out:
        while have < size:
            proc.check_stop()
            try:
                data = fetcher.read(have, min(size, have + chunk))
            except RemoteError as e:
                if e.kind != "no-range":
                    raise
                out.seek(0)
                out.truncate()
                have = fetcher.whole(out, size, progress)  # no Range: the whole file in one GET, no resume
                break
            if not data:
                raise RemoteError("stalled", f"{fetcher.label()}: the server sent nothing at byte {have:,}.",
                                  "try again: the download resumes where it stopped.")
            out.write(data)
            have += len(data)
            if progress:
                progress(have, size)
    if sha256:
        digest = sha256_of(part)
        if digest != sha256.lower():
            part.unlink()
            raise ModelError(f"{fetcher.label()}: the downloaded file has sha256 {digest}, but {sha256} is "
                             "published; it was deleted.", tip="download it again; if it persists, the server "
                             "serves another file than it lists.")
    os.replace(part, dest)
    return dest


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(8 << 20), b""):
            proc.check_stop()
            h.update(block)
    return h.hexdigest()
