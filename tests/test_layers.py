"""The package's layering as a contract: the import graph of `src/llamalab` (every import, at module level, inside
functions and under TYPE_CHECKING) has no cycle, no arrow from a lower layer to a higher one, no arrow between two
entries of one layer, and at most 17 top-level entries. docs/architecture.md draws these layers and says why each
module sits where it does; a new top-level module or package must be placed in LAYERS before the suite passes."""

from __future__ import annotations

import ast
import functools
import re
import shutil
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
MAX_ENTRIES = 17

# Top to bottom (the last list is layer 0). A module may import from its own top-level entry (acyclically) and from
# entries in lower layers; entries that share a layer are independent of each other. `llamalab` is the package's
# __init__ (__version__).
LAYERS: list[list[str]] = [
    ["cli"],
    ["report"],
    ["tune"],
    ["run", "plan"],
    ["quality"],
    ["setup"],
    ["machine", "rig", "store"],
    ["study"],
    ["fit", "models"],
    ["llamacpp"],
    ["logs"],
    ["core", "llamalab"],
]


def modules(src: Path) -> dict[str, Path]:
    """Dotted module name → file, for every .py file of the llamalab package under `src`."""
    out = {}
    for p in sorted((src / "llamalab").rglob("*.py")):
        parts = list(p.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _target(name: str, node: ast.ImportFrom, is_pkg: bool) -> str | None:
    if not node.level:
        return node.module
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@functools.lru_cache(maxsize=1024)
def _imports(text: str) -> tuple[ast.Import | ast.ImportFrom, ...]:
    """Every import statement of a module's source, anywhere in it: a file's text is parsed once a session (the
    planted-edge tests copy the tree and change one file)."""
    return tuple(n for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.Import, ast.ImportFrom)))


def import_graph(src: Path) -> dict[str, set[str]]:
    """Module → the llamalab modules it imports, anywhere in its file. `from P import x` points at P.x where that is a
    module, else at P (for a package: its __init__)."""
    mods = modules(src)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in _imports(path.read_text(encoding="utf-8")):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = _target(name, node, is_pkg)
                if base is None:
                    continue
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                while t not in mods and "." in t:  # `import llamalab.x.y` of a name, not a module
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name:
                    graph[name].add(t)
    return graph


