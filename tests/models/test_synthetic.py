"""Synthetic GGUF models are real GGUF (read back with `gguf`), deterministic, and bad files get clear errors."""

import hashlib

import numpy as np
import pytest

from llamalab.core.errors import ModelError
from llamalab.models import synthetic as models

SMALL = models.ModelShape("t", n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_vocab=600, n_ctx_train=512)


def _sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_synthetic_model_round_trips_through_gguf(tmp_path):
    import gguf

    p = models.write_synthetic(SMALL, tmp_path / "m.gguf")
    info = models.read_info(p)
    assert (info.architecture, info.n_layer, info.n_embd, info.n_head, info.n_head_kv) == ("llama", 2, 64, 4, 2)
    assert (info.n_ctx_train, info.n_vocab, info.n_tensors) == (512, 600, 2 * 9 + 3)
    r = gguf.GGUFReader(str(p))
    t = {x.name: x for x in r.tensors}
    assert list(t["token_embd.weight"].shape) == [64, 600]  # GGUF order: ne0 = n_embd
    assert list(t["blk.0.attn_k.weight"].shape) == [64, 32]
    data = np.asarray(t["blk.1.ffn_up.weight"].data, dtype=np.float32)
    assert 0.005 < float(data.std()) < 0.05  # not zeros: dense kernels do real work
    assert np.all(np.asarray(t["output_norm.weight"].data) == 1.0)
    toks = r.fields["tokenizer.ggml.tokens"]
    assert len(toks.data) == 600


def test_synthetic_is_deterministic_and_cached(tmp_path):
    a = models.write_synthetic(SMALL, tmp_path / "a.gguf")
    b = models.write_synthetic(SMALL, tmp_path / "b.gguf")
    assert _sha(a) == _sha(b)
    cached = models.synthetic(SMALL, tmp_path)
    mtime = cached.stat().st_mtime_ns
    assert models.synthetic(SMALL, tmp_path) == cached and cached.stat().st_mtime_ns == mtime


def test_header_only_stand_in_has_full_size_but_no_data(tmp_path):
    full = models.write_synthetic(SMALL, tmp_path / "full.gguf")
    stub = models.write_synthetic(SMALL, tmp_path / "stub.gguf", data=False)
    assert stub.stat().st_size == full.stat().st_size
    assert stub.stat().st_blocks * 512 < full.stat().st_size  # sparse: the tensor data is a hole
    info = models.read_info(stub)
    assert info.n_layer == 2


def test_vocab_is_unique_with_bytes_and_controls():
    tokens, scores, types = models._vocab(2000)
    assert len(set(tokens)) == 2000 and tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert tokens[3] == "<0x00>" and types[3] == 6
    assert len(scores) == len(types) == 2000


def test_8b_preset_has_the_shape_of_a_common_8b_model():
    s = models.preset("8b")
    assert (s.n_layer, s.n_embd, s.n_head, s.n_head_kv, s.n_vocab) == (36, 4096, 32, 8, 151936)
    assert 7.5e9 < s.n_params() < 9.5e9


@pytest.mark.parametrize("content, message", [
    pytest.param(None, "does not exist", id="missing"),
    pytest.param(b"PK\x03\x04 this is a zip", "not a GGUF file", id="not-gguf"),
    pytest.param(b"", "not a GGUF file", id="empty"),
])
def test_bad_model_files(tmp_path, content, message):
    p = tmp_path / "m.gguf"
    if content is not None:
        p.write_bytes(content)
    with pytest.raises(ModelError, match=message) as e:
        models.read_info(p)
    assert e.value.tip


def test_truncated_gguf_is_named_truncated(tmp_path):
    p = models.write_synthetic(SMALL, tmp_path / "m.gguf")
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ModelError, match="truncated|not a readable GGUF"):
        models.read_info(p)
    p.write_bytes(raw[:100])  # cut inside the header
    with pytest.raises(ModelError):
        models.read_info(p)


def test_unknown_preset():
    with pytest.raises(ModelError, match="unknown synthetic model preset"):
        models.preset("70b-please")


