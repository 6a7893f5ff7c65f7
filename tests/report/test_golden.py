"""Every report of the committed benchmark exports and the test fixtures' runs renders the same bytes as when
`tests/fixtures/report-golden.json` was written (`python tests/reportgolden.py --hashes`). A change to the report
code that is meant to show rewrites the file in the same commit; `--write DIR` on both checkouts shows the diff."""

from __future__ import annotations

import hashlib
import json

import pytest

import reportgolden

GOLDEN = json.loads(reportgolden.GOLDEN.read_text(encoding="utf-8"))


def test_every_export_is_held():
    assert sorted(GOLDEN) == sorted(reportgolden.name_of(p) for p in reportgolden.exports())


def _marked(export):
    """The demo fixture in the fast suite, every other export (about 4 s each) in `make test`'s slow end."""
    fast = reportgolden.name_of(export) == "tests/fixtures/runs/demo-cpu-rpc"
    return pytest.param(export, id=reportgolden.name_of(export), marks=() if fast else pytest.mark.slow)


@pytest.mark.parametrize("export", [_marked(e) for e in reportgolden.exports()])
def test_renders_byte_identical(export):
    want = GOLDEN[reportgolden.name_of(export)]
    got = {f: hashlib.sha256(b).hexdigest() for f, b in reportgolden.renders(export)}
    assert sorted(got) == sorted(want), "the report's files changed"
    changed = sorted(f for f in got if got[f] != want[f])
    assert not changed, (f"{changed} of {reportgolden.name_of(export)} render differently; "
                         "`python tests/reportgolden.py --write DIR` here and on the last commit shows how")
