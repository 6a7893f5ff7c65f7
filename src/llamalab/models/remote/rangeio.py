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
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TypeVar

import httpx

from ...core import proc
from ...core.errors import ModelError
from ...core.safetext import one_line
from .. import gguf
from .deadline import Watch, deadline

T = TypeVar("T")

# The two arrays the stand-in fills instead of fetching: key → (GGUF item type, the fill item's bytes)
FILLED = {"tokenizer.ggml.scores": (6, struct.pack("<f", 0.0)),  # llama.cpp: score 0.0 without scores
          "tokenizer.ggml.token_type": (5, struct.pack("<i", 1))}  # LLAMA_TOKEN_TYPE_NORMAL without types


@dataclass(frozen=True)
class Policy:
    connect_s: float = 10.0
    read_s: float = 30.0  # no byte for this long: the server stalled (retried)
    request_s: float = 300.0  # one request as a whole, headers and body (a trickling server; not retried)
    retries: int = 4
    backoff_s: float = 0.5  # the first wait; doubled after each retry, at most 8 s
    first_read: int = 32 << 10  # then the parser says what it needs (a split's later parts: a few KiB)
    max_header: int = 128 << 20  # a remote header larger than this is refused (real ones: up to ~20 MB)
    max_request: int = 16 << 20  # bytes asked for in one Range request (a longer read is several)


class RemoteError(ModelError):
    """A remote model could not be read; `kind` says why (auth, missing, no-range, network, stalled, server)."""

    def __init__(self, kind: str, message: str, tip: str):
        super().__init__(message, tip=tip)
        self.kind = kind


NETWORK_TIP = ("check the network (a proxy: HTTPS_PROXY); local model files still work without it "
               "(--model ~/models/m.gguf).")
# at most 20 digits a number: a byte position past 2^64 is no file's, and int() of 5,000 digits raises
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d{1,20})-(\d{1,20})/(\d{1,20}|\*)\s*$", re.IGNORECASE)
_WATCHES: weakref.WeakKeyDictionary[httpx.Client, Watch] = weakref.WeakKeyDictionary()


def client(transport: httpx.BaseTransport | None, policy: Policy) -> httpx.Client:
    """An httpx client with the policy's timeouts; redirects followed (httpx drops Authorization on a redirect to
    another host, as a signed blob URL wants); its connections watched, so that a request can be given a hard
    deadline (`deadline.Watch`)."""
    timeout = httpx.Timeout(policy.read_s, connect=policy.connect_s)
    watch = Watch()
    http = httpx.Client(transport=transport, timeout=timeout, follow_redirects=True,
                        event_hooks={"request": [watch.hook]},
                        headers={"User-Agent": "llamalab", "Accept-Encoding": "identity"})
    _WATCHES[http] = watch
    return http


def watch_of(http: httpx.Client) -> Watch | None:
    """The watch of a client made by `client` (None for any other)."""
    return _WATCHES.get(http)


def redact_key(key: str) -> str:
    """A cache key as stored (source.json): its URLs redacted."""
    return re.sub(r"https?://[^\s|]+", lambda m: redact(m.group()), key)


def redact(url: str) -> str:
    """A URL as llamalab shows and stores it: without credentials (user:password@) and without its query string
    (a signed URL's signature is a credential too)."""
    try:
        u = httpx.URL(url)
        return str(u.copy_with(username=None, password=None, query=None, fragment=None))
    except (httpx.InvalidURL, ValueError, TypeError):
        return "(an invalid URL)"


