"""The one place reports and exports are written to files: atomically (temporary file, then os.replace).

Only a regular file is ever replaced: a symlink, a FIFO, a device node, a socket or a directory at the path is
refused (os.replace would put a new file in its place, e.g. turn /dev/full into a JSON file), and so is a path
whose folder cannot be written. Each of these is an OutputError with what to do, never a traceback.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import OutputError

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_target(path: Path) -> None:
    """An OutputError unless `path` is absent or a regular file (a symlink counts as itself, not its target)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise output_error(path, e) from e
    if stat.S_ISREG(mode):
        return
    kind = next((k for test, k in _KINDS if test(mode)), "not a regular file")
    raise OutputError(f"{path} is {kind}; llamalab writes only regular files and will not replace it.",
                      tip="give -o a new file name (or an existing regular file to overwrite).")


def output_error(path: Path, e: OSError) -> OutputError:
    why = e.strerror or str(e)
    return OutputError(f"cannot write {path}: {why}.",
                       tip="choose a path in a folder you can write to (with free space), or fix that folder's "
                           "permissions.")


def atomic_write(path: Path, data: str | bytes) -> Path:
    path = Path(path)
    check_target(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise output_error(path, e) from e
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", dir=path.parent)
    except OSError as e:
        raise output_error(path, e) from e
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600; a report is an ordinary file
        check_target(path)  # once more, just before the rename: something may have appeared there meanwhile
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise output_error(path, e) from e
        raise
    return path


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