def entry(module: str) -> str:
    """The top-level entry a module belongs to: `llamalab.plan.plan` → `run`, `llamalab` → `llamalab`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def cycle_path(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """One closed path through a strongly connected component, from its first module back to it (shortest, BFS)."""
    inside = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & inside):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def entries(src: Path) -> list[str]:
    """What sits at the top of the package (files and folders, caches aside)."""
    return sorted(p.name for p in (src / "llamalab").iterdir() if p.name != "__pycache__")


def problems(src: Path) -> list[str]:
    """Every way the tree under `src` breaks the contract, one line each; empty when it holds."""
    graph = import_graph(src)
    rank = {e: len(LAYERS) - 1 - i for i, layer in enumerate(LAYERS) for e in layer}
    out = []
    top = entries(src)
    if len(top) > MAX_ENTRIES:
        out.append(f"{len(top)} top-level entries in src/llamalab (at most {MAX_ENTRIES}): {', '.join(top)}")
    for name in sorted({entry(m) for m in graph} - set(rank)):
        out.append(f"{name}: not in a layer (place it in LAYERS in tests/test_layers.py and in docs/architecture.md)")
    for comp in cycles(graph):
        out.append("import cycle: " + " → ".join(cycle_path(graph, comp)))
    for a in sorted(graph):
        for b in sorted(graph[a]):
            ea, eb = entry(a), entry(b)
            if ea == eb or ea not in rank or eb not in rank:
                continue
            if rank[eb] > rank[ea]:
                out.append(f"{a} imports {b}: {ea} (layer {rank[ea]}) sits below {eb} (layer {rank[eb]})")
            elif rank[eb] == rank[ea]:
                out.append(f"{a} imports {b}: {ea} and {eb} share layer {rank[ea]} and must stay independent")
    return out


def test_layers_hold():
    found = problems(SRC)
    assert not found, "the layer contract is broken:\n  " + "\n  ".join(found)


def test_graph_sees_every_kind_of_import():
    """The graph is real: it finds module-level, relative, function-level and TYPE_CHECKING imports."""
    g = import_graph(SRC)
    assert "llamalab.core.errors" in g["llamalab.core.proc"]
    assert "llamalab.run.runner" in g["llamalab.cli.study"]  # imported inside a click command
    assert len(g) > 50 and sum(map(len, g.values())) > 100


def _copy(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(SRC / "llamalab", src / "llamalab", ignore=shutil.ignore_patterns("__pycache__"))
    return src


def _plant(path: Path, code: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + "\n\n" + code + "\n", encoding="utf-8")


def test_planted_back_edge_fails(tmp_path):
    """A function-level import from a log reader up to report (the kind of arrow runner.py once had) breaks it."""
    src = _copy(tmp_path)
    _plant(src / "llamalab" / "logs" / "order.py",
           "def _planted():\n    from ..report import data\n    return data")
    found = problems(src)
    # report.data imports logs.order, so the same arrow also closes a cycle
    assert "llamalab.logs.order imports llamalab.report.data: logs (layer 1) sits below report (layer 10)" in found
    # (the cycle is named from whichever of its modules the search meets first)
    assert any(p.startswith("import cycle: ") and "llamalab.logs.order → llamalab.report.data → " in p
               for p in found), found
    with pytest.raises(AssertionError, match="logs.order imports llamalab.report.data"):
        assert not found, "the layer contract is broken:\n  " + "\n  ".join(found)


def test_planted_cycle_and_sibling_edge_fail(tmp_path):
    src = _copy(tmp_path)
    _plant(src / "llamalab" / "logs" / "patterns.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
           "    from . import ledger")  # ledger imports patterns
    _plant(src / "llamalab" / "rig" / "devices.py", "def _planted():\n    from ..store import db")
    found = problems(src)
    assert any(p.startswith("import cycle: ") and "llamalab.logs.patterns" in p and "llamalab.logs.ledger" in p
               for p in found), found
    assert "llamalab.rig.devices imports llamalab.store.db: rig and store share layer 5 and must stay independent" \
        in found


def test_planted_top_level_module_fails(tmp_path):
    src = _copy(tmp_path)
    while len(entries(src)) <= MAX_ENTRIES:
        (src / "llamalab" / f"extra{len(entries(src))}.py").write_text("")
    found = problems(src)
    assert any(p.startswith(f"{MAX_ENTRIES + 1} top-level entries") for p in found), found
    assert any(p.startswith("extra") and "not in a layer" in p for p in found), found


def test_architecture_doc_names_every_module():
    """docs/architecture.md's module table names every module by its path (those of `report/` and
    `report/analysis/` by name in their folder's row), and every path it names exists."""
    doc = (SRC.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = doc[doc.index("## Modules"):doc.index("## Decisions worth knowing")]
    first_cells = [line[2:].split(" | ", 1)[0] for line in table.splitlines() if line.startswith("| `")]
    named = {m for cell in first_cells for m in re.findall(r"`([a-z_]+(?:/[a-z_]+)*\.py)`", cell)}
    by_row = ("report", "report/analysis")  # folders whose modules are named in one row, `report/` [pure] …
    pkg = SRC / "llamalab"
    have = {str(p.relative_to(pkg)) for p in pkg.rglob("*.py")
            if str(p.parent.relative_to(pkg)) not in by_row and (p.name != "__init__.py" or p.parent.name == "cli")}
    in_rows = set()
    unnamed = sorted(have - named)
    for folder in by_row:
        row = next(line for line in table.splitlines() if line.startswith(f"| `{folder}/` "))
        for m in {p.stem for p in (pkg / folder).glob("*.py")} - {"__init__"}:
            in_rows.add(f"{folder}/{m}.py")
            if f"`{m}`" not in row and f"{folder}/{m}.py" not in named:
                unnamed.append(f"{folder}/{m}.py")
    assert not unnamed, f"modules docs/architecture.md does not name: {unnamed}"
    assert not sorted(named - have - in_rows), "paths named that do not exist"
