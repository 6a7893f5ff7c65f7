"""The memory ledger against real llama.cpp logs (tests/fixtures/logs, sources in SOURCES.md) and inline cases."""

from __future__ import annotations

import json
import random

import pytest

from llamalab.logs import failures, ledger, memory, rawlines, records, tensorsplit
from llamalab.logs import inspect as inspect_view
from llamalab.logs.ledger import Buffers, is_host, parse
from llamalab.logs.rawlines import is_host
from llamalab.logs.records import Buffers
from testpaths import FIXTURES

LOGS = FIXTURES / "logs"
FIXTURES = sorted(p.name[: -len(".expected.json")] for p in LOGS.glob("*.expected.json"))
CONTRACT = ("pipeline_parallel", "n_copies", "n_ctx", "graph_nodes", "graph_splits")
MIB_KEYS = ("model_mib", "kv_mib", "compute_mib", "output_mib")


def lines_of(name: str) -> list[str]:
    return (LOGS / f"{name}.log").read_text(encoding="utf-8", errors="replace").splitlines()


def expected(name: str) -> dict:
    return json.loads((LOGS / f"{name}.expected.json").read_text())


def parse_fixture(name: str, lines=None) -> records.Ledger:
    """A fixture parsed as the runner would: with the arguments its expected file names (`parse_args`: the -ts a
    -sm tensor server ran with, which the log does not print)."""
    args = expected(name).get("parse_args") or {}
    return parse(lines_of(name) if lines is None else lines, **args)


def buffers_json(d: dict) -> dict:
    return {name: {k: b[k] for k in MIB_KEYS} for name, b in d.items()}


def extra_value(led: records.Ledger, key: str):
    """The ledger's value for an `extra` key of an expected file."""
    special = {
        "kv_cells": lambda: led.kv.total_cells if led.kv else None,
        "kv_layers": lambda: led.kv.layers if led.kv else None,
        "k_type": lambda: led.kv.k_type if led.kv else None,
        "v_type": lambda: led.kv.v_type if led.kv else None,
        "kv_caches": lambda: len(led.kv_caches),
        "breakdown_final_rows": lambda: len(led.breakdown_final),
        "breakdown_projected_rows": lambda: len(led.breakdown_projected),
        "breakdown_projected_tables": lambda: len(led.breakdown_projected_tables),
        "failure": lambda: led.failure.split(" (")[0] if led.failure else None,
        "meta_devices": lambda: led.meta["devices"] if led.meta else None,
        "meta_shares": lambda: led.meta["shares"] if led.meta else None,
        "meta_exact": lambda: led.meta["exact"] if led.meta else None,
        "meta_estimated": lambda: led.meta["estimated"] if led.meta else None,
        "input_mib": lambda: {n: b.input_mib for t in (led.devices, led.host) for n, b in t.items()
                              if b.input_mib is not None},
        "rs_mib": lambda: {n: b.rs_mib for t in (led.devices, led.host) for n, b in t.items() if b.rs_mib is not None},
    }
    return special[key]() if key in special else getattr(led, key)


# ---------------------------------------------------------------- fixtures

