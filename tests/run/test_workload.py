"""The workload driver (run/workload.py) against an in-process fake llama-server (`httpx.MockTransport`) that answers
with real llama-server b11312 responses (tests/fixtures/server, sources in its SOURCES.md): streaming TTFT and
inter-token gaps taken from when each event arrives, a server that fails mid-stream, an HTTP error, a timeout, a
stream cut short, `/tokenize` with and without special tokens (BOS), and `measure`'s levels and slot erasing.

Timing tests replace the module's clock with one the fake server advances as it sends each event, so the expected
TTFT and gaps are exact numbers chosen here, not measured ones."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from llamalab.core.errors import WorkloadError
from llamalab.run import workload
from testpaths import FIXTURES

SERVER = FIXTURES / "server"
PLAIN = json.loads((SERVER / "tokenize-plain.json").read_text())["tokens"]
SPECIAL = json.loads((SERVER / "tokenize-special.json").read_text())["tokens"]
STREAM = [b + b"\n\n" for b in (SERVER / "completion-stream.txt").read_bytes().split(b"\n\n") if b.strip()]
FINAL = json.loads(STREAM[-1][6:])
SHAPE = workload.Shape(prompt_tokens=12, output_tokens=5, timeout_s=42.0)
IDS = SPECIAL[:12]


def event(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class Clock:
    """A stand-in for the `time` module inside workload.py: time moves only when the fake server says so."""

    def __init__(self):
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def advance(self, s: float) -> None:
        self.now += s


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(workload, "time", c)
    return c


class Fake:
    """llama-server's endpoints that the driver uses. `/completion` answers with `completion(request)`; the
    default streams the real recorded stream at once. Every request is kept in `requests`."""

    def __init__(self, *, bos: bool = True, completion=None, erase_status: int = 200, tokenize_status: int = 200,
                 pieces: bool = False):
        self.bos, self.completion, self.erase_status = bos, completion, erase_status
        self.tokenize_status, self.pieces = tokenize_status, pieces
        self.requests: list[tuple[str, str, dict | None]] = []
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        with self.lock:
            self.requests.append((request.url.path, str(request.url.params), body))
        if request.url.path == "/tokenize":
            if self.tokenize_status != 200:
                return httpx.Response(self.tokenize_status, json={"error": {"code": 500, "message": "no vocab"}})
            ids = SPECIAL if body["add_special"] and self.bos else PLAIN
            tokens = [{"id": t, "piece": "x"} for t in ids] if self.pieces else ids
            return httpx.Response(200, json={"tokens": tokens})
        if request.url.path.startswith("/slots/"):
            if self.erase_status == 200:
                return httpx.Response(200, json={"id_slot": int(request.url.path.rsplit("/", 1)[1]), "n_erased": 0})
            return httpx.Response(self.erase_status,
                                  content=(SERVER / "error-slots-without-save-path.json").read_bytes())
        if request.url.path == "/completion":
            if self.completion:
                return self.completion(request)
            return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=iter(STREAM))
        return httpx.Response(404)

    def paths(self, path: str) -> list[dict]:
        return [b for p, _, b in self.requests if p == path]


def client(fake: Fake) -> httpx.Client:
    return httpx.Client(base_url="http://llama.test", transport=httpx.MockTransport(fake))


def timed_stream(clock: Clock, parts: list[tuple[float, bytes]], *, headers_after: float = 0.0):
    """A /completion answer whose headers come `headers_after` seconds after the request and whose parts each come
    their delay after the one before."""

    def body() -> Iterator[bytes]:
        for delay, chunk in parts:
            clock.advance(delay)
            yield chunk

    def answer(request: httpx.Request) -> httpx.Response:
        clock.advance(headers_after)
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=body())

    return answer


# ---------------------------------------------------------------- streaming and timing

def test_the_recorded_stream_gives_the_servers_timings():
    fake = Fake()
    with client(fake) as c:
        r = workload.one_request(c, 3, IDS, SHAPE)
    t = FINAL["timings"]
    assert r.ok and r.index == 3 and r.stop_type == "limit"
    assert (r.prompt_n, r.prompt_ms, r.predicted_n, r.predicted_ms) == (12, 45.87, 5, 53.575)
    assert (r.prompt_tps, r.predicted_tps) == (t["prompt_per_second"], t["predicted_per_second"])
    assert len(r.itl_ms) == 4  # five tokens, four gaps
    sent = fake.paths("/completion")[0]
    assert sent == {"prompt": IDS, "n_predict": 5, "ignore_eos": True, "cache_prompt": False, "stream": True,
                    "temperature": 0.0, "seed": 42}


def test_ttft_and_gaps_come_from_when_each_token_event_arrives(clock):
    """Headers after 100 ms; a begin event (no token), a ping and a token-less progress event do not count; the
    first token at 250 ms; an event whose text is held back (an incomplete UTF-8 character) is still a token."""
    tokens = STREAM[:5]
    begin = event({"index": 0, "content": "", "tokens": [], "stop": False, "id_slot": -1, "tokens_predicted": 0,
                   "tokens_evaluated": 12})
    held = event({"index": 0, "content": "", "tokens": [229], "stop": False, "id_slot": -1,
                  "tokens_predicted": 3, "tokens_evaluated": 12})
    parts = [(0.020, begin), (0.010, b":\n\n"), (0.120, tokens[0]), (0.010, tokens[1]), (0.020, held),
             (0.030, tokens[2]), (0.040, tokens[3]), (0.015, tokens[4]), (0.005, STREAM[-1])]
    with client(Fake(completion=timed_stream(clock, parts, headers_after=0.100))) as c:
        r = workload.one_request(c, 0, IDS, SHAPE)
    assert r.ok
    assert r.ttft_s == pytest.approx(0.250)
    assert r.itl_ms == pytest.approx((10.0, 20.0, 30.0, 40.0, 15.0))
    assert r.wall_s == pytest.approx(0.370)


def test_tokens_arriving_in_one_chunk_have_no_gap_between_them(clock):
    """Two events in one network read arrive together: a gap of zero, not an invented one."""
    parts = [(0.050, STREAM[0] + STREAM[1]), (0.025, STREAM[2]), (0.0, STREAM[-1])]
    with client(Fake(completion=timed_stream(clock, parts))) as c:
        r = workload.one_request(c, 0, IDS, SHAPE)
    assert r.ttft_s == pytest.approx(0.050) and r.itl_ms == pytest.approx((0.0, 25.0))


def test_a_real_paced_stream_is_timed_by_the_wall_clock():
    """The same through the real clock: events 60 ms apart give gaps of about 60 ms (never less: the client
    cannot see a token before it is sent)."""

    def answer(request):
        def body():
            for chunk in STREAM[:4]:
                time.sleep(0.060)
                yield chunk
            yield STREAM[-1]
        return httpx.Response(200, content=body())

    with client(Fake(completion=answer)) as c:
        r = workload.one_request(c, 0, IDS, SHAPE)
    assert r.ok and r.ttft_s >= 0.060 and len(r.itl_ms) == 3
    assert all(55.0 <= g < 1000.0 for g in r.itl_ms), r.itl_ms
    assert r.wall_s >= r.ttft_s + sum(r.itl_ms) / 1000.0 - 1e-3


# ---------------------------------------------------------------- errors

def test_a_server_that_fails_mid_stream_is_an_error_with_its_message(clock):
    err = {"error": {"code": 500, "message": "Compute error.", "type": "server_error"}}
    parts = [(0.1, STREAM[0]), (0.01, STREAM[1]), (0.2, event(err))]
    with client(Fake(completion=timed_stream(clock, parts))) as c:
        r = workload.one_request(c, 0, IDS, SHAPE)
    assert not r.ok and r.error == "the server failed mid-stream: Compute error."
    assert r.wall_s == pytest.approx(0.31) and r.predicted_n is None


@pytest.mark.parametrize("status, body, words", [
    (503, b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}', "Loading model"),
    (500, b"upstream exploded", "upstream exploded"),
    (400, (SERVER / "error-exceed-context.json").read_bytes(), "exceeds the available context size"),
])
def test_an_http_error_is_recorded_with_status_and_body(status, body, words):
    with client(Fake(completion=lambda req: httpx.Response(status, content=body))) as c:
        r = workload.one_request(c, 0, IDS, SHAPE)
    assert not r.ok and r.error.startswith(f"HTTP {status}: ") and words in r.error
    assert r.ttft_s is None and r.prompt_n is None


def test_the_request_carries_the_shapes_timeout():
    seen = {}

    def answer(request):
        seen.update(request.extensions["timeout"])
        return httpx.Response(200, content=iter(STREAM))

    with client(Fake(completion=answer)) as c:
        workload.one_request(c, 0, IDS, SHAPE)
    assert seen == {"connect": 42.0, "read": 42.0, "write": 42.0, "pool": 42.0}


def test_a_read_timeout_mid_stream_is_an_error_not_an_exception():
    def answer(request):
        def body():
            yield STREAM[0]
            raise httpx.ReadTimeout("timed out", request=request)
        return httpx.Response(200, content=body())

    with client(Fake(completion=answer)) as c:
        r = workload.one_request(c, 0, IDS, SHAPE)
    assert not r.ok and r.error.startswith("ReadTimeout")


def test_a_server_that_stops_answering_times_out_over_a_real_socket(loopback):
    """A listener that accepts the request and never answers: the request ends after the shape's timeout."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    held = []
    threading.Thread(target=lambda: held.append(srv.accept()), daemon=True).start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as c:
            t0 = time.monotonic()
            r = workload.one_request(c, 0, IDS, workload.Shape(12, 5, timeout_s=0.3))
            took = time.monotonic() - t0
    finally:
        for conn, _ in held:
            conn.close()
        srv.close()
    assert not r.ok and "Timeout" in r.error and 0.3 <= took < 5.0


