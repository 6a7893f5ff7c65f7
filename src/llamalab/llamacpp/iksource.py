"""An ik_llama.cpp build tree's own copy of its source: `<tree>/.src`, hard links to the source's files.

ik_llama.cpp's CMake writes into its source: the custom command "Generating build details from Git" runs
`common/cmake/build-info-gen-cpp.cmake` from the source folder and writes `common/build-info.cpp` there (its
OUTPUT is `${CMAKE_CURRENT_SOURCE_DIR}/build-info.cpp`; ninja runs it in every tree, even where the file exists).
PyPI's sdist lacks that script (its `.gitignore` drops every `build*` path), so a plain build stops with "CMake
Error: Error processing file: …/build-info-gen-cpp.cmake". Patching the shared source folder would make every tree
of it (and every build sharing the cache) write one file in turn, each new write relinking the others. So each
tree builds from a copy of its own, made of hard links (a file copy where the file system refuses a link: nothing
is duplicated on disk), with the script added to the copy: llama.cpp's own script, the one ik_llama.cpp's CMake
names. With no git metadata it writes `LLAMA_BUILD_NUMBER = 0`, `LLAMA_COMMIT = "unknown"`; the source, not the
binary, says what was built (source.py).

The copy lives where llama.cpp trees keep their source link, `<tree>/.src` (ccache.SOURCE_LINK), so every compile
names `.src/…` and hits ccache across trees as llama.cpp's do (ccache.py). It is refreshed at every build: a file
changed in a `dir:` source is linked again, one gone is removed (what the build wrote into the copy stays).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .ccache import SOURCE_LINK

BUILD_INFO_SCRIPT = "common/cmake/build-info-gen-cpp.cmake"
BUILD_INFO_OUTPUT = "common/build-info.cpp"
# what the build itself writes into the copy: never removed by a refresh
WRITTEN = frozenset({BUILD_INFO_SCRIPT, BUILD_INFO_OUTPUT})

# llama.cpp's common/cmake/build-info-gen-cpp.cmake, which ik_llama.cpp's common/CMakeLists.txt runs with `-P` from
# the source folder (so CMAKE_CURRENT_SOURCE_DIR is the source's top): it writes the file only where it changed,
# so a second tree of the same source compiles the same text (a ccache hit).
SCRIPT_TEXT = """\
# Written by llamalab into this build tree's copy of the source: ik_llama.cpp's sdist lacks it.
include(${CMAKE_CURRENT_SOURCE_DIR}/cmake/build-info.cmake)

set(TEMPLATE_FILE "${CMAKE_CURRENT_SOURCE_DIR}/common/build-info.cpp.in")
set(OUTPUT_FILE   "${CMAKE_CURRENT_SOURCE_DIR}/common/build-info.cpp")

# Only write the build info if it changed
if(EXISTS ${OUTPUT_FILE})
    file(READ ${OUTPUT_FILE} CONTENTS)
    string(REGEX MATCH "LLAMA_COMMIT = \\"([^\\"]*)\\";" _ ${CONTENTS})
    set(OLD_COMMIT ${CMAKE_MATCH_1})
    string(REGEX MATCH "LLAMA_COMPILER = \\"([^\\"]*)\\";" _ ${CONTENTS})
    set(OLD_COMPILER ${CMAKE_MATCH_1})
    string(REGEX MATCH "LLAMA_BUILD_TARGET = \\"([^\\"]*)\\";" _ ${CONTENTS})
    set(OLD_TARGET ${CMAKE_MATCH_1})
    if (
        NOT OLD_COMMIT   STREQUAL BUILD_COMMIT   OR
        NOT OLD_COMPILER STREQUAL BUILD_COMPILER OR
        NOT OLD_TARGET   STREQUAL BUILD_TARGET
    )
        configure_file(${TEMPLATE_FILE} ${OUTPUT_FILE})
    endif()
else()
    configure_file(${TEMPLATE_FILE} ${OUTPUT_FILE})
endif()
"""


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    """The same file: one inode, or a copy with the source's size and time."""
    return (a.st_ino, a.st_dev) == (b.st_ino, b.st_dev) or (a.st_size, a.st_mtime_ns) == (b.st_size, b.st_mtime_ns)


def _put(src: Path, dst: Path) -> None:
    """`dst` as `src`: a hard link, a copy with its times where the file system refuses one, a link as a link."""
    if dst.is_symlink() or dst.exists():
        dst.unlink()
    if src.is_symlink():
        dst.symlink_to(os.readlink(src))
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def tree_copy(tree: Path, source: Path) -> Path:
    """`<tree>/.src` made (or refreshed) as a copy of `source` with the build-info script where it lacks one;
    returns it. Only files that differ are linked again, so an unchanged source leaves every file (and its time)
    as it was and ninja builds nothing new."""
    source = Path(os.path.realpath(source))
    dest = tree / SOURCE_LINK
    if dest.is_symlink() or dest.is_file():  # a tree that had a source link (or a stray file) before
        dest.unlink()
    dest.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    for folder, dirs, files in os.walk(source):
        rel = os.path.relpath(folder, source)
        out = dest if rel == "." else dest / rel
        out.mkdir(exist_ok=True)
        for name in files + [d for d in dirs if (Path(folder) / d).is_symlink()]:
            src, dst = Path(folder) / name, out / name
            key = os.path.normpath(os.path.join(rel, name))
            seen.add(key)
            try:
                if not src.is_symlink() and not dst.is_symlink() and _same(src.stat(), dst.stat()):
                    continue
            except OSError:
                pass
            _put(src, dst)
    _drop_gone(dest, seen)
    script = dest / BUILD_INFO_SCRIPT
    if BUILD_INFO_SCRIPT not in seen and not (script.is_file() and script.read_text() == SCRIPT_TEXT):
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(SCRIPT_TEXT)
    return dest


def _drop_gone(dest: Path, seen: set[str]) -> None:
    """Remove what the copy has and the source no longer has, except what the build writes there."""
    for folder, _dirs, files in os.walk(dest):
        rel = os.path.relpath(folder, dest)
        for name in files:
            key = os.path.normpath(os.path.join(rel, name))
            if key not in seen and key not in WRITTEN:
                (Path(folder) / name).unlink()
