"""The gpt exercise's last step: the learner's GPT trains beside the reference GPT, the way tiny_lm trains a block.

Both start from the learner's own initial weights (the reference is ``solutions/gpt.py`` given them, its blocks
copies of the learner's: only the assembly differs), see the same batches of the embedded Shakespeare corpus
(id 0 is PAD, the characters 1 .. V-1) through :func:`anatomy.course.tiny_lm.fit`, with dropout off in both (its
random draws would differ). Each trains on its own loss; both are validated on the spec's loss. The learner's
passes when its validation loss ends within :data:`anatomy.course.tiny_lm.MARGIN` nats of the reference's: a
forward that equals the reference but learns differently (a gradient cut with ``.detach()``, a table that does
not train) shows here.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from anatomy.course import exercises as ex
from anatomy.course import gpt_parts as gp
from anatomy.course.grader import LearnError, Result, Subject, run_guarded
from anatomy.course.tiny_lm import MARGIN, Curve, Setup, _data, figure, fit
from anatomy.doctor.loading.subject import one_line


def setup_for(steps: int | None) -> Setup:
    return Setup() if steps is None else Setup(steps=steps, eval_every=max(1, min(50, steps // 4)))


def corpus(setup: Setup) -> tuple[int, torch.Tensor, torch.Tensor]:
    """The tiny LM's characters moved up by one: id 0 is the spec's PAD."""
    vocab, train_ids, val_ids = _data(setup)
    return vocab + 1, train_ids + 1, val_ids + 1


def pair(
    subject: Subject, setup: Setup, vocab: int, scale: float, timeout: float | None
) -> tuple[nn.Module, nn.Module]:
    """The learner's GPT at the training's sizes and the reference on its initial weights."""
    sz = gp.Sizes(v=vocab, d=setup.d_model, h=setup.n_heads, layers=setup.n_layers, p=setup.block)
    what = (
        f"building GPT({sz.v}, {sz.d}, {sz.h}, {sz.layers}, {sz.p})",
        f"构造 GPT({sz.v}, {sz.d}, {sz.h}, {sz.layers}, {sz.p}) 时",
    )
    torch.manual_seed(setup.seed)
    mine, _ = run_guarded(lambda: subject.GPT(sz.v, sz.d, sz.h, sz.layers, sz.p), (), what, timeout, record=False)
    ids = torch.arange(1, sz.p + 1)[None] % sz.v
    calls = gp.block_calls(
        mine,
        subject.TransformerBlock,
        lambda: run_guarded(mine, (ids,), ("GPT.forward", "GPT.forward"), timeout, record=False),
        subject.file,
    )
    try:
        ref = gp.reference(gp.find(mine, calls, sz), scale, sz).float()
    except ValueError as err:  # the probe found the parts; at the training's sizes they must be there too
        raise LearnError(f"GPT at d_model {sz.d}: {err}", f"GPT（d_model {sz.d}）：{err}") from None
    return mine, ref


def beside(
    exercise: ex.Exercise,
    subject: Subject,
    result: Result,
    timeout: float | None,
    *,
    scaled: bool = False,
    steps: int | None = None,
    figure_path: Any = None,
    progress: Any = None,
) -> Result:
    """Train both; PASS when the learner's ends within MARGIN nats of the reference's."""
    from anatomy.course.gpt_lines import neutral_dropout

    setup = setup_for(steps)
    vocab, train_ids, val_ids = corpus(setup)
    scale = math.sqrt(setup.d_model) if scaled else 1.0  # the embedding times sqrt(d_model), as the probe found
    mine_model, ref_model = pair(subject, setup, vocab, scale, timeout)
    if progress is not None:
        progress(
            (
                f"training your GPT beside the reference GPT (the same initial weights): {setup.steps} steps, d_model "
                f"{setup.d_model}, {setup.n_layers} blocks (progress every {setup.eval_every} steps)",
                f"训练你的 GPT（与参考 GPT 对照，初始权重相同）：{setup.steps} 步，d_model {setup.d_model}，"
                f"{setup.n_layers} 个 Block（每 {setup.eval_every} 步报告一次）",
            )
        )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as tiny_lm: one thread is the fastest for a model this small on shared cores
    try:
        with neutral_dropout(ref_model):
            ref = fit(ref_model, setup, train_ids, val_ids, _own_loss, _val_loss)
        with neutral_dropout(mine_model):
            mine = fit(mine_model, setup, train_ids, val_ids, _own_loss, _val_loss, progress=progress, against=ref)
    except LearnError:
        raise
    except Exception as err:  # noqa: BLE001 - the learner's model failed while training
        from anatomy.course.grader import raised_at

        at = raised_at(err)
        raise LearnError(
            f"your GPT failed while training: {one_line(err)}" + (f" (at line {at[0]}: `{at[1]}`)" if at else ""),
            f"你的 GPT 在训练中出错：{one_line(err)}" + (f"（第 {at[0]} 行：`{at[1]}`）" if at else ""),
        ) from None
    finally:
        torch.set_num_threads(threads)
    return _verdict(exercise, result, mine, ref, figure_path)


def _own_loss(model: nn.Module, x: torch.Tensor, _y: torch.Tensor) -> torch.Tensor:
    """The model's own loss, the targets being the ids themselves (the model shifts them)."""
    loss = gp.loss_of(model(x, x.clone()))
    if not isinstance(loss, torch.Tensor):
        raise LearnError("GPT(ids, targets) returned no loss", "GPT(ids, targets) 没有返回损失")
    return loss


