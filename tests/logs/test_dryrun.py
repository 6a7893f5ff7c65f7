"""logs.dryrun: llama-server's no-alloc dry run read from real logs (tests/fixtures/tune: llama-server -lv 5
stopped after its fit; tests/fixtures/logs: full loads and failures). The lines a dry run shares with any load are
read by the ledger's readers, so the two readers agree on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamalab.logs import dryrun, ledger, patterns
from testpaths import FIXTURES

TUNE_LOGS = sorted((FIXTURES / "tune").glob("*.log"))
OTHER_LOGS = sorted((FIXTURES / "logs").glob("*.log"))


def lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


def test_the_fixtures_are_there():
    assert len(TUNE_LOGS) >= 8 and len(OTHER_LOGS) >= 30


@pytest.mark.parametrize("path", TUNE_LOGS, ids=lambda p: p.name)
def test_a_tune_dry_run_agrees_with_the_ledger(path):
    ls = lines(path)
    dr, led = dryrun.parse_dry_run(ls), ledger.parse(ls)
    assert dr.error is None and dr.finished and dr.fit_ok is True and dr.measurements == 1
    assert (dr.n_ctx, dr.n_ctx_train, dr.n_embd) == (led.n_ctx, led.n_ctx_train, led.n_embd)
    assert (dr.sched_copies, dr.graph_splits, dr.n_ubatch) == (led.sched_copies, led.graph_splits, led.n_ubatch)
    assert led.kv is not None and led.kv.layers == sum(d.kv_layers for d in dr.devices)
    assert round(sum(d.context_mib or 0 for d in dr.devices), 2) == led.kv.size_mib
    assert dr.devices and all(d.name in led.device_memory for d in dr.devices)
    for d in dr.devices:
        assert (d.total_mib, d.free_mib) == led.device_memory[d.name]
        assert d.model_mib is not None and d.compute_mib is not None and d.used_mib is not None


def test_the_context_follows_the_file_name():
    for path in TUNE_LOGS:
        assert f"-c{dryrun.parse_dry_run(lines(path)).n_ctx}." in path.name


def test_kv_layers_split_by_ts():
    dr = dryrun.parse_dry_run(lines(FIXTURES / "tune" / "dry-tiny-layer-ts5,4-ub256-q8_0-q8_0-c43520.log"))
    assert [(d.name, d.kv_layers) for d in dr.devices] == [("RPC0", 5), ("RPC1", 3)]
    assert [d.context_mib for d in dr.devices] == [112.89, 67.73]
    assert dr.pipeline_parallel is True and dr.kv_unified is True and dr.n_seq_max == 2


def test_one_device_without_pipeline():
    dr = dryrun.parse_dry_run(lines(FIXTURES / "tune" / "dry-tiny-none-mg0-ub512-f16-c16384.log"))
    assert len(dr.devices) == 1 and dr.devices[0].kv_layers == 8 and dr.sched_copies == 1


@pytest.mark.parametrize("path", OTHER_LOGS, ids=lambda p: p.name)
def test_any_log_reads_without_raising(path):
    dr = dryrun.parse_dry_run(lines(path))
    assert dr.error is not None or dr.devices or dr.host.compute_mib is not None or dr.host_buffers
    # a log with no breakdown table has no figures, and says why
    if not any("memory breakdown [MiB]" in ln for ln in lines(path)):
        assert dr.error and not dr.devices


def test_a_log_that_failed_says_why():
    dr = dryrun.parse_dry_run(lines(FIXTURES / "logs" / "cpu-b11312-not-gguf.log"))
    assert dr.error and "GGUF" in dr.error


def test_real_load_lines():
    assert dryrun.real_load("load_tensors: loading model tensors, this can take a while... (mmap = true, "
                            "direct_io = false, load_mode = mmap)")
    assert not dryrun.real_load("load_tensors: loading model tensors, this can take a while... (load_mode = none)")
    assert dryrun.real_load("main: server is listening on http://127.0.0.1:8080")
    assert not any(dryrun.real_load(ln) for path in TUNE_LOGS for ln in lines(path))
    assert all(any(dryrun.END_OF_FIT in ln for ln in lines(path)) for path in TUNE_LOGS)


def test_the_ledgers_line_readers():
    kv = ("llama_kv_cache: size =  512.00 MiB ( 65536 cells,   8 layers,  2/1 seqs), K (f16):  256.00 MiB, "
          "V (f16):  256.00 MiB")
    assert patterns.kv_cache_size(kv) == ("kv", 512.0, 65536, 8)
    assert patterns.kv_cache_size("llama_memory_recurrent: size = 3.00 MiB (2 cells, 24 layers, 2 seqs), "
                                "R (f32): 1.00 MiB, S (f32): 2.00 MiB")[0] == "rs"
    assert patterns.kv_cache_size("llama_kv_cache: size = 512.00 MiB") is None
    assert patterns.context_value("llama_context: n_ctx                 = 16384") == ("n_ctx", "16384")
    assert patterns.context_value("llama_context: n_ctx_seq (16384) < n_ctx_train (65536) -- the full capacity") is None
    assert patterns.model_shape("print_info: n_ctx_train           = 65536") == ("n_ctx_train", 65536)
    assert patterns.sched_copies("sched_reserve: sched copies = 4") == 4
    assert patterns.graph_splits("sched_reserve: graph: nodes = 254, splits = 3, input objects = 4") == 3
    assert patterns.numbers("  24105 = 23900 + (  123 =   100 +   20 +    3) +  -1 |") == [
        24105.0, 23900.0, 123.0, 100.0, 20.0, 3.0, -1.0]
