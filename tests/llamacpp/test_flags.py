"""llamacpp.flags: one table of llama-server's flags (aliases, value kinds, K/V cache types, llama-bench's
equivalents, trust risks), and llamacpp.cmake's truth rule."""

from __future__ import annotations

import pytest

from llamalab.llamacpp import argv, crosscheck, flags
from llamalab.llamacpp.cmake import cmake_true
from llamalab.study import spec, trust
from llamalab.tune import space as tunespace

ALL_NAMES = [(n, f) for f in flags.FLAGS for n in f.names]


def test_no_spelling_names_two_flags():
    names = [n for n, _ in ALL_NAMES]
    assert len(names) == len(set(names))
    assert all(n.startswith("-") and n == flags.name_of(n) for n in names)


@pytest.mark.parametrize(("name", "f"), ALL_NAMES, ids=[n for n, _ in ALL_NAMES])
def test_every_alias_resolves(name, f):
    assert flags.flag(name) is f
    assert flags.canonical(name) == f.name
    assert flags.names(name) == f.names
    assert flags.canonical(f"{name}=x") == f.name
    if name.startswith("--"):  # llama.cpp reads `_` as `-` in a long option
        assert flags.flag(name.replace("-", "_").replace("__", "--", 1)) is f


def test_underscore_spelling():
    assert flags.canonical("--n_gpu_layers") == "-ngl"
    assert flags.canonical("--n_gpu_layers=99") == "-ngl"
    assert flags.canonical("--cache_type_k") == "-ctk"
    assert flags.canonical("--log_file=x") == "--log-file"
    assert flags.canonical("-n_gpu") == "-n_gpu"  # a short option as written
    assert flags.canonical("--not-a-flag") == "--not-a-flag" and flags.flag("--not-a-flag") is None
    assert flags.names("--nope") == ("--nope",)


def test_kv_types_are_the_same_set_as_before():
    before = {"f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl"}
    assert set(flags.KV_TYPES) == before
    assert spec.KV_TYPES == flags.KV_TYPES
    assert set(tunespace.KV_BYTES) == set(tunespace.KV_RANK) == before
    assert flags.flag("-ctk").choices == flags.flag("--cache-type-v").choices == flags.KV_TYPES
    assert tunespace.KV_BYTES["q8_0"] == 34 / 32 and tunespace.KV_BYTES["f16"] == 2.0


def test_argv_reads_every_alias():
    assert argv.PARALLEL == ("-np", "--parallel") and argv.TENSOR_SPLIT == ("-ts", "--tensor-split")
    assert argv.n_slots(["--parallel=3"]) == 3
    assert argv.replaced(["--ctx-size", "100", "--fit_target", "5", "-x"], ["-c", "200", "-fitt", "9"]) == [
        "-x", "-c", "200", "-fitt", "9"]
    assert argv.replaced(["--n-gpu-layers", "10"], ["-ngl", "99"]) == ["-ngl", "99"]


def test_llama_bench_equivalents():
    out, untranslated = crosscheck.bench_args(
        ["--flash-attn", "on", "--n_gpu_layers", "99", "--cache-type-k=q8_0", "-ctv", "q4_0", "--no-op-offload",
         "-nkvo", "--parallel", "4", "-kvu", "-c", "4096", "--verbosity=5", "--rpc", "h:1", "--foo", "bar"])
    assert out == ["-fa", "on", "-ngl", "99", "-ctk", "q8_0", "-ctv", "q4_0", "-nopo", "1", "-nkvo", "1",
                   "-rpc", "h:1"]
    assert untranslated == ["--foo", "bar"]
    for f in flags.FLAGS:
        assert not (f.bench and f.bench_skip), f.name
        assert f.bench_value is None or f.kind == flags.BARE, f.name


def test_trust_risks_come_from_the_table():
    assert trust.server_flag_risk("--log_file=/tmp/x") == flags.WRITES_FILES
    assert trust.server_flag_risk("--model") == trust.server_flag_risk("-m") == flags.READS_FILE
    assert trust.server_flag_risk("-sysf") == flags.READS_FILE  # --system-prompt-file's short name
    assert trust.server_flag_risk("--gpt-oss-20b-default") == flags.DOWNLOADS_MODEL
    assert trust.server_flag_risk("-ngl") is None and trust.server_flag_risk("--nope") is None
    for name, f in ALL_NAMES:
        assert trust.server_flag_risk(name) == f.risk


@pytest.mark.parametrize("value", ["ON", "on", "1", "TRUE", "true", "YES", "y", "Y", "2", "0.5", "-1", " ON ", True,
                                   1])
def test_cmake_true(value):
    assert cmake_true(value)


@pytest.mark.parametrize("value", ["OFF", "off", "0", "0.0", "FALSE", "NO", "N", "IGNORE", "NOTFOUND", "X-NOTFOUND",
                                   "", "maybe", "1_0", "nan", False, 0])
def test_cmake_false(value):
    assert not cmake_true(value)
