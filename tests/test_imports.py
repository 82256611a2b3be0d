"""No import cycle between the modules of ``anatomy/``.

Every module is parsed with ``ast`` (nothing is imported), and every ``import`` in it, at the top or lazily inside a
function, is an edge to the module it names. ``from anatomy.pkg import name`` is an edge to ``anatomy.pkg.name``
when that is a module, else to ``anatomy.pkg`` (its ``__init__``). Importing ``anatomy.pkg.mod`` is not counted as
an edge to ``anatomy.pkg`` as well, so a package's ``__init__`` re-exporting its own parts makes no cycle by
itself; a part that imports a name back from its package's ``__init__`` does. Imports under
``if TYPE_CHECKING:`` never run and are not edges.

There is one test per room (a subpackage or top-level module of ``anatomy``): a cycle fails the test of every room
it passes through, and the message names each cycle with the file and line of every import along it.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "anatomy"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import node, skipping the bodies of ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(node, ast.If) and _is_type_checking(node.test) and child in node.body:
                continue
            stack.append(child)


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


Edges = dict[str, dict[str, str]]  # importer -> imported -> "file:line" of the first such import


def import_graph(modules: dict[str, Path], root: Path = ROOT) -> Edges:
    edges: Edges = {name: {} for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(root.parent).as_posix()
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _absolute(node, name, is_package)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
                ]
            for target in targets:
                while target and target not in modules:  # `import anatomy.pkg.mod.attr`-like spellings
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges[name].setdefault(target, f"{where}:{node.lineno}")
    return edges


def strongly_connected(edges: Edges) -> list[list[str]]:
    """Tarjan's components with more than one module, each sorted, in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def _shortest_path(edges: Edges, start: str, goal: str, inside: set[str]) -> list[str]:
    previous: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(edges[v]):
                if w in inside and w not in seen:
                    seen.add(w)
                    previous[w] = v
                    following.append(w)
        frontier = following
        if goal in seen:
            break
    path = [goal]
    while path[-1] != start:
        path.append(previous[path[-1]])
    return path[::-1]


def cycles(edges: Edges) -> list[list[str]]:
    """Elementary cycles covering every import edge inside every strongly connected component: for each edge
    a -> b, the shortest way back from b to a. Each cycle starts at its smallest module; no duplicates."""
    found: list[list[str]] = []
    for component in strongly_connected(edges):
        inside = set(component)
        for a in component:
            for b in sorted(edges[a]):
                if b not in inside:
                    continue
                cycle = [a] + _shortest_path(edges, b, a, inside)[:-1]
                first = cycle.index(min(cycle))
                cycle = cycle[first:] + cycle[:first]
                if cycle not in found:
                    found.append(cycle)
    return found


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def describe(cycle: list[str], edges: Edges) -> str:
    steps = [f"{a} -> {b} ({edges[a][b]})" for a, b in zip(cycle, cycle[1:] + cycle[:1])]
    return " | ".join(steps)


MODULES = all_modules()
ROOMS = sorted({room(name) for name in MODULES})


@functools.cache
def package_cycles() -> tuple[Edges, list[list[str]]]:
    edges = import_graph(MODULES)
    return edges, cycles(edges)


@pytest.mark.parametrize("name", ROOMS)
def test_no_import_cycle_passes_through_the_room(name: str) -> None:
    edges, found = package_cycles()
    mine = [cycle for cycle in found if any(room(module) == name for module in cycle)]
    assert not mine, f"{len(mine)} import cycle(s) through anatomy/{name}:\n" + "\n".join(
        describe(cycle, edges) for cycle in mine
    )


# ----------------------------------------------------------------------------------------------------------------
# The checker itself, on small made-up packages: it must find what is there and nothing else.


def _package(tmp_path: Path, files: dict[str, str]) -> Edges:
    for rel, text in files.items():
        path = tmp_path / "anatomy" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(all_modules(tmp_path / "anatomy"), tmp_path / "anatomy")


def test_a_lazy_import_inside_a_function_closes_a_cycle(tmp_path: Path) -> None:
    edges = _package(
        tmp_path,
        {
            "__init__.py": "",
            "cli/__init__.py": "",
            "cli/main.py": "from anatomy.cli import train\n",
            "cli/train.py": "def run():\n    from anatomy.cli.main import UsageError\n",
        },
    )
    assert cycles(edges) == [["anatomy.cli.main", "anatomy.cli.train"]]
    assert edges["anatomy.cli.train"] == {"anatomy.cli.main": "anatomy/cli/train.py:2"}


def test_a_package_re_exporting_its_parts_is_no_cycle_but_a_part_importing_its_package_is(tmp_path: Path) -> None:
    files = {
        "__init__.py": "",
        "doctor/__init__.py": "from anatomy.doctor.check import check\nfrom .report import Report\n",
        "doctor/check.py": "from anatomy.doctor.report import Report\n",
        "doctor/report.py": "import torch\n",
    }
    assert cycles(_package(tmp_path, files)) == []
    files["doctor/report.py"] = "from . import check\n"  # relative, to a sibling module
    assert cycles(_package(tmp_path, files)) == [["anatomy.doctor.check", "anatomy.doctor.report"]]
    files["doctor/report.py"] = "def f():\n    from anatomy.doctor import Report\n"  # a name of the __init__
    assert cycles(_package(tmp_path, files)) == [
        ["anatomy.doctor", "anatomy.doctor.check", "anatomy.doctor.report"],
        ["anatomy.doctor", "anatomy.doctor.report"],
    ]


def test_type_checking_imports_never_run_and_make_no_edge(tmp_path: Path) -> None:
    edges = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "import anatomy.b\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from anatomy.a import A\nelse:\n"
            "    from anatomy import c\n",
            "c.py": "",
        },
    )
    assert edges["anatomy.b"] == {"anatomy.c": "anatomy/b.py:5"}
    assert cycles(edges) == []


def test_every_edge_of_a_tangle_is_named_in_some_cycle(tmp_path: Path) -> None:
    edges = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "import anatomy.b\nimport anatomy.c\n",
            "b.py": "import anatomy.a\n",
            "c.py": "import anatomy.b\n",
        },
    )
    assert cycles(edges) == [["anatomy.a", "anatomy.b"], ["anatomy.a", "anatomy.c", "anatomy.b"]]
