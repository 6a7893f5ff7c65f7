"""The set-up per engine (setup/prepare.py): the llama-server arguments an ik_llama.cpp build gets, each engine's
default source, the kernel cut decided from the study's K/V types, and the mixed-binaries warning per engine."""

from __future__ import annotations

from pathlib import Path

from llamalab.llamacpp import engines, source
from llamalab.llamacpp.build import BuildArtifact
from llamalab.rig import devices
from llamalab.setup import prepare as session
from llamalab.study import spec as studymod

IK = engines.IK_LLAMA_CPP


def _args(st, engine, dev=None):
    dev = dev or devices.DeviceSetup(backend="cpu-rpc", count=2, server_args=("--rpc", "127.0.0.1:1,127.0.0.1:2"))
    return session.server_args(st, studymod.configs(st)[0], dev, engine)


def test_ik_gets_no_kvu_no_fitt_and_the_budgets_split_with_the_cpu_first():
    st, _ = studymod.load("demo")  # budgets 300 MiB each, fit margin 64
    lc, ik = _args(st, engines.LLAMA_CPP), _args(st, IK)
    assert "-kvu" in lc and "-fitt" in lc and "-ts" not in lc  # llama.cpp: -ts from the budget emulation
    assert "-kvu" not in ik and "-fitt" not in ik
    assert ik[ik.index("-ts") + 1] == "0,300,300" and "-cram" in ik and ik[ik.index("-np") + 1] == "4"


def test_ik_keeps_a_studys_own_split_with_the_cpu_first():
    st, _ = studymod.load("demo", ['server.args=["-fa","on","-ngl","999","-ts","3,1"]', "devices.vram=[]"])
    ik = _args(st, IK)
    assert ik.count("-ts") == 1 and ik[ik.index("-ts") + 1] == "0,3,1"
    plain = _args(st, IK, devices.DeviceSetup(backend="cuda", count=2))
    assert plain[plain.index("-ts") + 1] == "3,1"  # a CUDA build numbers its GPUs first


def test_without_budgets_or_a_split_ik_splits_evenly_over_the_rpc_servers():
    st, _ = studymod.load("demo", ["devices.vram=[]", "server.fit_target_mib=[]"])
    ik = _args(st, IK)
    assert ik[ik.index("-ts") + 1] == "0,1,1"
    one = _args(st, IK, devices.DeviceSetup(backend="cpu", count=1))
    assert "-ts" not in one


def test_the_engines_preset_gives_each_engine_its_own_flags():
    st, _ = studymod.load("engines")
    assert [b.engine for b in st.builds] == ["llama.cpp", "llama.cpp", IK, IK]
    assert "--no-op-offload" not in st.server.args  # llama.cpp's own flag: in its builds' args
    assert all("--no-op-offload" in b.args for b in st.builds if b.engine == "llama.cpp")
    assert session.kv_types(st) == {"f16", "q8_0"}
    assert engines.kernel_cut(engines.get(IK), session.kv_types(st), {}) == {"GGML_IQK_FA_ALL_QUANTS": "OFF"}


def test_a_q4_cache_in_any_setting_keeps_iks_kernels():
    st, _ = studymod.load("engines", ['settings=[{name="q4",args=["--cache-type-k","q4_0","-ctv","q4_0"]}]'])
    assert session.kv_types(st) == {"q4_0"}
    assert engines.kernel_cut(engines.get(IK), session.kv_types(st), {}) == {}


def test_a_builds_engine_is_its_own_else_its_binaries_else_its_checkouts():
    spec = studymod.BuildSpec(name="x")
    ik_src = source.Source(path=Path("/ik"), origin="dir:/ik", build_number=None, commit=None, engine=IK)
    assert session.build_engine(spec, None, {}) == engines.LLAMA_CPP
    assert session.build_engine(spec, None, {IK: ik_src}) == IK  # --llama-cpp names an ik checkout
    assert session.build_engine(studymod.BuildSpec(name="x", engine="llama.cpp"), None, {IK: ik_src}) == "llama.cpp"


def _art(name: str, engine: str, version: str) -> BuildArtifact:
    src = source.Source(path=Path("/s"), origin=f"pypi:{version}", build_number=None, commit=None, engine=engine,
                        release=version)
    return BuildArtifact(name=name, key=name, source=src, backend="cpu-rpc", options={}, bin_dir=Path("/b"),
                         engine=engine)


def test_builds_of_two_engines_are_no_mixed_binaries_but_two_of_one_engine_are():
    assert session.mixed_binaries({"a": _art("a", "llama.cpp", "b1"), "i": _art("i", IK, "ik-0.1.5")}) == []
    two = session.mixed_binaries({"a": _art("a", IK, "ik-0.1.5"), "b": _art("b", IK, "ik-0.2")})
    assert len(two) == 1 and two[0].startswith("the builds run on different ik_llama.cpp binaries")
