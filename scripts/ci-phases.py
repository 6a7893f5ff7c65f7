#!/usr/bin/env python3
"""The phase table of a CI run or a `make test`: where the time went.

    python3 scripts/ci-phases.py [--phases FILE] [--junit FILE ...] [--home DIR] [--bisect-root DIR]

--phases: `name seconds` lines that .ci/run writes (apt, the Vulkan toolchain, make test); --junit: pytest's
JUnit XML, one file per pass of `make test` (each pass's wall time, and test time by module summed over the passes
and their workers, with the CPU seconds tests/conftest.py records for each test: two busy workers inflate the wall
time, not the CPU); --home: the build cache (default $LLAMALAB_HOME or ~/.cache/llamalab), whose trees each
recorded their compile time and ccache counts in llamalab-build.json; --bisect-root: where the bisect tests' own
homes were (pytest's basetemp), for their per-commit ccache counts; --since: trees whose marker is older show as
reused. Prints Markdown; reads only files.
"""
from __future__ import annotations

import argparse
import json
import os
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def _hits(c: dict | None) -> str:
    if not c:
        return "—"
    total = c.get("hits", 0) + c.get("misses", 0)
    return f"{c.get('hits', 0)} / {total} ({100 * c.get('hits', 0) / total:.0f}%)" if total else "0 / 0"


def trees(home: Path, since: float = 0.0) -> list[tuple[str, str, str, str]]:
    """Each tree under home/builds: (folder, compile seconds or "reused" where it was built before `since`,
    targets, ccache hits)."""
    rows = []
    for marker in sorted((home / "builds").rglob("llamalab-build.json")):
        try:
            d = json.loads(marker.read_text())
        except (OSError, ValueError):
            continue
        rel = marker.parent.relative_to(home / "builds")
        built = marker.stat().st_mtime >= since
        rows.append((str(rel), f"{float(d.get('seconds', 0)):.0f}" if built else "reused",
                     ",".join(d.get("targets", [])), _hits(d.get("ccache")) if built else "—"))
    return rows


def bisects(root: Path) -> list[tuple[str, str]]:
    rows = []
    for p in sorted(root.rglob("ccache-*.json"), key=lambda p: p.stat().st_mtime):  # in the order built
        # the test's own folder under pytest's basetemp (pytest-N/[popen-gwK/]test_x0/...)
        test = next((part for part in p.relative_to(root).parts if part.startswith("test")), "")
        rows.append((f"{test} commit {p.stem.removeprefix('ccache-')}", _hits(json.loads(p.read_text()))))
    return rows


def _cpu(case: ET.Element) -> tuple[float, float]:
    """A test's CPU seconds as tests/conftest.py records them: (the pytest process, the processes it reaped)."""
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    return float(props.get("cpu_s") or 0), float(props.get("child_cpu_s") or 0)


def modules(roots: list[ET.Element]) -> list[tuple[str, float, int, float, float]]:
    """Each test module: (name, seconds summed over the workers, tests, CPU seconds of the pytest process, of the
    processes its tests started), the slowest first."""
    by: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0.0, 0.0])  # seconds, tests, CPU: pytest, children
    for root in roots:
        for case in root.iter("testcase"):
            # tests.report.test_grid[.TestClass] → tests.report.test_grid: the module, however deep its folder
            mod = (case.get("classname") or "?").split(".")
            i = next((i for i, part in enumerate(mod) if part.startswith("test_")), 0)
            row = by[".".join(mod[: i + 1]) if mod[0] == "tests" else mod[0]]
            me, children = _cpu(case)
            row[0] += float(case.get("time") or 0)
            row[1] += 1
            row[2] += me
            row[3] += children
    return sorted(((m, sec, int(n), me, children) for m, (sec, n, me, children) in by.items()), key=lambda r: -r[1])


def passes(junits: dict[str, ET.Element]) -> list[tuple[str, float, int]]:
    """Each JUnit file's pass (by file stem): (stem, wall seconds pytest recorded, tests)."""
    rows = []
    for stem, root in junits.items():
        suites = list(root.iter("testsuite"))
        rows.append((stem, sum(float(s.get("time") or 0) for s in suites),
                     sum(int(s.get("tests") or 0) for s in suites)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phases", type=Path)
    ap.add_argument("--junit", type=Path, nargs="+", default=[])
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("LLAMALAB_HOME") or
                                                      Path.home() / ".cache" / "llamalab"))
    ap.add_argument("--bisect-root", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--since", type=float, default=0.0, help="epoch seconds: trees built before it show as reused")
    a = ap.parse_args()
    if a.phases and a.phases.exists():
        print("| Phase | Seconds |\n|---|---|")
        for line in a.phases.read_text().splitlines():
            name, _, sec = line.rpartition(" ")
            print(f"| {name} | {sec} |")
        print()
    print("| llama.cpp tree (under builds/) | Compile s | Targets | ccache hits |\n|---|---|---|---|")
    for rel, sec, targets, hits in trees(a.home, a.since):
        print(f"| {rel} | {sec} | {targets} | {hits} |")
    if a.bisect_root and a.bisect_root.exists():
        for rel, hits in bisects(a.bisect_root):
            print(f"| bisect: {rel} | — | — | {hits} |")
    print()
    junits = {j.stem: ET.parse(j).getroot() for j in a.junit if j.exists()}  # each file read once
    if junits:
        print("| `make test` pass | Wall s | Tests |\n|---|---|---|")
        for stem, sec, n in passes(junits):
            print(f"| {stem} | {sec:.0f} | {n} |")
        print()
        rows = modules(list(junits.values()))
        print("| Test module | Seconds (summed over workers) | CPU s: pytest + what it started | Tests |\n"
              "|---|---|---|---|")

        def line(name: str, part: list, bold: str = "") -> None:
            sec, n, me, children = (sum(r[k] for r in part) for k in (1, 2, 3, 4))
            print(f"| {name} | {bold}{sec:.0f}{bold} | {bold}{me:.0f} + {children:.0f}{bold} | {bold}{n}{bold} |")

        for row in rows[:a.top]:
            line(row[0], [row])
        rest = rows[a.top:]
        if rest:
            line(f"({len(rest)} more modules)", rest)
        line("**all**", rows, "**")


if __name__ == "__main__":
    main()
