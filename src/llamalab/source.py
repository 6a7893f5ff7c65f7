"""llama.cpp source: the pinned PyPI sdist (sha256-checked), or a user's own checkout."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import proc
from .errors import SourceError


@dataclass(frozen=True)
class Pin:
    package: str
    version: str
    sdist: str
    sha256: str
    build_number: int
    commit: str
    date: str


# llama-cpp-python 0.3.36 vendors llama.cpp b11312 (design.md §5.5). The sha256 was read from the sdist that
# `pip download` fetched from PyPI; the commit from the submodule HEAD in its .git metadata.
PINNED = Pin(
    package="llama-cpp-python",
    version="0.3.36",
    sdist="llama_cpp_python-0.3.36.tar.gz",
    sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
    build_number=11312,
    commit="0c1e57098bba43ac29e6e3b677cdceebdd22334f",
    date="2026-10-01",
)

MARKER = ".llamalab-source.json"


@dataclass(frozen=True)
class Source:
    """A llama.cpp source tree llamalab can build."""

    path: Path
    origin: str  # "pypi:llama-cpp-python==0.3.36" or "dir:/abs/path"
    build_number: int | None
    commit: str | None
    dirty: bool = False

    @property
    def version(self) -> str:
        return f"b{self.build_number}" if self.build_number is not None else "unknown"

    @property
    def short_commit(self) -> str:
        return (self.commit or "unknown")[:9]

    @property
    def key(self) -> str:
        """What identifies this source for the build cache."""
        h = hashlib.sha256(f"{self.origin}|{self.commit}".encode()).hexdigest()[:10]
        return f"{self.version}-{h}"

    def cmake_defines(self) -> dict[str, str]:
        """Build number and commit, passed explicitly so a tree without git metadata reports them right."""
        out: dict[str, str] = {}
        if self.build_number is not None:
            out["LLAMA_BUILD_NUMBER"] = str(self.build_number)
        if self.commit:
            out["LLAMA_BUILD_COMMIT"] = self.commit[:7]
        return out

    def as_dict(self) -> dict:
        return {
            "path": str(self.path),
            "origin": self.origin,
            "version": self.version,
            "build_number": self.build_number,
            "commit": self.commit,
            "dirty": self.dirty,
        }


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pinned(home: Path, *, pin: Pin = PINNED, log=print) -> Source:
    """The pinned llama.cpp tree under `home/src`, fetched and extracted on first use."""
    dest = home / "src" / f"llama.cpp-b{pin.build_number}"
    marker = dest / MARKER
    if marker.is_file():
        return _from_marker(dest)
    sdist = _download(home / "downloads", pin, log=log)
    log(f"extracting vendor/llama.cpp from {sdist.name} …")
    commit = _extract_vendor(sdist, dest, pin)
    if commit != pin.commit:
        shutil.rmtree(dest, ignore_errors=True)
        raise SourceError(
            f"the sdist's llama.cpp commit is {commit}, expected {pin.commit}",
            tip="the download may have been replaced upstream; delete the cache folder and try again.",
        )
    return _from_marker(dest)


def _download(folder: Path, pin: Pin, *, log=print) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / pin.sdist
    if target.is_file() and sha256_file(target) == pin.sha256:
        return target
    target.unlink(missing_ok=True)
    log(f"downloading {pin.package}=={pin.version} (sdist, for its vendored llama.cpp) …")
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                f"{pin.package}=={pin.version}", "-d", tmp]
        done = proc.run(argv, log_path=folder / "pip-download.log")
        got = Path(tmp) / pin.sdist
        if done.returncode != 0 or not got.is_file():
            tail = "\n".join(proc.tail_lines(folder / "pip-download.log", 8))
            raise SourceError(
                f"pip could not download {pin.package}=={pin.version} (exit {done.returncode}).\n{tail}",
                tip="check network access to PyPI, or pass --llama-cpp DIR to use a llama.cpp checkout you have.",
            )
        digest = sha256_file(got)
        if digest != pin.sha256:
            raise SourceError(
                f"{pin.sdist} has sha256 {digest}, but llamalab pins {pin.sha256}; refusing to build it.",
                tip="the file on PyPI or a mirror is not the one llamalab was checked against; "
                "use --llama-cpp DIR with a source you trust.",
            )
        got.replace(target)
    return target


def _extract_vendor(sdist: Path, dest: Path, pin: Pin) -> str:
    """Extract `<root>/vendor/llama.cpp/` to `dest` atomically; return the submodule commit."""
    root = sdist.name.removesuffix(".tar.gz")
    prefix = f"{root}/vendor/llama.cpp/"
    head_name = f"{root}/.git/modules/vendor/llama.cpp/HEAD"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest.parent))
    commit = None
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            members = []
            for m in tar:
                if m.name == head_name:
                    f = tar.extractfile(m)
                    commit = f.read().decode().strip() if f else None
                elif m.name.startswith(prefix) and m.name != prefix + ".git":
                    m.name = m.name[len(prefix):]
                    members.append(m)
            tar.extractall(tmp, members=members, filter="data")
        if commit is None:
            raise SourceError(f"{sdist} has no git metadata for vendor/llama.cpp", tip="delete it and retry.")
        (tmp / MARKER).write_text(json.dumps({
            "origin": f"pypi:{pin.package}=={pin.version}",
            "build_number": pin.build_number,
            "commit": commit,
            "sdist_sha256": pin.sha256,
        }, indent=2))
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return commit


def _from_marker(dest: Path) -> Source:
    meta = json.loads((dest / MARKER).read_text())
    return Source(path=dest, origin=meta["origin"], build_number=meta.get("build_number"), commit=meta.get("commit"))


REQUIRED_FILES = ("CMakeLists.txt", "include/llama.h", "ggml/include/ggml.h", "tools/server")


def from_dir(path: Path) -> Source:
    """A user's llama.cpp checkout; its commit and build number come from git when it is a git tree."""
    path = path.expanduser().resolve()
    if not path.is_dir():
        raise SourceError(f"--llama-cpp {path}: no such directory.", tip="pass the folder of a llama.cpp checkout.")
    if (path / MARKER).is_file():
        return _from_marker(path)
    missing = [f for f in REQUIRED_FILES if not (path / f).exists()]
    if missing:
        raise SourceError(
            f"{path} is not a llama.cpp source tree (missing {', '.join(missing)}).",
            tip="point --llama-cpp at the top of a clone of https://github.com/ggml-org/llama.cpp "
            "(the folder holding CMakeLists.txt and tools/server).",
        )
    commit = build_number = None
    dirty = False
    rc, out = proc.capture(["git", "-C", str(path), "rev-parse", "HEAD"])
    if rc == 0:
        commit = out.strip()
        rc, out = proc.capture(["git", "-C", str(path), "rev-list", "--count", "HEAD"])
        if rc == 0 and out.strip().isdigit() and int(out.strip()) > 1:  # a shallow clone counts 1
            build_number = int(out.strip())
        rc, out = proc.capture(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"])
        dirty = rc == 0 and bool(out.strip())
    return Source(path=path, origin=f"dir:{path}", build_number=build_number, commit=commit, dirty=dirty)
