"""The HTML report in a real browser: Debian's Chromium, headless. The page is built from a real stored run and
written the way `llamalab report --format html -o FILE` writes it; Chromium loads it from disk, and the test checks
the DOM it built (the tables, the images decoded at their real size, no script) and keeps a screenshot under
test-artifacts/ (LLAMALAB_TEST_ARTIFACTS overrides the folder).

Only when Chromium is absent is this skipped; CI installs it (`apt-get install chromium`, in .ci/run).
"""

from __future__ import annotations

import html as htmlmod
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

import runfixtures
from browser import CHROMIUM, argv, chromium
from llamalab.core.write import atomic_write
from llamalab.report import data as rdata
from llamalab.report import html
from llamalab.report.plots import COLORS
from llamalab.store.db import Store
from testpaths import ROOT

# `slow`: a Chromium start and render is 3-4 s a test, the fast suite's longest; `make test` runs both
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed here (Debian: apt-get install "
                                 "chromium); CI installs it in .ci/run, so this test runs there")]

ARTIFACTS = Path(os.environ.get("LLAMALAB_TEST_ARTIFACTS") or ROOT / "test-artifacts")
PLOTS = ["plot-memory", "plot-compute", "plot-context", "plot-throughput"]
# a run with parallel levels also maps pipeline parallelism's gain, drawn in its own section after the decision table
GRID_PLOTS = ["plot-memory", "plot-pp_gain", *PLOTS[1:]]
WIDTH = 1280


def write_report(tmp_path: Path, document: dict | None = None, name: str = runfixtures.CONCURRENCY) -> Path:
    with Store(tmp_path / "results.db") as s:
        data = rdata.load(s, runfixtures.fill(s, name, document=document))
    return atomic_write(tmp_path / "report.html", html.render(data))


class Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_title = tag == "title"

    def handle_data(self, data):
        if self._in_title:
            self.title += data

    def handle_endtag(self, tag):
        self._in_title = False


def dump_dom(tmp_path: Path, page: Path) -> Dom:
    dom = Dom()
    dom.feed(chromium(tmp_path, "--dump-dom", page.as_uri()))
    return dom


# The report forbids scripts (its CSP), so a small harness page measures it instead: it shows the report in a
# srcdoc iframe (same origin as the harness, the report's own CSP still applies inside) and reads the iframe's DOM.
HARNESS = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>harness</title></head><body>
<pre id="result">pending</pre>
<iframe id="report" style="width:1280px;height:900px" srcdoc="{srcdoc}"></iframe>
<script>
const frame = document.getElementById('report');
frame.addEventListener('load', () => {{
  const d = frame.contentDocument;
  document.getElementById('result').textContent = JSON.stringify({{
    title: d.title,
    tables: Array.from(d.querySelectorAll('table')).map(t => t.rows.length),
    scripts: d.querySelectorAll('script').length,
    images: Array.from(d.images).map(i => ({{id: i.id, complete: i.complete, w: i.naturalWidth, h: i.naturalHeight}})),
    height: d.documentElement.scrollHeight,
  }});
}});
</script></body></html>"""


def measure(tmp_path: Path, page: Path) -> dict:
    harness = tmp_path / "harness.html"
    harness.write_text(HARNESS.format(srcdoc=htmlmod.escape(page.read_text(), quote=True)), encoding="utf-8")
    out = chromium(tmp_path, "--virtual-time-budget=10000", "--dump-dom", harness.as_uri())
    m = re.search(r'<pre id="result">(.*?)</pre>', out, re.S)
    assert m, out[-2000:]
    assert m.group(1) != "pending", "the report frame never finished loading"
    return json.loads(htmlmod.unescape(m.group(1)))


def png_size(blob: bytes) -> tuple[int, int]:
    assert blob[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", blob[16:24])


def embedded_svgs(page: str) -> dict[str, bytes]:
    import base64

    return {m.group(1): base64.b64decode(m.group(2))
            for m in re.finditer(r'<img id="([^"]+)" src="data:image/svg\+xml;base64,([^"]+)"', page)}


def svg_size(blob: bytes) -> tuple[int, int]:
    """The CSS pixels an SVG's width and height (matplotlib writes them in pt: 1 pt = 4/3 px) come to."""
    m = re.search(rb'<svg[^>]*\swidth="([\d.]+)pt"[^>]*\sheight="([\d.]+)pt"', blob)
    assert m, blob[:300]
    return round(float(m.group(1)) * 4 / 3), round(float(m.group(2)) * 4 / 3)


