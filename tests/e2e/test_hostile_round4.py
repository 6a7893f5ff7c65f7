"""Hostile inputs, round four (issue 45): remote models against servers that lie, stall and poison, and output a
user pastes. A hostile web server (tests/hostileserver.py: files made on the fly, every request recorded) and the
local Hugging Face hub and ollama registry (tests/hubserver.py, with its hostile modes) on 127.0.0.1; every loop on
their side is bounded, so a client that never gives up still ends. Deadlines are short here (`FAST`: 2 s a request;
the defaults stay 300 s) so the suite stays fast.

Each test names the defect of the issue it is about (1 … 11). Every command-line case runs `cli.entry` and is
searched for "Traceback" (`clean_error`)."""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostileserver import File, Hostile
from hubserver import COMMIT, MICRO, Hub
from llamalab import cli
from llamalab.core.errors import ModelError
from llamalab.models import gguf
from llamalab.models import synthetic as models
from llamalab.models.remote import rangeio
from llamalab.models.remote import source as modelsource

# spread: the tests share nothing a worker cannot make again in a second (the micro models, a stored tune run)
pytestmark = [pytest.mark.usefixtures("loopback"), pytest.mark.spread]

FAST = rangeio.Policy(connect_s=2, read_s=1, request_s=2, retries=2, backoff_s=0.01)
TiB = 1 << 40


@pytest.fixture(scope="module")
def micro(tmp_path_factory) -> Path:
    return models.write_synthetic(MICRO, tmp_path_factory.mktemp("micro") / "Micro-F16.gguf")


