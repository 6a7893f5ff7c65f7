"""GGUF models: metadata of any file (via `gguf`), and deterministic synthetic llama models.

Synthetic weights are tiled from one seeded pool of random f16 values, so an 8B-shape model is written at
disk speed while every matrix still holds non-trivial data (dense kernels run as on a real model). A
header-only stand-in (`data=False`) has the real size as a sparse file: enough for a dry run, which never
reads tensor data.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .errors import ModelError


@dataclass(frozen=True)
class ModelShape:
    """Dimensions of a llama-architecture model."""

    name: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    seed: int = 1234
    rope_theta: float = 1_000_000.0

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def n_params(self) -> int:
        d, kv = self.n_embd, self.n_head_kv * self.head_dim
        per_layer = d * d * 2 + d * kv * 2 + 3 * d * self.n_ff + 2 * d
        return self.n_layer * per_layer + 2 * self.n_vocab * d + d

    def key(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True) + f"|writer={WRITER_VERSION}"
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


WRITER_VERSION = 1

PRESETS: dict[str, ModelShape] = {
    # Small enough for a 2-core CPU, large enough that compute buffers are tens of MiB.
    "tiny": ModelShape("tiny", n_layer=8, n_embd=512, n_head=8, n_head_kv=4, n_ff=1536, n_vocab=32000,
                       n_ctx_train=65536),
    # The dimensions of a common 8B dense model (Qwen3-8B-like): 36 layers, 4096 wide, 32/8 heads.
    "8b": ModelShape("8b", n_layer=36, n_embd=4096, n_head=32, n_head_kv=8, n_ff=12288, n_vocab=151936,
                     n_ctx_train=131072),
}


def preset(name: str) -> ModelShape:
    try:
        return PRESETS[name]
    except KeyError:
        raise ModelError(f"unknown synthetic model preset {name!r}",
                         tip=f"use one of: {', '.join(PRESETS)}; or pass --model PATH to a GGUF file.") from None


# ---------------------------------------------------------------- synthetic writer


def _vocab(n: int) -> tuple[list[str], list[float], list[int]]:
    """An SPM vocabulary: <unk> <s> </s>, 256 byte tokens, then distinct word pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256  # UNKNOWN, CONTROL, CONTROL, BYTE…
    letters = "abcdefghijklmnopqrstuvwxyz"
    i = 0
    while len(tokens) < n:
        word, k = "", i
        while True:
            word = letters[k % 26] + word
            k = k // 26 - 1
            if k < 0:
                break
        tokens.append("\u2581" + word)
        types.append(1)
        i += 1
    tokens, types = tokens[:n], types[:n]
    scores = [0.0] * 3 + [-1000.0] * 256 + [-float(j) for j in range(max(0, n - 259))]
    return tokens, scores[:n], types


def _tensors(shape: ModelShape) -> list[tuple[str, tuple[int, ...], type]]:
    """(name, numpy shape, dtype) in file order. Numpy shape is GGUF's ne reversed."""
    d, kv = shape.n_embd, shape.n_head_kv * shape.head_dim
    out: list[tuple[str, tuple[int, ...], type]] = [("token_embd.weight", (shape.n_vocab, d), np.float16)]
    for i in range(shape.n_layer):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", (d,), np.float32),
            (p + "attn_q.weight", (d, d), np.float16),
            (p + "attn_k.weight", (kv, d), np.float16),
            (p + "attn_v.weight", (kv, d), np.float16),
            (p + "attn_output.weight", (d, d), np.float16),
            (p + "ffn_norm.weight", (d,), np.float32),
            (p + "ffn_gate.weight", (shape.n_ff, d), np.float16),
            (p + "ffn_up.weight", (shape.n_ff, d), np.float16),
            (p + "ffn_down.weight", (d, shape.n_ff), np.float16),
        ]
    out += [("output_norm.weight", (d,), np.float32), ("output.weight", (shape.n_vocab, d), np.float16)]
    return out


POOL = 1 << 20  # values in the random pool


