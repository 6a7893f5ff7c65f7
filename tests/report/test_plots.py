"""Plots: matplotlib Figures and PNG / SVG bytes from a real stored run; nothing written to disk."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

import runfixtures
from llamalab.report import data as rdata
from llamalab.report import plots
from llamalab.report.plots import build_colors
from llamalab.store.db import Store


@pytest.fixture
def run(tmp_path):
    with Store(tmp_path / "r.db") as s:
        return rdata.load(s, runfixtures.fill(s))


def test_figures_for_a_real_run(run):
    figs = plots.figures(run)
    assert list(figs) == ["memory", "compute", "context", "throughput"]
    assert all(isinstance(f, Figure) for f in figs.values())


CONFIGS = ["copies4 × kv-f16-q8_0", "copies4 × kv-f16-f16", "copies1 × kv-f16-q8_0", "copies1 × kv-f16-f16"]


def test_compute_plot_has_a_bar_per_configuration_per_device_and_host(run):
    ax = plots.compute_figure(run).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == CONFIGS
    assert [t.get_text() for t in ax.get_xticklabels()] == ["RPC0", "RPC1", "host"]
    heights = [round(p.get_height(), 2) for c in ax.containers for p in c]
    # each configuration's RPC0, RPC1 and host compute: llama.cpp's own figures
    assert heights == [48.1, 48.1, 37.11, 48.04, 48.04, 37.05, 19.03, 19.03, 10.03, 20.01, 20.01, 10.01]
    colors = build_colors(run)
    faces = [c.patches[0].get_facecolor() for c in ax.containers]
    assert faces[0] == faces[1] == to_rgba(colors["copies4"]) and faces[2] == to_rgba(colors["copies1"])
    assert [c.patches[0].get_hatch() or None for c in ax.containers] == [None, "//", None, "//"]  # the setting


def test_memory_figure_stacks_model_kv_compute_and_marks_the_copies(run):
    bars = plots.memory_bars(run)
    assert [f"{r['build']} × {r['setting']}" for r in bars] == CONFIGS
    q8 = {r["build"]: r["places"] for r in bars if r["setting"] == "kv-f16-q8_0"}
    # the copies' share: copies4's compute over copies1's, on each device and the host (llama.cpp's figures)
    assert round(q8["copies4"]["RPC0"]["copies_mib"], 2) == round(48.1 - 19.03, 2)
    assert round(q8["copies4"]["host"]["copies_mib"], 2) == round(37.11 - 10.03, 2)
    assert q8["copies1"]["RPC0"]["copies_mib"] == 0.0
    fig = plots.memory_figure(run)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["RPC0", "RPC1", "host", "context (tokens)"]
    rpc0 = fig.axes[0]
    hatched = [p for p in rpc0.patches if p.get_hatch()]
    assert len(hatched) == 2  # copies4 in both settings; copies1 has no extra copies
    widths = sorted(round(p.get_width(), 2) for p in hatched)
    assert widths == sorted([round(48.1 - 19.03, 2), round(48.04 - 20.01, 2)])
    ctx = fig.axes[-1]
    assert [p.get_width() for p in ctx.patches] == [8192] * 4
    alt = plots.memory_alt(run)
    assert "copies4 × kv-f16-q8_0: compute MiB RPC0 48 (copies 29)" in alt and "8,192 tokens" in alt


def test_one_colour_per_build_in_every_figure(run):
    colors = build_colors(run)
    # the study's builds in its order (no-pp-blas was skipped: no configuration, but still its colour)
    assert list(colors) == ["copies4", "copies1", "no-pp-blas"] and len(set(colors.values())) == 3
    ctx = plots.context_figure(run).axes[0]
    assert [p.get_facecolor() for p in ctx.patches] == [to_rgba(colors[b]) for b in
                                                        ("copies4", "copies4", "copies1", "copies1")]
    thr = plots.throughput_figure(run).axes[0]
    assert [c.lines[0].get_color() for c in thr.containers] == [colors[b] for b in
                                                                ("copies4", "copies4", "copies1", "copies1")]


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
    assert sorted(out) == [f"{n}.{fmt}" for n in ("compute", "context", "memory", "throughput")]
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
