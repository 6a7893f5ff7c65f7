"""A tune run as the reports show it, from a real stored run (tests/fixtures/runs/tune-demo.json: `llamalab tune
tune-demo` on the 2-core CPU VM): the front measured, the pick and its command, the default beside it, the stages,
the plot; and in Markdown, HTML, JSON and on the terminal."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

import runfixtures
from llamalab.cli import entry
from llamalab.core import stats
from llamalab.report import data as rdata
from llamalab.report import document, formats, html, markdown, plots
from llamalab.report.analysis import tune as rtune
from llamalab.store.db import Store
from llamalab.tune import pick as tunepick
from testpaths import ROOT


@pytest.fixture
def data(tmp_path):
    with Store(tmp_path / "r.db") as s:
        return rdata.load(s, runfixtures.fill(s, runfixtures.TUNE))


def test_the_view_of_a_stored_tune(data):
    v = rtune.view(data)
    assert v is not None and v.parallel == 2 and v.devices == ["RPC0", "RPC1"]
    rows = {r.build: r for r in v.rows}
    assert list(rows) == ["default", "t01", "t02", "t03", "t04", "t05"]
    # every row's context is the one its server ran with
    ledger = {c["build"]: c["ledger"]["n_ctx"] for c in data.ok_configs()}
    assert all(rows[b].n_ctx == ledger[b] for b in rows)
    # the default's fit left RPC1 above 300 − 64 MiB: flagged, and not a candidate for the pick
    assert v.doc["default"]["over_budget"] and "RPC1 at 300 MiB, 64 over" in rows["default"].note
    assert not rows["default"].on_front and not rows["default"].picked
    # the pick: the most context whose generation is not shown slower than the default's (its speed is the floor
    # even where the default itself does not fit)
    pick = rows[v.pick.name]
    assert pick.picked and pick.on_front
    ms = {m.name: m for m in rtune.measures_of(data, v)}
    for name in v.pick.considered:
        assert ms[name].n_ctx <= pick.n_ctx
        r = stats.ratio(ms["default"].samples["output_tps"], ms[name].samples["output_tps"])
        assert stats.verdict(r, 0.02) != "slower" and r.ratio >= 0.96
    assert pick.n_ctx >= rows["default"].n_ctx
    # the command is the build's arguments with the context and the slots, nothing of the emulation
    assert v.command.startswith("llama-server -m ") and v.command.endswith(f"-c {pick.n_ctx} -np 2 -kvu")
    assert "-fitt" not in v.command and "--rpc" not in v.command
    assert v.default_command.endswith("-np 2 -kvu") and "-ts 0,0" not in v.default_command


def test_stage_lines_say_how_many_and_how_long(data):
    v = rtune.view(data)
    s1, s2 = v.doc["stage1"], v.doc["stage2"]
    first = v.stage_lines[0]
    assert first.startswith(f"stage one: {s1['enumerated']} candidates, {s1['dry_runs']} dry runs in "
                            f"{s1['seconds']:.1f} s")
    assert f"{s1['by_status']['front']} verified on the front" in first
    assert v.stage_lines[1].startswith(f"stage two: {len(s2['real']) - 1} front candidates and llama.cpp's default "
                                       f"run for real in {s2['seconds']:.1f} s")
    assert any("SPLIT_MODE_TENSOR" in line for line in v.stage_lines)
    assert any("-ts 0,0" in line for line in v.stage_lines)


def test_markdown_puts_the_tune_first_and_drops_the_generic_advice(data):
    md = markdown.render(data)
    v = rtune.view(data)
    assert md.index("## Tune: the front, measured") < md.index("## Builds")
    assert "**Recommendation.**" not in md and "## Decision by use" not in md
    assert "```\n" + v.command + "\n```" in md
    assert "<details><summary>Every stage-one candidate</summary>" in md
    # every stage-one candidate is listed, with its status
    assert md.count("| front") + md.count("| pruned") + md.count("| unplannable") >= len(v.doc["candidates"])


def test_html_has_the_front_plot_and_escapes(data):
    page = html.render(data)
    assert '<h2>Tune: the front, measured</h2>' in page and 'id="plot-tune_front"' in page
    assert page.index("plot-tune_front") < page.index("<h2>System</h2>")
    assert "Recommendation." not in page
    assert re.search(r"<pre>llama-server -m \S+ -ngl 999", page)
    fig = plots.tune_front_figure(data)
    assert fig is not None and len(fig.axes) == 2  # generation, and aggregate at 2 requests
    assert "tune_front.png" in plots.render(data, ("png",))


def test_other_runs_have_no_tune_section(tmp_path):
    with Store(tmp_path / "d.db") as s:
        d = rdata.load(s, runfixtures.fill(s, runfixtures.DEMO))
    assert rtune.view(d) is None
    assert "Tune:" not in markdown.render(d) and plots.tune_front_figure(d) is None


def test_json_report_keeps_the_search(data):
    doc = document.document(data)
    assert doc["tunes"][0]["result"] == rtune.view(data).doc  # the search, whole, in the JSON report
    assert json.loads(formats.render(data, "json"))["tunes"][0]["result"]["stage1"]["dry_runs"] == 46


def test_cli_report_renders_a_tune(tmp_path, capsys):
    db = tmp_path / "c.db"
    with Store(db) as s:
        rid = runfixtures.fill(s, runfixtures.TUNE)
    assert entry(["report", rid, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "## Tune: the front, measured" in out and "**Pick.**" in out
    assert entry(["report", rid, "--db", str(db), "--format", "html", "-o", str(tmp_path / "t.html")]) == 0
    assert "plot-tune_front" in (tmp_path / "t.html").read_text()
    v = rtune.as_json(rtune.view(rdata.load(Store(db, readonly=True), rid)))
    assert json.loads(json.dumps(v, default=str))["pick"]["command"].startswith("llama-server")


H200_MOE = ROOT / "benchmarks" / "tune-h200" / "export-moe-race.json"


def test_a_default_that_does_not_fit_does_not_set_the_pace_when_nothing_that_fits_matches_it(tmp_path):
    """The H200 tune of the 30B-A3B-shape MoE (benchmarks/tune-h200/export-moe-race.json): llama.cpp's default keeps
    every expert on the GPUs at 4,096 tokens and goes over a budget, and every configuration that fits moves experts to
    the host and generates slower than it. The default's speed cannot be the floor there (the pick would be "keep the
    default", which these cards cannot run): the fastest configuration that fits sets it, and the most context
    generating not measurably slower than that one is the pick."""
    with Store(tmp_path / "r.db") as s:
        data = rdata.load(s, runfixtures.fill(s, document=json.loads(H200_MOE.read_text(encoding="utf-8"))))
    v = rtune.view(data)
    assert v.doc["default"]["over_budget"]
    ms = {m.name: m for m in rtune.measures_of(data, v)}
    fits = [m for name, m in ms.items() if name != "default"]
    default_gen = ms["default"].median("output_tps")
    assert all(m.median("output_tps") < default_gen for m in fits)  # the situation this test is about
    fastest = max(fits, key=lambda m: m.median("output_tps"))
    assert v.pick.name != "default" and f"than {fastest.name}, the fastest configuration that fits" in v.pick.reason
    picked = ms[v.pick.name]
    for name in v.pick.considered:
        r = stats.ratio(fastest.samples["output_tps"], ms[name].samples["output_tps"])
        assert stats.verdict(r, 0.02) != "slower" and r.ratio >= 0.96
        assert ms[name].n_ctx <= picked.n_ctx
    assert picked.n_ctx > ms["default"].n_ctx
    # the same data with a default that fits: its speed is the floor again, and nothing slower is picked
    p = tunepick.pick(list(ms.values()), "default", "context", threshold=0.02, default_fits=True)
    assert p.name == "default" and p.considered == ("default",)


def test_quality_refuses_a_synthetic_model(tmp_path, capsys):
    """`llamalab quality` on a synthetic model: its weights are random, so it says so and runs nothing."""
    from llamalab.models import synthetic as models

    path = models.synthetic(models.preset("tiny"), tmp_path, data=False)
    assert entry(["quality", str(path)]) == 2
    err = capsys.readouterr().err
    assert "synthetic model" in err and "Traceback" not in err
    assert entry(["quality", str(path), "--kv", "q8_0/q9_9"]) == 2
    assert "q9_9" in capsys.readouterr().err


def test_an_open_pick_asks_for_more_trials_on_the_h200_moe_measurements(tmp_path):
    """The H200 MoE race (benchmarks/tune-h200/export-moe-race.json, 3 trials each): its pick t01 generated 0.97×
    [0.80, 1.12] of t07's, the fastest configuration that fits: open. The race asks for trials 4–6 of the pick and
    of t07, the configuration whose speed sets the floor; with 6 trials allowed and 6 had, it asks for none."""
    from llamalab.tune import pick as tunepick

    with Store(tmp_path / "r.db") as s:
        data = rdata.load(s, runfixtures.fill(s, document=json.loads(H200_MOE.read_text(encoding="utf-8"))))
    v = rtune.view(data)
    ms = rtune.measures_of(data, v)
    names, trials, why = tunepick.more_trials(ms, v.rule, 3, 3, 6)
    assert v.pick.name == "t01" and v.pick.floor == "t07"
    assert set(names) == {"t01", "t07"} and trials == (4, 5, 6)
    assert why and "the pick t01" in why[0] and "interval reaches below the floor" in why[0]
    assert tunepick.more_trials(ms, v.rule, 3, 6, 6) is None
    # the same measurements under an absolute floor every configuration meets: nothing is open
    rule = tunepick.Rule(default="default", goal="context", min_gen_tps=1.0, default_fits=False)
    assert tunepick.more_trials(ms, rule, 3, 3, 6) is None


def test_a_stored_pick_is_the_pick_shown_after_the_rule_changes(tmp_path, monkeypatch):
    """What a tune decided is stored with the run (`tune_picks`, as `tune.tune.run_tune` stores it) and every report
    shows it: changing the rule afterwards (here its threshold, 0.02 → 0.10, which makes the rule pick t03 over this
    run's measurements instead of t01) changes the pick of a run stored without its pick, never of one stored with
    it — in Markdown, HTML and JSON alike."""
    with Store(tmp_path / "r.db") as s:
        run_id = runfixtures.fill(s, runfixtures.TUNE)
        doc = s.tune(run_id)
        plain = rdata.load(s, run_id)
        ms = rtune.measures_of(plain, rtune.view(plain))
        decided = tunepick.decide(ms, tunepick.Rule.of_search(doc), rtune.view(plain).repeats)
        assert decided.pick.name == "t01"
        s.save_tune(run_id, doc, decided.as_dict())
        stored = rdata.load(s, run_id)
    real = tunepick.Rule.of_search
    monkeypatch.setattr(tunepick.Rule, "of_search",
                        classmethod(lambda cls, d: dataclasses.replace(real(d), threshold=0.10)))
    # the rule changed: a run without a stored pick is judged again, and picks otherwise …
    assert rtune.view(plain).pick.name == "t03" and rtune.as_json(rtune.view(plain))["pick"]["stored"] is False
    # … while the run that stored its pick keeps it, with its reason, in every report
    v = rtune.view(stored)
    assert v.pick.name == "t01" and v.pick.reason == decided.pick.reason and v.rule.threshold == 0.02
    md, page = markdown.render(stored), html.render(stored)
    row = next(line for line in md.splitlines() if line.startswith("| t01 |"))
    assert row.rstrip(" |").endswith("pick") and decided.pick.reason in md and decided.pick.reason in page
    js = document.document(stored)
    assert js["answer"]["build"] == "t01" and js["tune"]["pick"]["build"] == "t01" and js["tune"]["pick"]["stored"]
    assert js["answer"]["command"] == v.command and js["tune_picks"][0]["pick"]["build"] == "t01"


def test_a_race_says_what_it_did_not_load_and_in_which_order(data):
    """A race that left members unloaded (issue 44): the stage-two line says how many were loaded, in which order
    and why, how many were not; each unloaded member's row says why; a race stored before says what it always did."""
    v = rtune.view(data)
    s2 = {"mode": "race", "real": ["default", "t01", "t02", "t03", "t04"], "screened_out": {"t01": "slow"},
          "not_loaded": {"t03": "t02 holds more context", "t04": "t02 holds more context"},
          "order_reason": "the most context first: the first …", "trials": 7, "trials_before_extension": 7,
          "trials_exhaustive": 15, "seconds": 12.5}
    line = rtune.stage_lines({**v.doc, "stage2": s2})[1]
    assert line == ("stage two (race): 2 of the 4 front members loaded after llama.cpp's default, the most context "
                    "first: the first …; 2 not loaded: they cannot be the pick whatever they measure; each loaded one "
                    "screened with one trial; 1 ruled out by the measurements, the rest measured with every trial: 7 "
                    "trials of the 15 an exhaustive run makes, in 12.5 s")
    old = {k: x for k, x in s2.items() if k not in ("not_loaded", "order_reason")}
    assert rtune.stage_lines({**v.doc, "stage2": old})[1].startswith(
        "stage two (race): all 4 front members and llama.cpp's default screened with one trial each; 1 ruled out")
    rows = {r.build: r for r in rtune._rows({**v.doc, "stage2": s2}, rtune._candidates(v.doc), [], ["t03"], v.pick)}
    assert rows["t03"].note == "not loaded: t02 holds more context"


def test_the_report_says_whether_stage_one_was_reused_or_computed_afresh(data):
    v = rtune.view(data)
    s1 = v.doc["stage1"]
    why = "it was made by llamalab 0.0.9 (stage-one code abc), this is llamalab 0.1.0 (stage-one code def)"
    lines = rtune.stage_lines({**v.doc, "stage1": {**s1, "afresh": why}})
    assert lines[1] == f"stage one computed afresh, not reused from the cache of this search: {why}"
    lines = rtune.stage_lines({**v.doc, "stage1": {**s1, "reused_from": "0123456789abcdef"}})
    assert lines[1].startswith("stage one reused from an earlier tune of this search")
    assert not s1.get("reused_from") and rtune.stage_lines(v.doc)[1].startswith("stage two")  # neither: no line


# ---------------------------------------------------------------- a tune over two engines (`--engines`)


@pytest.fixture
def engines_data(tmp_path):
    with Store(tmp_path / "r.db") as s:
        return rdata.load(s, runfixtures.fill(s, runfixtures.TUNE_ENGINES))


def test_a_tune_over_two_engines_names_each_rows_engine(engines_data):
    v = rtune.view(engines_data)
    rows = {r.build: r for r in v.rows}
    ik = {b for b, r in rows.items() if r.engine == "ik_llama.cpp"}
    assert ik and ik == {c["build"] for c in v.doc["candidates"] if c.get("engine") and c.get("build")}
    assert all(rows[b].label.startswith("ik_llama.cpp: ") for b in ik)
    head, body = rtune.front_table(v)
    assert head[:3] == ["Config", "What", "Engine"]
    assert {row[0]: row[2] for row in body} == {b: r.engine for b, r in rows.items()}
    # a tune of one engine keeps its table as it was
    assert "Engine" not in rtune.candidates_table(v)[0] and "Dry runs or loads" in rtune.candidates_table(v)[0]


def test_the_picks_command_starts_its_engines_llama_server(engines_data, tmp_path):
    v = rtune.view(engines_data)
    assert engines_data.engine(v.pick.name) == "ik_llama.cpp"
    ran = engines_data.server_argv(v.pick.name, "tune")[0]
    assert ran.endswith("/bin/llama-server") and "/builds/ik-" in ran
    # its own binary, by the path it ran from; its own slots: -np K without -kvu (it has no unified KV cache); no
    # device arguments (--rpc, the CPU's 0 in front of -ts)
    assert v.command_words[0] == ran and v.command_words[-2:] == ["-np", "1"] and "-kvu" not in v.command_words
    assert "-ts 1024,1024" in v.command and "--rpc" not in v.command
    assert v.default_command.startswith("llama-server -m ") and v.default_command.endswith("-np 1 -kvu")
    for r in v.rows:
        w = rtune.command_words(engines_data, r.build, 1, "M")
        assert (w[0] == engines_data.server_argv(r.build, "tune")[0]) == (r.engine == "ik_llama.cpp")
    assert f'cmd: "{ran} --port ${{PORT}} -m ' in rtune.llama_swap(v)
    # a run that does not say where the binary was: the path its checkout's build gives it, never `llama-server`
    doc = runfixtures.doc(runfixtures.TUNE_ENGINES)
    for c in doc["tables"]["configs"]:
        c["server_argv_json"] = None
    with Store(tmp_path / "bare.db") as s:
        bare = rdata.load(s, runfixtures.fill(s, document=doc))
    assert rtune.view(bare).command.startswith("ik_llama.cpp/build/bin/llama-server -m ")


def test_the_stage_lines_say_what_the_other_engine_searched_and_how(engines_data):
    v = rtune.view(engines_data)
    e = v.doc["engines"][0]
    line = next(x for x in v.stage_lines if x.startswith("ik_llama.cpp: "))
    assert f"measured by {e['loads']} real loads in {e['seconds']:.1f} s (it has no dry run" in line
    assert "its own default and llama.cpp's front as it runs them" in line and "not searched: -ts" in line
    assert "slots" not in line  # one request at a time: nothing about its per-slot context


def test_an_ik_pick_at_k_requests_says_each_slot_holds_a_kth(tmp_path):
    doc = runfixtures.doc(runfixtures.TUNE_ENGINES)
    (t,) = doc["tables"]["tunes"]
    t["result_json"] = {**t["result_json"], "parallel": 2}
    with Store(tmp_path / "r.db") as s:
        v = rtune.view(rdata.load(s, runfixtures.fill(s, document=doc)))
    n = next(r.n_ctx for r in v.rows if r.build == v.pick.name)
    assert f"It runs on ik_llama.cpp, which has no unified KV cache: each of its 2 slots holds {n // 2:,} tokens." \
        in v.pick_sentence


def test_markdown_and_json_of_a_tune_over_two_engines(engines_data):
    md = markdown.render(engines_data)
    v = rtune.view(engines_data)
    assert "| Config | What | Engine |" in md and "```\n" + v.command + "\n```" in md
    front = document.document(engines_data)["tune"]["front"]
    assert {r["build"]: r["engine"] for r in front} == {r.build: r.engine for r in v.rows}
