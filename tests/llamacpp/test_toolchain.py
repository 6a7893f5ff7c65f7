"""Vulkan and ROCm build setup: the toolchain prefix as CMake definitions, HIP's environment, the CMake argv of
each backend, and `devices.backend = "auto"` on machines with each kind of GPU."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from llamalab.llamacpp import build, toolchain
from llamalab.machine import detect
from llamalab.setup import prepare as session
from testpaths import ROOT

SCRIPT = ROOT / "scripts" / "vulkan-toolchain.sh"


def test_prefix_defines_point_cmake_at_the_unpacked_packages(tmp_path):
    d = toolchain.vulkan_defines_for(tmp_path / "vk", "x86_64")
    assert d == {
        "Vulkan_INCLUDE_DIR": f"{tmp_path}/vk/root/usr/include",
        "Vulkan_LIBRARY": f"{tmp_path}/vk/root/usr/lib/x86_64-linux-gnu/libvulkan.so",
        "Vulkan_GLSLC_EXECUTABLE": f"{tmp_path}/vk/bin/glslc",
        "CMAKE_PREFIX_PATH": f"{tmp_path}/vk/root/usr",  # SPIRV-Headers' CMake package
    }
    libvulkan = toolchain.vulkan_defines_for(tmp_path, "aarch64")["Vulkan_LIBRARY"]
    assert libvulkan.endswith("aarch64-linux-gnu/libvulkan.so")
    # an incomplete prefix adds nothing: CMake looks in the system
    assert toolchain.vulkan_defines(tmp_path, {"LLAMALAB_VULKAN_PREFIX": str(tmp_path / "vk")}) == {}


def _fake_prefix(prefix: Path) -> None:
    root = prefix / "root" / "usr"
    (root / "include" / "vulkan").mkdir(parents=True)
    (root / "include" / "vulkan" / "vulkan_core.h").write_text("#define VK_HEADER_VERSION 309\n")
    (root / "include" / "spirv" / "unified1").mkdir(parents=True)
    (root / "include" / "spirv" / "unified1" / "spirv.hpp").write_text("")
    lib = root / "lib" / toolchain._TRIPLETS.get(__import__("platform").machine().lower(), "x86_64-linux-gnu")
    lib.mkdir(parents=True)
    (lib / "libvulkan.so").write_text("")
    (prefix / "bin").mkdir()
    (prefix / "bin" / "glslc").write_text("#!/bin/sh\n")
    (prefix / "bin" / "glslc").chmod(0o755)
    (prefix / "toolchain.json").write_text(json.dumps({"recipe": 2, "vk_header_version": 309}))


def test_a_complete_prefix_is_used_by_vulkan_builds(tmp_path):
    _fake_prefix(tmp_path / "toolchains" / "vulkan")
    defines, env = session.build_setup("vulkan", tmp_path)
    assert defines["Vulkan_INCLUDE_DIR"] == f"{tmp_path}/toolchains/vulkan/root/usr/include" and env == {}
    argv = build.cmake_configure_argv(Path("/s"), Path("/b"), "vulkan", {}, defines)
    for flag in ("-DGGML_VULKAN=ON", "-DGGML_RPC=ON",
                 f"-DVulkan_GLSLC_EXECUTABLE={tmp_path}/toolchains/vulkan/bin/glslc",
                 f"-DCMAKE_PREFIX_PATH={tmp_path}/toolchains/vulkan/root/usr"):
        assert flag in argv
    assert toolchain.vulkan_prefix_info(tmp_path / "toolchains" / "vulkan")["vk_header_version"] == 309
    ok, why = detect.vulkan_toolchain(tmp_path, {}, which=lambda n: None, read=lambda p: None)
    assert ok and "toolchain prefix" in why


def test_copies_variant_of_a_vulkan_build_is_a_ggml_base_rebuild(tmp_path):
    """The copies variant's configure has the same Vulkan definitions and only GGML_SCHED_MAX_COPIES differs."""
    _fake_prefix(tmp_path / "toolchains" / "vulkan")
    defines, _ = session.build_setup("vulkan", tmp_path)
    base = build.cmake_configure_argv(Path("/s"), Path("/b"), "vulkan", {}, defines)
    var = build.cmake_configure_argv(Path("/s"), Path("/v"), "vulkan", {"GGML_SCHED_MAX_COPIES": "1"}, defines)
    assert [a for a in var if a not in base] == ["/v", "-DGGML_SCHED_MAX_COPIES=1"]


def test_rocm_cmake_and_environment():
    argv = build.cmake_configure_argv(Path("/s"), Path("/b"), "rocm", {}, toolchain.hip_defines(
        {"LLAMALAB_HIP_ARCH": "gfx1030,gfx1100"}))
    assert "-DGGML_HIP=ON" in argv and "-DGPU_TARGETS=gfx1030;gfx1100" in argv and "-DGGML_RPC=ON" in argv
    assert toolchain.hip_defines({}) == {}

    def capture(argv):
        return {"-l": (0, "/opt/rocm-6.4.1/lib/llvm/bin\n"), "-R": (0, "/opt/rocm-6.4.1\n")}[argv[1]]

    env = toolchain.hip_env(which=lambda n: f"/opt/rocm/bin/{n}", capture=capture, env={})
    assert env == {"HIPCXX": "/opt/rocm-6.4.1/lib/llvm/bin/clang", "HIP_PATH": "/opt/rocm-6.4.1"}
    # the user's own choice stands; no hipconfig: nothing
    assert toolchain.hip_env(which=lambda n: "/x/hipconfig", capture=capture,
                             env={"HIPCXX": "/c", "HIP_PATH": "/p"}) == {}
    assert toolchain.hip_env(which=lambda n: None, capture=capture, env={}) == {}


