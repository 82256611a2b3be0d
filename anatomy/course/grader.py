"""``anatomy learn check``: run a learner's file under the recorder and say pass, or which pitfall and where.

Every failure is a :class:`Result` with one finding: the pitfall's name, what the code does, the post's sentence,
the learner's line, the numbers that show it and one concrete hint. What cannot be graded (a syntax error, a
missing name, a wrong signature, a forward that raises, hangs or exits, a file of another exercise) is a
:class:`LearnError`: one clear message, never a traceback from inside the project.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType
from typing import Any

import torch
from torch import nn

from anatomy.course import exercises as ex
from anatomy.course.compare import render_table
from anatomy.doctor.loading.building import import_file
from anatomy.doctor.loading.limits import Hung, guard
from anatomy.doctor.loading.subject import CheckError, CheckTimeout, one_line
from anatomy.tracing import recorder as rec_mod
from anatomy.tracing.steps import RecordError, Recording

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
    """One grading: the verdict, the pitfall and the learner's line, a short answer and the full report.

    ``str(result)`` is what ``anatomy learn check`` prints (the short answer); ``result.report`` the full report
    (``--details``); ``to_dict()`` the JSON form."""

    exercise: str
    file: str
    passed: bool
    pitfall: str | None = None
    line: int | None = None
    messages: dict[str, list[str]] = field(default_factory=lambda: {"en": [], "zh": []})  # the full report
    table: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the learner's line of code pointed at
    short: dict[str, list[str]] = field(default_factory=lambda: {"en": [], "zh": []})  # what, the post, a hint
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (en, zh), shown on a pass too
    more_lines: list[int] = field(default_factory=list)  # other lines of the learner's the finding names
    lang: str = ""  # the language ``str()`` speaks ("": from the locale)

    def say(self, en: str, zh: str) -> None:
        """One line of the full report."""
        self.messages["en"].append(en)
        self.messages["zh"].append(zh)

    def brief(self, en: str, zh: str) -> None:
        """One line of the short answer (the finding, the post's sentence, the hint)."""
        self.short["en"].append(en)
        self.short["zh"].append(zh)

    def warn(self, en: str, zh: str) -> None:
        self.warnings.append((en, zh))

    def point(self, line: int | None, source: str = "") -> None:
        self.line, self.source = line, source.strip()

    def tell(
        self,
        name: str,
        what: tuple[str, str],
        post: tuple[str, str],
        hint: tuple[str, str],
        *,
        where: tuple[str, str] = ("", ""),
        numbers: tuple[str, str] | None = None,
        who: str = "",
    ) -> None:
        """A named pitfall in the course's words: the short answer (what the code does, the post's sentence, the
        hint) and the full report (the pitfall ``where`` it is, the post, the ``numbers`` that show it, the hint).
        ``post``: the post's sentence and an English gloss ("": none; no sentence: the post says nothing of it);
        ``who``: the class the short answer names first."""
        self.pitfall = name
        lead = (f"{who}: ", f"{who}：") if who else ("", "")
        self.brief(lead[0] + what[0], lead[1] + what[1])
        if post[0]:
            self.brief(f"the post: 「{post[0]}」", f"原文：「{post[0]}」")
        self.brief(f"hint: {hint[0]}", f"提示：{hint[1]}")
        self.say(f"pitfall `{name}` — {where[0]}{what[0]}", f"坑 `{name}` —— {where[1]}{what[1]}")
        if post[0]:
            self.say(f"the post: 「{post[0]}」" + (f" ({post[1]})" if post[1] else ""), f"原文：「{post[0]}」")
        if numbers is not None:
            self.say(*numbers)
        self.say(f"hint: {hint[0]}", f"提示：{hint[1]}")

    @property
    def ok(self) -> bool:
        return self.passed

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "NOT YET"

    @property
    def pitfalls(self) -> list[str]:
        return [self.pitfall] if self.pitfall else []

    @property
    def lines(self) -> list[int]:
        """The learner's lines the answer points at (the first is :attr:`line`)."""
        return ([self.line] if self.line else []) + [n for n in self.more_lines if n != self.line]

    @property
    def report(self) -> str:
        return self.render(self.lang or _locale(), details=True)

    def __str__(self) -> str:
        return self.render(self.lang or _locale())

    def to_dict(self) -> dict[str, Any]:
        return {
            "exercise": self.exercise,
            "file": self.file,
            "passed": self.passed,
            "verdict": self.verdict,
            "pitfall": self.pitfall,
            "line": self.line,
            "lines": self.lines,
            "source": self.source,
            "short": self.short,
            "warnings": [{"en": en, "zh": zh} for en, zh in self.warnings],
            "message": self.messages,
            "shape_table": self.table,
            **self.extra,
        }

    def head(self, lang: str) -> str:
        words = {("en", True): "PASS", ("en", False): "NOT YET", ("zh", True): "通过", ("zh", False): "还没通过"}
        return f"{words[(lang, self.passed)]} · {self.exercise} · {os.path.basename(self.file)}" + (
            (f" · 坑：{self.pitfall}" if lang == "zh" else f" · pitfall: {self.pitfall}") if self.pitfall else ""
        )

    def render(self, lang: str = "en", details: bool = False) -> str:
        """The short answer (at most 8 lines: verdict, line, what, the post, a hint, warnings), or with
        ``details`` the full report and the learner's shape table."""
        zh = lang == "zh"
        out = [self.head(lang)]
        if details:
            out += ["  " + line for line in self.messages[lang]]
            out += ["  " + (f"注意：{w[1]}" if zh else f"note: {w[0]}") for w in self.warnings]
            if self.table:
                out.append("")
                out.append("  形状表（你的代码）：" if zh else "  shape table (your code):")
                out += ["  " + row for row in render_table(self.table)]
            return "\n".join(out)
        if self.line:
            out.append(f"  第 {self.line} 行：`{self.source}`" if zh else f"  line {self.line}: `{self.source}`")
        body = self.short[lang] or self.messages[lang][:2]
        out += ["  " + line for line in body][: 7 - len(out)]
        room = 7 - len(out)
        shown = self.warnings[: max(room, 0)]
        out += ["  " + (f"注意：{w[1]}" if zh else f"note: {w[0]}") for w in shown]
        if len(out) < 8:
            out.append("  （完整报告：加上 --details）" if zh else "  (the full report: add --details)")
        return "\n".join(out[:8])


def at_line(line: int | None, source: str) -> tuple[str, str]:
    """``line N `code`: `` (en, zh) to put before a finding; nothing when there is no line."""
    return (f"line {line} `{source}`: ", f"第 {line} 行 `{source}`：") if line else ("", "")


def _locale() -> str:
    for var in ("LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE"):
        if os.environ.get(var, "").lower().startswith("zh"):
            return "zh"
    return "en"


class Subject:
    """What is graded: the learner's names (a loaded file, or objects given from Python) and the file their code
    is in (the recorder keeps the steps of that file)."""

    def __init__(self, names: dict[str, Any], file: str) -> None:
        self.names, self.file = names, file

    def __getattr__(self, name: str) -> Any:  # the learner's function, class or value: anything
        try:
            return self.__dict__["names"][name]
        except KeyError:
            raise AttributeError(name) from None


# ------------------------------------------------------------------------------------------------ loading


def load(exercise: ex.Exercise, path: str | Path, timeout: float | None = TIMEOUT) -> Subject:
    """Import the learner's file (no bytecode written) and return it; refuse a file of another exercise."""
    path = Path(path)
    if not path.is_file():
        raise LearnError(
            f"no such file: {str(path)!r} (start the exercise with `anatomy learn start {exercise.id}`)",
            f"没有这个文件：{str(path)!r}（先用 `anatomy learn start {exercise.id}` 开始这个练习）",
        )
    text = path.read_text(encoding="utf-8", errors="replace")
    first = next((line for line in text.splitlines() if line.startswith(MARKER)), None)
    if first is not None:
        named = first[len(MARKER) :].split()[0] if first[len(MARKER) :].split() else ""
        if named != exercise.id and named in ex.BY_ID:
            raise LearnError(
                f"{path.name} is the file of exercise {named!r} (its header says so), not {exercise.id!r}: "
                f"run `anatomy learn check {named} {path}`",
                f"{path.name} 是练习 {named!r} 的文件（文件头这么写），不是 {exercise.id!r}："
                f"请运行 `anatomy learn check {named} {path}`",
            )
    try:
        compile(text, str(path), "exec")
    except SyntaxError as err:
        raise LearnError(
            f"{path.name} line {err.lineno}: syntax error: {err.msg} (`{(err.text or '').strip()}`)",
            f"{path.name} 第 {err.lineno} 行语法错误：{err.msg}（`{(err.text or '').strip()}`）",
        ) from None
    try:
        module = import_file(path, timeout)
    except CheckTimeout as err:
        raise LearnError(err.en, err.zh) from None
    except CheckError as err:
        raise LearnError(str(err), f"无法导入：{err}") from None
    missing = [name for name in exercise.entries if not hasattr(module, name)]
    if missing:
        raise LearnError(
            f"{path.name} defines no {', '.join(missing)}: the exercise asks for {', '.join(exercise.entries)}",
            f"{path.name} 里没有定义 {', '.join(missing)}：这个练习要写的是 {', '.join(exercise.entries)}",
        )
    return Subject({name: getattr(module, name) for name in exercise.entries}, str(path))


def subject_of(exercise: ex.Exercise, obj: object) -> Subject:
    """The learner's objects given from Python (a notebook): a function or class (an ``nn.Module`` instance stands
    for its class) for a one-name exercise; for two names (heads, masks, add_norm) a dict, a module, a namespace
    or a tuple in the exercise's order."""
    names = exercise.entries
    if isinstance(obj, dict):
        found = {n: obj[n] for n in names if n in obj}
    elif isinstance(obj, (tuple, list)):
        found = dict(zip(names, obj))
    elif len(names) == 1 and (callable(obj) or isinstance(obj, nn.Module)):
        found = {names[0]: type(obj) if isinstance(obj, nn.Module) else obj}
    else:
        found = {n: getattr(obj, n) for n in names if hasattr(obj, n)}
    missing = [n for n in names if n not in found]
    if missing:
        raise LearnError(
            f"grade({exercise.id!r}, ...): no {', '.join(missing)} given; the exercise asks for "
            f"{', '.join(names)}" + (" (pass a dict, a module or a tuple in this order)" if len(names) > 1 else ""),
            f"grade({exercise.id!r}, ...)：没有给出 {', '.join(missing)}；这个练习要写的是 {', '.join(names)}"
            + ("（传入 dict、模块，或按此顺序的 tuple）" if len(names) > 1 else ""),
        )
    found = {n: type(v) if isinstance(v, nn.Module) else v for n, v in found.items()}
    file = next((f for f in map(_code_file, found.values()) if f), "")
    return Subject(found, file or "<python>")


def _code_file(obj: Any) -> str:  # the learner's function or class
    """The file (or notebook cell name) the code of a function or class was compiled from."""
    code: CodeType | None = getattr(obj, "__code__", None)
    if code is not None:
        return code.co_filename
    for value in vars(obj).values() if isinstance(obj, type) else ():
        inner: CodeType | None = getattr(value, "__code__", None)
        if inner is not None:
            return inner.co_filename
    try:
        return inspect.getsourcefile(obj) or ""
    except (TypeError, OSError):
        return ""


def check_signature(fn: Callable[..., Any], name: str, want: list[str], required: int) -> None:
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
        raise LearnError(
            f"{name}({got}): the exercise calls it as {name}({', '.join(want)})"
            + (f" with the last {len(want) - required} optional" if required < len(want) else ""),
            f"{name}({got})：练习会这样调用它：{name}({', '.join(want)})",
        )


def run_guarded(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    what: tuple[str, str],
    timeout: float | None = TIMEOUT,
    *,
    record: bool = True,
    dims: tuple[str, ...] = (),
    sizes: dict[str, int] | None = None,
    module: nn.Module | None = None,
    grad: bool = False,
) -> tuple[Any, Recording | None]:
    """``(output, recording or None)``; any failure of the learner's code becomes a :class:`LearnError`."""
    try:
        with guard(timeout, lambda: what):
            if record:
                rec = rec_mod.record(fn, *args, sizes=sizes, dims=list(dims) or None, module=module)
                return rec.output, rec
            with torch.set_grad_enabled(grad):
                return fn(*args), None
    except Hung as hung:
        err = CheckTimeout.from_hung(hung)
        raise LearnError(err.en, err.zh) from None
    except RecordError as err:
        inner = err.error
        if inner is None:
            raise LearnError(f"{what[0]}: {err}", f"{what[1]}：{err}") from None
        raise learner_raised(inner, f"{what[0]} raised ", f"{what[1]}抛出了错误 ") from None
    except SystemExit as err:
        raise LearnError(
            f"{what[0]} called sys.exit({err.code!r}): nothing could be checked",
            f"{what[1]}调用了 sys.exit({err.code!r})：什么也没法检查",
        ) from None
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # noqa: BLE001 - the learner's code may raise anything
        raise learner_raised(err, f"{what[0]} raised ", f"{what[1]}抛出了错误 ") from None


def learner_raised(err: BaseException, en: str, zh: str, *, gloss: bool = True) -> LearnError:
    """The one line for an error the learner's code raised: ``en``/``zh`` lead, the error, (in Chinese, what a
    common torch error means,) and the learner's line it came from."""
    at = raised_at(err)
    return LearnError(
        f"{en}{one_line(err)}" + (f" (at line {at[0]}: `{at[1]}`)" if at else ""),
        f"{zh}{one_line(err)}" + (zh_gloss(err) if gloss else "") + (f"（第 {at[0]} 行：`{at[1]}`）" if at else ""),
    )


def raised_at(err: BaseException) -> tuple[int, str] | None:
    """The learner's innermost line in the traceback (outside torch, the standard library and this project)."""
    import linecache

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    skip = (os.path.dirname(torch.__file__), here, os.path.dirname(os.__file__))
    tb, found = err.__traceback__, None
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not os.path.abspath(name).startswith(skip) and not name.startswith("<frozen"):
            found = (tb.tb_lineno, linecache.getline(name, tb.tb_lineno).strip())
        tb = tb.tb_next
    return found


ZH_GLOSSES = (  # what common torch errors mean, for the Chinese learner (the error itself stays as torch wrote it)
    ("cannot be multiplied", "：两个矩阵的形状乘不到一起，检查 @ 或 matmul 两边的最后两维"),
    ("Expected size for first two dimensions", "：矩阵乘法两边的形状对不上，检查 k 是否转置了最后两维"),
    ("size of tensor a", "：两个张量在某一维上的大小不一致"),
    ("is invalid for input of size", "：view/reshape 的目标形状与元素个数不符"),
    ("must match the size of tensor", "：两个张量在某一维上的大小不一致，无法相加或广播"),
    ("not enough values to unpack", "：解包时拿到的值比期望的少"),
    ("too many values to unpack", "：解包时拿到的值比期望的多"),
    ("positional argument", "：函数或 forward 的参数个数与调用不符"),
    ("view size is not compatible", "：transpose 之后内存不连续，先 .contiguous() 或改用 reshape"),
    ("Dimension out of range", "：维度下标超出了张量的维数"),
    ("has no attribute", "：对象上没有这个属性"),
    ("without overflow", "：这个数放不进当前的数据类型（例如 float16 最大约 65504）"),
)


def zh_gloss(err: BaseException) -> str:
    text = str(err)
    return next((gloss for key, gloss in ZH_GLOSSES if key in text), "")
