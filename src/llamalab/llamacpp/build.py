"""CMake builds of llama.cpp (and of ik_llama.cpp, the other engine: engines.py), cached by (source, backend,
options).

A build whose options differ from another only in `GGML_SCHED_MAX_COPIES` is a *copies variant*: only the library
that reads it is rebuilt (`ggml-base`; ik_llama.cpp's one `ggml`), in a second tree, and the base tree's binaries
run with that tree's library first on `LD_LIBRARY_PATH` (llama-cpp-facts.md §4). The log's `sched copies = N` line
confirms which library was loaded. An ik_llama.cpp tree builds from its own copy of the source (iksource.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..core import proc
from ..core.errors import BuildError
from ..core.paths import locked
from ..core.records import JsonObject
from . import amx, ccache, engines, iksource
from . import source as source_mod
from .source import Source

COPIES = engines.COPIES
DEFAULT_COPIES = "4"  # llama.cpp's; an engine's own is `Engine.default_copies`

# Options every llama.cpp build gets (llama-cpp-facts.md §5): no tests, examples or web UI; no OpenSSL. An
# ik_llama.cpp build gets its engine's (engines.py).
COMMON_DEFINES: dict[str, str] = dict(engines.ENGINES[engines.LLAMA_CPP].defines)

BACKEND_DEFINES: dict[str, dict[str, str]] = {
    "cpu": {},
    "cpu-rpc": {"GGML_RPC": "ON"},
    "cuda": {"GGML_CUDA": "ON", "GGML_RPC": "ON"},
    "vulkan": {"GGML_VULKAN": "ON", "GGML_RPC": "ON"},
    "rocm": {"GGML_HIP": "ON", "GGML_RPC": "ON"},
}

# Target name → file it produces under bin/.
TARGETS: dict[str, str] = {
    "llama-server": "llama-server",
    "ggml-rpc-server": "ggml-rpc-server",
    "llama-bench": "llama-bench",
    "llama-fit-params": "llama-fit-params",
    "llama-perplexity": "llama-perplexity",  # tune's KV-cache quality (--kl-divergence)
    "llama-gguf-split": "llama-gguf-split",  # split models (gguf-split format) for the remote-model tests
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
    given: JsonObject | None = None  # binaries llamalab did not build (binaries.Binaries.as_dict): what they are
    engine: str = engines.LLAMA_CPP

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
        return engines.get(self.engine).copies(self.options)

    def as_dict(self) -> JsonObject:
        return {
            **({"engine": self.engine} if self.engine != engines.LLAMA_CPP else {}),
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


def split_copies(options: Mapping[str, str], default: str = DEFAULT_COPIES) -> tuple[dict[str, str], str]:
    """(options without GGML_SCHED_MAX_COPIES, the copies value — default 4, or the engine's `default`)."""
    rest = {k: v for k, v in options.items() if k != COPIES}
    return rest, str(options.get(COPIES, default))


def options_key(backend: str, options: Mapping[str, str]) -> str:
    blob = json.dumps({"backend": backend, "options": dict(sorted(options.items()))}, sort_keys=True)
    return f"{backend}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"


def cmake_configure_argv(
    source_dir: Path, build_dir: Path, backend: str, options: Mapping[str, str], extra: Mapping[str, str],
    *, generator: str | None = "Ninja", common: Mapping[str, str] = COMMON_DEFINES,
) -> list[str]:
    defines = {**common, **BACKEND_DEFINES[backend], **extra, **options}
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


def same_configure(a: list[str] | None, b: list[str]) -> bool:
    """Two configure command lines are the same build when they differ at most in how their source and build
    folders are spelled (a cache reached through a symlink is the same cache)."""
    if not a or len(a) != len(b):
        return False
    def real(argv: list[str]) -> list[str]:
        return [os.path.realpath(x) if i and argv[i - 1] in ("-S", "-B") else x for i, x in enumerate(argv)]

    return real(list(a)) == real(list(b))


# The first bytes of a program or shared library: ELF, Mach-O (32/64-bit, both byte orders, universal), a script.
_PROGRAM_MAGIC = (b"\x7fELF", b"\xfe\xed\xfa\xce", b"\xce\xfa\xed\xfe", b"\xfe\xed\xfa\xcf", b"\xcf\xfa\xed\xfe",
                  b"\xca\xfe\xba\xbe", b"#!")
_OWN_LIBRARIES = ("libggml", "libllama", "libmtmd")


def broken_outputs(files: Mapping[Path, bool]) -> list[str]:
    """Why each of the build's files (path → whether it must be executable) cannot be used: missing, empty, not
    executable, not a program or library (overwritten, cut short). Empty when all are fine."""
    out = []
    for path, executable in files.items():
        try:
            with open(path, "rb") as f:
                head = f.read(4)
        except OSError as e:
            out.append(f"{path.name}: {'missing' if not path.exists() else e.strerror}")
            continue
        if not head.startswith(_PROGRAM_MAGIC):
            out.append(f"{path.name}: not a program or library (damaged)" if head else f"{path.name}: empty")
        elif executable and not os.access(path, os.X_OK):
            out.append(f"{path.name}: not executable")
    return out


def _program_files(bin_dir: Path) -> dict[str, bool]:
    """A finished tree's programs and shared libraries (name → executable), as its marker records them."""
    out = {}
    for p in sorted(bin_dir.iterdir()) if bin_dir.is_dir() else []:
        if p.is_file() and not p.is_symlink():
            with open(p, "rb") as f:
                if f.read(4).startswith(_PROGRAM_MAGIC):
                    out[p.name] = os.access(p, os.X_OK) and ".so" not in p.name and not p.name.endswith(".dylib")
    return out


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
    extra_defines: dict[str, str] = field(default_factory=dict)  # e.g. CMAKE_CUDA_ARCHITECTURES, Vulkan_INCLUDE_DIR
    build_env: dict[str, str] = field(default_factory=dict)  # e.g. HIPCXX, HIP_PATH for a HIP build
    cpu_flags: frozenset[str] | None = None  # the CPU's /proc/cpuinfo flags (None: this machine's), for amx.defines
    progress: ProgressFn | None = None
    log: Callable[[str], None] = print

    def __post_init__(self) -> None:
        if self.backend not in BACKEND_DEFINES:
            raise BuildError(f"unknown backend {self.backend!r}", tip=f"use one of {', '.join(BACKEND_DEFINES)}.")
        # the real path: the same cache reached through a symlink (LLAMALAB_HOME=/link) finds the same builds
        self.home = Path(os.path.realpath(self.home))
        if self.cpu_flags is None:
            self.cpu_flags = amx.this_machine()

    @property
    def root(self) -> Path:
        return self.home / "builds" / self.source.key

    @property
    def engine(self) -> engines.Engine:
        return engines.get(self.source.engine)

    def _files(self) -> dict[str, str]:
        """Program → its file name, where this engine's differs from llamalab's name (ik's `rpc-server`)."""
        out = {}
        for p in self.targets:
            t = self.engine.target(p)
            if t is not None and t != TARGETS.get(p, p):
                out[p] = t
        return out

    def _artifact(self, art: BuildArtifact, **changes: object) -> BuildArtifact:
        return dataclasses.replace(art, engine=self.engine.name, files=self._files(), **changes)  # type: ignore[arg-type]

    def build(self, name: str, options: Mapping[str, object]) -> BuildArtifact:
        opts = normalize(options)
        rest, copies = split_copies(opts, str(self.engine.default_copies))
        base = self._checked(lambda force: self._full_build(rest, force=force))
        if copies == str(self.engine.default_copies):
            return self._artifact(base, name=name, options=opts)
        return self._checked(lambda force: self._copies_variant(name, opts, base, copies, force=force))

    def _checked(self, make: Callable[[bool], BuildArtifact]) -> BuildArtifact:
        """A build whose llama-server starts (`--version`): a reused one that does not (a library damaged in a way
        the file checks miss) is rebuilt once; one that still does not is a BuildError."""
        art = make(False)
        if "llama-server" not in self.targets or not art.binary("llama-server").exists():
            return art
        why = _does_not_run(art)
        if why and art.reused:
            self.log(f"the cached build in {art.bin_dir.parent} does not run ({why.splitlines()[0]}): rebuilding it")
            art = make(True)
            why = _does_not_run(art)
        if why:
            raise BuildError(f"llama-server of the build in {art.bin_dir.parent} does not run: {why}",
                             tip=f"delete {art.bin_dir.parent} and run again to build it afresh; `llamalab doctor` "
                                 "lists missing libraries.")
        return art

    # A full tree: every target, for these options (copies at the default).
    def _full_build(self, options: dict[str, str], *, force: bool = False) -> BuildArtifact:
        key = options_key(self.backend, options)
        tree = self.root / key
        targets = tuple(t for t in self.targets if self.engine.target(t) is not None)
        art = self._build_tree(key, tree, options, targets, what=f"{self.engine.name} {self.backend} {key}",
                               force=force)
        return self._artifact(art)

    def _copies_variant(self, name: str, opts: dict[str, str], base: BuildArtifact, copies: str, *,
                        force: bool = False) -> BuildArtifact:
        key = f"{base.key}-copies{copies}"
        tree = self.root / base.key / "variants" / f"copies{copies}"
        options = {**split_copies(opts)[0], COPIES: copies}
        lib_target, lib_name = self.engine.copies_target, self.engine.copies_lib
        art = self._build_tree(key, tree, options, (lib_target,), what=f"{lib_target} with {COPIES}={copies}",
                               force=force)
        lib = tree / self.engine.copies_lib_dir
        if not any(lib.glob(f"{lib_name}.*")):
            raise BuildError(f"the copies variant built, but {lib} has no {lib_name} library.",
                             tip="this llama.cpp may build static libraries; pass -DBUILD_SHARED_LIBS=ON.")
        return BuildArtifact(
            name=name, key=key, source=self.source, backend=self.backend, options=opts, bin_dir=base.bin_dir,
            lib_dir=lib, build_seconds=art.build_seconds, reused=art.reused, variant_of=base.key,
            cmake_argv=art.cmake_argv, engine=self.engine.name, files=self._files(),
        )

    def _build_tree(self, key: str, tree: Path, options: dict[str, str], targets: tuple[str, ...], *, what: str,
                    force: bool = False) -> BuildArtifact:
        tree.mkdir(parents=True, exist_ok=True)
        marker = tree / "llamalab-build.json"
        with locked(tree / ".lock"):
            src = self._source_in(tree)
            no_amx = amx.defines(self.source.path, options, self.cpu_flags or frozenset())
            configure = cmake_configure_argv(src, tree, self.backend, {**options, **no_amx},
                                             {**self.source.cmake_defines(), **self.extra_defines},
                                             generator="Ninja" if shutil.which("ninja") else None,
                                             common=self.engine.defines)
            done = _read_marker(marker)
            immutable = source_mod.immutable(self.source)
            files = self._expected_files(tree, targets, done)
            broken = broken_outputs(files)
            if done and same_configure(done.get("configure"), configure) and \
                    set(targets) <= set(done.get("targets", [])) and not broken and immutable and not force:
                return BuildArtifact(name=key, key=key, source=self.source, backend=self.backend, options=options,
                                     bin_dir=tree / "bin", build_seconds=done.get("seconds", 0.0), reused=True,
                                     cmake_argv=tuple(configure))
            if done and (broken or force):
                # ninja relinks an output that is missing, not one that is there but damaged: remove those first
                self.log(f"the cached build in {tree} is damaged ({'; '.join(broken) or 'does not run'}): "
                         "rebuilding what is broken")
                for path in files if force else [p for p in files if any(r.startswith(p.name + ":") for r in broken)]:
                    path.unlink(missing_ok=True)
            log_path = tree / "build.log"
            log_path.unlink(missing_ok=True)
            self.log(f"building {what} (log: {log_path}) …")
            if no_amx:
                self.log(f"  with {amx.NO_AMX_INT8}: {amx.WHY}")
            env = {**self.build_env, **ccache.env(tree, self.home)}
            reconfigure = not (tree / "CMakeCache.txt").exists() or not done or \
                not same_configure(done.get("configure"), configure)

            def configure_step() -> None:
                forget_other_source(tree, src)
                run_step(configure, log_path, what, "configure", env=env or None, progress=self.progress)

            def steps() -> None:
                if reconfigure:  # a tree configured as it is keeps its unity sources (and the objects made of them)
                    ccache.relative_unity_includes(tree, configure_step)
                run_step(cmake_build_argv(tree, tuple(self.engine.target(t) or t for t in targets), self.jobs),
                         log_path, what, "build", env=env or None, progress=self.progress)

            start = time.monotonic()
            counts = ccache.counted(env, steps)
            seconds = time.monotonic() - start
            still = broken_outputs(self._expected_files(tree, targets, None))
            if still:
                raise BuildError(f"{what} built, but {'; '.join(still)} (in {tree / 'bin'}).",
                                 tip=f"delete {tree} and run again; `llamalab doctor` checks the compilers.")
            marker.write_text(json.dumps({
                "configure": configure, "targets": list(targets), "seconds": round(seconds, 2),
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "outputs": _program_files(tree / "bin"),
                **({"ccache": counts.as_dict()} if counts else {}),
            }, indent=2))
            self.log(f"built {what} in {seconds:.0f} s" + (f" ({counts.describe()})" if counts else ""))
        return BuildArtifact(name=key, key=key, source=self.source, backend=self.backend, options=options,
                             bin_dir=tree / "bin", build_seconds=seconds, reused=False, cmake_argv=tuple(configure))

    def _source_in(self, tree: Path) -> Path:
        """`<tree>/.src`, which every compile names the source by: a link to it, or (ik_llama.cpp) the tree's own
        copy of it (iksource.py)."""
        if self.engine.name == engines.IK_LLAMA_CPP:
            return iksource.tree_copy(tree, self.source.path)
        return ccache.source_link(tree, self.source.path)

    def _expected_files(self, tree: Path, targets: tuple[str, ...], marker: JsonObject | None) -> dict[Path, bool]:
        """The files a finished build of `targets` has (path → must be executable): the programs, the ggml-base
        library for a copies variant (ik_llama.cpp's ggml), and every program and library the marker recorded when
        it was built."""
        bin_dir = tree / "bin"
        eng = self.engine
        files = {bin_dir / (eng.target(t) or TARGETS[t]): True for t in targets if t in TARGETS}
        if eng.copies_target in targets:
            lib_dir, lib = tree / eng.copies_lib_dir, eng.copies_lib
            libs = sorted(lib_dir.glob(f"{lib}.so*")) + sorted(lib_dir.glob(f"{lib}*.dylib"))
            files.update({p: False for p in libs} or {lib_dir / f"{lib}.so": False})
        recorded = (marker or {}).get("outputs")
        if isinstance(recorded, dict):
            files.update({bin_dir / str(n): bool(x) for n, x in recorded.items() if "/" not in str(n)})
        return files


def forget_other_source(tree: Path, src: Path) -> None:
    """Drop a CMake cache made for another spelling of the source folder (a tree configured before builds named
    their source through `.src`): CMake refuses to configure a cache against a source it was not made for."""
    cache = tree / "CMakeCache.txt"
    try:
        text = cache.read_text(errors="replace")
    except OSError:
        return
    m = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", text, re.M)
    if m and m.group(1).strip() != str(src):
        cache.unlink(missing_ok=True)


def run_step(argv: list[str], log_path: Path, what: str, stage: str, *, env: Mapping[str, str] | None = None,
             progress: ProgressFn | None = None) -> None:
    """One CMake step (configure or build), its output appended to `log_path`; a BuildError with the log's last
    lines when it fails or CMake is missing."""
    def on_line(line: str) -> None:
        if progress and (p := ninja_progress(line)):
            progress(what, *p)

    if shutil.which(argv[0]) is None:
        raise BuildError(f"{argv[0]} is not installed, so llama.cpp cannot be built.",
                         tip="install CMake ≥ 3.14 and a C++17 compiler (Debian: apt-get install cmake g++ "
                         "ninja-build), "
                         "or run `llamalab doctor`; or run the study on llama.cpp binaries you already have "
                         "(a release archive): --llama-bin DIR.")
    done = proc.run(argv, log_path=log_path, on_line=on_line, env=env)
    if done.returncode != 0:
        tail = "\n".join("    " + ln for ln in proc.tail_lines(log_path, 25))
        raise BuildError(
            f"the {stage} step of {what} failed (exit {done.returncode}). Log: {log_path}\nLast lines:\n{tail}",
            tip="read the log for the first error; `llamalab doctor` lists missing compilers and libraries.",
        )


def _does_not_run(art: BuildArtifact) -> str | None:
    """None when `llama-server --version` of this build runs; else what it printed. A system library the machine
    lacks (a GPU driver's libcuda) is not the build's fault: that counts as running."""
    rc, out = proc.capture([str(art.binary("llama-server")), "--version"], timeout_s=60, env=art.env())
    if rc == 0:
        return None
    m = re.search(r"error while loading shared libraries: ([^\s:]+)", out)
    if m and not os.path.basename(m.group(1)).startswith(_OWN_LIBRARIES):
        return None
    return out.strip()[-400:] or f"exit status {rc}"


def _read_marker(path: Path) -> JsonObject | None:
    try:
        marker: JsonObject | None = json.loads(path.read_text())
        return marker
    except (OSError, ValueError):
        return None


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
