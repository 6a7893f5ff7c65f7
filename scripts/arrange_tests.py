#!/usr/bin/env python3
"""Propose (and with --apply, make) a tests/ layout in which a module's tests are found by its path.

    python scripts/arrange_tests.py            # print the mapping and what must change, touch nothing
    python scripts/arrange_tests.py --apply    # git mv every test file, then rewrite what the move breaks

Each tests/test_*.py goes to the folder of the src/llamalab module it uses most: the modules it imports and how often
it names what it imported (`ledger.parse(...)`, `parse(...)` after `from llamalab.llamacpp.ledger import parse`). The
tests of src/llamalab/llamacpp/ledger.py go to tests/llamacpp/, of a base module (proc.py) or the CLI stay in
tests/, end-to-end tests (`*_e2e.py`) go to tests/e2e/, and a name that repeats its folder drops it
(tests/test_report_grid.py → tests/report/test_grid.py). OVERRIDES holds the judgement calls the count gets wrong.
Helper modules (conftest.py, runfixtures.py, …) and tests/fixtures/ stay where they are.

What the move needs, and --apply does (all in one step, after the reshape's branches have merged):
- pytest `pythonpath = ["tests"]`: the helper modules stay importable (`import runfixtures`) from any folder;
- `--import-mode=importlib`: two test files of one name in two folders do not clash (no `__init__.py` files);
- a test file that other test files import (`from test_hostile_files import ...`) moves with them, and its folder
  joins `pythonpath` (importlib mode puts no test folder on sys.path);
- `Path(__file__).parent / "fixtures"` and `Path(__file__).parent.parent` (and their spellings) in a moved file
  become `FIXTURES` and `ROOT` from tests/testpaths.py, which --apply writes (and ruff sorts the import in);
- every `tests/test_x.py` named in tracked text files (docs, comments) is renamed to its new path.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
SRC = ROOT / "src" / "llamalab"

# test file → folder under tests/ ("" for tests/ itself), where the count of imports and names gets it wrong
OVERRIDES: dict[str, str] = {
    "test_layers.py": "",  # the import graph of the whole package
    "test_code_shape.py": "",  # the shape of the whole package
    "test_docs_examples.py": "",  # the docs against the CLI
    "test_cli_docs.py": "",
    "test_ci_phases.py": "",  # scripts/ci-phases.py
    "test_plan.py": "run",  # `llamalab plan` (run/plan.py), on synthetic models
    "test_report_ledgers.py": "report",  # the reports' ledger tables
    "test_report_golden.py": "report",  # every report's bytes
    # the command line end to end, on real llama.cpp or with hostile input
    "test_bad_input_cli.py": "e2e", "test_hostile_files.py": "e2e", "test_hostile_round3.py": "e2e",
    "test_hosts_ports.py": "e2e", "test_interrupt.py": "e2e", "test_resume.py": "e2e", "test_terminal_cli.py": "e2e",
    "test_noop_override.py": "e2e",
}

TESTPATHS = '''"""Paths the tests read, the same from any folder under tests/."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
'''

# (pattern, replacement name) for the spellings of the fixture folder and the repository root in the test files
PATH_SPELLINGS = [
    (re.compile(r'(?:__import__\("pathlib"\)\.)?Path\(__file__\)(?:\.resolve\(\))?\.parent / "fixtures"'), "FIXTURES"),
    (re.compile(r'Path\(__file__\)(?:\.resolve\(\))?\.parent\.parent'), "ROOT"),
    (re.compile(r'Path\(__file__\)(?:\.resolve\(\))?\.parents\[1\]'), "ROOT"),
]


@dataclass
class TestFile:
    path: Path
    scores: Counter[str] = field(default_factory=Counter)  # src module (e.g. "llamacpp/ledger") → weight
    imports_tests: set[str] = field(default_factory=set)  # other test modules it imports (file names)
    folder: str = ""
    new_name: str = ""

    @property
    def target(self) -> Path:
        return TESTS / self.folder / self.new_name if self.folder else TESTS / self.new_name


def src_modules() -> dict[str, str]:
    """Dotted name (llamalab.llamacpp.ledger) → its path under src/llamalab without .py (llamacpp/ledger)."""
    out = {}
    for p in SRC.rglob("*.py"):
        rel = p.relative_to(SRC).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(["llamalab", *parts])] = "/".join(parts) or "__init__"
    return out


def score(path: Path, modules: dict[str, str]) -> TestFile:
    """How much a test file uses each src module: one for each import, one for each use of what it bound."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    tf = TestFile(path)
    bound: dict[str, str] = {}  # local name → src module it comes from (the module itself, or a name of it)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("test_"):
                tf.imports_tests.add(node.module + ".py")
                continue
            for a in node.names:
                full = f"{node.module}.{a.name}"
                mod = modules.get(full) or modules.get(node.module)
                if mod:
                    tf.scores[mod] += 1
                    bound[a.asname or a.name] = mod
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("test_"):
                    tf.imports_tests.add(a.name + ".py")
                elif a.name in modules and a.asname:
                    tf.scores[modules[a.name]] += 1
                    bound[a.asname] = modules[a.name]
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in bound:
            tf.scores[bound[node.id]] += 1
    return tf


def place(tf: TestFile) -> None:
    """The folder and file name the test file gets."""
    name = tf.path.name
    if name in OVERRIDES:
        tf.folder = OVERRIDES[name]
    elif name.endswith("_e2e.py"):
        tf.folder = "e2e"
    elif tf.scores:
        top = max(sorted(tf.scores), key=lambda m: tf.scores[m])
        tf.folder = top.rsplit("/", 1)[0] if "/" in top else ""
    prefix = f"test_{tf.folder}_"
    tf.new_name = "test_" + name[len(prefix):] if tf.folder and name.startswith(prefix) else name


def plan() -> list[TestFile]:
    modules = src_modules()
    files = [score(p, modules) for p in sorted(TESTS.glob("test_*.py"))]
    for tf in files:
        place(tf)
    # a test file other test files import goes where its first importer goes (they share one folder)
    by_name = {tf.path.name: tf for tf in files}
    for tf in files:
        for dep in sorted(tf.imports_tests):
            if dep in by_name:
                by_name[dep].folder = tf.folder
                by_name[dep].new_name = dep  # importers name it: keep the name
    targets = Counter(tf.target for tf in files)
    clash = sorted(str(t.relative_to(ROOT)) for t, n in targets.items() if n > 1)
    if clash:
        sys.exit(f"two test files would move to one path: {clash}; add an entry to OVERRIDES")
    return files


def shared_folders(files: list[TestFile]) -> list[str]:
    """The folders of test files that other test files import: they join pytest's pythonpath."""
    imported = {dep for tf in files for dep in tf.imports_tests}
    return sorted({f"tests/{tf.folder}" for tf in files if tf.path.name in imported and tf.folder})


def report(files: list[TestFile]) -> str:
    lines = ["# proposed layout (current → new; the src modules it uses most, by weight)", ""]
    for tf in sorted(files, key=lambda t: (t.folder, t.new_name)):
        top = ", ".join(f"{m} {n}" for m, n in tf.scores.most_common(3)) or "no src module"
        why = "override" if tf.path.name in OVERRIDES else "e2e" if tf.path.name.endswith("_e2e.py") else top
        lines.append(f"{tf.path.relative_to(ROOT)} → {tf.target.relative_to(ROOT)}  ({why})")
    per = Counter(tf.folder or "." for tf in files)
    lines += ["", "# per folder: " + ", ".join(f"tests/{k}: {v}" if k != "." else f"tests/: {v}"
                                               for k, v in sorted(per.items())), ""]
    extra = shared_folders(files)
    lines += ["# what must change for it to work (--apply does all of it)",
              f'- pyproject [tool.pytest.ini_options]: pythonpath = {["tests", *extra]!r}, addopts gains '
              '"--import-mode=importlib"',
              "- tests/testpaths.py (new): TESTS, ROOT, FIXTURES; a moved file's Path(__file__)… spellings of "
              "tests/fixtures and the repository root become FIXTURES and ROOT imported from it",
              "- test files other tests import move with their importers: "
              + (", ".join(sorted({d for tf in files for d in tf.imports_tests})) or "none"),
              "- tests/test_x.py named in tracked text files (docs, comments) → the new path",
              "- scripts/ci-phases.py groups JUnit classnames by their first two parts (tests.test_x): under "
              "importlib mode they read tests.<folder>.test_x, so its phase table then groups by folder"]
    return "\n".join(lines)


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def rewrite_paths(text: str) -> str:
    """A moved test file's spellings of tests/fixtures and the repository root as FIXTURES and ROOT, imported."""
    used = []
    for pattern, name in PATH_SPELLINGS:
        text, n = pattern.subn(name, text)
        if n:
            used.append(name)
    if not used:
        return text
    text = re.sub(r"^(FIXTURES|ROOT) = \1\n", "", text, flags=re.M)  # the module's own constant, now imported
    names = sorted(set(used))
    tree = ast.parse(text)
    # after the last top-level import (the module's docstring and `from __future__` stay first)
    last = max((n.end_lineno or n.lineno for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)),
               default=0)
    lines = text.splitlines(keepends=True)
    lines.insert(last, f"from testpaths import {', '.join(names)}\n")
    text = "".join(lines)
    still = any(isinstance(n, ast.Name) and n.id == "Path" for n in ast.walk(ast.parse(text)))
    if not still:  # `Path` was only there for those spellings
        text = re.sub(r"^from pathlib import Path\n", "", text, count=1, flags=re.M)
    return text


def apply(files: list[TestFile]) -> None:
    moved = [tf for tf in files if tf.target != tf.path]
    (TESTS / "testpaths.py").write_text(TESTPATHS, encoding="utf-8")
    git("add", "tests/testpaths.py")
    for tf in moved:
        tf.target.parent.mkdir(parents=True, exist_ok=True)
        git("mv", str(tf.path.relative_to(ROOT)), str(tf.target.relative_to(ROOT)))
    for tf in moved:
        text = tf.target.read_text(encoding="utf-8")
        new = rewrite_paths(text)
        if new != text:
            tf.target.write_text(new, encoding="utf-8")
    _sort_imports([tf.target for tf in moved])
    _pyproject(shared_folders(files))
    renames = {f"tests/{tf.path.name}": str(tf.target.relative_to(ROOT)) for tf in moved}
    _rename_mentions(renames)
    git("add", "-A", "tests", "pyproject.toml")


def _sort_imports(paths: list[Path]) -> None:
    """The inserted `from testpaths import ...` in its place in each import block (ruff's isort rule, as `make lint`
    runs it); without ruff at hand, `ruff check --select I --fix tests` does it later."""
    ruff = Path(sys.executable).with_name("ruff")
    exe = str(ruff) if ruff.is_file() else shutil.which("ruff")
    if exe is None:
        print("ruff not found: run `ruff check --select I --fix tests` to sort the imports --apply added")
        return
    subprocess.run([exe, "check", "--quiet", "--select", "I", "--fix", *map(str, paths)], cwd=ROOT, check=False)


def _pyproject(extra: list[str]) -> None:
    p = ROOT / "pyproject.toml"
    text = p.read_text(encoding="utf-8")
    paths = ", ".join(f'"{x}"' for x in ["tests", *extra])
    text, n = re.subn(r'^testpaths = \["tests"\]\n', f'testpaths = ["tests"]\npythonpath = [{paths}]\n', text,
                      count=1, flags=re.M)
    text, m = re.subn(r'^addopts = "(.*)"$', r'addopts = "\1 --import-mode=importlib"', text, count=1, flags=re.M)
    if not (n and m):
        sys.exit("pyproject.toml: no `testpaths = [\"tests\"]` or `addopts = \"...\"` line to extend")
    p.write_text(text, encoding="utf-8")


def _rename_mentions(renames: dict[str, str]) -> None:
    """`tests/test_x.py` in tracked text files → its new path (longest names first: test_ledger_fuzz before
    test_ledger)."""
    pattern = re.compile("|".join(re.escape(k) for k in sorted(renames, key=len, reverse=True)) + r"(?![a-z0-9_])")
    for rel in git("ls-files").splitlines():
        p = ROOT / rel
        if not p.is_file() or p.suffix not in (".py", ".md", ".toml", ".txt", "") or rel.startswith("tests/fixtures/"):
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        new = pattern.sub(lambda m: renames[m.group(0)], text)
        if new != text:
            p.write_text(new, encoding="utf-8")
            git("add", rel)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--apply", action="store_true", help="git mv the files and rewrite what the move breaks")
    args = ap.parse_args()
    files = plan()
    print(report(files))
    if args.apply:
        apply(files)
        print(f"\nmoved {sum(tf.target != tf.path for tf in files)} test files; check with: pytest --co -q")
    return 0


if __name__ == "__main__":
    sys.exit(main())
