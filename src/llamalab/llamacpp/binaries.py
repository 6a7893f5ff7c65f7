"""llama.cpp binaries someone else built: a release archive, a distro package, a user's own build folder.

`llamalab run STUDY --llama-bin DIR` (or `[source] bin = "DIR"`, or a build's own `bin`) runs every build that
needs no CMake option of its own on these binaries, with nothing compiled. `probe` finds llama-server in the
folder, checks that it runs here (`--version`), and reads what it is: build number and commit, compiler and
target, the ggml backends it has (from its `load_backend` lines, its `--list-devices`, and the backend
libraries beside it) and which helper programs sit next to it (rpc-server under either of its names,
llama-bench, llama-fit-params). All of that is stored with the run.

The binaries may be ik_llama.cpp's (engines.py): their engine is read from their own `--version` output, and where
that cannot tell (ik_llama.cpp prints `version: N (C)` as llama.cpp did before mid-2025), from `llama-server -rtr
--version`, which only ik_llama.cpp answers with its version (engines.IK_PROBE); ik_llama.cpp names its rpc-server
`rpc-server` and has no `--list-devices`.

ggml-org's release archives (`llama-bNNNN-bin-ubuntu-x64.tar.gz`) hold the programs and their `.so` files side
by side in one folder, linked with RPATH `$ORIGIN` and with the backends as loadable libraries
(`GGML_BACKEND_DL`), so their `--version` prints a `load_backend: loaded … backend from …` line per backend.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..core import proc
from ..core.errors import ConfigError, SourceError
from ..core.records import JsonObject
from . import engines
from .build import BuildArtifact
from .source import Source

SERVER = "llama-server"
# Program → the file names it has had: b11312 builds `ggml-rpc-server`; older trees and archives `rpc-server`.
NAMES: dict[str, tuple[str, ...]] = {
    "llama-server": ("llama-server",),
    "ggml-rpc-server": ("ggml-rpc-server", "rpc-server"),
    "llama-bench": ("llama-bench",),
    "llama-fit-params": ("llama-fit-params",),
    "llama-perplexity": ("llama-perplexity",),
    "llama-gguf-split": ("llama-gguf-split",),
}
# Where in the given folder llama-server may be: the folder itself (an extracted archive, /usr/bin), bin/
# (an install prefix), build/bin/ (a llama.cpp checkout that was built).
SUBDIRS = ("", "bin", "build/bin")

# What each kind of study device needs from the binaries (ggml backend names as llama.cpp prints them).
NEEDED_BACKEND = {"cpu-rpc": "RPC", "rpc": "RPC", "cuda": "CUDA", "vulkan": "Vulkan", "rocm": "ROCm", "hip": "ROCm"}

_LIB_BACKENDS = {"cpu": "CPU", "cuda": "CUDA", "hip": "ROCm", "vulkan": "Vulkan", "rpc": "RPC", "blas": "BLAS",
                 "metal": "Metal", "sycl": "SYCL", "opencl": "OpenCL", "musa": "MUSA", "cann": "CANN"}
_CANON = {v.lower(): v for v in _LIB_BACKENDS.values()} | {"hip": "ROCm", "mtl": "Metal"}


# ---------------------------------------------------------------- pure: reading what the binaries print


@dataclass(frozen=True)
class VersionInfo:
    build_number: int | None = None
    commit: str | None = None
    compiler: str | None = None  # "GNU 12.2.0", "cc (Debian 14.2.0-19) 14.2.0"
    target: str | None = None  # "Linux x86_64", "x86_64-linux-gnu"
    backends: tuple[str, ...] = ()  # from load_backend / register_backend / backend init lines

    @property
    def version(self) -> str:
        return f"b{self.build_number}" if self.build_number else "unknown"


# b11312: `version: 0.5.0 (build 11312, commit 0c1e570)`; 2024-2025: `version: 7083 (2376b7758)`
_VERSION_NEW = re.compile(r"^version: \S+ \(build (?P<n>\d+), commit (?P<c>[^)\s]+)\)")
_VERSION_OLD = re.compile(r"^version: (?P<n>\d+) \((?P<c>[^)\s]+)\)")
_BUILT = re.compile(r"^built with (?P<compiler>.+) for (?P<target>.+?)\s*$")
# in a server log instead: `build: 6510 (703f9e32) with cc (Ubuntu 11.4.0-1ubuntu1~22.04.2) 11.4.0 for x86_64-linux-gnu`
_BUILD_LOG = re.compile(r"\bbuild: (?P<n>\d+) \((?P<c>[^)\s]+)\) with (?P<compiler>.+) for (?P<target>\S+)")
_LOADED = re.compile(r"load_backend: loaded (?P<b>\S+) backend from")
_REGISTERED = re.compile(r"register_backend: registered backend (?P<b>\S+)")
_INIT = [(re.compile(r"ggml_vulkan: Found \d+ Vulkan devices"), "Vulkan"),
         (re.compile(r"ggml_cuda_init: found \d+ CUDA devices"), "CUDA"),
         (re.compile(r"ggml_cuda_init: found \d+ ROCm devices"), "ROCm"),
         (re.compile(r"ggml_metal_(?:init|device_init)"), "Metal")]
_DEVICE_LINE = re.compile(r"^\s+(?P<name>[A-Za-z]+?)(?P<idx>\d+)\s*:\s")
_LIB = re.compile(r"^libggml-(?P<b>[a-z]+)(?:-[\w-]+)?\.(?:so|dylib|dll)")


def canonical_backend(name: str) -> str:
    return _CANON.get(name.lower(), name)


def parse_version(text: str) -> VersionInfo:
    """`llama-server --version` output (or any llama.cpp log start) → build number, commit, compiler, backends."""
    n = commit = compiler = target = None
    backends: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if m := _VERSION_NEW.match(line) or _VERSION_OLD.match(line):
            n, commit = int(m.group("n")), m.group("c")
        elif m := _BUILT.match(line):
            compiler, target = m.group("compiler").strip(), m.group("target")
        elif m := _BUILD_LOG.search(line):
            n, commit = int(m.group("n")), m.group("c")
            compiler, target = m.group("compiler").strip(), m.group("target")
        if m := _LOADED.search(line) or _REGISTERED.search(line):
            backends.append(canonical_backend(m.group("b")))
        for rx, name in _INIT:
            if rx.search(line):
                backends.append(name)
    return VersionInfo(build_number=n or None, commit=None if commit in (None, "unknown") else commit,
                       compiler=compiler, target=target, backends=tuple(dict.fromkeys(backends)))


def device_backends(list_devices_text: str) -> list[str]:
    """Backends of the devices `--list-devices` shows (`  CUDA0: NVIDIA H200 (…)` → CUDA)."""
    out = []
    for line in list_devices_text.splitlines():
        if m := _DEVICE_LINE.match(line):
            out.append(canonical_backend(m.group("name")))
    return list(dict.fromkeys(out))


def library_backends(names: Iterable[str]) -> list[str]:
    """Backends whose libraries lie in the folder (`libggml-vulkan.so`, `libggml-cpu-haswell.so` …)."""
    out = []
    for name in sorted(names):
        m = _LIB.match(name)
        if m and m.group("b") in _LIB_BACKENDS:
            out.append(_LIB_BACKENDS[m.group("b")])
    return list(dict.fromkeys(out))


def failure(rc: int, output: str) -> tuple[str, str] | None:
    """Why `llama-server --version` did not work (message, tip), from its exit status and output; None if it did."""
    text = output.strip()
    arch = f"{platform.system()} {platform.machine()}"
    if m := re.search(r"error while loading shared libraries: (\S+?):", text):
        return (f"it cannot find the shared library {m.group(1)}",
                "keep the .so files of the archive beside the programs (extract the whole archive, not single "
                "files), or set LD_LIBRARY_PATH to the folder that holds them; for a distro package, install its "
                "library package too.")
    if m := re.search(r"version [`'](GLIBC\S*?)['`] not found", text):
        return (f"it needs a newer C library than this system has ({m.group(1)} not found)",
                "use an archive built for an older system or a distro package of this system, or build from "
                "source: --llama-cpp DIR.")
    if rc == 126 and re.search(r"Exec format error|ENOEXEC|\[Errno 8\]", text):
        return (f"it is not a program for this machine ({arch}): wrong CPU architecture or operating system",
                "take the archive made for this machine (…-bin-ubuntu-x64 on x86_64, …-bin-ubuntu-arm64 on ARM), "
                "or build from source: --llama-cpp DIR.")
    if rc == 126:
        return (f"it cannot be started: {text.splitlines()[-1] if text else 'permission denied'}",
                "check the file's permissions (chmod +x) and that its folder is not mounted noexec.")
    if rc == 124:
        return ("it did not answer --version within 30 s", "run it by hand: `llama-server --version`.")
    if rc != 0 or not (_VERSION_NEW.search(text) or _VERSION_OLD.search(text) or "built with" in text):
        tail = " | ".join(text.splitlines()[-3:]) or "no output"
        return (f"it does not answer --version like llama-server (exit {rc}: {tail[:300]})",
                "point at a folder with llama.cpp's llama-server in it; llamalab needs a llama.cpp from 2024 on.")
    return None


# ---------------------------------------------------------------- the folder


@dataclass(frozen=True)
class Binaries:
    """A folder of llama.cpp programs that runs here."""

    dir: Path  # where llama-server is
    given: str  # what the user wrote
    files: dict[str, str]  # program → its file name in `dir` (only those present)
    version: VersionInfo
    version_text: str
    backends: tuple[str, ...]
    devices_text: str = ""
    libraries: tuple[str, ...] = field(default=())
    engine: str = engines.LLAMA_CPP

    @property
    def key(self) -> str:
        return "bin-" + hashlib.sha256(str(self.dir).encode()).hexdigest()[:10]

    def has(self, program: str) -> bool:
        return program in self.files

    def path(self, program: str) -> Path:
        return self.dir / self.files.get(program, program)

    def source(self) -> Source:
        """What the builds table records as the llama.cpp a build ran: these binaries' version."""
        return Source(path=self.dir, origin=f"bin:{self.dir}", build_number=self.version.build_number,
                      commit=self.version.commit, engine=self.engine)

    def describe(self) -> str:
        v = self.version
        progs = ", ".join(self.files[p] for p in NAMES if p in self.files)
        return (f"{self.engine} {v.version} ({(v.commit or 'unknown')[:9]}) in {self.dir}: {progs}; backends "
                f"{', '.join(self.backends) or 'not reported'}"
                + (f"; built with {v.compiler} for {v.target}" if v.compiler else ""))

    def as_dict(self) -> JsonObject:
        v = self.version
        return {
            "dir": str(self.dir), "given": self.given, "files": dict(self.files),
            "version": v.version, "build_number": v.build_number, "commit": v.commit,
            "compiler": v.compiler, "target": v.target, "backends": list(self.backends),
            "version_text": self.version_text, "devices_text": self.devices_text,
            **({"engine": self.engine} if self.engine != engines.LLAMA_CPP else {}),
        }


