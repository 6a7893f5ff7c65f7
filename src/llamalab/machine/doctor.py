"""`llamalab doctor`: what this machine has for building and running llama.cpp, and what to install.

All probing goes through a `Probe` (which, capture, read a file, list GPUs, look for OpenBLAS), so a test can
hand in a fake machine. `examine()` turns what the probe sees into findings; `render()` returns text.
Every finding that is not "ok" carries the command that fixes it, for the OS detected here first.

Why one module of ~700 lines: every check reads the same `Probe` and adds to the same `Report`, and `examine`
weighs them together (a backend is runnable only where its compiler, toolchain and driver findings agree); split, the
checks would pass that state between modules. The install recipes are data apart (machine/recipes.py).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from ..core import paths, proc
from ..core.records import JsonObject
from ..llamacpp import build, toolchain
from ..llamacpp import vulkan as vk
from . import detect, gpu
from .recipes import FAMILIES, FAMILY_NAMES, MANAGERS, RECIPES, TOOLCHAIN_SCRIPT


class _Add(Protocol):
    """`backends`' `add`: one backend's status from what it lacks here."""

    def __call__(self, name: str, extra: list[str], extra_fix: Mapping[str, Sequence[str]], runnable: bool,
                 run_detail: str, note: str = "") -> None: ...

# ---------------------------------------------------------------- facts the checks rely on

CMAKE_MIN = (3, 14)  # llama.cpp's cmake_minimum_required


CMAKE_MIN_CUDA = (3, 18)  # ggml-cuda's cmake_minimum_required (CMAKE_CUDA_ARCHITECTURES)


CMAKE_MIN_NATIVE_ARCH = (3, 24)  # CMAKE_CUDA_ARCHITECTURES=native, llamalab's default for CUDA builds
# llama.cpp b11312 uses vk::LayerSettingsCreateInfoEXT (VK_EXT_layer_settings) without a version guard; Debian 12
# ships headers 1.3.239, which lack it (llama-cpp-facts.md §3). Ubuntu 24.04's 1.3.275 is what llama.cpp's own CI builds
# with from distribution packages, so that is the oldest we call new enough.
# llama.cpp b11312 uses vk::LayerSettingsCreateInfoEXT (VK_EXT_layer_settings) without a version guard; Debian 12
# ships headers 1.3.239, which lack it (llama-cpp-facts.md §3). Ubuntu 24.04's 1.3.275 is what llama.cpp's own CI builds
# with from distribution packages, so that is the oldest we call new enough.
VULKAN_MIN_HEADER = detect.VULKAN_MIN_HEADER


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def _capture(argv: Sequence[str]) -> tuple[int, str]:
    return proc.capture(argv, timeout_s=20)


@dataclass
class Probe:
    """Everything doctor asks of the machine. Tests replace the callables with a fake machine."""

    which: Callable[[str], str | None] = shutil.which
    capture: Callable[[Sequence[str]], tuple[int, str]] = _capture
    read: Callable[[str], str | None] = _read_text
    gpus: Callable[[], list[gpu.Gpu]] = gpu.probe
    openblas: Callable[[], tuple[bool, str]] = build.openblas_available
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    listdir: Callable[[str], list[str]] = field(default=lambda d: sorted(os.listdir(d)) if os.path.isdir(d) else [])
    system: str = sys.platform  # "linux", "darwin", …
    machine: str = field(default_factory=platform.machine)
    python: str = field(default_factory=platform.python_version)
    python_path: str = sys.executable


# ---------------------------------------------------------------- findings


@dataclass(frozen=True)
class OsInfo:
    family: str | None  # one of FAMILIES, or None when not recognised
    name: str
    id: str = ""
    version_id: str = ""

    @property
    def vulkan_packages_too_old(self) -> bool:
        """Debian 12 and Ubuntu before 24.04 ship Vulkan headers older than llama.cpp needs."""
        v = _version_tuple(self.version_id)
        if self.id == "debian":
            return bool(v) and v < (13,)
        if self.id == "ubuntu":
            return bool(v) and v < (24, 4)
        return False


@dataclass(frozen=True)
class Finding:
    key: str
    title: str
    status: str  # "ok" | "missing" | "old" | "info"
    detail: str
    version: str | None = None
    path: str | None = None
    fix: dict[str, list[str]] = field(default_factory=dict)  # family → lines to run


@dataclass(frozen=True)
class BackendStatus:
    name: str
    buildable: bool
    runnable: bool
    detail: str
    missing: tuple[str, ...] = ()
    fix: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Report:
    os: OsInfo
    machine: str
    tools: list[Finding]
    gpus: list[gpu.Gpu]
    other_gpus: list[str]
    backends: list[BackendStatus]
    study_backend: str  # what `devices.backend = "auto"` resolves to here
    study_backend_reason: str = ""
    vulkan_devices: list[JsonObject] = field(default_factory=list)  # vulkaninfo: name, type, memory budget
    amd_gpus: list[str] = field(default_factory=list)

    def tool(self, key: str) -> Finding:
        return next(f for f in self.tools if f.key == key)

    def backend(self, name: str) -> BackendStatus:
        return next(b for b in self.backends if b.name == name)

    def to_json(self) -> JsonObject:
        return {
            "os": {**asdict(self.os), "family_name": FAMILY_NAMES.get(self.os.family or "", None)},
            "machine": self.machine,
            "tools": [asdict(f) for f in self.tools],
            "gpus": [g.as_dict() for g in self.gpus],
            "other_gpus": list(self.other_gpus),
            "backends": [{**asdict(b), "missing": list(b.missing)} for b in self.backends],
            "study_backend": self.study_backend,
            "study_backend_reason": self.study_backend_reason,
            "vulkan_devices": list(self.vulkan_devices),
            "amd_gpus": list(self.amd_gpus),
        }


# ---------------------------------------------------------------- pure helpers


def parse_os_release(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip().strip('"').strip("'")
    return out


def detect_os(system: str, os_release: str | None, mac_version: str = "") -> OsInfo:
    if system == "darwin":
        return OsInfo(family="macos", name=f"macOS {mac_version}".strip(), id="macos", version_id=mac_version)
    rel = parse_os_release(os_release or "")
    ids = [rel.get("ID", "").lower(), *rel.get("ID_LIKE", "").lower().split()]
    family = None
    for i in ids:
        if i in ("debian", "ubuntu", "linuxmint", "pop", "raspbian"):
            family = "debian"
        elif i in ("fedora", "rhel", "centos", "rocky", "almalinux"):
            family = "fedora"
        elif i in ("arch", "manjaro", "endeavouros", "cachyos"):
            family = "arch"
        if family:
            break
    name = rel.get("PRETTY_NAME") or rel.get("NAME") or system
    return OsInfo(family=family, name=name, id=rel.get("ID", "").lower(), version_id=rel.get("VERSION_ID", ""))


def _version_tuple(text: str | None) -> tuple[int, ...]:
    m = re.search(r"\d+(?:\.\d+)*", text or "")
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def _fmt_version(v: tuple[int, ...]) -> str:
    return ".".join(str(x) for x in v)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def vulkan_header_version(text: str) -> int | None:
    """`#define VK_HEADER_VERSION 239` in vulkan_core.h → 239."""
    m = re.search(r"^\s*#define\s+VK_HEADER_VERSION\s+(\d+)", text, re.M)
    return int(m.group(1)) if m else None


def fixes(keys: Sequence[str], here: str | None = None, here_keys: Sequence[str] | None = None
          ) -> dict[str, list[str]]:
    """Install lines for several recipes, per family: package installs merged into one command.
    `here_keys`, when given, replace `keys` for the family `here` (e.g. the Vulkan SDK on Debian 12)."""
    out: dict[str, list[str]] = {}
    for fam in FAMILIES:
        steps: list[str] = []
        pkgs: list[str] = []
        for k in (here_keys if here_keys is not None and fam == here else keys):
            r = RECIPES[k]
            if fam in r.steps and r.steps[fam] not in steps:
                steps.append(r.steps[fam])
            for p in r.packages.get(fam, "").split():
                if p not in pkgs:
                    pkgs.append(p)
        lines = steps + ([f"{MANAGERS[fam]} {' '.join(pkgs)}"] if pkgs else [])
        if lines:
            out[fam] = lines
    return out


# ---------------------------------------------------------------- probing


def _tool(p: Probe, key: str, title: str, names: Sequence[str], version_argv: Sequence[str] = ("--version",),
          *, missing_detail: str, recipe: str | None = None) -> Finding:
    """The first of `names` on PATH, with the first line of its version output; else what installs it."""
    for n in names:
        path = p.which(n)
        if path:
            rc, out = p.capture([path, *version_argv])
            line = _first_line(out) if rc == 0 else ""
            return Finding(key, title, "ok", f"{line or 'found'} ({path})", version=line or None, path=path)
    return Finding(key, title, "missing" if recipe else "info", missing_detail, fix=fixes([recipe]) if recipe else {})


def _cmake(p: Probe) -> Finding:
    path = p.which("cmake")
    if not path:
        return Finding("cmake", "CMake", "missing", f"not found: every llama.cpp build needs CMake ≥ "
                       f"{_fmt_version(CMAKE_MIN)}", fix=fixes(["cmake"]))
    rc, out = p.capture([path, "--version"])
    v = _version_tuple(out) if rc == 0 else ()
    shown = _fmt_version(v) or "unknown version"
    if v and v < CMAKE_MIN:
        return Finding("cmake", "CMake", "old", f"{shown} ({path}) is older than {_fmt_version(CMAKE_MIN)}, "
                       "which llama.cpp needs", version=shown, path=path, fix=fixes(["cmake-old"]))
    return Finding("cmake", "CMake", "ok", f"{shown} ({path}); llama.cpp needs ≥ {_fmt_version(CMAKE_MIN)}, "
                   f"CUDA builds ≥ {_fmt_version(CMAKE_MIN_CUDA)}", version=shown, path=path)


def _compiler(p: Probe, key: str, title: str, env_var: str, names: Sequence[str]) -> Finding:
    chosen = p.env.get(env_var)
    candidates = [chosen] if chosen else list(names)
    for n in candidates:
        path = p.which(n) if n else None
        if path:
            rc, out = p.capture([path, "--version"])
            line = _first_line(out) if rc == 0 else "unknown version"
            via = f"${env_var}" if chosen else n
            return Finding(key, title, "ok", f"{line} ({path}, as {via})", version=line, path=path)
    what = f"${env_var}={chosen} is not an installed program" if chosen else f"none of {', '.join(names)} found"
    return Finding(key, title, "missing", f"{what}: llama.cpp needs a C and a C++17 compiler", fix=fixes(["compiler"]))


def _build_tool(p: Probe) -> tuple[Finding, Finding]:
    ninja = _tool(p, "ninja", "Ninja", ["ninja", "ninja-build"],
                  missing_detail="not found (recommended: faster builds with progress; "
                  "without it CMake uses make)", recipe="ninja")
    make = _tool(p, "make", "make", ["make", "gmake"], missing_detail="not found", recipe="compiler")
    if ninja.status != "ok" and make.status != "ok":
        make = Finding("make", "make", "missing", "neither ninja nor make found: CMake has nothing to build with",
                       fix=fixes(["ninja"]))
    elif ninja.status == "ok" and make.status != "ok":
        make = Finding("make", "make", "info", "not found (not needed: Ninja is used)")
    elif ninja.status != "ok":
        ninja = Finding("ninja", "Ninja", "missing", "not found (optional: faster builds; CMake uses make "
                        "meanwhile)", fix=ninja.fix)
    return ninja, make


def _nvcc(p: Probe) -> Finding:
    path = p.which("nvcc")
    off_path = None
    if not path:
        for cand in (p.env.get("CUDA_HOME"), p.env.get("CUDA_PATH"), "/usr/local/cuda", "/opt/cuda"):
            if cand and p.read(f"{cand}/bin/nvcc") is not None:
                off_path = f"{cand}/bin/nvcc"
                break
    exe = path or off_path
    if not exe:
        return Finding("nvcc", "CUDA toolkit", "missing", "nvcc not found: needed to build the cuda backend",
                       fix=fixes(["cuda-toolkit"]))
    rc, out = p.capture([exe, "--version"])
    m = re.search(r"release\s+(\d+\.\d+)", out) if rc == 0 else None
    ver = m.group(1) if m else None
    if off_path:
        shown = f"nvcc {ver}" if ver else "nvcc"
        return Finding("nvcc", "CUDA toolkit", "missing", f"{shown} is at {off_path} but not on PATH", version=ver,
                       path=off_path, fix=fixes(["cuda-path"]))
    return Finding("nvcc", "CUDA toolkit", "ok", f"nvcc {ver or 'unknown version'} ({path})", version=ver, path=path)


def _driver(p: Probe, gpus: list[gpu.Gpu], system: str) -> Finding:
    if gpus:
        drv = gpus[0].driver or "unknown version"
        return Finding("nvidia-driver", "NVIDIA driver", "ok", f"{drv}, {len(gpus)} GPU(s)", version=gpus[0].driver)
    if system == "darwin":
        return Finding("nvidia-driver", "NVIDIA driver", "info", "not applicable on macOS")
    smi = p.which("nvidia-smi")
    detail = ("nvidia-smi is installed but sees no GPU (driver not loaded, or no NVIDIA GPU)" if smi
              else "no NVIDIA driver (NVML and nvidia-smi found nothing)")
    return Finding("nvidia-driver", "NVIDIA driver", "missing",
                   detail + ": needed to run the cuda backend; if this machine has no NVIDIA GPU, ignore this line",
                   fix=fixes(["nvidia-driver"]))


_VULKAN_HEADER_DIRS = ("/usr/include", "/usr/local/include", "/opt/homebrew/include")


def _vulkan_prefix(p: Probe) -> list[Finding] | None:
    """llamalab's private toolchain (scripts/vulkan-toolchain.sh), where complete: headers, glslc, SPIRV-Headers."""
    home = Path(p.env["LLAMALAB_HOME"]) if p.env.get("LLAMALAB_HOME") else paths.cache_home()
    prefix = toolchain.vulkan_prefix(home, p.env)
    d = toolchain.vulkan_defines_for(prefix, p.machine)
    header = p.read(f"{d['Vulkan_INCLUDE_DIR']}/vulkan/vulkan_core.h")
    if p.read(f"{prefix}/toolchain.json") is None or header is None or \
            p.read(f"{d['Vulkan_INCLUDE_DIR']}/spirv/unified1/spirv.hpp") is None:
        return None
    ver = vulkan_header_version(header)
    glslc = d["Vulkan_GLSLC_EXECUTABLE"]
    rc, text = p.capture([glslc, "--version"])
    where = f"llamalab's toolchain prefix {prefix}"
    return [
        Finding("vulkan-headers", "Vulkan headers", "ok", f"VK_HEADER_VERSION {ver} ({where})", version=str(ver),
                path=f"{d['Vulkan_INCLUDE_DIR']}/vulkan/vulkan_core.h"),
        Finding("glslc", "glslc", "ok" if rc == 0 else "missing",
                f"{_first_line(text)} ({glslc})" if rc == 0
                else f"{glslc} does not run: rerun scripts/vulkan-toolchain.sh",
                path=glslc, fix={} if rc == 0 else {f: [TOOLCHAIN_SCRIPT] for f in FAMILIES}),
        Finding("spirv-headers", "SPIRV-Headers", "ok", f"{d['Vulkan_INCLUDE_DIR']}/spirv/unified1/spirv.hpp ({where})",
                path=f"{d['Vulkan_INCLUDE_DIR']}/spirv/unified1/spirv.hpp"),
    ]