def test_builder_passes_the_build_environment(tmp_path, monkeypatch):
    """HIP's HIPCXX/HIP_PATH reach CMake: a fake `cmake` on PATH records its environment."""
    from llamalab.llamacpp.source import Source

    bindir = tmp_path / "bin"
    bindir.mkdir()
    rec = tmp_path / "env.txt"
    (bindir / "cmake").write_text(f"#!/bin/sh\necho \"$HIPCXX $HIP_PATH\" >> {rec}\nexit 1\n")
    (bindir / "cmake").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    src = Source(path=tmp_path, origin="dir:x", build_number=1, commit="0" * 40)
    b = build.Builder(source=src, backend="rocm", home=tmp_path, jobs=1, build_env={"HIPCXX": "/r/clang",
                                                                                  "HIP_PATH": "/r"}, log=lambda m: None)
    with pytest.raises(build.BuildError):
        b.build("x", {})
    assert rec.read_text().split("\n")[0] == "/r/clang /r"


F = detect.Facts


@pytest.mark.parametrize("facts, remotes, want", [
    pytest.param(F(nvidia_gpus=1, nvcc=True), False, "cuda", id="nvidia"),
    pytest.param(F(nvidia_gpus=1, nvcc=False, vulkan_gpus=("NVIDIA H200",), vulkan_buildable=True), False, "vulkan",
                 id="nvidia-no-nvcc-vulkan"),
    pytest.param(F(nvidia_gpus=1, nvcc=False), False, "cuda", id="nvidia-nothing-buildable"),
    pytest.param(F(vulkan_gpus=("AMD Radeon RX 6800 XT (RADV NAVI21)", "AMD Radeon RX 6700 XT (RADV NAVI22)"),
                   vulkan_buildable=True, amd_gpus=2, hip=True), False, "vulkan", id="amd-vulkan-first"),
    pytest.param(F(vulkan_gpus=("AMD Radeon RX 7900 XTX (RADV NAVI31)",), vulkan_buildable=False,
                   vulkan_why_not="glslc", amd_gpus=1, hip=True), False, "rocm", id="amd-rocm-without-vulkan"),
    pytest.param(F(vulkan_gpus=("Intel(R) Arc(tm) A770 Graphics (DG2)",), vulkan_buildable=True), False, "vulkan",
                 id="intel"),
    pytest.param(F(vulkan_gpus=(), vulkan_buildable=True), False, "cpu-rpc", id="lavapipe-only"),
    pytest.param(F(), True, "rpc", id="remotes"),
])
def test_auto_backend(facts, remotes, want):
    assert detect.auto_backend(facts, remotes)[0] == want


def test_auto_names_a_gpu_it_cannot_build_for():
    got, why = detect.auto_backend(F(vulkan_gpus=("AMD Radeon RX 6800 XT",), vulkan_buildable=False,
                                     vulkan_why_not="Vulkan headers newer than 1.x.239, glslc"))
    assert got == "cpu-rpc"
    assert "AMD Radeon RX 6800 XT" in why and "glslc" in why and "vulkan-toolchain.sh" in why


def test_facts_from_a_fake_amd_machine(tmp_path):
    files = {"/sys/class/drm/card0/device/vendor": "0x1002\n", "/sys/class/drm/card0/device/class": "0x030000\n",
             "/sys/class/drm/card1/device/vendor": "0x1002\n", "/sys/class/drm/card1/device/class": "0x038000\n",
             "/usr/include/vulkan/vulkan_core.h": "#define VK_HEADER_VERSION 275\n",
             "/usr/include/spirv/unified1/spirv.hpp": ""}
    dirs = {"/sys/class/drm": ["card0", "card0-DP-1", "card1", "renderD128"],
            "/usr/share/vulkan/icd.d": ["radeon_icd.x86_64.json", "lvp_icd.x86_64.json"]}
    f = detect.facts(tmp_path, {}, which=lambda n: "/usr/bin/glslc" if n == "glslc" else None, nvidia=lambda: [],
                     read=files.get, listdir=lambda d: dirs.get(d, []), exists=lambda p: False)
    assert f.amd_gpus == 2 and f.vulkan_gpus == ("AMD GPU (card0)", "AMD GPU (card1)") and f.vulkan_buildable
    assert detect.auto_backend(f)[0] == "vulkan"
    # only lavapipe's manifest: no Vulkan GPU
    dirs["/usr/share/vulkan/icd.d"] = ["lvp_icd.x86_64.json"]
    f = detect.facts(tmp_path, {}, which=lambda n: None, nvidia=lambda: [], read=files.get,
                     listdir=lambda d: dirs.get(d, []), exists=lambda p: False)
    assert f.vulkan_gpus == () and not f.vulkan_buildable and "glslc" in f.vulkan_why_not


def test_script_check_and_help():
    assert subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True).stdout.startswith("A Vulkan")
    done = subprocess.run(["bash", str(SCRIPT), "--check"], env={"PATH": "/usr/bin:/bin",
                                                                "LLAMALAB_VULKAN_PREFIX": "/nonexistent/vk"})
    assert done.returncode == 1
    bad = subprocess.run(["bash", str(SCRIPT), "--frob"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown argument" in bad.stderr
