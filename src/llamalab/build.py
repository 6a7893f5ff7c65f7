"""CMake builds of llama.cpp, cached by (source, backend, options).

A build whose options differ from another only in `GGML_SCHED_MAX_COPIES` is a *copies variant*: only
`ggml-base` is rebuilt, in a second tree, and the base tree's binaries run with that tree's library first on
`LD_LIBRARY_PATH` (design.md §5.4). The log's `sched copies = N` line confirms which library was loaded.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import proc
from .errors import BuildError
from .source import Source

COPIES = "GGML_SCHED_MAX_COPIES"
DEFAULT_COPIES = "4"

# Options every build gets (design.md §5.5): no tests, examples or web UI; no OpenSSL.
COMMON_DEFINES: dict[str, str] = {
    "CMAKE_BUILD_TYPE": "Release",
    "LLAMA_BUILD_TESTS": "OFF",
    "LLAMA_BUILD_EXAMPLES": "OFF",
    "LLAMA_BUILD_UI": "OFF",
    "LLAMA_USE_PREBUILT_UI": "OFF",
    "LLAMA_OPENSSL": "OFF",
    "LLAMA_CURL": "OFF",
}

BACKEND_DEFINES: dict[str, dict[str, str]] = {
    "cpu": {},
    "cpu-rpc": {"GGML_RPC": "ON"},
    "cuda": {"GGML_CUDA": "ON", "GGML_RPC": "ON"},
    "vulkan": {"GGML_VULKAN": "ON", "GGML_RPC": "ON"},
}

# Target name → file it produces under bin/.
TARGETS: dict[str, str] = {
    "llama-server": "llama-server",
    "ggml-rpc-server": "ggml-rpc-server",
    "llama-bench": "llama-bench",
    "llama-fit-params": "llama-fit-params",
}
DEFAULT_TARGETS = tuple(TARGETS)


@dataclass(frozen=True)
class BuildArtifact:
    """A usable build: where its binaries are and the environment that selects its libraries."""

    name: str
    key: str
    source: Source
    backend: str
    options: dict[str, str]  # the study's options for this build (not the common ones)
    bin_dir: Path
    lib_dir: Path | None = None  # copies variant: this tree's libggml-base comes first
    build_seconds: float = 0.0
    reused: bool = False
    variant_of: str | None = None  # key of the base tree for a copies variant
    cmake_argv: tuple[str, ...] = field(default=())
    files: dict[str, str] = field(default_factory=dict)  # program → file name, where it differs (given binaries)
    given: dict | None = None  # binaries llamalab did not build (binaries.Binaries.as_dict): what they are

    def binary(self, name: str) -> Path:
        return self.bin_dir / self.files.get(name, TARGETS.get(name, name))

    @property
    def made(self) -> bool:
        """Built by llamalab (its CMake options are known), not given as binaries."""
        return self.given is None

    def env(self) -> dict[str, str]:
        if self.lib_dir is None:
            return {}
        prev = os.environ.get("LD_LIBRARY_PATH", "")
        return {"LD_LIBRARY_PATH": str(self.lib_dir) + (os.pathsep + prev if prev else "")}

    @property
    def expected_copies(self) -> int:
        return int(self.options.get(COPIES, DEFAULT_COPIES))

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "key": self.key,
            "backend": self.backend,
            "options": dict(self.options),
            "bin_dir": str(self.bin_dir),
            "lib_dir": str(self.lib_dir) if self.lib_dir else None,
            "build_seconds": round(self.build_seconds, 2),
            "reused": self.reused,
            "variant_of": self.variant_of,
            "cmake_argv": list(self.cmake_argv),
            "source": self.source.as_dict(),
            "given": self.given,
        }


# ---------------------------------------------------------------- pure parts


def normalize(options: Mapping[str, object]) -> dict[str, str]:
    """CMake option values as strings; booleans as ON/OFF."""
    out = {}
    for k, v in options.items():
        if isinstance(v, bool):
            out[k] = "ON" if v else "OFF"
        else:
            out[k] = str(v)
    return dict(sorted(out.items()))


def split_copies(options: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """(options without GGML_SCHED_MAX_COPIES, the copies value — default 4)."""
    rest = {k: v for k, v in options.items() if k != COPIES}
    return rest, str(options.get(COPIES, DEFAULT_COPIES))


def options_key(backend: str, options: Mapping[str, str]) -> str:
    blob = json.dumps({"backend": backend, "options": dict(sorted(options.items()))}, sort_keys=True)
    return f"{backend}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"


def cmake_configure_argv(
    source_dir: Path, build_dir: Path, backend: str, options: Mapping[str, str], extra: Mapping[str, str],
    *, generator: str | None = "Ninja",
) -> list[str]:
    defines = {**COMMON_DEFINES, **BACKEND_DEFINES[backend], **extra, **options}
    argv = ["cmake", "-S", str(source_dir), "-B", str(build_dir)]
    if generator:
        argv += ["-G", generator]
    argv += [f"-D{k}={v}" for k, v in defines.items()]
    return argv


def cmake_build_argv(build_dir: Path, targets: tuple[str, ...], jobs: int) -> list[str]:
    return ["cmake", "--build", str(build_dir), "--target", *targets, "-j", str(jobs)]


_NINJA_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")


def ninja_progress(line: str) -> tuple[int, int] | None:
    """`[12/226] Building …` → (12, 226)."""
    m = _NINJA_PROGRESS.match(line)
    return (int(m.group(1)), int(m.group(2))) if m else None


# ---------------------------------------------------------------- side effects

ProgressFn = Callable[[str, int, int], None]  # (what, done, total)


@dataclass
class Builder:
    """Builds variants of one source for one backend under `home/builds`."""

    source: Source
    backend: str
    home: Path
    jobs: int = field(default_factory=lambda: os.cpu_count() or 2)
    targets: tuple[str, ...] = DEFAULT_TARGETS
    extra_defines: dict[str, str] = field(default_factory=dict)  # e.g. CMAKE_CUDA_ARCHITECTURES
    progress: ProgressFn | None = None
    log: Callable[[str], None] = print

    def __post_init__(self) -> None:
        if self.backend not in BACKEND_DEFINES:
            raise BuildError(f"unknown backend {self.backend!r}", tip=f"use one of {', '.join(BACKEND_DEFINES)}.")

    @property
    def root(self) -> Path:
        return self.home / "builds" / self.source.key

    def build(self, name: str, options: Mapping[str, object]) -> BuildArtifact:
        opts = normalize(options)
        rest, copies = split_copies(opts)
        base = self._full_build(rest)
        if copies == DEFAULT_COPIES:
            return BuildArtifact(
                name=name, key=base.key, source=self.source, backend=self.backend, options=opts,
                bin_dir=base.bin_dir, build_seconds=base.build_seconds, reused=base.reused,
                cmake_argv=base.cmake_argv,
            )
        return self._copies_variant(name, opts, base, copies)

    # A full tree: every target, for these options (copies at the default).
    def _full_build(self, options: dict[str, str]) -> BuildArtifact:
        key = options_key(self.backend, options)
        tree = self.root / key
        return self._build_tree(key, tree, options, self.targets, what=f"llama.cpp {self.backend} {key}")

    def _copies_variant(self, name: str, opts: dict[str, str], base: BuildArtifact, copies: str) -> BuildArtifact:
        key = f"{base.key}-copies{copies}"
        tree = self.root / base.key / "variants" / f"copies{copies}"
        options = {**split_copies(opts)[0], COPIES: copies}
        art = self._build_tree(key, tree, options, ("ggml-base",), what=f"ggml-base with {COPIES}={copies}")
        lib = tree / "bin"
        if not any(lib.glob("libggml-base.*")):
            raise BuildError(f"the copies variant built, but {lib} has no libggml-base library.",
                             tip="this llama.cpp may build static libraries; pass -DBUILD_SHARED_LIBS=ON.")
        return BuildArtifact(
            name=name, key=key, source=self.source, backend=self.backend, options=opts, bin_dir=base.bin_dir,
            lib_dir=lib, build_seconds=art.build_seconds, reused=art.reused, variant_of=base.key,
            cmake_argv=art.cmake_argv,
        )

    def _build_tree(self, key: str, tree: Path, options: dict[str, str], targets: tuple[str, ...], *, what: str
                    ) -> BuildArtifact:
        tree.mkdir(parents=True, exist_ok=True)
        marker = tree / "llamalab-build.json"
        configure = cmake_configure_argv(self.source.path, tree, self.backend, options,
                                         {**self.source.cmake_defines(), **self.extra_defines},
                                         generator="Ninja" if shutil.which("ninja") else None)
        with _locked(tree / ".lock"):
            done = _read_marker(marker)
            immutable = self.source.origin.startswith("pypi:")
            wanted = [TARGETS[t] for t in targets if t in TARGETS]
            if done and done.get("configure") == configure and set(targets) <= set(done.get("targets", [])) and \
                    all((tree / "bin" / b).exists() for b in wanted) and immutable:
                return BuildArtifact(name=key, key=key, source=self.source, backend=self.backend, options=options,
                                     bin_dir=tree / "bin", build_seconds=done.get("seconds", 0.0), reused=True,
                                     cmake_argv=tuple(configure))
            log_path = tree / "build.log"
            log_path.unlink(missing_ok=True)
            self.log(f"building {what} (log: {log_path}) …")
            start = time.monotonic()
            if not (tree / "CMakeCache.txt").exists() or not done or done.get("configure") != configure:
                self._step(configure, log_path, what, "configure")
            build = cmake_build_argv(tree, targets, self.jobs)
            self._step(build, log_path, what, "build")
            seconds = time.monotonic() - start
            marker.write_text(json.dumps({
                "configure": configure, "targets": list(targets), "seconds": round(seconds, 2),
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }, indent=2))
            self.log(f"built {what} in {seconds:.0f} s")
        return BuildArtifact(name=key, key=key, source=self.source, backend=self.backend, options=options,
                             bin_dir=tree / "bin", build_seconds=seconds, reused=False, cmake_argv=tuple(configure))

    def _step(self, argv: list[str], log_path: Path, what: str, stage: str) -> None:
        def on_line(line: str) -> None:
            if self.progress and (p := ninja_progress(line)):
                self.progress(what, *p)

        if shutil.which(argv[0]) is None:
            raise BuildError(f"{argv[0]} is not installed, so llama.cpp cannot be built.",
                             tip="install CMake ≥ 3.14 and a C++17 compiler (Debian: apt-get install cmake g++ ninja-build), "
                             "or run `llamalab doctor`; or run the study on llama.cpp binaries you already have "
                             "(a release archive): --llama-bin DIR.")
        done = proc.run(argv, log_path=log_path, on_line=on_line)
        if done.returncode != 0:
            tail = "\n".join("    " + ln for ln in proc.tail_lines(log_path, 25))
            raise BuildError(
                f"the {stage} step of {what} failed (exit {done.returncode}). Log: {log_path}\nLast lines:\n{tail}",
                tip="read the log for the first error; `llamalab doctor` lists missing compilers and libraries.",
            )


def _read_marker(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@contextmanager
def _locked(path: Path):
    """An exclusive lock so two llamalab processes never build the same tree at once."""
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def openblas_available() -> tuple[bool, str]:
    """Whether OpenBLAS (library and cblas.h) is installed, and the reason if not."""
    rc, _ = proc.capture(["pkg-config", "--exists", "openblas"])
    if rc == 0:
        return True, "pkg-config finds openblas"
    for inc in ("/usr/include/openblas/cblas.h", "/usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h",
                "/usr/include/aarch64-linux-gnu/openblas-pthread/cblas.h", "/opt/homebrew/opt/openblas/include/cblas.h",
                "/usr/local/opt/openblas/include/cblas.h"):
        if Path(inc).is_file():
            return True, inc
    return False, ("OpenBLAS is not installed (no openblas.pc, no cblas.h); "
                   "install it with `apt-get install libopenblas-dev` (Fedora: openblas-devel, Arch: openblas, "
                   "macOS: brew install openblas)")