def locate(given: str | Path, where: str = "--llama-bin") -> Path:
    """The folder that holds llama-server, from what the user gave (the folder, a parent of bin/ or build/bin/,
    or llama-server itself)."""
    p = Path(given).expanduser()
    if not p.is_absolute():
        p = Path.cwd() / p
    if p.is_file() and p.name == SERVER:
        p = p.parent
    if not p.exists():
        raise SourceError(f"{where} {p}: no such folder.",
                          tip="pass the folder that holds llama-server: an extracted release archive "
                              "(llama-bNNNN/), a build's build/bin, or /usr/bin for a distro package.")
    if not p.is_dir():
        raise SourceError(f"{where} {p} is a file, not a folder of llama.cpp programs.",
                          tip="extract the release archive first (tar xf llama-bNNNN-bin-….tar.gz) and pass the "
                              "folder it makes.")
    for sub in SUBDIRS:
        if (p / sub / SERVER).exists():
            return (p / sub).resolve()
    looked = ", ".join(str(p / s) if s else str(p) for s in SUBDIRS)
    raise SourceError(f"{where} {p} holds no {SERVER} (looked in {looked}).",
                      tip="llamalab needs llama-server (and rpc-server for cpu-rpc devices): pass the folder of an "
                          "extracted release archive, or build/bin of a llama.cpp build "
                          "(cmake --build build --target llama-server ggml-rpc-server).")


