"""``anatomy learn check``: run a learner's file under the recorder and say pass, or which pitfall and where.

Every failure is a :class:`Result` with one finding: the pitfall's name, what the code does, the post's sentence,
the learner's line, the numbers that show it and one concrete hint. What cannot be graded (a syntax error, a
missing name, a wrong signature, a forward that raises, hangs or exits, a file of another exercise) is a
:class:`LearnError`: one clear message, never a traceback from inside the project.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from anatomy.course import exercises as ex
from anatomy.doctor.limits import Hung, guard
from anatomy.doctor.subject import CheckError, CheckTimeout, import_file, one_line
from anatomy.tracing import dims as rd
from anatomy.tracing import recorder as rec_mod

TIMEOUT = 20.0
MARKER = "# anatomy learn · exercise:"


class LearnError(ValueError):
    """The file cannot be graded; ``en``/``zh`` say why in one line."""

    def __init__(self, en: str, zh: str | None = None):
        super().__init__(en)
        self.en, self.zh = en, zh or en

    def text(self, lang: str) -> str:
        return self.zh if lang == "zh" else self.en


@dataclass
class Result:
    exercise: str
    file: str
    passed: bool
    pitfall: str | None = None
    line: int | None = None
    lines: dict[str, list[str]] = field(default_factory=lambda: {"en": [], "zh": []})
    table: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def say(self, en: str, zh: str) -> None:
        self.lines["en"].append(en)
        self.lines["zh"].append(zh)

    def to_dict(self) -> dict:
        return {"exercise": self.exercise, "file": self.file, "passed": self.passed, "pitfall": self.pitfall,
                "line": self.line, "message": self.lines, "shape_table": self.table, **self.extra}

    def render(self, lang: str = "en") -> str:
        head = {("en", True): "PASS", ("en", False): "NOT YET", ("zh", True): "通过", ("zh", False): "还没通过"}
        out = [f"{head[(lang, self.passed)]} · {self.exercise} · {os.path.basename(self.file)}"
               + (f" · {'坑' if lang == 'zh' else 'pitfall'}: {self.pitfall}" if self.pitfall else "")]
        out += ["  " + line for line in self.lines[lang]]
        if self.table:
            out.append("")
            out.append("  形状表（你的代码）：" if lang == "zh" else "  shape table (your code):")
            out += ["  " + row for row in render_table(self.table)]
        return "\n".join(out)


# ------------------------------------------------------------------------------------------------ loading


def load(exercise: ex.Exercise, path: str | Path, timeout: float | None = TIMEOUT):
    """Import the learner's file (no bytecode written) and return it; refuse a file of another exercise."""
    path = Path(path)
    if not path.is_file():
        raise LearnError(f"no such file: {str(path)!r} (start the exercise with `anatomy learn start {exercise.id}`)",
                         f"没有这个文件：{str(path)!r}（先用 `anatomy learn start {exercise.id}` 开始这个练习）")
    text = path.read_text(encoding="utf-8", errors="replace")
    first = next((line for line in text.splitlines() if line.startswith(MARKER)), None)
    if first is not None:
        named = first[len(MARKER):].split()[0] if first[len(MARKER):].split() else ""
        if named != exercise.id and named in ex.BY_ID:
            raise LearnError(f"{path.name} is the file of exercise {named!r} (its header says so), not {exercise.id!r}: "
                             f"run `anatomy learn check {named} {path}`",
                             f"{path.name} 是练习 {named!r} 的文件（文件头这么写），不是 {exercise.id!r}："
                             f"请运行 `anatomy learn check {named} {path}`")
    try:
        compile(text, str(path), "exec")
    except SyntaxError as err:
        raise LearnError(f"{path.name} line {err.lineno}: syntax error: {err.msg} (`{(err.text or '').strip()}`)",
                         f"{path.name} 第 {err.lineno} 行语法错误：{err.msg}（`{(err.text or '').strip()}`）") from None
    try:
        module = import_file(path, timeout)
    except CheckTimeout as err:
        raise LearnError(err.en, err.zh) from None
    except CheckError as err:
        raise LearnError(str(err), f"无法导入：{err}") from None
    missing = [name for name in exercise.entries if not hasattr(module, name)]
    if missing:
        raise LearnError(f"{path.name} defines no {', '.join(missing)}: the exercise asks for "
                         f"{', '.join(exercise.entries)}",
                         f"{path.name} 里没有定义 {', '.join(missing)}：这个练习要写的是 {', '.join(exercise.entries)}")
    return module


