"""KV bytes per token, MiB ↔ tokens, and the one-copy saving estimate checked against real copies=1 logs."""

from __future__ import annotations

import pytest

from llamalab.logs import ledger, memory, records
from testpaths import FIXTURES

LOGS = FIXTURES / "logs"
RPC1, RPC2 = "RPC0[127.0.0.1:51711]", "RPC0[127.0.0.1:51712]"
MIB = 1024 * 1024


def led(name: str) -> records.Ledger:
    return ledger.parse((LOGS / f"{name}.log").read_text(encoding="utf-8", errors="replace").splitlines())


def test_kv_bytes_per_token_per_device():
    per = memory.kv_bytes_per_token(led("rpc-b11312-copies4"))  # 30.62 + 18.38 MiB over 8192 cells
    assert per == pytest.approx({RPC1: 30.62 * MIB / 8192, RPC2: 18.38 * MIB / 8192})
    assert memory.total_kv_bytes_per_token(led("rpc-b11312-copies4")) == pytest.approx(49.0 * MIB / 8192)


def test_kv_bytes_per_token_on_host_and_2024_logs():
    assert memory.kv_bytes_per_token(led("rpc-b11312-nkvo")) == pytest.approx({"CPU": 64 * MIB / 8192})
    # 2024: no cells in the summary, the cache holds n_ctx cells
    assert memory.kv_bytes_per_token(led("cuda-2024-03-pp4-truncated")) == pytest.approx(
        {"CUDA0": 1536 * MIB / 4096, "CUDA1": 3584 * MIB / 4096})


def test_sliding_window_cache_does_not_scale():
    ld = led("sycl-2025-11-iswa")
    assert [c.total_cells for c in memory.scaling_caches(ld)] == [4096]
    assert memory.kv_bytes_per_token(ld) == pytest.approx({"SYCL0": 96 * MIB / 4096})


def test_no_kv_lines_no_figure():
    assert memory.kv_bytes_per_token(led("metal-2026-08-mtl0-two-passes")) == {}
    assert memory.total_kv_bytes_per_token(led("rpc-b11312-unknown-flag")) is None


@pytest.mark.parametrize("mib,bpt,tokens", [
    pytest.param(1.0, 1024.0, 1024, id="one-mib-at-1k"),
    pytest.param(0.0, 1024.0, 0, id="nothing-freed"),
    pytest.param(5.0, 0.0, 0, id="no-kv"),
    pytest.param(-1.0, 10.0, 0, id="negative"),
])
def test_tokens_for_mib(mib, bpt, tokens):
    assert memory.tokens_for_mib(mib, bpt) == tokens


def test_the_tightest_device_decides():
    assert memory.context_tokens_for({"a": 1.0, "b": 1.0}, {"a": 1024.0, "b": 4096.0}) == 256
    assert memory.context_tokens_for({"a": 1.0}, {}) is None


def test_no_estimate_without_pipeline_parallelism():
    for name in ("rpc-b11312-copies1", "rpc-b11312-sm-none", "cpu-b11312-cpu-only", "cuda-2025-fork-n_copies1",
                 "cuda-2025-12-retry-without-pp-truncated", "sycl-2025-05-pp4-alloc-cut"):
        assert memory.one_copy_saving(led(name)) is None, name


def test_estimate_matches_the_real_copies1_log():
    """copies4 vs copies1, same flags, same machine: the estimate lands within 15 % of the measured saving."""
    four, one = led("rpc-b11312-copies4"), led("rpc-b11312-copies1")
    s = memory.one_copy_saving(four)
    assert s.n_copies == 4 and s.method == "inputs"
    for name in (RPC1, RPC2):
        real = four.devices[name].compute_mib - one.devices[name].compute_mib  # 48.10 - 19.03 = 29.07
        assert s.low[name] <= real <= s.high[name]
        assert abs(s.per_device[name] - real) / real < 0.15
    real_host = four.compute_host_mib() - one.compute_host_mib()  # 37.11 - 10.03
    assert abs(s.host_mib - real_host) / real_host < 0.15
    # 3 × (8192 × 512 × f16 mask + 512 × 512 × f32 activation) = 27 MiB
    assert s.per_device[RPC1] == 27.0
    # what 27 MiB would hold (5,727 tokens) lies past the model's training context: this log runs n_ctx 8192 of a
    # model trained for 8192, so one copy frees memory but buys no context
    assert memory.context_tokens_for(s.per_device, {
        n: b + 512 * 2 for n, b in memory.kv_bytes_per_token(four).items()}) == 5727
    assert (four.n_ctx, four.n_ctx_train) == (8192, 8192)
    assert (s.tokens, s.tokens_low, s.tokens_high, s.capped, s.at_limit) == (0, 0, 0, True, True)


