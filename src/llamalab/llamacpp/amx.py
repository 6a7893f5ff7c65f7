"""A llama.cpp fault on CPUs with AMX, and the build flag that avoids it.

llama.cpp's CPU backend has AMX int8 kernels (`ggml/src/ggml-cpu/amx/mmq.cpp`), compiled when the compiler targets
AMX-INT8 — with `GGML_NATIVE` (the default) on a CPU that has it, such as Sapphire Rapids — and used for the weights of
Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K and IQ4_XS tensors. In the versions whose `ggml_tile_config_init` fills the tile
configuration in a stack variable, GCC drops the stores (it does not see `_tile_loadconfig` read them), the tiles are
configured with zeros, and the first tile instruction (`tilezero`) raises SIGILL: llama-server dies in its warm-up
(seen as SIGSEGV or SIGILL), llama-perplexity in its first batch (llama.cpp pull request 26954 describes it; a
synthetic F32/F16 model never reaches those kernels, a Q4_K_M model such as Gemma 3 270M does).

`defines` gives the CMake flags for such a build: `-mno-amx-int8` in the C and C++ flags, which turns the compiler's
AMX-INT8 off whatever `-march=native` says (GCC lets an explicit `-mno-` win over `-march`), so those kernels are not
compiled and the CPU backend's other paths (AVX-512 VNNI and the repacked ones) run instead. The flag is in the
build's CMake command, which every report shows; `system_info` in the log then no longer lists `AMX_INT8`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from .cmake import cmake_true

NO_AMX_INT8 = "-mno-amx-int8"
MMQ = Path("ggml/src/ggml-cpu/amx/mmq.cpp")
WHY = ("this CPU has AMX-INT8 and this llama.cpp's AMX kernels crash (SIGILL: their tile configuration is built on "
       "the stack, which GCC drops; llama.cpp pull request 26954)")

_INIT = re.compile(r"ggml_tile_config_init\s*\(\s*(?:void)?\s*\)\s*\{(?P<body>.*?)\n\}", re.S)
_STACK_CONFIG = re.compile(r"^\s*(?:alignas\s*\(\s*64\s*\)\s*)?tile_config_t\s+\w+\s*(?:=\s*\{\s*\})?\s*;", re.M)


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The `flags` of the first processor in /proc/cpuinfo's text [pure]."""
    m = re.search(r"^flags\s*:\s*(.*)$", cpuinfo, re.M)
    return frozenset(m.group(1).split()) if m else frozenset()


def stack_tile_config(mmq_text: str) -> bool:
    """True where `ggml_tile_config_init` declares its tile configuration as a (non-static) local [pure]."""
    m = _INIT.search(mmq_text)
    return bool(m and _STACK_CONFIG.search(m.group("body")))


def compiles_amx_int8(options: Mapping[str, str], flags: frozenset[str]) -> bool:
    """Whether a build with these CMake options targets AMX-INT8 on a CPU with these flags [pure]: `GGML_NATIVE`
    (on unless set OFF) on a CPU that has `amx_int8`, or `GGML_AMX_INT8=ON` named."""
    def on(name: str, default: bool) -> bool:
        value = options.get(name)
        return default if value is None else cmake_true(value)

    native = on("GGML_NATIVE", True) and "amx_int8" in flags
    return (native or on("GGML_AMX_INT8", False)) and NO_AMX_INT8 not in options.get("CMAKE_CXX_FLAGS", "")


def flags_defines(options: Mapping[str, str]) -> dict[str, str]:
    """`CMAKE_C_FLAGS` and `CMAKE_CXX_FLAGS` with `-mno-amx-int8` in front of whatever the options give [pure]."""
    return {name: f"{NO_AMX_INT8} {options.get(name, '')}".strip() for name in ("CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS")}


def defines(source_dir: Path, options: Mapping[str, str], flags: frozenset[str]) -> dict[str, str]:
    """The CMake defines that keep a build of `source_dir` off the crashing AMX kernels; empty where it would not
    compile them or its kernels do not have the fault."""
    if not compiles_amx_int8(options, flags):
        return {}
    try:
        text = (source_dir / MMQ).read_text(errors="replace")
    except OSError:
        return {}  # no AMX kernels in this version
    return flags_defines(options) if stack_tile_config(text) else {}


def this_machine() -> frozenset[str]:
    """This machine's CPU flags (empty where /proc/cpuinfo cannot be read)."""
    try:
        return cpu_flags(Path("/proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        return frozenset()
