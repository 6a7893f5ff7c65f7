"""GGUF models: metadata of any file (via `gguf`), and deterministic synthetic models (llama, the hybrid
Qwen3.5/3.6 `qwen35` architecture: gated-delta-net linear attention with a full-attention layer every 4th, and the
mixture-of-experts `qwen3moe`: shared attention layers, a router and per-layer experts in 3-D tensors).

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
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from ..core.errors import ModelError

if TYPE_CHECKING:
    import gguf


@dataclass(frozen=True)
class HybridSpec:
    """The linear-attention (gated delta net) part of a `qwen35` model, as its GGUF keys name it."""

    head_dim: int  # attention.key_length = value_length of the full-attention layers
    rope_dim: int  # rope.dimension_count (partial rotary)
    rope_sections: tuple[int, int, int, int]  # rope.dimension_sections (multi-section rope)
    ssm_conv_kernel: int
    ssm_state_size: int  # head dim of the linear attention's keys and values
    ssm_group_count: int  # key heads
    ssm_time_step_rank: int  # value heads
    full_attention_interval: int = 4  # every Nth layer is full attention, the rest linear

    @property
    def ssm_inner_size(self) -> int:
        return self.ssm_state_size * self.ssm_time_step_rank


@dataclass(frozen=True)
class MoeSpec:
    """The mixture-of-experts part of a `qwen3moe` model (Qwen3-30B-A3B's family), as its GGUF keys name it. Every
    layer's feed-forward is experts only (no shared expert, no dense layer); attention, norms and the router are
    the layers' shared part."""

    n_expert: int  # expert_count
    n_expert_used: int  # expert_used_count: experts per token
    n_ff_exp: int  # expert_feed_forward_length: each expert's hidden size
    head_dim: int  # attention.key_length = value_length (not n_embd / n_head in Qwen3)


EXPERT_TENSORS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")  # what --n-cpu-moe keeps in host memory


@dataclass(frozen=True)
class ModelShape:
    """Dimensions of a model: llama (dense), `qwen35` with `hybrid` set, or `qwen3moe` with `moe` set."""

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
    arch: str = "llama"
    hybrid: HybridSpec | None = None
    wtype: str = "f16"  # the weight matrices: f16, or a quantized type of QUANT (norms, vectors, router stay f32)
    moe: MoeSpec | None = None

    @property
    def head_dim(self) -> int:
        if self.hybrid:
            return self.hybrid.head_dim
        return self.moe.head_dim if self.moe else self.n_embd // self.n_head

    def n_params(self) -> int:
        return sum(int(np.prod(shp)) for _, shp, _ in _tensors(self))

    def tensor_bytes(self) -> int:
        return sum(_layout(self, shp, dt)[1] for _, shp, dt in _tensors(self))

    def key(self) -> str:
        d = asdict(self)
        if self.arch == "llama" and self.hybrid is None and self.wtype == "f16":  # keys of the first presets stay
            d.pop("arch"), d.pop("hybrid"), d.pop("wtype")
        if self.moe is None:
            d.pop("moe", None)
        blob = json.dumps(d, sort_keys=True) + f"|writer={WRITER_VERSION}"
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


WRITER_VERSION = 1

# Quantized weight types the writer can produce: (ggml type name, values per block, bytes per block, where the
# block's f16 scales are: d, and dmin for the K quants that have one; ggml-common.h's block_* structs).
QUANT: dict[str, tuple[str, int, int, tuple[int, int | None]]] = {
    "q8_0": ("Q8_0", 32, 34, (0, None)),
    "q6_k": ("Q6_K", 256, 210, (208, None)),
    "q5_k": ("Q5_K", 256, 176, (0, 2)),
    "q4_k": ("Q4_K", 256, 144, (0, 2)),
    "q4_0": ("Q4_0", 32, 18, (0, None)),
    "q3_k": ("Q3_K", 256, 110, (108, None)),
    "q2_k": ("Q2_K", 256, 84, (80, 82)),
}


def _layout(shape: ModelShape, shp: tuple[int, ...], dt: type) -> tuple[str, int]:
    """(ggml type of a tensor, its bytes): f16 matrices (2-D, and the experts' 3-D stacks) take the shape's wtype
    where their rows divide into blocks."""
    n = int(np.prod(shp))
    if shape.wtype != "f16" and dt is np.float16 and len(shp) >= 2:
        name, per, size, _ = QUANT[shape.wtype]
        if shp[-1] % per == 0:
            return name, n // per * size
    return ("F16" if dt is np.float16 else "F32"), n * np.dtype(dt).itemsize

PRESETS: dict[str, ModelShape] = {
    # Small enough for a 2-core CPU, large enough that compute buffers are tens of MiB.
    "tiny": ModelShape("tiny", n_layer=8, n_embd=512, n_head=8, n_head_kv=4, n_ff=1536, n_vocab=32000,
                       n_ctx_train=65536),
    # The dimensions of a common 8B dense model (Qwen3-8B-like): 36 layers, 4096 wide, 32/8 heads.
    "8b": ModelShape("8b", n_layer=36, n_embd=4096, n_head=32, n_head_kv=8, n_ff=12288, n_vocab=151936,
                     n_ctx_train=131072),
    # Qwen3.6 27B's shape (the model of the study that started llamalab): the hybrid `qwen35` architecture, 64
    # layers (48 gated-delta-net linear-attention layers, a full-attention layer every 4th: 16 with a KV cache).
    # Sources: 64 layers, 5120 wide, vocabulary 248320 from Qwen3.5-27B's training recipe (THUDM/slime
    # scripts/models/qwen3.5-27B.sh: --num-layers 64 --hidden-size 5120 --ffn-hidden-size 17408
    # --num-attention-heads 24 --num-query-groups 4 --kv-channels 256 --rotary-percent 0.25 --vocab-size 248320);
    # the GGUF keys of a Qwen3.5/3.6 27B conversion as llama.cpp prints them (ggml-org/llama.cpp#22673):
    # feed_forward_length 17408, head_count 24, head_count_kv 4, key/value_length 256, rope.dimension_count 64,
    # rope.dimension_sections [11, 11, 10, 0], rope.freq_base 1e7, ssm.conv_kernel 4, ssm.state_size 128,
    # ssm.group_count 16, ssm.time_step_rank 48, ssm.inner_size 6144, full_attention_interval 4; context 262144.
    # Qwen3.6 27B keeps Qwen3.5 27B's architecture (llama.cpp loads both as qwen35; src/models/qwen35.cpp types
    # a 64-layer qwen35 as 27B). The original study ran Unsloth's UD-Q5_K_XL file (mixed ~5-6 bits); here every
    # weight matrix is Q5_K (5.5 bits per weight): 17.2 GiB of weights, a little under that file.
    "qwen36-27b": ModelShape(
        "qwen36-27b", n_layer=64, n_embd=5120, n_head=24, n_head_kv=4, n_ff=17408, n_vocab=248320,
        n_ctx_train=262144, rope_theta=10_000_000.0, arch="qwen35", wtype="q5_k",
        hybrid=HybridSpec(head_dim=256, rope_dim=64, rope_sections=(11, 11, 10, 0), ssm_conv_kernel=4,
                          ssm_state_size=128, ssm_group_count=16, ssm_time_step_rank=48)),
    # The same architecture scaled down (8 layers: 6 linear, 2 full attention) so that the qwen35 tensor set is
    # proven on a 2-core CPU by a real load and real requests.
    "qwen35-tiny": ModelShape(
        "qwen35-tiny", n_layer=8, n_embd=512, n_head=4, n_head_kv=2, n_ff=1536, n_vocab=32000, n_ctx_train=65536,
        rope_theta=10_000_000.0, arch="qwen35",
        hybrid=HybridSpec(head_dim=128, rope_dim=32, rope_sections=(6, 5, 5, 0), ssm_conv_kernel=4,
                          ssm_state_size=64, ssm_group_count=2, ssm_time_step_rank=4)),
    # Qwen3-30B-A3B's shape, the common mid-size MoE model: `qwen3moe`, 48 layers 2048 wide, 32 query heads and 4
    # KV heads of 128, 128 experts of 768 with 8 used per token, vocabulary 151936, untied output (Qwen3-30B-A3B's
    # training recipe, THUDM/slime scripts/models/qwen3-30B-A3B.sh: --num-layers 48 --hidden-size 2048
    # --ffn-hidden-size 6144 --num-attention-heads 32 --num-query-groups 4 --kv-channels 128 --moe-ffn-hidden-size
    # 768 --moe-router-topk 8 --num-experts 128 --vocab-size 151936 --rotary-base 1000000
    # --untie-embeddings-and-output-weights); context 40960 (its config.json's max_position_embeddings). Q8_0
    # weights, as commonly run: 30.5 B parameters, 30.3 GiB, so that two cards of 16 and 12 GiB cannot hold it
    # whole and --n-cpu-moe (experts of the first N layers in host memory) decides what fits.
    "30b-a3b": ModelShape(
        "30b-a3b", n_layer=48, n_embd=2048, n_head=32, n_head_kv=4, n_ff=6144, n_vocab=151936, n_ctx_train=40960,
        arch="qwen3moe", wtype="q8_0", moe=MoeSpec(n_expert=128, n_expert_used=8, n_ff_exp=768, head_dim=128)),
    # The same architecture scaled down for a 2-core CPU (8 layers, 8 experts of 512, 2 used per token): the
    # experts are 85% of the weights on the devices, so --n-cpu-moe moves most of a device's model buffer to the host.
    "qwen3moe-tiny": ModelShape(
        "qwen3moe-tiny", n_layer=8, n_embd=512, n_head=8, n_head_kv=4, n_ff=1536, n_vocab=32000, n_ctx_train=65536,
        arch="qwen3moe", moe=MoeSpec(n_expert=8, n_expert_used=2, n_ff_exp=512, head_dim=64)),
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


def _qwen35_tensors(shape: ModelShape) -> list[tuple[str, tuple[int, ...], type]]:
    """The tensors llama.cpp b11312 loads for `qwen35` (src/models/qwen35.cpp, load_arch_tensors), numpy order."""
    h = shape.hybrid
    assert h is not None
    d, hd = shape.n_embd, h.head_dim
    key_dim, value_dim = h.ssm_state_size * h.ssm_group_count, h.ssm_state_size * h.ssm_time_step_rank
    conv_dim = 2 * key_dim + value_dim
    out: list[tuple[str, tuple[int, ...], type]] = [("token_embd.weight", (shape.n_vocab, d), np.float16)]
    for i in range(shape.n_layer):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", (d,), np.float32), (p + "post_attention_norm.weight", (d,), np.float32)]
        if (i + 1) % h.full_attention_interval == 0:  # full attention; Q carries its output gate (2 × heads)
            out += [
                (p + "attn_q.weight", (2 * hd * shape.n_head, d), np.float16),
                (p + "attn_k.weight", (hd * shape.n_head_kv, d), np.float16),
                (p + "attn_v.weight", (hd * shape.n_head_kv, d), np.float16),
                (p + "attn_output.weight", (d, hd * shape.n_head), np.float16),
                (p + "attn_q_norm.weight", (hd,), np.float32),
                (p + "attn_k_norm.weight", (hd,), np.float32),
            ]
        else:  # gated delta net
            out += [
                (p + "attn_qkv.weight", (conv_dim, d), np.float16),
                (p + "attn_gate.weight", (value_dim, d), np.float16),
                (p + "ssm_conv1d.weight", (conv_dim, h.ssm_conv_kernel), np.float32),
                (p + "ssm_dt.bias", (h.ssm_time_step_rank,), np.float32),
                (p + "ssm_a", (h.ssm_time_step_rank,), np.float32),
                (p + "ssm_beta.weight", (h.ssm_time_step_rank, d), np.float16),
                (p + "ssm_alpha.weight", (h.ssm_time_step_rank, d), np.float16),
                (p + "ssm_norm.weight", (h.ssm_state_size,), np.float32),
                (p + "ssm_out.weight", (d, value_dim), np.float16),
            ]
        out += [
            (p + "ffn_gate.weight", (shape.n_ff, d), np.float16),
            (p + "ffn_up.weight", (shape.n_ff, d), np.float16),
            (p + "ffn_down.weight", (d, shape.n_ff), np.float16),
        ]
    out += [("output_norm.weight", (d,), np.float32), ("output.weight", (shape.n_vocab, d), np.float16)]
    return out


def _qwen3moe_tensors(shape: ModelShape) -> list[tuple[str, tuple[int, ...], type]]:
    """The tensors llama.cpp b11312 loads for `qwen3moe` (src/models/qwen3moe.cpp, load_arch_tensors), numpy
    order: the experts as one 3-D tensor per projection ({n_embd, n_ff_exp, n_expert} in ggml's order), the
    router (ffn_gate_inp) in f32 as converted models keep it."""
    m = shape.moe
    assert m is not None
    d, q, kv = shape.n_embd, m.head_dim * shape.n_head, m.head_dim * shape.n_head_kv
    out: list[tuple[str, tuple[int, ...], type]] = [("token_embd.weight", (shape.n_vocab, d), np.float16)]
    for i in range(shape.n_layer):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", (d,), np.float32),
            (p + "attn_q.weight", (q, d), np.float16),
            (p + "attn_k.weight", (kv, d), np.float16),
            (p + "attn_v.weight", (kv, d), np.float16),
            (p + "attn_output.weight", (d, q), np.float16),
            (p + "attn_q_norm.weight", (m.head_dim,), np.float32),
            (p + "attn_k_norm.weight", (m.head_dim,), np.float32),
            (p + "ffn_norm.weight", (d,), np.float32),
            (p + "ffn_gate_inp.weight", (m.n_expert, d), np.float32),
            (p + "ffn_gate_exps.weight", (m.n_expert, m.n_ff_exp, d), np.float16),
            (p + "ffn_down_exps.weight", (m.n_expert, d, m.n_ff_exp), np.float16),
            (p + "ffn_up_exps.weight", (m.n_expert, m.n_ff_exp, d), np.float16),
        ]
    out += [("output_norm.weight", (d,), np.float32), ("output.weight", (shape.n_vocab, d), np.float16)]
    return out


def _tensors(shape: ModelShape) -> list[tuple[str, tuple[int, ...], type]]:
    """(name, numpy shape, dtype) in file order. Numpy shape is GGUF's ne reversed."""
    if shape.arch == "qwen35":
        return _qwen35_tensors(shape)
    if shape.arch == "qwen3moe":
        return _qwen3moe_tensors(shape)
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
    tmp = path.with_name(f"{path.name}.{os.getpid()}.part")  # two processes writing one model never share a file
    w = gguf.GGUFWriter(str(tmp), shape.arch)
    _add_metadata(w, shape)
    specs = _tensors(shape)
    layouts = [_layout(shape, shp, dt) for _, shp, dt in specs]
    for (name, shp, dt), (gtype, nbytes) in zip(specs, layouts, strict=True):
        w.add_tensor_info(name, shp, np.dtype(dt), nbytes, raw_dtype=gguf.GGMLQuantizationType[gtype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    assert w.fout is not None  # written by write_header_to_file
    fout = w.fout[0]
    align = w.data_alignment
    pools = _Pools.make(shape)
    pos = fout.tell()
    pos += (-pos) % align
    if data:
        fout.write(b"\0" * ((-fout.tell()) % align))
    for idx, ((name, shp, dt), (gtype, nbytes)) in enumerate(zip(specs, layouts, strict=True)):
        if data:
            _write_tensor(fout, pools, idx, name, shp, dt, gtype, nbytes)
            fout.write(b"\0" * ((-nbytes) % align))
        pos += nbytes + (-nbytes) % align
    fout.flush()
    if not data:
        fout.truncate(pos)
    w.close()
    os.replace(tmp, path)
    return path


def _add_metadata(w: gguf.GGUFWriter, shape: ModelShape) -> None:
    """The model's key-value metadata: its shape, the hybrid's and the experts' keys, the file type, the vocab."""
    import gguf

    arch = shape.arch
    w.add_name(f"llamalab synthetic {shape.name}")
    w.add_context_length(shape.n_ctx_train)
    w.add_embedding_length(shape.n_embd)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    h = shape.hybrid
    w.add_rope_dimension_count(h.rope_dim if h else shape.head_dim)
    w.add_rope_freq_base(shape.rope_theta)
    if h:
        w.add_uint32(f"{arch}.attention.key_length", h.head_dim)
        w.add_uint32(f"{arch}.attention.value_length", h.head_dim)
        w.add_array(f"{arch}.rope.dimension_sections", list(h.rope_sections))
        w.add_uint32(f"{arch}.ssm.conv_kernel", h.ssm_conv_kernel)
        w.add_uint32(f"{arch}.ssm.state_size", h.ssm_state_size)
        w.add_uint32(f"{arch}.ssm.group_count", h.ssm_group_count)
        w.add_uint32(f"{arch}.ssm.time_step_rank", h.ssm_time_step_rank)
        w.add_uint32(f"{arch}.ssm.inner_size", h.ssm_inner_size)
        w.add_uint32(f"{arch}.full_attention_interval", h.full_attention_interval)
    if shape.moe:
        m = shape.moe
        w.add_key_length(m.head_dim)
        w.add_value_length(m.head_dim)
        w.add_expert_count(m.n_expert)
        w.add_expert_used_count(m.n_expert_used)
        w.add_expert_feed_forward_length(m.n_ff_exp)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(shape.n_vocab)
    ft = gguf.LlamaFileType
    w.add_file_type({"f16": ft.MOSTLY_F16, "q8_0": ft.MOSTLY_Q8_0, "q6_k": ft.MOSTLY_Q6_K, "q5_k": ft.MOSTLY_Q5_K_M,
                     "q4_k": ft.MOSTLY_Q4_K_M, "q4_0": ft.MOSTLY_Q4_0, "q3_k": ft.MOSTLY_Q3_K_M,
                     "q2_k": ft.MOSTLY_Q2_K}[shape.wtype])
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


@dataclass(frozen=True)
class _Pools:
    """The seeded bytes every tensor's data is tiled from (so an 8B shape is written at disk speed)."""

    f16: bytes  # POOL f16 values, twice: any offset has POOL values after it
    f32: bytes  # POOL f32 values
    blocks: bytes  # valid quantized blocks of the shape's weight type, twice (empty for f16)
    block_size: int  # bytes per quantized block (0 for f16)

    @staticmethod
    def make(shape: ModelShape) -> _Pools:
        rng = np.random.default_rng(shape.seed)
        pool16 = (rng.standard_normal(POOL) * 0.02).astype(np.float16).tobytes()
        pool32 = (rng.standard_normal(POOL) * 0.02).astype(np.float32).tobytes()
        blocks, size = b"", 0
        if shape.wtype in QUANT:  # valid blocks: small fixed scales, random quants (no NaN/inf scale from random bits)
            _, per, size, (d_at, dmin_at) = QUANT[shape.wtype]
            raw = rng.integers(0, 256, size=(POOL // per, size), dtype=np.uint8)
            raw[:, d_at:d_at + 2] = np.frombuffer(np.float16(0.0005).tobytes(), np.uint8)
            if dmin_at is not None:
                raw[:, dmin_at:dmin_at + 2] = np.frombuffer(np.float16(0.0).tobytes(), np.uint8)
            blocks = raw.tobytes() * 2
        return _Pools(f16=pool16 + pool16, f32=pool32, blocks=blocks, block_size=size)


def _tile(fout: BinaryIO, pool: bytes, offset: int, nbytes: int, step: int) -> None:
    """`nbytes` of `pool` from `offset` on, `step` bytes at a time."""
    left = nbytes
    while left:
        n = min(left, step)
        fout.write(pool[offset:offset + n])
        left -= n


def _write_tensor(fout: BinaryIO, pools: _Pools, idx: int, name: str, shp: tuple[int, ...], dt: type, gtype: str,
                  nbytes: int) -> None:
    """One tensor's data: quantized blocks, f16 weights from the pool, or f32 norms, biases, A and kernels."""
    if gtype not in ("F16", "F32"):
        size = pools.block_size
        per_pool = len(pools.blocks) // 2 // size
        _tile(fout, pools.blocks, (idx * 7919 % per_pool) * size, nbytes, per_pool * size)
    elif dt is np.float32:
        n = int(np.prod(shp))
        if name.endswith("ssm_a"):  # A = −exp(A_log) < 0: a decaying state, as in a trained model
            fout.write(np.full(n, -1.0, dtype=np.float32).tobytes())
        elif name.endswith(".bias"):
            fout.write(np.zeros(n, dtype=np.float32).tobytes())
        elif len(shp) > 1:  # the convolution's kernel, the router
            _tile(fout, pools.f32, 0, nbytes, POOL * 4)
        else:  # norms
            fout.write(np.ones(n, dtype=np.float32).tobytes())
    else:
        _tile(fout, pools.f16, (idx * 7919 % POOL) * 2, nbytes, POOL * 2)


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
    n_expert: int | None = None  # expert_count of a mixture-of-experts model (None: dense)

    @property
    def head_dim(self) -> int | None:
        return self.n_embd // self.n_head if self.n_embd and self.n_head else None

    def as_dict(self) -> dict[str, Any]:
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
    from . import gguf

    path = Path(path).expanduser()
    gguf.check_file(path)  # missing, a symlink loop, a directory, a FIFO: said before anything opens it
    with gguf.open_file(path) as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelError(
            f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF').",
            tip="llama.cpp loads GGUF models only; convert safetensors with llama.cpp's convert_hf_to_gguf.py.")
    try:
        hdr = gguf.read_header(path)
    except gguf.HeaderIncomplete as e:
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
    splits = split_count if isinstance(split_count, int) and split_count else 1
    if end > size:
        raise ModelError(
            f"{path} is truncated: its tensors need {end:,} bytes but the file has {size:,}.",
            tip="download it again (compare its size with the one the publisher lists); to plan from the start of "
                "a file only, use `llamalab plan --model` or `llamalab stub`.")
    arch = hdr.kv.get("general.architecture") or "unknown"

    def a(key: str) -> int | None:
        """An integer of the architecture's keys; a per-layer list (head_count_kv of some models) as its largest."""
        v = hdr.kv.get(f"{arch}.{key}")
        if isinstance(v, list):
            v = max((x for x in v if isinstance(x, int)), default=None)
        return v if isinstance(v, int) else None

    n_vocab = a("vocab_size")
    if n_vocab is None:
        toks = hdr.kv.get("tokenizer.ggml.tokens")
        n_vocab = len(toks) if isinstance(toks, gguf.ArrayInfo | list) else None
    name = hdr.kv.get("general.name")
    return ModelInfo(
        path=path.resolve(), size_bytes=size, architecture=str(arch), name=name if isinstance(name, str) else None,
        n_layer=a("block_count"), n_embd=a("embedding_length"), n_head=a("attention.head_count"),
        n_head_kv=a("attention.head_count_kv"),
        n_ctx_train=a("context_length"), n_vocab=n_vocab, n_tensors=len(hdr.tensors),
        fingerprint=fingerprint(path), splits=splits,
        n_expert=a("expert_count") or None,
    )