def _vulkan(p: Probe, osinfo: OsInfo) -> list[Finding]:
    out = _vulkan_prefix(p)
    if out is not None:
        return out + [_vulkaninfo_finding(p)]
    sdk = p.env.get("VULKAN_SDK")
    dirs = ([f"{sdk}/include"] if sdk else []) + list(_VULKAN_HEADER_DIRS)
    header_ver = header_at = None
    for d in dirs:
        text = p.read(f"{d}/vulkan/vulkan_core.h")
        if text is not None:
            header_ver, header_at = vulkan_header_version(text), f"{d}/vulkan/vulkan_core.h"
            break
    sdk_here = ["vulkan-sdk"] if osinfo.vulkan_packages_too_old else None
    install = fixes(["vulkan"], osinfo.family, sdk_here)
    out = []
    if header_at is None:
        out.append(Finding("vulkan-headers", "Vulkan headers", "missing", "vulkan/vulkan_core.h not found: needed "
                           "to build the vulkan backend", fix=install))
    elif header_ver is not None and header_ver < VULKAN_MIN_HEADER:
        out.append(Finding("vulkan-headers", "Vulkan headers", "old",
                           f"1.x.{header_ver} ({header_at}) is too old for current llama.cpp (needs "
                           f"VK_HEADER_VERSION ≥ {VULKAN_MIN_HEADER}); Debian 12 ships 239",
                           version=str(header_ver), path=header_at,
                           fix=fixes(["vulkan"], osinfo.family, ["vulkan-sdk"])))
    else:
        out.append(Finding("vulkan-headers", "Vulkan headers", "ok", f"VK_HEADER_VERSION {header_ver} ({header_at})",
                           version=str(header_ver), path=header_at))
    glslc = p.which("glslc")
    if glslc:
        rc, text = p.capture([glslc, "--version"])
        line = _first_line(text) if rc == 0 else "unknown version"
        out.append(Finding("glslc", "glslc", "ok", f"{line} ({glslc})", version=line, path=glslc))
    else:
        out.append(Finding("glslc", "glslc", "missing", "not found: the vulkan backend compiles its shaders with it",
                           fix=install))
    spirv_dirs = ([f"{sdk}/include"] if sdk else []) + list(_VULKAN_HEADER_DIRS)
    spirv = next((f"{d}/spirv/unified1/spirv.hpp" for d in spirv_dirs
                  if p.read(f"{d}/spirv/unified1/spirv.hpp") is not None), None)
    out.append(Finding("spirv-headers", "SPIRV-Headers", "ok", spirv, path=spirv) if spirv else
               Finding("spirv-headers", "SPIRV-Headers", "missing",
                       "spirv/unified1/spirv.hpp not found: the vulkan backend needs it", fix=install))
    out.append(_vulkaninfo_finding(p))
    return out


