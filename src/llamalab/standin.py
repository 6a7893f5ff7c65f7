"""Header-only stand-ins for GGUF models: plan a 70B model from the first few MiB of its file.

llama.cpp's memory fit (the no-alloc dry run `llamalab plan` uses) reads a GGUF's header — metadata and the
table of tensors — and never a tensor's data. It does check that every tensor lies inside the file, so a plain
cut of the first MiB is refused ("data is not within the file bounds"). A stand-in is the real header followed by
a hole up to the size the header says the file has: a sparse file that takes a few MiB of disk whatever its size.

    head -c 64M Llama-3.3-70B-Q4_K_M.gguf > head.gguf     # on the machine that has the model
    llamalab plan pipeline-parallel --model head.gguf      # anywhere: the stand-in is made on the fly
    llamalab stub head.gguf -o llama70b-standin.gguf       # or explicitly

`layout` is pure (bytes in); `write` and `ensure` do the file work.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelError
from .report.write import check_target, current_umask, output_error

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
FIRST_READ = 16 << 20


class HeaderIncomplete(ModelError):
    """The bytes end inside the GGUF header."""

    def __init__(self, have: int, need_more_than: int):
        super().__init__(f"the GGUF header continues past the {have:,} bytes available.",
                         tip=f"copy more of the file's beginning (at least {need_more_than // 2**20 + 1} MiB), "
                             "e.g. head -c 64M model.gguf > head.gguf.")
        self.have = have


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


class _Reader:
    def __init__(self, buf: bytes):
        self.buf, self.pos = buf, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise HeaderIncomplete(len(self.buf), self.pos + n)
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def u(self, fmt: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))[0]

    def string(self) -> bytes:
        return self.take(self.u("Q"))


# GGUF value types → struct format (8: string, 9: array)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
LIST_MAX = 4096  # arrays of numbers up to this length are read (per-layer values); longer ones only counted


@dataclass(frozen=True)
class ArrayInfo:
    """A long array in the header (token lists, scores, merges): its element type and length, not its items."""

    item_type: int
    length: int

    def __len__(self) -> int:
        return self.length


def _value(r: _Reader, vtype: int):
    if vtype in _SCALARS:
        return r.u(_SCALARS[vtype])
    if vtype == 8:
        return r.string()
    if vtype == 9:
        itype, n = r.u("I"), r.u("Q")
        if itype in _SCALARS:
            fmt = _SCALARS[itype]
            raw = r.take(struct.calcsize("<" + fmt) * n)  # token score arrays hold 100k+ floats: skip those
            return list(struct.unpack(f"<{n}{fmt}", raw)) if n <= LIST_MAX else ArrayInfo(itype, n)
        if itype == 8:
            for _ in range(n):
                r.take(r.u("Q"))
            return ArrayInfo(itype, n)
        return [_value(r, itype) for _ in range(n)]
    raise ModelError(f"unknown GGUF value type {vtype} in the header.",
                     tip="the file may be damaged, or newer than this llamalab's GGUF reader.")


def _nbytes(ggml_type: int, ne: list[int]) -> int:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise ModelError(f"tensor type {ggml_type} is unknown to the installed gguf package.",
                         tip="upgrade it: pip install -U gguf.") from None
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
    r = _Reader(head)
    if r.take(4) != MAGIC:
        raise ModelError("this is not a GGUF file (it does not start with b'GGUF').",
                         tip="llama.cpp loads GGUF models only.")
    version = r.u("I")
    if version not in (2, 3):
        raise ModelError(f"GGUF version {version} is not supported here (2 and 3 are; a huge number means a "
                         "big-endian file).", tip="convert the model with a current llama.cpp.")
    n_tensors, n_kv = r.u("Q"), r.u("Q")
    kv: dict[str, object] = {}
    for _ in range(n_kv):
        key = r.string().decode("utf-8", "replace")
        value = _value(r, r.u("I"))
        kv[key] = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    alignment = kv.get("general.alignment") if isinstance(kv.get("general.alignment"), int) else DEFAULT_ALIGNMENT
    split_count = kv.get("split.count") if isinstance(kv.get("split.count"), int) else 1
    tensors = []
    end = 0
    for _ in range(n_tensors):
        name = r.string().decode("utf-8", "replace")
        ne = [r.u("q") for _ in range(r.u("I"))]
        ggml_type, offset = r.u("I"), r.u("Q")
        nbytes = _nbytes(ggml_type, ne)
        tensors.append((name, offset, nbytes))
        end = max(end, offset + nbytes)
    data_offset = r.pos + (-r.pos) % alignment
    lay = Layout(version=version, n_tensors=n_tensors, n_kv=n_kv, alignment=alignment, data_offset=data_offset,
                 data_size=end + (-end) % alignment, split_count=split_count)
    return Header(layout=lay, kv=kv, tensors=tuple(tensors))


# ---------------------------------------------------------------- files


def read_layout(path: Path) -> Layout:
    return read_header(path).layout


def read_header(path: Path) -> Header:
    """The header of a GGUF file, reading only as much of it as the header takes."""
    size = path.stat().st_size
    n = min(size, FIRST_READ)
    with open(path, "rb") as f:
        while True:
            f.seek(0)
            head = f.read(n)
            try:
                return header(head)
            except HeaderIncomplete:
                if n >= size:
                    raise
                n = min(size, n * 4)


def is_complete(path: Path) -> bool:
    """Whether the file is as long as its header says (a full model, or already a stand-in)."""
    return path.stat().st_size >= read_layout(path).file_size


def write(src: Path, dest: Path) -> Path:
    """Write a sparse stand-in of `src` (a full model or any prefix of one holding its header) to `dest`."""
    lay = read_layout(src)
    if lay.split_count > 1:
        raise ModelError(f"{src} is one part of a {lay.split_count}-part split model; stand-ins of split models "
                         "are not supported.", tip="merge it first with llama-gguf-split --merge, then copy its head.")
    with open(src, "rb") as f:
        head = f.read(lay.data_offset)
    check_target(dest)  # a link, FIFO, device or directory at `dest` is refused, never replaced
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="." + dest.name + ".", dir=dest.parent)
    except OSError as e:
        raise output_error(dest, e) from e
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(head)
            f.truncate(lay.file_size)
        os.chmod(tmp, 0o666 & ~current_umask())
        check_target(dest)
        os.replace(tmp, dest)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise output_error(dest, e) from e
        raise
    return dest


def ensure(path: Path, home: Path) -> tuple[Path, bool]:
    """`path` itself when it is complete, else its stand-in (cached under `home/models`). Returns (path, made)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelError(f"model file {path} does not exist.", tip="check the path.")
    lay = read_layout(path)
    if path.stat().st_size >= lay.file_size:
        return path, False
    with open(path, "rb") as f:
        key = hashlib.sha256(f.read(lay.data_offset)).hexdigest()[:12]
    dest = home / "models" / f"standin-{path.stem}-{key}.gguf"
    if not dest.is_file():
        write(path, dest)
    return dest, True
