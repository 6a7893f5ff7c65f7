"""Advice that never contradicts its own measurements, checked over stored runs: the committed H200 export
(benchmarks/h200/export.json) and real demo runs (tests/fixtures/runs). For every setting's decision table and the
recommendation paragraph of each run:

- every speed figure a row states as bought is a "faster" verdict of that build, every figure it states as a cost a
  "slower" one, and every metric it calls "no measurable difference" has that verdict — in the same report;
- every "slower" verdict of the recommended build in the row's scope is stated among its costs, in the table and in
  the paragraph; a row that keeps the default states every way the alternative is slower;
- a build is recommended only where it buys something; context never goes past the model's n_ctx_train;
- a failed llama.cpp fit reads as failed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llamalab.report import data as rdata
from llamalab.report import markdown
from llamalab.report.analysis import context, recommend, speed
from llamalab.store import exchange
from llamalab.store.db import Store
from runfixtures import BUDGET, CONCURRENCY, DEMO, GRID, OVER_BUDGET, VERSIONS, fill
from testpaths import ROOT

BENCH = ROOT / "benchmarks"
H200 = BENCH / "h200" / "export.json"
# benchmark exports, by name: the H200 study, and the split-modes one, whose -sm tensor arm llama.cpp's fit left
# over both budgets in a run made before llamalab searched for contexts within budgets (its context is unknown)
EXPORTS = {"h200": H200, "split-modes-h200": BENCH / "split-modes-h200" / "export.json"}
RUNS = [DEMO, CONCURRENCY, BUDGET, GRID, VERSIONS, OVER_BUDGET, *EXPORTS]


@pytest.fixture(scope="module", params=RUNS)
def run(request, tmp_path_factory):
    with Store(tmp_path_factory.mktemp("advice") / "r.db") as store:
        if request.param in EXPORTS:
            rid = exchange.import_run(store, exchange.loads(EXPORTS[request.param].read_text(encoding="utf-8"))).run_id
        else:
            rid = fill(store, request.param)
        yield rdata.load(store, rid)


def _generated_text(data) -> list[str]:
    """Every sentence and cell the advice writes: the paragraph, each row's sentence and cells, the context and
    memory sentences."""
    from llamalab.report.analysis import summary

    out = [recommend.recommendation(data), *context.sentences(data), *summary.memory_lines(data)]
    for _, rows in _tables(data):
        out += [recommend.row_sentence(r) for r in rows]
        out += [cell for row in recommend.table_cells(rows)[1] for cell in row]
    return out


def doubled_words(text: str) -> list[str]:
    """Consecutive repeated words within a clause ("the the"), and a pronoun before its own possessive ("it its").
    Commands in backticks count as one word (`cmake --build build` is no typo); "f16/f16" and "b11312" are words."""
    text = re.sub(r"`[^`]*`", " COMMAND ", text)
    out = []
    for clause in re.split(r"[.;:,()\[\]—]\s", text + " "):
        words = [w.strip("'\"").lower() for w in clause.split()]
        for a, b in zip(words, words[1:]):
            if a and (a == b or (a, b) in (("it", "its"), ("its", "it"))):
                out.append(f"{a} {b}")
    return out


def test_no_generated_sentence_doubles_a_word(run):
    for text in _generated_text(run):
        assert not doubled_words(text), (doubled_words(text), text)


def test_the_doubled_word_check_catches_what_it_is_for():
    assert doubled_words("copies1 buys nothing measurable here: it its context is not counted") == ["it its"]
    assert doubled_words("keep the the default") == ["the the"]
    assert doubled_words("it buys +3,840 tokens of context; its cost: none") == []
    assert doubled_words("build llama.cpp with `cmake -B build && cmake --build build`") == []
    assert doubled_words("keep b11312 (llama.cpp b11312); KV f16/f16. With kv-f16-f16: the same") == []


def test_an_unknown_context_is_never_called_no_gain(run):
    """Where a configuration's context within the budgets is not known, the advice says so and never that it gains
    no context or buys nothing."""
    rows = {(r["build"], r["setting"]): r for r in context.rows(run)}
    for _, table in _tables(run):
        for row in table:
            who = row.versus if row.keep_default else row.build
            r = rows.get((who, row.setting)) if who else None
            if r is None or not (r["context_unknown"] or rows[(r["baseline"], row.setting)]["context_unknown"]):
                continue
            if recommend.CONTEXT_MATTERS[row.use]:
                sentence = recommend.row_sentence(row)
                assert "not known" in sentence, sentence
                assert "buys nothing measurable" not in sentence and "gains no context" not in sentence, sentence


def _tables(data):
    return [(s, recommend.decision_table(data, s)) for s in recommend.study_settings(data)
            if recommend.decision_table(data, s)]


def _scope_comparisons(data, row, build):
    scopes = {sc.use: sc for sc in recommend._scopes(data, row.setting)}
    sc = scopes[row.use]
    return [c for c in speed.comparisons(data) if c["candidate"] == build and sc.covers(c)]


def test_claims_are_the_reports_own_verdicts(run):
    comps = speed.comparisons(run)
    for _, rows in _tables(run):
        for row in rows:
            who = row.versus if row.keep_default else row.build
            for claim in row.buys:
                if claim.comparison is not None:
                    assert claim.comparison in comps
                    assert claim.comparison["candidate"] == who
                    # keeping the default buys what the alternative is slower in
                    assert claim.comparison["verdict"] == ("slower" if row.keep_default else "faster"), claim.text
                    assert recommend.ratio_text(claim.comparison) in claim.text
            for claim in row.costs:
                if claim.comparison is not None:
                    assert claim.comparison in comps and claim.comparison["candidate"] == who
                    assert claim.comparison["verdict"] == ("faster" if row.keep_default else "slower"), claim.text
            for c in row.same:
                assert c["verdict"] == "no measurable difference" and c["candidate"] == who
            for c in row.unlike:
                assert c["verdict"] == speed.NOT_COMPARABLE and c["reason"]


def test_every_slower_verdict_of_the_recommended_row_is_stated(run):
    paragraph = recommend.recommendation(run)
    md = markdown.render(run)
    for _, rows in _tables(run):
        for row in rows:
            if not row.measured_any:
                continue
            if row.keep_default:
                if row.versus is None:
                    continue
                # the default's costs against the alternative: every way the alternative is faster (none, else it
                # would have been recommended); every way it is slower is what keeping the default buys
                scope = _scope_comparisons(run, row, row.versus)
                assert not [c for c in scope if c["verdict"] == "faster"]
                slower = [c for c in scope if c["verdict"] == "slower"]
                stated = [c.comparison for c in row.buys if c.comparison]
                assert all(c in stated for c in slower)
                continue
            scope = _scope_comparisons(run, row, row.build)
            stated = [c.comparison for c in row.costs if c.comparison]
            for c in scope:
                if c["verdict"] == "slower":
                    assert c in stated, (row.title, c["metric"], c["prompt_tokens"])
            for claim in row.costs:  # … and every cost is in the paragraph and in the Markdown table
                assert claim.text in md
                if row.setting == rows[0].setting and row.setting == _tables(run)[0][0]:
                    assert claim.text in paragraph, claim.text


def test_no_sentence_of_the_recommendation_contradicts_a_verdict(run):
    """Read the paragraph back: each row's sentence puts a figure under "it buys" (faster), "it costs" (slower) or
    "no measurable difference in" (neither), and the report's verdict for that build must agree."""
    paragraph = recommend.recommendation(run)
    comps = speed.comparisons(run)
    (first, rows), *_ = _tables(run)
    for row in rows:
        sentence = recommend.row_sentence(row)
        assert sentence.split(" — ")[0] in paragraph
        who = row.versus if row.keep_default else row.build
        scope = _scope_comparisons(run, row, who) if row.measured_any and who else []
        by_label = {}
        for c in scope:
            label = recommend._label(c, next(s for s in recommend._scopes(run, row.setting) if s.use == row.use),
                                     len({o for _, o in run.cells}) > 1)
            by_label[f"{label} {recommend.ratio_text(c)}"] = c
        parts = dict(re.findall(r"(it buys|it costs|it keeps) (.*?)(?=; |, where | — |\. The same|\.$)", sentence))
        expected = {"it buys": "faster", "it costs": "slower", "it keeps": "slower"}
        for head, body in parts.items():
            for text, c in by_label.items():
                if text in body:
                    assert c["verdict"] == expected[head], (sentence, text)
        m = re.search(r"no measurable difference in (.*?)(?: \(|;|\.$)", sentence)
        if m:
            named = [x.strip() for x in re.split(r",| and ", m.group(1)) if x.strip()]
            for c in scope:
                if speed.metric(c["metric"]).short in named and c["verdict"] != "no measurable difference":
                    # the metric is named as unchanged: no cell of the row may say otherwise for it
                    assert any(x.comparison == c for x in row.costs + row.buys), (sentence, c)
        for word in ("unchanged", "no different", "bought nothing measurable"):
            assert word not in sentence
    assert first == rows[0].setting and comps is not None


