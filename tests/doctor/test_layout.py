"""The doctor's and the recorder's packages: no import cycle among their modules (imports inside functions
included: a lazy import is still a cycle; imports under ``if TYPE_CHECKING:`` never run and are not edges, as in
tests/test_imports.py), and no module that only re-exports another's names."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("anatomy/doctor", "anatomy/tracing")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` but the bodies of ``if TYPE_CHECKING:`` (annotations only, never run)."""
    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        out.append(node)
        skip = node.body if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING" else []
        stack.extend(c for c in ast.iter_child_nodes(node) if c not in skip)
    return out


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``path`` imports (``from a.b import c`` counts ``a.b.c`` when it is a module)."""
    out = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in known:
                out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known}
    return out


def graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    known = {module_name(p) for p in files}
    edges = {module_name(p): imports_of(p, known) for p in files}
    for name in edges:  # a package's __init__ importing its own modules is how packages work, not a cycle
        edges[name] = {m for m in edges[name] if not (name in m and m.startswith(name + "."))}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(n: str, path: list[str]) -> None:
        state[n] = 1
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                found.append(path[path.index(m) :] + [m] if m in path else [n, m])
            elif m not in state:
                visit(m, path + [m])
        state[n] = 2

    for n in sorted(edges):
        if n not in state:
            visit(n, [n])
    return found


def test_no_import_cycle_in_the_doctor_or_the_recorder():
    edges = graph()
    assert len(edges) > 20
    assert cycles(edges) == []


def test_no_reexport_shims():
    """A trailing ``from x import (...)  # noqa: F401`` that only makes another module's names importable here."""
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            if p.name == "__init__.py":
                continue
            text = p.read_text(encoding="utf-8")
            assert "noqa: E402, F401" not in text, f"{p.relative_to(ROOT)} re-exports names"


if __name__ == "__main__":
    for c in cycles(graph()):
        print(" -> ".join(c))