def test_fixture_set_is_broad_enough():
    assert len(FIXTURES) >= 12
    backends = {name.split("-")[0] for name in FIXTURES}
    assert len(backends) >= 4, backends
    sources = (LOGS / "SOURCES.md").read_text()
    for name in FIXTURES:
        assert f"{name}.log" in sources, f"{name} has no source noted in SOURCES.md"


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_contract(name):
    exp = expected(name)
    got = parse_fixture(name).to_json()
    assert {k: got[k] for k in CONTRACT} == {k: exp[k] for k in CONTRACT}
    assert buffers_json(got["devices"]) == exp["devices"]
    assert buffers_json(got["host"]) == exp["host"]


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_details(name):
    led = parse_fixture(name)
    for key, value in expected(name)["extra"].items():
        assert extra_value(led, key) == value, key
    assert led.errors == []


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_survives_crlf_ansi_prefixes_and_noise(name):
    """Windows line ends, colour codes, docker / journald prefixes and unrelated lines change nothing."""
    lines = lines_of(name)
    base = parse_fixture(name, lines).to_json()
    rng = random.Random(name)
    noisy = []
    for line in lines:
        prefix = rng.choice(["", "llama-1  | ", "Mar 01 12:00:00 host llama-server[123]: ", "\x1b[32m"])
        noisy.append(prefix + line + "\x1b[0m\r")
        if rng.random() < 0.2:
            noisy.append(rng.choice(["", "GET /health 200", "srv  update_slots: all slots are idle", "|||",
                                     "= 12 MiB"]))
    got = parse_fixture(name, noisy).to_json()
    for key in (*CONTRACT, "devices", "host"):
        assert got[key] == base[key], key


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_every_truncation_parses(name):
    lines = lines_of(name)
    for n in range(0, len(lines) + 1, max(1, len(lines) // 25)):
        led = parse(lines[:n])
        assert led.errors == []
        head = "\n".join(lines[:n])
        cut = head[: len(head) * 2 // 3]  # a paste cut in the middle of a line
        assert parse(cut.splitlines()).errors == []


def test_two_runs_in_one_log_give_the_last():
    one = lines_of("rpc-b11312-copies1")
    four = lines_of("rpc-b11312-copies4")
    led = parse(one + four)
    assert led.to_json()["devices"] == parse(four).to_json()["devices"]
    assert led.sched_copies == 4 and led.n_loads == 2


# ---------------------------------------------------------------- pipeline-parallel semantics

PP_CASES = [
    pytest.param(["llama_context: pipeline parallelism enabled", "sched_reserve: reserve took 2 ms, sched copies = 1"],
                 False, 1, id="enabled-line-but-one-copy"),
    pytest.param(["llama_context: pipeline parallelism enabled", "sched_reserve: reserve took 2 ms, sched copies = 4"],
                 True, 4, id="sched-copies-4"),
    pytest.param(["llama_context: pipeline parallelism enabled"], True, None, id="enabled-only"),
    pytest.param(["llama_context: pipeline parallelism enabled",
                  "llama_context: compute buffer allocation failed, retrying without pipeline parallelism"],
                 False, None, id="retry-without"),
    pytest.param(["llama_new_context_with_model: pipeline parallelism enabled (n_copies=4)"], True, 4,
                 id="old-n_copies-4"),
    # one copy overlaps nothing: the old form's n_copies=1 is off, like `sched copies = 1` (issue 18)
    pytest.param(["llama_new_context_with_model: pipeline parallelism enabled (n_copies=1)"], False, 1,
                 id="old-n_copies-1"),
    pytest.param(["llama_context: pipeline parallelism enabled (n_copies=4)",
                  "llama_context: compute buffer allocation failed, retrying without pipeline parallelism"],
                 False, 4, id="old-retry"),
    pytest.param(["sched_reserve: reserve took 1 ms, sched copies = 1"], False, 1, id="copies-only"),
    pytest.param(["llama_context: n_ctx = 512"], None, None, id="neither"),
]


@pytest.mark.parametrize("lines,pp,copies", PP_CASES)
def test_pipeline_parallel_semantics(lines, pp, copies):
    led = parse(lines)
    assert (led.pipeline_parallel, led.n_copies) == (pp, copies)


# ---------------------------------------------------------------- formats

GRAPH_CASES = [
    pytest.param("sched_reserve: graph: nodes = 302, splits = 3, input objects = 4, input tensors = 7", 302, 3, 3,
                 id="2026"),
    pytest.param("sched_reserve: graph (pp bs=512, tg bs=4): nodes = 1234 / 1100, splits = 5 / 3, "
                 "input objects = 4 / 4",
                 1234, 5, 3, id="2026-pp-tg"),
    pytest.param("llama_context: graph nodes  = 3376\nllama_context: graph splits = 171 (with bs=512), 4 (with bs=1)",
                 3376, 171, 4, id="2025-with-bs"),
    pytest.param("llama_new_context_with_model: graph nodes  = 1030\nllama_new_context_with_model: graph splits = 2",
                 1030, 2, 2, id="2024"),
    pytest.param("llama_new_context_with_model: graph splits (measure): 3", None, 3, 3, id="2024-measure"),
]


@pytest.mark.parametrize("text,nodes,splits,splits_tg", GRAPH_CASES)
def test_graph_formats(text, nodes, splits, splits_tg):
    led = parse(text.splitlines())
    assert (led.graph_nodes, led.graph_splits, led.graph_splits_tg) == (nodes, splits, splits_tg)


CTX_CASES = [
    pytest.param("llama_context: n_ctx         = 8192\nllama_context: n_ctx_seq     = 2048", 8192, 2048,
                 id="n_ctx_seq"),
    pytest.param("llama_context: n_ctx         = 4096\nllama_context: n_ctx_per_seq = 4096", 4096, 4096, id="per_seq"),
    pytest.param("llama_new_context_with_model: n_ctx      = 2048", 2048, None, id="2024"),
    pytest.param("llama_init_from_model: n_ctx         = 4224\n"
                 "llama_init_from_model: n_ctx_per_seq (4224) < n_ctx_train",
                 4224, None, id="warning-is-not-a-value"),
    pytest.param("slot load_model: id  0 | task -1 | new slot, n_ctx = 8192", None, None, id="slot-line-ignored"),
]


@pytest.mark.parametrize("text,n_ctx,n_ctx_seq", CTX_CASES)
def test_context_sizes(text, n_ctx, n_ctx_seq):
    led = parse(text.splitlines())
    assert (led.n_ctx, led.n_ctx_seq) == (n_ctx, n_ctx_seq)


BUFFER_CASES = [
    pytest.param("load_tensors:        CUDA0 model buffer size = 11826.45 MiB", "CUDA0", "model_mib", 11826.45,
                 id="model"),
    pytest.param("llm_load_tensors:      CUDA0 buffer size =  3992.51 MiB", "CUDA0", "model_mib", 3992.51,
                 id="2024-no-kind"),
    pytest.param("llama_kv_cache: RPC0[127.0.0.1:50101] KV buffer size =    30.62 MiB", "RPC0[127.0.0.1:50101]",
                 "kv_mib",
                 30.62, id="rpc-kv"),
    pytest.param("llama_memory_recurrent:      CUDA0 RS buffer size =   124.69 MiB", "CUDA0", "rs_mib", 124.69,
                 id="rs"),
    pytest.param("llama_context:  CUDA_Host  output buffer size =     0.50 MiB", "CUDA_Host", "output_mib", 0.5,
                 id="output"),
    pytest.param("sched_reserve:       MTL0 compute buffer size =  2161.01 MiB", "MTL0", "compute_mib", 2161.01,
                 id="compute"),
    pytest.param("llama_new_context_with_model:  CUDA_Host input buffer size   =    13.02 MiB", "CUDA_Host",
                 "input_mib",
                 13.02, id="2024-input-buffer"),
    pytest.param("0.01.790.616 I load_tensors:       Meta() model buffer size = 12952.69 MiB", "Meta()", "model_mib",
                 12952.69, id="meta-device"),
    pytest.param("llm_load_tensors: VRAM used: 3820.94 MiB", "GPU", "model_mib", 3820.94, id="legacy-vram"),
]


@pytest.mark.parametrize("line,name,attr,mib", BUFFER_CASES)
def test_buffer_lines(line, name, attr, mib):
    led = parse([line])
    b = led.devices.get(name) or led.host.get(name)
    assert b is not None and getattr(b, attr) == mib


@pytest.mark.parametrize("line", [
    pytest.param("llm_load_tensors: ggml ctx size =    0.37 MiB", id="ggml-ctx-size"),
    pytest.param("ggml_vulkan: Requested buffer size exceeds device memory allocation limit", id="vulkan-error"),
    pytest.param("ggml_backend_metal_buffer_from_ptr: allocated buffer, size =  1114.92 MiB, ( 1114.98 / 10922.67)",
                 id="metal-alloc"),
    pytest.param("the maximum buffer size = 4096 MiB on this card", id="prose"),
    pytest.param("llama_adapter_lora_init_impl:      CUDA0 LoRA buffer size =    80.00 MiB", id="lora"),
    pytest.param("alloc_compute_meta:      CUDA0 compute buffer size =   148.10 MiB", id="mmproj"),
])
def test_not_ledger_buffers(line):
    led = parse([line])
    assert led.devices == {} and led.host == {}


def test_repeated_names_are_summed():
    led = parse(["llm_load_tensors:        CPU buffer size =  3024.00 MiB"] * 3
                + ["load_tensors:   CPU_Mapped model buffer size =  1.25 MiB",
                   "load_tensors:   CPU_Mapped model buffer size =  2.50 MiB"])
    assert led.host["CPU"].model_mib == 9072.0 and led.host["CPU_Mapped"].model_mib == 3.75


def test_compute_pass_sums_repeats_and_a_later_pass_replaces():
    pass_ = ["sched_reserve:  CUDA0 compute buffer size =  10.00 MiB",
             "sched_reserve:  CPU compute buffer size = 1.50 MiB",
             "sched_reserve:  CPU compute buffer size = 1.50 MiB", "sched_reserve: graph splits = 2"]
    again = ["sched_reserve: reserving ...", "sched_reserve:  CUDA0 compute buffer size =  12.00 MiB",
             "sched_reserve:  CPU compute buffer size = 2.00 MiB", "sched_reserve: graph splits = 2"]
    led = parse(["llama_kv_cache:  CUDA0 KV buffer size = 5.00 MiB"] + pass_ + again)
    assert led.devices["CUDA0"].compute_mib == 12.0 and led.host["CPU"].compute_mib == 2.0
    assert led.devices["CUDA0"].kv_mib == 5.0  # a re-reserve keeps the context
    assert parse(pass_).host["CPU"].compute_mib == 3.0


@pytest.mark.parametrize("name,host", [
    ("CPU", True), ("CPU_Mapped", True), ("CPU_REPACK", True), ("CPU_AARCH64", True), ("AMX", True),
    ("CUDA_Host", True), ("Vulkan_Host", True), ("ROCm_Host", True), ("SYCL_Host", True), ("Host", True),
    ("CUDA0", False), ("Vulkan1", False), ("ROCm0", False), ("Metal", False), ("MTL0", False), ("SYCL0", False),
    ("RPC0[127.0.0.1:50101]", False), ("RPC[10.0.0.2:50052]", False), ("CUDA_Split", False), ("Meta()", False),
])
def test_host_or_device(name, host):
    assert is_host(name) is host


def test_kv_summaries_all_formats():
    cases = {
        ("llama_kv_cache: size =   49.00 MiB (  8192 cells,   8 layers,  4/1 seqs), K (f16):   32.00 MiB, "
         "V (q8_0):   17.00 MiB"):
            (8192, 8, "f16", "q8_0", 1),
        ("llama_kv_cache_unified: size = 6564.00 MiB ( 70016 cells,  48 layers,  1/ 1 seqs), K (f16): 3282.00 MiB, "
         "V (f16): 3282.00 MiB"):
            (70016, 48, "f16", "f16", 1),
        "llama_kv_cache: size = 64.00 MiB (  2048 cells,  8 layers,  4/4 seqs), K (f16): 32.00 MiB, V (f16): 32.00 MiB":
            (8192, 8, "f16", "f16", 4),
        ("llama_new_context_with_model: n_ctx = 2048\n"
         "llama_new_context_with_model: KV self size  =  256.00 MiB, K (f16):  128.00 MiB, V (f16):  128.00 MiB"):
            (2048, None, "f16", "f16", 1),
    }
    for text, (cells, layers, k, v, streams) in cases.items():
        kv = parse(text.splitlines()).kv
        assert (kv.total_cells, kv.layers, kv.k_type, kv.v_type, kv.n_stream) == (cells, layers, k, v, streams), text


def test_recurrent_summary_is_not_kv():
    led = parse(["llama_memory_recurrent:      CUDA0 RS buffer size =   124.69 MiB",
                 "llama_memory_recurrent: size =  299.25 MiB (     2 cells,  64 layers,  2 seqs  0 rs_seq), "
                 "R (f32):   11.25 MiB, S (f32):  288.00 MiB"])
    assert led.kv is None and len(led.rs_caches) == 1 and led.devices["CUDA0"].rs_mib == 124.69


def test_breakdown_tables_projected_and_final_kept_apart():
    led = parse(lines_of("rpc-b11312-copies4"))
    proj = {r.name: r for r in led.breakdown_projected}
    final = {r.name: r for r in led.breakdown_final}
    assert proj["RPC1 (127.0.0.1:51712)"].compute == 52 and final["RPC1 (127.0.0.1:51712)"].compute == 48
    assert final["Host"].self_ == 68 and final["RPC0 (127.0.0.1:51711)"].unaccounted == -108


def test_draft_model_buffers_are_added_but_scalars_stay():
    main = ["llama_new_context_with_model: n_ctx = 4096", "llama_kv_cache_init: ROCm0 KV buffer size = 100.00 MiB",
            "llama_new_context_with_model: ROCm0 compute buffer size = 10.00 MiB",
            "llama_new_context_with_model: graph splits = 2"]
    draft = ["srv load_model: loading draft model '/models/small.gguf'",
             "llm_load_tensors: ROCm0 buffer size = 300.00 MiB",
             "llama_new_context_with_model: n_ctx = 512", "llama_kv_cache_init: ROCm0 KV buffer size = 5.00 MiB",
             "llama_new_context_with_model: ROCm0 compute buffer size = 2.00 MiB",
             "llama_new_context_with_model: graph splits = 1"]
    led = parse(["llm_load_tensors: ROCm0 buffer size = 1000.00 MiB"] + main + draft)
    b = led.devices["ROCm0"]
    assert (b.model_mib, b.kv_mib, b.compute_mib) == (1300.0, 105.0, 12.0)
    assert (led.n_ctx, led.graph_splits, led.draft) == (4096, 2, True)


def test_fit_lines():
    led = parse(["common_params_fit_impl: context size reduced from 40960 to 4096 -> need 3456 MiB less memory",
                 "llama_params_fit: successfully fit params to free device memory"])
    assert (led.fit_ctx_from, led.fit_ctx_to, led.fit_status) == (40960, 4096, "ok")


def test_jsonl_log_matches_text_log():
    led = parse(lines_of("rpc-b11312-jsonl"))
    assert led.devices["RPC0[127.0.0.1:51711]"].compute_mib == 32.04 and len(led.breakdown_final) == 3


def test_to_json_is_plain_json_with_the_contract():
    out = json.loads(json.dumps(parse(lines_of("rpc-b11312-copies4")).to_json()))
    for key in (*CONTRACT, "devices", "host", "sched_copies"):
        assert key in out
    for b in (*out["devices"].values(), *out["host"].values()):
        assert set(MIB_KEYS) <= set(b)
        assert all(v is None or round(v, 2) == v for v in b.values())


def test_buffers_total():
    assert Buffers(model_mib=1.25, kv_mib=2.0, compute_mib=0.5).total() == 3.75
    assert Buffers().total() == 0.0


FAILURE_CASES = [
    pytest.param("error: invalid argument: --frobnicate", "unsupported flag", id="flag"),
    pytest.param("gguf_init_from_reader: invalid magic characters: 'YL?K', expected 'GGUF'",
                 "the model file is not a GGUF file", id="not-gguf"),
    pytest.param("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 12710.31 MiB on device 0: cudaMalloc failed: "
                 "out of memory", "out of memory", id="oom"),
    pytest.param("llama_model_load: error loading model: missing tensor 'blk.0.attn_q.weight'", "model load error",
                 id="load"),
    # b11312, a model file gone between a plan's dry runs: the loader's reason comes first and is the one named
    pytest.param(["0.00.024.803 E gguf_init_from_file: failed to open GGUF file '/tmp/gone.gguf' (No such file or "
                  "directory)", "0.00.024.914 E llama_model_load: error loading model: llama_model_loader: failed to "
                  "load model from /tmp/gone.gguf"], "model load error (gguf_init_from_file: failed to open GGUF "
                 "file '/tmp/gone.gguf' (No such file or directory))", id="file-gone"),
    pytest.param(["0.00.008.103 E gguf_init_from_reader: failed to read key-value pairs",
                  "0.00.008.250 E llama_model_load: error loading model: llama_model_loader: failed to load model"],
                 "model load error (gguf_init_from_reader: failed to read key-value pairs)",
                 id="header-damaged"),
    pytest.param("llama_context: compute buffer allocation failed, retrying without pipeline parallelism", None,
                 id="retry-is-not-a-failure"),
    pytest.param("srv  update_slots: all slots are idle", None, id="none"),
]


@pytest.mark.parametrize("line,reason", FAILURE_CASES)
def test_failure_reason(line, reason):
    got = failures.failure_reason(line if isinstance(line, list) else [line])
    assert (got if got is None or isinstance(line, list) else got.split(" (")[0]) == reason


# ---------------------------------------------------------------- issue 18: -sm tensor, dropped pipelines, input
# buffers, ollama

# What the two rpc-servers allocated themselves (GGML_RPC_DEBUG=1, SOURCES.md), per device: model, KV, compute MiB
RPC_ALLOCATED = {
    "rpc-b11312-sm-tensor": [(41584640, 16777216, 16787488), (41584640, 16777216, 16787488)],
    "rpc-b11312-sm-tensor-ts31": [(62359552, 25165824, 16787488), (20809728, 8388608, 16787488)],
}


@pytest.mark.parametrize("name", sorted(RPC_ALLOCATED))
def test_meta_buffers_are_attributed_to_the_devices_as_the_rpc_servers_allocated_them(name):
    """llama.cpp prints one `Meta()` line per buffer, its largest per-device part; each device's share comes out
    as the rpc-servers' own allocation logs say: compute and KV exactly, weights within 0.05 MiB (-ts 3,1: the
    smaller device's weights are an estimate by its share)."""
    led = parse_fixture(name)
    assert "Meta()" not in led.devices and led.meta["attributed"]
    got = [led.devices[d] for d in led.meta["devices"]]
    for b, (model, kv, compute) in zip(got, RPC_ALLOCATED[name], strict=True):
        assert b.kv_mib == round(kv / records.MIB, 2) and b.compute_mib == round(compute / records.MIB, 2)
        assert abs(b.model_mib - model / records.MIB) < 0.05
    assert round(sum(b.kv_mib for b in got), 2) == led.kv.size_mib  # the KV summary is the whole cache
    assert led.meta["printed"]["Meta()"]["model_mib"] == max(b.model_mib for b in got)
    assert set(memory.kv_bytes_per_token(led)) == set(led.meta["devices"])  # tokens priced per device


def test_meta_attribution_says_how_it_was_made_and_what_the_log_cannot_tell():
    led = parse_fixture("rpc-b11312-sm-tensor-ts31")
    note = tensorsplit.meta_note(led.meta)
    assert "largest per-device part" in note and "0.75:0.25" in note
    assert "Exact per device: kv, compute" in note and "Estimated: model" in note and "NCCL" in note
    text = inspect_view.render(led)
    assert "Tensor split (-sm tensor)" in text and "Meta(): model 59.47" in text


def test_meta_buffers_whose_devices_the_log_does_not_name_stay_one_device():
    led = parse_fixture("tp-2026-05-meta-rs-excerpt")
    assert list(led.devices) == ["Meta()"] and led.devices["Meta()"].rs_mib == 124.69
    assert led.meta["attributed"] is False and "names no member devices" in tensorsplit.meta_note(led.meta)


def test_meta_members_from_the_device_lines_or_from_a_named_meta_buffer():
    base = ["load_tensors:       Meta() model buffer size =  7218.64 MiB",
            "sched_reserve:     Meta() compute buffer size =  1000.00 MiB"]
    explicit = ["llama_prepare_model_devices: creating a Meta device with 2 devices",
                "llama_prepare_model_devices: - device 0: CUDA0", "llama_prepare_model_devices: - device 1: CUDA1"]
    led = parse(explicit + base)
    assert {n: b.compute_mib for n, b in led.devices.items()} == {"CUDA0": 1000.0, "CUDA1": 1000.0}
    # should llama.cpp name the buffer type after its devices, the name says which they are
    led = parse([line.replace("Meta()", "Meta(ROCm0,ROCm1,ROCm2)") for line in base], tensor_split=[2, 1, 1])
    assert {n: b.model_mib for n, b in led.devices.items()} == {"ROCm0": 7218.64, "ROCm1": 3609.32, "ROCm2": 3609.32}


def test_pipeline_parallelism_dropped_by_llama_cpp_is_off_and_inspect_says_why():
    led = parse_fixture("rpc-b11312-pp-dropped")
    assert led.pipeline_parallel is False and led.pp_retry and led.sched_copies == 1
    assert ledger.pp_label_of(led.to_json()) == ledger.DROPPED  # not "on, 1 copy": llama.cpp gave it up
    text = inspect_view.render(led)
    assert "Pipeline parallelism: DROPPED" in text and "failed to allocate RPC0[127.0.0.1:51812] buffer" in text
    assert "This run failed" not in text  # the retry loaded: an allocation failed on the way, the run did not
    failed = parse_fixture("rpc-b11312-pp-dropped-then-failed")
    assert failed.context_failed and "This run failed: out of memory" in inspect_view.render(failed)


def test_input_buffers_are_their_own_figure():
    led = parse_fixture("cuda-2024-01-input-buffer")
    host = led.host["CUDA_Host"]
    assert (host.input_mib, host.compute_mib, host.total()) == (6.01, 5.0, 11.01)
    assert "input" in inspect_view.render(led) and led.to_json()["host"]["CUDA_Host"]["input_mib"] == 6.01


def test_ollama_engine_records_fill_the_ledger():
    led = parse_fixture("ollama-2025-09-engine-journald")
    cpu = led.host["CPU"]
    assert (cpu.model_mib, cpu.kv_mib, cpu.compute_mib) == (13107.2, 300.0, 109.2) and led.wrapper == "ollama"
    assert (led.layers_offloaded, led.layers_total) == (0, 25)  # llama.cpp's words inside msg="…"
    assert "ollama" in inspect_view.render(led)


def test_ollama_records_repeat_whole_and_the_last_stands():
    rec = 'time=2025-07-18T14:50:57.066Z level=INFO source=ggml.go:365 msg="model weights" buffer={} size="{}"'
    graph = 'time=2025-07-18T14:50:58.130Z level=INFO source=ggml.go:672 msg="compute graph" backend={} ' \
            'buffer_type={} size="{}"'
    lines = [rec.format("CUDA0", "11.5 GiB"), graph.format("CUDA0", "CUDA0", "0 B"),
             graph.format("CPU", "CUDA_Host", "8.0 MiB"),
             graph.format("CUDA0", "CUDA0", "1.2 GiB"), graph.format("CPU", "CUDA_Host", "24.0 MiB")]
    led = parse(lines)
    assert led.devices["CUDA0"].compute_mib == 1228.8 and led.host["CUDA_Host"].compute_mib == 24.0
    assert led.devices["CUDA0"].model_mib == 11776.0


def test_logfmt_values_unquote_like_go():
    rec = rawlines.logfmt('time=x level=ERROR source=sched.go:1 msg="error loading llama server" '
                        'error="llama runner process has terminated: \\"out of memory\\"\\nline two" n=3')
    assert rec["msg"] == "error loading llama server" and rec["n"] == "3"
    assert rec["error"] == 'llama runner process has terminated: "out of memory"\nline two'
    assert rawlines.logfmt("llama_context: n_ctx = 4096") is None


def test_the_models_metadata_behind_a_journald_prefix_is_never_a_buffer():
    lines = lines_of("ollama-2024-01-journald-cuda")
    hostile = ("Jan 30 09:12:13 ollama-host ollama[5307]: llama_model_loader: - kv   1: general.name str = "
               "CUDA7 model buffer size = 999.00 MiB")
    assert "CUDA7" not in parse([hostile, *lines]).devices
    assert parse(lines).wrapper == "ollama"


def test_every_host_buffer_type_is_kept_apart():
    led = parse_fixture("rpc-b11312-cpu-repack")
    assert {n: b.model_mib for n, b in led.host.items() if b.model_mib} == {"CPU_Mapped": 205.82, "CPU_REPACK": 7.73}
    amx = parse_fixture("cpu-2026-amx-model-buffer")
    assert {n: b.model_mib for n, b in amx.host.items()} == {"AMX": 1325.25, "CPU_Mapped": 1186.25}
    text = inspect_view.render(led)
    assert "CPU_REPACK" in text


# NVML's per-process figure while each H200 server ran (tests/fixtures/logs/SOURCES.md)
H200_NVML_MIB = {"cuda-b11312-h200-sm-tensor": 19980, "cuda-b11312-h200-sm-tensor-ts31": 19978}


@pytest.mark.parametrize("name, ts, per_device", [
    # equal shares: every device holds the printed part of each buffer
    ("cuda-b11312-h200-sm-tensor", None, [(7218.64, 2304.00, 128.01), (7218.64, 2304.00, 128.01)]),
    # -ts 3,1: the printed figures are CUDA0's; CUDA1 holds the rest of the 4,608 MiB cache and a third of CUDA0's
    # weights (an estimate: mirrored tensors are not in the log), and the same compute buffer
    ("cuda-b11312-h200-sm-tensor-ts31", [3.0, 1.0], [(10827.39, 3456.00, 128.01), (3609.13, 1152.00, 128.01)]),
])
def test_meta_buffers_on_cuda_as_the_h200_printed_them(name, ts, per_device):
    """Real CUDA logs of `-sm tensor` on the H200 (two virtual devices): the Meta() lines land on CUDA0 and CUDA1,
    and what the ledger holds on the devices stays within NVML's figure for the process (the rest is the CUDA
    contexts and what the log cannot show)."""
    led = parse(lines_of(name), tensor_split=ts)
    assert led.meta["devices"] == ["CUDA0", "CUDA1"] and "Meta()" not in led.devices
    got = [(led.devices[d].model_mib, led.devices[d].kv_mib, led.devices[d].compute_mib) for d in ("CUDA0", "CUDA1")]
    assert got == per_device
    assert led.sched_copies == 1 and led.n_ctx == 32768
    on_gpu = sum(m + k + c for m, k, c in got)
    assert 0 < H200_NVML_MIB[name] - on_gpu < 1024
