"""Every configuration's reference generation, on the server already loaded for its trials (no extra load): what
quality/outputs.py compares with the baseline's.

A few fixed prompts (`[outputs] prompts`, each `prompt_tokens` long: the workload's own prompt passage, tokenized by
this server and rotated — natural text on a real model, its tokens on a synthetic one), greedy decoding
(`temperature: 0`), a fixed number of output tokens (`[outputs] tokens`, `ignore_eos`), the top candidates and their
log-probabilities at every position (`n_probs`), `cache_prompt` off, every slot erased first: once single-stream,
one prompt after another, and where the study serves K requests, once with K at once (prompt k mod P in request k).

ik_llama.cpp's server (llamacpp/engines.py) answers in the older shape: no token ids (no `tokens`, and its
`completion_probabilities` are `{content, probs: [{tok_str, prob}]}`), so its sequences hold the text pieces and
are compared by them (quality/outputs.py). Its `prob`s are too small: `get_token_probabilities`
(examples/server/server-common.cpp) adds the probability mass beyond the top `n_probs` to the normaliser twice, so
every reported p is p_true / (1 + T), T the tail's mass; with R the reported top's sum, R = (1 − T) / (1 + T), so
p_true = p · 2 / (1 + R) exactly (`ik_corrected`; checked against llama.cpp b11312 on the same model: 0.007753,
0.007373, 0.006874 against 0.007753, 0.007367, 0.006876). Its non-streamed answer is an HTTP 500 where the text
holds a lone byte that is not UTF-8 (a synthetic model's random tokens), so it is asked to stream: its stream's last
event holds every position's candidates, and its events are written with invalid bytes replaced. A byte token is
written `byte: \\xNN` in both engines' pieces (llama.cpp's `bytes` read that way), so pieces compare across them.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from ..core.errors import WorkloadError
from ..llamacpp import engines
from . import workload


@dataclass(frozen=True)
class Plan:
    prompts: int  # fixed prompts
    prompt_tokens: int  # tokens each
    tokens: int  # generated tokens each
    top: int  # candidates kept per position (n_probs)
    concurrency: int  # K requests at once for the parallel mode; 1: single-stream only
    timeout_s: float = 600.0
    engine: str = engines.LLAMA_CPP


def body(ids: list[int], plan: Plan) -> dict[str, Any]:
    return {"prompt": ids, "n_predict": plan.tokens, "ignore_eos": True, "cache_prompt": False,
            "stream": plan.engine == engines.IK_LLAMA_CPP, "temperature": 0.0, "seed": 42, "n_probs": plan.top,
            "return_tokens": True}


def piece(candidate: Mapping[str, Any]) -> str:
    """A chosen token's text as both engines can write it: a lone byte that is not text (its `bytes` one value of
    128 or more) as ik_llama.cpp writes it, `byte: \\xNN`; else llama.cpp's `token`."""
    raw = candidate.get("bytes")
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], int) and raw[0] & 0x80:
        return f"byte: \\x{raw[0]:x}"
    return str(candidate.get("token", ""))


def ik_corrected(probs: Sequence[float]) -> list[float]:
    """ik_llama.cpp's top probabilities as they are (module docstring): each times 2 / (1 + their sum)."""
    r = sum(probs)
    return [p * 2.0 / (1.0 + r) for p in probs]


def ik_sequence(answer: Mapping[str, Any], prompt: int) -> dict[str, Any]:
    """ik_llama.cpp's answer as a stored sequence (pure): no token ids; each position's text piece and its top
    candidates (id -1: not given), their probabilities corrected (`ik_corrected`), most likely first."""
    probs = [p for p in answer.get("completion_probabilities") or [] if isinstance(p, dict)]
    pieces = [str(p.get("content", "")) for p in probs]
    top: list[list[list[float]]] = []
    for p in probs:
        cands = [c for c in p.get("probs") or [] if isinstance(c, dict) and isinstance(c.get("prob"), (int, float))]
        fixed = ik_corrected([float(c["prob"]) for c in cands])
        top.append(sorted(([-1, math.log(x)] for x in fixed if x > 0), key=lambda x: -x[1]))
    return {"prompt": prompt, "tokens": [], "pieces": pieces, "top": top}


