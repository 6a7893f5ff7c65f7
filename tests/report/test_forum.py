"""`llamalab report --format forum`: the summary a person pastes into a forum thread, under 40 lines — the original
study's table, the decision table, three lines of verdict, the command and the versions. The H200 study's summary in
benchmarks/h200/README.md is this command's output."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import runfixtures
from llamalab.cli import cli
from llamalab.report import data as rdata
from llamalab.report import formats, forum
from llamalab.store.db import Store
from testpaths import ROOT


def forum_of(tmp_path, export: str) -> str:
    db = tmp_path / "r.db"
    done = CliRunner().invoke(cli, ["import", str(ROOT / "benchmarks" / export), "--db", str(db)])
    assert done.exit_code == 0, done.output
    out = tmp_path / "forum.md"
    done = CliRunner().invoke(cli, ["report", "--db", str(db), "--format", "forum", "-o", str(out)])
    assert done.exit_code == 0, done.output
    return out.read_text(encoding="utf-8")


def test_h200_forum_summary(tmp_path):
    text = forum_of(tmp_path, "h200/export.json")
    lines = text.splitlines()
    assert len(lines) < forum.LINES
    assert lines[0].startswith("**pipeline-parallel-h200** on NVIDIA H200")
    assert "| Build | Setting | Compute CUDA0 (MiB) | Compute CUDA1 (MiB) | Compute host (MiB) | Context (tokens) | " \
           "Copies | Outputs vs baseline |" in lines
    assert "| copies4 | kv-f16-q8_0 | 630.10 | 630.10 | 412.11 | 95,232 | 4 | baseline |" in lines
    assert "| Use | Run | Buys | Costs | Outputs vs baseline |" in lines
    verdicts = [x for x in lines if x.startswith(("- Memory:", "- Speed:", "- Do:"))]
    assert len(verdicts) == 3
    assert "- Memory: copies1 vs copies4 (kv-f16-q8_0): compute CUDA0 -294, CUDA1 -294 MiB; context +5,888 tokens." \
        in lines
    assert ("llama-server -m MODEL.gguf -fa on -ngl 999 --no-op-offload -ctk f16 -ctv q8_0 "
            "-ot no_such_tensor=CPU") in lines
    assert "llamalab 0.1.0, llama.cpp b11312" in lines[-1]
    # the committed summary, and the README's copy of it, are this command's output
    assert (ROOT / "benchmarks" / "h200" / "forum.md").read_text(encoding="utf-8") == text
    assert text in (ROOT / "benchmarks" / "h200" / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("export", ["vulkan-h200/export.json", "split-modes-h200/export.json",
                                    "tune-h200/export-8b-race.json", "tune-h200/export-moe-exhaustive.json"])
def test_every_benchmark_fits_a_forum_post(tmp_path, export):
    text = forum_of(tmp_path, export)
    assert len(text.splitlines()) < forum.LINES
    assert "```\n" in text and "`llamalab report --format forum`" in text


@pytest.mark.parametrize("name", [runfixtures.DEMO, runfixtures.GRID, runfixtures.TUNE, runfixtures.VERSIONS])
def test_fixture_runs_fit_a_forum_post(tmp_path, name):
    with Store(tmp_path / "r.db") as s:
        data = rdata.load(s, runfixtures.fill(s, name))
    text = formats.render(data, "forum")
    assert len(text.splitlines()) < forum.LINES and "\x1b" not in text


def test_forum_is_a_registered_format():
    assert "forum" in formats.FORMATS and formats.get("forum").suffix == ".md"
    assert "forum: a summary to paste into a forum thread" in formats.help_text()
