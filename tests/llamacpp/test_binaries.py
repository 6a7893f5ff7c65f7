"""Given llama.cpp binaries (--llama-bin): reading what they print, and every way a folder can be wrong — each a
clear error with a tip, never a traceback. The run with real binaries is in test_llama_bin.py."""

from __future__ import annotations

import os
import platform
import struct
from pathlib import Path

import pytest
from test_bad_input_cli import assert_clean_error, llamalab

from llamalab.core.errors import ConfigError, SourceError
from llamalab.llamacpp import binaries
from llamalab.llamacpp.build import BuildArtifact
from llamalab.llamacpp.source import Source
from llamalab.setup import prepare as session
from llamalab.study import spec as studymod
from testpaths import FIXTURES

FIX = FIXTURES
VERSIONS = FIX / "version"


# ---------------------------------------------------------------- reading what binaries print (real outputs)


@pytest.mark.parametrize("name, number, commit, compiler, target, backends", [
    ("b11312-cpu-rpc.txt", 11312, "0c1e570", "GNU 12.2.0", "Linux x86_64", ()),
    ("debian13-vulkan-b7083.txt", 7083, "2376b7758", "cc (Debian 14.2.0-19) 14.2.0", "x86_64-linux-gnu",
     ("Vulkan",)),
    ("backend-cpu-unknown-version.txt", None, None, "cc (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0", "x86_64-linux-gnu",
     ("CPU",)),
    ("vulkan-dl-server-start.txt", 6510, "703f9e32", "cc (Ubuntu 11.4.0-1ubuntu1~22.04.2) 11.4.0",
     "x86_64-linux-gnu", ("RPC", "Vulkan", "CPU")),
])
def test_parse_version(name, number, commit, compiler, target, backends):
    v = binaries.parse_version((VERSIONS / name).read_text())
    assert (v.build_number, v.commit, v.compiler, v.target, v.backends) == (number, commit, compiler, target, backends)
    assert v.version == (f"b{number}" if number else "unknown")


def test_backends_from_a_cuda_log_devices_and_libraries():
    log = (FIX / "logs" / "cuda-b11312-virtual2-copies4.log").read_text()
    assert binaries.parse_version(log).backends == ("CUDA",)
    listed = ("Available devices:\n  CUDA0: NVIDIA H200 (143155 MiB, 142480 MiB free)\n"
              "  ROCm1: gfx1100 (1 MiB, 1 MiB free)\n")
    assert binaries.device_backends(listed) == ["CUDA", "ROCm"]
    assert binaries.device_backends("Available devices:\n  (none)\n") == []
    libs = ["libggml-base.so", "libggml-cpu-haswell.so", "libggml-cpu-skylakex.so", "libggml-rpc.so",
            "libggml-vulkan.so", "libggml.so", "libllama.so.0", "libggml-hip.so"]
    assert binaries.library_backends(libs) == ["CPU", "ROCm", "RPC", "Vulkan"]


def test_failure_reasons():
    assert binaries.failure(0, (VERSIONS / "b11312-cpu-rpc.txt").read_text()) is None
    msg, tip = binaries.failure(127, "./llama-server: error while loading shared libraries: libllama.so.0: cannot "
                                     "open shared object file: No such file or directory")
    assert "libllama.so.0" in msg and ".so files" in tip
    msg, tip = binaries.failure(1, "./llama-server: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not "
                                   "found (required by ./llama-server)")
    assert "GLIBC_2.38" in msg and "older system" in tip
    msg, tip = binaries.failure(126, "[Errno 8] Exec format error: '/x/llama-server'")
    assert "architecture" in msg and platform.machine() in msg
    msg, _ = binaries.failure(0, "usage: something else\n")
    assert "does not answer --version" in msg


# ---------------------------------------------------------------- folders that are wrong (real files)


def _elf_header(machine: int) -> bytes:
    """The 64 bytes an ELF program starts with, for another CPU than this one: the kernel refuses it (ENOEXEC)
    exactly as it refuses a whole program built for that CPU."""
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    return ident + struct.pack("<HHIQQQIHHHHHH", 2, machine, 1, 0x400000, 64, 0, 0, 64, 56, 0, 64, 0, 0)


