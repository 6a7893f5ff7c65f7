"""The GGUF header read without loading the model: its metadata and tensor table, from a file or from any
source of bytes (a Range reader), every count and size bounded before it is trusted. `layout` and `header` are
pure (bytes in); `read_header` and `read_layout` open a file.
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from ..core.errors import ModelError

MAGIC = b"GGUF"


DEFAULT_ALIGNMENT = 32
# What a sane header holds. llama.cpp itself takes any length that fits the file; these bounds only refuse files no
# converter writes, so that a damaged or hostile header costs neither memory nor time.
# What a sane header holds. llama.cpp itself takes any length that fits the file; these bounds only refuse files no
# converter writes, so that a damaged or hostile header costs neither memory nor time.
MAX_HEADER = 1 << 30  # bytes of metadata and tensor table (a 256k-token vocabulary with merges: ~20 MB)


MAX_STRING = 64 << 20  # one string (chat templates: ~100 KB)


MAX_STRINGS = 1 << 22  # strings in one array (vocabularies: ~260k tokens)


MAX_KV = 1 << 16  # metadata keys (models have ~50)


MAX_TENSORS = 1 << 20  # tensors (models have ~300 to ~3,000)


MAX_MODEL = 1 << 50  # bytes of tensor data (1 PiB)


GGML_MAX_DIMS = 4


GGML_MAX_NAME = 64


class HeaderIncomplete(ModelError):
    """The bytes end inside the GGUF header."""

    def __init__(self, have: int, need_more_than: int):
        super().__init__(f"the GGUF header continues past the {have:,} bytes available.",
                         tip=f"copy more of the file's beginning (at least {need_more_than // 2**20 + 1} MiB), "
                             "e.g. head -c 64M model.gguf > head.gguf.")
        self.have = have


def damaged(what: str) -> ModelError:
    return ModelError(f"the GGUF header is damaged: {what}.",
                      tip="the file is not a model any converter writes; download or convert it again.")


_damaged = damaged


@dataclass(frozen=True)
class Layout:
    version: int
    n_tensors: int
    n_kv: int
    alignment: int
    data_offset: int  # where tensor data starts: the header is bytes [0, data_offset)
    data_size: int  # bytes of tensor data the header describes
    split_count: int = 1

    @property
    def file_size(self) -> int:
        return self.data_offset + self.data_size


class Source(Protocol):
    """What `Reader` reads from: a file opened for binary reading, or rangeio's remote file."""

    def read(self, n: int, /) -> bytes: ...

    def seek(self, offset: int, whence: int = ..., /) -> int: ...


