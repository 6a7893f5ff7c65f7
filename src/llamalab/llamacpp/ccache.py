"""ccache for llama.cpp builds: one object cache for every tree llamalab builds, and compile commands that read the
same in every tree, so that a file compiled once with the same flags is not compiled again.

llama.cpp's CMake puts ccache in front of the compilers when it finds it (`GGML_CCACHE`, on by default). ccache
hashes a compile's command line and preprocessed text, and both name the source file: `/a/llama.cpp-b11312/ggml.c`
in one tree and `/b/clone/ggml.c` in another never match, even where the file is the same. So every tree is
configured with its source reached through a link inside the tree (`<tree>/.src`, `SOURCE_LINK`), and ccache's
`base_dir` is the tree: ccache rewrites each absolute path under it relative to the compile's directory, and every
compile reads `.src/ggml/src/ggml.c` whatever the tree, the llama.cpp version or the clone it comes from. The copies
variant, a forced rebuild, another version and each bisect commit then compile only the files whose preprocessed
text or flags differ. `hash_dir` is off (release builds carry no debug information naming the directory).

One kind of file escapes the link: CMake's unity sources. llama.cpp builds libllama's model files 16 to a file
(`UNITY_BUILD`), and CMake (before 4.0's `UNITY_BUILD_RELOCATABLE`) writes each as `#include "<tree>/.src/src/models/
x.cpp"`, an absolute path inside the tree, so their text differs from tree to tree and ccache missed the ten
heaviest compiles of libllama in every new tree of the same source (the BLAS and Vulkan trees, each bisect build).
`relative_unity_includes` rewrites those includes relative to the unity file after CMake has written them.

The cache is `$CCACHE_DIR` where the user set one, else `<home>/ccache`, capped at `$CCACHE_MAXSIZE` or 5 GiB;
`LLAMALAB_CCACHE=0` turns it off (`CCACHE_DISABLE`: the compilers run directly). `counted` reads
`ccache --print-stats` before and after a build, so each build records how many of its compiles the cache answered.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core import proc

SOURCE_LINK = ".src"
DEFAULT_MAX_SIZE = "5G"


def _turned_off(env: Mapping[str, str]) -> bool:
    return env.get("LLAMALAB_CCACHE", "1").strip().lower() in ("0", "off", "no", "false")


def program(environ: Mapping[str, str] | None = None) -> str | None:
    """The ccache llama.cpp's CMake will find, unless `LLAMALAB_CCACHE=0` turns it off."""
    e = os.environ if environ is None else environ
    return None if _turned_off(e) else shutil.which("ccache", path=e.get("PATH"))


def env(tree: Path, home: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a build in `tree`: the shared cache, its cap, base_dir = the tree, hash_dir off. Where
    ccache is there but turned off, only `CCACHE_DISABLE` (CMake still puts it in front); empty where there is none."""
    e = os.environ if environ is None else environ
    if not shutil.which("ccache", path=e.get("PATH")):
        return {}
    if _turned_off(e):
        return {"CCACHE_DISABLE": "1"}
    return {
        "CCACHE_DIR": e.get("CCACHE_DIR") or str(home / "ccache"),
        "CCACHE_MAXSIZE": e.get("CCACHE_MAXSIZE") or DEFAULT_MAX_SIZE,
        "CCACHE_BASEDIR": str(tree),
        "CCACHE_NOHASHDIR": "1",
    }


def source_link(tree: Path, source: Path) -> Path:
    """`<tree>/.src` pointing at `source` (made or re-pointed): the spelling of the source every compile uses."""
    link = tree / SOURCE_LINK
    target = Path(os.path.realpath(source))
    if link.is_symlink() and Path(os.path.realpath(link)) == target:
        return link
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target, target_is_directory=True)
    return link


_UNITY_SOURCE = re.compile(r"unity_\d+_\w+\.(?:c|cxx|cu|m|mm)")
_INCLUDE = re.compile(r'^#include "(/[^"\n]+)"$', re.MULTILINE)


def relative_include_text(text: str, unity_dir: str, tree: str) -> str:
    """A unity source's text with each `#include "/abs/path"` under `tree` made relative to `unity_dir` (pure)."""
    prefix = tree.rstrip("/") + "/"

    def rel(m: re.Match[str]) -> str:
        path = m.group(1)
        if not path.startswith(prefix):
            return m.group(0)
        return f'#include "{os.path.relpath(path, unity_dir)}"'

    return _INCLUDE.sub(rel, text)


def unity_sources(tree: Path) -> dict[Path, tuple[str, int]]:
    """Every CMake unity source in `tree`: its text and modification time (ns)."""
    out = {}
    for folder, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if d != SOURCE_LINK]  # the source, never generated files
        if os.path.basename(folder) == "Unity":
            for name in files:
                if _UNITY_SOURCE.fullmatch(name):
                    path = Path(folder) / name
                    out[path] = (path.read_text(), path.stat().st_mtime_ns)
    return out


def relative_unity_includes(tree: Path, configure: Callable[[], None]) -> int:
    """Run `configure` (CMake, which writes every unity source again), then rewrite the includes of the unity sources
    in `tree` relative to each source (module docstring), so that its compile reads the same in every tree; returns
    how many files were rewritten. A unity source whose text ends as it was before the configure gets its old
    modification time back: ninja would otherwise compile it (and relink libllama) again at every configure. The
    included path names the same file either way; where CMake writes a unity source again during the build (a
    regeneration ninja starts), it is compiled as CMake wrote it: a cache miss, never a different build."""
    before = unity_sources(tree)
    configure()
    changed = 0
    for path, (text, _) in unity_sources(tree).items():
        new = relative_include_text(text, str(path.parent), str(tree))
        if new != text:
            path.write_text(new)
            changed += 1
        old = before.get(path)
        if old is not None and old[0] == new and path.stat().st_mtime_ns != old[1]:
            os.utime(path, ns=(old[1], old[1]))
    return changed


@dataclass(frozen=True)
class Counts:
    """Compiles of one build: answered by the cache (direct or preprocessed) and compiled."""

    hits: int
    misses: int

    @property
    def total(self) -> int:
        return self.hits + self.misses

    def as_dict(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses}

    def describe(self) -> str:
        if not self.total:
            return "ccache: nothing compiled"
        return f"ccache: {self.hits} of {self.total} compiles from the cache ({100 * self.hits / self.total:.0f}%)"


def parse_stats(text: str) -> dict[str, int]:
    """`ccache --print-stats` (ccache ≥ 4: `name<TAB>value` lines) → counters."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition("\t")
        if value.strip().lstrip("-").isdigit():
            out[name.strip()] = int(value)
    return out


def delta(before: Mapping[str, int], after: Mapping[str, int]) -> Counts:
    def d(k: str) -> int:
        return max(0, after.get(k, 0) - before.get(k, 0))

    return Counts(hits=d("direct_cache_hit") + d("preprocessed_cache_hit"), misses=d("cache_miss"))


def stats(build_env: Mapping[str, str]) -> dict[str, int] | None:
    """The cache's counters now (None without ccache, or where this ccache cannot print them)."""
    exe = program()
    if exe is None or "CCACHE_DIR" not in build_env:
        return None
    rc, out = proc.capture([exe, "--print-stats"], timeout_s=30, env=dict(build_env))
    return parse_stats(out) if rc == 0 else None


def counted(build_env: Mapping[str, str], build: Callable[[], None]) -> Counts | None:
    """Run `build` and return how many of its compiles the cache answered (None without ccache's counters)."""
    before = stats(build_env)
    build()
    after = stats(build_env) if before is not None else None
    return delta(before, after) if before is not None and after is not None else None
