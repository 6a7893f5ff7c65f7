"""Where the toolchains of the GPU backends other than CUDA are, as CMake definitions and build environment.

* Vulkan: llama.cpp needs Vulkan headers with VK_EXT_layer_settings (VK_HEADER_VERSION ≥ 275), glslc and
  SPIRV-Headers. Where the distribution's are too old (Debian 12), `scripts/vulkan-toolchain.sh` unpacks newer ones
  into a private prefix (`$LLAMALAB_VULKAN_PREFIX`, else `$LLAMALAB_HOME/toolchains/vulkan`); a build for the
  vulkan backend then points CMake at it (`Vulkan_INCLUDE_DIR`, `Vulkan_LIBRARY`, `Vulkan_GLSLC_EXECUTABLE`,
  `CMAKE_PREFIX_PATH` for SPIRV-Headers' CMake package). Without a prefix, CMake finds the system's.
* ROCm/HIP: llama.cpp's HIP build wants `HIPCXX` (ROCm's clang) and `HIP_PATH` in the environment, from
  `hipconfig`, and `GPU_TARGETS` (the gfx architectures; llamalab passes `$LLAMALAB_HIP_ARCH` where set, otherwise
  CMake builds for the GPUs in this machine).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from ..core import proc
from ..core.records import JsonObject

_TRIPLETS = {"x86_64": "x86_64-linux-gnu", "amd64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu",
             "arm64": "aarch64-linux-gnu"}


def vulkan_prefix(home: Path, env: Mapping[str, str] | None = None) -> Path:
    """The private Vulkan toolchain prefix (it may not exist)."""
    env = os.environ if env is None else env
    return Path(env["LLAMALAB_VULKAN_PREFIX"]) if env.get("LLAMALAB_VULKAN_PREFIX") else home / "toolchains" / "vulkan"


def vulkan_defines_for(prefix: Path, machine: str | None = None) -> dict[str, str]:
    """CMake definitions that point a llama.cpp build at an unpacked prefix (pure: paths only)."""
    root = prefix / "root"
    triplet = _TRIPLETS.get((machine or platform.machine()).lower(), "x86_64-linux-gnu")
    return {
        "Vulkan_INCLUDE_DIR": str(root / "usr" / "include"),
        "Vulkan_LIBRARY": str(root / "usr" / "lib" / triplet / "libvulkan.so"),
        "Vulkan_GLSLC_EXECUTABLE": str(prefix / "bin" / "glslc"),
        "CMAKE_PREFIX_PATH": str(root / "usr"),
    }


def vulkan_prefix_complete(prefix: Path, machine: str | None = None) -> bool:
    d = vulkan_defines_for(prefix, machine)
    return ((prefix / "toolchain.json").is_file() and Path(d["Vulkan_INCLUDE_DIR"], "vulkan", "vulkan_core.h").is_file()
            and Path(d["Vulkan_LIBRARY"]).exists() and os.access(d["Vulkan_GLSLC_EXECUTABLE"], os.X_OK)
            and Path(d["Vulkan_INCLUDE_DIR"], "spirv", "unified1", "spirv.hpp").is_file())


def vulkan_defines(home: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The prefix's CMake definitions where a complete prefix exists, else {} (CMake looks in the system)."""
    prefix = vulkan_prefix(home, env)
    return vulkan_defines_for(prefix) if vulkan_prefix_complete(prefix) else {}


def vulkan_prefix_info(prefix: Path) -> JsonObject | None:
    """What `scripts/vulkan-toolchain.sh` recorded about a prefix (header version, packages), or None."""
    try:
        info: JsonObject | None = json.loads((prefix / "toolchain.json").read_text())
        return info
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- ROCm / HIP


def hip_env(which: Callable[[str], str | None] = shutil.which,
            capture: Callable[[list[str]], tuple[int, str]] | None = None,
            env: Mapping[str, str] | None = None) -> dict[str, str]:
    """HIPCXX and HIP_PATH for a HIP build, from `hipconfig -l` (ROCm's clang folder) and `hipconfig -R` (the
    ROCm root), unless the environment already sets them; {} where hipconfig is missing."""
    env = os.environ if env is None else env
    capture = capture or (lambda argv: proc.capture(argv, timeout_s=20))
    out: dict[str, str] = {}
    hipconfig = which("hipconfig")
    if not hipconfig:
        return out
    if not env.get("HIPCXX"):
        rc, text = capture([hipconfig, "-l"])
        if rc == 0 and text.strip():
            out["HIPCXX"] = str(Path(text.strip().splitlines()[-1].strip()) / "clang")
    if not env.get("HIP_PATH"):
        rc, text = capture([hipconfig, "-R"])
        if rc == 0 and text.strip():
            out["HIP_PATH"] = text.strip().splitlines()[-1].strip()
    return out


def hip_defines(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`GPU_TARGETS` from `$LLAMALAB_HIP_ARCH` (e.g. gfx1030 or gfx1100;gfx1030), else {}: CMake detects the GPUs."""
    env = os.environ if env is None else env
    arch = (env.get("LLAMALAB_HIP_ARCH") or "").strip().replace(",", ";")
    return {"GPU_TARGETS": arch} if arch else {}
