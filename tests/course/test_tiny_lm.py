"""The last exercise trains the learner's block: a correct one (written differently from ours) ends within 0.05 nats
of the reference block, a block without the scale is visibly worse, the figure draws both curves, progress is
reported while it trains, and a block that cannot be trained gets one clear message."""

from __future__ import annotations

from pathlib import Path

import pytest

from anatomy.course.check import LearnError, check
from anatomy.course.tiny_lm import MARGIN, Setup, reference_block, reference_curve, train

LEARNERS = Path(__file__).parent / "learners"
# The default setup (d_model 64, one head of Dh 64, context 32, 300 steps, lr 1e-2), measured: reference 2.282,
# nn.MultiheadAttention block +0.007, fused qkv + sdpa +0.008, dropout +0.014, no scaling +0.229 nats. Its
# reference curve is stored (tiny_lm_reference.json), so each check trains one model: ~10 s of CPU.


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_lm")
    said: dict[str, list] = {}
    found = {}
    for name in ("block_ok_post_norm_style", "block_no_scaling"):
        said[name] = []
        found[name] = check(
            "tiny_lm", LEARNERS / f"{name}.py", figure_path=out / f"{name}.png", progress=said[name].append
        )
    return found, said


def test_a_correct_block_learns_like_the_reference(results):
    r = results[0]["block_ok_post_norm_style"]
    assert r.passed and abs(r.extra["gap_nats"]) <= MARGIN / 2, r.render()
    curves = r.extra["curves"]
    assert curves["yours"]["steps"] == curves["reference"]["steps"] and curves["yours"]["steps"][-1] == Setup().steps
    assert curves["reference"]["val"][-1] < curves["reference"]["val"][0] - 0.3  # the reference does learn


def test_a_block_without_the_scale_is_visibly_worse(results):
    r = results[0]["block_no_scaling"]
    assert not r.passed and r.extra["gap_nats"] > 3 * MARGIN, r.render()
    assert r.pitfall == "no_scaling" and r.line == 25, r.render()  # the block's own finding, with its line
    assert "形状对了但效果差先看mask和缩放因子" in r.render("zh", details=True)


@pytest.mark.parametrize(
    "fill", ["-2**32+1", "-1e9", "-9e15", "float('-1e9')"], ids=["2pow32", "1e9", "9e15", "float_str"]
)
def test_a_dangerous_fill_in_the_block_is_named_by_the_tiny_lm_too(tmp_path, fill):
    source = (LEARNERS / "block_ok_dropout.py").read_text(encoding="utf-8")
    path = tmp_path / "08_block.py"
    path.write_text(source.replace('float("-inf")', fill), encoding="utf-8")
    r = check("tiny_lm", path, steps=4)
    assert not r.passed and r.pitfall == "fill_minus_1e9" and r.line == 28, r.render()
    assert "line 28" in r.render() and "第 28 行" in r.render("zh")


def test_progress_is_reported_while_it_trains(results):
    said = results[1]["block_ok_post_norm_style"]
    steps = [line for line in said if "validation loss" in line[0]]
    assert len(steps) == Setup().steps // Setup().eval_every and "step 300/300" in steps[-1][0]
    assert "(reference " in steps[0][0] and "第 50/300 步" in steps[0][1]


def test_the_figure_shows_both_curves(results):
    from PIL import Image

    for r in results[0].values():
        path = Path(r.extra["figure"])
        with Image.open(path) as im:
            assert im.format == "PNG" and im.size[0] > 400
            colours = {c for _, c in im.convert("RGB").getcolors(1 << 20)}
        blue, orange = (31, 119, 180), (255, 127, 14)  # matplotlib's first two line colours
        assert blue in colours and orange in colours


def test_a_block_that_sees_the_future_is_stopped_before_training():
    r = check("tiny_lm", LEARNERS / "block_mask_inverted.py")
    assert not r.passed and r.pitfall == "causal_leak" and "curves" not in r.extra
    assert "lets position 0 see position" in str(r.render()) and "True = may attend" in r.render()


def test_a_block_without_a_mask_parameter_gets_one_clear_message(tmp_path):
    path = tmp_path / "08_block.py"
    path.write_text(
        "from torch import nn\n\n\nclass TransformerBlock(nn.Module):\n"
        "    def __init__(self, d_model, n_heads, d_ff):\n        super().__init__()\n"
        "        self.f = nn.Linear(d_model, d_model)\n\n    def forward(self, x):\n"
        "        return x + self.f(x)\n",
        encoding="utf-8",
    )
    with pytest.raises(LearnError) as err:
        check("tiny_lm", path)
    assert "TransformerBlock.forward(x): the exercise calls it as TransformerBlock.forward(x, mask)" in err.value.en
    assert "TypeError" not in err.value.en and "\n" not in err.value.en


def test_the_next_command_is_not_the_one_just_run():
    from anatomy.cli.learn import _next

    assert _next("tiny_lm", False, Path("08_block.py"), "en") == (
        "  next: anatomy learn check block 08_block.py (it names the pitfalls it can see)"
    )
    assert "anatomy learn list" in _next("tiny_lm", True, Path("08_block.py"), "zh")


@pytest.mark.slow
def test_the_stored_reference_curve_is_the_reference_blocks():
    setup = Setup()
    stored = reference_curve(setup)
    fresh = train(reference_block(setup), setup)
    assert stored.steps == fresh.steps
    assert max(abs(a - b) for a, b in zip(stored.val, fresh.val)) < 0.01  # float noise across machines, not a margin
