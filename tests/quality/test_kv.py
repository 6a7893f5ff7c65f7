"""KV cache quality's cache key and arguments (quality/kv.py, quality/kld.py): a result is kept per model file, text,
pair, build and backend (issue 44: the build and the backend were not in the key), and llama-perplexity gets the
study's devices. The runs themselves are in tests/e2e/test_tune_upgrade_e2e.py and test_tune_race_e2e.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from llamalab.quality import kld
from llamalab.quality import kv as quality

RUNS = quality.Runs(binary=Path("/b/llama-perplexity"), env={}, build="b11312-aee7bccd50/cpu-rpc-9ff9693eff",
                    backend="cpu-rpcx2")


def test_the_cache_holds_the_build_and_the_backend(tmp_path):
    here = quality.cache_folder(tmp_path, "fp", "corpus", RUNS)
    assert here.parent == tmp_path / "quality" and here.name.startswith("fp-corpus-c256x8-")
    assert quality.cache_folder(tmp_path, "fp", "corpus", dataclasses.replace(RUNS)) == here
    others = {quality.cache_folder(tmp_path, "fp", "corpus", dataclasses.replace(RUNS, **change))
              for change in ({"build": "b11434-0000000000/cpu-rpc-9ff9693eff"}, {"backend": "cudax2"},
                             {"backend": "cpu-rpcx1"})}
    assert here not in others and len(others) == 3


def test_every_run_gets_the_studys_devices():
    dev = ("--rpc", "127.0.0.1:5001,127.0.0.1:5002")
    base = kld.base_argv(Path("/b/llama-perplexity"), Path("m.gguf"), Path("c.txt"), Path("base.kld"), dev)
    pair = kld.pair_argv(Path("/b/llama-perplexity"), Path("m.gguf"), Path("base.kld"), "q8_0/q4_0", dev)
    for argv in (base, pair):
        i = argv.index("--rpc")
        assert argv[i + 1] == dev[1] and argv[argv.index("-ngl") + 1] == "999" and argv[argv.index("-lv") + 1] == "4"
    assert pair[-4:] == ["-ctk", "q8_0", "-ctv", "q4_0"] and "--kl-divergence-base" in base