def test_a_stream_cut_between_events_has_no_timings():
    with client(Fake(completion=lambda req: httpx.Response(200, content=iter(STREAM[:3])))) as c:
        r = workload.one_request(c, 0, IDS, SHAPE)
    assert r.error == "the stream ended without timings (server died?)"


def test_a_stream_cut_inside_an_event_says_so():
    cut = STREAM[-1][:200]  # the final event, cut mid-JSON, and the connection closed
    with client(Fake(completion=lambda req: httpx.Response(200, content=iter([*STREAM[:2], cut])))) as c:
        r = workload.one_request(c, 0, IDS, SHAPE)
    assert r.error.startswith("a stream event is not JSON (was the stream cut?)")


def test_a_connection_closed_mid_body_is_an_error():
    def answer(request):
        def body():
            yield STREAM[0]
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")
        return httpx.Response(200, content=body())

    with client(Fake(completion=answer)) as c:
        r = workload.one_request(c, 0, IDS, SHAPE)
    assert not r.ok and r.error.startswith("RemoteProtocolError: peer closed")


def test_a_done_marker_after_the_final_event_is_not_an_error():
    with client(Fake(completion=lambda req: httpx.Response(200, content=iter([*STREAM, b"data: [DONE]\n\n"])))) as c:
        r = workload.one_request(c, 0, IDS, SHAPE)
    assert r.ok and r.predicted_n == 5


