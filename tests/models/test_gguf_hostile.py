"""Issue 17 item 7: the GGUF header reader on damaged and hostile files. Every case is a real file on disk read by
the real CLI (`llamalab stub`) or the functions `plan` and `run` use (standin.ensure, models.read_info): a clear
ModelError with a tip, in bounded time and memory, never a traceback, a hang or a huge allocation."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from llamalab.core.errors import ModelError
from llamalab.models import gguf as gguf_mod
from llamalab.models import standin
from llamalab.models import synthetic as models

SMALL = models.ModelShape("t", n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_vocab=600, n_ctx_train=512)


def gguf_string(s: bytes | str) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv(key: str, vtype: int, payload: bytes) -> bytes:
    return gguf_string(key) + struct.pack("<I", vtype) + payload


def tensor(name: str, ne: list[int], ggml_type: int = 0, offset: int = 0) -> bytes:
    return gguf_string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", d) for d in ne) \
        + struct.pack("<IQ", ggml_type, offset)


def gguf(kvs: list[bytes], tensors: list[bytes], n_kv: int | None = None, n_tensors: int | None = None) -> bytes:
    return (b"GGUF" + struct.pack("<IQQ", 3, len(tensors) if n_tensors is None else n_tensors,
                                  len(kvs) if n_kv is None else n_kv) + b"".join(kvs) + b"".join(tensors))


ARCH = kv("general.architecture", 8, gguf_string("llama"))


def stub_cli(model: Path, out: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llamalab.cli", "stub", str(model), "-o", str(out)],
                          capture_output=True, text=True, timeout=timeout)


def refused(done: subprocess.CompletedProcess, *words: str) -> str:
    err = done.stderr
    assert done.returncode == 2, err
    assert "Traceback" not in err and "tip:" in err.lower(), err
    for w in words:
        assert w in err, err
    return err


def test_a_huge_string_in_a_2_gb_sparse_file_costs_no_memory(tmp_path):
    """The issue's case: a key claiming a 2^62-byte string; the old reader grew its buffer to the file size."""
    p = tmp_path / "huge-string.gguf"
    with open(p, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 62))
        f.truncate(2 << 30)
    tracemalloc.start()
    with pytest.raises(ModelError, match="damaged") as e:
        models.read_info(p)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 << 20 and e.value.tip
    refused(stub_cli(p, tmp_path / "out.gguf"), "damaged", "2^62" if False else "4,611,686,018,427,387,904")


def test_long_arrays_in_a_sparse_file_are_skipped_not_read(tmp_path):
    """An array of 900 million bytes inside a 2 GB sparse file: seeked over, never held in memory."""
    p = tmp_path / "long-array.gguf"
    n = 900_000_000
    with open(p, "wb") as f:
        f.write(gguf([ARCH, kv("x.bytes", 9, struct.pack("<IQ", 0, n))], []))
        f.truncate(2 << 30)
    tracemalloc.start()
    hdr = gguf_mod.read_header(p)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert hdr.kv["x.bytes"] == gguf_mod.ArrayInfo(0, n) and peak < 16 << 20


def test_a_tensor_with_zero_dimensions_is_one_element_as_in_llama_cpp(tmp_path):
    """n_dims = 0 (the old reader's IndexError): llama.cpp reads it as a scalar, and so does the stand-in."""
    p = tmp_path / "scalar.gguf"
    p.write_bytes(gguf([ARCH], [tensor("s", [], ggml_type=0)]))
    hdr = gguf_mod.read_header(p)
    assert hdr.tensors == (("s", 0, 4),) and hdr.layout.data_size == 32
    done = stub_cli(p, tmp_path / "out.gguf")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.gguf").stat().st_size == hdr.layout.file_size


DAMAGED = [
    ("alignment 0", gguf([ARCH, kv("general.alignment", 4, struct.pack("<I", 0))], [tensor("a", [4])]),
     ["general.alignment is 0, not a power of 2"]),
    ("alignment 48", gguf([ARCH, kv("general.alignment", 4, struct.pack("<I", 48))], [tensor("a", [4])]),
     ["not a power of 2"]),
    ("nested arrays", gguf([ARCH, kv("x.deep", 9, struct.pack("<IQ", 9, 1) * 5000)], []), ["array of arrays"]),
    ("huge offset", gguf([ARCH], [tensor("a", [4], offset=1 << 62)]), ["offset 4,611,686,018,427,387,904"]),
    ("offsets out of order", gguf([ARCH], [tensor("a", [8]), tensor("b", [8], offset=0)]), ["llama.cpp expects 32"]),
    ("huge tensor", gguf([ARCH], [tensor("a", [1 << 40, 1 << 20])]), ["its tensors would take"]),
    ("five dimensions", gguf([ARCH], [tensor("a", [1, 1, 1, 1, 1])]), ["5 dimensions"]),
    ("negative dimension", gguf([ARCH], [tensor("a", [-4])]), ["negative dimension"]),
    ("row not a block multiple", gguf([ARCH], [tensor("a", [33], ggml_type=2)]), ["not a multiple of its block size"]),
    ("unknown tensor type", gguf([ARCH], [tensor("a", [4], ggml_type=999)]), ["type 999"]),
    ("duplicate key", gguf([ARCH, ARCH], []), ["appears twice"]),
    ("duplicate tensor", gguf([ARCH], [tensor("a", [8]), tensor("a", [8], offset=32)]), ["appears twice"]),
    ("a trillion keys", gguf([ARCH], [], n_kv=10**12), ["1,000,000,000,000 metadata keys"]),
    ("a trillion tensors", gguf([ARCH], [], n_tensors=10**12), ["1,000,000,000,000 tensors"]),
    ("a trillion strings", gguf([ARCH, kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 10**12))], []),
     ["1,000,000,000,000 strings"]),
]


