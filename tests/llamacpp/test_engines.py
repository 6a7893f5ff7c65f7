"""The two engines (llamacpp/engines.py) and what each llama.cpp module does per engine: telling binaries apart by
their own --version, ik_llama.cpp's flags and help, its source copy with the missing build-info script, its
-ts counting the CPU first, and the kernel cut applied only where no configuration needs the kernels."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llamalab.llamacpp import binaries, engines, flags, iksource, server, source
from llamalab.llamacpp.ccache import SOURCE_LINK
from testpaths import FIXTURES

IK = engines.IK_LLAMA_CPP
LC = engines.LLAMA_CPP
IK_HELP = (FIXTURES / "ik" / "llama-server--help.txt").read_text()

# what each engine's llama-server --version prints (ik_llama.cpp from ik-llama-cpp-python 0.1.5; llama.cpp b11312)
IK_VERSION = "version: 0 (unknown)\nbuilt with cc (Debian 12.2.0-14+deb12u1) 12.2.0 for x86_64-linux-gnu\n"
LC_VERSION = "version: 0.5.0-dev (build 11312, commit 0c1e570)\nbuilt with GNU 12.2.0 for Linux x86_64\n"


@pytest.mark.parametrize("text, want", [
    pytest.param(LC_VERSION, LC, id="llama.cpp-2026"),
    pytest.param(IK_VERSION, None, id="ik-cannot-tell"),
    pytest.param("version: 7083 (2376b7758)\nbuilt with cc (Ubuntu 11.4.0) 11.4.0 for x86_64-linux-gnu\n", None,
                 id="llama.cpp-2025-cannot-tell"),
])
def test_the_version_line_tells_llama_cpp_of_2026_only(text, want):
    assert engines.engine_of_version(text) == want


@pytest.mark.parametrize("rc, out, want", [
    (0, IK_VERSION, IK),
    (1, "error: invalid argument: -rtr\n", LC),  # llama.cpp b11312, as it answered on this machine
    (0, "", LC),
])
def test_the_rtr_probe(rc, out, want):
    assert engines.engine_of_probe(rc, out) == want


def _exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def _fake_server(folder: Path, version: str, knows_rtr: bool) -> Path:
    """A llama-server that answers --version as the real one does, and `-rtr --version` as its engine does."""
    folder.mkdir(parents=True, exist_ok=True)
    rtr = f'printf %s "{version}" >&2; exit 0' if knows_rtr else 'echo "error: invalid argument: -rtr" >&2; exit 1'
    script = (f'#!/bin/sh\ncase "$1" in\n  --version) printf %s "{version}" >&2; exit 0;;\n'
              f'  -rtr) {rtr};;\n  *) exit 1;;\nesac\n')
    return _exe(folder / "llama-server", script)


@pytest.mark.parametrize("version, knows_rtr, want", [
    pytest.param(IK_VERSION, True, IK, id="ik_llama.cpp"),
    pytest.param("version: 7083 (2376b7758)\nbuilt with cc (Ubuntu 11.4.0) 11.4.0 for x86_64-linux-gnu\n", False,
                 LC, id="llama.cpp-2025"),
    pytest.param(LC_VERSION, False, LC, id="llama.cpp-2026"),
])
def test_given_binaries_are_told_apart_by_their_own_version_output(tmp_path, version, knows_rtr, want):
    """Not by the folder's name: an ik_llama.cpp folder named llama.cpp is ik_llama.cpp's."""
    folder = tmp_path / "llama.cpp-release"
    _fake_server(folder, version, knows_rtr)
    if want == IK:
        _exe(folder / "rpc-server", "#!/bin/sh\nexit 0\n")
    b = binaries.probe(folder)
    assert b.engine == want
    assert b.source().engine == want and binaries.artifact(b, "x", "cpu-rpc").engine == want
    if want == IK:
        assert b.has("ggml-rpc-server") and b.path("ggml-rpc-server").name == "rpc-server"
        assert b.devices_text == "" and b.as_dict()["engine"] == IK  # ik has no --list-devices: not asked
        assert b.describe().startswith("ik_llama.cpp ")


def test_a_source_folder_is_ik_llama_cpp_by_its_own_kernels(tmp_path):
    lc, ik = tmp_path / "lc", tmp_path / "llama.cpp"  # the folder's name says nothing
    for d, server_dir in ((lc, "tools/server"), (ik, "examples/server")):
        for f in ("include", "ggml/include", server_dir):
            (d / f).mkdir(parents=True)
        (d / "CMakeLists.txt").write_text("")
        (d / "include/llama.h").write_text("")
        (d / "ggml/include/ggml.h").write_text("")
    (ik / "ggml/src/iqk").mkdir(parents=True)
    assert source.from_dir(lc).engine == LC
    got = source.from_dir(ik)
    assert got.engine == IK and got.describe().startswith("ik_llama.cpp unknown")


def test_the_ik_pin_is_its_pypi_sdist():
    pin = source.IK_LLAMA_CPP_015
    assert pin.spec == "pypi:ik-llama-cpp-python==0.1.5" and pin.subdir == "vendor/ik_llama.cpp"
    assert pin.sha256 == "33c67eb99e4dcab5e611050433243815709b8b3067753f9ce18375013cf002ad"
    assert pin.build_number is None and pin.engine == IK and source.DEFAULT_PIN[IK] is pin
    from llamalab.llamacpp import sourceref
    assert source.pin_for(sourceref.parse("pypi:ik-llama-cpp-python==0.1.5")) is pin
    src = source.Source(path=Path("/x"), origin=pin.spec, build_number=None, commit=None, engine=IK,
                        release=pin.release)
    assert src.version == "ik-0.1.5" and src.key.startswith("ik-0.1.5-") and src.cmake_defines() == {}
    assert src.as_dict()["engine"] == IK


# ---------------------------------------------------------------- the tree's own copy of the source

def _ik_tree(root: Path) -> Path:
    (root / "common").mkdir(parents=True)
    (root / "cmake").mkdir()
    (root / "CMakeLists.txt").write_text("project(llama.cpp)\n")
    (root / "common/build-info.cpp.in").write_text("int LLAMA_BUILD_NUMBER = @BUILD_NUMBER@;\n")
    (root / "cmake/build-info.cmake").write_text("set(BUILD_NUMBER 0)\n")
    return root


def test_each_tree_gets_a_copy_with_the_missing_script_and_the_source_is_untouched(tmp_path):
    src = _ik_tree(tmp_path / "src")
    before = sorted(str(p.relative_to(src)) for p in src.rglob("*"))
    copy = iksource.tree_copy(tmp_path / "tree", src)
    assert copy == tmp_path / "tree" / SOURCE_LINK and copy.is_dir() and not copy.is_symlink()
    script = copy / iksource.BUILD_INFO_SCRIPT
    assert script.read_text() == iksource.SCRIPT_TEXT and "configure_file" in script.read_text()
    assert sorted(str(p.relative_to(src)) for p in src.rglob("*")) == before  # nothing written into the source
    assert os.path.samefile(copy / "CMakeLists.txt", src / "CMakeLists.txt")  # linked, not duplicated


def test_a_refresh_relinks_only_what_changed_and_keeps_what_the_build_wrote(tmp_path):
    src = _ik_tree(tmp_path / "src")
    copy = iksource.tree_copy(tmp_path / "tree", src)
    (copy / iksource.BUILD_INFO_OUTPUT).write_text("int LLAMA_BUILD_NUMBER = 0;\n")  # what the build writes
    kept = (copy / "CMakeLists.txt").stat().st_mtime_ns
    (src / "cmake/build-info.cmake").unlink()
    (src / "cmake/build-info.cmake").write_text("set(BUILD_NUMBER 1)\n")  # a new file (an editor's save)
    (src / "new.c").write_text("int x;\n")
    (src / "CMakeLists.txt").rename(src / "CMakeLists.old")
    iksource.tree_copy(tmp_path / "tree", src)
    assert (copy / "cmake/build-info.cmake").read_text() == "set(BUILD_NUMBER 1)\n"
    assert (copy / "new.c").is_file() and not (copy / "CMakeLists.txt").exists()
    assert (copy / iksource.BUILD_INFO_OUTPUT).is_file() and (copy / iksource.BUILD_INFO_SCRIPT).is_file()
    assert (copy / "CMakeLists.old").stat().st_mtime_ns == kept


def test_a_tree_that_had_a_source_link_gets_a_copy(tmp_path):
    src = _ik_tree(tmp_path / "src")
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / SOURCE_LINK).symlink_to(src)
    copy = iksource.tree_copy(tmp_path / "tree", src)
    assert not copy.is_symlink() and (copy / iksource.BUILD_INFO_SCRIPT).is_file()
    assert not (src / iksource.BUILD_INFO_SCRIPT).exists()


# ---------------------------------------------------------------- flags and server arguments per engine

def test_ik_help_is_read_with_its_unlisted_override_flag():
    known = server.known_flags(IK_HELP, IK)
    assert {"-ot", "--rpc", "--metrics", "--slot-save-path", "--log-disable", "-cram", "--fit", "-fa"} <= known
    assert not {"-lv", "-kvu", "-fitt", "--list-devices", "--no-op-offload"} & known
    assert server.unknown_flags(["-ot", "x=CPU", "-fa", "on", "-kvu"], known) == ["-kvu"]


@pytest.mark.parametrize("engine, arg, why", [
    (IK, "-kvu", "-kvu is llama.cpp's alone: ik_llama.cpp has no such flag"),
    (IK, "--no-op-offload", "--no-op-offload is llama.cpp's alone: ik_llama.cpp has no such flag"),
    (IK, "-lv", "ik_llama.cpp spells it --verbosity only"),
    (IK, "--verbosity", None),
    (LC, "-rtr", "-rtr is ik_llama.cpp's alone: llama.cpp has no such flag"),
    (LC, "-no-gr", "-no-gr is ik_llama.cpp's alone: llama.cpp has no such flag"),
    (LC, "-kvu", None),
    (IK, "--frobnicate", None),
])
def test_the_flags_table_knows_which_engine_has_which_flag(engine, arg, why):
    assert flags.lacks(engine, arg) == why


def test_split_modes_per_engine():
    assert "tensor" in flags.split_modes(LC) and "tensor" not in flags.split_modes(IK)
    assert "graph" in flags.split_modes(IK)


def test_server_argv_per_engine():
    lc = server.server_argv(Path("/b/llama-server"), Path("/m.gguf"), host="127.0.0.1", port=1, args=["-c", "9"])
    ik = server.server_argv(Path("/b/llama-server"), Path("/m.gguf"), host="127.0.0.1", port=1, args=["-c", "9"],
                            engine=IK)
    assert lc[5:] == ["--port", "1", "-lv", "4", "--metrics", "-c", "9"]
    assert ik[5:] == ["--port", "1", "--log-disable", "--metrics", "--threads-http", "32", "-c", "9"]
    assert set(engines.OWN_ARGS) >= {"-lv 4", "-kvu", "-fitt", "--log-disable", "--threads-http 32"}
    assert all(set(v) == set(engines.NAMES) for v in engines.OWN_ARGS.values())


@pytest.mark.parametrize("backend, split, n, want", [
    ("cpu-rpc", None, 2, ["0", "1", "1"]),
    ("cpu-rpc", [300.0, 200.0], 2, ["0", "300", "200"]),
    ("cpu-rpc", [1.5, 1.0], 2, ["0", "1.5", "1"]),
    ("cuda", None, 2, None),  # a CUDA build numbers its GPUs first
])
def test_ik_splits_rpc_devices_with_the_cpu_first(backend, split, n, want):
    assert engines.device_split(engines.get(IK), backend, split, n) == want
    assert engines.device_split(engines.get(LC), backend, split, n) is None


@pytest.mark.parametrize("kv, options, want", [
    ({"f16", "q8_0"}, {}, {"GGML_IQK_FA_ALL_QUANTS": "OFF"}),
    ({"f16", "q4_0"}, {}, {}),  # a q4_0 cache needs the kernels the cut leaves out
    ({"IQ4_NL"}, {}, {}),
    ({"f16"}, {"GGML_IQK_FA_ALL_QUANTS": "ON"}, {}),  # the build chose for itself
])
def test_the_kernel_cut_only_where_no_configuration_needs_the_kernels(kv, options, want):
    assert engines.kernel_cut(engines.get(IK), kv, options) == want
    assert engines.kernel_cut(engines.get(LC), kv, options) == {}


def test_engine_facts():
    ik, lc = engines.get(IK), engines.get(LC)
    assert (ik.default_copies, lc.default_copies) == (1, 4)
    assert (ik.copies_target, lc.copies_target) == ("ggml", "ggml-base")
    assert ik.target("ggml-rpc-server") == "rpc-server" and ik.target("llama-fit-params") is None
    assert ik.copies({"GGML_SCHED_MAX_COPIES": "4"}) == 4 and ik.copies({}) == 1
    assert ik.defines["LLAMA_BUILD_EXAMPLES"] == "ON" and lc.defines["LLAMA_BUILD_EXAMPLES"] == "OFF"
    assert not ik.fit_target and not ik.unified_kv and not ik.lists_devices and ik.pp_backends == {"cuda"}
    with pytest.raises(KeyError, match="use one of llama.cpp, ik_llama.cpp"):
        engines.get("mlc")