def _vulkaninfo_finding(p: Probe) -> Finding:
    vi = p.which("vulkaninfo")
    return (Finding("vulkaninfo", "vulkaninfo", "ok", f"found ({vi}): lists Vulkan devices and, where the driver has "
                    "VK_EXT_memory_budget, their memory in use (the driver cross-check)", path=vi) if vi else
            Finding("vulkaninfo", "vulkaninfo", "info", "not found (optional: lists Vulkan devices and their memory "
                    "in use for the driver cross-check)", fix=fixes(["vulkan-tools"])))


def _vulkan_devices(p: Probe) -> list[vk.VkInfoDevice]:
    """Every Vulkan device vulkaninfo reports, with its heaps (full report: memory budget where supported)."""
    vi = p.which("vulkaninfo")
    if not vi:
        return []
    rc, out = p.capture([vi])
    if rc != 0 or "GPU" not in out:
        rc, out = p.capture([vi, "--summary"])
    return vk.parse_vulkaninfo(out) if rc == 0 else []


def _amd_gpus(p: Probe) -> list[str]:
    return [f"AMD GPU ({card})" for card, vendor in detect.drm_gpus(p.read, p.listdir) if vendor == "AMD"]


def _rocm(p: Probe, amd: list[str]) -> list[Finding]:
    hipcc = p.which("hipcc")
    out = []
    if hipcc:
        rc, text = p.capture([hipcc, "--version"])
        m = re.search(r"HIP version:\s*(\S+)", text) if rc == 0 else None
        ver = m.group(1) if m else None
        out.append(Finding("rocm", "ROCm (HIP)", "ok", f"hipcc {ver or 'unknown version'} ({hipcc}): builds the rocm "
                           "backend (-DGGML_HIP=ON)", version=ver, path=hipcc))
    elif amd:
        out.append(Finding("rocm", "ROCm (HIP)", "missing", f"hipcc not found: needed to build the rocm backend for "
                           f"{', '.join(amd)} (the vulkan backend runs on AMD GPUs too)", fix=fixes(["rocm"])))
    else:
        out.append(Finding("rocm", "ROCm (HIP)", "info", "hipcc not found (only for AMD GPUs: the rocm backend)"))
    smi = p.which("rocm-smi")
    if smi:
        out.append(Finding("rocm-smi", "rocm-smi", "ok", f"found ({smi}): the memory cross-check on AMD GPUs",
                           path=smi))
    else:
        out.append(Finding("rocm-smi", "rocm-smi", "missing" if amd else "info",
                           "not found: " + ("the memory cross-check on AMD GPUs needs it" if amd
                                            else "only for AMD GPUs (the memory cross-check)"),
                           fix=fixes(["rocm-smi"]) if amd else {}))
    return out


