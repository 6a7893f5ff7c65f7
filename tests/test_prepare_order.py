"""The set-up that `run`, `build` and `plan` share (`session.prepare`) checks what the user gave before it probes the
machine, contacts a remote endpoint, fetches a source or builds: a wrong model or binaries folder costs nothing.
Every later stage is replaced by a recorder, so a stage reached too early fails the test by name."""

from __future__ import annotations

import pytest

from llamalab.core.errors import LaunchError, ModelError, SourceError
from llamalab.llamacpp import source
from llamalab.models import synthetic as models
from llamalab.rig import remote
from llamalab.setup import prepare as session
from llamalab.setup.options import RunOptions
from llamalab.setup.progress import Progress
from llamalab.study import spec as studymod

SMALL = models.ModelShape("t", n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_vocab=600, n_ctx_train=512)
REMOTE = 'devices.rpc=[{endpoint="10.0.0.9:50052"}]'


@pytest.fixture
def stages(monkeypatch):
    """The stages after the input checks, each recording that it ran (and the source fetch refusing to)."""
    ran: list[str] = []

    def stage(name, result=None):
        def fn(*a, **k):
            ran.append(name)
            if isinstance(result, Exception):
                raise result
            return result
        return fn

    monkeypatch.setattr(session.detect, "facts", stage("detect the machine's GPUs", session.detect.Facts()))
    monkeypatch.setattr(remote, "preflight", stage("contact the remote endpoints"))
    monkeypatch.setattr(source, "pinned", stage("fetch the pinned source", SourceError("no fetching in this test")))
    monkeypatch.setattr(source, "from_dir", stage("read a llama.cpp checkout", SourceError("no checkout here")))
    return ran


def study(*overrides: str):
    return studymod.load("demo", ["devices.backend=\"auto\"", REMOTE, *overrides])[0]


def test_a_missing_model_stops_before_any_probe_contact_or_fetch(tmp_path, stages):
    with pytest.raises(ModelError, match="does not exist"):
        session.prepare(study(), RunOptions(home=tmp_path, model=tmp_path / "missing.gguf"), Progress())
    assert stages == []


def test_a_model_that_is_not_gguf_stops_before_any_probe_contact_or_fetch(tmp_path, stages):
    bad = tmp_path / "m.gguf"
    bad.write_bytes(b"PK\x03\x04" + b"zip" * 100)
    with pytest.raises(ModelError, match="not a GGUF file"):
        session.prepare(study(), RunOptions(home=tmp_path, model=bad), Progress())
    assert stages == []


def test_a_wrong_binaries_folder_stops_before_the_remote_endpoints_are_contacted(tmp_path, stages):
    good = models.write_synthetic(SMALL, tmp_path / "good.gguf")
    st = study(f'source.bin="{tmp_path / "nowhere"}"')
    with pytest.raises(SourceError, match="nowhere"):
        session.prepare(st, RunOptions(home=tmp_path, model=good), Progress())
    assert stages == ["detect the machine's GPUs"]  # the backend decides what the binaries must offer


def test_an_unreachable_endpoint_stops_before_the_source_is_fetched(tmp_path, stages, monkeypatch):
    good = models.write_synthetic(SMALL, tmp_path / "good.gguf")
    monkeypatch.setattr(remote, "preflight", lambda specs, warn: (stages.append("contact the remote endpoints"),
                                                                  remote.check_reachable(
                                                                      [s.endpoint for s in specs],
                                                                      connect=lambda h, p, t: "connection refused"))[1])
    with pytest.raises(LaunchError, match="10.0.0.9:50052: connection refused"):
        session.prepare(study(), RunOptions(home=tmp_path, model=good), Progress())
    assert stages == ["detect the machine's GPUs", "contact the remote endpoints"]


def test_with_good_inputs_the_source_comes_last(tmp_path, stages):
    good = models.write_synthetic(SMALL, tmp_path / "good.gguf")
    with pytest.raises(SourceError, match="no fetching in this test"):
        session.prepare(study(), RunOptions(home=tmp_path, model=good), Progress())
    assert stages == ["detect the machine's GPUs", "contact the remote endpoints", "fetch the pinned source"]
