"""tune searches llama.cpp builds only (docs/engines.md): a study whose first build is ik_llama.cpp's is refused
before any dry run, with what to run instead."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from llamalab.core.errors import ConfigError
from llamalab.llamacpp import source
from llamalab.llamacpp.build import BuildArtifact
from llamalab.setup.options import RunOptions
from llamalab.setup.progress import Progress
from llamalab.study import spec as studymod
from llamalab.tune import tune


def test_a_first_build_of_ik_llama_cpp_is_refused(monkeypatch, tmp_path):
    st, _ = studymod.load("engines", ['builds=[{name="ik",engine="ik_llama.cpp"}]'])
    src = source.Source(path=Path("/s"), origin="pypi:x", build_number=None, commit=None, engine="ik_llama.cpp")
    art = BuildArtifact(name="ik", key="k", source=src, backend="cpu-rpc", options={}, bin_dir=Path("/b"),
                        engine="ik_llama.cpp")
    monkeypatch.setattr(tune.session, "prepare", lambda study, opts, progress: SimpleNamespace(
        study=study, artifacts={"ik": art}, skipped={}))
    with pytest.raises(ConfigError, match="tune searches llama.cpp builds only, and build ik is ik_llama.cpp's") as e:
        tune.prepare(st, RunOptions(home=tmp_path), Progress())
    assert "llamalab run engines" in e.value.tip