# ---------------------------------------------------------------- prompts of exactly N tokens

def test_the_recorded_tokenizer_adds_bos_in_front():
    assert SPECIAL[0] == 1 and SPECIAL[1:] == PLAIN
    assert workload.special_prefix(SPECIAL, PLAIN) == [1]


@pytest.mark.parametrize("special, plain, prefix", [
    ([5, 6, 7], [5, 6, 7], []),            # no BOS
    ([1, 5, 6, 2], [5, 6], [1]),           # BOS and EOS: only what comes before counts
    ([1, 9, 5, 6], [5, 6], [1, 9]),        # a two-token prefix
    ([1, 5, 6], [], [1, 5, 6][:0]),        # an empty plain text: nothing to find it by, no prefix
    ([7, 8], [5, 6], []),                  # a tokenization that does not contain the text
])
def test_special_prefix(special, plain, prefix):
    assert workload.special_prefix(special, plain) == prefix


@pytest.mark.parametrize("bos", [True, False])
@pytest.mark.parametrize("n", [1, 2, 12, 37, 200])
def test_prompt_ids_are_exactly_n_tokens_behind_the_models_bos(bos, n):
    fake = Fake(bos=bos)
    with client(fake) as c:
        ids = workload.prompt_ids(c, n)
    assert len(ids) == n
    asked = [b["add_special"] for b in fake.paths("/tokenize")]
    assert sorted(asked) == [False, True] and {b["content"] for b in fake.paths("/tokenize")} == {workload.PASSAGE}
    if bos and n > 1:
        assert ids[0] == 1 and 1 not in ids[1:]
        body = ids[1:]
    else:
        assert 1 not in ids  # a one-token prompt is one passage token, never BOS alone
        body = ids
    assert body == (PLAIN * 10)[:len(body)]


def test_prompt_ids_rotate_the_passage_but_keep_bos_first():
    with client(Fake()) as c:
        ids = workload.prompt_ids(c, 20, rotate=7)
    assert ids[0] == 1 and ids[1:] == (PLAIN[7:] + PLAIN[:7])[:19]


def test_token_objects_with_pieces_are_read_by_their_id():
    with client(Fake(pieces=True)) as c:
        assert workload.prompt_ids(c, 5) == [1, *PLAIN[:4]]


