"""The workload driver: exact-length token prompts, fixed or natural outputs, concurrency, streaming TTFT/ITL.

Requests go to llama-server's `/completion` with token ids (so the prompt is exactly N tokens),
`cache_prompt: false` (so every trial processes its whole prompt) and `stream: true` (so the client sees
when each token arrives). The server's own `timings` arrive in the last event.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from ..core import proc
from ..core.errors import WorkloadError
from ..core.records import RequestResult, Trial
from ..machine import sysload

# A neutral passage the prompt is tokenized from, then repeated to the exact length.
PASSAGE = (
    "The history of measurement is a history of agreement. Before a length could be compared across a market "
    "or a kingdom, people had to settle on what a foot, a cubit or a league meant, and then keep a copy of it "
    "somewhere safe. Engineers still do the same thing with benchmarks: they agree on a workload, write down the "
    "conditions, repeat the run, and report the spread as well as the middle. A number without its conditions "
    "is a rumour; a number with them can be checked by anyone who has the same machine and the same patience. "
    "Rivers, harvests, tides and trains were all measured this way long before computers, and the lesson carried "
    "over: warm the instrument up, take several readings, and distrust the one that looks too good. "
)


@dataclass(frozen=True)
class Shape:
    prompt_tokens: int
    output_tokens: int
    natural: bool = False
    timeout_s: float = 600.0


def _tokenize(client: httpx.Client, text: str, add_special: bool) -> list[int]:
    r = client.post("/tokenize", json={"content": text, "add_special": add_special})
    r.raise_for_status()
    return [t if isinstance(t, int) else t["id"] for t in r.json()["tokens"]]


def special_prefix(special: list[int], plain: list[int]) -> list[int]:
    """The tokens the model's tokenizer puts before a text (BOS where the model adds one): what `special` (the text
    tokenized with special tokens) has in front of `plain` (the same text without) [pure]."""
    for k in range(len(special) - len(plain) + 1):
        if special[k:k + len(plain)] == plain:
            return special[:k]
    return []


def prompt_ids(client: httpx.Client, n: int, *, rotate: int = 0) -> list[int]:
    """Exactly `n` token ids: the model's own prefix (BOS where its tokenizer adds one — llama-server adds none to
    a prompt given as token ids), then the passage tokenized by the server, repeated, rotated."""
    try:
        base = _tokenize(client, PASSAGE, False)
        prefix = special_prefix(_tokenize(client, PASSAGE, True), base)
    except (httpx.HTTPError, KeyError, ValueError, TypeError) as e:
        raise WorkloadError(f"the server could not tokenize the prompt passage: {e}",
                            tip="check that the model has a tokenizer (vocab-only models fail here).") from e
    if not base:
        raise WorkloadError("the server tokenized the prompt passage to no tokens.")
    prefix = prefix[:max(0, n - 1)]  # a one-token prompt stays one passage token
    rotate %= len(base)
    seq = base[rotate:] + base[:rotate]
    body = n - len(prefix)
    return prefix + (seq * (body // len(seq) + 1))[:body]


def request_body(ids: list[int], shape: Shape) -> dict:
    return {
        "prompt": ids,
        "n_predict": shape.output_tokens,
        "ignore_eos": not shape.natural,
        "cache_prompt": False,
        "stream": True,
        "temperature": 0.0,
        "seed": 42,
    }


def one_request(client: httpx.Client, index: int, ids: list[int], shape: Shape) -> RequestResult:
    """Send one streaming completion; never raises — an error is recorded in the result."""
    body = request_body(ids, shape)
    t0 = time.perf_counter()
    first: float | None = None
    last_tok: float | None = None
    gaps: list[float] = []
    final: dict = {}
    try:
        with client.stream("POST", "/completion", json=body, timeout=shape.timeout_s) as r:
            if r.status_code != 200:
                text = r.read().decode("utf-8", "replace")[:300]
                return RequestResult(index=index, wall_s=time.perf_counter() - t0,
                                     error=f"HTTP {r.status_code}: {text}")
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":  # `:` pings, blank separators
                    continue
                now = time.perf_counter()
                try:
                    ev = json.loads(line[6:])
                except ValueError:
                    return RequestResult(index=index, wall_s=time.perf_counter() - t0,
                                         error=f"a stream event is not JSON (was the stream cut?): {line[:120]!r}")
                if not isinstance(ev, dict):
                    return RequestResult(index=index, wall_s=time.perf_counter() - t0,
                                         error=f"a stream event is not a JSON object: {line[:120]!r}")
                if "error" in ev:  # llama-server's error after the stream began: one event, then the end
                    err = ev["error"]
                    what = err.get("message", err) if isinstance(err, dict) else err
                    return RequestResult(index=index, wall_s=time.perf_counter() - t0,
                                         error=f"the server failed mid-stream: {str(what)[:300]}")
                if ev.get("content") or ev.get("tokens"):
                    if first is None:
                        first = now
                    elif last_tok is not None:
                        gaps.append((now - last_tok) * 1000.0)
                    last_tok = now
                if ev.get("stop"):
                    final = ev
    except (httpx.HTTPError, ValueError) as e:
        return RequestResult(index=index, wall_s=time.perf_counter() - t0, error=f"{type(e).__name__}: {e}")
    wall = time.perf_counter() - t0
    t = final.get("timings") or {}
    if not t:
        return RequestResult(index=index, wall_s=wall, error="the stream ended without timings (server died?)")
    return RequestResult(
        index=index,
        prompt_n=t.get("prompt_n"), prompt_ms=t.get("prompt_ms"), prompt_tps=t.get("prompt_per_second"),
        predicted_n=t.get("predicted_n"), predicted_ms=t.get("predicted_ms"),
        predicted_tps=t.get("predicted_per_second"),
        wall_s=wall, ttft_s=(first - t0) if first is not None else None, itl_ms=tuple(round(g, 3) for g in gaps),
        stop_type=final.get("stop_type"),
    )


def clear_slots(client: httpx.Client, n_slots: int, *, lost_ok: bool = False) -> bool:
    """Erase every slot's KV cache (POST /slots/N?action=erase; the server needs --slot-save-path), so that each
    level starts from an empty cache. Without it, a request after a 4-request level attends over the idle slots'
    stale cells in the unified KV cache — measured on an H200: 25k → 16k prompt t/s, 168 → 147 generation t/s.
    `lost_ok`: the server may drop an erase's answer after doing it (ik_llama.cpp: llamacpp/engines.py): an answer
    that has not come in 5 s (the server is idle between levels) counts as done."""
    ok = True
    for i in range(n_slots):
        try:
            r = client.post(f"/slots/{i}", params={"action": "erase"}, timeout=5.0 if lost_ok else 30.0)
            ok = ok and r.status_code == 200
        except httpx.TimeoutException:
            ok = ok and lost_ok
        except httpx.HTTPError:
            ok = False
    return ok


def run_level(client: httpx.Client, concurrency: int, prompts: list[list[int]], shape: Shape
              ) -> tuple[list[RequestResult], float]:
    """`concurrency` requests released together; returns their results and the level's wall time."""
    results: list[RequestResult | None] = [None] * concurrency
    barrier = threading.Barrier(concurrency + 1)

    def worker(i: int) -> None:
        barrier.wait()
        results[i] = one_request(client, i, prompts[i % len(prompts)], shape)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for th in threads:
        th.start()
    barrier.wait()
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    return [r for r in results if r is not None], wall


