"""Real file-system faults for tests: a full disk (a tiny tmpfs) and a read-only folder. Test support, not llamalab.

As root (CI, the dev VM) these are real mounts: a permission bit does not stop root, a read-only mount does. As
another user a read-only folder is `chmod 555`, and a full disk cannot be made (the test is skipped, saying why).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _mount(*args: str) -> tuple[int, str]:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    return done.returncode, done.stderr.strip()


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextmanager
def tiny_fs(path: Path, size: str = "256k") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` (made if absent): writes past it fail with ENOSPC."""
    if os.geteuid() != 0:
        pytest.skip("a full disk needs root, to mount a tiny tmpfs")
    path.mkdir(parents=True, exist_ok=True)
    rc, err = _mount("-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(path))
    if rc:
        pytest.skip(f"cannot mount a tmpfs here: {err}")
    try:
        yield path
    finally:
        _umount(path)


@contextmanager
def readonly(path: Path) -> Iterator[Path]:
    """`path` (a folder with its contents) made read-only for this process: a read-only bind mount as root,
    chmod 555 otherwise."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        rc, err = _mount("--bind", str(path), str(path))
        if rc:
            pytest.skip(f"cannot bind-mount here: {err}")
        rc, err = _mount("-o", "remount,bind,ro", str(path))
        if rc:
            _umount(path)
            pytest.skip(f"cannot remount read-only here: {err}")
        try:
            yield path
        finally:
            _umount(path)
    else:
        modes = {p: p.stat().st_mode for p in [path, *path.rglob("*")]}
        for p in modes:
            p.chmod(0o555 if p.is_dir() else 0o444)
        try:
            yield path
        finally:
            for p, m in modes.items():
                p.chmod(m)


def fill(folder: Path) -> None:
    """Write into `folder` until its file system is full."""
    with open(folder / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
