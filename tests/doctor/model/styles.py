"""The model styles the doctor's model check is tested on (each file here is a correct model), and one mistake at
a time made by replacing one piece of a file's text (the mistake's line is then named by its new text)."""

from __future__ import annotations

from pathlib import Path

from anatomy.doctor import check

HERE = Path(__file__).resolve().parent


def variant(tmp_path: Path, style: str, old: str, new: str, name: str = "my_gpt.py") -> Path:
    """``style``'s file with ``old`` replaced by ``new`` (exactly once), written to ``tmp_path / name``."""
    src = (HERE / style).read_text(encoding="utf-8")
    assert src.count(old) == 1, f"{old!r} is not once in {style}"
    path = tmp_path / name
    path.write_text(src.replace(old, new), encoding="utf-8")
    return path


def line_of(path: Path, text: str) -> int:
    """The 1-based line of ``path`` that holds ``text`` (the first)."""
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text in line:
            return i
    raise AssertionError(f"{text!r} not in {path}")


def lines(report, fault: str) -> set[int]:
    """Every line the findings of ``fault`` (named or explained) point at."""
    return {w["line"] for f in report.findings if fault in (f.fault, f.explained_by) for w in f.where}


def run(path: Path, cls: str = "GPT", **kw):
    return check(f"{path}:{cls}", **kw)