def sequence(answer: Mapping[str, Any], prompt: int) -> dict[str, Any]:
    """One /completion answer as a stored sequence (quality/outputs.py `Generated.as_dict`): the tokens, their text
    pieces and each position's top candidates, most likely first (pure). llama-server's `completion_probabilities`
    give each position's chosen token and its `top_logprobs`; where it gives fewer positions than tokens (seen at K
    requests at once on rpc-servers: one missing), they are placed where their chosen tokens match the tokens, and
    a position without them has no candidates (its margin is unknown)."""
    probs = [p for p in answer.get("completion_probabilities") or [] if isinstance(p, dict)]
    tokens = [int(t) for t in answer.get("tokens") or []] or [int(p["id"]) for p in probs if "id" in p]
    chosen = [int(p.get("id", -1)) for p in probs]
    n, k = len(tokens), len(chosen)
    offset = next((off for off in dict.fromkeys((0, n - k)) if 0 <= off and tokens[off:off + k] == chosen), None)
    top: list[list[list[float]]] = [[] for _ in range(n)]
    pieces = [""] * n
    if offset is not None:
        for i, p in enumerate(probs):
            pieces[offset + i] = piece(p)
            top[offset + i] = sorted(([int(c["id"]), float(c["logprob"])] for c in p.get("top_logprobs") or []
                                      if "id" in c and "logprob" in c), key=lambda x: -x[1])
    return {"prompt": prompt, "tokens": tokens, "pieces": pieces if offset is not None else [], "top": top}


def _last_event(r: httpx.Response) -> dict[str, Any]:
    """A streamed answer's last event (the one with `stop`: it holds every position's candidates)."""
    last: dict[str, Any] = {}
    for line in r.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            ev = json.loads(line[6:])
            if isinstance(ev, dict) and ev.get("stop"):
                last = ev
    return last


def _one(client: httpx.Client, ids: list[int], prompt: int, plan: Plan) -> dict[str, Any]:
    if plan.engine == engines.IK_LLAMA_CPP:
        with client.stream("POST", "/completion", json=body(ids, plan), timeout=plan.timeout_s) as r:
            if r.status_code != 200:
                raise WorkloadError(f"a reference request failed: HTTP {r.status_code}: {r.read()[:300]!r}")
            last = _last_event(r)
        if not last.get("completion_probabilities"):
            raise WorkloadError("a reference request's stream ended without its candidates")
        return ik_sequence(last, prompt)
    r = client.post("/completion", json=body(ids, plan), timeout=plan.timeout_s)
    if r.status_code != 200:
        raise WorkloadError(f"a reference request failed: HTTP {r.status_code}: {r.text[:300]}")
    answer = r.json()
    if not isinstance(answer, dict) or not answer.get("tokens") and not answer.get("completion_probabilities"):
        raise WorkloadError("a reference request's answer holds no tokens (an older llama-server without "
                            "`return_tokens`?)")
    return sequence(answer, prompt)


def _parallel(client: httpx.Client, prompts: list[list[int]], plan: Plan) -> list[dict[str, Any]]:
    out: list[dict[str, Any] | BaseException | None] = [None] * plan.concurrency
    barrier = threading.Barrier(plan.concurrency)

    def worker(i: int) -> None:
        barrier.wait()
        try:
            out[i] = _one(client, prompts[i % len(prompts)], i % len(prompts), plan)
        except (httpx.HTTPError, WorkloadError, ValueError) as e:
            out[i] = e

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(plan.concurrency)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    bad = next((x for x in out if not isinstance(x, dict)), None)
    if bad is not None:
        raise WorkloadError(f"a reference request failed: {bad}")
    return [x for x in out if isinstance(x, dict)]


def generate(base_url: str, plan: Plan, n_slots: int, transport: httpx.BaseTransport | None = None
             ) -> dict[str, dict[str, Any]]:
    """The reference generation of one loaded server: mode ("single", and "parallel" where K > 1) → what the
    `outputs` table stores (the prompts, the sequences, the settings, the seconds it took)."""
    limits = httpx.Limits(max_connections=plan.concurrency + 2, max_keepalive_connections=0)
    out: dict[str, dict[str, Any]] = {}
    with httpx.Client(base_url=base_url, timeout=plan.timeout_s, limits=limits, transport=transport) as client:
        prompts = [workload.prompt_ids(client, plan.prompt_tokens, rotate=37 * k) for k in range(plan.prompts)]
        modes = [("single", 1)] + ([("parallel", plan.concurrency)] if plan.concurrency > 1 else [])
        for mode, k in modes:
            lost_ok = engines.get(plan.engine).erase_answer_lost
            if n_slots and not workload.clear_slots(client, n_slots, lost_ok=lost_ok):
                raise WorkloadError("the server refused to erase its slots before the reference generation")
            t0 = time.monotonic()
            try:
                seqs = ([_one(client, ids, i, plan) for i, ids in enumerate(prompts)] if k == 1
                        else _parallel(client, prompts, plan))
            except httpx.HTTPError as e:
                raise WorkloadError(f"a reference request failed: {type(e).__name__}: {e}") from e
            out[mode] = {"sequences": seqs, "prompts": prompts, "n_predict": plan.tokens, "n_probs": plan.top,
                         "concurrency": k, "seconds": round(time.monotonic() - t0, 3)}
    return out