@pytest.fixture(scope="module")
def micro8k(tmp_path_factory) -> Path:
    """The same model but for its header's context (8,192 tokens): the same size, another header."""
    return models.write_synthetic(dataclasses.replace(MICRO, n_ctx_train=8192),
                                  tmp_path_factory.mktemp("micro8k") / "Micro-F16.gguf")


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("LLAMALAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LLAMALAB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(modelsource, "POLICY", FAST, raising=False)  # (raising=False: the test runs on main too)
    return tmp_path / "home"


@pytest.fixture
def hub(micro, home, monkeypatch):
    with Hub() as h:
        h.add_repo("llamalab/Micro-GGUF", {"Micro-F16.gguf": micro})
        h.add_ollama("micro", "f16", micro)
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        monkeypatch.setenv("LLAMALAB_OLLAMA_REGISTRY", h.registry)
        yield h


@pytest.fixture
def web(home):
    with Hostile() as h:
        yield h


def resolve(text: str, home: Path, **kw):
    return modelsource.resolve(text, home, policy=kw.pop("policy", FAST), **kw)


def clean_error(capsys, argv: list[str], *, code: tuple[int, ...] = (1, 2), match: str = "") -> str:
    """`llamalab ARGV` ends with one error line and a tip, exit 1 or 2, and no traceback."""
    got = cli.entry(argv)
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Traceback" not in text, text
    assert got in code, (got, text)
    assert "error:" in out.err and "tip:" in out.err, out.err
    assert match in out.err, out.err
    for raw in ("\x1b", "\x9b", "\u202e"):
        assert raw not in text
    return out.err


# ---------------------------------------------------------------- 1. the header limit is a limit


def huge_vocab(n: int = 4_000_000, length: int = 4096) -> File:
    """A GGUF header whose tokenizer.ggml.tokens holds `n` strings of `length` bytes (under the string-count cap),
    in a file the server says is 1 TiB: made on the fly."""
    key = b"tokenizer.ggml.tokens"
    prefix = (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
              + struct.pack("<IIQ", 9, 8, n))
    record = struct.pack("<Q", length) + b"a" * length

    def read(a: int, b: int) -> bytes:
        out = prefix[a:b] if a < len(prefix) else b""
        lo = max(a, len(prefix)) - len(prefix)
        hi = b - len(prefix)
        if hi > lo:
            i = lo % len(record)
            out += (record * ((i + hi - lo) // len(record) + 1))[i:i + hi - lo]
        return out

    return File(size=TiB, read=read, cut=24 << 20)  # each answer cut at 24 MiB (the issue's server: 1.5 GiB)


CHILD = r"""
import json, resource, sys, time
from llamalab.models.remote import rangeio, source
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.monotonic()
try:
    source.resolve(sys.argv[1], sys.argv[2], policy=rangeio.Policy(retries=1, backoff_s=0.01, request_s=60))
    error = None
except Exception as e:
    error = f"{type(e).__name__}: {e}"
print(json.dumps({"before_kib": before, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "seconds": time.monotonic() - t0, "error": error}))
"""


def test_a_header_past_the_limit_is_refused_without_a_request_past_it_and_in_bounded_memory(web, home, tmp_path):
    """1. No Range request reaches past the 128 MiB header limit, none asks for more than 16 MiB, and the process's
    peak RSS grows by at most the limit plus two requests and 64 MiB of slack (224 MiB) whatever the server claims
    (1 TiB) and the vocabulary says (4,000,000 strings of 4 KiB: 16 GB)."""
    url = web.add("huge.gguf", huge_vocab())
    env = {**os.environ, "PYTHONPATH": str(Path(modelsource.__file__).parents[3])}
    done = subprocess.run([sys.executable, "-c", CHILD, url, str(home)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    limit, piece = rangeio.Policy().max_header, rangeio.Policy().max_request
    ranges = web.ranges()
    print(f"requests {len(ranges)}, last byte asked {max(b for _, b in ranges):,}, body bytes sent {web.sent:,}, "
          f"RSS {got['before_kib'] / 1024:.0f} MiB → peak {got['peak_kib'] / 1024:.0f} MiB in {got['seconds']:.1f} s")
    assert max(b for _, b in ranges) <= limit, ranges
    assert all(b - a <= piece for a, b in ranges), ranges
    assert web.sent <= limit
    assert got["error"] and "runs past 128 MiB" in got["error"], got
    assert (got["peak_kib"] - got["before_kib"]) * 1024 <= limit + 2 * piece + (64 << 20), got


def test_arrays_of_numbers_are_counted_past_a_total_not_held(tmp_path):
    """10. 20,000 keys of 4,096 one-byte numbers (80 MiB of header): a list each would hold 8 bytes a number (650
    MiB); past gguf.LIST_TOTAL items they are counted like long arrays."""
    n_keys = 20_000
    body = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, n_keys))
    item = struct.pack("<IIQ", 9, 0, 4096) + b"\1" * 4096
    for i in range(n_keys):
        key = f"x.{i}".encode()
        body += struct.pack("<Q", len(key)) + key + item
    hdr = gguf.header(bytes(body))
    lists = [v for v in hdr.kv.values() if isinstance(v, list)]
    assert sum(len(v) for v in lists) <= gguf.LIST_TOTAL
    assert all(isinstance(v, (list, gguf.ArrayInfo)) and len(v) == 4096 for v in hdr.kv.values())


# ---------------------------------------------------------------- 2. a stall ends within the stated time


def _ends_quickly(call, match: str) -> float:
    t0 = time.monotonic()
    with pytest.raises(ModelError, match=match) as e:
        call()
    took = time.monotonic() - t0
    assert e.value.tip
    return took


@pytest.mark.parametrize("where", ["head", "body"])
def test_a_trickling_server_is_cut_at_the_request_deadline(web, micro, home, where):
    """2. A server that sends a byte every 0.2 s (so no read ever waits 1 s, the read timeout) of its HEAD answer or
    of a Range body: the request ends at its 2 s deadline, with an error that says so, and is not retried."""
    url = web.add_path("m.gguf", micro, **{where: "trickle"}, trickle_s=0.2, trickle_max=100)
    took = _ends_quickly(lambda: resolve(url, home), "took more than 2 s")
    print(f"{where}: ended after {took:.2f} s")
    assert took < FAST.request_s + 1.5
    assert len([r for r in web.requests if r[0] == ("HEAD" if where == "head" else "GET")]) == 1  # not retried


def test_a_trickling_manifest_and_listing_are_cut_too(hub, home):
    """2. The ollama manifest (read by llamalab) and the hub's listing (read by huggingface_hub's client) within
    the same deadline; a blob host that sends headers and then nothing, within its read timeouts."""
    hub.fail.add("manifest-trickle")
    took = _ends_quickly(lambda: resolve("ollama://micro:f16", home), "took more than 2 s")
    print(f"manifest: ended after {took:.2f} s")
    assert took < FAST.request_s + 1.5, took
    hub.fail = {"listing:trickle"}
    took = _ends_quickly(lambda: modelsource.resolve_repo("hf://llamalab/Micro-GGUF", home, policy=FAST),
                         "took more than 2 s")
    print(f"listing: ended after {took:.2f} s")
    assert took < FAST.request_s + 1.5, took
    hub.fail = {"stall"}  # the blob host: headers, then nothing (the read timeout, retried twice)
    took = _ends_quickly(lambda: resolve("hf://llamalab/Micro-GGUF/Micro-F16.gguf", home), "stopped answering")
    print(f"stalled blob host: ended after {took:.2f} s")
    assert took < 3 * FAST.read_s + 1.5, took


def test_the_cli_says_a_huge_header_and_a_stall_in_one_error_and_a_tip(web, hub, micro, home, tmp_path, capsys,
                                                                       monkeypatch):
    """1, 2. Through the command line (`stub`, deadlines of 2 s, a header limit of 8 MiB): no traceback."""
    monkeypatch.setattr(modelsource, "POLICY", dataclasses.replace(FAST, max_header=8 << 20), raising=False)
    out = str(tmp_path / "s.gguf")
    clean_error(capsys, ["stub", web.add("huge.gguf", huge_vocab()), "-o", out], match="runs past 8 MiB")
    for where in ("head", "body"):
        url = web.add_path(f"{where}.gguf", micro, **{where: "trickle"}, trickle_s=0.2, trickle_max=100)
        clean_error(capsys, ["stub", url, "-o", out], match="took more than 2 s")
    hub.fail.add("manifest-trickle")
    clean_error(capsys, ["stub", "ollama://micro:f16", "-o", out], match="took more than 2 s")


# ---------------------------------------------------------------- 5. the stand-in cache is not poisoned or stale


def test_another_repository_or_a_mirror_claiming_the_same_hash_gets_its_own_stand_in(hub, micro, micro8k, home,
                                                                                      monkeypatch):
    """5. A repository that claims the real model's sha256 (and serves a header of 8,192 tokens) plants nothing
    that a later plan of the real model (4,096) reuses; neither does a mirror (another HF_ENDPOINT)."""
    real_sha = rangeio.sha256_of(micro)
    hub.add_repo("evil/Fake-GGUF", {"Micro-F16.gguf": micro8k}, salt="fake", claims={"Micro-F16.gguf": real_sha})
    fake = resolve("hf://evil/Fake-GGUF/Micro-F16.gguf", home)
    assert models.read_info(fake.path).n_ctx_train == 8192
    real = resolve("hf://llamalab/Micro-GGUF/Micro-F16.gguf", home)
    assert not real.cached and models.read_info(real.path).n_ctx_train == 4096
    with Hub() as mirror:
        mirror.add_repo("llamalab/Micro-GGUF", {"Micro-F16.gguf": micro8k}, salt="mirror",
                        claims={"Micro-F16.gguf": real_sha})
        monkeypatch.setenv("HF_ENDPOINT", mirror.endpoint)
        assert models.read_info(resolve("hf://llamalab/Micro-GGUF/Micro-F16.gguf", home).path).n_ctx_train == 8192
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    again = resolve("hf://llamalab/Micro-GGUF/Micro-F16.gguf", home)
    assert again.cached and models.read_info(again.path).n_ctx_train == 4096


def test_a_url_without_validators_is_read_again_and_never_spliced(web, micro, micro8k, home):
    """5. A server that sends neither ETag nor Last-Modified: a changed file (same size) is read again, never
    taken from the cache; a download of it never resumes another version's bytes."""
    data = {"v": micro.read_bytes()}
    web.add("m.gguf", File(size=len(data["v"]), read=lambda a, b: data["v"][a:b], etag=None))
    url = f"{web.base}/m.gguf"
    assert models.read_info(resolve(url, home).path).n_ctx_train == 4096
    data["v"] = micro8k.read_bytes()
    second = resolve(url, home)
    assert not second.cached and models.read_info(second.path).n_ctx_train == 8192
    with modelsource.Session.open(home, policy=FAST) as s:
        remote = modelsource.locate(modelsource.modelref.parse(url), s)
    dest = home / "models" / "remote" / modelsource._key(remote) / remote.parts[0].name
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.with_name(dest.name + ".part").write_bytes(micro.read_bytes()[: len(data["v"]) // 2])  # the old version
    got = resolve(url, home, weights=True)
    assert got.path.read_bytes() == micro8k.read_bytes()  # the new file whole: no splice


# ---------------------------------------------------------------- 7. a repository plan is bounded


def test_a_repository_of_ten_thousand_models_is_refused_before_any_header(hub, home, capsys):
    """7. 10,000 models: refused at once, saying how to ask for more; no header is read."""
    hub.fail.add("listing:many:10000")
    err = clean_error(capsys, ["plan", "--model", "hf://llamalab/Micro-GGUF"], match="10,001 GGUF models")
    assert "--max-models 10001" in err
    assert not [x for x in hub.log if "/resolve/" in x or x.startswith("GET /blobs/")]


def test_a_link_next_loop_ends(hub, home, capsys):
    """7. A listing whose `Link: next` leads back to itself (empty pages) ends after a bounded number of pages."""
    hub.fail.add("listing:loop")
    clean_error(capsys, ["plan", "--model", "hf://llamalab/Micro-GGUF"], match="goes on past")
    assert 1 < hub.loops <= 201


# ---------------------------------------------------------------- 8. signed URLs, split models, HEAD refused


def _split(tmp_path: Path, n: int = 3) -> list[Path]:
    """A gguf-split model of `n` parts (split.no, split.count, one small tensor each)."""
    import gguf as gg
    import numpy as np

    out = []
    for i in range(n):
        p = tmp_path / f"S-Q8_0-{i + 1:05d}-of-{n:05d}.gguf"
        w = gg.GGUFWriter(str(p), "llama")
        w.add_uint16("split.no", i)
        w.add_uint16("split.count", n)
        w.add_int32("split.tensors.count", n)
        w.add_tensor(f"t{i}", np.zeros(32, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        out.append(p)
    return out


def test_a_signed_split_model_keeps_its_query_and_a_server_without_head_is_read(web, home, tmp_path):
    """8. Every part of a split model is asked for with the first part's query string (its signature), and a
    server that refuses HEAD (403, as a URL signed for GET) is read by its first Range answer's size."""
    parts = _split(tmp_path)
    for p in parts:
        web.add_path(p.name, p, query="sig=s3cret", head="refuse")
    res = resolve(f"{web.base}/{parts[0].name}?sig=s3cret", home)
    assert res.parts == 3 and res.size == sum(p.stat().st_size for p in parts)
    assert all("sig=s3cret" in path for _, path, _ in web.requests)


def test_a_head_size_that_the_range_answers_contradict_is_an_error(web, micro, home):
    """8. HEAD says one size, Content-Range another: refused (the file changed, or the server is inconsistent)."""
    url = web.add_path("m.gguf", micro, head=f"size:{micro.stat().st_size + 4096}")
    with pytest.raises(ModelError, match=r"then [\d,]+ \(Content-Range\)"):
        resolve(url, home)


def test_a_stub_of_a_split_model_is_refused_before_any_part_is_read(web, home, tmp_path, capsys):
    """10. `stub` writes one file: a split model is refused before its parts are fetched."""
    parts = _split(tmp_path)
    for p in parts:
        web.add_path(p.name, p)
    clean_error(capsys, ["stub", f"{web.base}/{parts[0].name}", "-o", str(tmp_path / "s.gguf")],
                match="split model of 3 parts")
    assert not [r for r in web.requests if r[2]]  # no Range request


# ---------------------------------------------------------------- 6 and 10. no traceback, one error and a tip


def test_hostile_answers_are_one_error_and_a_tip(web, hub, micro, home, tmp_path, capsys, monkeypatch):
    """6, 10. A Content-Range of 5,000 digits, a redirect to data:, a gzip answer, hub listings that are not JSON,
    of the wrong shape or with a 5,000-digit size, an ollama manifest 200,000 deep or with `"size": true`."""
    out = str(tmp_path / "s.gguf")
    cases = [(web.add_path("d.gguf", micro, body="digits"), "does not answer bytes="),
             (web.add_path("r.gguf", micro, body="data-redirect"), "cannot fetch"),
             (web.add_path("z.gguf", micro, body="gzip"), "Content-Encoding: gzip")]
    for url, match in cases:
        clean_error(capsys, ["stub", url, "-o", out], match=match)
    assert len([r for r in web.requests if r[:2] == ("GET", "/r.gguf")]) == 1  # the redirect is not retried
    for mode in ("listing:not-json", "listing:wrong-shape", "listing:digits"):
        hub.fail = {mode}
        clean_error(capsys, ["plan", "--model", "hf://llamalab/Micro-GGUF"], match="listing is not what")
    for mode, match in (("manifest-nested", "not a v2 image manifest"), ("manifest-size-true", "no valid digest")):
        hub.fail = {mode}
        clean_error(capsys, ["stub", "ollama://micro:f16", "-o", out], match=match)


@pytest.mark.parametrize("model, match", [
    ("http://127.0.0.1:abc/m.gguf", "not a URL llamalab can fetch"),
    ("http://[::1/m.gguf", "not a URL llamalab can fetch"),
    pytest.param("http://" + "a" * 70_000 + "/m.gguf", "longer than any model's address", id="70000-characters"),
    ("http://xn--/m.gguf", "not a URL llamalab can fetch"),
    ("http://user:secret@127.0.0.1:99999/m.gguf", "not a URL llamalab can fetch"),
])
def test_malformed_model_urls(home, capsys, model, match):
    err = clean_error(capsys, ["stub", model, "-o", "x.gguf"], match=match)
    assert "secret" not in err and len(err) < 2000


@pytest.mark.parametrize("var, value", [("HF_ENDPOINT", "not a url"), ("HF_ENDPOINT", "http://[::1"),
                                        ("LLAMALAB_OLLAMA_REGISTRY", "ftp://x"),
                                        ("LLAMALAB_OLLAMA_REGISTRY", "http://h:port")])
def test_malformed_endpoints(home, capsys, monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    model = "ollama://micro:f16" if var.startswith("LLAMALAB") else "hf://llamalab/Micro-GGUF/Micro-F16.gguf"
    clean_error(capsys, ["stub", model, "-o", "x.gguf"], match=f"{var}=")


def test_listed_paths_outside_the_repository_are_skipped_and_nothing_is_written_outside(hub, home, tmp_path, capsys):
    """6. A listing with an absolute and a `../` path: skipped, said, and nothing written outside the caches."""
    hub.fail.add("listing:unsafe")
    before = set(tmp_path.parent.iterdir())
    clean_error(capsys, ["plan", "--model", "hf://llamalab/Micro-GGUF:Q4_K_M", "--download"],
                match="no Q4_K_M model")
    assert set(tmp_path.parent.iterdir()) == before
    assert not Path("/etc/llamalab-Q4_K_M.gguf").exists()


def test_budget_of_400_digits_and_nan_seconds(home, capsys):
    """6, 10. Said at the option (click's usage error for a value no number option takes), not at the preset."""
    clean_error(capsys, ["plan", "--budget", "1" * 400 + "GiB"], match="more memory than any device")
    assert cli.entry(["tune", "--seconds", "nan"]) == 2
    err = capsys.readouterr().err
    assert "Invalid value for '--seconds': nan is not a finite number" in err and "Traceback" not in err


def test_a_quant_missing_from_a_big_repository_is_a_short_error(hub, home, capsys):
    """10. :QUANT absent from a repository of 3,000 models: the quants listed are cut, not a 130 KB line."""
    hub.fail.add("listing:many:3000")
    err = clean_error(capsys, ["stub", "hf://llamalab/Micro-GGUF:IQ1_S", "-o", "x.gguf"], match="no IQ1_S model")
    assert len(err) < 2000


def test_a_full_hf_cache_is_not_called_no_network(hub, home, monkeypatch):
    """10. hf_hub_download that cannot write its cache (ENOSPC) says so, not "no network here?"."""
    import errno

    import huggingface_hub

    def full(*a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", full)
    with pytest.raises(ModelError, match="cannot write into Hugging Face's cache") as e:
        resolve("hf://llamalab/Micro-GGUF/Micro-F16.gguf", home, weights=True)
    assert "no network" not in e.value.message and "HF_HUB_CACHE" in e.value.tip


def test_a_cache_that_cannot_be_written_does_not_blame_o(hub, home, capsys):
    """10. A stand-in that cannot be written into the cache (a folder where the file goes) names the cache and
    LLAMALAB_HOME, not -o."""
    url = "hf://llamalab/Micro-GGUF/Micro-F16.gguf"
    with modelsource.Session.open(home, policy=FAST) as s:
        remote = modelsource.locate(modelsource.modelref.parse(url), s)
    (home / "remote" / modelsource._key(remote) / remote.parts[0].name).mkdir(parents=True)
    err = clean_error(capsys, ["stub", url, "-o", str(home.parent / "s.gguf")], match="stand-in cache")
    assert "(-o)" not in err and "give -o" not in err and "LLAMALAB_HOME" in err


def test_unsupported_redirects_are_not_retried_as_network_trouble(web, micro, home):
    """10. A redirect to data: is one request and a clear error, not 7.8 s of retries as "no network here?"."""
    url = web.add_path("r.gguf", micro, body="data-redirect", head="405")
    t0 = time.monotonic()
    with pytest.raises(ModelError, match="cannot fetch") as e:
        resolve(url, home, policy=dataclasses.replace(FAST, retries=4, backoff_s=0.5))
    assert time.monotonic() - t0 < 1.5 and "no network" not in e.value.message


def test_download_from_a_server_that_refuses_head_and_range(web, micro, home):
    """10. --download from a server that refuses HEAD and ignores Range: one whole GET, not "pass --download"."""
    url = web.add_path("m.gguf", micro, head="405", body="no-range")
    got = resolve(url, home, weights=True)
    assert got.path.read_bytes() == micro.read_bytes()


def test_credentials_in_a_url_are_not_shown_or_stored_readable(web, micro, home, capsys):
    """10. user:password@ and a signed URL's query are neither printed nor stored, and source.json is 0600."""
    url = web.add_path("m.gguf", micro, query="X-Sig=s3cret")
    authed = url.replace("http://", "http://user:pa55@")
    assert cli.entry(["stub", authed, "-o", str(home.parent / "s.gguf")]) == 0
    out = capsys.readouterr()
    assert "pa55" not in out.err and "s3cret" not in out.err
    record = next(home.rglob("source.json"))
    assert "pa55" not in record.read_text() and "s3cret" not in record.read_text()
    assert record.stat().st_mode & 0o077 == 0


def test_a_hub_file_name_with_escape_sequences_is_printed_plain(hub, micro, home, capsys):
    """9. A file name from the hub with an 8-bit CSI and an RTL override (a listed path with C0 controls, an OSC
    among them, is skipped as no path inside the repository): the "read its header" note shows neither."""
    name = "\x9b2JMicro-\u202eQ8_0.gguf"
    hub.add_repo("evil/Names-GGUF", {name: micro})
    assert cli.entry(["stub", "hf://evil/Names-GGUF:Q8_0", "-o", str(home.parent / "s.gguf")]) == 0
    err = capsys.readouterr().err
    assert "read its header" in err and "\x9b" not in err and "\u202e" not in err


def test_the_repository_table_in_markdown_escapes_file_names():
    """9. `plan --markdown` of a repository whose files are named with HTML, links and escapes."""
    from llamalab.plan.repo import QuantRow, RepoPlan
    from llamalab.report.views import planrepo as view

    bad = "<img src=x onerror=alert(1)>[y](javascript:alert(1))\x1b]0;t\x07\u202e"
    row = QuantRow(quant="Q4" + bad, name="M" + bad, files=[f"M{bad}.gguf"], size_bytes=1, fetched_bytes=1,
                   status="failed", reason="damaged: " + bad)
    plan = RepoPlan(ref="hf://o/r" + bad, study="s", build="b", backend="cpu", devices=[], budgets_mib=None,
                    margins_mib=None, context=None, rows=[row], skipped=[(f"x{bad}.gguf", "why " + bad)],
                    size_bytes=1, fetched_bytes=1, llama_cpp="b1", seconds=0.1)
    text = view.markdown(plan)
    for b in ("<img", "](javascript:", "\x1b", "\u202e", "\x07"):
        assert b not in text, b


# ---------------------------------------------------------------- 11. one commit, llama.cpp's :QUANT, offline


def test_a_repository_is_read_at_one_commit(hub, home):
    """11. The listing and every file of a plan are read at the commit the model info names, not at `main`."""
    modelsource.resolve_repo("hf://llamalab/Micro-GGUF", home, policy=FAST)
    asked = [x for x in hub.log if "/tree/" in x or "/resolve/" in x]
    assert asked and all(f"/{COMMIT}" in x for x in asked), asked


def test_quant_is_the_file_llama_cpp_picks(hub, micro, home):
    """11. hf://OWNER/REPO:Q4_K_M loads what `llama-server -hf OWNER/REPO:Q4_K_M` loads: the first listed file
    whose path holds `Q4_K_M.` or `Q4_K_M-` (llama.cpp b11312 `find_best_model`) — here an Unsloth-style
    `UD-Q4_K_M` file, whose quant label llamalab's own pattern reads as UD-Q4_K_M."""
    hub.add_repo("llamalab/UD-GGUF", {"M-UD-Q4_K_M.gguf": micro, "M-Q8_0.gguf": micro})
    assert resolve("hf://llamalab/UD-GGUF:Q4_K_M", home).path.name == "M-UD-Q4_K_M.gguf"


def test_a_cached_stand_in_is_used_offline(hub, home, monkeypatch):
    """11. With HF_HUB_OFFLINE set, a stand-in an earlier plan cached is used, and nothing is asked."""
    first = resolve("hf://llamalab/Micro-GGUF/Micro-F16.gguf", home)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    n = len(hub.log)
    again = resolve("hf://llamalab/Micro-GGUF/Micro-F16.gguf", home)
    assert again.cached and again.path == first.path and len(hub.log) == n
    with pytest.raises(ModelError, match="no stand-in of it is cached"):
        resolve("hf://llamalab/Micro-GGUF/Other-F16.gguf", home)


def test_one_bad_model_gives_its_row_an_error(hub, micro, home, tmp_path):
    """11. A repository with one damaged model: the others are read, the damaged one is a row with its reason."""
    bad = tmp_path / "Bad-Q8_0.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 64)
    hub.add_repo("llamalab/Mixed-GGUF", {"Micro-F16.gguf": micro, "Bad-Q8_0.gguf": bad})
    found = modelsource.resolve_repo("hf://llamalab/Mixed-GGUF", home, policy=FAST)
    assert [m.name for m, _ in found.models] == ["Micro-F16"]
    assert [(m.name, "GGUF" in why or "damaged" in why) for m, why in found.failed] == [("Bad-Q8_0", True)]


# ---------------------------------------------------------------- 3. llama-swap's entry for any path


def llama_swap_argv(cmd: str, port: int = 5800) -> list[str]:
    """What llama-swap makes of a model's cmd (mostlygeek/llama-swap proxy/config/config.go: `${env.…}` read from the
    YAML, every other `${…}` a macro that must exist, `${PORT}` replaced; `StripComments` and `SanitizeCommand`:
    lines whose trimmed start is `#` dropped, a trailing backslash joins lines; then a POSIX shell split)."""
    import re
    import shlex

    assert not re.search(r"\$\{env\.[A-Za-z_][A-Za-z0-9_]*\}", cmd), cmd
    assert [m for m in re.findall(r"\$\{([a-zA-Z0-9_-]+)\}", cmd) if m != "PORT"] == [], cmd
    cmd = cmd.replace("${PORT}", str(port))
    lines = [x for x in cmd.split("\n") if not x.strip().startswith("#")]
    lines = [x.strip()[:-1] + " " if x.strip().endswith("\\") else x for x in lines]
    return shlex.split("\n".join(lines))


def _swap_view(path: str):
    from types import SimpleNamespace

    from llamalab.core.safetext import shell_line

    words = ["llama-server", "-m", path, "-fa", "on", "-c", "8192", "-np", "1", "-kvu"]
    return SimpleNamespace(command=shell_line(words), command_words=words, doc={"model": {"path": path}},
                           run_id="20261207-1-abc", pick=SimpleNamespace(reason="t01: the most context\nat speed"))


_NASTY = ["\n", "\r", ":", ": ", "#", " #", "'", '"', "${", "}", "${env.HOME}", "${PORT}", "${MODEL_ID}", "\\",
          "\\\n", " ", "-", "models:", "\x85", "\u2028", "\ufeff", "a", "é", "\U0001f600", "\t", "|", ">", "&", "*"]



def test_llama_swap_entry_is_one_model_with_the_command_for_any_path():
    """3. For any path (newlines, `:`, `#`, quotes, `${…}`, YAML's other line breaks …): the entry parses as YAML
    with exactly one model, and llama-swap splits its cmd into exactly the command's words."""
    import yaml
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from llamalab.report.analysis.tune import llama_swap

    paths = st.one_of(st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=60),
                      st.lists(st.sampled_from(_NASTY), min_size=1, max_size=24).map("".join))

    @settings(max_examples=400, deadline=None, derandomize=True)
    @given(paths)
    def check(path: str) -> None:
        v = _swap_view(path)
        doc = yaml.safe_load(llama_swap(v))
        assert list(doc) == ["models"] and len(doc["models"]) == 1
        (key, entry), = doc["models"].items()
        assert key == Path(path).stem and list(entry) == ["cmd"]
        assert llama_swap_argv(entry["cmd"]) == ["llama-server", "--port", "5800", *v.command_words[1:]]

    check()


# ---------------------------------------------------------------- 4. the exact command, piped and at 80 columns


HF_PATH = ("/home/someone/.cache/huggingface/hub/models--unsloth--Qwen3-30B-A3B-Instruct-2507-GGUF/snapshots/"
           "0123456789abcdef0123456789abcdef01234567/UD-Q4_K_XL/Qwen3-30B-A3B-Instruct-2507-UD-Q4_K_XL-00001-of-"
           "00002.gguf")
SHOW = r"""
import sys
from pathlib import Path
from llamalab.cli.tune import _tune_outcome
from llamalab.setup.options import RunOptions
try:
    _tune_outcome(RunOptions(db=Path(sys.argv[1]), runs_dir=Path(sys.argv[2])), sys.argv[3], sys.argv[4], False)
except SystemExit:
    pass
"""


def _tune_run(tmp: Path, model: str) -> tuple[Path, str]:
    """A stored tune run (the H200 race of benchmarks/tune-h200) whose model is `model`."""
    from testpaths import ROOT

    doc = json.loads((ROOT / "benchmarks" / "tune-h200" / "export-8b-race.json").read_text())
    for row in doc["tables"]["tunes"]:
        result = row["result_json"]
        result = json.loads(result) if isinstance(result, str) else result
        result["model"]["path"] = model
        row["result_json"] = result
    (tmp / "x.json").write_text(json.dumps(doc))
    assert cli.entry(["import", str(tmp / "x.json"), "--db", str(tmp / "x.db")]) == 0
    return tmp / "x.db", doc["run_id"]


@pytest.fixture(scope="module")
def tune_db(tmp_path_factory):
    """A stored tune run whose model is a file in the Hugging Face cache."""
    return _tune_run(tmp_path_factory.mktemp("tune"), HF_PATH)


def _expected_command(db: Path, run_id: str) -> str:
    from llamalab.report import data as rdata
    from llamalab.report.analysis import tune as rtune
    from llamalab.store.db import Store

    with Store(db, readonly=True) as store:
        return rtune.view(rdata.load(store, run_id, requests=False)).command


def _show(db: Path, run_id: str, emit: str, tmp: Path, tty: bool) -> str:
    import pty

    env = {**os.environ, "COLUMNS": "80", "LINES": "24", "TERM": "xterm-256color",
           "PYTHONPATH": str(Path(modelsource.__file__).parents[3])}
    env.pop("NO_COLOR", None)
    argv = [sys.executable, "-c", SHOW, str(db), str(tmp), run_id, emit]
    if not tty:
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120).stdout
    master, slave = pty.openpty()
    os.set_inheritable(slave, True)
    import fcntl
    import termios

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    p = subprocess.Popen(argv, stdout=slave, stderr=subprocess.DEVNULL, env=env, close_fds=True)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=120)
    os.close(master)
    return out.decode().replace("\r\n", "\n")


@pytest.mark.parametrize("tty", [False, True], ids=["pipe", "pty-80-columns"])
def test_the_exact_command_survives_a_pipe_and_80_columns(tune_db, tmp_path, tty):
    """4. The pick's command (here 277 characters: a model in the Hugging Face cache) is printed as one line, byte
    for byte, piped and on an 80-column terminal (a pty)."""
    db, run_id = tune_db
    cmd = _expected_command(db, run_id)
    assert len(cmd) > 250 and HF_PATH in cmd
    out = _show(db, run_id, "command", tmp_path, tty)
    assert cmd in out.split("\n"), out[-2000:]


EVIL = "/m/x\n  evil:\n    cmd: touch /tmp/pwned # ${env.HOME} ${PORT}:\n#.gguf"


def test_the_llama_swap_entry_from_the_cli_parses(tmp_path):
    """3. `tune --emit llama-swap`'s output, piped, for a model path that is itself a llama-swap entry: after the
    table, YAML of one model whose cmd holds the path as one word."""
    import yaml

    db, run_id = _tune_run(tmp_path, EVIL)
    out = _show(db, run_id, "llama-swap", tmp_path, False)
    doc = yaml.safe_load(out[out.index("# llamalab tune"):])
    (key, entry), = doc["models"].items()
    assert key == Path(EVIL).stem and EVIL in llama_swap_argv(entry["cmd"])


# ---------------------------------------------------------------- 9. reports of imported runs


MARKUP = "<details open>x</summary></details><img src=x onerror=alert(1)>[y](javascript:alert(1))\n# z"


@pytest.mark.filterwarnings("ignore:constrained_layout not applied")  # (the plots' labels: 150 characters of names)
def test_markdown_and_forum_reports_escape_imported_names(tmp_path):
    """9. Build, setting and study names of an imported run carrying HTML, a javascript: link and a newline: the
    Markdown and forum reports show them as text (no tag, fold, link or line break); the HTML report escapes them."""
    from testpaths import ROOT

    doc = json.loads((ROOT / "tests" / "fixtures" / "runs" / "demo-cpu-rpc.json").read_text())
    names = {}
    for table in ("builds", "configs", "trials", "ledgers", "buffers"):
        for row in doc["tables"].get(table, []):
            for col in ("name", "build", "build_name"):
                if isinstance(row.get(col), str):
                    row[col] = names.setdefault(row[col], row[col] + MARKUP)
    for row in doc["tables"]["runs"]:
        row["study"] = "demo" + MARKUP
    (tmp_path / "x.json").write_text(json.dumps(doc))
    assert cli.entry(["import", str(tmp_path / "x.json"), "--db", str(tmp_path / "x.db")]) == 0
    for fmt in ("md", "forum", "html"):
        out = tmp_path / f"r.{fmt}"
        assert cli.entry(["report", doc["run_id"], "--db", str(tmp_path / "x.db"), "--format", fmt, "-o",
                          str(out)]) == 0
        text = out.read_text()
        bad = ("<details open>x", "</summary></details><img", "<img src")
        bad += ("](javascript:", "\n# z") if fmt != "html" else ()  # (in HTML a Markdown link is text)
        for b in bad:
            assert b not in text, (fmt, b)
