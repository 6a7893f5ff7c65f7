"""How to install each thing `llamalab doctor` may find missing, per OS family: the packages of its package
manager and, where needed, a step in words first. Data, read by machine/doctor.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

FAMILIES = ("debian", "fedora", "arch", "macos")


FAMILY_NAMES = {"debian": "Debian/Ubuntu", "fedora": "Fedora", "arch": "Arch", "macos": "macOS"}


MANAGERS = {
    "debian": "sudo apt-get install -y",
    "fedora": "sudo dnf install -y",
    "arch": "sudo pacman -S --needed",
    "macos": "brew install",
}


@dataclass(frozen=True)
class Recipe:
    """How to install one thing on each OS family: packages for its package manager, and/or a step in words."""

    packages: Mapping[str, str] = field(default_factory=dict)  # family → space-separated package names
    steps: Mapping[str, str] = field(default_factory=dict)  # family → an instruction that comes first

    def lines(self, family: str) -> list[str]:
        out = []
        if family in self.steps:
            out.append(self.steps[family])
        if family in self.packages:
            out.append(f"{MANAGERS[family]} {self.packages[family]}")
        return out


def _same(pkgs: str) -> dict[str, str]:
    return {f: pkgs for f in FAMILIES}


TOOLCHAIN_SCRIPT = ("bash scripts/vulkan-toolchain.sh  (in a llamalab checkout: Debian 13's Vulkan headers and "
                     "Debian 12's glslc unpacked into ~/.cache/llamalab/toolchains/vulkan, nothing installed "
                     "system-wide; llamalab's builds find them there)")


_LUNARG = ("or install the LunarG Vulkan SDK (https://vulkan.lunarg.com/sdk/home), then `source <sdk>/setup-env.sh` "
           "in the shell that runs llamalab")

RECIPES: dict[str, Recipe] = {
    "cmake": Recipe(_same("cmake")),
    "cmake-old": Recipe(steps={f: "python3 -m pip install --upgrade cmake  (a current CMake from PyPI; put the "
                                  "folder it lands in first on PATH)" for f in FAMILIES}),
    "compiler": Recipe({"debian": "g++ make", "fedora": "gcc-c++ make", "arch": "gcc make"},
                       {"macos": "xcode-select --install"}),
    "ninja": Recipe({"debian": "ninja-build", "fedora": "ninja-build", "arch": "ninja", "macos": "ninja"}),
    "ccache": Recipe(_same("ccache")),
    "git": Recipe({"debian": "git", "fedora": "git", "arch": "git"}, {"macos": "xcode-select --install"}),
    "pkg-config": Recipe({"debian": "pkg-config", "fedora": "pkgconf-pkg-config", "arch": "pkgconf",
                          "macos": "pkgconf"}),
    "openblas": Recipe({"debian": "libopenblas-dev", "fedora": "openblas-devel", "arch": "openblas",
                        "macos": "openblas"}),
    "cuda-toolkit": Recipe(
        {"debian": "nvidia-cuda-toolkit", "arch": "cuda"},
        {"debian": "Debian: enable the contrib and non-free components, then (Ubuntu: directly; for a newer CUDA "
                   "use NVIDIA's repository, https://developer.nvidia.com/cuda-downloads):",
         "fedora": "add NVIDIA's CUDA repository (https://developer.nvidia.com/cuda-downloads), then: "
                   "sudo dnf install -y cuda-toolkit",
         "macos": "CUDA does not exist for macOS; llama.cpp uses Metal there"}),
    "cuda-path": Recipe(steps={f: "export PATH=/usr/local/cuda/bin:$PATH  (nvcc is installed but not on PATH)"
                               for f in ("debian", "fedora", "arch")}),
    "nvidia-driver": Recipe(
        {"debian": "nvidia-driver", "arch": "nvidia-open"},
        {"debian": "Ubuntu: sudo ubuntu-drivers install (and skip the next line); "
                   "Debian: enable the non-free component, then:",
         "fedora": "enable RPM Fusion (nonfree), then: sudo dnf install -y akmod-nvidia",
         "macos": "NVIDIA GPUs are not supported on current macOS"}),
    "vulkan": Recipe(
        {"debian": "libvulkan-dev glslc spirv-headers",
         "fedora": "vulkan-headers vulkan-loader-devel glslc spirv-headers-devel",
         "arch": "vulkan-headers vulkan-icd-loader shaderc spirv-headers",
         "macos": "vulkan-headers vulkan-loader molten-vk shaderc spirv-headers"}),
    # Where the distribution's Vulkan headers are too old (Debian 12, Ubuntu before 24.04): llamalab's own
    # private toolchain on Debian/Ubuntu, the LunarG SDK everywhere.
    "vulkan-sdk": Recipe(steps={f: (TOOLCHAIN_SCRIPT + "; " + _LUNARG) if f == "debian" else _LUNARG[3:]
                                for f in FAMILIES}),
    "vulkan-tools": Recipe({"debian": "vulkan-tools", "fedora": "vulkan-tools", "arch": "vulkan-tools",
                            "macos": "vulkan-tools"}),
    "lavapipe": Recipe({"debian": "mesa-vulkan-drivers", "fedora": "mesa-vulkan-drivers", "arch": "vulkan-swrast"}),
    "rocm": Recipe(
        {"debian": "hipcc libhipblas-dev librocblas-dev rocm-smi", "fedora": "rocm-hip-devel hipblas-devel "
         "rocblas-devel rocm-smi", "arch": "rocm-hip-sdk rocm-smi-lib"},
        {"debian": "Debian 13 and Ubuntu 24.04 package ROCm (older releases: AMD's repository, "
                   "https://rocm.docs.amd.com/projects/install-on-linux/en/latest/):",
         "macos": "ROCm does not exist for macOS"}),
    "rocm-smi": Recipe({"debian": "rocm-smi", "fedora": "rocm-smi", "arch": "rocm-smi-lib"}),
    "hip-arch": Recipe(steps={f: "export LLAMALAB_HIP_ARCH=gfx1100  (your GPU's gfx target: `rocminfo | grep gfx`; "
                                 "gfx1030 RX 6800/6900, gfx1100 RX 7900, gfx1201 RX 9070, gfx90a MI210/250, "
                                 "gfx942 MI300)" for f in ("debian", "fedora", "arch")}),
    "cuda-arch": Recipe(steps={f: "export LLAMALAB_CUDA_ARCH=90  (the GPU you will run on: 86 RTX 30xx/A10, "
                                  "89 RTX 40xx/L4/L40, 90 H100/H200, 120 RTX 50xx)"
                               for f in ("debian", "fedora", "arch")}),
}

