"""Remote models read by their header alone (models.remote.source, rangeio) against a local Hugging Face Hub and
ollama registry (tests/hubserver.py) on 127.0.0.1, with huggingface_hub's real client: the stand-in, the cache,
what travels, --download, and every failure mode with its message and tip. The plans of these stand-ins against
the local file's are in test_remote_plan.py (llama.cpp)."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from hubserver import COMMIT, MICRO, TOKEN, Hub, sha256_file
from llamalab import cli
from llamalab.core.errors import ModelError
from llamalab.models import gguf, standin
from llamalab.models import synthetic as models
from llamalab.models.remote import rangeio
from llamalab.models.remote import source as modelsource

pytestmark = pytest.mark.usefixtures("loopback")

FAST = rangeio.Policy(connect_s=2, read_s=0.5, request_s=5, retries=2, backoff_s=0.01)


@pytest.fixture(scope="session")
def micro(tmp_path_factory) -> Path:
    """A real GGUF (weights included) of 20,000 tokens: 5.6 MB, its header 0.5 MB."""
    return models.write_synthetic(MICRO, tmp_path_factory.mktemp("micro") / "Micro-F16.gguf")


@pytest.fixture
def hub(micro, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # huggingface_hub's cache and token file, private
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    with Hub() as h:
        h.add_repo("llamalab/Micro-GGUF", {"Micro-F16.gguf": micro, "sub/Micro-Q8_0.gguf": micro},
                   renamed_from="old/Micro")
        h.add_repo("llamalab/Gated-GGUF", {"Micro-F16.gguf": micro}, gated=True)
        h.add_repo("llamalab/Private-GGUF", {"Micro-F16.gguf": micro}, private=True)
        h.add_ollama("micro", "f16", micro)
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        monkeypatch.setenv("LLAMALAB_OLLAMA_REGISTRY", h.registry)
        yield h


def resolve(text, tmp_path, **kw):
    return modelsource.resolve(text, tmp_path / "home", policy=kw.pop("policy", FAST), **kw)


def same_header_but_filled(standin_path: Path, real: Path) -> None:
    """The stand-in holds the real header byte for byte, except the two tokenizer arrays filled instead of
    fetched (scores 0.0, types NORMAL, as llama.cpp assumes without them), then a hole to the real size."""
    hdr = gguf.read_header(real)
    lay = hdr.layout
    got, want = standin_path.read_bytes()[:lay.data_offset], real.read_bytes()[:lay.data_offset]
    assert standin_path.stat().st_size == real.stat().st_size
    assert standin_path.stat().st_blocks * 512 < lay.data_offset + (1 << 20)  # sparse
    scores, types = hdr.kv["tokenizer.ggml.scores"], hdr.kv["tokenizer.ggml.token_type"]
    holes = [(scores.offset, scores.offset + 4 * scores.length), (types.offset, types.offset + 4 * types.length)]
    for (a, b), fill in zip(holes, (b"\0\0\0\0", struct.pack("<i", 1))):
        g = np.frombuffer(got[a:b], np.uint32)
        assert ((g == np.frombuffer(want[a:b], np.uint32)) | (g == np.frombuffer(fill, np.uint32)[0])).all()
    cut = lambda x: x[:holes[0][0]] + x[holes[0][1]:holes[1][0]] + x[holes[1][1]:]  # noqa: E731
    assert cut(got) == cut(want)
    assert gguf.read_header(standin_path).tensors == hdr.tensors


def test_hf_file_is_read_by_its_header_through_the_blob_redirect(hub, micro, tmp_path):
    res = resolve("hf://llamalab/Micro-GGUF/Micro-F16.gguf", tmp_path)
    same_header_but_filled(res.path, micro)
    lay = gguf.read_layout(micro)
    assert res.standin and not res.cached and res.size == micro.stat().st_size
    assert res.fetched == hub.fetched()  # what the client counted is what the server sent
    assert res.fetched <= lay.data_offset + (16 << 10), res.fetched  # the header, and little past it
    assert "fetched (" in res.note and f"{res.fetched / 2**20:,.1f} MiB" in res.note
    # huggingface_hub's HEAD on the resolve URL, then Range reads on the separate blob host only
    heads = [x for x in hub.log if x.startswith("HEAD ")]
    assert heads == ["HEAD /llamalab/Micro-GGUF/resolve/main/Micro-F16.gguf"]
    blobs = [x for x in hub.log if x.startswith("GET /blobs/")]
    assert blobs and all("X-Sig=" in x and "[bytes=" in x for x in blobs)
    assert models.read_info(res.path).n_vocab == MICRO.n_vocab
    # the cache: the same content (ETag) again fetches nothing
    again = resolve("hf://llamalab/Micro-GGUF/Micro-F16.gguf", tmp_path)
    assert again.cached and again.fetched == 0 and again.path == res.path and "nothing fetched" in again.note
    assert hub.fetched() == res.fetched


def test_revision_rename_redirect_and_quant_selection(hub, micro, tmp_path):
    by_commit = resolve(f"hf://llamalab/Micro-GGUF@{COMMIT}/sub/Micro-Q8_0.gguf", tmp_path)
    assert by_commit.path.name == "Micro-Q8_0.gguf"
    renamed = resolve("hf://old/Micro/Micro-F16.gguf", tmp_path)  # a relative 307 on the hub, then the blob host
    assert renamed.path.stat().st_size == micro.stat().st_size
    hub.page_size = 2  # the listing in pages joined by Link: rel="next"
    picked = resolve("hf://llamalab/Micro-GGUF:Q8_0", tmp_path)
    assert picked.path.name == "Micro-Q8_0.gguf"
    # listed at the commit the model info names (issue 45: every file of one plan at one commit), not at main
    trees = [x for x in hub.log if x.startswith(f"GET /api/models/llamalab/Micro-GGUF/tree/{COMMIT}")]
    assert len(trees) >= 3 and "recursive=true" in trees[0] and "cursor=" in trees[1]


def test_whole_repository_of_stand_ins(hub, micro, tmp_path):
    found = modelsource.resolve_repo("hf://llamalab/Micro-GGUF", tmp_path / "home", policy=FAST)
    assert [(m.quant, m.files[0].path) for m, _ in found.models] == [("F16", "Micro-F16.gguf"),
                                                                    ("Q8_0", "sub/Micro-Q8_0.gguf")]
    assert [r.standin and not r.cached for _, r in found.models] == [True, True]
    assert found.models[0][1].path.read_bytes() == found.models[1][1].path.read_bytes()  # the same bytes served
    again = modelsource.resolve_repo("hf://llamalab/Micro-GGUF", tmp_path / "home", policy=FAST)
    assert [r.cached for _, r in again.models] == [True, True]
    with pytest.raises(ModelError, match="names a whole repository") as e:
        resolve("hf://llamalab/Micro-GGUF", tmp_path)
    assert "hf://llamalab/Micro-GGUF:Q4_K_M" in e.value.tip


def test_ollama_manifest_then_the_model_layer(hub, micro, tmp_path):
    res = resolve("ollama://micro:f16", tmp_path)
    same_header_but_filled(res.path, micro)
    assert any(x.startswith("GET /v2/library/micro/manifests/f16") for x in hub.log)
    assert any(x.startswith("GET /v2/library/micro/blobs/sha256:") for x in hub.log)  # then a 307 to the blob host


def test_plain_url(hub, micro, tmp_path):
    url = hub.add_url("Micro-F16.gguf", micro)
    res = resolve(url, tmp_path)
    same_header_but_filled(res.path, micro)
    assert resolve(url, tmp_path).cached


# ---------------------------------------------------------------- failure modes: each an error and a tip


def fails(text, tmp_path, match, tip, **kw) -> ModelError:
    with pytest.raises(ModelError, match=match) as e:
        resolve(text, tmp_path, **kw)
    assert e.value.tip and tip in e.value.tip, e.value.tip
    assert not list((tmp_path / "home").rglob("*.gguf"))  # nothing half-made is left
    return e.value


def test_gated_and_private_repositories(hub, tmp_path, monkeypatch):
    fails("hf://llamalab/Gated-GGUF/Micro-F16.gguf", tmp_path, "gated", "HF_TOKEN")
    fails("hf://llamalab/Private-GGUF/Micro-F16.gguf", tmp_path, "no such repository, or a private one", "HF_TOKEN")
    with pytest.raises(ModelError, match="no such repository, or a private one") as e:
        modelsource.resolve_repo("hf://llamalab/Private-GGUF", tmp_path / "home", policy=FAST)
    assert "HF_TOKEN" in e.value.tip
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    fails("hf://llamalab/Gated-GGUF/Micro-F16.gguf", tmp_path, r"gated \(the hub answered 401/403\)", "HF_TOKEN")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert resolve("hf://llamalab/Gated-GGUF/Micro-F16.gguf", tmp_path).standin
    assert resolve("hf://llamalab/Private-GGUF/Micro-F16.gguf", tmp_path).standin


def test_the_token_file_is_read_too(hub, tmp_path, monkeypatch):
    from huggingface_hub import constants

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(token_file))  # `hf auth login` writes it there
    assert resolve("hf://llamalab/Private-GGUF/Micro-F16.gguf", tmp_path).standin


def test_missing_file_revision_and_repository(hub, tmp_path):
    fails("hf://llamalab/Micro-GGUF/Nope.gguf", tmp_path, r"no such file \(404\)", "lists the repository's")
    fails("hf://llamalab/Micro-GGUF@v9/Micro-F16.gguf", tmp_path, r"no such revision \(404\)", "branch, tag or commit")
    fails("hf://nobody/Nothing-GGUF/m.gguf", tmp_path, "no such repository", "check OWNER/REPO")
    fails("ollama://nosuch:latest", tmp_path, r"no such model or tag \(404\)", "ollama.com/library")
    fails(hub.blob_base + "/files/missing.gguf", tmp_path, r"no such file on the server \(404\)", "check the URL")


def test_no_network(tmp_path, monkeypatch):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", dead)
    monkeypatch.setenv("LLAMALAB_OLLAMA_REGISTRY", dead)
    for ref in ("hf://llamalab/Micro-GGUF/Micro-F16.gguf", "ollama://micro:f16", dead + "/m.gguf"):
        e = fails(ref, tmp_path, "cannot reach 127.0.0.1.*no network here", "local model files still work")
        assert isinstance(e, rangeio.RemoteError) and e.kind == "network"


def test_server_without_range_support(hub, micro, tmp_path):
    url = hub.add_url("m.gguf", micro)
    hub.fail.add("no-range")
    for ref in ("hf://llamalab/Micro-GGUF/Micro-F16.gguf", "ollama://micro:f16", url):
        fails(ref, tmp_path, "ignores Range requests", "--download")


def test_busy_server_is_retried_with_backoff(hub, micro, tmp_path):
    hub.fail.add("busy:2")
    res = resolve("hf://llamalab/Micro-GGUF/Micro-F16.gguf", tmp_path)
    assert res.standin and hub.fail == set()
    hub.fail.add("status:503")
    fails("ollama://micro:f16", tmp_path / "other", r"answered 503.*after 2 retries", "try again later")


def test_stalled_server_times_out_after_retries(hub, tmp_path):
    hub.fail.add("stall")
    t0 = time.monotonic()
    e = fails("hf://llamalab/Micro-GGUF/Micro-F16.gguf", tmp_path, "stopped answering.*after 2 retries", "stalled")
    assert e.kind == "stalled" and time.monotonic() - t0 < 10


def test_ctrl_c_during_a_stalled_read_is_clean(hub, tmp_path):
    """The CLI blocked on a stalled server (default timeouts: 30 s) stops at once on SIGINT: exit 130, no
    traceback, no stand-in left behind."""
    hub.fail.add("stall")
    env = {**os.environ, "LLAMALAB_HOME": str(tmp_path / "home"), "LLAMALAB_DATA": str(tmp_path / "data")}
    p = subprocess.Popen([sys.executable, "-m", "llamalab.cli", "plan", "--model",
                          "hf://llamalab/Micro-GGUF/Micro-F16.gguf"], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not any(x.startswith("GET /blobs/") for x in hub.log) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=15)
    assert p.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert not list((tmp_path / "home").rglob("*.gguf"))


def hostile(path: Path, n_strings: int) -> Path:
    """A GGUF header whose one key claims an array of `n_strings` strings (and then ends)."""
    key = b"tokenizer.ggml.tokens"
    body = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 8,
                                                                                                   n_strings)
    path.write_bytes(body + b"\0" * 4096)
    return path


def test_absurd_header_sizes_are_refused_before_fetching_them(hub, tmp_path):
    url = hub.add_url("huge.gguf", hostile(tmp_path / "huge.gguf", 1 << 40))
    fails(url, tmp_path, "claims 1,099,511,627,776 strings", "not a model any converter writes")
    assert hub.fetched() < 300 << 10  # the first read only
    big = tmp_path / "big.gguf"  # 200k strings of 1 KiB: a header past the remote bound (here 64 KiB)
    key = b"tokenizer.ggml.tokens"
    with open(big, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key +
                struct.pack("<IIQ", 9, 8, 200))
        for _ in range(200):
            f.write(struct.pack("<Q", 1024) + b"a" * 1024)
    url = hub.add_url("big.gguf", big)
    fails(url, tmp_path, "runs past 0 MiB, more than any model's", "not a model any converter writes",
          policy=rangeio.Policy(retries=0, first_read=16 << 10, max_header=64 << 10))


def test_manifest_without_model_layer_and_listing_without_gguf(hub, tmp_path):
    hub.fail.add("manifest-no-model")
    fails("ollama://micro:f16", tmp_path, r"no model layer \(application/vnd.ollama.image.model\); its layers: "
          "application/vnd.ollama.image.params, application/vnd.ollama.image.template", "pick another tag")
    hub.fail = {"listing-no-gguf"}
    with pytest.raises(ModelError, match="lists no GGUF model") as e:
        modelsource.resolve_repo("hf://llamalab/Micro-GGUF", tmp_path / "home", policy=FAST)
    assert "-GGUF sibling" in e.value.tip


# ---------------------------------------------------------------- the weights, with --download


def test_download_hf_into_its_own_cache_checked_against_the_published_hash(hub, micro, tmp_path):
    res = resolve("hf://llamalab/Micro-GGUF/Micro-F16.gguf", tmp_path, weights=True)
    assert not res.standin and res.path.read_bytes() == micro.read_bytes()
    assert str(res.path).startswith(str(tmp_path / "hf")) and f"snapshots/{COMMIT}" in str(res.path)
    assert (tmp_path / "home" / "remote" / "verified" / sha256_file(micro)).is_file()
    # a damaged blob in the cache is found on the next use
    blob = res.path.resolve()
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="but the hub publishes") as e:
        resolve("hf://llamalab/Micro-GGUF/Micro-F16.gguf", tmp_path, weights=True)
    assert "download it again" in e.value.tip


def test_download_resumes_and_checks_the_ollama_digest(hub, micro, tmp_path):
    remote = None
    with modelsource.Session.open(tmp_path / "home", policy=FAST) as s:
        from llamalab.models.remote import ref as modelref

        remote = modelsource.locate(modelref.parse("ollama://micro:f16"), s)
    dest = tmp_path / "home" / "models" / "remote" / modelsource._key(remote) / remote.parts[0].name
    dest.parent.mkdir(parents=True)
    half = micro.read_bytes()[: micro.stat().st_size // 2]
    dest.with_name(dest.name + ".part").write_bytes(half)  # an earlier download stopped here
    seen = []
    res = resolve("ollama://micro:f16", tmp_path, weights=True, on_download=lambda w, d, t: seen.append(d))
    assert res.path == dest and dest.read_bytes() == micro.read_bytes()
    ranges = [x for x in hub.log if x.startswith("GET /blobs/")]
    assert f"[bytes={len(half)}-" in ranges[0] and seen[-1] == micro.stat().st_size
    # a server that sends other bytes than the digest says: refused, nothing kept
    dest.unlink()
    dest.with_name(dest.name + ".part").write_bytes(b"\0" * len(half))
    with pytest.raises(ModelError, match="published; it was deleted"):
        resolve("ollama://micro:f16", tmp_path, weights=True)
    assert not dest.exists() and not dest.with_name(dest.name + ".part").exists()


# ---------------------------------------------------------------- the CLI


def test_run_needs_the_weights_and_says_so_before_anything_starts(hub, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LLAMALAB_DATA", str(tmp_path / "data"))
    code = cli.entry(["run", "pipeline-parallel", "--model", "hf://llamalab/Micro-GGUF/Micro-F16.gguf"])
    err = capsys.readouterr().err
    assert code == 2 and "needs the model's weights" in err and "--download" in err
    assert hub.log == [] and not (tmp_path / "data").exists()  # nothing asked, nothing stored


def test_stub_of_a_remote_model(hub, micro, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LLAMALAB_HOME", str(tmp_path / "home"))
    out = tmp_path / "micro.stub.gguf"
    assert cli.entry(["stub", "hf://llamalab/Micro-GGUF/Micro-F16.gguf", "-o", str(out)]) == 0
    same_header_but_filled(out, micro)
    err = capsys.readouterr().err
    assert "fetched" in err and f"wrote {out}" in err
    assert cli.entry(["stub", "hf://llamalab/Micro-GGUF", "-o", str(out)]) == 2
    assert "names a whole repository" in capsys.readouterr().err


def test_no_network_for_a_repository_listing(tmp_path, monkeypatch):
    """huggingface_hub retries a listing 5 times with backoff (1 + 2 + 4 + 8 + 8 s) before the same error. Its
    sleeps are recorded here, not slept (they were 23 s of the suite). Since issue 45 the repository's commit is
    asked first (`HfApi.model_info`, no retries of its own), and a refused connection is not retried: the error
    comes before any sleep."""
    import socket
    import time as real_time

    from huggingface_hub.utils import _http as hf_http

    slept: list[float] = []

    class Clock:
        def __getattr__(self, name: str):
            return getattr(real_time, name)

        def sleep(self, seconds: float) -> None:
            slept.append(seconds)

    monkeypatch.setattr(hf_http, "time", Clock())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{s.getsockname()[1]}")
    with pytest.raises(ModelError, match="cannot reach 127.0.0.1.*no network here") as e:
        modelsource.resolve_repo("hf://llamalab/Micro-GGUF", tmp_path / "home", policy=FAST)
    assert "local model files still work" in e.value.tip
    assert slept == []


def test_download_from_a_server_without_range_support(hub, micro, tmp_path):
    """The tip for such a server is --download: it then fetches the file in one GET (no resume there)."""
    url = hub.add_url("Micro-F16.gguf", micro)
    hub.fail.add("no-range")
    fails(url, tmp_path / "a", "ignores Range requests", "--download")
    res = resolve(url, tmp_path, weights=True)
    assert not res.standin and res.path.read_bytes() == micro.read_bytes()


def test_a_study_file_path_that_is_a_reference_is_told_to_use_model(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LLAMALAB_DATA", str(tmp_path / "data"))
    study = tmp_path / "s.toml"
    study.write_text('name = "s"\n[model]\npath = "hf://o/r/m.gguf"\n[[builds]]\nname = "b"\n'
                     '[[settings]]\nname = "x"\n')
    assert cli.entry(["plan", str(study)]) == 2
    err = capsys.readouterr().err
    assert "names a remote model" in err and "--model hf://o/r/m.gguf" in err
