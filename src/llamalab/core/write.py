"""The one place reports, exports and stand-ins are written to files: atomically (a temporary file beside the target,
then os.replace), and only where that destroys nothing.

A target is refused, as an OutputError that names it, why, and which option put it there, when it is:
- not a regular file: a symlink, a FIFO, a device node, a socket or a directory (os.replace would put a new file in
  its place, e.g. turn /dev/full into a JSON file);
- a file the command reads: the same file (device and inode, so a hard link or another spelling of the path counts
  too) as the results database or its -wal and -shm files, or the model `stub` copies;
- read-only (no write permission for anyone, or not writable by this user): replacing it would need no permission
  on the file at all, only on its folder, and the user made it read-only to keep it;
- in a folder that cannot be written (as the error the file system gave, in words).

An existing target keeps its permission bits (a private 0600 file stays 0600); a new one gets 0666 less the umask.
The temporary file has a short name of its own (`.llamalab-XXXXXXXX.tmp`), so any name the file system allows (255
bytes) can be written. Several files (a CSV and its companion, plots) are written all or nothing: every target is
checked first, then all are written to temporary files, then all replace their targets.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .errors import OutputError

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))

Data = str | bytes | Iterable[str | bytes] | Callable[[BinaryIO], None]


@dataclass(frozen=True)
class Target:
    """A file to write: where, what, and where its name came from (`how`: "-o", "--plots", "beside -o" …), so that an
    error names the option to change."""
    path: Path
    data: Data
    how: str = "-o"


def db_files(db: Path) -> list[Path]:
    """The results database and the files SQLite keeps beside it: what a command that reads it must not overwrite."""
    db = Path(db)
    return [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"), db.with_name(db.name + "-journal")]


def _tip(how: str) -> str:
    if how == "-o":
        return "give -o a new file name (or an existing regular file to overwrite)."
    if how.startswith("--plots"):
        return "give --plots another folder, or move aside what is in the way there."
    return f"that file is written {how}: move aside what is in the way, or give -o another name."


def check_target(path: Path, reads: Sequence[Path] = (), how: str = "-o") -> None:
    """An OutputError unless `path` is absent or a regular file this user may write that the command does not read
    (a symlink counts as itself, not its target)."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise output_error(path, e, how) from e
    if not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
        raise OutputError(f"{path} ({how}) is {kind}; llamalab writes only regular files and will not replace it.",
                          tip=_tip(how))
    for r in reads:
        try:
            other = os.stat(r)
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            same = "" if Path(r) == path else f" ({r})"
            raise OutputError(f"{path} ({how}) is the file this command reads{same}; writing there would destroy "
                              "it, so nothing was written.", tip=_tip(how))
    if not st.st_mode & 0o222 or not os.access(path, os.W_OK):
        raise OutputError(f"{path} ({how}) is read-only (mode {stat.S_IMODE(st.st_mode):04o}); llamalab will not "
                          "replace a file its owner made read-only.",
                          tip=f"make it writable first (chmod u+w {path}) if it may go, or {_tip(how)}")


def output_error(path: Path, e: OSError, how: str = "-o") -> OutputError:
    """A failure of the file system while writing `path`, in words, with what to do about that cause."""
    why = e.strerror or str(e)
    folder = Path(path).parent
    if e.errno == errno.ENOSPC or e.errno == errno.EDQUOT:
        tip = f"free some space on the disk that holds {folder}, or {_tip(how)}"
    elif e.errno == errno.ENAMETOOLONG:
        tip = f"the file system allows names of at most 255 bytes: {_tip(how)}"
    elif e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        tip = f"{folder} cannot be written by this user: choose a folder you can write to, or fix its permissions."
    else:
        tip = "choose a path in a folder you can write to (with free space), or fix that folder's permissions."
    return OutputError(f"cannot write {path} ({how}): {why}.", tip=tip)


def _fill(f: BinaryIO, data: Data) -> None:
    if isinstance(data, str):
        f.write(data.encode("utf-8"))
    elif isinstance(data, bytes | bytearray):
        f.write(data)
    elif callable(data):
        data(f)
    else:
        for piece in data:
            f.write(piece.encode("utf-8") if isinstance(piece, str) else piece)


def _mode(path: Path) -> int:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return 0o666 & ~current_umask()


def _temp(path: Path, how: str) -> tuple[int, Path]:
    folder = path.parent
    for _ in range(16):
        tmp = folder / f".llamalab-{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), tmp
        except FileExistsError:
            continue
        except OSError as e:
            raise output_error(path, e, how) from e
    raise OutputError(f"cannot make a temporary file in {folder} ({how}).", tip=_tip(how))


def write_all(targets: Sequence[Target], reads: Sequence[Path] = ()) -> list[Path]:
    """Write every target, or none: each is checked (`check_target`), then each is written to a temporary file
    beside it, then each replaces its target. Any failure before the replacing leaves every target as it was."""
    paths = [Path(t.path) for t in targets]
    for t, p in zip(targets, paths):
        check_target(p, reads, t.how)
    temps: list[Path] = []
    try:
        for t, p in zip(targets, paths):
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise output_error(p, e, t.how) from e
            fd, tmp = _temp(p, t.how)
            temps.append(tmp)
            try:
                with os.fdopen(fd, "wb") as f:
                    _fill(f, t.data)
                os.chmod(tmp, _mode(p))
            except OSError as e:
                raise output_error(p, e, t.how) from e
        for t, p in zip(targets, paths):  # once more, just before the renames: something may have appeared meanwhile
            check_target(p, reads, t.how)
        for t, p, tmp in zip(targets, paths, temps):
            try:
                os.replace(tmp, p)
            except OSError as e:
                raise output_error(p, e, t.how) from e
    finally:
        for tmp in temps:
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass
            except OSError:
                pass
    return paths


def atomic_write(path: Path, data: Data, *, reads: Sequence[Path] = (), how: str = "-o") -> Path:
    """Write one file (see `write_all`)."""
    return write_all([Target(Path(path), data, how)], reads)[0]


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