def test_report_renders_in_chromium(tmp_path):
    page = write_report(tmp_path)
    text = page.read_text()

    dom = dump_dom(tmp_path, page)
    names = [t for t, _ in dom.tags]
    assert "table" in names and names.count("tr") >= 19 + 19  # results (18 rows + head) and throughput tables
    assert not [t for t in names if t == "script"]
    imgs = [a for t, a in dom.tags if t == "img"]
    assert [a["id"] for a in imgs] == GRID_PLOTS
    assert all(a["src"].startswith("data:image/svg+xml;base64,") and a["alt"] for a in imgs)
    assert dom.title.startswith("llamalab: demo — run ")

    got = measure(tmp_path, page)
    assert got["scripts"] == 0 and got["title"] == dom.title
    # the decision tables (one per setting: header + 3 uses) come first; the trials (header + 3 builds × 2 settings
    # × 3 trials) are further down, folded
    assert got["tables"][:2] == [1 + 3, 1 + 3] and 1 + 18 in got["tables"][2:]
    expected = {k: svg_size(v) for k, v in embedded_svgs(text).items()}
    assert [i["id"] for i in got["images"]] == GRID_PLOTS
    for img in got["images"]:  # decoded by the browser, at the size the SVG says
        w, h = expected[img["id"]]
        assert img["complete"] and abs(img["w"] - w) <= 1 and abs(img["h"] - h) <= 1, (img, w, h)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "html-report.png"
    shot.unlink(missing_ok=True)
    height = min(max(int(got["height"]) + 40, 1200), 16000)
    shot_args = (f"--window-size={WIDTH},{height}", f"--screenshot={shot}", page.as_uri())
    chromium(tmp_path, *shot_args)
    shutil.copyfile(page, ARTIFACTS / "html-report.html")
    (ARTIFACTS / "html-report.command.txt").write_text(shlex.join(argv(tmp_path, *shot_args)) + "\n")
    blob = shot.read_bytes()
    assert png_size(blob) == (WIDTH, height)
    assert len(blob) > 100_000

    from PIL import Image

    with Image.open(shot) as im:
        rgb = im.convert("RGB")
        counts = {c: 0 for c in COLORS[:2]}
        for pixel, n in ((p, n) for n, p in rgb.getcolors(maxcolors=1 << 24)):
            for c in counts:
                want = tuple(int(c[i:i + 2], 16) for i in (1, 3, 5))
                if all(abs(a - b) <= 6 for a, b in zip(pixel, want)):
                    counts[c] += n
    # the bars of the compute plot, in its first two colours, are on the page: the images were painted
    assert all(n > 2000 for n in counts.values()), counts


def test_hostile_text_does_not_inject_in_chromium(tmp_path):
    page = write_report(tmp_path, runfixtures.hostile_doc(), name=runfixtures.DEMO)
    dom = dump_dom(tmp_path, page)
    assert not [t for t, _ in dom.tags if t in ("script", "svg")]
    assert [a.get("id") for t, a in dom.tags if t == "img"] == PLOTS
    assert not [a for _, a in dom.tags if any(k.startswith("on") for k in a)]
    assert "pwned" not in dom.title
    got = measure(tmp_path, page)
    assert got["scripts"] == 0 and "pwned" not in got["title"]
    assert [i["id"] for i in got["images"]] == PLOTS
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "html-report-hostile.png"
    chromium(tmp_path, f"--window-size={WIDTH},2400", f"--screenshot={shot}", page.as_uri())
    assert png_size(shot.read_bytes()) == (WIDTH, 2400)
