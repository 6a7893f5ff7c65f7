"""llama.cpp's AMX int8 kernels crash on a CPU with AMX (their tile configuration is on the stack and GCC drops it):
llamalab builds with `-mno-amx-int8` there (llamalab.llamacpp.amx). Real inputs: this VM's /proc/cpuinfo, the pinned
source's `amx/mmq.cpp`, a real CMake configure."""

from __future__ import annotations

import shutil

import pytest

from conftest import FIXTURES
from llamalab.core.errors import BuildError
from llamalab.llamacpp import amx, build
from llamalab.llamacpp import source as source_mod
from llamalab.llamacpp.source import Source

SAPPHIRE_RAPIDS = FIXTURES / "cpuinfo" / "sapphire-rapids-firecracker.txt"


def test_cpu_flags_of_a_real_sapphire_rapids():
    flags = amx.cpu_flags(SAPPHIRE_RAPIDS.read_text())
    assert {"amx_int8", "amx_tile", "avx512_vnni", "avx512f"} <= flags
    assert amx.cpu_flags("processor\t: 0\nvendor_id\t: AuthenticAMD\n") == frozenset()


@pytest.fixture(scope="module")
def pinned_source(llama_home) -> Source:
    return source_mod.pinned(llama_home, log=lambda s: None)


@pytest.mark.network
def test_the_pinned_sources_tile_configuration_is_on_the_stack(pinned_source):
    text = (pinned_source.path / amx.MMQ).read_text()
    assert amx.stack_tile_config(text)
    # the fix llama.cpp's pull request 26954 proposes: the configuration in .rodata, which GCC keeps
    fixed = text.replace("alignas(64) tile_config_t tc = {};", "static alignas(64) const tile_config_t tc = {};")
    assert fixed != text and not amx.stack_tile_config(fixed)


@pytest.mark.parametrize("options, flags, compiles", [
    ({}, {"amx_int8", "avx512f"}, True),                              # GGML_NATIVE is on by default
    ({"GGML_NATIVE": "OFF"}, {"amx_int8"}, False),                    # not native, AMX not named
    ({"GGML_NATIVE": "OFF", "GGML_AMX_INT8": "ON"}, set(), True),     # named: compiled whatever this CPU has
    ({}, {"avx512f", "avx512_vnni"}, False),                          # a CPU without AMX
    ({"CMAKE_CXX_FLAGS": "-O2 -mno-amx-int8"}, {"amx_int8"}, False),  # the user already turned it off
])
def test_which_builds_compile_the_amx_kernels(options, flags, compiles):
    assert amx.compiles_amx_int8(options, frozenset(flags)) is compiles


@pytest.mark.network
def test_the_flag_goes_before_the_users_own(pinned_source):
    flags = amx.cpu_flags(SAPPHIRE_RAPIDS.read_text())
    got = amx.defines(pinned_source.path, {"CMAKE_CXX_FLAGS": "-g"}, flags)
    assert got == {"CMAKE_C_FLAGS": "-mno-amx-int8", "CMAKE_CXX_FLAGS": "-mno-amx-int8 -g"}
    assert amx.defines(pinned_source.path, {}, frozenset({"avx2"})) == {}


def test_a_version_without_amx_kernels_needs_nothing(tmp_path):
    assert amx.defines(tmp_path, {}, frozenset({"amx_int8"})) == {}


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake (apt-get install cmake)")
@pytest.mark.parametrize("cpu, flag", [("sapphire-rapids", True), ("no-amx", False)])
def test_the_builder_configures_with_the_flag_only_on_an_amx_cpu(tmp_path, cpu, flag):
    """A real CMake configure of a tree whose `mmq.cpp` has the pinned source's faulty lines (the test above reads the
    whole real file) and whose CMakeLists.txt stops, printing the C++ flags it was given."""
    src = tmp_path / "src"
    (src / amx.MMQ).parent.mkdir(parents=True)
    (src / amx.MMQ).write_text("inline void ggml_tile_config_init(void) {\n"
                               "    alignas(64) tile_config_t tc = {};\n    _tile_loadconfig(&tc);\n}\n")
    (src / "CMakeLists.txt").write_text('cmake_minimum_required(VERSION 3.14)\nproject(x CXX)\n'
                                        'message(FATAL_ERROR "cxx flags: [${CMAKE_CXX_FLAGS}]")\n')
    flags = amx.cpu_flags(SAPPHIRE_RAPIDS.read_text()) if cpu == "sapphire-rapids" else frozenset({"avx2"})
    lines: list[str] = []
    b = build.Builder(source=Source(src, "dir:" + str(src), None, None), backend="cpu", home=tmp_path / "home",
                      cpu_flags=flags, log=lines.append)
    with pytest.raises(BuildError) as e:
        b.build("amx", {})
    assert ("cxx flags: [-mno-amx-int8]" in str(e.value)) is flag
    assert any("-mno-amx-int8" in line and "26954" in line for line in lines) is flag