def write_synthetic(shape: ModelShape, path: Path, *, data: bool = True) -> Path:
    """Write a llama GGUF of `shape` to `path` (atomically). `data=False` leaves tensor data as a sparse hole."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name(f"llamalab synthetic {shape.name}")
    w.add_context_length(shape.n_ctx_train)
    w.add_embedding_length(shape.n_embd)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(shape.n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    tokens, scores, types = _vocab(shape.n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    specs = _tensors(shape)
    for name, shp, dt in specs:
        w.add_tensor_info(name, shp, np.dtype(dt), int(np.prod(shp)) * np.dtype(dt).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    align = w.data_alignment
    rng = np.random.default_rng(shape.seed)
    pool16 = (rng.standard_normal(POOL) * 0.02).astype(np.float16).tobytes()
    pool16 = pool16 + pool16  # so any offset has POOL values after it
    ones32 = np.ones(shape.n_embd, dtype=np.float32).tobytes()
    pos = fout.tell()
    pos += (-pos) % align
    if data:
        fout.write(b"\0" * ((-fout.tell()) % align))
    for idx, (name, shp, dt) in enumerate(specs):
        nbytes = int(np.prod(shp)) * np.dtype(dt).itemsize
        if data:
            if dt is np.float32:
                fout.write(ones32)
            else:
                offset = (idx * 7919 % POOL) * 2
                left = nbytes
                while left:
                    n = min(left, POOL * 2)
                    fout.write(pool16[offset:offset + n])
                    left -= n
            fout.write(b"\0" * ((-nbytes) % align))
        pos += nbytes + (-nbytes) % align
    fout.flush()
    if not data:
        fout.truncate(pos)
    w.close()
    os.replace(tmp, path)
    return path


def synthetic(shape: ModelShape, home: Path, *, data: bool = True) -> Path:
    """The cached synthetic model file for `shape` (written on first use)."""
    suffix = "" if data else "-header"
    path = home / "models" / f"synthetic-{shape.name}-{shape.key()}{suffix}.gguf"
    if not path.is_file():
        write_synthetic(shape, path, data=data)
    return path


# ---------------------------------------------------------------- reading any GGUF


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    size_bytes: int
    architecture: str
    name: str | None
    n_layer: int | None
    n_embd: int | None
    n_head: int | None
    n_head_kv: int | None
    n_ctx_train: int | None
    n_vocab: int | None
    n_tensors: int
    fingerprint: str
    splits: int = 1

    @property
    def head_dim(self) -> int | None:
        return self.n_embd // self.n_head if self.n_embd and self.n_head else None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


def fingerprint(path: Path) -> str:
    """sha256 of the size, the first 16 MiB and the last 1 MiB: identifies a model file in seconds."""
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(16 << 20))
        if size > (17 << 20):
            f.seek(size - (1 << 20))
            h.update(f.read())
    return h.hexdigest()[:16]


def read_info(path: Path) -> ModelInfo:
    """Metadata of a GGUF file; raises ModelError with a tip for a missing, non-GGUF or truncated file."""
    from . import standin  # reads the header alone: seconds faster than gguf.GGUFReader on 150k-token vocabularies

    path = Path(path).expanduser()
    standin.check_file(path)  # missing, a symlink loop, a directory, a FIFO: said before anything opens it
    with standin.open_file(path) as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelError(
            f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF').",
            tip="llama.cpp loads GGUF models only; convert safetensors with llama.cpp's convert_hf_to_gguf.py.")
    try:
        hdr = standin.read_header(path)
    except standin.HeaderIncomplete as e:
        raise ModelError(f"{path} is not a readable GGUF file: {e.message}",
                         tip="the file may be truncated or still downloading; download it again.") from e
    except ModelError as e:
        raise ModelError(f"{path} is not a readable GGUF file: {e.message}", tip=e.tip) from e
    except Exception as e:  # struct errors, bad UTF-8 … on damaged headers
        raise ModelError(f"{path} is not a readable GGUF file: {e}",
                         tip="the file may be truncated or still downloading; download it again.") from e
    size = path.stat().st_size
    end = hdr.layout.data_offset + max((off + n for _, off, n in hdr.tensors), default=0)
    split_count = hdr.kv.get("split.count")
    if end > size:
        raise ModelError(
            f"{path} is truncated: its tensors need {end:,} bytes but the file has {size:,}.",
            tip="download it again (compare its size with the one the publisher lists); to plan from the start of "
                "a file only, use `llamalab plan --model` or `llamalab stub`.")
    arch = hdr.kv.get("general.architecture") or "unknown"

    def a(key: str):
        v = hdr.kv.get(f"{arch}.{key}")
        return None if isinstance(v, standin.ArrayInfo) else v

    n_vocab = a("vocab_size")
    if n_vocab is None:
        toks = hdr.kv.get("tokenizer.ggml.tokens")
        n_vocab = len(toks) if toks is not None else None
    head_kv = a("attention.head_count_kv")
    name = hdr.kv.get("general.name")
    return ModelInfo(
        path=path.resolve(), size_bytes=size, architecture=str(arch), name=name if isinstance(name, str) else None,
        n_layer=a("block_count"), n_embd=a("embedding_length"), n_head=a("attention.head_count"),
        n_head_kv=head_kv if not isinstance(head_kv, list) else max(head_kv),
        n_ctx_train=a("context_length"), n_vocab=n_vocab, n_tensors=len(hdr.tensors),
        fingerprint=fingerprint(path), splits=int(split_count) if split_count else 1,
    )


def _field(reader, key: str):
    f = reader.fields.get(key)
    if f is None:
        return None
    try:
        v = f.contents()
    except Exception:
        return None
    if isinstance(v, (bytes, bytearray)):
        return v.decode("utf-8", "replace")
    return v
