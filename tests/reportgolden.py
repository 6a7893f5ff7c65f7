"""Every report llamalab renders from the runs it keeps as files: the committed benchmark exports
(`benchmarks/*/export*.json`) and the test fixtures' runs (`tests/fixtures/runs`, `tests/fixtures/split-modes`), in
every format (`report.formats.FORMATS`, CSV's companion file included) and every plot. `tests/report/test_golden.py`
holds each file's sha256 to `tests/fixtures/report-golden.json`, so a change inside the report code that moves one
byte of what a user reads is seen.

    python tests/reportgolden.py --hashes            # rewrite report-golden.json (after a change meant to show)
    python tests/reportgolden.py --write DIR         # every rendered file under DIR, to diff two checkouts
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPORTED = re.compile(r'("imported": )"[^"]*"')
GOLDEN = ROOT / "tests" / "fixtures" / "report-golden.json"


def exports() -> list[Path]:
    found = sorted(ROOT.glob("benchmarks/*/export*.json"))
    found += sorted((ROOT / "tests" / "fixtures" / "runs").glob("*.json"))
    found += sorted((ROOT / "tests" / "fixtures" / "split-modes").glob("*.json"))
    return found


def name_of(path: Path) -> str:
    return path.relative_to(ROOT).with_suffix("").as_posix()


def renders(path: Path) -> Iterator[tuple[str, bytes]]:
    """(file name, bytes) of every report file of one export: report.<fmt> for each format, the CSV companion, and
    each plot."""
    from llamalab.report import data as rdata
    from llamalab.report import formats
    from llamalab.store import exchange
    from llamalab.store.db import Store

    doc = exchange.loads(path.read_text(encoding="utf-8"), str(path))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with Store(folder / "golden.db") as store:
            rid = exchange.import_run(store, doc).run_id
            data = rdata.load(store, rid, requests=False)
            for fmt in formats.FORMATS:
                out = folder / f"report.{fmt}"
                for target, pieces in formats.files(data, fmt, out).items():
                    yield target.name, _unstamped("".join(pieces)).encode("utf-8")
            for target, blob in sorted(formats.plot_files(data, folder).items()):
                yield target.name.replace(rid, "run"), blob


def _unstamped(text: str) -> str:
    """The text without the one figure of this import rather than of the run: when it was imported."""
    return IMPORTED.sub(r'\1"<import time>"', text)


def hashes() -> dict[str, dict[str, str]]:
    return {name_of(p): {f: hashlib.sha256(b).hexdigest() for f, b in renders(p)} for p in exports()}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--hashes"]:
        GOLDEN.write_text(json.dumps(hashes(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {GOLDEN}")
        return 0
    if argv[:1] == ["--write"] and len(argv) == 2:
        for p in exports():
            for f, blob in renders(p):
                target = Path(argv[1]) / name_of(p) / f
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(blob)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
