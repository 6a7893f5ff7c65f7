"""The output check's verdicts (quality/outputs.py), table-driven on sequences whose every case is spelled out, and
on the real reference generations of a demo run on the CPU rig (tests/fixtures/runs/demo-outputs.json: copies1,
no-pp-blas and no-pp-override against copies4, both KV settings, single-stream and 4 requests at once)."""

from __future__ import annotations

import math

import pytest

from llamalab.quality import outputs as q


def seq(tokens, margins=None, prompt=0):
    """A generated sequence whose top two candidates at each position are `margins` apart in probability."""
    margins = margins or [0.5] * len(tokens)
    top = []
    for t, m in zip(tokens, margins):
        p1 = (1 + m) / 2
        top.append(((t, math.log(p1)), (t + 1000, math.log(1 - p1))))
    return q.Generated(prompt=prompt, tokens=tuple(tokens), pieces=tuple(f" w{t}" for t in tokens), top=tuple(top))


SAME_KLD = {"mean": 0.0, "same_top_pct": 100.0}
NOISE_KLD = {"mean": 0.00002, "same_top_pct": 99.6}
FAR_KLD = {"mean": 0.35, "same_top_pct": 71.0}


@pytest.mark.parametrize("arm_tokens,margins,kld,synthetic,kind,words", [
    pytest.param([1, 2, 3, 4], None, SAME_KLD, False, q.SAME, "same outputs (KLD 0.000000, same top 100.0%)",
                 id="identical"),
    pytest.param([1, 2, 9, 9], [0.5, 0.5, 0.003, 0.5], NOISE_KLD, False, q.NEAR,
                 "parts at a near tie (token 3, margin 0.3%; KLD 0.000020, same top 99.6%)", id="near-tie"),
    pytest.param([1, 9, 9, 9], [0.5, 0.38, 0.5, 0.5], FAR_KLD, False, q.DIFFERS,
                 "computes differently (token 2, margin 38.0%; KLD 0.350000, same top 71.0%)", id="clear"),
    pytest.param([1, 2, 3, 4], None, FAR_KLD, False, q.DIFFERS,
                 "computes differently (KLD 0.350000, same top 71.0%)", id="logits-only"),
    pytest.param([1, 2, 3, 4], None, NOISE_KLD, True, q.DIFFERS,
                 "computes differently (KLD 0.000020, same top 99.6%) — a synthetic model: any difference is one to "
                 "explain", id="synthetic-any-difference"),
    pytest.param([1, 2, 9, 9], [0.5, 0.5, 0.003, 0.5], SAME_KLD, True, q.DIFFERS,
                 "computes differently (token 3; KLD 0.000000, same top 100.0%) — a synthetic model: any difference "
                 "is one to explain", id="synthetic-near-tie-is-a-difference"),
    pytest.param([1, 2, 3, 4], None, None, False, q.SAME, "same outputs (tokens only: logits not compared)",
                 id="tokens-only"),
])
def test_verdicts(arm_tokens, margins, kld, synthetic, kind, words):
    base = {"single": [[seq([1, 2, 3, 4], margins)]]}
    v = q.judge("copies4", base, {"single": [seq(arm_tokens)]}, kld, synthetic=synthetic)
    assert (v.kind, v.words) == (kind, words)
    assert v.recommendable == (kind != q.DIFFERS)


def test_a_failed_logits_run_is_said_with_why():
    """A comparison that failed is never silent: its error is in the words, whatever the tokens say."""
    why = "llama-perplexity's comparison failed (exit 1; failed to fit params)"
    base = {"single": [[seq([1, 2, 3, 4], [0.5, 0.38, 0.5, 0.5])]]}
    same = q.judge("b", base, {"single": [seq([1, 2, 3, 4])]}, None, synthetic=False, kld_error=why)
    assert (same.kind, same.words) == (q.SAME, f"same outputs (tokens only: logits not compared ({why}))")
    differs = q.judge("b", base, {"single": [seq([1, 9, 9, 9])]}, None, synthetic=True, kld_error=why)
    assert differs.kind == q.DIFFERS and differs.words.startswith(
        f"computes differently (token 2; logits not compared: {why})")