@dataclass(frozen=True)
class Part:
    """One remote file: where its bytes are and what identifies its content."""

    url: str  # the bytes (the blob URL a hub redirected to)
    name: str  # the stand-in's file name (a split part keeps llama.cpp's part name)
    size: int | None
    key: str  # content identity: where it comes from and its ETag, digest or Last-Modified ("": none, not cached)
    sha256: str | None = None  # the published hash, where there is one
    headers: tuple[tuple[str, str], ...] = ()  # credentials, only for the hub's own host
    validator: str = ""  # what tells this file from a changed one (a download resumes only with the same)


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
    size: int | None = None  # the file's size: as HEAD or the caller said, else from the first Content-Range
    etag: str | None = None  # the validators of the first Range answer: a later answer must carry the same
    last_modified: str | None = None
    ranges: list[tuple[int, int]] = field(default_factory=list)  # every Range asked for, [start, stop)

    def label(self) -> str:
        """What the fetcher reads, for messages: its `what`, else its URL (without credentials or query)."""
        return self.what or redact(self.url)

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
        return RemoteError("server", f"{self.label()}: the server answered {code} {one_line(r.reason_phrase)[:80]}.",
                           "try again later; if it persists, the server is misconfigured.")

    def slow(self) -> RemoteError:
        """The error of a request that ran past `policy.request_s` (not retried: the server had its time)."""
        return RemoteError("slow", f"{self.label()}: one request took more than {self.policy.request_s:g} s (the "
                           "server sends too slowly, or stopped sending).",
                           "try again later, or from a faster mirror; a local file needs no server "
                           "(--model ~/models/m.gguf).")

    def transient(self, e: BaseException) -> bool:
        """Whether a failed request is worth retrying (a busy or stalled server, a timeout, a transport error; never
        a redirect to an address llamalab cannot fetch)."""
        if isinstance(e, RemoteError):
            return e.kind in ("server-busy", "stalled")
        if isinstance(e, (httpx.UnsupportedProtocol, httpx.TooManyRedirects)):
            return False
        return isinstance(e, (httpx.TimeoutException, httpx.TransportError))

    def network_error(self, e: BaseException) -> ModelError:
        """The error a failed request stands for once retries are spent, in words, with a tip."""
        if isinstance(e, RemoteError):
            if e.kind == "server-busy":
                return RemoteError("server", e.message + f" (after {self.policy.retries} retries)", e.tip or "")
            return e
        host = one_line(_host(self.url))
        if isinstance(e, (httpx.UnsupportedProtocol, httpx.TooManyRedirects, httpx.InvalidURL)):
            return RemoteError("server", f"{self.label()}: the server redirected to an address llamalab cannot "
                               f"fetch ({type(e).__name__}: {one_line(e)[:200]}).",
                               "only http:// and https:// are followed; download the file yourself and pass its "
                               "path.")
        if isinstance(e, httpx.TimeoutException):
            return RemoteError("stalled", f"{self.label()}: {host} stopped answering ({type(e).__name__} after "
                               f"{self.policy.retries} retries with backoff).",
                               "the server is slow or stalled: try again later, or use a mirror.")
        return RemoteError("network", f"{self.label()}: cannot reach {host} ({type(e).__name__}: "
                           f"{one_line(e)[:200]}); no network here?", NETWORK_TIP)

    def whole(self, out: BinaryIO, size: int | None,
              progress: Callable[[int, int], None] | None = None) -> int:
        """The whole file in one GET into `out` (a server without Range support, with --download only); `size` as
        announced before, else as this answer's Content-Length says."""
        got = 0
        self.requests += 1
        try:
            with self.http.stream("GET", self.url, headers=self.headers) as r:
                if r.status_code != 200:
                    raise self.status_error(r)
                self._refuse_encoding(r)
                size = size if size is not None else _length(r.headers.get("content-length"))
                if size is None:
                    raise RemoteError("server", f"{self.label()}: the server says neither the file's size nor "
                                      "answers Range requests.", "download the file yourself and pass its path.")
                for chunk in r.iter_raw(1 << 20):
                    got += len(chunk)
                    if got > size:
                        raise RemoteError("server", f"{self.label()}: the server sent more than the {size:,} bytes "
                                          "it announced.", "the file changed meanwhile; try again.")
                    out.write(chunk)
                    self.fetched += len(chunk)
                    if progress:
                        progress(got, size)
                    proc.check_stop()
        except (httpx.HTTPError, httpx.InvalidURL) as e:
            raise self.network_error(e) from None
        if got != size:
            raise RemoteError("stalled", f"{self.label()}: the server sent {got:,} of {size:,} bytes.",
                              "try again (a server without Range support cannot resume a download).")
        self.size = size
        return got

    def head(self) -> Head:
        """HEAD of the URL: its size and validators (None where HEAD is refused: a URL signed for GET alone, a server
        without HEAD; the first Range answer then says them)."""
        def once() -> Head:
            self.requests += 1
            with deadline(watch_of(self.http), self.policy.request_s, self.slow):
                r = self.http.head(self.url, headers=self.headers)
            if r.status_code in (429,) or r.status_code >= 500:
                raise RemoteError("server-busy", f"{self.label()}: the server answered {r.status_code}.",
                                  "try again later.")
            if r.status_code in (404, 410):
                raise self.status_error(r)
            if r.status_code >= 400:
                return Head(None, None, None)
            plain_body = r.headers.get("content-encoding", "identity").lower() == "identity"
            return Head(size=_length(r.headers.get("content-length")) if plain_body else None,
                        etag=r.headers.get("etag"), last_modified=r.headers.get("last-modified"))

        try:
            return retry(self.policy, once, self.transient)
        except (httpx.HTTPError, httpx.InvalidURL, RemoteError) as e:
            raise self.network_error(e) from None

    def read(self, start: int, stop: int) -> bytes:
        """Bytes [start, stop) of the file by one Range request (retried on timeouts, 429 and 5xx)."""
        if stop <= start:
            return b""
        if stop - start > self.policy.max_request:
            raise ValueError(f"one Range request of {stop - start:,} bytes")  # callers ask in pieces
        try:
            return retry(self.policy, lambda: self._read_once(start, stop), self.transient)
        except (httpx.HTTPError, httpx.InvalidURL, RemoteError) as e:
            raise self.network_error(e) from None

    def _read_once(self, start: int, stop: int) -> bytes:
        want = stop - start
        self.requests += 1
        self.ranges.append((start, stop))
        headers = {**self.headers, "Range": f"bytes={start}-{stop - 1}"}
        out = bytearray()
        with deadline(watch_of(self.http), self.policy.request_s, self.slow) as expired, \
                self.http.stream("GET", self.url, headers=headers) as r:
            end = self._answer(r, start, stop)
            for chunk in r.iter_raw():  # as it arrives (no 64 KiB wait): the deadline is checked between chunks
                out += chunk
                self.fetched += len(chunk)
                if len(out) >= want:
                    break
                if expired.is_set():
                    raise self.slow()
                proc.check_stop()
        if len(out) < min(want, end - start + 1):
            raise RemoteError("stalled", f"{self.label()}: the server closed the connection after {len(out):,} of "
                              f"{want:,} bytes.", "try again; the server dropped the transfer.")
        return bytes(out) if len(out) <= want else bytes(memoryview(out)[:want])

    def _answer(self, r: httpx.Response, start: int, stop: int) -> int:
        """A Range answer checked before its body is read: a 206 for exactly these bytes, not compressed, of the
        file seen so far (the same size and ETag). Returns the last byte it holds."""
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
        self._refuse_encoding(r)
        cr = r.headers.get("content-range", "")
        m = _CONTENT_RANGE.match(cr)
        if not m or int(m.group(1)) != start or int(m.group(2)) < start:
            raise RemoteError("server", f"{self.label()}: the server's Content-Range {one_line(cr)[:80]!r} does "
                              f"not answer bytes={start}-{stop - 1}.",
                              "the server does not implement Range requests correctly; use --download.")
        if m.group(3) != "*":
            total = int(m.group(3))
            if self.size is not None and total != self.size:
                raise RemoteError("changed", f"{self.label()}: the server said the file is {self.size:,} bytes, "
                                  f"then {total:,} (Content-Range).", "the file changed while it was read, or the "
                                  "server is inconsistent: try again.")
            self.size = total
        etag = r.headers.get("etag")
        if self.etag is not None and etag is not None and etag != self.etag:
            raise RemoteError("changed", f"{self.label()}: the file changed while it was read (ETag "
                              f"{one_line(self.etag)[:80]}, then {one_line(etag)[:80]}).", "try again.")
        self.etag = self.etag or etag
        self.last_modified = self.last_modified or r.headers.get("last-modified")
        return int(m.group(2))

    def _refuse_encoding(self, r: httpx.Response) -> None:
        """llamalab asks for the bytes as they are (Accept-Encoding: identity); a compressed answer is refused
        before it is read, never decoded (a 32 KiB read must not inflate to 330 MB)."""
        enc = r.headers.get("content-encoding", "identity").strip().lower()
        if enc not in ("", "identity"):
            raise RemoteError("server", f"{self.label()}: the server compressed its answer (Content-Encoding: "
                              f"{one_line(enc)[:40]}) although llamalab asked for the bytes as they are.",
                              "the server is misconfigured for model files; download the file yourself and pass "
                              "its path.")