def _metal(p: Probe) -> Finding:
    if p.system != "darwin":
        return Finding("metal", "Metal", "info", "not applicable (macOS only)")
    rc, _ = p.capture(["xcrun", "--find", "metal"])
    where = "the Metal compiler is installed" if rc == 0 else "the Metal compiler (xcrun metal) was not found; " \
        "llama.cpp embeds its shaders and builds without it"
    return Finding("metal", "Metal", "ok", f"macOS {p.machine}: llama.cpp builds Metal by default here; {where}")


def _openblas(p: Probe) -> Finding:
    ok, why = p.openblas()
    if ok:
        return Finding("openblas", "OpenBLAS", "ok", why)
    return Finding("openblas", "OpenBLAS", "missing", "not found: needed for the no-pp-blas build (a build without "
                   "pipeline parallelism)", fix=fixes(["openblas"]))


def examine(p: Probe | None = None) -> Report:
    """Look at the machine through `p` (the real one by default) and say what can be built and run."""
    p = p or Probe()
    mac = ""
    if p.system == "darwin":
        rc, out = p.capture(["sw_vers", "-productVersion"])
        mac = out.strip() if rc == 0 else ""
    osinfo = detect_os(p.system, p.read("/etc/os-release"), mac)
    gpus = list(p.gpus())

    py_v = _version_tuple(p.python)
    python = Finding("python", "Python", "ok" if py_v >= (3, 11) else "old",
                     f"{p.python} ({p.python_path})" + ("" if py_v >= (3, 11) else "; llamalab needs ≥ 3.11"),
                     version=p.python, path=p.python_path)
    cmake = _cmake(p)
    cc = _compiler(p, "cc", "C compiler", "CC", ("cc", "gcc", "clang"))
    cxx = _compiler(p, "cxx", "C++ compiler", "CXX", ("c++", "g++", "clang++"))
    ninja, make = _build_tool(p)
    ccache = _tool(p, "ccache", "ccache", ["ccache"],
                   missing_detail="not found (optional: compiles each llama.cpp file once across variants, versions "
                   "and bisect commits)", recipe="ccache")
    git = _tool(p, "git", "git", ["git"], missing_detail="not found (optional: records the commit of a "
                "--llama-cpp checkout)", recipe="git")
    pkgconf = _tool(p, "pkg-config", "pkg-config", ["pkg-config", "pkgconf"], missing_detail="not found (optional: "
                    "how CMake and llamalab find OpenBLAS)", recipe="pkg-config")
    openblas = _openblas(p)
    nvcc = _nvcc(p)
    driver = _driver(p, gpus, p.system)
    vulkan = _vulkan(p, osinfo)
    amd = _amd_gpus(p)
    rocm = _rocm(p, amd)
    metal = _metal(p)
    tools = [python, cmake, cc, cxx, ninja, make, ccache, git, pkgconf, openblas, nvcc, driver, *vulkan, *rocm, metal]
    if p.system == "darwin":
        # On macOS the CUDA lines only add noise; say once that CUDA does not apply.
        tools = [t if t.key != "nvcc" else Finding("nvcc", "CUDA toolkit", "info", "not applicable on macOS")
                 for t in tools]

    vk_devices = _vulkan_devices(p)
    backends = _backends(p, tools, gpus, osinfo, vk_devices, amd)
    by = {t.key: t for t in tools}
    vk_bad = [k for k in ("vulkan-headers", "glslc", "spirv-headers") if by[k].status in ("missing", "old")]
    vk_gpus = [d.name for d in vk_devices if not d.software]
    if not vk_devices and not p.which("vulkaninfo") and detect.gpu_icds(p.env, p.listdir):
        vk_gpus = [f"{vendor} GPU ({card})" for card, vendor in detect.drm_gpus(p.read, p.listdir)]
    facts = detect.Facts(nvidia_gpus=len(gpus), nvcc=by["nvcc"].status == "ok", vulkan_gpus=tuple(vk_gpus),
                         vulkan_buildable=not vk_bad, vulkan_why_not=", ".join(by[k].title for k in vk_bad),
                         amd_gpus=len(amd), hip=by["rocm"].status == "ok")
    auto, why = detect.auto_backend(facts)
    return Report(os=osinfo, machine=p.machine, tools=tools, gpus=gpus,
                  other_gpus=[_vk_line(d) for d in vk_devices], backends=backends, study_backend=auto,
                  study_backend_reason=why, amd_gpus=amd,
                  vulkan_devices=[{"gpu": d.gpu, "name": d.name, "type": d.device_type, "software": d.software,
                                   "memory_budget": d.has_budget, "device_local_mib": d.device_local_mib()[0]}
                                  for d in vk_devices])


