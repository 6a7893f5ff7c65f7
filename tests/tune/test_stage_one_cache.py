"""A stage one kept for reuse (tune/stage_one_cache.py): read back only where this llamalab made it, in the shape it
writes, for the same search; otherwise made again, with the reason (issue 44: a stage one cached by older code was
reused, and a file of any shape was read)."""

from __future__ import annotations

import json

import pytest

from llamalab import __version__
from llamalab.tune import space as ts
from llamalab.tune import stage_one_cache as cache
from llamalab.tune.records import Default, Member
from llamalab.tune.stage_one import StageOne

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
