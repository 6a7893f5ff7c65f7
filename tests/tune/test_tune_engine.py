"""The builds a tune runs (`[tune] engines`, `--engines`): llama.cpp's first — its default is what every member is
measured against, so a study whose first build is ik_llama.cpp's is refused, before any dry run — and a build of
each other engine named; llama.cpp alone leaves the tune's study, its hash and its stage-one key as they were."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from llamalab.cli import entry
from llamalab.core.errors import ConfigError
from llamalab.llamacpp import source
from llamalab.llamacpp.build import BuildArtifact
from llamalab.setup import prepare as session
from llamalab.setup.options import RunOptions
from llamalab.setup.progress import Progress
from llamalab.study import spec as studymod
from llamalab.tune import tune

BOTH = 'tune.engines=["llama.cpp","ik_llama.cpp"]'


def _art(name: str, engine: str) -> BuildArtifact:
    src = source.Source(path=Path("/s"), origin="pypi:x", build_number=None, commit=None, engine=engine)
    return BuildArtifact(name=name, key="k", source=src, backend="cpu-rpc", options={}, bin_dir=Path("/b"),
                         engine=engine)


def test_a_first_build_of_ik_llama_cpp_is_refused(monkeypatch, tmp_path):
    """Declared in the study: refused before anything is built."""
    st, _ = studymod.load("engines", ['builds=[{name="ik",engine="ik_llama.cpp"}]', BOTH])
    monkeypatch.setattr(tune.session, "prepare", lambda *a: pytest.fail("prepared a study tune refuses"))
    with pytest.raises(ConfigError, match="tune's first build must be llama.cpp's, and build ik is ik_llama.cpp's") \
            as e:
        tune.prepare(st, RunOptions(home=tmp_path), Progress())
    assert "--engines llama.cpp,ik_llama.cpp" in e.value.tip and "llamalab run engines" in e.value.tip


def test_a_first_build_that_turns_out_to_be_ik_llama_cpp_is_refused(monkeypatch, tmp_path):
    """A build that names no engine but runs ik_llama.cpp's binaries or checkout: refused once its engine is known."""
    st, _ = studymod.load("engines", ['builds=[{name="ik"}]'])
    monkeypatch.setattr(tune.session, "prepare", lambda study, opts, progress: SimpleNamespace(
        study=study, artifacts={"ik": _art("ik", "ik_llama.cpp")}, skipped={}))
    with pytest.raises(ConfigError, match="tune's first build must be llama.cpp's, and build ik is ik_llama.cpp's"):
        tune.prepare(st, RunOptions(home=tmp_path), Progress())


def test_a_build_of_another_engine_that_could_not_be_made_is_said(monkeypatch, tmp_path):
    st, _ = studymod.load("tune-demo", [BOTH])
    monkeypatch.setattr(tune.session, "prepare", lambda study, opts, progress: SimpleNamespace(
        study=study, artifacts={"default": _art("default", "llama.cpp")},
        skipped={"ik_llama.cpp": "build failed: no compiler"}))
    with pytest.raises(ConfigError, match="build ik_llama.cpp could not be made: build failed: no compiler"):
        tune.prepare(st, RunOptions(home=tmp_path), Progress())


def test_llama_cpp_alone_runs_the_first_build_as_before():
    st, _ = studymod.load("engines")
    assert tune.tune_study(st).builds == st.builds[:1]
    again, _ = studymod.load("engines", ['tune.engines=["llama.cpp"]'])
    assert tune.tune_study(again).builds == st.builds[:1]
    # the study hash of a tune that names llama.cpp alone is the hash it had before engines could be named
    plain, _ = studymod.load("tune-demo")
    named, _ = studymod.load("tune-demo", ['tune.engines=["llama.cpp"]'])
    assert session.study_hash(tune.tune_study(named), Path("/m")) == session.study_hash(tune.tune_study(plain),
                                                                                          Path("/m"))
    assert "engines" not in studymod.hash_dump(named)["tune"]


def test_another_engine_is_the_studys_first_build_of_it_else_its_pinned_release():
    st, _ = studymod.load("engines", [BOTH])  # builds llamacpp, llamacpp-no-pp, ik, ik-copies4
    assert [(b.name, b.engine) for b in tune.tune_study(st).builds] == [("llamacpp", "llama.cpp"),
                                                                        ("ik", "ik_llama.cpp")]
    demo, _ = studymod.load("tune-demo", [BOTH])
    builds = tune.tune_study(demo).builds
    assert [(b.name, b.engine, b.args, b.cmake) for b in builds] == [
        ("default", None, [], {}), ("ik_llama.cpp", "ik_llama.cpp", [], {})]
    clash, _ = studymod.load("tune-demo", [BOTH, 'builds=[{name="ik_llama.cpp"}]'])
    assert [b.name for b in tune.tune_study(clash).builds] == ["ik_llama.cpp", "ik_llama.cpp-tune"]


def test_the_kernel_cut_follows_the_tunes_cache_types():
    """ik_llama.cpp's build leaves out its q4 flash-attention kernels only where no pair the tune searches needs
    them (engines.kernel_cut over `setup.prepare.kv_types`)."""
    narrow, _ = studymod.load("tune-demo", [BOTH, 'tune.kv=["f16/f16","q8_0/q8_0"]'])
    assert session.kv_types(narrow) == {"f16", "q8_0"}
    wide, _ = studymod.load("tune-demo", [BOTH])
    assert "q4_0" in session.kv_types(wide)
    alone, _ = studymod.load("tune-demo")
    assert session.kv_types(alone) == set()  # llama.cpp alone: nothing is cut, nothing changes


@pytest.mark.parametrize("value, said", [
    ('["ik_llama.cpp"]', "list llama.cpp too"),
    ('["llama.cpp","llama.cpp"]', "an engine is listed twice"),
    ('["llama.cpp","vllm"]', "tune.engines"),
])
def test_engines_are_checked_when_the_study_loads(value, said):
    with pytest.raises(ConfigError) as e:
        studymod.load("tune-demo", [f"tune.engines={value}"])
    assert said in e.value.message


def test_the_engines_option_names_the_engines(monkeypatch, capsys, tmp_data):
    seen = {}

    def run_tune(study, opts, progress):
        seen["engines"] = study.tune.engines
        raise ConfigError("stop here")

    monkeypatch.setattr(tune, "run_tune", run_tune)
    assert entry(["tune", "tune-demo", "--engines", "llama.cpp, ik_llama.cpp"]) == 2
    assert seen["engines"] == ["llama.cpp", "ik_llama.cpp"]
    assert entry(["tune", "tune-demo", "--engines", "ik_llama.cpp"]) == 2
    assert "list llama.cpp too" in capsys.readouterr().err
