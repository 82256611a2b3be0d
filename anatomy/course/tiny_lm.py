"""The last exercise: the learner's ``TransformerBlock`` trains a tiny character LM beside the reference block.

Both models are the same around the block (token embedding, the sinusoidal table, two blocks under a causal mask
given in the exercise's convention, a final LayerNorm and a linear head), start from the same seed and
see the same batches of the embedded Shakespeare corpus. The learner's block passes when its validation loss ends
within :data:`MARGIN` nats of the reference block's. A block that passes every shape check but learns worse (no
scaling, a leaking mask, Post-Norm at depth without warm-up) shows here, and the figure draws both curves.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from anatomy.course import exercises as ex
from anatomy.course.grader import LearnError, Result, Subject, check_signature, learner_raised, run_guarded

REFERENCE_FILE = Path(__file__).with_name("tiny_lm_reference.json")  # the reference block's curve per setup

MARGIN = 0.05  # nats

MakeBlock = Callable[[], nn.Module]  # a fresh block (learner's or reference), built at the setup's sizes
ProgressFn = Callable[[tuple[str, str]], None]  # one (en, zh) line of training progress


@dataclass(frozen=True)
class Setup:
    d_model: int = 64
    n_heads: int = 1  # Dh = 64, the post's d_k: unscaled scores have a standard deviation near 8
    n_layers: int = 2
    block: int = 32
    batch: int = 16
    steps: int = 300
    lr: float = 1e-2
    eval_every: int = 50
    eval_batches: int = 8
    seed: int = 0


@dataclass
class Curve:
    steps: list[int] = field(default_factory=list)
    train: list[float] = field(default_factory=list)
    val: list[float] = field(default_factory=list)
    seconds: float = 0.0


class TinyLM(nn.Module):
    """Embedding + sinusoidal positions -> ``blocks`` (each ``block(x, mask)``) -> LayerNorm -> head."""

    pe: torch.Tensor
    causal: torch.Tensor

    def __init__(self, vocab: int, setup: Setup, make_block: MakeBlock) -> None:
        super().__init__()
        from anatomy.components.positional.sinusoidal import sinusoidal_table

        self.embed = nn.Embedding(vocab, setup.d_model)  # N(0, 1): as large as the positional table
        self.register_buffer(
            "pe", sinusoidal_table(torch.arange(setup.block), setup.d_model), persistent=False
        )  # (T, D)
        self.blocks = nn.ModuleList(make_block() for _ in range(setup.n_layers))
        self.norm = nn.LayerNorm(setup.d_model)
        self.head = nn.Linear(setup.d_model, vocab, bias=False)
        self.register_buffer(
            "causal", torch.ones(setup.block, setup.block, dtype=torch.bool).tril(), persistent=False
        )  # (T, S), True = may attend

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        x = self.embed(ids) + self.pe[:t]  # (B, T, D)
        mask = self.causal[:t, :t][None, None]  # (1, 1, T, S): the exercise's convention
        for block in self.blocks:
            x = block(x, mask)
            if isinstance(x, tuple):  # a block that also returns its weights
                x = x[0]
        logits: torch.Tensor = self.head(self.norm(x))  # (B, T, V)
        return logits


def _data(setup: Setup) -> tuple[int, torch.Tensor, torch.Tensor]:
    from anatomy.data.corpora import corpus_splits

    splits = corpus_splits("shakespeare", seed=0)
    chars = sorted(set(splits["train"]) | set(splits["val"]))
    index = {c: i for i, c in enumerate(chars)}

    def encode(s: str) -> torch.Tensor:
        return torch.tensor([index[c] for c in s], dtype=torch.long)

    return len(chars), encode(splits["train"]), encode(splits["val"])


def _batch(data: torch.Tensor, setup: Setup, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    starts = torch.randint(0, len(data) - setup.block - 1, (setup.batch,), generator=g)
    x = torch.stack([data[s : s + setup.block] for s in starts.tolist()])  # (B, T)
    y = torch.stack([data[s + 1 : s + setup.block + 1] for s in starts.tolist()])  # (B, T)
    return x, y


def train(
    make_block: MakeBlock,
    setup: Setup = Setup(),
    *,
    deadline: float | None = None,
    progress: ProgressFn | None = None,
    against: Curve | None = None,
) -> Curve:
    """Train a :class:`TinyLM` of ``make_block()`` blocks; the same batches for every block at the same seed."""
    threads = torch.get_num_threads()
    torch.set_num_threads(
        1
    )  # a model this small: one thread 33 ms a step, two threads on a shared 2-core machine 1-2 s
    try:
        return _train(make_block, setup, deadline, progress, against)
    finally:
        torch.set_num_threads(threads)


def _train(
    make_block: MakeBlock, setup: Setup, deadline: float | None, progress: ProgressFn | None, against: Curve | None
) -> Curve:
    vocab, train_ids, val_ids = _data(setup)
    torch.manual_seed(setup.seed)
    model = TinyLM(vocab, setup, make_block)
    loss_fn = nn.CrossEntropyLoss()

    def next_token(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = loss_fn(m(x).flatten(0, 1), y.flatten())
        return out

    return fit(model, setup, train_ids, val_ids, next_token, next_token, deadline, progress, against)


LossOf = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]  # (model, x, y) -> the batch's loss


def fit(
    model: nn.Module,
    setup: Setup,
    train_ids: torch.Tensor,
    val_ids: torch.Tensor,
    train_loss: LossOf,
    val_loss: LossOf,
    deadline: float | None = None,
    progress: Callable[[tuple[str, str]], None] | None = None,
    against: Curve | None = None,
) -> Curve:
    """The loop every trained exercise shares (tiny_lm, gpt): AdamW, a 30-step warm-up, clipped gradients, the same
    batches at the same seed; ``train_loss(model, x, y)`` and ``val_loss(model, x, y)`` on a batch (x, y = x
    shifted by one). Returns the :class:`Curve`."""
    opt = torch.optim.AdamW(model.parameters(), lr=setup.lr, weight_decay=0.0)
    g, gv = torch.Generator().manual_seed(setup.seed), torch.Generator().manual_seed(setup.seed + 1)
    val_batches = [_batch(val_ids, setup, gv) for _ in range(setup.eval_batches)]
    curve, start = Curve(), time.monotonic()
    for step in range(1, setup.steps + 1):
        model.train()
        x, y = _batch(train_ids, setup, g)
        warm = min(1.0, step / 30)
        for group in opt.param_groups:
            group["lr"] = setup.lr * warm
        loss = train_loss(model, x, y)
        opt.zero_grad(set_to_none=True)
        torch.autograd.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % setup.eval_every == 0 or step == setup.steps:
            model.eval()
            with torch.no_grad():
                val = sum(float(val_loss(model, a, b)) for a, b in val_batches)
            curve.steps.append(step)
            curve.train.append(float(loss.detach()))
            curve.val.append(val / len(val_batches))
            if progress is not None:
                known = against is not None and len(against.val) >= len(curve.val)
                value = against.val[len(curve.val) - 1] if against is not None and known else 0.0
                ref, ref_zh = (f" (reference {value:.3f})", f"（参考 {value:.3f}）") if known else ("", "")
                progress(
                    (
                        f"  step {step}/{setup.steps}: validation loss {curve.val[-1]:.3f}{ref}",
                        f"  第 {step}/{setup.steps} 步：验证损失 {curve.val[-1]:.3f}{ref_zh}",
                    )
                )
            if not math.isfinite(curve.val[-1]):
                break
        if deadline is not None and time.monotonic() > deadline:
            raise LearnError(
                f"training stopped after {step} steps: past the time limit", f"训练在第 {step} 步停下：超过了时限"
            )
    curve.seconds = time.monotonic() - start
    return curve


@functools.lru_cache(maxsize=4)
def reference_curve(setup: Setup) -> Curve:
    """The reference block's curve for ``setup`` (deterministic: the same seed, batches and arithmetic): read from
    :data:`REFERENCE_FILE` when it holds this setup (written by ``python -m anatomy.course.tiny_lm``), else trained
    once per process."""
    import json

    try:
        saved = json.loads(REFERENCE_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = {}
    for entry in saved.get("curves", []):
        if entry.get("setup") == asdict(setup):
            return Curve(**entry["curve"])
    return train(reference_block(setup), setup)


def write_reference(setup: Setup = Setup()) -> Path:
    """Train the reference block for ``setup`` and store its curve in :data:`REFERENCE_FILE`."""
    import json

    curve = train(reference_block(setup), setup)
    REFERENCE_FILE.write_text(
        json.dumps({"torch": torch.__version__, "curves": [{"setup": asdict(setup), "curve": asdict(curve)}]}, indent=1)
        + "\n",
        encoding="utf-8",
    )
    return REFERENCE_FILE


def reference_block(setup: Setup) -> MakeBlock:
    from anatomy.course.solutions.block import TransformerBlock

    # the reference solution keeps the exercise's unannotated signatures (it is what `anatomy learn solution` shows)
    return lambda: TransformerBlock(setup.d_model, setup.n_heads, 4 * setup.d_model)  # type: ignore[no-untyped-call]


def figure(curves: dict[str, Curve], path: str | Path) -> str:
    from anatomy.inspection.figures import _fonts, bi, new_figure, save_figure

    with _fonts():
        fig = new_figure(figsize=(7, 4))  # type: ignore[no-untyped-call, unused-ignore]  # inspection: typed apart
        ax = fig.add_subplot(1, 1, 1)
        for (label, curve), style in zip(curves.items(), ("-", "--", ":")):
            ax.plot(curve.steps, curve.val, style, marker="o", ms=3, label=label)
        ax.set_xlabel(bi("step", "步数"))
        ax.set_ylabel(bi("validation loss (nats)", "验证损失（nats）"))
        ax.legend()
        ax.grid(alpha=0.3)
    return save_figure(fig, path)


def _future_leak(make: MakeBlock, setup: Setup, timeout: float | None) -> tuple[int, int] | None:
    """(query, key) of the first earlier output a later token moves under the causal mask, or None."""
    torch.manual_seed(setup.seed)
    block = make().eval()
    t = 6
    x = torch.randn(1, t, setup.d_model, generator=torch.Generator().manual_seed(5))
    mask = torch.ones(t, t, dtype=torch.bool).tril()[None, None]  # (1, 1, T, S)

    def run(inp: torch.Tensor) -> torch.Tensor:
        out, _ = run_guarded(
            lambda: block(inp, mask),
            (),
            ("one forward of your TransformerBlock", "你的 TransformerBlock 前向一次"),
            timeout,
            record=False,
        )
        first: torch.Tensor = out[0] if isinstance(out, tuple) else out
        return first

    base = run(x)
    for j in range(t - 1, 0, -1):
        moved = x.clone()
        moved[:, j] = torch.randn(setup.d_model, generator=torch.Generator().manual_seed(j))  # a new token there
        diff = (run(moved) - base).abs().amax(-1)[0]  # (T,)
        earlier = [i for i in range(j) if float(diff[i]) > 1e-5]
        if earlier:
            return earlier[0], j
    return None


def grade(
    exercise: ex.Exercise,
    subject: Subject,
    timeout: float | None,
    *,
    steps: int | None = None,
    figure_path: str | Path | None = None,
    progress: ProgressFn | None = None,
) -> Result:
    path = subject.file
    cls = subject.TransformerBlock
    check_signature(cls.__init__, "TransformerBlock.__init__", ["d_model", "n_heads", "d_ff"], 3)
    check_signature(cls.forward, "TransformerBlock.forward", ["x", "mask"], 1)
    setup = Setup() if steps is None else Setup(steps=steps, eval_every=max(1, min(50, steps // 4)))

    def make() -> nn.Module:
        return cls(setup.d_model, setup.n_heads, 4 * setup.d_model)  # type: ignore[no-any-return]  # the learner's class

    probe = torch.zeros(2, 5, setup.d_model)
    out, _ = run_guarded(
        lambda: make()(probe, torch.ones(5, 5, dtype=torch.bool).tril()[None, None]),
        (),
        ("one forward of your TransformerBlock", "你的 TransformerBlock 前向一次"),
        timeout,
        record=False,
    )
    out = out[0] if isinstance(out, tuple) else out
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, 5, setup.d_model):
        raise LearnError(
            f"TransformerBlock(x (2, 5, {setup.d_model}), mask) returned "
            f"{tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}; a block keeps "
            f"the shape (B, T, D): pass the block exercise first (`anatomy learn check block {path}`)",
            f"TransformerBlock 没有保持 (B, T, D) 的形状：请先通过 block 练习（`anatomy learn check block {path}`）",
        )
    from anatomy.course.doctor_exercises import grade as grade_block

    as_block = grade_block(ex.get("block"), subject, timeout)  # the exercise's block: reference, rules, fill
    leak = _future_leak(make, setup, timeout)
    if leak is not None:
        result = Result(exercise.id, path, passed=False, pitfall="causal_leak")
        en = (
            f"under the causal mask your block lets position {leak[0]} see position {leak[1]}: changing a later "
            "token moves an earlier output, so the LM would read the answer it must predict (check the mask's "
            "sense: True = may attend, and that the mask reaches the scores before the softmax)"
        )
        zh = (
            f"在因果掩码下，你的 Block 让位置 {leak[0]} 看到了位置 {leak[1]}：改动后面的 token 会改变前面的输出，"
            "语言模型就会读到它要预测的答案（检查掩码的含义：True 表示可以关注，以及掩码是否在 softmax 之前作用在分数上）"
        )
        result.say(en, zh)
        result.brief(en, zh)
        result.say(f"the post: 「{ex.get('masks').post[0]}」", f"原文：「{ex.get('masks').post[0]}」")
        result.brief(f"the post: 「{ex.get('masks').post[0]}」", f"原文：「{ex.get('masks').post[0]}」")
        return result
    ref = reference_curve(setup)
    if progress is not None:
        progress(
            (
                f"training your block beside the reference: {setup.steps} steps, d_model {setup.d_model}, "
                f"{setup.n_layers} blocks (progress every {setup.eval_every} steps)",
                f"训练你的 Block（与参考 Block 对照）：{setup.steps} 步，d_model {setup.d_model}，{setup.n_layers} 个 Block"
                f"（每 {setup.eval_every} 步报告一次）",
            )
        )
    try:
        mine = train(make, setup, progress=progress, against=ref)
    except LearnError:
        raise
    except Exception as err:  # noqa: BLE001 - the learner's block failed during training
        raise learner_raised(
            err, "your block failed while training: ", "你的 Block 在训练中出错：", gloss=False
        ) from None
    result = Result(exercise.id, path, passed=False)
    gap = mine.val[-1] - ref.val[-1]
    result.extra["curves"] = {"yours": vars(mine), "reference": vars(ref)}
    result.extra["gap_nats"] = gap
    if figure_path is not None:
        result.extra["figure"] = figure({"your block": mine, "reference block": ref}, figure_path)
    result.passed = math.isfinite(gap) and gap <= MARGIN
    en = (
        f"after {mine.steps[-1]} steps: validation loss {mine.val[-1]:.4f} (yours) vs {ref.val[-1]:.4f} "
        f"(reference block), a gap of {gap:+.4f} nats (pass: <= {MARGIN}); {mine.seconds:.0f} s of training"
    )
    zh = (
        f"{mine.steps[-1]} 步之后：验证损失 {mine.val[-1]:.4f}（你的）对 {ref.val[-1]:.4f}（参考 Block），"
        f"相差 {gap:+.4f} nats（通过条件：<= {MARGIN}）；训练用了 {mine.seconds:.0f} 秒"
    )
    result.say(en, zh)
    result.brief(en, zh)
    if not result.passed:
        result.pitfall = "learns_worse"
        result.say(f"the post: 「{exercise.post[0]}」 ({exercise.post[1]})", f"原文：「{exercise.post[0]}」")
        result.brief(f"the post: 「{exercise.post[0]}」", f"原文：「{exercise.post[0]}」")
        result.say(f"hint: {exercise.hint[0]}", f"提示：{exercise.hint[1]}")
        result.brief(f"hint: {exercise.hint[0]}", f"提示：{exercise.hint[1]}")
    return result if as_block.passed else _not_the_block(result, as_block)


def _not_the_block(trained: Result, block: Result) -> Result:
    """The LM trained, but its block is not the exercise's: NOT YET with the block's finding (its pitfall, line,
    post and hint), the training's numbers beside it."""
    result = Result(trained.exercise, trained.file, passed=False, pitfall=block.pitfall)
    result.point(block.line, block.source)
    result.more_lines = list(block.more_lines)
    result.extra = trained.extra
    for lang in ("en", "zh"):
        first = trained.messages[lang][0]
        result.short[lang] = [first] + (block.short[lang] or block.messages[lang][:2])
        lead = "your block is not yet the exercise's block" if lang == "en" else "你的 Block 还不是练习要的 Block"
        result.messages[lang] = trained.messages[lang] + [f"{lead} (anatomy learn check block):"]
        result.messages[lang] += block.messages[lang]
    result.warnings = list(block.warnings)
    return result


if __name__ == "__main__":
    print(write_reference())
