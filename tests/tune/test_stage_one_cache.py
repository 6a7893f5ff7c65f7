"""A stage one kept for reuse (tune/stage_one_cache.py): read back only where this llamalab made it, in the shape it
writes, for the same search; otherwise made again, with the reason (issue 44: a stage one cached by older code was
reused, and a file of any shape was read)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from llamalab import __version__
from llamalab.llamacpp import source
from llamalab.llamacpp.build import BuildArtifact
from llamalab.setup.progress import Progress
from llamalab.study import spec as studymod
from llamalab.tune import space as ts
from llamalab.tune import stage_one_cache as cache
from llamalab.tune import tune
from llamalab.tune.records import Default, Member
from llamalab.tune.stage_one import StageOne, TuneSetup

RIG = ts.Rig(("RPC0", "RPC1"), (300, 300), (64, 64), "cpu-rpc", shared_processor=True)
KEY = "0123456789abcdef"


def _one() -> StageOne:
    """A stage one of the shape stage one makes: llama.cpp's default, a verified front member, a pruned one."""
    layout = ts.ModelLayout(n_layer=9, n_ctx_train=65536, n_expert=0, layer_mib=(4.0,) * 9, expert_mib=(0.0,) * 9,
                            output_mib=31.0)
    space = ts.Space(("layer", "none"), (("f16", "f16"), ("q8_0", "q8_0")), (512,), (0,), {"--n-cpu-moe": "dense"})
    default = Default(n_ctx=21760, status="ok", reason=None, fit_ok=True, fit_message=None, ctx_reduced_from=65536,
                      pipeline_parallel=True, sched_copies=4, devices_mib=(236.0, 300.0), host_mib=31.0,
                      over_budget=True, fit_split=True, args=())
    front = Member.of(ts.Candidate("layer", "q8_0", "q8_0", ts=(4, 5)), RIG, status="front", n_ctx=55552,
                      predicted_n_ctx=55552, devices_mib=[230.0, 235.0], dry_runs=2, exact=True)
    pruned = Member.of(ts.Candidate("none"), RIG, status="pruned", predicted_n_ctx=16384, reason="pruned")
    return StageOne(rig=RIG, layout=layout, space=space, default=default, default_extra=("-ts", "0,0"),
                    members=(front, pruned), dry_runs=24, seconds=10.4)


def _text(**change) -> str:
    return json.dumps({**cache.cache_doc(_one(), KEY), **change})


def test_a_stage_one_this_llamalab_cached_is_read_back_whole():
    got = cache.load(_text(), KEY)
    assert isinstance(got, StageOne) and got.reused_from == KEY
    assert got.as_dict() == _one().as_dict() and got.front[0].n_ctx == 55552


@pytest.mark.parametrize("change, why", [
    ({"made_by": {"llamalab": "0.0.9", "code": "abc"}},
     f"it was made by llamalab 0.0.9 (stage-one code abc), this is llamalab {__version__} (stage-one code "),
    ({"made_by": {**cache.made_by(), "code": "000000000000"}}, "it was made by llamalab"),
    ({"format": None, "made_by": None}, "it was made by an older llamalab (its file records no version)"),
    ({"key": "fedcba9876543210"}, "its file was cached for another search"),
], ids=["another-version", "other-code", "before-versions", "another-key"])
def test_a_stage_one_made_by_other_code_is_not_reused(change, why):
    got = cache.load(_text(**change), KEY)
    assert isinstance(got, str) and got.startswith(why), got


def _records(**member) -> list[dict]:
    recs = [m.as_dict() for m in _one().members]
    recs[0] |= member
    return recs


@pytest.mark.parametrize("change, why", [
    ({"records": _records(n_ctx="55552")}, "a verified context of '55552'"),
    ({"records": _records(status="winner")}, "a candidate's status 'winner'"),
    ({"records": []}, "no candidates"),
    ({"rig": {"names": ["RPC0"]}}, "Rig: fields"),
    ({"dry_runs": "24"}, "dry_runs, seconds, notes or default_extra"),
    ({"notes": "no budgets"}, "dry_runs, seconds, notes or default_extra"),
    ({"default": {**_one().default.as_dict(), "n_ctx": "21760"}}, "the default's n_ctx, status or args"),
], ids=["ctx-text", "status", "empty", "rig", "dry-runs", "notes", "default-ctx"])
def test_a_file_of_another_shape_is_not_read(change, why):
    got = cache.load(_text(**change), KEY)
    assert isinstance(got, str) and why in got and got.startswith("its file does not read as a stage one"), got


def test_not_json_nor_a_stage_one():
    assert cache.load("{", KEY) == "its file is not JSON"
    assert cache.load("[1, 2]", KEY) == "its file does not hold a stage one"


