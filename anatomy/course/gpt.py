"""The tenth exercise, "your GPT": the learner's block assembled into a whole language model, graded against the
spec's reference (``solutions/gpt.py``) on the learner's own weights, then trained beside it.

The order: the block as the block exercise grades it; the model's logits' shape; the same output twice in
``eval()``; no position moved by a later token (and, when one is, the first layer called without the causal
mask); one shared Parameter for the embedding and the head; then, every parameter drawn anew, the logits equal to
the reference's (eval and train mode, a padded batch) and the loss equal to the reference's (with and without
targets, a padded batch). A difference is named by the wrong assembly that reproduces it (``gpt_parts.WRONG``, the
loss shifted by 0 or 2 or counting pads) and pointed at the learner's line from the recorded forward; what no
pitfall reproduces is said plainly. Last, both models train from the same weights (``gpt_train.py``).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
from torch import nn

from anatomy.course import exercises as ex
from anatomy.course import gpt_lines as gl
from anatomy.course import gpt_parts as gp
from anatomy.course import gpt_words
from anatomy.course.compare import lowered_tol
from anatomy.course.grader import LearnError, Result, Subject, check_signature, run_guarded
from anatomy.course.spec import BrokenRule, _same_file, definition_line
from anatomy.tracing.steps import Recording, Step

EXACT = 1e-9  # float64 code agrees with the reference to ~1e-15 of the logits' size
# a position table computed in float32 in the forward (``torch.arange(t).float()``, common, and invisible to the
# recorder: constants) moves the logits by ~1e-9 of their size; a 1e-5 nudge moves them by ~3e-6 (probe weights
# of std 0.3 give logits of size ~1)
CLOSE = 1e-7


def grade(exercise: ex.Exercise, subject: Subject, timeout: float | None, **options: Any) -> Result:
    path = subject.file
    cls = subject.GPT
    check_signature(cls.__init__, "GPT.__init__", ["vocab_size", "d_model", "n_heads", "n_layers", "block_size"], 5)
    check_signature(cls.forward, "GPT.forward", ["ids", "targets"], 1)
    from anatomy.course.doctor_exercises import grade as grade_block

    as_block = grade_block(ex.get("block"), subject, timeout)  # the exercise's block first, as tiny_lm does
    if not as_block.passed:
        return gpt_words.not_the_block(exercise.id, as_block)
    probe = Probe(subject, timeout)
    found = probe.findings()
    if isinstance(found, Result):
        return found
    result = Result(exercise.id, path, passed=False)
    result.table = probe.table()
    if found is not None:
        return gpt_words.said(result, found)
    from anatomy.course.gpt_train import beside

    return beside(exercise, subject, result, timeout, scaled=probe.scaled, **options)


class Probe:
    """The learner's GPT at the probe's sizes (float64), its recorded forward, and the checks in order."""

    def __init__(self, subject: Subject, timeout: float | None):
        self.subject, self.file, self.timeout = subject, subject.file, timeout
        sz = gp.PROBE
        what = (
            f"building GPT({sz.v}, {sz.d}, {sz.h}, {sz.layers}, {sz.p})",
            f"构造 GPT({sz.v}, {sz.d}, {sz.h}, {sz.layers}, {sz.p}) 时",
        )
        torch.manual_seed(0)
        model, _ = run_guarded(lambda: subject.GPT(sz.v, sz.d, sz.h, sz.layers, sz.p), (), what, timeout, record=False)
        if not isinstance(model, nn.Module):
            raise LearnError(
                f"GPT(...) made a {type(model).__name__}, not an nn.Module",
                f"GPT(...) 得到的是 {type(model).__name__}，不是 nn.Module",
            )
        self.model = model.double().eval()
        self.ids, self.padded = gp.probe_ids(), gp.probe_ids(padded=True)
        self.rec: Recording | None = None

    def run(self, *args: torch.Tensor, model: nn.Module | None = None) -> Any:
        what = ("GPT.forward on ids (2, 6)", "GPT.forward（ids 形状 (2, 6)）")
        return run_guarded(model or self.model, args, what, self.timeout, record=False)[0]

    def findings(self) -> BrokenRule | Result | None:
        """The first thing that differs from the spec (None: nothing does)."""
        for check in (self.shape, self.random_in_eval, self.leak, self.tying, self.logits, self.loss):
            with torch.no_grad():
                found = check()
            if found is not None:
                return found
        return None

    def record(self, ids: torch.Tensor | None = None, train: bool = False, targets: bool = True) -> Recording | None:
        """The forward on ``ids`` (default: the probe's, kept) with targets, recorded (None: it cannot be)."""
        from anatomy.tracing import recorder as rec_mod

        if ids is None and not train and targets and self.rec is not None:
            return self.rec
        ids = self.ids if ids is None else ids
        try:
            with gl.neutral_dropout(self.model) if train else contextlib.nullcontext():
                self.model.train(train)
                inputs = (ids, ids.clone()) if targets else (ids,)
                rec = rec_mod.record(self.model, *inputs, module=self.model, sizes=gp.SIZES)
        except Exception:  # noqa: BLE001 - the verdict stands without the recording; only the line is lost
            return None
        finally:
            self.model.eval()
        if ids is self.ids and not train and targets:
            self.rec = rec
        return rec

    def table(self) -> list[dict[str, Any]]:
        from anatomy.course.compare import table_of

        rows = table_of(self.record(), self.file)
        inside = self._inside()
        steps = {(s.line, s.op) for s in self._steps() if not inside(s)}
        return [r for r in rows if (r["line"], r["op"]) in steps]

    # ------------------------------------------------------------------------------------------------ the checks

    def shape(self) -> Result | None:
        out = gp.logits_of(self.run(self.ids))
        want = (2, gp.T, gp.PROBE.v)
        if isinstance(out, torch.Tensor) and tuple(out.shape) == want:
            return None
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        result = Result("gpt", self.file, passed=False, pitfall="wrong_shape")
        line, source = gl.head_line(self._steps(self.record(targets=False)))
        line, source = (line, source) if line else gl.return_line(self.subject.GPT)
        result.point(line, source)
        en = f"GPT(ids (2, {gp.T})) returned logits {got}; the exercise wants (B, T, V) = {want}"
        zh = f"GPT(ids (2, {gp.T})) 返回的 logits 是 {got}；练习要的是 (B, T, V) = {want}"
        hint = (
            "hint: forward(ids) returns every position's logits, self.head(self.norm(x)) on all of x (a generate "
            "loop takes logits[:, -1] itself)",
            "提示：forward(ids) 要返回每个位置的 logits：对整个 x 做 self.head(self.norm(x))（生成时再自己取 logits[:, -1]）",
        )
        for line_of in (result.brief, result.say):
            line_of(en, zh)
            line_of(*hint)
        return result

    def random_in_eval(self) -> BrokenRule | None:
        torch.manual_seed(1)
        a = gp.logits_of(self.run(self.ids))
        torch.manual_seed(2)
        b = gp.logits_of(self.run(self.ids))
        if torch.equal(a.nan_to_num(0), b.nan_to_num(0)):
            return None
        rec = self.record()
        types = rec.module_types if rec is not None else {}
        step = next((s for s in self._steps() if s.op in gl.DROPS and types.get(s.module) != "Dropout"), None)
        return gpt_words.finding("functional_dropout_in_eval", *gl.at(step))

    def leak(self) -> BrokenRule | None:
        """A later token moving an earlier position's logits; then the first layer called without the mask."""
        base = gp.logits_of(self.run(self.ids))
        scale = 1 + float(base.abs().max())
        moved_at = None
        for j in range(gp.T - 1, 0, -1):
            moved = self.ids.clone()
            moved[:, j] = moved[:, j] % (gp.PROBE.v - 1) + 1  # another real token
            diff = (gp.logits_of(self.run(moved)) - base).abs().amax(-1).amax(0)
            earlier = [i for i in range(j) if float(diff[i]) > EXACT * scale]
            if earlier:
                moved_at = (earlier[0], j)
                break
        if moved_at is None:
            return None
        calls = self.calls()
        bad = [(k, c) for k, c in enumerate(calls) if not gl.is_causal(c[1], gp.T)]
        if not bad:
            line, source = gl.head_line(self._steps())
            return BrokenRule(
                "unexplained",
                line,
                source,
                (
                    f"position {moved_at[0]} sees token {moved_at[1]} although every block gets the causal mask: "
                    "something outside the blocks mixes the positions",
                    f"每个 Block 都拿到了因果掩码，位置 {moved_at[0]} 却仍然看得到第 {moved_at[1]} 个 token："
                    "Block 之外有东西把各个位置混在了一起",
                ),
                gpt_words.CAUSAL,
                (
                    "the blocks alone may mix positions, and only under the mask",
                    "只有 Block 可以混合位置，而且要在掩码之下",
                ),
            )
        k, (_, mask, line, source) = bad[0]
        how = "no mask" if mask is None else "a mask that is not causal"
        how_zh = "没有拿到掩码" if mask is None else "拿到的掩码不是因果的"
        every = len(bad) == len(calls)
        extra = (
            f" (layer {k} of {len(calls)} gets {how}"
            + ("; so does every layer" if every and len(calls) > 1 else "")
            + f": position {moved_at[0]} sees token {moved_at[1]})",
            f"（第 {k} 层（共 {len(calls)} 层）{how_zh}"
            + ("；每一层都是这样" if every and len(calls) > 1 else "")
            + f"：位置 {moved_at[0]} 看得到第 {moved_at[1]} 个 token）",
        )
        found = gpt_words.finding("causal_mask_missing_in_layer", line or None, source, extra)
        found.more_lines = sorted({c[2] for _, c in bad if c[2]})
        return found

    def calls(self) -> list[gp.Call]:
        return gp.block_calls(self.model, self.subject.TransformerBlock, lambda: self.run(self.ids), self.file)

    def tying(self) -> BrokenRule | None:
        calls = self.calls()
        if not calls:
            raise LearnError(
                "GPT.forward never calls your TransformerBlock: the exercise stacks n_layers of your block",
                "GPT.forward 从没调用你的 TransformerBlock：练习要把 n_layers 个你的 Block 叠起来",
            )
        try:
            self.parts = gp.find(self.model, calls)
        except ValueError as err:
            raise LearnError(f"GPT: {err}", f"GPT：{err}") from None
        heads = self.parts.heads
        if len(heads) < 2:
            return None
        tok = next(p for n, p in heads if n == self.parts.tok_name)
        name, head = next((n, p) for n, p in heads if n != self.parts.tok_name)
        copied = torch.equal(tok.detach(), head.detach())
        owner = name.rpartition(".")[0].rpartition(".")[2] or name
        line, source = gl.copy_line(self.subject.GPT, owner, self.file) if copied else (0, "")
        if not line:
            line, source = definition_line(self.subject.GPT, owner, self.file)
        return gpt_words.finding("tied_by_copy" if copied else "head_not_tied", line or None, source)

    def logits(self) -> BrokenRule | None:
        gp.randomize(self.model)
        self.parts = gp.find(self.model, self.calls())
        tol = max(CLOSE, lowered_tol(self.record()) or 0.0)
        mine = gp.logits_of(self.run(self.ids))
        refs = [gp.reference(self.parts, s) for s in (1.0, math.sqrt(gp.PROBE.d))]
        gaps = [gp.relative_gap(mine, gp.logits_of(r(self.ids))) for r in refs]
        if min(gaps) > tol:
            return self._assembly(mine, refs[0], tol, gaps)
        self.scaled = gaps.index(min(gaps)) == 1
        self.ref = refs[int(self.scaled)]
        padded = gp.logits_of(self.run(self.padded))
        want = gp.logits_of(self.ref(self.padded))
        real = torch.arange(gp.T)[None, :] < torch.tensor(gp.LENGTHS)[:, None]  # (B, T)
        if gp.relative_gap(padded[real], want[real]) > tol:
            return self._unexplained(
                "on a padded batch the real tokens' logits differ",
                "带 padding 的批次里真实 token 的 logits 不同",
                rec=self.record(self.padded),
            )
        with gl.neutral_dropout(self.model), gl.neutral_dropout(self.ref):
            self.model.train(), self.ref.train()
            try:
                trained, want = gp.logits_of(self.run(self.ids)), gp.logits_of(self.ref(self.ids))
            finally:
                self.model.eval(), self.ref.eval()
        if gp.relative_gap(trained, want) > tol:
            return self._unexplained(
                "in train() mode (dropout off) the logits differ",
                "train() 模式下（关掉 dropout）logits 不同",
                rec=self.record(train=True),
            )
        return None

    def _assembly(self, mine: torch.Tensor, ref: nn.Module, tol: float, gaps: list[float]) -> BrokenRule:
        for name, tries in gp.WRONG.items():
            for kw in tries:
                for s in (kw["scale"],) if "scale" in kw else (1.0, math.sqrt(gp.PROBE.d)):
                    args = {**kw, "scale": s}
                    with torch.no_grad():
                        variant = gp.wrong(ref, self.ids, **args)
                    if gp.relative_gap(mine, variant) <= tol:
                        return gpt_words.finding(name, *gl.at(self._pointer(name)))
        return self._unexplained(
            f"the logits differ from the reference's by up to {min(gaps):.3g} of their size",
            f"logits 与参考实现最多相差其大小的 {min(gaps):.3g}",
        )

    def loss(self) -> BrokenRule | None:
        tol = max(CLOSE, lowered_tol(self.record()) or 0.0)
        for ids, padded in ((self.ids, False), (self.padded, True)):
            out = self.run(ids, ids.clone())
            logits, loss = gp.logits_of(out), gp.loss_of(out)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                line, source = gl.return_line(self.subject.GPT)
                return BrokenRule(
                    "wrong_return",
                    line,
                    source,
                    (
                        f"GPT(ids, targets) returned {type(loss).__name__} as the loss; the exercise wants "
                        "(logits, loss), the loss a scalar tensor",
                        f"GPT(ids, targets) 返回的损失是 {type(loss).__name__}；练习要的是 (logits, loss)，损失为标量张量",
                    ),
                    gpt_words.NONE,
                    ("return logits, loss", "return logits, loss"),
                )
            if gp.relative_gap(logits, gp.logits_of(self.run(ids))) > tol:
                return self._unexplained(
                    "with targets the logits differ from those without",
                    "传入 targets 时 logits 与不传时不同",
                    rec=self.record(ids),
                )
            want = gp.loss_of(self.ref(ids, ids.clone()))  # the solution's loss on the same logits
            if gp.relative_gap(loss.reshape(()), want) <= tol:
                continue
            tries = (
                (("pads_in_loss", 1, False),)
                if padded
                else (("targets_not_shifted", 0, True), ("targets_shifted_twice", 2, True))
            )
            for name, shift, ignore in tries:
                if gp.relative_gap(loss.reshape(()), gp.shifted_loss(logits, ids, shift, ignore)) <= tol:
                    extra = (
                        f" (your loss {float(loss):.4f}, the spec's {float(want):.4f})",
                        f"（你的损失 {float(loss):.4f}，规定的 {float(want):.4f}）",
                    )
                    return gpt_words.finding(name, *gl.at(self._pointer(name)), extra)
            return self._unexplained(
                f"the loss is {float(loss):.6g}, the spec's {float(want):.6g}"
                + (" on a padded batch" if padded else ""),
                f"损失是 {float(loss):.6g}，规定的是 {float(want):.6g}" + ("（带 padding 的批次）" if padded else ""),
                rec=self.record(ids),
                loss=True,
            )
        return None

    # ------------------------------------------------------------------------------------------------ the lines

    def _steps(self, rec: Recording | None = None) -> list[Step]:
        rec = rec or self.record()
        return [s for s in rec.steps if s.data and _same_file(s.file, self.file)] if rec is not None else []

    def _inside(self) -> Any:
        paths = [p for p in getattr(getattr(self, "parts", None), "block_paths", []) if p]
        return lambda s: any(s.module == p or s.module.startswith(p + ".") for p in paths)

    def _pointer(self, name: str) -> Step | None:
        """The learner's step a finding points at, read from the recorded forward (outside the blocks)."""
        if name == "pads_in_loss" and (loss_module := self._loss_module()) is not None:
            return loss_module
        return gl.pointer(name, self._steps(), self._inside())

    def _loss_module(self) -> Step | None:
        for attr, m in self.model.named_modules():
            if isinstance(m, nn.CrossEntropyLoss) and m.ignore_index != gp.PAD:
                line, source = definition_line(self.subject.GPT, attr.rpartition(".")[2], self.file)
                if line:
                    return Step(0, "CrossEntropyLoss", self.file, line, source, attr, [], [], True)
        return None

    def _unexplained(self, en: str, zh: str, loss: bool = False, rec: Recording | None = None) -> BrokenRule:
        steps = self._steps(rec)
        scalars = [s for s in steps if s.outputs and not s.outputs[0].shape]
        step = next((s for s in scalars if s.op in gl.LOSSES), None) or gl.last(scalars) if loss else None
        line, source = gl.at(step) if step is not None else gl.head_line(steps)
        return BrokenRule(
            "unexplained",
            line,
            source,
            (en + "; no known pitfall makes this output", zh + "；已知的坑都解释不了"),
            gpt_words.NONE if loss else gpt_words.ADDED,
            (
                "compare your forward with the shapes above: embedding + positions, every block with the mask, "
                "the final norm, the tied head, the shifted loss",
                "把你的 forward 与上面的形状对照：词嵌入 + 位置、每个 Block 都带掩码、最后的 Norm、共享权重的输出头、错开一位的损失",
            ),
        )