def test_qwen35_hybrid_tensor_set_and_keys(tmp_path):
    """The qwen35 writer: gated-delta-net layers, full attention every 4th (with its output gate in Q), the SSM keys."""
    import dataclasses

    import gguf

    shape = dataclasses.replace(models.preset("qwen35-tiny"), n_vocab=600, n_layer=4)
    p = models.write_synthetic(shape, tmp_path / "q.gguf")
    info = models.read_info(p)
    assert (info.architecture, info.n_layer, info.n_embd, info.n_head, info.n_head_kv) == ("qwen35", 4, 512, 4, 2)
    r = gguf.GGUFReader(str(p))
    f = {k: v.contents() for k, v in r.fields.items() if k.startswith("qwen35.")}
    assert f["qwen35.ssm.inner_size"] == 64 * 4 and f["qwen35.full_attention_interval"] == 4
    assert f["qwen35.rope.dimension_sections"] == [6, 5, 5, 0] and f["qwen35.attention.key_length"] == 128
    t = {x.name: x for x in r.tensors}
    assert "blk.3.attn_q.weight" in t and "blk.3.ssm_a" not in t  # layer 3: full attention
    assert list(t["blk.3.attn_q.weight"].shape) == [512, 2 * 128 * 4]
    assert "blk.0.attn_qkv.weight" in t and "blk.0.attn_q.weight" not in t  # layers 0-2: linear attention
    assert list(t["blk.0.attn_qkv.weight"].shape) == [512, 2 * 64 * 2 + 64 * 4]
    assert list(t["blk.0.ssm_conv1d.weight"].shape) == [4, 2 * 64 * 2 + 64 * 4]
    assert np.all(np.asarray(t["blk.0.ssm_a"].data) == -1.0)  # a decaying state
    assert len(t) == 4 * (2 + 3) + 3 * 9 + 1 * 6 + 3  # norms + FFN per layer, linear/full attention, embd/out
    assert sum(int(np.prod(x.shape)) for x in r.tensors) == shape.n_params()


def test_q5_k_weights_are_valid_blocks(tmp_path):
    import dataclasses

    import gguf

    shape = dataclasses.replace(models.preset("qwen35-tiny"), n_vocab=512, n_layer=4, wtype="q5_k")
    p = models.write_synthetic(shape, tmp_path / "q5.gguf")
    r = gguf.GGUFReader(str(p))
    t = {x.name: x for x in r.tensors}
    assert t["blk.0.ffn_up.weight"].tensor_type == gguf.GGMLQuantizationType.Q5_K
    assert t["blk.0.ssm_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    w = gguf.dequantize(t["blk.0.ffn_up.weight"].data, gguf.GGMLQuantizationType.Q5_K)
    assert np.isfinite(w).all() and float(np.abs(w).max()) > 0
    assert p.stat().st_size >= shape.tensor_bytes()
    # the 27B preset: Qwen3.6 27B's shape at 5.5 bits per weight
    big = models.preset("qwen36-27b")
    assert 26.5e9 < big.n_params() < 27.5e9 and 16.5 < big.tensor_bytes() / 2**30 < 18.0


def test_qwen3moe_tensor_set_and_keys(tmp_path):
    """The qwen3moe writer (src/models/qwen3moe.cpp's tensors): shared attention with Q/K norms, an f32 router, and
    the experts as one 3-D tensor per projection, quantized like the other matrices (Q8_0 blocks along the rows)."""
    import dataclasses

    import gguf

    shape = dataclasses.replace(models.preset("qwen3moe-tiny"), n_vocab=600, n_layer=2, wtype="q8_0")
    p = models.write_synthetic(shape, tmp_path / "moe.gguf")
    info = models.read_info(p)
    assert (info.architecture, info.n_layer, info.n_expert) == ("qwen3moe", 2, 8)
    r = gguf.GGUFReader(str(p))
    f = {k: v.contents() for k, v in r.fields.items() if k.startswith("qwen3moe.")}
    assert (f["qwen3moe.expert_count"], f["qwen3moe.expert_used_count"], f["qwen3moe.expert_feed_forward_length"]) \
        == (8, 2, 512)
    assert f["qwen3moe.attention.key_length"] == f["qwen3moe.rope.dimension_count"] == 64
    t = {x.name: x for x in r.tensors}
    assert list(t["blk.1.ffn_gate_exps.weight"].shape) == [512, 512, 8]  # ggml order: n_embd, n_ff_exp, n_expert
    assert list(t["blk.1.ffn_down_exps.weight"].shape) == [512, 512, 8]
    assert t["blk.1.ffn_up_exps.weight"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert t["blk.1.ffn_gate_inp.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert list(t["blk.0.attn_q.weight"].shape) == [512, 64 * 8] and list(t["blk.0.attn_k.weight"].shape) == [512, 256]
    w = gguf.dequantize(t["blk.0.ffn_up_exps.weight"].data, gguf.GGMLQuantizationType.Q8_0)
    assert np.isfinite(w).all() and float(np.abs(w).max()) > 0
    assert len(t) == 2 * 12 + 3
    assert sum(int(np.prod(x.shape)) for x in r.tensors) == shape.n_params()


def test_30b_a3b_preset_has_qwen3_30b_a3b_size():
    big = models.preset("30b-a3b")
    assert 30.0e9 < big.n_params() < 31.0e9  # Qwen3-30B-A3B: 30.5 B parameters
    assert 29.5 < big.tensor_bytes() / 2**30 < 31.0  # Q8_0
