"""The committed benchmark reports as a reader sees them: each export rendered by this code (`llamalab import`, then
the HTML report), shown in headless Chromium at 1400×900 (a laptop) and 390×844 (a phone), and measured from its
DOM: the answer, the memory figure and the decision table start on the first screen at 1400×900; no element's right
edge is past the viewport and the page never scrolls sideways at either width — with every fold closed and with
every fold open; every image has alt text and every inline SVG a title.

All `slow` (about 20 s each; `make test` runs them), as is test_html_browser.py, which renders a fixture run's page
(3-4 s a browser start).
Skipped only where Chromium is absent (CI installs it).
"""

from __future__ import annotations

import html as htmlmod
import json
import re

import pytest
from click.testing import CliRunner

from browser import CHROMIUM, chromium
from llamalab.cli import cli
from llamalab.report import data as rdata
from llamalab.report import html
from llamalab.store.db import Store
from testpaths import ROOT

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed here (Debian: apt-get install "
                                "chromium); CI installs it in .ci/run, so this test runs there")

SIZES = ((1400, 900), (390, 844))
REPORTS = [pytest.param("h200/export.json", id="h200", marks=pytest.mark.slow),
           pytest.param("vulkan-h200/export.json", id="vulkan", marks=pytest.mark.slow),
           pytest.param("split-modes-h200/export.json", id="split-modes", marks=pytest.mark.slow),
           pytest.param("tune-h200/export-8b-race.json", id="tune-8b-race", marks=pytest.mark.slow),
           pytest.param("tune-h200/export-moe-race.json", id="tune-moe-race", marks=pytest.mark.slow)]

# The report forbids scripts (its CSP), so a harness page measures it: the report in a srcdoc iframe of the
# viewport's size (the report's own CSP still applies inside it), read from outside.
HARNESS = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>harness</title></head><body style="margin:0">
<pre id="result">pending</pre>
<iframe id="report" style="border:0;width:{w}px;height:{h}px" srcdoc="{srcdoc}"></iframe>
<script>
const frame = document.getElementById('report');
function past(d) {{
  const w = d.documentElement.clientWidth;
  return Array.from(d.body.querySelectorAll('*')).filter(e => e.getClientRects().length)
    .map(e => [e, e.getBoundingClientRect()]).filter(([e, r]) => r.right > w + 0.5)
    .map(([e, r]) => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className + ' right ' + Math.round(r.right));
}}
frame.addEventListener('load', () => {{
  const d = frame.contentDocument;
  const top = id => {{ const e = d.getElementById(id); return e ? e.getBoundingClientRect().top : null; }};
  const closed = past(d);
  const wide = [d.documentElement.scrollWidth, d.documentElement.clientWidth];
  d.querySelectorAll('details').forEach(x => x.open = true);
  document.getElementById('result').textContent = JSON.stringify({{
    answer: top('answer'), memory: top('plot-memory'), decision: top('decision'),
    past_closed: closed.slice(0, 20), past_open: past(d).slice(0, 20),
    scroll_closed: wide, scroll_open: [d.documentElement.scrollWidth, d.documentElement.clientWidth],
    folds: d.querySelectorAll('details').length,
    no_alt: Array.from(d.images).filter(i => !i.alt.trim()).map(i => i.id),
    svg_no_title: Array.from(d.querySelectorAll('svg')).filter(s => !s.querySelector('title')).length,
    images: Array.from(d.images).map(i => [i.id, i.complete && i.naturalWidth > 0]),
  }});
}});
</script></body></html>"""


def render(tmp_path, export: str) -> str:
    db = tmp_path / "results.db"
    done = CliRunner().invoke(cli, ["import", str(ROOT / "benchmarks" / export), "--db", str(db)])
    assert done.exit_code == 0, done.output[-2000:]
    with Store(db) as s:
        return html.render(rdata.load(s))


def measure(tmp_path, page: str, width: int, height: int) -> dict:
    harness = tmp_path / f"harness-{width}.html"
    harness.write_text(HARNESS.format(w=width, h=height, srcdoc=htmlmod.escape(page, quote=True)), encoding="utf-8")
    out = chromium(tmp_path, f"--window-size={width + 20},{height + 200}", "--virtual-time-budget=15000",
                   "--dump-dom", harness.as_uri())
    m = re.search(r'<pre id="result">(.*?)</pre>', out, re.S)
    assert m and m.group(1) != "pending", "the report frame never finished loading"
    return json.loads(htmlmod.unescape(m.group(1)))


@pytest.mark.parametrize("export", REPORTS)
def test_report_reads_in_order_and_fits_every_width(tmp_path, export):
    page = render(tmp_path, export)
    for width, height in SIZES:
        got = measure(tmp_path, page, width, height)
        where = f"{export} at {width}×{height}"
        assert got["past_closed"] == [] and got["past_open"] == [], (where, got["past_closed"], got["past_open"])
        assert got["scroll_closed"][0] <= got["scroll_closed"][1], where  # no sideways scroll of the page
        assert got["scroll_open"][0] <= got["scroll_open"][1], where
        assert got["no_alt"] == [] and got["svg_no_title"] == 0, where
        assert got["images"] and all(ok for _, ok in got["images"]), (where, got["images"])
        assert got["folds"] >= 2, where  # the detail tables are folded away
        if width == 1400:  # the first screen: the answer, the memory picture, the decision table, in that order
            assert None not in (got["answer"], got["memory"], got["decision"]), (where, got)
            assert got["answer"] < got["memory"] < got["decision"] < height, (where, got)