def test_a_build_is_recommended_only_where_it_buys_something(run):
    for _, rows in _tables(run):
        for row in rows:
            if not row.keep_default and row.measured_any:
                assert row.buys, row.title
                assert row.build != row.baseline


def test_context_never_exceeds_the_models_training_context(run):
    for r in context.rows(run):
        train = r["n_ctx_train"]
        if not train:
            continue
        assert r["fitted_n_ctx"] <= train and (r["n_ctx"] or 0) <= train
        if r["predicted_delta_tokens"] is not None and r["n_ctx"] is not None:
            base = r["n_ctx"] - (r["measured_delta_tokens"] or 0)
            assert base + r["predicted_delta_tokens"] <= train


def test_failed_fits_read_as_failed(run):
    failed = [r for r in context.rows(run) if r["fit_status"] == "failed"]
    text = " ".join(context.sentences(run))
    assert ("llama.cpp's memory fit reported failure" in text) == bool(failed)


def test_the_h200_export_no_longer_recommends_a_change_that_buys_nothing():
    """Issue 16's first finding, on the committed H200 run: for one user with short prompts no build buys anything
    (no speed verdict, and short prompts need no context), so the default stays."""
    with Store(Path(":memory:")) as store:
        rid = exchange.import_run(store, exchange.loads(H200.read_text(encoding="utf-8"))).run_id
        data = rdata.load(store, rid)
    short = recommend.decision_table(data)[0]
    assert short.use == "short" and short.keep_default and short.build == "copies4"
    assert "keep copies4" in recommend.recommendation(data)


