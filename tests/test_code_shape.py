"""The shape the code keeps, read from src/llamalab with `ast` (no import, no I/O beyond reading the files).

- No function or method is longer than MAX_LINES lines, from its `def` line to its last line. A long function is
  split into named steps; the few that stay long are in LONG_ALLOWED, each with its reason.
- No module uses another module's private (`_name`) names: not by `from x import _y`, not as `x._y` on a module it
  imported, and not as `obj._y` on an object of another module's class (an attribute `_y` this module never defines
  but another llamalab module does). A name another module needs is public: rename it, or move the code.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "src" / "llamalab"
MAX_LINES = 60

# path::qualified name → why it stays long
LONG_ALLOWED = {
    "store/migrations.py::m0001_initial": "a frozen schema migration: the tables as the first release made them, one "
                                          "statement each; it is never edited, so never split",
}


@dataclass(frozen=True)
class Module:
    path: str  # under src/llamalab, e.g. "report/analysis/grid.py"
    name: str  # dotted, e.g. "llamalab.report.analysis.grid"
    tree: ast.Module


@functools.cache
def modules() -> list[Module]:
    """Every module of the package, parsed once a worker, when a test first asks (not at collection)."""
    out = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG.parent)
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append(Module(str(p.relative_to(PKG)), ".".join(parts), ast.parse(p.read_text(encoding="utf-8"))))
    return out



@functools.cache
def by_name() -> dict[str, Module]:
    return {m.name: m for m in modules()}


# ---------------------------------------------------------------- function length

def functions(node: ast.AST, prefix: str = "") -> list[tuple[str, int]]:
    """(qualified name, lines from the def line to the last) of every function and method under `node`."""
    out = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            assert child.end_lineno is not None
            out.append((prefix + child.name, child.end_lineno - child.lineno + 1))
            out += functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            out += functions(child, f"{prefix}{child.name}.")
        else:
            out += functions(child, prefix)
    return out


def long_functions() -> dict[str, int]:
    return {f"{m.path}::{name}": n for m in modules() for name, n in functions(m.tree) if n > MAX_LINES}


def test_no_function_is_longer_than_the_limit():
    found = long_functions()
    over = {k: n for k, n in found.items() if k not in LONG_ALLOWED}
    assert not over, (f"functions longer than {MAX_LINES} lines (split them into named steps): "
                      + ", ".join(f"{k} ({n})" for k, n in sorted(over.items())))
    stale = sorted(LONG_ALLOWED.keys() - found.keys())
    assert not stale, f"no longer long (delete them from LONG_ALLOWED): {stale}"


def test_the_length_reader_counts_from_def_to_last_line():
    tree = ast.parse("class A:\n    def m(self):\n        x = 1\n\n        return x\n\n\ndef f():\n    def g():\n"
                     "        pass\n    return g\n")
    assert functions(tree) == [("A.m", 4), ("f", 4), ("f.g", 2)]


# ---------------------------------------------------------------- private names

def _package(m: Module) -> list[str]:
    parts = m.name.split(".")
    return parts if m.path.endswith("__init__.py") else parts[:-1]


def _absolute(m: Module, node: ast.ImportFrom) -> str:
    """The module an ImportFrom reads from, absolute."""
    if node.level == 0:
        return node.module or ""
    base = _package(m)[: len(_package(m)) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined(tree: ast.AST) -> set[str]:
    """Every name a module defines: functions, classes, assigned names and attributes (`self._x = …`)."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(n.name)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            out.add(n.attr)
    return out


@functools.cache
def defined() -> dict[str, set[str]]:
    return {m.name: _defined(m.tree) for m in modules()}


def private_uses(m: Module) -> set[str]:
    """`path: owner._name` for each private name of another llamalab module that `m` uses."""
    out = set()
    modules: dict[str, str] = {}  # local name → the llamalab module it is bound to
    for n in ast.walk(m.tree):
        if isinstance(n, ast.ImportFrom):
            source = _absolute(m, n)
            for a in n.names:
                if f"{source}.{a.name}" in by_name():
                    modules[a.asname or a.name] = f"{source}.{a.name}"
                elif _private(a.name) and source in by_name() and source != m.name:
                    out.add(f"{m.path}: {source.rsplit('.', 1)[-1]}.{a.name}")
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.asname and a.name in by_name():
                    modules[a.asname] = a.name
    mine = _defined(m.tree)
    elsewhere = set().union(*(names for name, names in defined().items() if name != m.name))
    for n in ast.walk(m.tree):
        if not (isinstance(n, ast.Attribute) and _private(n.attr)):
            continue
        owner = n.value.id if isinstance(n.value, ast.Name) else None
        if owner in modules:
            if modules[owner] != m.name:
                out.add(f"{m.path}: {owner}.{n.attr}")
        elif owner not in ("self", "cls") and n.attr not in mine and n.attr in elsewhere:
            # an object of another module's class: the attribute is defined there, never here
            out.add(f"{m.path}: {ast.unparse(n.value)}.{n.attr}")
    return out


def test_no_module_uses_another_modules_private_names():
    found = set().union(*(private_uses(m) for m in modules()))
    assert not found, f"private names used from another module (make them public, or move the code): {sorted(found)}"


def test_the_private_reader_sees_imports_module_attributes_and_instances():
    def uses(src: str, path: str = "run/x.py", name: str = "llamalab.run.x") -> set[str]:
        return private_uses(Module(path, name, ast.parse(src)))

    # `_fmt` would be report/analysis/tables.py's (a module the reader knows), `_check_fit_on` plan/plan.py's;
    # `_finish` is defined in logs/ledger.py
    assert "_finish" in defined()["llamalab.logs.ledger"]
    assert uses("from ..report.analysis.tables import _fmt\n") == {"run/x.py: tables._fmt"}
    assert uses("from ..plan import plan as p\np._check_fit_on()\n") == {"run/x.py: p._check_fit_on"}
    assert uses("from llamalab.plan import plan\nplan._check_fit_on()\n") == {"run/x.py: plan._check_fit_on"}
    assert uses("def f(st):\n    return st._finish\n") == {"run/x.py: st._finish"}
    # its own names, self's, dunders and names no llamalab module defines are no one else's
    assert uses("def _finish():\n    pass\n\ndef f(o):\n    return o._finish\n") == set()
    assert uses("class A:\n    def f(self):\n        return self._fmt, self.__class__, sys._getframe\n") == set()