class Reader:
    """Reads a header from a file object, `avail` bytes long, in small pieces: what it skips (token lists, score
    arrays) is seeked over, never held in memory."""

    def __init__(self, f: Source, avail: int):
        self.f, self.avail, self.pos = f, avail, 0
        self._expect = getattr(f, "expect", None)  # a remote file's read-ahead hint (rangeio); files have none
        self.listed = 0  # array items read into lists so far (LIST_TOTAL bounds them)

    def expect(self, n: int) -> None:
        """About `n` more bytes will be read from here on (a remote file fetches them in one request)."""
        if self._expect is not None:
            self._expect(n)

    def _need(self, n: int) -> None:
        if self.pos + n > min(self.avail, MAX_HEADER):
            if self.pos + n > MAX_HEADER:
                raise _damaged(f"it runs past {MAX_HEADER >> 20} MiB")
            raise HeaderIncomplete(self.avail, self.pos + n)

    def take(self, n: int) -> bytes:
        self._need(n)
        out = self.f.read(n)
        if len(out) < n:  # the file shrank while being read
            raise HeaderIncomplete(self.pos + len(out), self.pos + n)
        self.pos += n
        return out

    def skip(self, n: int) -> None:
        self._need(n)
        self.f.seek(n, os.SEEK_CUR)
        self.pos += n

    def u(self, fmt: str) -> int:
        """An unsigned or signed integer of struct format `fmt`."""
        v = self.scalar(fmt)
        assert isinstance(v, int), fmt  # an integer format gives an int
        return v

    def scalar(self, fmt: str) -> int | float | bool:
        """One value of struct format `fmt` (an integer, a float or a bool)."""
        v: int | float | bool = struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))[0]
        return v

    def length(self, what: str, limit: int) -> int:
        n = self.u("Q")
        if n > limit:
            raise _damaged(f"{what} claims {n:,} (more than {limit:,})")
        return n

    def string(self, what: str = "a string's length") -> bytes:
        return self.take(self.length(what, MAX_STRING))

    def skip_strings(self, n: int) -> None:
        """Skip `n` strings (each a u64 length and its bytes) as `n` × (`length`, `skip`) would, failing where they
        would, but from a few large reads: a 150k-token vocabulary is 300k small reads otherwise."""
        limit = min(self.avail, MAX_HEADER)
        start = p = self.pos  # p: where the next string starts
        buf, base = b"", p  # buf holds the bytes from base on; the file stands at base + len(buf)
        for i in range(n):
            if i and not i % 4096:  # read-ahead for the rest, at the mean length so far
                self.expect((n - i) * (p - start) // i + 4096)
            if p + 8 > base + len(buf):
                buf, base = self._window(p, 8, limit, base + len(buf))
            k = int.from_bytes(buf[p - base:p - base + 8], "little")
            if k > MAX_STRING:
                raise _damaged(f"a string's length claims {k:,} (more than {MAX_STRING:,})")
            if p + 8 + k > limit:
                self._at(p + 8, base + len(buf))
                self._need(k)
            p += 8 + k
        self._at(p, base + len(buf))

    def _window(self, p: int, need: int, limit: int, filepos: int) -> tuple[bytes, int]:
        """The bytes from `p` on (at least `need`, up to 64 KiB, never past `limit`), read from a file at `filepos`;
        the file then stands at their end. At most 64 KiB past the strings is read (a remote file fetches it)."""
        self._at(p, filepos)
        self._need(need)
        out = self.f.read(max(need, min(WINDOW, limit - p)))
        if len(out) < need:  # the file shrank while being read
            raise HeaderIncomplete(p + len(out), p + need)
        return out, p

    def _at(self, p: int, filepos: int) -> None:
        """Move the file (now at `filepos`) and the reader's position to `p`."""
        if p != filepos:
            self.f.seek(p - filepos, os.SEEK_CUR)
        self.pos = p


# GGUF value types → struct format (8: string, 9: array)
# GGUF value types → struct format (8: string, 9: array)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


WINDOW = 64 << 10  # Reader.skip_strings reads this much at a time


LIST_MAX = 4096  # arrays of numbers up to this length are read (per-layer values); longer ones only counted
# array items read into lists in one header: a Python list holds 8 bytes a number (and a float object 24 more), so a
# header of 30,000 keys of 4,096 bytes each would take 8x its size; past this, arrays are only counted
LIST_TOTAL = 1 << 16


@dataclass(frozen=True)
class ArrayInfo:
    """A long array in the header (token lists, scores, merges): its element type and length, not its items."""

    item_type: int
    length: int
    offset: int = field(default=-1, compare=False)  # where its first item starts in the file

    def __len__(self) -> int:
        return self.length


Value = int | float | bool | bytes | list[int | float | bool] | ArrayInfo  # a header value as read


def _value(r: Reader, vtype: int, key: str) -> Value:
    if vtype in _SCALARS:
        return r.scalar(_SCALARS[vtype])
    if vtype == 8:
        return r.string()
    if vtype == 9:
        itype, n = r.u("I"), r.u("Q")
        if itype in _SCALARS:
            size = struct.calcsize("<" + _SCALARS[itype])
            if n > MAX_HEADER // size:
                raise _damaged(f"the array {key!r} claims {n:,} items")
            if n > LIST_MAX or r.listed + n > LIST_TOTAL:  # token scores (100k+ floats), or lists enough: counted
                at = r.pos
                r.skip(size * n)
                return ArrayInfo(itype, n, at)
            r.listed += n
            return list(struct.unpack(f"<{n}{_SCALARS[itype]}", r.take(size * n)))
        if itype == 8:
            if n > MAX_STRINGS:
                raise _damaged(f"the array {key!r} claims {n:,} strings")
            at = r.pos
            r.expect(n * 16)
            r.skip_strings(n)
            return ArrayInfo(itype, n, at)
        if itype == 9:  # llama.cpp refuses arrays of arrays too
            raise _damaged(f"{key!r} is an array of arrays")
    raise ModelError(f"unknown GGUF value type {vtype} in the header (key {key!r}).",
                     tip="the file may be damaged, or newer than this llamalab's GGUF reader.")


def _nbytes(name: str, ggml_type: int, ne: list[int]) -> int:
    """Bytes of one tensor, checked as llama.cpp checks them (gguf.cpp): row length a multiple of the block size."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise ModelError(f"tensor {name!r} has type {ggml_type}, unknown to the installed gguf package.",
                         tip="upgrade it (pip install -U gguf), or check the file: it may be damaged.") from None
    if ne[0] % block:
        raise _damaged(f"tensor {name!r} has rows of {ne[0]} elements, not a multiple of its block size {block}")
    n = 1
    for d in ne[1:]:
        n *= d
    return ne[0] // block * size * n


@dataclass(frozen=True)
class Header:
    layout: Layout
    kv: dict[str, object]  # strings decoded; long arrays as ArrayInfo
    tensors: tuple[tuple[str, int, int], ...]  # (name, data offset from the data start, bytes)


def layout(head: bytes) -> Layout:
    """The layout of a GGUF file from its first bytes (at least the whole header). Pure."""
    return header(head).layout


def header(head: bytes) -> Header:
    """Metadata, tensor table and layout of a GGUF file from its first bytes. Pure; fast on 150k-token
    vocabularies (token lists are counted, not read into Python objects)."""
    return parse_header(Reader(io.BytesIO(head), len(head)))


def parse_header(r: Reader) -> Header:
    """What `header` says, read as llama.cpp's gguf.cpp reads it, with its checks: a damaged or hostile header is
    a ModelError, never a crash, a hang or a large allocation."""
    if r.take(4) != MAGIC:
        raise ModelError("this is not a GGUF file (it does not start with b'GGUF').",
                         tip="llama.cpp loads GGUF models only.")
    version = r.u("I")
    if version not in (2, 3):
        raise ModelError(f"GGUF version {version} is not supported here (2 and 3 are; a huge number means a "
                         "big-endian file).", tip="convert the model with a current llama.cpp.")
    n_tensors, n_kv = r.u("Q"), r.u("Q")
    if n_kv > MAX_KV:
        raise _damaged(f"it claims {n_kv:,} metadata keys")
    if n_tensors > MAX_TENSORS:
        raise _damaged(f"it claims {n_tensors:,} tensors")
    kv: dict[str, object] = {}
    for _ in range(n_kv):
        key = r.string("a key's length").decode("utf-8", "replace")
        if key in kv:
            raise _damaged(f"the key {key!r} appears twice")
        value = _value(r, r.u("I"), key)
        kv[key] = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    alignment = kv.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
        raise _damaged(f"general.alignment is {alignment!r}, not a power of 2")
    count = kv.get("split.count")
    split_count = count if isinstance(count, int) else 1
    tensors = []
    names: set[str] = set()
    expected = 0  # llama.cpp wants each tensor right after the one before, padded to the alignment
    at = r.pos
    r.expect(n_tensors * 64)
    for i in range(n_tensors):
        if i and not i % 64:
            r.expect((n_tensors - i) * (r.pos - at) // i + 256)
        name = r.string("a tensor name's length").decode("utf-8", "replace")
        if len(name) >= GGML_MAX_NAME or name in names:
            raise _damaged(f"the tensor name {name[:80]!r} is too long or appears twice")
        names.add(name)
        n_dims = r.u("I")
        if n_dims > GGML_MAX_DIMS:
            raise _damaged(f"tensor {name!r} has {n_dims} dimensions (at most {GGML_MAX_DIMS})")
        ne = [r.u("q") for _ in range(n_dims)] + [1] * (GGML_MAX_DIMS - n_dims)  # 0 dimensions: one element
        if any(d < 0 for d in ne):
            raise _damaged(f"tensor {name!r} has a negative dimension {ne}")
        ggml_type, offset = r.u("I"), r.u("Q")
        nbytes = _nbytes(name, ggml_type, ne)
        if offset != expected:
            raise _damaged(f"tensor {name!r} has its data at offset {offset:,}, llama.cpp expects {expected:,}")
        expected = offset + nbytes + (-nbytes) % alignment
        if expected > MAX_MODEL:
            raise _damaged(f"its tensors would take {expected:,} bytes")
        tensors.append((name, offset, nbytes))
    data_offset = r.pos + (-r.pos) % alignment
    lay = Layout(version=version, n_tensors=n_tensors, n_kv=n_kv, alignment=alignment, data_offset=data_offset,
                 data_size=expected, split_count=split_count)
    return Header(layout=lay, kv=kv, tensors=tuple(tensors))


# ---------------------------------------------------------------- files


def check_file(path: Path, what: str = "model file") -> os.stat_result:
    """The stat of a regular file, or a ModelError that says what `path` is instead: missing, a symlink loop, a
    directory, a FIFO, a device, unreadable. A FIFO is never opened (opening it would wait for a writer)."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ModelError(f"{what} {path} is a symlink loop (a link that leads back to itself).",
                             tip="point it at the real .gguf file (readlink -f shows where it leads).") from None
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            raise ModelError(f"{what} {path} does not exist.",
                             tip="check the path, or leave --model out to use llamalab's synthetic model.") from None
        raise ModelError(f"{what} {path} cannot be read: {e.strerror}.", tip="check the path and its permissions.") \
            from None
    if stat.S_ISREG(st.st_mode):
        return st
    kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode)
            else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
            or stat.S_ISBLK(st.st_mode) else "not a regular file")
    raise ModelError(f"{what} {path} is {kind}, not a GGUF file.",
                     tip="pass the .gguf file itself (llamalab reads a model's header before llama.cpp loads it).")


