"""Plots: matplotlib Figures and PNG / SVG bytes from a real stored run; nothing written to disk."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from matplotlib.figure import Figure

import runfixtures
from llamalab.report import data as rdata
from llamalab.report import plots
from llamalab.store.db import Store


@pytest.fixture
def run(tmp_path):
    with Store(tmp_path / "r.db") as s:
        return rdata.load(s, runfixtures.fill(s))


def test_figures_for_a_real_run(run):
    figs = plots.figures(run)
    assert list(figs) == ["compute", "context", "throughput"]
    assert all(isinstance(f, Figure) for f in figs.values())


def test_compute_plot_has_a_bar_per_device_and_host_per_configuration(run):
    ax = plots.compute_figure(run).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["RPC0", "RPC1", "host"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["copies4\nkv-f16-q8_0", "copies4\nkv-f16-f16",
                                                            "copies1\nkv-f16-q8_0", "copies1\nkv-f16-f16"]
    heights = [round(p.get_height(), 2) for c in ax.containers for p in c]
    # RPC0 over the four configurations, then RPC1, then host: llama.cpp's own figures
    assert heights == [48.1, 48.04, 19.03, 20.01, 48.1, 48.04, 19.03, 20.01, 37.11, 37.05, 10.03, 10.01]


def test_context_plot(run):
    ax = plots.context_figure(run).axes[0]
    assert [p.get_height() for p in ax.patches] == [8192] * 4


def test_throughput_plot_has_interval_bars(run):
    ax = plots.throughput_figure(run).axes[0]
    assert len(ax.containers) == 4  # one errorbar container per configuration
    for c in ax.containers:
        line, caps, bars = c.lines
        (x, y), = line.get_xydata()
        segs = bars[0].get_segments()
        lo, hi = segs[0][0][1], segs[0][1][1]
        assert lo <= y <= hi and hi > lo


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_bytes(run, fmt, tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    out = plots.render(run, (fmt,))
    assert sorted(out) == [f"{n}.{fmt}" for n in ("compute", "context", "throughput")]
    for blob in out.values():
        if fmt == "png":
            assert blob.startswith(b"\x89PNG\r\n\x1a\n")
        else:
            assert ET.fromstring(blob).tag.endswith("svg")
    assert list(cwd.iterdir()) == []  # renderers return bytes, never write


def test_svg_is_reproducible(run):
    assert plots.to_bytes(plots.context_figure(run), "svg") == plots.to_bytes(plots.context_figure(run), "svg")


def test_nothing_to_draw_gives_no_figure():
    empty = rdata.RunData(run={"id": "x", "study": "s", "status": "failed", "started": "?"}, builds=[], configs=[],
                          trials=[])
    assert plots.figures(empty) == {}


def test_dollar_in_a_name_is_not_mathtext(run):
    run.configs[0]["build"] = "a$b"
    for t in run.trials:
        if t["config_id"] == run.configs[0]["id"]:
            t["build"] = "a$b"
    assert plots.to_bytes(plots.compute_figure(run), "png").startswith(b"\x89PNG")
    assert plots.to_bytes(plots.throughput_figure(run), "png").startswith(b"\x89PNG")