def test_an_arm_is_judged_against_the_baselines_own_spread():
    """Batched requests are not bit-invariant: where the baseline parts with itself at token 3 of its K requests, an
    arm that parts at token 3 or later is within that spread; one that parts earlier, at a clear margin, is not."""
    base = {"single": [[seq([1, 2, 3, 4])], [seq([1, 2, 3, 4])]],
            "parallel": [[seq([1, 2, 3, 4])], [seq([1, 2, 7, 7])]]}
    later = q.judge("b", base, {"single": [seq([1, 2, 3, 4])], "parallel": [seq([1, 2, 3, 8])]}, SAME_KLD,
                    synthetic=False)
    assert later.kind == q.SAME and "parallel: the baseline parts with itself from token 3" in later.words
    earlier = q.judge("b", base, {"single": [seq([1, 2, 3, 4])], "parallel": [seq([1, 8, 8, 8])]}, SAME_KLD,
                      synthetic=False)
    assert earlier.kind == q.DIFFERS and "token 2" in earlier.words and "parallel" in earlier.words
    assert [m.parting.pos if m.parting else None for m in earlier.aa] == [None, 2]


def test_a_synthetic_models_batched_requests_may_part_where_its_single_stream_does_not():
    """On a synthetic model's flat distributions any rounding flips a token, and K requests at once are batched
    differently from run to run: where the single stream and the logits agree, a parting only at K at once tells
    nothing more (said, not a different computation); with the single stream parting too, it is a difference."""
    base = {"single": [[seq([1, 2, 3])], [seq([1, 2, 3])]], "parallel": [[seq([1, 2, 3])], [seq([1, 2, 3])]]}
    only = q.judge("b", base, {"single": [seq([1, 2, 3])], "parallel": [seq([4, 2, 3])]}, SAME_KLD, synthetic=True)
    assert only.kind == q.SAME and "at K requests at once it parts at token 1, as batched requests may" in only.words
    both = q.judge("b", base, {"single": [seq([1, 5, 3])], "parallel": [seq([4, 2, 3])]}, SAME_KLD, synthetic=True)
    assert both.kind == q.DIFFERS
    real = q.judge("b", base, {"single": [seq([1, 2, 3])], "parallel": [seq([4, 2, 3])]}, SAME_KLD, synthetic=False)
    assert real.kind == q.DIFFERS and "parallel" in real.words  # a real model's margins tell (here 50%)


def test_first_difference_and_margin():
    assert q.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert q.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert q.first_difference([1, 2], [1, 2, 3]) == 2  # one sequence ended: that is where they part
    g = seq([1, 2], [0.25, 0.0])
    assert g.margin(0) == pytest.approx(0.25) and g.margin(1) == pytest.approx(0.0) and g.margin(5) is None


def test_nothing_to_compare_is_said_so():
    v = q.judge("copies4", {}, {}, None, synthetic=False)
    assert v.kind == q.NOT_COMPARED and v.words.startswith("outputs not compared")
    assert v.recommendable  # not compared is not a fault: the decision table says "outputs not compared" instead


def test_the_stored_form_reads_back():
    g = seq([5, 6, 7])
    assert q.Generated.of(g.as_dict()) == g
    rows = [{"mode": "single", "rep": 2, "result": {"sequences": [g.as_dict()]}},
            {"mode": "single", "rep": 1, "result": {"sequences": [g.as_dict()]}}]
    assert q.by_mode(rows) == {"single": {2: [g], 1: [g]}}


def test_a_side_without_token_ids_is_compared_by_its_pieces():
    """ik_llama.cpp's server gives no token ids (run/references.py): its sequences are compared with llama.cpp's by
    their text pieces, and the comparison says so."""
    base = [q.Generated(prompt=0, tokens=(5, 6, 7), pieces=(" a", " b", " c"))]
    same = [q.Generated(prompt=0, tokens=(), pieces=(" a", " b", " c"))]
    other = [q.Generated(prompt=0, tokens=(), pieces=(" a", " x", " c"))]
    r = q.compare(base, same, "single")
    assert (r.identical, r.parting, r.by) == (1, None, "pieces") and r.as_dict()["by"] == "pieces"
    r = q.compare(base, other, "single")
    assert r.parting is not None and r.parting.pos == 1 and r.parting.arm[0] == " x"
    assert "by" not in q.compare(base, base, "single").as_dict()  # token ids on both sides: as before