def test_each_llamalab_keeps_its_own_file_and_says_why_it_did_not_reuse_anothers(tmp_path):
    assert cache.cached(tmp_path, KEY) is None  # nothing cached
    older = tmp_path / "tune" / f"stage1-{KEY}.json"  # where the llamalab before this one kept it
    older.parent.mkdir(parents=True)
    older.write_text(json.dumps(_one().as_dict()))
    got = cache.cached(tmp_path, KEY)
    assert isinstance(got, str) and "an older llamalab" in got
    mine = cache.path(tmp_path, KEY)
    assert mine != older and mine.name.startswith(f"stage1-{KEY}-")
    mine.write_text(_text())
    assert isinstance(cache.cached(tmp_path, KEY), StageOne)
    assert older.is_file()  # the other llamalab's file is left to it


# ---------------------------------------------------------------- another engine's stage one (`[tune] engines`)

IK = "ik_llama.cpp"


def _art(name: str, engine: str) -> BuildArtifact:
    src = source.Source(path=Path("/s"), origin="pypi:x", build_number=None, commit=None, engine=engine)
    return BuildArtifact(name=name, key=f"k-{engine}", source=src, backend="cpu-rpc", options={}, bin_dir=Path("/b"),
                         engine=engine)


def _setup(tmp_path, *engines: str) -> TuneSetup:
    st, _ = studymod.load("tune-demo", [f"tune.engines={json.dumps(['llama.cpp', *engines])}"])
    st = tune.tune_study(st)
    model = tmp_path / "m.gguf"
    if not model.exists():
        model.write_bytes(b"GGUF")
    prep = SimpleNamespace(study=st, model_path=model, backend="cpu-rpc",
                           artifacts={b.name: _art(b.name, b.engine or "llama.cpp") for b in st.builds})
    return TuneSetup.of(prep)  # type: ignore[arg-type]


def _ik_one() -> StageOne:
    rig = dataclasses.replace(RIG, copies=1, pp_capable=False)
    m = Member.of(ts.Candidate("layer", "q8_0", "q8_0", ts=(300, 300), engine=IK), rig, status="front", n_ctx=54528,
                  devices_mib=[236.0, 199.0], dry_runs=3, exact=True)
    return dataclasses.replace(_one(), rig=rig, members=(m,), dry_runs=14, seconds=4.8, default_extra=())


def test_another_engines_stage_one_is_read_back_whole():
    text = json.dumps(cache.cache_doc(_ik_one(), KEY))
    got = cache.load(text, KEY)
    assert isinstance(got, StageOne) and got.as_dict() == _ik_one().as_dict()
    assert got.front[0].candidate.engine == IK and got.rig.copies == 1


def test_another_engine_keeps_llama_cpps_key_and_is_cached_apart(tmp_path, monkeypatch):
    alone, both = _setup(tmp_path), _setup(tmp_path, IK)
    assert both.others and both.others[0].engine == IK and not alone.others
    assert cache.stage_one_key(alone) == cache.stage_one_key(both)  # llama.cpp's stage one is the same search
    made: list[str] = []
    monkeypatch.setattr(cache, "stage_one", lambda *a: made.append("llama.cpp") or _one())
    monkeypatch.setattr(cache.engine_stage, "search", lambda setup, art, one, *a: made.append(art.engine) or _ik_one())
    first = cache.made_or_cached(both, tmp_path / "logs", tmp_path, fresh=False, timeout_s=1, progress=Progress())
    assert made == ["llama.cpp", IK]
    assert [m.candidate.engine for m in first.front] == ["llama.cpp", IK]
    assert first.engines[0].engine == IK and first.engines[0].loads == 14 and first.engines[0].front == 1
    again = cache.made_or_cached(both, tmp_path / "logs", tmp_path, fresh=False, timeout_s=1, progress=Progress())
    assert made == ["llama.cpp", IK]  # both reused: nothing measured again
    assert again.reused_from and again.engines[0].reused_from
    assert [m.as_dict() for m in again.members] == [m.as_dict() for m in first.members]
    # a tune of llama.cpp alone reuses llama.cpp's part, and has no other engine's
    solo = cache.made_or_cached(alone, tmp_path / "logs", tmp_path, fresh=False, timeout_s=1, progress=Progress())
    assert made == ["llama.cpp", IK] and not solo.engines and len(solo.members) == 2


def test_another_engines_key_follows_llama_cpps_front_and_its_build():
    setup_one = _one()
    setup = SimpleNamespace(build_of=lambda engine: SimpleNamespace(args=[]))
    k = cache.engine_key(setup, _art("ik", IK), dataclasses.replace(setup_one, key=KEY))  # type: ignore[arg-type]
    other_front = dataclasses.replace(setup_one, key=KEY, members=(dataclasses.replace(
        setup_one.members[0], n_ctx=1), setup_one.members[1]))
    moved = dataclasses.replace(other_front, members=(dataclasses.replace(
        other_front.members[0], candidate=ts.Candidate("layer", ts=(5, 4))), other_front.members[1]))
    assert k == cache.engine_key(setup, _art("ik", IK), other_front)  # the same front members: the same key
    assert k != cache.engine_key(setup, _art("ik", IK), moved)
    assert k != cache.engine_key(setup, dataclasses.replace(_art("ik", IK), key="other"),
                                 dataclasses.replace(setup_one, key=KEY))
    assert cache.engine_key(setup, _art("ik", IK), setup_one) is None  # llama.cpp's has no key: nor has this
