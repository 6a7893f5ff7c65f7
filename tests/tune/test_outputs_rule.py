"""Tune and the output check (issue 42): a member whose outputs, with llama.cpp's default KV cache, differ from the
default's is never the pick, whatever it measures — the reason says so; one with another KV pair is judged by its
KLD (a quality cost), not as a fault; one that parts only where the default parts with itself is not ruled out.
The outputs are stored rows (Store.save_outputs, as run/references.py writes them) and the judge is
quality/outputs.py's, so what is tested is the path from the store to the pick."""

from __future__ import annotations

import math

from llamalab.store.db import Store
from llamalab.tune import pick as tunepick
from llamalab.tune import race as racemod
from llamalab.tune import space as ts

GEN = [170.0, 171.0, 172.0]


def m(name: str, ctx: int, gen: list[float] | None = None) -> ts.Measures:
    return ts.Measures(name, ctx, {"output_tps": gen or GEN, "input_tps": [], "aggregate_output_tps": []})


def seq(tokens: list[int], margin: float = 0.5) -> dict:
    """A stored sequence (Generated.as_dict) whose top two candidates are `margin` apart in probability."""
    p1 = (1 + margin) / 2
    return {"prompt": 0, "tokens": tokens, "pieces": [f" w{t}" for t in tokens],
            "top": [[[t, math.log(p1)], [t + 1000, math.log(1 - p1)]] for t in tokens]}


def new_run(s: Store) -> str:
    return s.new_run("tune-demo", "", "h", version="test")


def store_outputs(db, rows: dict[str, list[list[int]]]) -> tuple[Store, str]:
    """Each build's single-stream sequences, one stored repetition per list (the default's second is its A/A), in a
    new run: the store and the run's id."""
    with Store(db) as s:
        run_id = new_run(s)
        for build, reps in rows.items():
            for rep, tokens in enumerate(reps, start=1):
                s.save_outputs(run_id, build, "tune", "single", rep, {"sequences": [seq(tokens)]})
    return Store(db), run_id


MEMBERS = [m("default", 40_000), m("t01", 90_000), m("t02", 60_000), m("t03", 70_000)]
CHECK = racemod.OutputCheck(kv_of={"t01": "f16/f16", "t02": "f16/f16", "t03": "q8_0/q8_0"}, default_kv="f16/f16",
                            synthetic=False)


def test_a_member_that_computes_differently_is_never_the_pick(tmp_path):
    """t01 holds the most context and is as fast, but its tokens part from the default's at token 2 where the
    default's choice was clear (50% margin): it is out, and the pick is the next (t03, another KV pair, whose own
    tokens differ too — a quantized cache's cost, which --max-kld governs, not this check)."""
    db = tmp_path / "t.db"
    s, run_id = store_outputs(db, {"default": [[1, 2, 3, 4], [1, 2, 3, 4]], "t01": [[1, 9, 9, 9]],
                                   "t02": [[1, 2, 3, 4]], "t03": [[1, 7, 7, 7]]})
    with s:
        differs = CHECK.differing(s, run_id)
    assert list(differs) == ["t01"]
    assert differs["t01"].startswith("computes differently (token 2, margin 50.0%")

    rule = tunepick.Rule(default="default", goal="context", floor_ctx=0, threshold=0.02, differs=differs)
    p = rule.pick(MEMBERS, repeats=3)
    assert p.name == "t03"
    # the race's reason for giving it no more trials (and the tune report's note on its row)
    assert tunepick.cannot_win("t01", 90_000, MEMBERS[:1], rule) == (
        "it computes differently (token 2, margin 50.0%) from llama.cpp's default (the same KV cache: a different "
        "computation, never the pick)")
    assert not tunepick.eligible(MEMBERS[1], rule) and tunepick.eligible(MEMBERS[3], rule)
    # without the check, t01 is the pick: the check is what rules it out
    assert tunepick.Rule(default="default", goal="context", floor_ctx=0, threshold=0.02).pick(MEMBERS, 3).name == "t01"


def test_a_member_within_the_defaults_own_spread_stays(tmp_path):
    """The default parts with itself at token 3 (its A/A): a member parting at token 3 is within that spread, not
    a different computation, and stays the pick."""
    db = tmp_path / "t.db"
    s, run_id = store_outputs(db, {"default": [[1, 2, 3, 4], [1, 2, 8, 8]], "t01": [[1, 2, 5, 5]]})
    with s:
        assert CHECK.differing(s, run_id) == {}


def test_a_near_tie_is_not_a_fault(tmp_path):
    """On a real model a parting where the default's two best candidates were within 1% is numerics, not a fault."""
    db = tmp_path / "t.db"
    with Store(db) as s:
        run_id = new_run(s)
        s.save_outputs(run_id, "default", "tune", "single", 1, {"sequences": [seq([1, 2, 3, 4], margin=0.004)]})
        s.save_outputs(run_id, "t01", "tune", "single", 1, {"sequences": [seq([1, 9, 9, 9])]})
        assert CHECK.differing(s, run_id) == {}
        synthetic = racemod.OutputCheck(kv_of=CHECK.kv_of, default_kv="f16/f16", synthetic=True)
        assert list(synthetic.differing(s, run_id)) == ["t01"]  # a synthetic model: only identity counts


