"""``anatomy.course.grade(exercise_id, obj)``: objects defined anywhere (a notebook cell, this file) are graded by the
same function as ``anatomy learn check`` on a file, under the same time limit; the result's short answer, full
report, lines and JSON form."""

from __future__ import annotations

import linecache
import math
import re
from pathlib import Path

import pytest
import torch

from anatomy.course import grade
from anatomy.course.check import check
from anatomy.course.grader import LearnError, subject_of

LEARNERS = Path(__file__).parent / "learners"


def cell(source: str, name: str = "<cell-7>") -> dict:
    """Run ``source`` as a notebook cell would (its lines known to linecache, no file on disk)."""
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    namespace: dict = {"math": math, "torch": torch}
    exec(compile(source, name, "exec"), namespace)  # noqa: S102 - the test's own source
    return namespace


def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    return w @ v, w


def test_a_function_defined_here_passes_with_the_result_api():
    r = grade("attention", attention, lang="en")
    assert r.ok and r.verdict == "PASS" and r.pitfalls == [] and r.lines == []
    assert str(r).startswith("PASS · attention · test_grader.py") and "--details" in str(r)
    assert "matches the reference on every probe" in r.report
    d = r.to_dict()
    assert d["passed"] is True and d["verdict"] == "PASS" and d["shape_table"]


def test_a_mistake_in_a_notebook_cell_names_the_cell_line():
    ns = cell(
        "def attention(q, k, v, mask=None):\n"
        "    s = q @ k.transpose(-2, -1)\n"
        "    if mask is not None:\n"
        "        s = s.masked_fill(~mask, float('-inf'))\n"
        "    w = s.softmax(-1)\n"
        "    return w @ v, w\n"
    )
    r = grade("attention", ns["attention"], lang="zh")
    assert not r.ok and r.verdict == "NOT YET" and r.pitfalls == ["no_scaling"] and r.lines == [2]
    assert r.source == "s = q @ k.transpose(-2, -1)"
    assert str(r).splitlines()[1] == "  第 2 行：`s = q @ k.transpose(-2, -1)`"
    assert r.to_dict()["lines"] == [2]


def test_two_name_exercises_take_a_tuple_a_dict_or_a_module():
    from anatomy.course.solutions import heads

    assert grade("heads", (heads.split_heads, heads.merge_heads)).ok
    assert grade("heads", {"split_heads": heads.split_heads, "merge_heads": heads.merge_heads}).ok
    assert grade("heads", heads).ok
    with pytest.raises(LearnError, match="no merge_heads given"):
        grade("heads", {"split_heads": heads.split_heads})


def test_a_module_instance_stands_for_its_class():
    from anatomy.course.solutions.mha import MultiHeadAttention

    r = grade("mha", MultiHeadAttention(8, 2))
    assert r.ok, r.report


def test_the_file_path_goes_through_the_same_grader():
    path = LEARNERS / "mha_shared_qkv_linear.py"
    from_file = check("mha", path)
    from anatomy.course import get
    from anatomy.course.grader import load

    cls = load(get("mha"), path).MultiHeadAttention
    from_object = grade("mha", cls)
    assert (
        (from_file.pitfall, from_file.lines)
        == (from_object.pitfall, from_object.lines)
        == ("shared_qkv_projection", [16, 17, 18])
    )
    assert subject_of(get("mha"), cls).file == str(path)


def test_the_same_time_limit_guards_an_object():
    ns = cell("def attention(q, k, v, mask=None):\n    while True:\n        pass\n", "<cell-9>")
    with pytest.raises(LearnError, match="time limit"):
        grade("attention", ns["attention"], timeout=1.0)


def test_the_short_answer_is_at_most_8_lines_and_the_details_hold_the_rest():
    r = check("block", LEARNERS / "block_post_norm.py")
    short, full = r.render("en"), r.render("en", details=True)
    assert len(short.splitlines()) <= 8 and "line 32:" in short and "the post: 「Pre-Norm" in short
    assert "hint: x = x + self.attn(self.norm1(x))" in short
    assert "shape table (your code):" in full and "shape table" not in short
    zh = r.render("zh")
    assert "还没通过" in zh and "第 32 行" in zh and "原文：" in zh and "提示：" in zh
    ours = re.sub(r"`[^`]*`", "", zh)  # the learner's own line (its comment) left out
    assert not any(word in ours for word in ("hint", "the post", "pitfall", "line "))


def test_a_warning_is_shown_on_a_pass():
    r = check("attention", LEARNERS / "attention_ok_fill_minus_1e4.py")
    assert r.passed and "note: line 10 fills hidden scores with -1e4" in r.render("en")
    assert "注意：第 10 行用 -1e4 填充" in r.render("zh")


def test_no_warning_against_the_inf_fill_the_hint_prescribes():
    from anatomy.course import get, solution_path

    for exercise in ("attention", "mha", "block"):
        r = check(exercise, solution_path(get(exercise)))
        assert r.passed and r.warnings == [], r.render()
        assert "-inf" not in r.render("en").split("\n", 1)[1]


def test_an_error_of_the_learners_code_names_its_line_and_glosses_only_when_asked(tmp_path):
    from anatomy.course.grader import learner_raised
    from anatomy.doctor.loading.building import import_file

    path = tmp_path / "mine.py"
    path.write_text("import torch\n\n\ndef f():\n    return torch.ones(2, 3) @ torch.ones(2, 3)\n", encoding="utf-8")
    try:
        import_file(path, None).f()
    except RuntimeError as caught:
        err = caught
    told = learner_raised(err, "f raised ", "f抛出了错误 ")
    assert told.en.startswith("f raised RuntimeError") and told.en.endswith(
        "(at line 5: `return torch.ones(2, 3) @ torch.ones(2, 3)`)"
    )
    assert "乘不到一起" in told.zh and "第 5 行" in told.zh  # what the torch error means, in Chinese
    plain = learner_raised(err, "training: ", "训练中出错：", gloss=False)
    assert "乘不到一起" not in plain.zh and "第 5 行" in plain.zh and plain.en.startswith("training: RuntimeError")