def _vk_line(d: vk.VkInfoDevice) -> str:
    kind = d.device_type.replace("PHYSICAL_DEVICE_TYPE_", "").replace("_", " ").lower()
    size, _ = d.device_local_mib()
    mem = f", {size:,.0f} MiB device-local" if d.heaps else ""
    budget = ("; VK_EXT_memory_budget: yes (driver cross-check)" if d.has_budget else
              "; no VK_EXT_memory_budget (no driver cross-check)") if d.heaps else ""
    cpu = " — a CPU implementation: studies use it only with devices.backend = \"vulkan\"" if d.software else ""
    return f"{d.name} ({kind}{mem}{budget}){cpu}"


def _merge(*fixes_: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Several fixes as one, per family; package installs for the same manager merged into one command."""
    out: dict[str, list[str]] = {}
    for fam in FAMILIES:
        steps: list[str] = []
        pkgs: list[str] = []
        prefix = MANAGERS[fam] + " "
        for fx in fixes_:
            for line in fx.get(fam, []):
                if line.startswith(prefix):
                    pkgs += [x for x in line[len(prefix):].split() if x not in pkgs]
                elif line not in steps:
                    steps.append(line)
        lines = steps + ([prefix + " ".join(pkgs)] if pkgs else [])
        if lines:
            out[fam] = lines
    return out


def _backends(p: Probe, tools: list[Finding], gpus: list[gpu.Gpu], osinfo: OsInfo,
              vk_devices: list[vk.VkInfoDevice] | None = None, amd: list[str] | None = None) -> list[BackendStatus]:
    by = {t.key: t for t in tools}
    bad = {k for k, t in by.items() if t.status in ("missing", "old")}
    base = [k for k in ("cmake", "cc", "cxx", "make") if k in bad]
    out: list[BackendStatus] = []

    def add(name: str, extra: list[str], extra_fix: Mapping[str, Sequence[str]], runnable: bool, run_detail: str,
            note: str = "") -> None:
        missing = tuple(dict.fromkeys(base + extra))
        if missing:
            titles = [by[m].title if m in by else m for m in missing]
            detail = "cannot be built: needs " + ", ".join(titles) + (f" ({note})" if note else "")
            fix = _merge(*[by[m].fix for m in base], extra_fix)
        else:
            detail, fix = "can be built", {}
        out.append(BackendStatus(name, not missing, runnable, f"{detail}; {run_detail}", missing, fix))

    add("cpu", [], {}, True, "runs here: one device (the CPU), so pipeline parallelism never activates")
    add("cpu-rpc", [], {}, True, "runs here: local rpc-servers act as devices (what `llamalab demo` uses)")

    # cuda: nvcc, CMake ≥ 3.18, and an architecture to compile for.
    if p.system == "darwin":
        out.append(BackendStatus("cuda", False, False, "not available on macOS: llama.cpp uses Metal there, and "
                                 "llamalab's cpu and cpu-rpc builds include it (nothing to install)"))
        return _rest(p, by, bad, out, add, vk_devices or [], amd or [])
    extra, fx, note = [], [], ""
    if "nvcc" in bad:
        extra.append("nvcc")
        fx.append(by["nvcc"].fix)
    cm = _version_tuple(by["cmake"].version)
    arch = p.env.get("LLAMALAB_CUDA_ARCH", "native")
    if cm and "cmake" not in bad and (cm < CMAKE_MIN_CUDA or arch == "native" and cm < CMAKE_MIN_NATIVE_ARCH):
        extra.append("cmake")
        fx.append(fixes(["cmake-old"]))
        note = (f"CMake {_fmt_version(cm)} is too old for CUDA builds (≥ {_fmt_version(CMAKE_MIN_CUDA)}; "
                f"≥ {_fmt_version(CMAKE_MIN_NATIVE_ARCH)} to detect the GPU: else set LLAMALAB_CUDA_ARCH)")
    if not gpus and arch == "native" and p.system != "darwin":
        extra.append("LLAMALAB_CUDA_ARCH")
        fx.append(fixes(["cuda-arch"]))
        note = ("no GPU is visible, and llamalab builds for CMAKE_CUDA_ARCHITECTURES=native unless "
                "LLAMALAB_CUDA_ARCH is set; CMake then stops with 'no GPU was detected'")
    if gpus:
        names = ", ".join(f"{g.name} ({g.total_mib} MiB)" for g in gpus)
        run_detail = f"runs here on {len(gpus)} GPU(s): {names}"
        if len(gpus) == 1:
            run_detail += "; a 2-device study splits it in two virtual devices (GGML_CUDA_DEVICES=2)"
    else:
        run_detail = "cannot run here: no NVIDIA GPU with a working driver"
    add("cuda", extra, _merge(*fx), bool(gpus), run_detail, note)
    return _rest(p, by, bad, out, add, vk_devices or [], amd or [])


def _rest(p: Probe, by: dict[str, Finding], bad: set[str], out: list[BackendStatus], add: _Add,
          vk_devices: list[vk.VkInfoDevice], amd: list[str]) -> list[BackendStatus]:
    # vulkan: headers new enough, glslc, SPIRV-Headers; devices from vulkaninfo.
    missing_vk: list[str] = [k for k in ("vulkan-headers", "glslc", "spirv-headers") if k in bad]
    real = [d for d in vk_devices if not d.software]
    soft = [d for d in vk_devices if d.software]
    if real:
        names = ", ".join(d.name for d in real)
        run_detail = (f"runs here on {len(real)} Vulkan GPU(s): {names}"
                      + ("; a 2-device study lists one GPU twice (GGML_VK_VISIBLE_DEVICES=0,0 with -dev "
                         "Vulkan0,Vulkan1)" if len(real) == 1 else ""))
    elif soft:
        run_detail = (f"runs here on {soft[0].name}, Mesa's CPU implementation of Vulkan (lavapipe), with "
                      "devices.backend = \"vulkan\" (auto never picks it): a correctness and memory check, not a speed "
                      "one")
    elif p.which("vulkaninfo"):
        run_detail = "cannot run here: vulkaninfo finds no Vulkan device (install a GPU driver, or Mesa's lavapipe)"
    else:
        run_detail = ("vulkaninfo is not installed, so whether a Vulkan device exists is unknown (package "
                      "vulkan-tools; Mesa's lavapipe, mesa-vulkan-drivers, is a Vulkan device on the CPU)")
    add("vulkan", missing_vk, _merge(*[by[k].fix for k in missing_vk]), bool(vk_devices), run_detail)

    # rocm: hipcc (HIP's clang, hipBLAS, rocBLAS come with it), an AMD GPU to run on.
    hip_missing = ["rocm"] if by["rocm"].status != "ok" else []
    hip_fix = fixes(["rocm"]) if hip_missing else {}
    arch_note = ""
    if not hip_missing and not amd and not p.env.get("LLAMALAB_HIP_ARCH"):
        hip_missing.append("LLAMALAB_HIP_ARCH")
        hip_fix = fixes(["hip-arch"])
        arch_note = "no AMD GPU is visible, so CMake cannot detect the gfx target: set LLAMALAB_HIP_ARCH"
    hip_run = (f"runs here on {', '.join(amd)} (devices ROCm0 …)" if amd
               else "cannot run here: no AMD GPU (/sys/class/drm)")
    add("rocm", hip_missing, hip_fix, bool(amd) and by["rocm"].status == "ok", hip_run, arch_note)

    # no-pp-blas: a build option on the study's backend.
    blas = ["openblas"] if "openblas" in bad else []
    add("no-pp-blas", blas, by["openblas"].fix if blas else {}, not blas,
        "a build, not a device: -DGGML_BLAS=ON -DGGML_BLAS_VENDOR=OpenBLAS on the study's backend turns pipeline "
        "parallelism off" + (" (until then, studies skip this build and say why)" if blas else ""))
    return out


# ---------------------------------------------------------------- text


_MARK = {"ok": "ok", "missing": "MISSING", "old": "TOO OLD", "info": "--"}


def _fix_lines(fix: Mapping[str, Sequence[str]], family: str | None, indent: str, *, others: bool = True
               ) -> list[str]:
    """The detected OS's lines first ("run:"), then (with `others`) each other OS's."""
    lines: list[str] = []
    known = family if family is not None and family in fix else None
    order = ([known] if known is not None else []) + [f for f in FAMILIES if f in fix and f != family]
    if not others and known is not None:
        order = [known]
    for fam in order:
        label = "run: " if fam == family else f"{FAMILY_NAMES[fam]}: "
        for i, cmd in enumerate(fix[fam]):
            lines.append(f"{indent}{label if i == 0 else ' ' * len(label)}{cmd}")
    return lines


def render(rep: Report) -> str:
    fam = rep.os.family
    where = (f"install commands for {FAMILY_NAMES[fam]} first" if fam
             else "OS not recognised: install commands for each supported OS")
    out = [f"llamalab doctor — {rep.os.name}, {rep.machine} ({where})", "", "Tools"]
    width = max(len(t.title) for t in rep.tools)
    indent = " " * (2 + 8 + 1 + width + 2)
    previous: dict[str, list[str]] | None = None
    for t in rep.tools:
        out.append(f"  {_MARK[t.status]:<8} {t.title:<{width}}  {t.detail}")
        if t.status in ("missing", "old") and t.fix:
            if t.fix == previous:
                out.append(f"{indent}(the same command as above installs it)")
            else:
                out += _fix_lines(t.fix, fam, indent)
            previous = t.fix
    out += ["", "GPUs"]
    for g in rep.gpus:
        cc = f", compute capability {g.compute_capability}" if g.compute_capability else ""
        out.append(f"  GPU {g.index}: {g.name}, {g.total_mib} MiB total, {g.used_mib} MiB in use, "
                   f"driver {g.driver or '?'}{cc}")
    if not rep.gpus:
        out.append("  no NVIDIA GPU found (NVML via nvidia-ml-py, then nvidia-smi)")
    for name in rep.other_gpus:
        out.append(f"  Vulkan device: {name}")
    for name in rep.amd_gpus:
        out.append(f"  {name}")
    out += ["", "Backends (what llamalab can build and run here)"]
    bw = max(len(b.name) for b in rep.backends)
    for b in rep.backends:
        build_mark = "build: yes" if b.buildable else "build: NO "
        run_mark = "run: yes" if b.runnable else "run: no "
        out.append(f"  {b.name:<{bw}}  {build_mark}  {run_mark}  {b.detail}")
        if b.fix:
            out += _fix_lines(b.fix, fam, " " * (2 + bw + 2), others=False)
    n = {"cuda": len(rep.gpus), "rocm": len(rep.amd_gpus),
         "vulkan": sum(1 for d in rep.vulkan_devices if not d["software"])}.get(rep.study_backend, 0)
    dev = ("2 local rpc-servers on the CPU" if rep.study_backend == "cpu-rpc"
           else "its one GPU split in two virtual devices" if n == 1
           else "2 GPUs" if n == 2 else f"the first 2 of {n} GPUs")
    out += ["", f"`llamalab run pipeline-parallel` would use devices.backend = {rep.study_backend} here ({dev}): "
                f"{rep.study_backend_reason}. `llamalab demo` always uses cpu-rpc."]
    if fam and any(b.fix for b in rep.backends):
        out.append("Commands for other systems are in the Tools section; `llamalab doctor --json` lists them all.")
    return "\n".join(out) + "\n"