def measure(
    base_url: str,
    *,
    build: str,
    setting: str,
    trials: tuple[int, ...],
    concurrency: list[int] | None = None,
    shape: Shape | None = None,
    cells: list[tuple[Shape, list[int]]] | None = None,
    warmup: int = 1,
    on_trial: Callable[[Trial], None] = lambda t: None,
    transport: httpx.BaseTransport | None = None,
    n_slots: int = 0,
    go_on: Callable[[int], bool] | None = None,
    erase_lost_ok: bool = False,
) -> list[Trial]:
    """Warm up, then for each trial number, each workload cell (a Shape with the concurrency levels it runs at;
    `shape` with `concurrency` is the one-cell form) and each level, run one level and hand the Trial to
    `on_trial` (which stores it) before the next starts. With `n_slots`, every level starts with all slots
    erased (`erase_lost_ok`: clear_slots' `lost_ok`). `go_on`, asked after each trial number, may end it there."""
    if cells is None:
        if shape is None or not concurrency:
            raise ValueError("measure needs cells, or a shape with concurrency levels")
        cells = [(shape, list(concurrency))]
    cells = [(sh, levels) for sh, levels in cells if levels]
    if not cells:
        return []
    # No keep-alive: a pooled connection that llama-server closed while idle fails the next request at once
    # ("Server disconnected without sending a response"); a fresh loopback connection costs ~0.1 ms.
    top = max(max(levels) for _, levels in cells)
    limits = httpx.Limits(max_connections=top + 2, max_keepalive_connections=0)
    out: list[Trial] = []
    with httpx.Client(base_url=base_url, timeout=cells[0][0].timeout_s, limits=limits, transport=transport) as client:
        prompts = {sh: [prompt_ids(client, sh.prompt_tokens, rotate=7 * k) for k in range(max(levels))]
                   for sh, levels in cells}
        first = cells[0][0]
        for _ in range(warmup):
            w = one_request(client, -1, prompts[first][0], first)
            if not w.ok:
                raise WorkloadError(f"the warm-up request failed: {w.error}",
                                    tip="see the server log; the prompt may exceed the context size.")
        for trial in trials:
            for sh, levels in cells:
                for c in levels:
                    proc.check_stop()
                    if n_slots and not clear_slots(client, n_slots, lost_ok=erase_lost_ok):
                        raise WorkloadError("the server refused to erase its slots between levels",
                                            tip="llama-server needs --slot-save-path for POST /slots/N?action=erase.")
                    started = time.time()
                    before = sysload.snapshot()
                    reqs, wall = run_level(client, c, prompts[sh], sh)
                    t = Trial(build=build, setting=setting, trial=trial, concurrency=c, requests=tuple(reqs),
                              wall_s=wall, started=started,
                              foreign_load=sysload.foreign_cores(before, sysload.snapshot()),
                              cell_prompt_tokens=sh.prompt_tokens, cell_output_tokens=sh.output_tokens)
                    on_trial(t)
                    out.append(t)
            if go_on is not None and trial != trials[-1] and not go_on(trial):
                break
    return out