def test_nothing_is_judged_before_the_defaults_outputs_are_stored(tmp_path):
    """The race judges as it goes: before llama.cpp's default has its reference, no member is ruled out for its
    outputs (and the rule carries no `differs`)."""
    db = tmp_path / "t.db"
    s, run_id = store_outputs(db, {"t01": [[1, 9, 9, 9]]})
    with s:
        assert CHECK.differing(s, run_id) == {}
        rule = tunepick.Rule(default="default", goal="context", floor_ctx=0, threshold=0.02)
        assert CHECK.rule(rule, s, run_id).differs is None


def test_the_report_says_which_member_computes_differently(tmp_path):
    """The real tune-demo run (tests/fixtures/runs/tune-demo.json) picks t01; decided again with t01's outputs
    differing from the default's (as `run_tune` decides after its race), the stored pick is another member and
    t01's row says why, in the view and in Markdown."""
    import runfixtures
    from llamalab.report import data as rdata
    from llamalab.report import markdown
    from llamalab.report.analysis import tune as rtune

    with Store(tmp_path / "r.db") as s:
        run_id = runfixtures.fill(s, runfixtures.TUNE)
        doc = s.tune(run_id)
        plain = rdata.load(s, run_id)
        v0 = rtune.view(plain)
        assert v0.pick.name == "t01"
        words = "computes differently (token 2, margin 38.0%)"
        rule = tunepick.Rule.of_search(doc)
        rule = tunepick.Rule(**{**rule.as_dict(), "differs": {"t01": words}})
        decided = tunepick.decide(rtune.measures_of(plain, v0), rule, v0.repeats)
        s.save_tune(run_id, doc, decided.as_dict())
        data = rdata.load(s, run_id)
    v = rtune.view(data)
    assert v.pick.name not in ("t01", "default") and v.rule.differs == {"t01": words}
    note = next(r.note for r in v.rows if r.build == "t01")
    assert note == ("not the pick: it computes differently (token 2, margin 38.0%) from llama.cpp's default (the "
                    "same KV cache: a different computation, never the pick)")
    assert note in markdown.render(data)


IK_CHECK = racemod.OutputCheck(kv_of={"t01": "f16/f16", "t02": "q8_0/q8_0", "t03": "q8_0/q8_0", "t04": "f16/f16"},
                               default_kv="f16/f16", synthetic=False,
                               engine_of={"t01": "ik_llama.cpp", "t02": "ik_llama.cpp"})


def test_another_engines_member_is_judged_against_llama_cpps_default(tmp_path):
    """An ik_llama.cpp member with the default's KV cache is compared with llama.cpp's default like any member; where
    it computes differently, so does its engine: its member with another KV pair (t02) is out too, saying why.
    llama.cpp's own member with another pair (t03) is not judged so, nor by another engine's verdict."""
    db = tmp_path / "t.db"
    s, run_id = store_outputs(db, {"default": [[1, 2, 3, 4], [1, 2, 3, 4]], "t01": [[1, 2, 8, 8]],
                                   "t02": [[1, 2, 3, 4]], "t03": [[1, 7, 7, 7]], "t04": [[1, 2, 3, 4]]})
    with s:
        differs = IK_CHECK.differing(s, run_id)
    assert sorted(differs) == ["t01", "t02"]
    assert differs["t01"].startswith("computes differently (token 3")
    assert differs["t02"].startswith("runs on ik_llama.cpp, whose t01 (the default's KV cache) computes differently")
    p = tunepick.pick([m("default", 40_000), m("t01", 90_000), m("t02", 80_000), m("t03", 70_000),
                       m("t04", 60_000)], "default", "context", differs=differs)
    assert p.name == "t03" and "t01" not in p.considered and "t02" not in p.considered


def test_an_engine_whose_members_agree_keeps_them_all(tmp_path):
    db = tmp_path / "t.db"
    s, run_id = store_outputs(db, {"default": [[1, 2, 3, 4], [1, 2, 3, 4]], "t01": [[1, 2, 3, 4]],
                                   "t02": [[1, 5, 5, 5]]})
    with s:
        assert IK_CHECK.differing(s, run_id) == {}


def test_engine_verdicts_pure():
    engine_of = {"t01": "ik_llama.cpp", "t02": "ik_llama.cpp", "t05": "other"}
    got = racemod.engine_verdicts({"t01": "computes differently (token 2)", "t09": "x"}, engine_of)
    assert got == {"t02": "runs on ik_llama.cpp, whose t01 (the default's KV cache) computes differently (token 2)"}
    assert racemod.engine_verdicts({}, engine_of) == {}


def test_each_other_engine_is_judged_before_its_other_members_load():
    """The race loads the most context first, except that another engine's member with the default's KV cache
    comes before that engine's others: its outputs decide whether the engine computes what the default does."""
    check = racemod.OutputCheck(kv_of={"t01": "q8_0/q8_0", "t02": "q8_0/q8_0", "t03": "f16/f16", "t04": "f16/f16",
                                       "t05": "f16/f16"}, default_kv="f16/f16", synthetic=True,
                                engine_of={"t01": "ik_llama.cpp", "t04": "ik_llama.cpp", "t05": "ik_llama.cpp"})
    assert racemod.judged_first(["t01", "t02", "t03", "t04", "t05"], check) == ["t04", "t01", "t02", "t03", "t05"]
    assert racemod.judged_first(["t04", "t01"], check) == ["t04", "t01"]
    mine = racemod.OutputCheck(kv_of={"t01": "q8_0/q8_0", "t02": "f16/f16"}, default_kv="f16/f16", synthetic=True)
    assert racemod.judged_first(["t01", "t02"], mine) == ["t01", "t02"]  # llama.cpp alone: the order as it was
