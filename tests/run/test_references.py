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
