"""What the learner's own file does with the targets, read with ``ast`` (never run): a batch whose targets are the
inputs' slices moved one token on (``y = data[i + 1 : i + T + 1]``, ``x, y = b[:, :-1], b[:, 1:]``), the same
slices (``y = data[i : i + T]``), or a call that passes the inputs as the targets (``model(x, x)``,
``labels=input_ids``). The loss probe combines it with the model's own shift: a model that shifts inside, fed
shifted targets, shifts twice; a model that does not, fed the inputs, learns to copy."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

__anatomy_transparent__ = True

INPUTS = {"x", "xb", "xs", "inputs", "input", "input_ids", "ids", "idx", "src", "tokens", "x_batch", "inp"}
TARGETS = {"y", "yb", "ys", "targets", "target", "labels", "label", "tgt", "y_batch", "out", "outputs"}
TARGET_KEYWORDS = {"targets", "labels", "y", "target", "tgt"}


@dataclass(frozen=True)
class Evidence:
    kind: str  # "shifted": the caller shifts the targets; "same": it passes the inputs as the targets
    line: int
    source: str
    file: str


def _s(e: ast.expr | None) -> str:
    return "" if e is None else ast.unparse(e).replace(" ", "")


def _slices(e: ast.expr) -> list[ast.Slice]:
    return [n for n in ast.walk(e) if isinstance(n, ast.Slice)]


def _shifted(a: ast.Slice, b: ast.Slice) -> bool:
    lo = _s(b.lower) in (_s(a.lower) + "+1", "1" if not _s(a.lower) else "\0")
    hi = _s(b.upper) in (_s(a.upper) + "+1", "" if _s(a.upper) == "-1" else "\0")
    return lo and hi


def compare(x: ast.expr, y: ast.expr) -> str | None:
    """``"shifted"`` when y's slices are x's moved on by one, ``"same"`` when y is x's text, else None."""
    if _s(x) == _s(y):
        return "same" if _slices(x) else None
    sx, sy = _slices(x), _slices(y)
    if not sx or len(sx) != len(sy):
        return None
    moved = [_shifted(a, b) for a, b in zip(sx, sy)]
    equal = [_s(a.lower) == _s(b.lower) and _s(a.upper) == _s(b.upper) for a, b in zip(sx, sy)]
    ok = all(m or e for m, e in zip(moved, equal)) and any(moved)
    return "shifted" if ok and _s(_strip(x, sx)) == _s(_strip(y, sy)) else None


def _strip(e: ast.expr, slices: list[ast.Slice]) -> ast.expr:
    """``e`` with its slices blanked, to compare what is sliced."""
    clone = ast.parse(ast.unparse(e), mode="eval").body
    for n in ast.walk(clone):
        if isinstance(n, ast.Slice):
            n.lower = n.upper = n.step = None
    return clone


def _outside_classes(tree: ast.Module) -> ast.Module:
    """The file without its modules' classes (those defining ``forward``): the model's own code
    (``self.attn(x, x, x)``, a shift inside forward) is the model's, not its caller's; a Dataset's ``__getitem__``
    is the caller's."""
    return ast.Module(body=[n for n in tree.body if not _is_module_class(n)], type_ignores=[])


def _is_module_class(n: ast.stmt) -> bool:
    return isinstance(n, ast.ClassDef) and any(isinstance(f, ast.FunctionDef) and f.name == "forward" for f in n.body)


def _pairs(tree: ast.AST) -> list[tuple[ast.expr, ast.expr, int]]:
    """(inputs' value, targets' value, line) of assignments in one scope: ``x = ...; y = ...`` or ``x, y = a, b``."""
    out = []
    for scope in [n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef))]:
        seen: dict[str, ast.expr] = {}
        for st in ast.walk(scope):
            if not isinstance(st, ast.Assign) or len(st.targets) != 1:
                continue
            t, v = st.targets[0], st.value
            if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple) and len(t.elts) == len(v.elts):
                named = [(e.id, val) for e, val in zip(t.elts, v.elts) if isinstance(e, ast.Name)]
            else:
                named = [(t.id, v)] if isinstance(t, ast.Name) else []
            for name, value in named:
                seen[name.lower()] = value
                if name.lower() in TARGETS:
                    x = next((seen[k] for k in INPUTS if k in seen), None)
                    if x is not None:
                        out.append((x, value, st.lineno))
    return out


def _calls(tree: ast.AST) -> list[tuple[int, str]]:
    """Lines that call something with the inputs as the targets: ``m(x, x)``, ``model(ids, labels=ids)``."""
    out = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call) or not n.args or _s(n.func).startswith("self."):
            continue
        first = _s(n.args[0])
        if first.lower() not in INPUTS:
            continue
        same_kw = any(k.arg in TARGET_KEYWORDS and _s(k.value) == first for k in n.keywords)
        same_pos = len(n.args) >= 2 and _s(n.args[1]) == first
        if same_kw or same_pos:
            out.append((n.lineno, "same"))
    return out


def evidence(file: str) -> list[Evidence]:
    """Every line of ``file`` that says how its caller builds the targets (empty when it cannot be read)."""
    try:
        text = Path(file).read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return []
    lines = text.splitlines()
    tree = _outside_classes(tree)
    found = [(line, kind) for x, y, line in _pairs(tree) if (kind := compare(x, y)) is not None]
    found += _calls(tree)
    return [Evidence(kind, line, lines[line - 1].strip(), file) for line, kind in sorted(set(found))]