def check_signature(fn, name: str, want: list[str], required: int) -> None:
    """The learner's function or ``__init__`` takes ``want`` (by position) with ``required`` of them needed."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    params = [p for p in sig.parameters.values() if p.name != "self"]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    needed = [p for p in positional if p.default is p.empty]
    if len(positional) < len(want) or len(needed) > required:
        got = ", ".join(p.name for p in params)
        raise LearnError(f"{name}({got}): the exercise calls it as {name}({', '.join(want)})"
                         + (f" with the last {len(want) - required} optional" if required < len(want) else ""),
                         f"{name}({got})：练习会这样调用它：{name}({', '.join(want)})")


def run_guarded(fn, args: tuple, what: tuple[str, str], timeout: float | None = TIMEOUT, *, record: bool = True,
                dims: tuple[str, ...] = (), sizes: dict | None = None, module=None):
    """``(output, recording or None)``; any failure of the learner's code becomes a :class:`LearnError`."""
    try:
        with guard(timeout, lambda: what):
            if record:
                rec = rec_mod.record(fn, *args, sizes=sizes, dims=list(dims) or None, module=module)
                return rec.output, rec
            with torch.no_grad():
                return fn(*args), None
    except Hung as hung:
        err = CheckTimeout.from_hung(hung)
        raise LearnError(err.en, err.zh) from None
    except rec_mod.RecordError as err:
        raise LearnError(f"{what[0]}: {err}", f"{what[1]}：{err}") from None
    except SystemExit as err:
        raise LearnError(f"{what[0]} called sys.exit({err.code!r}): nothing could be checked",
                         f"{what[1]}调用了 sys.exit({err.code!r})：什么也没法检查") from None
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # noqa: BLE001 - the learner's code may raise anything
        raise LearnError(f"{what[0]} raised {type(err).__name__}: {one_line(err)}",
                         f"{what[1]}抛出了 {type(err).__name__}：{one_line(err)}") from None


# ------------------------------------------------------------------------------------------------ comparing


def as_tensors(out) -> list:
    if isinstance(out, (tuple, list)):
        return [o for o in out]
    return [out]


def same(a, b, tol: float = 1e-7) -> bool:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    if tuple(a.shape) != tuple(b.shape):
        return False
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return a.dtype == b.dtype and bool((a == b).all())
    a, b = a.detach().double(), b.detach().double()
    both_nan = a.isnan() & b.isnan()
    diff = (a - b).abs().masked_fill(both_nan, 0.0)
    return bool((diff.nan_to_num(nan=float("inf")) <= tol * (1 + b.abs().nan_to_num())).all())


def max_diff(a, b) -> float:
    try:
        return float((a.detach().double() - b.detach().double()).abs().nan_to_num(nan=float("inf")).max())
    except (RuntimeError, AttributeError, TypeError):
        return float("inf")


def dim_names(shape, sizes: dict) -> tuple[str, ...]:
    return rd.by_size(tuple(shape), rd.SizeNames(sizes))


def dims_of(shape, sizes: dict) -> str:
    return rd.letters(dim_names(shape, sizes))


def first_step(rec, ops: tuple[str, ...] | None, out_dims: tuple[str, ...] | None, file: str):
    """The learner's first recorded step with one of ``ops`` (None: any op) and output dims ``out_dims`` (None: any),
    in their file; failing the dims, the first with one of ``ops``."""
    if rec is None:
        return None
    mine = [s for s in rec.steps if os.path.abspath(s.file) == os.path.abspath(file)
            and (ops is None or s.op in ops)]
    for s in mine:
        if out_dims is None or (s.outputs and tuple(s.outputs[0].dims) == tuple(out_dims)):
            return s
    return mine[0] if mine else None


def source_line(module, entry: str, pattern: str) -> tuple[int | None, str]:
    """The first line of ``entry``'s own source (after its ``def``) matching ``pattern``: for code the recorder
    cannot see (Python arithmetic, tensors made from numbers alone)."""
    import re

    try:
        lines, start = inspect.getsourcelines(getattr(module, entry))
    except (OSError, TypeError, AttributeError):
        return None, ""
    for i, line in enumerate(lines[1:], start=start + 1):
        code = line.split("#")[0]
        if pattern and re.search(pattern, code):
            return i, line.strip()
    return None, ""


def table_of(rec, file: str) -> list[dict]:
    if rec is None:
        return []
    return [{"line": s.line, "code": s.source.split("  #")[0].rstrip(), "op": s.op,
             "shape": [list(o.shape) for o in s.outputs][:1][0] if s.outputs else [],
             "dims": rd.letters(s.outputs[0].dims) if s.outputs else ""}
            for s in rec.steps if os.path.abspath(s.file) == os.path.abspath(file) and s.data]


def render_table(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    width = min(max(len(r["code"]) for r in rows), 60)
    out = [f"{'line':>4}  {'code':<{width}}  {'op':<12}  shape"]
    for r in rows:
        code = r["code"] if len(r["code"]) <= width else r["code"][: width - 1] + "…"
        out.append(f"{r['line']:>4}  {code:<{width}}  {r['op']:<12}  {tuple(r['shape'])} {r['dims']}")
    return out
