"""Pure parts of build.py: option normalisation, the copies split, cache keys and CMake argv."""

from pathlib import Path

import pytest

from llamalab.core.errors import BuildError
from llamalab.llamacpp import build


@pytest.mark.parametrize("given, want", [
    pytest.param({"GGML_BLAS": True}, {"GGML_BLAS": "ON"}, id="bool-on"),
    pytest.param({"GGML_BLAS": False}, {"GGML_BLAS": "OFF"}, id="bool-off"),
    pytest.param({"GGML_SCHED_MAX_COPIES": 1}, {"GGML_SCHED_MAX_COPIES": "1"}, id="int"),
    pytest.param({"B": "x", "A": "y"}, {"A": "y", "B": "x"}, id="sorted"),
])
def test_normalize(given, want):
    assert build.normalize(given) == want
    assert list(build.normalize(given)) == list(want)


@pytest.mark.parametrize("opts, rest, copies", [
    pytest.param({}, {}, "4", id="default-is-4"),
    pytest.param({"GGML_SCHED_MAX_COPIES": "1"}, {}, "1", id="copies1"),
    pytest.param({"GGML_SCHED_MAX_COPIES": "2", "GGML_BLAS": "ON"}, {"GGML_BLAS": "ON"}, "2", id="with-other"),
])
def test_split_copies(opts, rest, copies):
    assert build.split_copies(opts) == (rest, copies)


def test_options_key_ignores_order_and_differs_by_backend_and_options():
    a = build.options_key("cpu-rpc", {"A": "1", "B": "2"})
    assert a == build.options_key("cpu-rpc", {"B": "2", "A": "1"})
    assert a != build.options_key("cuda", {"A": "1", "B": "2"})
    assert a != build.options_key("cpu-rpc", {"A": "1"})
    assert a.startswith("cpu-rpc-")


def test_configure_argv_layers_common_backend_source_and_study_options():
    argv = build.cmake_configure_argv(Path("/src"), Path("/b"), "cpu-rpc", {"GGML_BLAS": "ON"},
                                      {"LLAMA_BUILD_NUMBER": "11312"}, generator="Ninja")
    assert argv[:7] == ["cmake", "-S", "/src", "-B", "/b", "-G", "Ninja"]
    for flag in ("-DGGML_RPC=ON", "-DGGML_BLAS=ON", "-DLLAMA_BUILD_NUMBER=11312", "-DLLAMA_BUILD_TESTS=OFF",
                 "-DLLAMA_OPENSSL=OFF", "-DCMAKE_BUILD_TYPE=Release"):
        assert flag in argv
    # a study option overrides a common one
    argv = build.cmake_configure_argv(Path("/s"), Path("/b"), "cpu", {"CMAKE_BUILD_TYPE": "Debug"}, {})
    assert "-DCMAKE_BUILD_TYPE=Debug" in argv and "-DCMAKE_BUILD_TYPE=Release" not in argv


def test_build_argv_names_only_the_targets():
    assert build.cmake_build_argv(Path("/b"), ("ggml-base",), 2) == [
        "cmake", "--build", "/b", "--target", "ggml-base", "-j", "2"]


@pytest.mark.parametrize("line, want", [
    ("[12/226] Building CXX object src/x.o", (12, 226)),
    ("[226/226] Linking CXX executable bin/llama-server", (226, 226)),
    ("-- Configuring done", None),
])
def test_ninja_progress(line, want):
    assert build.ninja_progress(line) == want


def test_unknown_backend_is_a_clear_error(tmp_path):
    from llamalab.llamacpp.source import Source

    with pytest.raises(BuildError, match="unknown backend"):
        build.Builder(source=Source(tmp_path, "dir:x", None, None), backend="quantum", home=tmp_path)


def test_artifact_env_puts_variant_library_first(tmp_path, monkeypatch):
    from llamalab.llamacpp.source import Source

    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/other")
    art = build.BuildArtifact(name="copies1", key="k", source=Source(tmp_path, "dir:x", None, None),
                              backend="cpu-rpc", options={"GGML_SCHED_MAX_COPIES": "1"}, bin_dir=tmp_path / "bin",
                              lib_dir=tmp_path / "v")
    assert art.env() == {"LD_LIBRARY_PATH": f"{tmp_path / 'v'}:/usr/other"}
    assert art.expected_copies == 1
    assert art.binary("ggml-rpc-server") == tmp_path / "bin" / "ggml-rpc-server"


def test_failed_build_names_the_log_and_shows_its_last_lines(tmp_path):
    """A real CMake failure: a source tree whose CMakeLists.txt is broken."""
    from llamalab.llamacpp.source import Source

    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.14)\nproject(x)\n"
                                        "message(FATAL_ERROR \"boom here\")\n")
    b = build.Builder(source=Source(src, "dir:" + str(src), None, None), backend="cpu", home=tmp_path / "home",
                      log=lambda s: None)
    with pytest.raises(BuildError) as e:
        b.build("broken", {})
    msg = str(e.value)
    assert "configure step" in msg and "build.log" in msg and "boom here" in msg