def _val_loss(model: nn.Module, x: torch.Tensor, _y: torch.Tensor) -> torch.Tensor:
    """The spec's loss on the model's logits: the same measure for both models."""
    return gp.shifted_loss(gp.logits_of(model(x)), x)


def _verdict(exercise: ex.Exercise, result: Result, mine: Curve, ref: Curve, figure_path: Any) -> Result:
    gap = mine.val[-1] - ref.val[-1]
    result.extra["curves"] = {"yours": vars(mine), "reference": vars(ref)}
    result.extra["gap_nats"] = gap
    result.extra["seconds"] = mine.seconds + ref.seconds
    if figure_path is not None:
        result.extra["figure"] = figure({"your GPT": mine, "reference GPT": ref}, figure_path)
    result.passed = math.isfinite(gap) and gap <= MARGIN
    same = (
        "logits and loss equal the reference's on every probe (eval and train mode, with and without targets, "
        "a padded batch)",
        "logits 和损失在所有探针上都与参考实现一致（eval 与 train 模式、带与不带 targets、带 padding 的批次）",
    )
    en = (
        f"after {mine.steps[-1]} steps from the same weights: validation loss {mine.val[-1]:.4f} (yours) vs "
        f"{ref.val[-1]:.4f} (reference GPT), a gap of {gap:+.4f} nats (pass: <= {MARGIN}); "
        f"{mine.seconds + ref.seconds:.0f} s of training"
    )
    zh = (
        f"从相同的权重训练 {mine.steps[-1]} 步之后：验证损失 {mine.val[-1]:.4f}（你的）对 {ref.val[-1]:.4f}（参考 GPT），"
        f"相差 {gap:+.4f} nats（通过条件：<= {MARGIN}）；训练用了 {mine.seconds + ref.seconds:.0f} 秒"
    )
    result.say(*same)
    result.say(en, zh)
    result.brief(*same)
    result.brief(en, zh)
    if not result.passed:
        result.pitfall = "learns_worse"
        hint = (
            "hint: the same forward learns differently, so a gradient does not flow where the reference's does: "
            "look for .detach(), .data, requires_grad=False, or a table that should train",
            "提示：前向完全相同却学得不一样，说明有梯度没流到参考实现流到的地方：找一找 .detach()、.data、"
            "requires_grad=False，或本该训练的位置表",
        )
        result.say(*hint)
        result.brief(*hint)
    return result