def _length(text: str | None) -> int | None:
    """A Content-Length as a number (None where absent or no number of at most 20 digits)."""
    return int(text) if text and len(text) <= 20 and text.isdecimal() else None


def _host(url: str) -> str:
    try:
        return httpx.URL(url).host
    except (httpx.InvalidURL, ValueError, TypeError):
        return "the server"


# ---------------------------------------------------------------- the header, progressively


SKIP_THROUGH = 64 << 10  # a forward seek shorter than this is fetched through (strings in an array)


class _RangeFile:
    """A read-only, forward-only file over a Fetcher: what the header parser reads is fetched on demand (with
    read-ahead from `expect` hints, one request at a time); what it seeks over is fetched only where a read-ahead
    already covered it. Nothing at or past `limit` (the header limit, or the file's end) is ever asked for."""

    def __init__(self, fetcher: Fetcher, size: int, policy: Policy, limit: int | None = None):
        self.fetcher, self.size, self.policy = fetcher, size, policy
        self.limit = min(size, limit if limit is not None else size)
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
        a, b = self.pos, min(self.pos + n, self.limit)
        run = self._covered(a)
        if run is None and self.runs and a - (self.runs[-1][0] + len(self.runs[-1][1])) < SKIP_THROUGH:
            run = self.runs[-1]  # a short skip (a string in an array): fetched through, no gap
        if run is None or run[0] + len(run[1]) < b:
            self._fetch(a, b, run)
            run = self._covered(a)
            if run is None:
                raise RemoteError("server", f"{self.fetcher.label()}: no bytes came for {a:,}.", "try again.")
        start, buf = run
        out = bytes(memoryview(buf)[a - start:b - start])
        self.pos = a + len(out)
        return out

    def _fetch(self, a: int, b: int, run: tuple[int, bytearray] | None) -> None:
        """Bytes up to at least `b` onto `run` (or a new run at `a`), with read-ahead: the parser's hint where it has
        one (the rest of a token list, of the tensor table), else a little; one request ahead at most, never past
        the limit."""
        have_to = run[0] + len(run[1]) if run else a
        ahead = self.policy.first_read if self.first else 64 << 10
        stop = max(b, self.expect_end) if self.expect_end > have_to else max(b, have_to + ahead)
        stop = max(b, min(stop, have_to + self.policy.max_request, self.limit))
        if run is None:
            run = (a, bytearray())
            self.runs.append(run)
        while have_to < stop:
            data = self.fetcher.read(have_to, min(stop, have_to + self.policy.max_request))
            self.first = False
            if not data:
                break
            run[1].extend(data)
            have_to += len(data)

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


