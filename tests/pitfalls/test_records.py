"""One record per pitfall: every record has what its readers need, and a pitfall added through its record alone
reaches the doctor's tables, its report, its pointers and the course's hint."""

from __future__ import annotations

import re
import subprocess
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from anatomy import pitfalls
from anatomy.components import MultiHeadAttention, wrapping
from anatomy.course import doctor_exercises, functions
from anatomy.doctor import check
from anatomy.doctor.diagnosis import diagnose, sublayer, verdict
from anatomy.doctor.recording import dataflow
from anatomy.doctor.report import pointers, short
from anatomy.doctor.report.findings import PROBE_TITLES, Finding
from anatomy.pitfalls import records
from anatomy.pitfalls.records import Pitfall

ROOT = Path(__file__).resolve().parents[2]
PROBES = set(PROBE_TITLES) | {"masked_weights", "nan_rows"}  # the last two: pointers' own probe names


def test_every_record_has_what_its_readers_need():
    assert len(records.RECORDS) >= 17
    for p in records.RECORDS.values():
        assert records.problems_of(p) == [], p.name
        if p.post_zh is not None:  # the report's "post:" line reads both
            assert p.post_zh.strip() and p.section.startswith("§"), p.name
        if p.pointer is not None:
            assert p.pointer in pointers.RULES, p.name
        assert p.symptoms <= PROBES and set(p.points_for) <= PROBES, p.name
    probes = [probe for p in records.RECORDS.values() for probe in p.points_for]
    assert len(probes) == len(set(probes)), "a probe points at one pitfall"
    aliases = [a for p in records.RECORDS.values() for a in p.course]
    assert len(aliases) == len(set(aliases)), "a course name is one pitfall's"


def test_a_record_missing_what_a_reader_needs_is_refused():
    base = dict(
        name="x_wrong",
        kind="attention",
        severity="error",
        title_en="t",
        title_zh="标题",
        summary_en="s",
        summary_zh="说明",
        section="§1.3",
        post_zh="原文",
        hides_in="here",
    )
    Pitfall(**base)  # complete
    for change, says in (
        ({"kind": "ffn"}, "kind must be one of"),
        ({"severity": "fatal"}, "severity must be one of"),
        ({"title_zh": " "}, "title_zh is empty"),
        ({"summary_en": ""}, "summary_en is empty"),
        ({"section": "1.3"}, "section must start with §"),
        ({"hint_en": "only English"}, "the hint needs both languages"),
        ({"diagnosis": "attention"}, "a diagnosed pitfall needs apply"),
        ({"pointer": "guess"}, "pointer must be one of"),
        ({"needs": "padding"}, "only mean something for a diagnosed pitfall"),
        ({"name": "Bad Name"}, "lower_snake_case"),
    ):
        with pytest.raises(ValueError, match=says):
            Pitfall(**{**base, **change})
    with pytest.raises(ValueError, match="recorded twice"):
        records.register(Pitfall(**{**base, "name": "no_scaling"}))


def test_the_course_names_a_record_gives_are_the_courses():
    course = {p.name for group in (functions.ATTENTION, functions.HEADS, functions.MASKS) for p in group}
    course |= {"fill_minus_1e9", "transpose_before_reshape", "shared_layernorm"}  # fill.py, doctor_exercises, spec
    for p in records.RECORDS.values():
        assert set(p.course) <= course, (p.name, set(p.course) - course)


def test_the_doctors_tables_are_the_records():
    assert diagnose.attention_faults() == [
        "no_scaling",
        "scale_by_d_model",
        "split_without_transpose",
        "merge_wrong_transpose",
        "mask_after_softmax",
        "padding_mask_on_queries",
        "causal_off_by_one",
        *diagnose.attention_faults()[7:],
    ]
    assert diagnose.block_faults() == ["shared_layernorm", "no_residual", "norm_on_residual_path"]
    assert sublayer.block_fault_keys()[:4] == [
        "no_residual@attn",
        "no_residual@ffn",
        "norm_on_residual_path@attn",
        "norm_on_residual_path@ffn",
    ]
    assert "norm_on_query_only" in sublayer.block_fault_keys()
    assert verdict.cause("causal_leak", ["split_without_transpose", "causal_off_by_one"]) == "causal_off_by_one"
    assert records.for_probe("token_order") == "split_without_transpose"
    assert dataflow.about_the_mask(Finding("diagnosis", "error", "", "", fault="causal_off_by_one"))
    assert records.hint("transpose_before_reshape") == (
        "reshape first, then transpose: x.reshape(b, t, h, d_k).transpose(1, 2)",
        "先 reshape 再 transpose：x.reshape(b, t, h, d_k).transpose(1, 2)",
    )
    assert records.title("merge_without_transpose") == "heads merged without transposing back"  # a course name