@pytest.mark.parametrize("case, data, words", DAMAGED, ids=[c[0] for c in DAMAGED])
def test_damaged_headers_are_refused_with_a_tip(tmp_path, case, data, words):
    p = tmp_path / "bad.gguf"
    p.write_bytes(data)
    with pytest.raises(ModelError) as e:  # what `plan` does with --model
        standin.ensure(p, tmp_path / "home")
    assert all(w in e.value.message for w in words), e.value.message
    assert e.value.tip
    with pytest.raises(ModelError) as e:  # what `run` does with --model
        models.read_info(p)
    assert all(w in e.value.message for w in words) and e.value.tip
    refused(stub_cli(p, tmp_path / "out.gguf"), *words)  # the CLI
    assert not (tmp_path / "out.gguf").exists() and not (tmp_path / "out.gguf.part").exists()


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    t = time.monotonic()
    refused(stub_cli(fifo, tmp_path / "out.gguf", timeout=30), "is a FIFO (named pipe), not a GGUF file")
    for fn in (models.read_info, lambda p: standin.ensure(p, tmp_path)):
        with pytest.raises(ModelError, match="FIFO"):
            fn(fifo)
    assert time.monotonic() - t < 20


def test_a_fifo_model_stops_run_before_anything_is_fetched_or_built(tmp_path):
    """`llamalab run` reads the model's header first: an empty LLAMALAB_HOME stays empty (no download, no build)."""
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    home = tmp_path / "home"
    env = {**os.environ, "LLAMALAB_HOME": str(home), "LLAMALAB_DATA": str(tmp_path / "data")}
    done = subprocess.run([sys.executable, "-m", "llamalab.cli", "run", "demo", "--model", str(fifo)],
                          capture_output=True, text=True, timeout=60, env=env)
    refused(done, "FIFO")
    assert not home.exists() or not any(home.rglob("*"))


def test_a_symlink_loop_is_called_a_symlink_loop(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.symlink_to(b)
    b.symlink_to(a)
    refused(stub_cli(a, tmp_path / "out.gguf"), "symlink loop")
    for fn in (models.read_info, lambda p: standin.ensure(p, tmp_path)):
        with pytest.raises(ModelError, match="symlink loop") as e:
            fn(a)
        assert "does not exist" not in e.value.message


def test_a_missing_model_and_a_directory_are_named(tmp_path):
    refused(stub_cli(tmp_path / "nope.gguf", tmp_path / "out.gguf"), "does not exist")
    refused(stub_cli(tmp_path, tmp_path / "out.gguf"), "is a directory")


def test_a_real_model_and_its_head_still_work(tmp_path):
    full = models.write_synthetic(SMALL, tmp_path / "full.gguf")
    lay = gguf_mod.read_layout(full)
    head = tmp_path / "head.gguf"
    head.write_bytes(full.read_bytes()[: lay.data_offset + 10])
    done = stub_cli(head, tmp_path / "out.gguf")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.gguf").stat().st_size == full.stat().st_size
    assert models.read_info(tmp_path / "out.gguf").n_layer == 2


def test_reading_a_header_from_a_growing_file_does_not_hang(tmp_path):
    """A head being written while it is read: what is there is read, the rest is 'incomplete', in bounded time."""
    full = models.write_synthetic(SMALL, tmp_path / "full.gguf")
    data = full.read_bytes()[:2000]
    p = tmp_path / "growing.gguf"
    p.write_bytes(data[:100])
    stop = threading.Event()

    def grow():
        with open(p, "ab") as f:
            for i in range(100, 2000, 100):
                if stop.is_set():
                    return
                f.write(data[i:i + 100])
                f.flush()
                time.sleep(0.01)

    th = threading.Thread(target=grow)
    th.start()
    try:
        with pytest.raises(ModelError):
            gguf_mod.read_header(p)
    finally:
        stop.set()
        th.join()