def probe(given: str | Path, where: str = "--llama-bin") -> Binaries:
    """Find llama-server, check it runs here, and read its version, backends and helper programs. Every way this
    can fail is a SourceError that says what is wrong and what to do."""
    d = locate(given, where)
    server = d / SERVER
    if not server.is_file():
        raise SourceError(f"{server} is not a file.", tip="pass the folder that holds the llama-server program.")
    if not os.access(server, os.X_OK):
        raise SourceError(f"{server} is not executable.",
                          tip=f"chmod +x {d}/llama-* (some unzip tools drop the permission bits); if the folder is "
                              "on a noexec mount, copy it elsewhere.")
    rc, out = proc.capture([str(server), "--version"], timeout_s=30)
    why = failure(rc, out)
    if why:
        raise SourceError(f"{server} does not run here: {why[0]}.", tip=why[1])
    version = parse_version(out)
    engine = engine_of(server, out)
    files = {}
    for prog, names in NAMES.items():
        for name in names:
            f = d / name
            if f.is_file() and os.access(f, os.X_OK):
                files[prog] = name
                break
    libs = tuple(sorted(p.name for p in d.iterdir() if p.name.startswith("libggml")))
    devices = ""
    if engines.get(engine).lists_devices:
        rc, devices = proc.capture([str(server), "--list-devices"], timeout_s=60)
        devices = devices if rc == 0 else ""
    backends = list(version.backends) + device_backends(devices) + library_backends(libs)
    return Binaries(dir=d, given=str(given), files=files, version=version, version_text=out.strip()[-4000:],
                    backends=tuple(dict.fromkeys(backends)), devices_text=devices.strip()[-4000:], libraries=libs,
                    engine=engine)


