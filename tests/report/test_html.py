"""The HTML report: one self-contained file, everything escaped, built from a real stored run."""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

import runfixtures
from llamalab.report import data as rdata
from llamalab.report import html
from llamalab.store.db import Store


@pytest.fixture(scope="module")  # a page is a str: rendered once for the tests that read it
def page(tmp_path_factory):
    with Store(tmp_path_factory.mktemp("page") / "r.db") as s:
        d = rdata.load(s, runfixtures.fill(s))
    return html.render(d)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    with Store(tmp_path_factory.mktemp("hostile") / "h.db") as s:
        d = rdata.load(s, runfixtures.fill(s, document=runfixtures.hostile_doc()))
    return html.render(d)


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def tags(page: str) -> list[tuple[str, dict]]:
    p = Tags()
    p.feed(page)
    return p.tags


def test_page_is_self_contained(page):
    found = tags(page)
    assert not [t for t, _ in found if t in ("script", "link", "iframe", "object", "embed", "base")]
    for tag, attrs in found:
        for k in ("src", "href"):
            if k in attrs:
                assert attrs[k].startswith("data:"), (tag, attrs[k][:60])
    assert not re.search(r"https?://", page.replace("http-equiv", ""))
    csp = next(a["content"] for t, a in found if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in csp and "img-src data:" in csp and "script-src" not in csp


def test_page_has_summary_table_plots_and_verdict(page):
    found = tags(page)
    imgs = [a for t, a in found if t == "img"]
    assert [a["id"] for a in imgs] == ["plot-memory", "plot-compute", "plot-context", "plot-throughput"]
    for a in imgs:  # SVG, each with its alt text
        assert a["src"].startswith("data:image/svg+xml;base64,") and a["alt"]
        blob = base64.b64decode(a["src"].split(",", 1)[1])
        assert ET.fromstring(blob).tag.endswith("svg") and len(blob) > 5000
    assert imgs[0]["alt"].startswith("Memory per device") and "copies4 × kv-f16-q8_0: compute MiB RPC0 48" in \
        imgs[0]["alt"]
    assert "<dt>CPU</dt><dd>AMD EPYC, 2 cores, 24,105 MiB RAM</dd>" in page
    assert '<td data-label="Compute RPC0 (MiB)">48.10</td>' in page
    assert '<td class="t" data-label="Build">copies4</td>' in page
    assert "<h2>Verdict</h2>" in page and "compute buffers RPC0 -29.07 MiB" in page
    assert "no measurable difference" in page
    assert "<h2>Builds</h2>" in page and "Pipeline parallelism, 4 sched copies" in page


@pytest.mark.parametrize("raw", [
    pytest.param(runfixtures.SCRIPT, id="script"),
    pytest.param(runfixtures.IMG, id="img-onerror"),
    pytest.param(runfixtures.SVG, id="svg-onload"),
])
def test_markup_from_logs_study_and_machine_is_escaped(hostile, raw):
    assert raw not in hostile
    assert html.esc(raw) in hostile


def test_hostile_page_has_no_injected_elements(hostile):
    found = tags(hostile)
    assert not [t for t, _ in found if t in ("script", "svg")]
    assert [a.get("id") for t, a in found if t == "img"] == ["plot-memory", "plot-compute", "plot-context",
                                                             "plot-throughput"]
    assert not [a for _, a in found if any(k.startswith("on") for k in a)]
    # the build label from the study file, the failed configuration and the skipped build are all shown, as text
    assert f'<td class="t" data-label="Label">{html.esc(runfixtures.SCRIPT + runfixtures.IMG)}</td>' in hostile
    assert "copies4 × kv-f16-q8_0: failed — llama-server said: &lt;img src=x" in hostile
    assert "build no-pp-blas: skipped — cmake said: &lt;script&gt;" in hostile


def test_render_takes_given_images(tmp_path):
    with Store(tmp_path / "r.db") as s:
        d = rdata.load(s, runfixtures.fill(s))
    page = html.render(d, images={})
    assert "<img" not in page and "<h2>Plots</h2>" not in page