def test_predicted_context_never_exceeds_the_models_training_context():
    """The same log as if the model allowed more: the estimate grows up to the room left, and no further."""
    import dataclasses

    four = led("rpc-b11312-copies4")
    # 27 MiB freed per device; the first device holds 30.62 MiB of KV over 8192 cells (3,919.36 bytes a token) and
    # 512 × f16 of mask a token: 27 × 2^20 / (3,919.36 + 1,024) = 5,727 tokens (the second device has room for 8,384)
    roomy = memory.one_copy_saving(dataclasses.replace(four, n_ctx_train=65536))
    assert (roomy.tokens, roomy.capped, roomy.at_limit) == (5727, False, False)
    assert roomy.tokens_low <= roomy.tokens <= roomy.tokens_high
    tight = memory.one_copy_saving(dataclasses.replace(four, n_ctx_train=8192 + 1000))
    assert (tight.tokens, tight.tokens_high, tight.capped) == (1000, 1000, True)


def test_many_splits_or_unknown_context_use_the_proportional_figure():
    s = memory.one_copy_saving(led("cuda-2026-04-sched-reserve-4gpu"))
    assert s.method == "proportional"
    assert s.per_device["CUDA3"] == round(5223.02 * 3 / 4, 2)
    assert s.tokens is None  # no KV lines: no tokens figure
    assert "estimate" in s.basis


def test_saving_json_is_labelled_an_estimate():
    out = memory.one_copy_saving(led("rpc-b11312-copies4")).to_json()
    assert out["estimate"] is True and out["basis"] and set(out["per_device_mib"]) == {RPC1, RPC2}


def test_tokens_estimate_matches_what_fit_gave_one_copy():
    """Same margin (-fitt), same flags: --fit gave copies=4 n_ctx 2304 and copies=1 n_ctx 4608 (fit rounds to 256).
    The estimate from the copies=4 log alone should land within 20 % of the 2304 tokens measured."""
    four, one = led("rpc-b11312-fit-copies4"), led("rpc-b11312-fit-copies1")
    real = one.n_ctx - four.n_ctx
    s = memory.one_copy_saving(four)
    assert real == 2304
    assert abs(s.tokens - real) / real < 0.20
    assert s.tokens_low <= real <= s.tokens_high



def test_weights_moved_nothing_between_builds_of_one_model():
    from llamalab.report.analysis.verdict import weights_moved

    # copies4 and copies1: the same weights on the same devices (each log's rpc-servers had their own ports)
    assert weights_moved(led("rpc-b11312-copies4").to_json(), led("rpc-b11312-copies1").to_json()) == []


def test_weights_moved_per_device_label_and_host():
    from llamalab.report.analysis.verdict import weights_moved

    base, none = led("rpc-b11312-copies4"), led("rpc-b11312-sm-none")  # -sm none: every layer on the first device
    moved = {m["where"]: m for m in weights_moved(base.to_json(), none.to_json())}
    assert set(moved) == {"RPC0", "RPC1"}  # the layers moved between devices, the host kept its share
    assert moved["RPC0"]["from_mib"] == base.devices[RPC1].model_mib < moved["RPC0"]["to_mib"]
    assert moved["RPC1"]["from_mib"] == base.devices[RPC2].model_mib and moved["RPC1"]["to_mib"] == 0.0
    to_host = {m["where"]: m for m in weights_moved(base.to_json(), led("cpu-b11312-cpu-only").to_json())}
    assert to_host["RPC0"]["to_mib"] == to_host["RPC1"]["to_mib"] == 0.0
    assert to_host["host"]["to_mib"] > to_host["host"]["from_mib"]