def test_a_model_that_cannot_tokenize_is_a_workload_error():
    with client(Fake(tokenize_status=500)) as c, pytest.raises(WorkloadError, match="could not tokenize") as e:
        workload.prompt_ids(c, 8)
    assert "tokenizer" in e.value.tip


# ---------------------------------------------------------------- measure: levels, cells, slots

def test_measure_runs_every_cell_at_every_level_and_erases_slots_before_each():
    fake = Fake()
    stored = []
    small = workload.Shape(prompt_tokens=12, output_tokens=5)
    big = workload.Shape(prompt_tokens=30, output_tokens=5)
    trials = workload.measure("http://llama.test", build="b", setting="s", trials=(1, 2),
                              cells=[(small, [1, 3]), (big, [2])], warmup=1, on_trial=stored.append,
                              transport=httpx.MockTransport(fake), n_slots=4)
    assert stored == trials
    assert [(t.trial, t.cell_prompt_tokens, t.concurrency) for t in trials] == [
        (1, 12, 1), (1, 12, 3), (1, 30, 2), (2, 12, 1), (2, 12, 3), (2, 30, 2)]
    assert all(len(t.requests) == t.concurrency and all(r.ok for r in t.requests) for t in trials)
    assert all(t.foreign_load is not None and t.wall_s > 0 for t in trials)
    prompts = [b["prompt"] for b in fake.paths("/completion")]
    assert len(prompts) == 1 + 2 * (1 + 3 + 2)  # the warm-up, then every request
    assert {len(p) for p in prompts} == {12, 30} and all(p[0] == 1 for p in prompts)
    # every level begins with all four slots erased
    order = [p if p != "/completion" else "c" for p, _, _ in fake.requests if p != "/tokenize"]
    levels = "".join("E" if p.startswith("/slots/") else p for p in order)
    assert levels == "c" + "EEEEc" + "EEEEccc" + "EEEEcc" + "EEEEc" + "EEEEccc" + "EEEEcc"


def test_measure_refuses_a_server_that_cannot_erase_its_slots():
    with pytest.raises(WorkloadError, match="refused to erase its slots") as e:
        workload.measure("http://llama.test", build="b", setting="s", trials=(1,), shape=SHAPE, concurrency=[1],
                         transport=httpx.MockTransport(Fake(erase_status=501)), n_slots=2)
    assert "--slot-save-path" in e.value.tip


def test_a_failed_warm_up_stops_the_measurement():
    fake = Fake(completion=lambda req: httpx.Response(400, content=(SERVER / "error-exceed-context.json").read_bytes()))
    with pytest.raises(WorkloadError, match="warm-up request failed: HTTP 400") as e:
        workload.measure("http://llama.test", build="b", setting="s", trials=(1,), shape=SHAPE, concurrency=[1],
                         transport=httpx.MockTransport(fake))
    assert "context size" in e.value.tip


def test_failed_requests_of_a_level_are_kept_in_its_trial():
    """One request of four fails mid-stream: the trial holds all four, the failure recorded, not raised."""
    calls = []

    def answer(request):
        calls.append(1)
        if len(calls) == 3:
            return httpx.Response(200, content=iter([STREAM[0], event({"error": {"message": "slot lost"}})]))
        return httpx.Response(200, content=iter(STREAM))

    trials = workload.measure("http://llama.test", build="b", setting="s", trials=(1,), shape=SHAPE,
                              concurrency=[4], warmup=1, transport=httpx.MockTransport(Fake(completion=answer)))
    reqs = trials[0].requests
    assert len(reqs) == 4 and sorted(r.index for r in reqs) == [0, 1, 2, 3]
    assert [r.error for r in reqs if not r.ok] == ["the server failed mid-stream: slot lost"]


def test_an_erase_whose_answer_was_lost_counts_as_done_where_the_engine_loses_them():
    """ik_llama.cpp registers to wait for an erase's answer after posting it (llamacpp/engines.py): where its main
    loop is quicker the answer is dropped and the request hangs. With `lost_ok` a 5 s wait that ends unanswered is
    the erase done; without, it is a refusal."""
    waited = []

    def hang(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slots/1":
            waited.append(request.extensions["timeout"]["read"])
            raise httpx.ReadTimeout("timed out", request=request)
        return httpx.Response(200, json={"id_slot": 0, "n_erased": 0})

    with httpx.Client(base_url="http://llama.test", transport=httpx.MockTransport(hang)) as c:
        assert workload.clear_slots(c, 2, lost_ok=True) and waited == [5.0]
        assert not workload.clear_slots(c, 2) and waited[-1] == 30.0
