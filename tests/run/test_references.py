"""A reference generation's answer as stored (run/references.py `sequence`), from llama-server b11312's own
/completion answer shape (`tokens`, `completion_probabilities` with `top_logprobs`; recorded on the tiny synthetic
model with `n_probs: 3`)."""

from __future__ import annotations

from llamalab.quality.outputs import Generated
from llamalab.run import references

# llama-server b11312, POST /completion {"prompt": [1..8], "n_predict": 2, "n_probs": 3, "return_tokens": true}
ANSWER = {
    "content": " ezl pyl", "tokens": [4326, 11736],
    "completion_probabilities": [
        {"id": 4326, "token": " ezl", "bytes": [32, 101, 122, 108], "logprob": -9.079611778259277,
         "top_logprobs": [{"id": 230, "token": "", "bytes": [227], "logprob": -9.079611778259277},
                          {"id": 4326, "token": " ezl", "bytes": [32, 101, 122, 108], "logprob": -9.079611778259277},
                          {"id": 2278, "token": " byr", "bytes": [32, 98, 121, 114], "logprob": -9.2}]},
        {"id": 11736, "token": " pyl", "bytes": [32, 112, 121, 108], "logprob": -8.937220573425293,
         "top_logprobs": [{"id": 5592, "token": " gwd", "bytes": [32, 103, 119, 100], "logprob": -9.5},
                          {"id": 11736, "token": " pyl", "bytes": [32, 112, 121, 108], "logprob": -8.937220573425293}]},
    ],
}


def test_an_answer_as_a_stored_sequence():
    s = references.sequence(ANSWER, prompt=1)
    assert s["tokens"] == [4326, 11736] and s["pieces"] == [" ezl", " pyl"] and s["prompt"] == 1
    # each position's candidates, most likely first
    assert s["top"][1] == [[11736, -8.937220573425293], [5592, -9.5]]
    g = Generated.of(s)
    assert g.margin(0) == 0.0  # the synthetic model's exact tie: two rows of its output matrix are equal
    assert g.margin(1) > 0


def test_a_position_llama_server_gave_no_candidates_for_has_none():
    """At K requests at once on rpc-servers llama-server b11312 was seen to give 15 positions for 16 tokens: the
    positions are placed where their chosen tokens match, the missing one has no candidates (margin unknown)."""
    short = {**ANSWER, "completion_probabilities": ANSWER["completion_probabilities"][1:]}
    s = references.sequence(short, prompt=0)
    assert s["top"][0] == [] and s["top"][1][0][0] == 11736 and s["pieces"] == ["", " pyl"]
    assert Generated.of(s).margin(0) is None
    wrong = {**ANSWER, "completion_probabilities": [{**ANSWER["completion_probabilities"][0], "id": 1}]}
    s = references.sequence(wrong, prompt=0)
    assert s["top"] == [[], []] and s["pieces"] == []  # nothing placed where the tokens do not match


# ik_llama.cpp (ik-llama-cpp-python 0.1.5, llamalab's tiny synthetic model, one slot on the CPU): the last event of
# POST /completion {"prompt": [1, 2000, …, 2006], "n_predict": 2, "stream": true, "n_probs": 3, "temperature": 0}.
# No token ids; `prob`s as its server prints them. The same request with "n_probs": 32000 (no tail beyond the top)
# gave 0.00016613829939160496 and 0.00017157100955955684 for the first candidates.
IK_LAST_EVENT = {
    "content": "", "generated_text": " adm adm", "stop": True, "tokens_predicted": 2,
    "completion_probabilities": [
        {"content": " adm", "probs": [{"tok_str": " atpa", "prob": 8.309227268910035e-05},
                                      {"tok_str": " aqog", "prob": 8.309227268910035e-05},
                                      {"tok_str": " annm", "prob": 8.309227268910035e-05}]},
        {"content": " adm", "probs": [{"tok_str": " atpa", "prob": 8.580574649386108e-05},
                                      {"tok_str": " aqog", "prob": 8.580574649386108e-05},
                                      {"tok_str": " annm", "prob": 8.580574649386108e-05}]},
    ],
}


def test_ik_llama_cpps_answer_as_a_stored_sequence_with_its_probabilities_corrected():
    import math

    s = references.ik_sequence(IK_LAST_EVENT, prompt=2)
    assert s["tokens"] == [] and s["pieces"] == [" adm", " adm"] and s["prompt"] == 2
    first = [math.exp(lp) for _, lp in s["top"][0]]
    # what it gives with no tail, up to its float sums' rounding (the reported figures are half of these)
    assert all(math.isclose(p, 0.00016613829939160496, rel_tol=1e-4) for p in first)
    assert math.isclose(math.exp(s["top"][1][0][1]), 0.00017157100955955684, rel_tol=1e-4)
    assert all(i == -1 for pos in s["top"] for i, _ in pos)  # no ids given
    assert Generated.of(s).margin(0) == 0.0


def test_the_correction_is_exact_for_a_known_tail():
    """Reported p = p_true / (1 + T) with T the mass beyond the top: p_true = p · 2 / (1 + R)."""
    true, tail = [0.5, 0.2, 0.1], 0.2
    reported = [p / (1 + tail) for p in true]
    assert [round(x, 12) for x in references.ik_corrected(reported)] == true


def test_a_byte_token_is_written_the_same_in_both_engines():
    assert references.piece({"token": "", "bytes": [155]}) == "byte: \\x9b"  # llama.cpp's lone byte
    assert references.piece({"token": " ab", "bytes": [32, 97, 98]}) == " ab"


def test_ik_requests_stream_and_llama_cpp_requests_do_not():
    ik = references.Plan(prompts=1, prompt_tokens=8, tokens=2, top=3, concurrency=1, engine="ik_llama.cpp")
    lc = references.Plan(prompts=1, prompt_tokens=8, tokens=2, top=3, concurrency=1)
    assert references.body([1], ik)["stream"] is True and references.body([1], lc)["stream"] is False
