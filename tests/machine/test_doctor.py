"""`llamalab doctor` on fake machines (the Probe seam) and once on this one."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import PurePosixPath

import pytest
from click.testing import CliRunner

from llamalab.cli import cli
from llamalab.machine import doctor
from llamalab.machine.gpu import Gpu
from testpaths import FIXTURES

DEBIAN12 = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
UBUNTU2404 = 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n'

GCC = "gcc (Debian 12.2.0-14) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc.\n"
LINUX_TOOLS = {
    "cmake": "cmake version 3.28.3\n\nCMake suite maintained and supported by Kitware (kitware.com/cmake).\n",
    "cc": GCC, "c++": GCC.replace("gcc", "g++"), "ninja": "1.11.1\n", "make": "GNU Make 4.3\n",
    "git": "git version 2.43.0\n", "pkg-config": "1.8.1\n",
}
NVCC = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.4, V12.4.131\n"


def fake(*, programs: dict[str, str] | None = None, files: dict[str, str] | None = None, gpus=(),
         openblas=(False, "OpenBLAS is not installed"), system="linux", os_release: str | None = DEBIAN12,
         env: dict[str, str] | None = None, machine="x86_64") -> doctor.Probe:
    """A machine that has exactly `programs` (name → --version output) and `files` (path → text)."""
    programs = dict(programs or {})
    files = dict(files or {})
    if os_release is not None:
        files["/etc/os-release"] = os_release

    def which(name: str) -> str | None:
        return f"/usr/bin/{name}" if name in programs else None

    def capture(argv) -> tuple[int, str]:
        name = PurePosixPath(str(argv[0])).name
        if str(argv[0]) in files:  # a program found by path, not on PATH
            return 0, files[str(argv[0])]
        if name in programs:
            return 0, programs[name]
        return 127, f"{name}: not found"

    return doctor.Probe(which=which, capture=capture, read=files.get, gpus=lambda: list(gpus),
                        openblas=lambda: openblas, env=env or {}, system=system, machine=machine,
                        python="3.12.3", python_path="/usr/bin/python3")


def assert_actionable(rep: doctor.Report) -> None:
    """Every missing or too-old line, and every backend that cannot be built, says what to run on this OS."""
    fam = rep.os.family
    for t in rep.tools:
        if t.status in ("missing", "old"):
            assert t.fix, f"{t.key} has no fix"
            if fam:
                assert fam in t.fix, f"{t.key} has no fix for {fam}"
    for b in rep.backends:
        if not b.buildable and b.missing:
            assert b.fix and (fam is None or fam in b.fix), f"backend {b.name} has no fix for {fam}"


def test_bare_debian_machine_says_what_to_install():
    rep = doctor.examine(fake())
    assert rep.os.family == "debian"
    assert rep.tool("cmake").status == "missing"
    assert rep.tool("cmake").fix["debian"] == ["sudo apt-get install -y cmake"]
    assert rep.tool("cmake").fix["fedora"] == ["sudo dnf install -y cmake"]
    assert rep.tool("cmake").fix["arch"] == ["sudo pacman -S --needed cmake"]
    assert rep.tool("cmake").fix["macos"] == ["brew install cmake"]
    for name in ("cpu", "cpu-rpc", "cuda", "vulkan", "no-pp-blas"):
        assert not rep.backend(name).buildable, name
    # One command installs everything the cpu build needs.
    assert rep.backend("cpu").fix["debian"] == ["sudo apt-get install -y cmake g++ make ninja-build"]
    assert rep.backend("no-pp-blas").fix["debian"][-1].endswith("libopenblas-dev")
    # Debian 12's Vulkan packages are too old: llamalab's private toolchain (or the SDK) is the fix here,
    # packages elsewhere.
    vk = rep.tool("vulkan-headers").fix
    assert vk["debian"][0].startswith("bash scripts/vulkan-toolchain.sh") and "LunarG" in vk["debian"][0]
    assert vk["fedora"] == ["sudo dnf install -y vulkan-headers vulkan-loader-devel glslc spirv-headers-devel"]
    assert rep.study_backend == "cpu-rpc"
    assert_actionable(rep)
    text = doctor.render(rep)
    assert "install commands for Debian/Ubuntu first" in text
    assert "run: sudo apt-get install -y cmake\n" in text
    # The detected OS's command comes before the others.
    assert text.index("run: sudo apt-get install -y cmake") < text.index("Fedora: sudo dnf install -y cmake")


def test_cuda_machine_builds_and_runs_cuda():
    gpus = [Gpu(0, "NVIDIA GeForce RTX 4090", 24564, 512, driver="570.86.15", compute_capability="8.9"),
            Gpu(1, "NVIDIA GeForce RTX 3090", 24576, 300, driver="570.86.15", compute_capability="8.6")]
    rep = doctor.examine(fake(programs={**LINUX_TOOLS, "nvcc": NVCC, "nvidia-smi": ""}, gpus=gpus,
                              os_release=UBUNTU2404, openblas=(True, "pkg-config finds openblas")))
    assert rep.tool("nvcc").status == "ok" and rep.tool("nvcc").version == "12.4"
    assert rep.tool("nvidia-driver").status == "ok" and rep.tool("nvidia-driver").version == "570.86.15"
    cuda = rep.backend("cuda")
    assert cuda.buildable and cuda.runnable
    assert "2 GPU(s)" in cuda.detail and "RTX 4090 (24564 MiB)" in cuda.detail
    assert rep.backend("no-pp-blas").buildable
    assert rep.study_backend == "cuda"
    # Ubuntu 24.04's own packages are new enough for Vulkan: no SDK needed.
    assert rep.tool("vulkan-headers").fix["debian"] == ["sudo apt-get install -y libvulkan-dev glslc spirv-headers"]
    assert_actionable(rep)
    text = doctor.render(rep)
    assert "GPU 0: NVIDIA GeForce RTX 4090, 24564 MiB total, 512 MiB in use, driver 570.86.15" in text
    assert "devices.backend = cuda here (2 GPUs)" in text


def test_cuda_toolkit_without_gpu_needs_an_architecture():
    rep = doctor.examine(fake(programs={**LINUX_TOOLS, "nvcc": NVCC}))
    cuda = rep.backend("cuda")
    assert not cuda.buildable and not cuda.runnable
    assert "LLAMALAB_CUDA_ARCH" in cuda.missing
    assert cuda.fix["debian"][0].startswith("export LLAMALAB_CUDA_ARCH=")
    rep = doctor.examine(fake(programs={**LINUX_TOOLS, "nvcc": NVCC}, env={"LLAMALAB_CUDA_ARCH": "89"}))
    assert rep.backend("cuda").buildable and not rep.backend("cuda").runnable


def test_nvcc_installed_but_not_on_path():
    rep = doctor.examine(fake(programs=LINUX_TOOLS, files={"/usr/local/cuda/bin/nvcc": NVCC}))
    t = rep.tool("nvcc")
    assert t.status == "missing" and t.path == "/usr/local/cuda/bin/nvcc" and t.version == "12.4"
    assert t.fix["debian"][0].startswith("export PATH=/usr/local/cuda/bin:$PATH")


def test_mac():
    clang = "Apple clang version 16.0.0 (clang-1600.0.26.6)\nTarget: arm64-apple-darwin24.3.0\n"
    rep = doctor.examine(fake(
        programs={"cmake": "cmake version 3.31.6\n", "cc": clang, "c++": clang, "ninja": "1.12.1\n",
                  "make": "GNU Make 3.81\n", "git": "git version 2.39.5 (Apple Git-154)\n", "xcrun": "",
                  "sw_vers": "15.3.1\n"},
        system="darwin", os_release=None, machine="arm64"))
    assert rep.os.family == "macos" and rep.os.name == "macOS 15.3.1"
    assert rep.tool("metal").status == "ok"
    assert rep.tool("nvcc").status == "info" and rep.tool("nvidia-driver").status == "info"
    assert not rep.backend("cuda").buildable and "macOS" in rep.backend("cuda").detail
    assert rep.backend("cpu-rpc").buildable
    assert rep.tool("openblas").fix["macos"] == ["brew install openblas"]
    assert rep.tool("ccache").fix["macos"] == ["brew install ccache"]
    assert_actionable(rep)
    text = doctor.render(rep)
    assert "install commands for macOS first" in text
    assert "run: brew install openblas" in text


def test_old_vulkan_headers_and_old_cmake():
    rep = doctor.examine(fake(
        programs={**LINUX_TOOLS, "cmake": "cmake version 3.10.2\n", "glslc": "shaderc v2023.2\n"},
        files={"/usr/include/vulkan/vulkan_core.h": "#define VK_HEADER_VERSION_COMPLETE x\n"
                                                    "#define VK_HEADER_VERSION 239\n",
               "/usr/include/spirv/unified1/spirv.hpp": "// spirv\n"}))
    vk = rep.tool("vulkan-headers")
    assert vk.status == "old" and vk.version == "239" and "LunarG" in vk.fix["debian"][0]
    assert rep.tool("glslc").status == "ok" and rep.tool("spirv-headers").status == "ok"
    assert rep.tool("cmake").status == "old" and "pip install --upgrade cmake" in rep.tool("cmake").fix["debian"][0]
    assert not rep.backend("cpu").buildable
    assert_actionable(rep)


def test_vulkan_sdk_env_is_searched_first():
    rep = doctor.examine(fake(
        programs={**LINUX_TOOLS, "glslc": "shaderc v2025.2\n"}, env={"VULKAN_SDK": "/opt/vk/x86_64"},
        files={"/opt/vk/x86_64/include/vulkan/vulkan_core.h": "#define VK_HEADER_VERSION 321\n",
               "/usr/include/vulkan/vulkan_core.h": "#define VK_HEADER_VERSION 239\n",
               "/opt/vk/x86_64/include/spirv/unified1/spirv.hpp": ""}))
    assert rep.tool("vulkan-headers").status == "ok" and rep.tool("vulkan-headers").version == "321"
    assert rep.backend("vulkan").buildable
    assert not rep.backend("vulkan").runnable  # no vulkaninfo here: whether a Vulkan device exists is unknown
    assert "vulkan-tools" in rep.backend("vulkan").detail


def test_make_without_ninja_and_neither():
    rep = doctor.examine(fake(programs={k: v for k, v in LINUX_TOOLS.items() if k != "ninja"}))
    assert rep.tool("make").status == "ok" and rep.tool("ninja").status == "missing"
    assert rep.backend("cpu").buildable
    rep = doctor.examine(fake(programs={k: v for k, v in LINUX_TOOLS.items() if k not in ("ninja", "make")}))
    assert rep.tool("make").status == "missing" and not rep.backend("cpu").buildable


def test_compilers_are_named_by_their_version_line():
    rep = doctor.examine(fake(programs=LINUX_TOOLS))
    cc, cxx = rep.tool("cc"), rep.tool("cxx")
    assert (cc.status, cc.version, cc.path) == ("ok", "gcc (Debian 12.2.0-14) 12.2.0", "/usr/bin/cc")
    assert (cxx.status, cxx.version, cxx.path) == ("ok", "g++ (Debian 12.2.0-14) 12.2.0", "/usr/bin/c++")
    assert cc.detail == "gcc (Debian 12.2.0-14) 12.2.0 (/usr/bin/cc, as cc)"


def test_cc_from_environment():
    rep = doctor.examine(fake(programs={**LINUX_TOOLS, "clang-18": "Ubuntu clang version 18.1.3\n"},
                              env={"CC": "clang-18", "CXX": "clang++-18"}))
    assert rep.tool("cc").status == "ok" and "as $CC" in rep.tool("cc").detail
    assert rep.tool("cxx").status == "missing" and "$CXX=clang++-18" in rep.tool("cxx").detail


@pytest.mark.parametrize("text, family, ident", [
    pytest.param(DEBIAN12, "debian", "debian", id="debian"),
    pytest.param(UBUNTU2404, "debian", "ubuntu", id="ubuntu"),
    pytest.param('ID=linuxmint\nID_LIKE="ubuntu debian"\n', "debian", "linuxmint", id="mint"),
    pytest.param('ID=fedora\nVERSION_ID=41\n', "fedora", "fedora", id="fedora"),
    pytest.param('ID="rocky"\nID_LIKE="rhel centos fedora"\n', "fedora", "rocky", id="rocky"),
    pytest.param('ID=arch\n', "arch", "arch", id="arch"),
    pytest.param('ID=manjaro\nID_LIKE=arch\n', "arch", "manjaro", id="manjaro"),
    pytest.param('ID=opensuse-tumbleweed\nID_LIKE="opensuse suse"\n', None, "opensuse-tumbleweed", id="unknown"),
    pytest.param(None, None, "", id="no-os-release"),
])
def test_detect_os(text, family, ident):
    info = doctor.detect_os("linux", text)
    assert (info.family, info.id) == (family, ident)


@pytest.mark.parametrize("ident, version, too_old", [
    ("debian", "12", True), ("debian", "13", False), ("ubuntu", "22.04", True), ("ubuntu", "24.04", False),
    ("fedora", "41", False),
])
def test_vulkan_packages_too_old(ident, version, too_old):
    assert doctor.OsInfo("x", "x", ident, version).vulkan_packages_too_old is too_old


def test_unknown_os_lists_every_family():
    rep = doctor.examine(fake(os_release='ID=gentoo\n'))
    text = doctor.render(rep)
    assert "OS not recognised" in text
    assert "Debian/Ubuntu: sudo apt-get install -y cmake" in text and "macOS: brew install cmake" in text


def _first_line_of(argv: list[str]) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return next(line.strip() for line in out.splitlines() if line.strip())


def test_this_machine():
    """The real probe on this machine (and CI's), which has CMake and a C and C++ compiler: each compiler is the
    one on PATH, with the version line it prints itself."""
    rep = doctor.examine()
    assert rep.tool("cmake").status == "ok"
    for key, name in (("cc", "cc"), ("cxx", "c++")):
        path = shutil.which(name)
        assert path, f"this machine has no {name} on PATH"
        t = rep.tool(key)
        assert (t.status, t.path, t.version) == ("ok", path, _first_line_of([path, "--version"]))
    assert rep.backend("cpu-rpc").buildable
    json.dumps(rep.to_json())
    assert "Backends" in doctor.render(rep)


def test_cli_json():
    res = CliRunner().invoke(cli, ["doctor", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert {b["name"] for b in doc["backends"]} == {"cpu", "cpu-rpc", "cuda", "vulkan", "rocm", "no-pp-blas"}
    assert doc["study_backend"] in ("cpu-rpc", "cuda", "vulkan", "rocm") and doc["study_backend_reason"]
    assert any(t["key"] == "cmake" and t["status"] == "ok" for t in doc["tools"])


LAVAPIPE = (FIXTURES / "vulkaninfo" / "lavapipe-mesa22.3.6-debian12.txt").read_text()
AMD_HEAPS = (FIXTURES / "vulkaninfo" / "amd-8gb-heaps-budget.txt").read_text()
TOOLCHAIN = "/home/u/.cache/llamalab/toolchains/vulkan"
PREFIX_FILES = {f"{TOOLCHAIN}/toolchain.json": '{"recipe": 2}',
                f"{TOOLCHAIN}/root/usr/include/vulkan/vulkan_core.h": "#define VK_HEADER_VERSION 309\n",
                f"{TOOLCHAIN}/root/usr/include/spirv/unified1/spirv.hpp": ""}


def test_lavapipe_machine_with_llamalabs_toolchain():
    """Debian 12 with the private prefix and lavapipe: vulkan builds and runs (explicitly), auto stays cpu-rpc."""
    rep = doctor.examine(fake(programs={**LINUX_TOOLS, "vulkaninfo": LAVAPIPE},
                              files={**PREFIX_FILES, f"{TOOLCHAIN}/bin/glslc": "shaderc 2023.2-1\n"},
                              env={"LLAMALAB_HOME": "/home/u/.cache/llamalab"}))
    assert rep.tool("vulkan-headers").status == "ok" and "309" in rep.tool("vulkan-headers").detail
    assert rep.tool("glslc").status == "ok" and rep.tool("glslc").path == f"{TOOLCHAIN}/bin/glslc"
    vk = rep.backend("vulkan")
    assert vk.buildable and vk.runnable and "lavapipe" in vk.detail and "auto never picks it" in vk.detail
    assert rep.study_backend == "cpu-rpc"
    (line,) = rep.other_gpus
    assert line.startswith("llvmpipe (LLVM 15.0.6, 256 bits) (cpu, 2,048 MiB device-local; no VK_EXT_memory_budget")
    assert rep.vulkan_devices[0]["software"] is True and rep.vulkan_devices[0]["memory_budget"] is False
    assert_actionable(rep)


def test_amd_machine_picks_vulkan_and_says_what_rocm_needs():
    files = {"/sys/class/drm/card0/device/vendor": "0x1002\n", "/sys/class/drm/card0/device/class": "0x030000\n",
             "/usr/include/vulkan/vulkan_core.h": "#define VK_HEADER_VERSION 275\n",
             "/usr/include/spirv/unified1/spirv.hpp": ""}
    p = fake(programs={**LINUX_TOOLS, "vulkaninfo": AMD_HEAPS, "glslc": "shaderc v2023.8\n"}, files=files,
             os_release=UBUNTU2404)
    p.listdir = lambda d: ["card0", "renderD128"] if d == "/sys/class/drm" else []
    rep = doctor.examine(p)
    assert rep.study_backend == "vulkan" and "AMD GPU (name not in the post)" in rep.study_backend_reason
    assert rep.backend("vulkan").runnable and rep.backend("vulkan").buildable
    assert rep.amd_gpus == ["AMD GPU (card0)"]
    assert rep.tool("rocm").status == "missing" and "hipcc" in rep.tool("rocm").fix["debian"][-1]
    assert rep.tool("rocm-smi").status == "missing"
    rocm = rep.backend("rocm")
    assert not rocm.buildable and not rocm.runnable
    assert "VK_EXT_memory_budget: yes" in rep.other_gpus[0]
    text = doctor.render(rep)
    assert "devices.backend = vulkan here (its one GPU split in two virtual devices)" in text
    assert_actionable(rep)


def test_rocm_machine_builds_hip():
    hip = "HIP version: 6.4.43482-0f2d60242\nAMD clang version 19.0.0git\n"
    files = {"/sys/class/drm/card1/device/vendor": "0x1002\n", "/sys/class/drm/card1/device/class": "0x030000\n"}
    p = fake(programs={**LINUX_TOOLS, "hipcc": hip, "rocm-smi": ""}, files=files, os_release=UBUNTU2404)
    p.listdir = lambda d: ["card1"] if d == "/sys/class/drm" else []
    rep = doctor.examine(p)
    assert rep.tool("rocm").status == "ok" and rep.tool("rocm").version == "6.4.43482-0f2d60242"
    assert rep.backend("rocm").buildable and rep.backend("rocm").runnable
    assert rep.study_backend == "rocm"  # no Vulkan toolchain here
    # hipcc without an AMD GPU: the gfx target must be named
    rep = doctor.examine(fake(programs={**LINUX_TOOLS, "hipcc": hip}))
    assert not rep.backend("rocm").buildable and "LLAMALAB_HIP_ARCH" in rep.backend("rocm").missing