def engine_of(server: Path, version_text: str) -> str:
    """The engine of a llama-server: from its `--version` output where that tells, else from `-rtr --version`."""
    known = engines.engine_of_version(version_text)
    if known is not None:
        return known
    rc, out = proc.capture([str(server), *engines.IK_PROBE], timeout_s=30)
    return engines.engine_of_probe(rc, out)


def check_devices(b: Binaries, backend: str, *, local_rpc: bool, where: str = "--llama-bin") -> None:
    """Refuse, before anything runs, binaries that cannot run the study's devices: a missing rpc-server for local
    rpc-servers, or a backend the binaries show they lack (when they show none, llama-server is left to say)."""
    if local_rpc and not b.has("ggml-rpc-server"):
        raise ConfigError(
            f"the study's devices are local rpc-servers (backend {backend!r}), and {b.dir} ({where}) has no "
            f"rpc-server (looked for {' and '.join(NAMES['ggml-rpc-server'])}).",
            tip="ggml-org's release archives include rpc-server; a build of your own needs -DGGML_RPC=ON and the "
                "target: cmake --build build --target ggml-rpc-server. Or run the study on one device: "
                "--set devices.backend=cpu.")
    need = NEEDED_BACKEND.get(backend)
    if need and b.backends and need not in b.backends:
        raise ConfigError(
            f"the study runs on {backend}, which needs llama.cpp's {need} backend, and the binaries in {b.dir} "
            f"({where}) have {', '.join(b.backends)}.",
            tip=f"use binaries built with the {need} backend (a release archive or a build with it), or set "
                "devices.backend to one these binaries have (cpu-rpc needs RPC; cpu needs nothing).")


def artifact(b: Binaries, name: str, backend: str) -> BuildArtifact:
    """A study build that runs these binaries: no CMake options of its own, nothing built."""
    return BuildArtifact(name=name, key=b.key, source=b.source(), backend=backend, options={}, bin_dir=b.dir,
                         files=dict(b.files), given=b.as_dict(), engine=b.engine)