@dataclass(frozen=True)
class RemoteHeader:
    header: gguf.Header
    head: bytes | bytearray  # the stand-in's first data_offset bytes
    size: int  # the remote file's size
    fetched: int  # bytes received for it
    requests: int
    filled: tuple[str, ...] = ()  # the arrays filled instead of fetched


def header(fetcher: Fetcher, size: int | None = None, policy: Policy | None = None) -> RemoteHeader:
    """The GGUF header of the file behind `fetcher`, read with the hostile reader's checks; `size` is the file's
    size where the caller knows it (else the first read's Content-Range says it; where both do, they must agree).
    No request reaches past `policy.max_header`, and memory holds at most the header's bytes twice (what was
    fetched, then the header assembled from it)."""
    policy = policy or fetcher.policy
    first = None
    fetcher.size = size if size is not None else fetcher.size
    if size is None:
        first = fetcher.read(0, policy.first_read)
        if fetcher.size is None:
            raise RemoteError("server", f"{fetcher.label()}: the server did not say the file's size "
                              "(Content-Range bytes a-b/SIZE).", "use --download, or a server that answers Range "
                              "requests with the total size.")
        size = fetcher.size
    if size > gguf.MAX_MODEL + gguf.MAX_HEADER:
        raise gguf.damaged(f"the server says the file is {size:,} bytes")
    avail = min(size, policy.max_header)
    f = _RangeFile(fetcher, size, policy, limit=avail)
    if first is not None:
        f.runs.append((0, bytearray(first)))
        f.first = False
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
    return RemoteHeader(header=hdr, head=head, size=size, fetched=fetcher.fetched,
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
    """The header's bytes, in one buffer: what was read (the runs are released), the gaps fetched verbatim (in
    pieces of one request), filled, or padding."""
    gaps = f.gaps(lay.data_offset)
    head = bytearray(lay.data_offset)  # zeros: the padding before the tensor data stays so
    for s, d in f.runs:
        if s < lay.data_offset:
            n = min(len(d), lay.data_offset - s)
            head[s:s + n] = memoryview(d)[:n]
    f.runs.clear()
    for a, b in gaps:
        if any(fa <= a and b <= fb for fa, fb, _ in fills):
            continue  # filled below, item by item
        if b == lay.data_offset and b - a < lay.alignment:
            continue  # the padding before the tensor data
        for p in range(a, b, fetcher.policy.max_request):  # seeked over and needed verbatim (a long array of numbers)
            q = min(b, p + fetcher.policy.max_request)
            data = fetcher.read(p, q)
            if len(data) != q - p:
                raise RemoteError("server", f"{fetcher.label()}: the header could not be assembled at byte {p:,}.",
                                  "the server sent fewer bytes than it has; try again.")
            head[p:q] = data
    for a, b in gaps:  # an item half fetched, half filled is all fill: never a mixed value
        for fa, fb, item in fills:
            if fa <= a and b <= fb:
                n = len(item)
                lo, hi = fa + (a - fa) // n * n, min(fb, fa + -(-(b - fa) // n) * n)
                head[lo:hi] = item * ((hi - lo) // n)
    return head


# ---------------------------------------------------------------- a whole file (--download)


def download(fetcher: Fetcher, dest: Path, size: int | None, *, sha256: str | None = None, validator: str = "",
             progress: Callable[[int, int], None] | None = None, chunk: int = 8 << 20) -> Path:
    """The whole file into `dest` (through `dest.part`), its size and (where published) its sha256 checked before
    it is renamed into place. An earlier download's `.part` is resumed only where it came from the same file: the
    same `validator` (ETag and Last-Modified, beside it in `.part.from`) or a published sha256 (a splice fails its
    check); a file without either starts over, so two versions of a file are never spliced. `size` None: the first
    answer says it."""
    part = dest.with_name(dest.name + ".part")
    mark = dest.with_name(dest.name + ".part.from")
    dest.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.is_file() else 0
    # the same file: the same validator as the bytes already there, or a published digest (checked at the end)
    same = bool(sha256) or (bool(validator) and mark.is_file() and mark.read_text(errors="replace") == validator)
    if not same or size is None or have > size:
        have = 0  # another file's bytes, or bytes that cannot be told from another file's: start over
    mark.write_text(validator)
    with open(part, "r+b" if have else "wb") as out:
        out.seek(have)
        out.truncate()
        size = _fill(fetcher, out, have, size, progress, min(chunk, fetcher.policy.max_request))
    if sha256:
        digest = sha256_of(part)
        if digest != sha256.lower():
            part.unlink()
            raise ModelError(f"{fetcher.label()}: the downloaded file has sha256 {digest}, but {sha256} is "
                             "published; it was deleted.", tip="download it again; if it persists, the server "
                             "serves another file than it lists.")
    os.replace(part, dest)
    mark.unlink(missing_ok=True)
    return dest


def _fill(fetcher: Fetcher, out: BinaryIO, have: int, size: int | None, progress: Callable[[int, int], None] | None,
          chunk: int) -> int:
    """`out` from byte `have` to the file's end by Range requests (one GET where the server ignores Range); the
    file's size, as known before or as the first answer says."""
    fetcher.size = size
    while size is None or have < size:
        proc.check_stop()
        try:
            data = fetcher.read(have, have + chunk if size is None else min(size, have + chunk))
        except RemoteError as e:
            if e.kind != "no-range":
                raise
            out.seek(0)
            out.truncate()
            return fetcher.whole(out, size, progress)  # no Range: the whole file in one GET, no resume
        size = fetcher.size
        if size is None:
            raise RemoteError("server", f"{fetcher.label()}: the server did not say the file's size "
                              "(Content-Range bytes a-b/SIZE).", "download the file yourself and pass its path.")
        if not data:
            raise RemoteError("stalled", f"{fetcher.label()}: the server sent nothing at byte {have:,}.",
                              "try again: the download resumes where it stopped.")
        out.write(data)
        have += len(data)
        if progress:
            progress(have, size)
    return size


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(8 << 20), b""):
            proc.check_stop()
            h.update(block)
    return h.hexdigest()
