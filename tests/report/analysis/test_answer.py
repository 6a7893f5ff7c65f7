"""The answer a report opens with (`report.analysis.answer`): at most two sentences and 60 words, written from the
decision table, with the command that runs what it picks — over every stored fixture run and every committed
benchmark."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

import runfixtures
from llamalab.cli import cli
from llamalab.report import data as rdata
from llamalab.report.analysis import answer, recommend
from llamalab.store.db import Store
from testpaths import ROOT

FIXTURES = [runfixtures.DEMO, runfixtures.CONCURRENCY, runfixtures.BUDGET, runfixtures.GRID, runfixtures.VERSIONS,
            runfixtures.TUNE, runfixtures.OVER_BUDGET]
EXPORTS = ["h200/export.json", "vulkan-h200/export.json", "split-modes-h200/export.json",
           "tune-h200/export-8b-race.json", "tune-h200/export-moe-exhaustive.json"]


def fixture_run(tmp_path, name):
    with Store(tmp_path / "r.db") as s:
        return rdata.load(s, runfixtures.fill(s, name))


def exported_run(tmp_path, export):
    db = tmp_path / "r.db"
    done = CliRunner().invoke(cli, ["import", str(ROOT / "benchmarks" / export), "--db", str(db)])
    assert done.exit_code == 0, done.output
    with Store(db) as s:
        return rdata.load(s)


def check(data):
    a = answer.answer(data)
    assert 1 <= len(a.sentences) <= 2 and answer.words(a.text) <= answer.WORDS, a.text
    assert all(s.endswith(".") for s in a.sentences)
    rows = recommend.decision_table(data)
    # it names only builds the decision table chooses or weighs, and runs one of them
    named = {r.build for r in rows} | {r.baseline for r in rows} | {r.versus for r in rows if r.versus}
    assert a.build in named
    for build in data.study_names("builds"):
        if re.search(rf"\b(use|keep) {re.escape(build)}\b", a.text):
            assert build in named, (build, a.text)
    assert "llama-server -m MODEL.gguf" in a.command
    return a


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_answers_are_short_and_from_the_table(tmp_path, name):
    check(fixture_run(tmp_path, name))


@pytest.mark.parametrize("export", EXPORTS)
def test_benchmark_answers_are_short_and_from_the_table(tmp_path, export):
    check(exported_run(tmp_path, export))


def test_h200_answer(tmp_path):
    a = check(exported_run(tmp_path, "h200/export.json"))
    assert a.sentences[0] == ("For short prompts, keep copies4 (llama.cpp's default): no-pp-override buys nothing "
                              "measurable.")
    # the context bought and the worst speed paid, each with the comparison it comes from (the decision table's)
    assert "if you need the context, use no-pp-override: +5,888 tokens of context (95,232 → 101,120)" in \
        a.sentences[1]
    assert "up to 11% slower (aggregate prompt t/s at 512-token prompts 0.89× [0.86, 0.99])" in a.sentences[1]
    assert a.command == "llama-server -m MODEL.gguf -fa on -ngl 999 --no-op-offload -ctk f16 -ctv q8_0 " \
                        "-ot no_such_tensor=CPU"


def test_a_picked_build_with_cmake_options_gives_the_build_command(tmp_path):
    a = check(fixture_run(tmp_path, runfixtures.BUDGET))
    assert a.build == "no-pp-blas" and a.sentences[0].startswith("For short and long prompts, use no-pp-blas:")
    # a build per use: each one's command, under the uses it serves
    assert a.command.splitlines() == [
        "# short and long prompts: no-pp-blas",
        "cmake -B build -DGGML_BLAS=ON -DGGML_BLAS_VENDOR=OpenBLAS && cmake --build build --target llama-server",
        "build/bin/llama-server -m MODEL.gguf -fa on -ngl 999 --no-op-offload -ctk f16 -ctv q8_0",
        "# serving 4 requests at once: no-pp-override",
        "llama-server -m MODEL.gguf -fa on -ngl 999 --no-op-offload -ctk f16 -ctv q8_0 -ot 'token_embd\\.weight=CPU'"]


def test_too_many_words_drop_the_brackets_first(tmp_path):
    data = exported_run(tmp_path, "split-modes-h200/export.json")
    a = check(data)
    second = a.sentences[1]  # the full phrases run past 60 words: the brackets went first
    assert "[" not in second and "(" not in second
    assert "up to 8% faster" in a.text and "up to 8% slower" in a.text  # the figures that decide stay


def test_nothing_measured_says_so(tmp_path):
    empty = rdata.RunData(run={"id": "x", "study": "s", "status": "failed", "started": "?"}, builds=[], configs=[],
                          trials=[])
    a = answer.answer(empty)
    assert a.text.startswith("No configuration finished") and a.command == "" and a.build is None
