"""What `devices.backend = "auto"` becomes on this machine: the facts (GPUs by vendor, which toolchains can build
for them) and the choice, which is pure.

The choice, in order:
1. NVIDIA GPU and a CUDA toolkit (nvcc) → `cuda`; an NVIDIA GPU with no nvcc and no Vulkan toolchain → `cuda` too
   (its build then says what to install).
2. A Vulkan GPU (AMD, Intel, or NVIDIA without nvcc) and a Vulkan toolchain → `vulkan`: what most AMD users run,
   and what the study that started llamalab ran on. Mesa's lavapipe is a CPU device and never counts here.
3. An AMD GPU and ROCm's hipcc, but no Vulkan toolchain → `rocm`.
4. Otherwise remote devices alone (`rpc`) where the study lists some, else `cpu-rpc` — with the reason, so that a
   GPU that could be used but lacks a toolchain is named, with what to install.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..core import proc
from ..llamacpp import toolchain
from ..llamacpp import vulkan as vk
from . import gpu

VULKAN_MIN_HEADER = 275  # VK_EXT_layer_settings, used by llama.cpp b11312 without a version guard
PCI_VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel"}


@dataclass(frozen=True)
class Facts:
    nvidia_gpus: int = 0
    nvcc: bool = False
    vulkan_gpus: tuple[str, ...] = ()  # Vulkan devices that are GPUs (not lavapipe)
    vulkan_buildable: bool = False
    vulkan_why_not: str = ""  # what the Vulkan toolchain lacks
    amd_gpus: int = 0
    hip: bool = False
    notes: tuple[str, ...] = field(default=())


def auto_backend(f: Facts, remotes: bool = False) -> tuple[str, str]:
    """(backend, the reason in words) for `devices.backend = "auto"`."""
    if f.nvidia_gpus and (f.nvcc or not (f.vulkan_gpus and f.vulkan_buildable)):
        return "cuda", f"{f.nvidia_gpus} NVIDIA GPU(s)" + ("" if f.nvcc else
                                                           " (no nvcc: the CUDA build will say what to install)")
    if f.vulkan_gpus and f.vulkan_buildable:
        why = "" if not f.nvidia_gpus else " (NVIDIA GPU without a CUDA toolkit)"
        return "vulkan", f"Vulkan GPU(s): {', '.join(f.vulkan_gpus)}{why}"
    if f.amd_gpus and f.hip:
        return "rocm", f"{f.amd_gpus} AMD GPU(s) and ROCm's hipcc (no Vulkan toolchain)"
    unused = ""
    if f.vulkan_gpus and not f.vulkan_buildable:
        unused = (f"; Vulkan GPU(s) {', '.join(f.vulkan_gpus)} found, but llama.cpp's Vulkan backend cannot be built "
                  f"here ({f.vulkan_why_not or 'no toolchain'}): run scripts/vulkan-toolchain.sh or see "
                  "`llamalab doctor`")
    if remotes:
        return "rpc", "no local GPU llamalab can use; the study's remote rpc-servers are the devices" + unused
    return "cpu-rpc", "no GPU llamalab can build for: local rpc-servers on the CPU act as devices" + unused


# ---------------------------------------------------------------- probing (I/O)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def drm_gpus(read: Callable[[str], str | None] = _read, listdir: Callable[[str], list[str]] | None = None
             ) -> list[tuple[str, str]]:
    """(card, vendor) of each display-class PCI device under /sys/class/drm (no tools needed)."""
    listdir = listdir or (lambda p: sorted(os.listdir(p)) if os.path.isdir(p) else [])
    out = []
    for card in listdir("/sys/class/drm"):
        if not re.fullmatch(r"card\d+", card):
            continue
        vendor = (read(f"/sys/class/drm/{card}/device/vendor") or "").strip().lower()
        cls = (read(f"/sys/class/drm/{card}/device/class") or "").strip().lower()
        if vendor in PCI_VENDORS and cls.startswith("0x03"):
            out.append((card, PCI_VENDORS[vendor]))
    return out


_ICD_DIRS = ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")


def gpu_icds(env: Mapping[str, str], listdir: Callable[[str], list[str]] | None = None) -> list[str]:
    """Vulkan driver manifests (ICD files) that are not a CPU implementation (lavapipe's lvp_icd)."""
    listdir = listdir or (lambda p: sorted(os.listdir(p)) if os.path.isdir(p) else [])
    files = [f for var in ("VK_DRIVER_FILES", "VK_ICD_FILENAMES") for f in (env.get(var) or "").split(os.pathsep) if f]
    if not files:
        files = [f"{d}/{n}" for d in _ICD_DIRS for n in listdir(d) if n.endswith(".json")]
    return [f for f in files if not re.search(r"lvp_icd|lavapipe|swiftshader", os.path.basename(f), re.I)]


def vulkan_toolchain(home: Path, env: Mapping[str, str], which: Callable[[str], str | None] = shutil.which,
                     read: Callable[[str], str | None] = _read) -> tuple[bool, str]:
    """Whether llama.cpp's Vulkan backend can be built: llamalab's private prefix, or the system's (or the Vulkan
    SDK's) headers ≥ 1.x.275, glslc and SPIRV-Headers."""
    prefix = toolchain.vulkan_prefix(home, env)
    if toolchain.vulkan_prefix_complete(prefix):
        return True, f"toolchain prefix {prefix}"
    sdk = env.get("VULKAN_SDK")
    dirs = ([f"{sdk}/include"] if sdk else []) + ["/usr/include", "/usr/local/include", "/opt/homebrew/include"]
    header = next((t for d in dirs if (t := read(f"{d}/vulkan/vulkan_core.h")) is not None), None)
    missing = []
    if header is None:
        missing.append("Vulkan headers")
    else:
        m = re.search(r"^\s*#define\s+VK_HEADER_VERSION\s+(\d+)", header, re.M)
        if m and int(m.group(1)) < VULKAN_MIN_HEADER:
            missing.append(f"Vulkan headers newer than 1.x.{m.group(1)}")
    if not which("glslc"):
        missing.append("glslc")
    if not any(read(f"{d}/spirv/unified1/spirv.hpp") is not None for d in dirs):
        missing.append("SPIRV-Headers")
    return (not missing), ", ".join(missing)


def facts(home: Path, env: Mapping[str, str] | None = None, *, which: Callable[[str], str | None] = shutil.which,
          nvidia: Callable[[], list[gpu.Gpu]] = gpu.probe, run: Callable[[list[str]], tuple[int, str]] | None = None,
          read: Callable[[str], str | None] = _read, listdir: Callable[[str], list[str]] | None = None,
          exists: Callable[[str], bool] = os.path.exists) -> Facts:
    env = dict(os.environ if env is None else env)
    run = run or (lambda argv: proc.capture(argv, timeout_s=30))
    nv = len(nvidia())
    drm = drm_gpus(read, listdir)
    vk_gpus: list[str] = []
    notes: list[str] = []
    if which("vulkaninfo"):
        rc, text = run([which("vulkaninfo") or "vulkaninfo", "--summary"])
        if rc == 0:
            vk_gpus = [d.name for d in vk.parse_vulkaninfo(text) if not d.software]
            notes.append("Vulkan devices from vulkaninfo --summary")
    elif drm and gpu_icds(env, listdir):  # no vulkaninfo: a GPU and a GPU driver manifest
        vk_gpus = [f"{vendor} GPU ({card})" for card, vendor in drm]
        notes.append("Vulkan GPUs from /sys/class/drm and the driver manifests (vulkaninfo not installed)")
    ok, why = vulkan_toolchain(home, env, which, read)
    amd = sum(1 for _, v in drm if v == "AMD")
    nvcc = bool(which("nvcc")) or any(exists(f"{d}/bin/nvcc") for d in
                                      (env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda") if d)
    return Facts(nvidia_gpus=nv, nvcc=nvcc, vulkan_gpus=tuple(vk_gpus), vulkan_buildable=ok,
                 vulkan_why_not="" if ok else why, amd_gpus=amd, hip=bool(which("hipcc") or which("hipconfig")),
                 notes=tuple(notes))