def _exe(path: Path, data: bytes | str, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    path.chmod(mode)
    return path


def test_missing_folder(tmp_path):
    with pytest.raises(SourceError, match="no such folder") as e:
        binaries.probe(tmp_path / "llama-b11312")
    assert "release archive" in e.value.tip


def test_a_file_instead_of_a_folder(tmp_path):
    (tmp_path / "llama-b11312-bin-ubuntu-x64.tar.gz").write_bytes(b"\x1f\x8b")
    with pytest.raises(SourceError, match="is a file") as e:
        binaries.probe(tmp_path / "llama-b11312-bin-ubuntu-x64.tar.gz")
    assert "tar xf" in e.value.tip


def test_no_llama_server(tmp_path):
    _exe(tmp_path / "llama-cli", "#!/bin/sh\n")
    with pytest.raises(SourceError, match="holds no llama-server") as e:
        binaries.probe(tmp_path)
    assert "build/bin" in str(e.value) and "ggml-rpc-server" in e.value.tip


def test_not_executable(tmp_path):
    _exe(tmp_path / "llama-server", "#!/bin/sh\necho 'version: 1 (abc)'\n", mode=0o644)
    with pytest.raises(SourceError, match="is not executable") as e:
        binaries.probe(tmp_path)
    assert "chmod +x" in e.value.tip


def test_wrong_architecture(tmp_path):
    other = 183 if platform.machine() in ("x86_64", "AMD64") else 62  # AArch64 on x86-64, else x86-64
    _exe(tmp_path / "build" / "bin" / "llama-server", _elf_header(other))
    with pytest.raises(SourceError, match="does not run here") as e:
        binaries.probe(tmp_path)  # found under build/bin
    assert "architecture" in str(e.value) and "bin-ubuntu-arm64" in e.value.tip


def test_a_program_that_is_not_llama_server(tmp_path):
    _exe(tmp_path / "llama-server", "#!/bin/sh\necho 'usage: frobnicate [options]'\nexit 1\n")
    with pytest.raises(SourceError, match="does not answer --version like llama-server"):
        binaries.probe(tmp_path)


@pytest.mark.parametrize("command, folder, words", [
    ("run", "{d}/nowhere", ["no such folder"]),
    ("run", "{d}/arm", ["does not run here"]),
    ("plan", "{d}/noexec", ["is not executable", "chmod +x"]),
])
def test_cli_errors_without_traceback(tmp_path, command, folder, words):
    (tmp_path / "empty").mkdir()
    _exe(tmp_path / "noexec" / "llama-server", "#!/bin/sh\n", mode=0o644)
    _exe(tmp_path / "arm" / "llama-server", _elf_header(183 if platform.machine() in ("x86_64", "AMD64") else 62))
    env = {"LLAMALAB_DATA": str(tmp_path / "data"), "LLAMALAB_HOME": str(tmp_path / "home")}
    done = llamalab(command, "demo", "--llama-bin", folder.format(d=tmp_path), env=env)
    assert_clean_error(done, *words)
    assert done.returncode == 1
    assert not (tmp_path / "home" / "builds").exists() and not (tmp_path / "home" / "src").exists()


# ---------------------------------------------------------------- what the study asks of the binaries (pure)


def _given(files: dict[str, str], backends: tuple[str, ...]) -> binaries.Binaries:
    return binaries.Binaries(dir=Path("/opt/llama-b11312"), given="/opt/llama-b11312", files=files,
                             version=binaries.VersionInfo(11312, "0c1e570"), version_text="", backends=backends)


def test_devices_need_rpc_server_and_the_backend():
    server = {"llama-server": "llama-server"}
    with pytest.raises(ConfigError, match="has no rpc-server") as e:
        binaries.check_devices(_given(server, ("CPU", "RPC")), "cpu-rpc", local_rpc=True)
    assert "ggml-rpc-server and rpc-server" in str(e.value) and "devices.backend=cpu" in e.value.tip
    both = {**server, "ggml-rpc-server": "rpc-server"}
    binaries.check_devices(_given(both, ("CPU", "RPC")), "cpu-rpc", local_rpc=True)
    with pytest.raises(ConfigError, match="needs llama.cpp's CUDA backend"):
        binaries.check_devices(_given(both, ("CPU", "RPC")), "cuda", local_rpc=False)
    binaries.check_devices(_given(server, ()), "cuda", local_rpc=False)  # nothing reported: llama-server will say
    binaries.check_devices(_given(server, ("CPU",)), "cpu", local_rpc=False)
    assert _given(both, ()).path("ggml-rpc-server") == Path("/opt/llama-b11312/rpc-server")


def test_which_build_runs_given_binaries():
    st, _ = studymod.load("demo", ["source.bin=\"/opt/llama-b11312\""])
    got = {b.name: studymod.given_bin(st, b) for b in st.builds}
    assert got == {"copies4": "/opt/llama-b11312", "copies1": None, "no-pp-blas": None,
                   "no-pp-override": "/opt/llama-b11312"}
    two = studymod.parse({"name": "x", "builds": [{"name": "b7000", "bin": "/opt/llama-b7000"},
                                                  {"name": "b11312", "bin": "/opt/llama-b11312"}]})
    assert [studymod.given_bin(two, b) for b in two.builds] == ["/opt/llama-b7000", "/opt/llama-b11312"]
    assert "[source]" not in studymod.to_toml(studymod.load("demo")[0])
    again = studymod.parse(__import__("tomllib").loads(studymod.to_toml(st)))
    assert again == st


def test_a_build_with_bin_has_no_cmake():
    with pytest.raises(ConfigError, match="cannot also have cmake options"):
        studymod.parse({"name": "x", "builds": [{"name": "a", "bin": "/opt/x", "cmake": {"GGML_BLAS": True}}]})


def test_study_hash_unchanged_without_source(tmp_path):
    st, _ = studymod.load("demo")
    with_bin, _ = studymod.load("demo", ["source.bin=\"/opt/llama-b11312\""])
    model = tmp_path / "m.gguf"
    assert session.study_hash(st, model) != session.study_hash(with_bin, model)
    # the hash of a study without [source] (nor [tune], [outputs] at its defaults, min_devices, builds[].source or
    # builds[].engine) is
    # what it was before those keys existed
    import hashlib
    import json

    before = json.loads(st.model_dump_json())
    del before["source"], before["tune"], before["outputs"]
    for table in ("builds", "settings"):
        for entry in before[table]:
            del entry["min_devices"]
            if table == "builds":
                del entry["source"], entry["engine"]
    before["workload"]["seed"] = 42  # a key that was dropped, hashed as it was
    assert session.study_hash(st, model) == hashlib.sha256(
        (json.dumps(before, separators=(",", ":"), ensure_ascii=False) + "|" + str(model)).encode()).hexdigest()[:16]


def test_skip_reasons_say_what_to_do():
    st, _ = studymod.load("demo", ["source.bin=\"/opt/llama-b11312\""])
    specs = {b.name: b for b in st.builds}
    given = {"copies4": _given({"llama-server": "llama-server"}, ())}
    copies = session.no_source_reason(specs["copies1"], "/opt/llama-b11312", given)
    assert "copies variant" in copies and "--llama-cpp DIR" in copies and "0c1e570" in copies
    blas = session.no_source_reason(specs["no-pp-blas"], "/opt/llama-b11312", given)
    assert "-DGGML_BLAS=ON" in blas and "--llama-cpp DIR" in blas


def test_mixed_binaries_are_named():
    src = Source(path=Path("/src"), origin="dir:/src", build_number=11312, commit="0c1e57098bba")
    b = _given({"llama-server": "llama-server"}, ())
    arts = {"copies4": binaries.artifact(b, "copies4", "cpu-rpc"),
            "copies1": BuildArtifact(name="copies1", key="k", source=src, backend="cpu-rpc",
                                     options={"GGML_SCHED_MAX_COPIES": "1"}, bin_dir=Path("/b"))}
    (line,) = session.mixed_binaries(arts)
    assert "copies4 on binaries b11312" in line and "copies1 on a build of b11312" in line
    assert session.mixed_binaries({"copies4": arts["copies4"]}) == []
    assert not arts["copies4"].made and arts["copies1"].made
    assert arts["copies4"].binary("llama-server") == Path("/opt/llama-b11312/llama-server")
    assert os.fspath(arts["copies1"].binary("ggml-rpc-server")) == "/b/ggml-rpc-server"


def test_study_hash_survives_the_dropped_seed_key():
    """`workload.seed` was never read and is gone; a study file that still sets it loads, and a study hashes as it
    did while the key existed (figures from the code before it was dropped), so unfinished runs still resume."""
    from pathlib import Path

    model = Path("/m/demo.gguf")
    st, _ = studymod.load("demo")
    assert "seed" not in st.workload.model_dump()
    assert session.study_hash(st, model) == "8326b361a62611c9"
    old, _ = studymod.load("demo", ["workload.seed=7"])
    assert old.workload.model_dump() == st.workload.model_dump()
    assert session.study_hash(old, model) == "c6712725090baea5"
    with pytest.raises(Exception, match="whole number"):
        studymod.load("demo", ["workload.seed=\"x\""])