def test_the_h200_shape_on_the_cpu_has_its_map_and_table(tmp_path):
    """The H200 study scaled to the CPU (tests/fixtures/runs/demo-grid.json, a real run): 16 cells, each compared;
    the crossover sentence; every use has a row; the true no-op override moved no weight."""
    from llamalab.report.analysis import grid, verdict

    with Store(tmp_path / "r.db") as store:
        data = rdata.load(store, fill(store, GRID))
    assert data.cells == [(16, 8), (64, 8), (256, 8), (768, 8)]
    rows = grid.gains(data)
    assert len({(r["prompt_tokens"], r["concurrency"]) for r in rows}) == 16
    assert grid.crossover(data, rows).startswith("Pipeline parallelism (copies4, 4 copies, against copies1)")
    (m,) = [m for m in verdict.memory_comparisons(data) if m["candidate"] == "no-pp-override"]
    assert m["weights_moved"] == [] and m["candidate_pp"] == "off"
    assert [r.title for r in recommend.decision_table(data)] == [
        "One user, short prompts", "One user, long prompts (RAG, agents, code)", "Serving 8 requests at once"]


def test_an_interleaved_study_reports_each_configuration_once():
    """The H200 run is interleaved: every configuration loaded once per pass (3 passes). Passes that loaded the same
    way are one row of the splits table, one note and one NVML line each, not three."""
    from llamalab.report.analysis import summary

    with Store(Path(":memory:")) as store:
        rid = exchange.import_run(store, exchange.loads(H200.read_text(encoding="utf-8"))).run_id
        data = rdata.load(store, rid)
    assert len(data.configs) == 9
    missing = summary.not_measured(data)
    assert len(missing) == len(set(missing)) == 3
    head, body = summary.split_table(data)
    assert [r[0] for r in body] == ["copies4", "copies1", "no-pp-override"]
    fid = summary.fidelity_lines(data)
    assert len(fid) == len(set(fid)) and sum("unaccounted" in s for s in fid) == 3
