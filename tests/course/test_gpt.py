"""The tenth exercise, "your GPT": a correct model (in its own style) trains beside the reference from the same
weights and ends within the margin, a forward equal to the reference's that learns differently is NOT YET, each
wrong assembly is named at the learner's line in English and Chinese (the attempts under ``learners/gpt_*``,
graded by test_learners.py), and the exercise starts and checks from the command line like the others."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from anatomy.cli.main import main
from anatomy.course import grade
from anatomy.course.check import LearnError, check
from anatomy.course.tiny_lm import MARGIN, Setup

LEARNERS = Path(__file__).parent / "learners"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    said: list = []
    figure = tmp_path_factory.mktemp("gpt") / "gpt_loss.png"
    result = check("gpt", LEARNERS / "gpt_ok_sinusoidal_zh.py", figure_path=figure, progress=said.append)
    return result, said


def test_a_correct_gpt_learns_like_the_reference_from_the_same_weights(trained):
    r, _ = trained
    assert r.passed and abs(r.extra["gap_nats"]) <= MARGIN / 2, r.render()
    curves = r.extra["curves"]
    assert curves["yours"]["steps"] == curves["reference"]["steps"] and curves["yours"]["steps"][-1] == Setup().steps
    assert curves["reference"]["val"][-1] < curves["reference"]["val"][0] - 0.3  # the reference does learn
    assert "logits and loss equal the reference's on every probe" in r.render()
    assert "相差" in r.render("zh") and "通过" in r.render("zh")


def test_progress_is_reported_and_the_figure_drawn(trained):
    r, said = trained
    steps = [line for line in said if "validation loss" in line[0]]
    assert len(steps) == Setup().steps // Setup().eval_every and "(reference " in steps[0][0]
    assert "第 300/300 步" in steps[-1][1]
    assert Path(r.extra["figure"]).stat().st_size > 1000


def test_a_forward_equal_to_the_reference_that_learns_differently_is_not_yet(tmp_path):
    path = tmp_path / "10_gpt.py"
    source = (LEARNERS / "gpt_ok_llama_tutorial.py").read_text(encoding="utf-8")
    marked = "            hidden_states = decoder_layer(hidden_states, causal_mask[None, None, :, :])\n"
    assert marked in source
    path.write_text(source.replace(marked, marked.replace(")\n", ").detach()\n")), encoding="utf-8")
    r = check("gpt", path, steps=100)
    assert not r.passed and r.pitfall == "learns_worse" and r.extra["gap_nats"] > MARGIN, r.render()
    assert "logits and loss equal the reference's" in r.render() and ".detach()" in r.render()


def test_each_finding_speaks_both_languages_with_the_post_and_a_hint():
    r = check("gpt", LEARNERS / "gpt_positions_after_blocks.py")
    en, zh = r.render("en", details=True), r.render("zh", details=True)
    assert r.pitfall == "positions_after_blocks" and "line 55" in en and "第 55 行" in zh
    assert "把位置向量加到词向量上" in en and "hint: " in en and "提示：" in zh
    r = check("gpt", LEARNERS / "gpt_mask_first_layer_only.py")
    assert "layer 1 of 2 gets no mask" in r.render() and "第 1 层" in r.render("zh")


def test_a_block_that_is_not_the_exercises_is_named_first(tmp_path):
    source = (LEARNERS / "gpt_ok_nanogpt_style.py").read_text(encoding="utf-8")
    path = tmp_path / "10_gpt.py"
    path.write_text(source.replace("* (1.0 / math.sqrt(k.size(-1)))", ""), encoding="utf-8")
    r = check("gpt", path)
    assert not r.passed and r.pitfall == "no_scaling" and "curves" not in r.extra, r.render()
    assert "not yet the block exercise's" in r.render()


def test_graded_from_python_as_in_a_notebook():
    from anatomy.course.solutions import block, gpt

    r = grade("gpt", {"GPT": gpt.GPT, "TransformerBlock": block.TransformerBlock}, steps=4)
    assert r.ok, str(r)
    with pytest.raises(LearnError, match="no TransformerBlock given"):
        grade("gpt", {"GPT": gpt.GPT})


def test_code_that_cannot_be_graded_gets_one_clear_message(tmp_path):
    source = (LEARNERS / "gpt_ok_mingpt_style.py").read_text(encoding="utf-8")
    path = tmp_path / "10_gpt.py"
    path.write_text(
        source.replace("    def forward(self, idx, targets=None):", "    def forward(self, idx):"), encoding="utf-8"
    )
    with pytest.raises(LearnError) as err:
        check("gpt", path)
    assert "GPT.forward(idx): the exercise calls it as GPT.forward(ids, targets)" in err.value.en
    assert "\n" not in err.value.en


def test_start_and_check_from_the_command_line(tmp_path, capsys):
    assert main(["learn", "start", "gpt", "--dir", str(tmp_path), "--lang", "zh"]) == 0
    skeleton = (tmp_path / "10_gpt.py").read_text(encoding="utf-8")
    assert (
        skeleton.startswith("# anatomy learn · exercise: gpt") and "忽略 PAD" in skeleton and "粘贴到这里" in skeleton
    )
    assert "class GPT(nn.Module)" in skeleton and "class TransformerBlock(nn.Module)" in skeleton
    capsys.readouterr()
    assert main(["learn", "check", "gpt", "--dir", str(tmp_path)]) == 1  # the skeleton's block returns None
    assert "NoneType" in capsys.readouterr().out
    shutil.copy(LEARNERS / "gpt_ok_functional_head.py", tmp_path / "10_gpt.py")
    argv = ["learn", "check", "gpt", "--dir", str(tmp_path), "--steps", "4", "--format", "json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and report["shape_table"] and Path(report["figure"]).name == "gpt_loss.png"
    assert main(["learn", "solution", "gpt", "--dir", str(tmp_path)]) == 0
    assert "self.head.weight = self.tok.weight" in capsys.readouterr().out


def test_the_probe_leaves_functional_dropout_as_it_was():
    import torch.nn.functional as F

    from anatomy.course.gpt_lines import neutral_dropout

    before = (F.dropout, torch.dropout)
    with neutral_dropout(torch.nn.Dropout(0.5)):
        x = torch.ones(4)
        assert torch.equal(F.dropout(x, 0.9), x)
    assert (F.dropout, torch.dropout) == before


def test_every_finding_of_the_exercise_is_a_pitfall_record():
    from anatomy.course import gpt_parts, gpt_words
    from anatomy.pitfalls import records

    names = set(gpt_parts.WRONG) | set(gpt_words.COURSE) | {"head_not_tied"}
    assert {n for n in names if records.get(n) is None} == set()
    assert all(gpt_words.COURSE[n][1] and gpt_words.COURSE[n][2] for n in gpt_words.COURSE)  # a hint, en and zh
