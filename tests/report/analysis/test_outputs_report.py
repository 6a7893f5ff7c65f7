"""Outputs vs baseline in the reports, from real stored runs of the demo rig: every arm's verdict in the seed table,
the decision table, the outputs section (with the first divergence side by side), JSON and the forum summary; an arm
that computes differently is never recommended; a run stored before the check says "outputs not compared", never
"none measured"."""

from __future__ import annotations

import pytest

import runfixtures
from llamalab.quality import outputs as q
from llamalab.report import data as rdata
from llamalab.report import document, forum, html, markdown
from llamalab.report.analysis import outputs, recommend, tables
from llamalab.store.db import Store


def load(tmp_path, name):
    with Store(tmp_path / f"{name}.db") as s:
        return rdata.load(s, runfixtures.fill(s, name))


@pytest.fixture
def demo(tmp_path):
    return load(tmp_path, runfixtures.OUTPUTS)


@pytest.fixture
def planted(tmp_path):
    return load(tmp_path, runfixtures.PLANTED)


def test_every_arm_of_the_demo_computes_what_copies4_computes(demo):
    v = outputs.verdicts(demo)
    arms = {k: x for k, x in v.items() if k[0] != "copies4"}
    assert {b for b, _ in arms} == {"copies1", "no-pp-blas", "no-pp-override"} and len(arms) == 6
    assert all(x.kind == q.SAME for x in arms.values()), {k: x.words for k, x in arms.items()}
    # the logits: KLD 0.000000 and 100% the same top token, on the arm's own build, flags and devices
    assert all(x.kld and abs(x.kld["mean"]) < q.KLD_ZERO and x.kld["same_top_pct"] == 100.0 for x in arms.values())
    # the baseline's own A/A is stated: single-stream it repeats itself
    aa = v[("copies4", "kv-f16-q8_0")]
    assert aa.words.startswith("baseline; against itself (A/A): deterministic single-stream")
    # every seed-table row and every decision-table row carries the column
    assert {r["outputs"] for r in tables.rows(demo)} >= {"same"} and \
        all(r["outputs"] in ("same",) or r["outputs"].startswith("baseline") for r in tables.rows(demo))
    head, body = recommend.table_cells(recommend.decision_table(demo))
    col = head.index(tables.OUTPUTS_HEAD)
    assert [r[col] for r in body] == ["baseline" if r[1].startswith("keep") else "same" for r in body]
    assert "Outputs vs baseline" in markdown.render(demo) and "Outputs vs baseline" in html.render(demo)


def test_a_planted_difference_is_caught_and_never_recommended(planted):
    """A q4_0 V cache as a build (where the baseline runs f16) holds more context than the baseline and would be a
    pick on memory alone; it computes differently, so no use recommends it and the report says where it parts.
    The no-op override, which only turns pipeline parallelism off, computes the same."""
    v = outputs.verdicts(planted)
    plant, noop = v[("planted-v-q4_0", "default")], v[("no-pp-override", "default")]
    assert plant.kind == q.DIFFERS and plant.words.startswith("computes differently (token ")
    assert plant.kld is not None and plant.kld["mean"] > 1e-4 and plant.kld["same_top_pct"] < 99.0
    assert noop.kind == q.SAME
    ctx = {r["build"]: r["n_ctx"] for r in recommend.context.rows(planted)}
    assert ctx["planted-v-q4_0"] > ctx["copies4"]  # what it would have bought
    rows = recommend.decision_table(planted)
    assert rows and all(r.build != "planted-v-q4_0" and "planted-v-q4_0" not in r.alternatives for r in rows)
    md = markdown.render(planted)
    section = md[md.index("## Outputs vs baseline"):]
    assert "planted-v-q4_0 × default: computes differently" in section
    assert "| planted-v-q4_0 × default | single | 1 |" in section  # the two continuations, side by side
    js = document.document(planted)
    by = {(x["build"], x["setting"]): x for x in js["outputs_vs_baseline"]}
    assert by[("planted-v-q4_0", "default")]["kind"] == q.DIFFERS and by[("no-pp-override", "default")]["kind"] == \
        q.SAME
    assert "computes differently" in forum.render(planted)


def test_a_run_before_the_check_says_outputs_not_compared(tmp_path):
    old = load(tmp_path, runfixtures.CONCURRENCY)
    assert not outputs.compared(old)
    assert {r["build"]: r["outputs"] for r in tables.rows(old)} == {
        "copies4": "baseline", "copies1": "not compared", "no-pp-blas": "not compared"}
    head, body = recommend.table_cells(recommend.decision_table(old))
    costs, col = head.index("Costs"), head.index(tables.OUTPUTS_HEAD)
    for r, cells in zip(recommend.decision_table(old), body):
        if not r.keep_default:
            assert "outputs not compared" in cells[costs] and cells[costs] != "none measured"
            assert cells[col] == "not compared"
    assert outputs.lines(old) == [outputs.NOT_RUN]
