"""Header-only stand-ins for GGUF models: plan a 70B model from the first few MiB of its file.

llama.cpp's memory fit (the no-alloc dry run `llamalab plan` uses) reads a GGUF's header — metadata and the
table of tensors — and never a tensor's data. It does check that every tensor lies inside the file, so a plain
cut of the first MiB is refused ("data is not within the file bounds"). A stand-in is the real header followed by
a hole up to the size the header says the file has: a sparse file that takes a few MiB of disk whatever its size.

    head -c 64M Llama-3.3-70B-Q4_K_M.gguf > head.gguf     # on the machine that has the model
    llamalab plan pipeline-parallel --model head.gguf      # anywhere: the stand-in is made on the fly
    llamalab stub head.gguf -o llama70b-standin.gguf       # or explicitly

`layout` is pure (bytes in); `write` and `ensure` do the file work."""

from __future__ import annotations

import errno
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Protocol

from ..core.errors import ModelError, OutputError
from ..core.write import atomic_write
from .gguf import check_file, open_file, read_layout


def is_sparse(path: Path) -> bool:
    """A header-only stand-in (`llamalab stub`): a sparse file that holds far less than its size (False where the
    file cannot be read)."""
    try:
        st = path.stat()
    except OSError:
        return False
    return st.st_blocks * 512 < st.st_size // 4


def is_complete(path: Path) -> bool:
    """Whether the file is as long as its header says (a full model, or already a stand-in)."""
    return path.stat().st_size >= read_layout(path).file_size


class _Digest(Protocol):
    def update(self, data: bytes, /) -> None: ...


def _copy_head(src: BinaryIO, n: int, dest: BinaryIO | None = None, digest: _Digest | None = None) -> None:
    """The first n bytes of src (fewer where it ends in the padding after its header) into dest and/or a hash,
    1 MiB at a time."""
    src.seek(0)
    while n > 0:
        chunk = src.read(min(n, 1 << 20))
        if not chunk:
            return
        n -= len(chunk)
        if dest is not None:
            dest.write(chunk)
        if digest is not None:
            digest.update(chunk)


def write(src: Path, dest: Path) -> Path:
    """Write a sparse stand-in of `src` (a full model or any prefix of one holding its header) to `dest`."""
    lay = read_layout(src)
    if lay.split_count > 1:
        raise ModelError(f"{src} is one part of a {lay.split_count}-part split model; stand-ins of split models "
                         "are not supported.", tip="merge it first with llama-gguf-split --merge, then copy its head.")
    src, dest = Path(src), Path(dest)

    def fill(out: BinaryIO) -> None:
        with open_file(src) as f:
            _copy_head(f, lay.data_offset, out)

    return _sparse(dest, lay.file_size, fill, reads=[src])


def write_head(head: bytes | bytearray, file_size: int, dest: Path, how: str = "-o") -> Path:
    """Write a sparse stand-in from a header's bytes (`head`, all of [0, data_offset)) to `dest` (`how`: what put
    the path there, for errors)."""
    return _sparse(Path(dest), file_size, lambda out: out.write(head), how=how)


def _sparse(dest: Path, file_size: int, fill: Callable[[BinaryIO], object], reads: list[Path] | None = None,
            how: str = "-o") -> Path:
    """`dest` atomically (write.atomic_write): what `fill(out)` writes, then a hole up to `file_size` bytes."""

    def whole(out: BinaryIO) -> None:
        fill(out)
        out.truncate(file_size)

    try:  # a link, FIFO, device, directory, read-only file or the model itself at `dest` is refused, never replaced
        atomic_write(dest, whole, reads=reads or [], how=how)
    except OutputError as e:
        cause = e.__cause__
        if isinstance(cause, OSError) and cause.errno == errno.EFBIG:
            raise ModelError(f"the stand-in would be {file_size:,} bytes, more than the file system at {dest.parent} "
                             "allows in one file.",
                             tip="write it to another file system (ext4, xfs), e.g. -o /tmp/x.gguf.") from None
        raise
    return dest


def ensure(path: Path, home: Path) -> tuple[Path, bool]:
    """`path` itself when it is complete, else its stand-in (cached under `home/models`). Returns (path, made)."""
    path = Path(path).expanduser()
    size = check_file(path).st_size
    lay = read_layout(path)
    if size >= lay.file_size:
        return path, False
    digest = hashlib.sha256()
    with open_file(path) as f:
        _copy_head(f, lay.data_offset, digest=digest)
    dest = home / "models" / f"standin-{path.stem}-{digest.hexdigest()[:12]}.gguf"
    if not dest.is_file():
        write(path, dest)
    return dest, True