# --- a pitfall added through its record alone ----------------------------------------------------------------

NAME = "scores_tripled_xq"  # a made-up pitfall: named nowhere but in this file


def _triple_scale(root, undo, factor=3.0):
    """The bug zoo's switch for it: every attention module's scale multiplied by ``factor``."""

    def wrap(inner):
        def tripled(self, q, k, v, ctx, args):
            return inner(self, q, k, v, ctx, replace(args, scale=args.scale * factor))

        return tripled

    for attn in [m for m in root.modules() if isinstance(m, MultiHeadAttention)]:
        undo.append(wrapping.wrap_method(attn, "attend", "change", wrap))


RECORD = Pitfall(
    NAME,
    "attention",
    "error",
    "scores scaled three times too much",
    "分数被放大了三倍",
    "The scores are multiplied by 3/sqrt(d_k): the softmax is three times as sharp as the post's.",
    "分数乘以 3/sqrt(d_k)：softmax 比原文的尖锐三倍。",
    "§1.3",
    "除以sqrt(d_k)的本质是把点积结果的方差重新拉回到1附近让softmax有正常的温度",
    "`scores = 3 * q @ k.transpose(-2, -1) / math.sqrt(d_k)`",
    "drop the factor 3: scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)",
    "去掉系数 3：scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)",
    apply=_triple_scale,
    defaults={"factor": 3.0},
    diagnosis="attention",
    pointer="scale",
)

LEARNER = """
import math
import torch
from torch import nn


class Tripled(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x, mask=None):
        b, t, _ = x.shape
        q, k, v = (f(x).view(b, t, self.h, self.d_k).transpose(1, 2) for f in (self.q, self.k, self.v))
        scores = q @ k.transpose(-2, -1) * (3 / math.sqrt(self.d_k))
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        w = scores.softmax(-1)
        return self.o((w @ v).transpose(1, 2).reshape(b, t, -1))
"""


@pytest.fixture
def added():
    remove = records.register(RECORD)
    try:
        yield RECORD
    finally:
        remove()
    assert NAME not in records.RECORDS


def test_a_pitfall_added_through_its_record_alone_reaches_every_reader(added, tmp_path):
    assert NAME in pitfalls.FAULTS and NAME in pitfalls.fault_names()  # the bug zoo
    model = MultiHeadAttention(d_model=16, n_heads=4).double().eval()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    right = model(x)[0]
    with pitfalls.inject(model, NAME):  # switched on in our own module
        assert not torch.allclose(model(x)[0], right)
    assert torch.equal(model(x)[0], right)
    assert NAME in diagnose.attention_faults()  # the doctor's table
    file = tmp_path / "tripled.py"
    file.write_text(textwrap.dedent(LEARNER))
    report = check(f"{file}:Tripled", d_model=16, n_heads=4)
    assert NAME in report.faults and report.exit_code() == 1, report.render()  # the diagnosis names it
    text, zh = report.render("en"), report.render("zh")
    assert "scores scaled three times too much" in text and "分数被放大了三倍" in zh  # the report's title
    assert RECORD.summary_en in text.replace("\n    ", " ") or RECORD.summary_en[:30] in text
    lines = {w["line"] for f in report.findings if f.fault == NAME for w in f.where}
    assert 16 in lines, report.render()  # the pointer: the learner's scaling line
    assert short.short_answer(report)[0].endswith("scores scaled three times too much")
    assert records.hint(NAME) == (RECORD.hint_en, RECORD.hint_zh)  # the course's hint
    assert doctor_exercises.records is records  # the course reads the same records


def test_the_made_up_pitfall_is_named_in_this_file_only():
    """Adding it took this file and nothing else: no table anywhere in the package lists it."""
    found = subprocess.run(
        ["grep", "-rl", NAME, "anatomy", "tests", "docs"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    assert sorted(found) == ["tests/pitfalls/test_records.py"]
    tables = re.compile(r"^\s*\"(no_scaling|causal_off_by_one)\"", re.M)
    for path in (ROOT / "anatomy").rglob("*.py"):
        if path.parent.name != "pitfalls" and "course" not in path.parts:
            assert not tables.search(path.read_text(encoding="utf-8")), f"{path} lists pitfalls again"