def open_file(path: Path, what: str = "model file") -> BinaryIO:
    """A regular file opened for reading; anything else is refused before it can block (see check_file)."""
    check_file(path, what)
    try:  # O_NONBLOCK: if the path became a FIFO since the check, opening it does not wait
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ModelError(f"{what} {path} cannot be opened: {e.strerror}.", tip="check its permissions.") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        check_file(path, what)  # says what it is now
        raise ModelError(f"{what} {path} is not a regular file.", tip="pass the .gguf file itself.")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb", buffering=1 << 20)


def read_layout(path: Path) -> Layout:
    return read_header(path).layout


def read_header(path: Path) -> Header:
    """The header of a GGUF file, read in small pieces: memory holds what the header says, never the file."""
    with open_file(path) as f:
        return parse_header(Reader(f, os.fstat(f.fileno()).st_size))


def split_parts(path: Path) -> list[Path]:
    """Every part of the model whose first file is `path` (llama.cpp's gguf-split naming,
    PREFIX-00001-of-0000N.gguf, beside it); `path` alone for a model in one file."""
    path = Path(path)
    m = re.match(r"^(.+)-00001-of-(\d{5})\.gguf$", path.name)
    if not m or read_layout(path).split_count <= 1:
        return [path]
    n = int(m.group(2))
    return [path.with_name(f"{m.group(1)}-{i:05d}-of-{n:05d}.gguf") for i in range(1, n + 1)]

