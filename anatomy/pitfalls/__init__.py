"""The bug zoo: the post's mistakes as named, switchable faults on top of correct components.

    from anatomy import pitfalls
    with pitfalls.inject(model, "no_scaling"):
        broken = model(ids).logits                 # the fault is active on this model only
    fixed = model(ids).logits                       # and gone again

A fault never edits a component's code or class: it shadows one attribute, method or sub-module on the
*instances* it targets and restores them on exit (an attention fault wraps the module's attention function through
``MultiHeadAttention.wrap``: pitfalls/faults.py), so other instances of the same class stay correct while it is
active. Each fault carries the post's sentence it comes from, an explanation in English and Chinese, where it
usually hides, and its severity (``error``: real tokens get a wrong output; ``warning``: a hazard that leaves
real tokens right). The claims lab and the doctor use the same registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from torch import nn

from anatomy.pitfalls import faults as F


@dataclass(frozen=True)
class Fault:
    name: str
    section: str
    post_zh: str  # the post's sentence the fault comes from
    summary_en: str
    summary_zh: str
    hides_in: str
    severity: str  # "error" | "warning"
    apply: Callable[..., None] = field(repr=False)
    defaults: dict[str, Any] = field(default_factory=dict)


def _attn(name: str) -> Callable[..., None]:
    """The attention fault ``name``: its wrapper around every attention module's function (pitfalls/faults.py)."""
    return partial(F.attention_fault, name=name)


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in [
        Fault(
            "no_scaling",
            "§1.3",
            "我在自己的实现里试过去掉缩放模型前几步loss确实还在下降但很快就卡住不动了",
            "Scores are not divided by sqrt(d_k): their variance grows with d_k and softmax saturates.",
            "点积没有除以 sqrt(d_k)：分数方差随 d_k 增大，softmax 饱和成硬选择，梯度消失。",
            "the line `scores = q @ k.transpose(-2, -1)`",
            "error",
            _attn("no_scaling"),
        ),
        Fault(
            "scale_by_d_model",
            "§1.3",
            "两个维度为d_k的随机向量的点积方差就是d_k除以它的平方根方差归位",
            "Scores are divided by sqrt(d_model) instead of sqrt(d_k = d_model / h): too soft by a factor sqrt(h).",
            "用 sqrt(d_model) 而不是每个头的 sqrt(d_k) 缩放：注意力被压得过于平均（差 sqrt(h) 倍）。",
            "the scale constant: `math.sqrt(d_model)` where `d_model // h` was meant",
            "error",
            _attn("scale_by_d_model"),
        ),
        Fault(
            "split_without_transpose",
            "§2.2",
            "reshape之后必须紧跟transpose如果顺序反了会把每个头的数据切得乱七八糟",
            "Heads are split by reshaping (B, T, D) straight to (B, H, T, Dh): each 'head' gets slices of other "
            "tokens, so heads mix tokens and positions. Shapes are right; the numbers are not.",
            "拆头时直接 reshape 成 (B, H, T, Dh) 而没有先 (B, T, H, Dh) 再 transpose：每个头拿到的是别的 token 的切片，"
            "形状没错，数值全错。",
            "the split: `x.view(B, H, T, Dh)` instead of `x.view(B, T, H, Dh).transpose(1, 2)`",
            "error",
            _attn("split_without_transpose"),
        ),
        Fault(
            "merge_wrong_transpose",
            "§2.1",
            "并头转置回(batch, seq_len, 8, 64)然后reshape成(batch, seq_len, 512)",
            "Heads are merged by reshaping (B, H, T, Dh) straight to (B, T, D) without transposing back: output "
            "token t is stitched from pieces of several tokens.",
            "并头时没有先 transpose 回 (B, T, H, Dh) 就 reshape：输出的每个 token 由多个 token 的碎片拼成（串味）。",
            "the merge: `out.reshape(B, T, D)` instead of `out.transpose(1, 2).reshape(B, T, D)`",
            "error",
            _attn("merge_wrong_transpose"),
        ),
        Fault(
            "mask_after_softmax",
            "§2.4",
            "如果直接在softmax之后把attention矩阵里某些位置置零效果看似一样实际上softmax已经把这些位置的梯度传给了其他位置数值上并不等价",
            "The mask zeroes weights after softmax: the remaining weights no longer sum to 1 and hidden keys still "
            "shaped the normalisation.",
            "在 softmax 之后才把权重置零：剩下的权重之和不再是 1，被遮住的位置仍影响了归一化。",
            "`weights = softmax(scores) * mask` instead of filling the scores before softmax",
            "error",
            _attn("mask_after_softmax"),
        ),
        Fault(
            "finite_mask_fill",
            "§2.4",
            "我一开始图省事把-inf写成了-1e9结果训练出的模型在生成测试时会逐步出现输出质量下降",
            "Hidden scores are filled with a finite value: harmless in float32 for -1e9, but -1e4 leaks weight, "
            "-1e9 overflows to -inf in float16, and fully masked rows become uniform instead of empty.",
            "用有限值（-1e9、-1e4、finfo.min）代替 -inf 填充：float16 下 -1e9 溢出，-1e4 会泄漏概率，全遮住的行变成均匀分布。",
            "`scores.masked_fill(~mask, -1e9)`",
            "warning",
            _attn("finite_mask_fill"),
            {"fill": -1e9},
        ),
        Fault(
            "inf_fill_no_guard",
            "§2.4",
            "把注意力分数矩阵的上三角部分全部置为-inf然后才做softmax",
            "-inf fill without a guard for rows that see no key: softmax of an all -inf row is NaN, and the NaN "
            "spreads to the next layer and to every gradient.",
            "用 -inf 填充但没有处理整行都被遮住的情况：softmax 得到 NaN，并扩散到下一层和梯度。",
            "left padding with a causal mask, or an all-padding sequence in a batch",
            "warning",
            _attn("inf_fill_no_guard"),
        ),
        Fault(
            "padding_mask_on_queries",
            "§2.4",
            "Padding Mask用于把无效的padding位遮掉",
            "The padding mask hides padded *queries* (rows) instead of padded *keys* (columns): real tokens attend "
            "to padding.",
            "padding mask 遮住了 query（行）而不是 key（列）：真实 token 仍然在关注 padding。",
            "a (B, 1, S, 1) mask where (B, 1, 1, S) was meant (`mask.unsqueeze(-1)`)",
            "error",
            _attn("padding_mask_on_queries"),
        ),
        Fault(
            "causal_off_by_one",
            "§2.4",
            "要求每个位置只能看到它自己以及之前的位置",
            "The causal mask's diagonal is shifted: with +1 every token also sees the next one (a leak of the "
            "future), with -1 it cannot see itself.",
            "因果 mask 的对角线错了一位：+1 时每个位置能看到下一个 token（泄漏未来）。",
            "`torch.triu(ones, diagonal=0)` vs `diagonal=1`",
            "error",
            _attn("causal_off_by_one"),
            {"causal_offset": 1},
        ),
        Fault(
            "shared_layernorm",
            "§5.3",
            "每一个LayerNorm都需要分别拥有自己的可学习参数gamma和beta不能两个层共享同一组参数",
            "The sub-layers of a block share one LayerNorm (one gamma and beta) instead of owning one each.",
            "一个 block 里的两个 LayerNorm 共用了同一组 gamma/beta 参数。",
            "`self.norm = LayerNorm(d)` used twice in forward",
            "error",
            F.share_norms,
        ),
        Fault(
            "no_residual",
            "§4.1",
            "残差连接本质上给了网络一个“退路”",
            "The residual is missing: the block outputs norm(f(x)) (or f(norm(x))) and cannot fall back to the "
            "identity.",
            "缺少残差连接：输出只剩 f(x)，网络失去了“退路”，深了就训练不动。",
            "`x = self.norm(attn_out)` where `x = self.norm(x + attn_out)` was meant",
            "error",
            F.no_residual,
        ),
        Fault(
            "norm_on_residual_path",
            "§5.2",
            "我一开始套用Post-Norm的模板改成Pre-Norm时在输入和输出之间拉错了分支线导致Norm放在残差之后又被重复使用训练曲线一路乱跳",
            "Pre-Norm wired wrongly: x = norm(x) is assigned before the sub-layer, so the residual carries the "
            "normalised input instead of the untouched stream.",
            "Pre-Norm 接错了分支线：先 x = norm(x) 再 x = x + f(x)，残差走的是归一化后的输入而不是原始输入。",
            "`x = self.norm(x); x = x + self.attn(x)` instead of `x = x + self.attn(self.norm(x))`",
            "error",
            F.norm_on_residual_path,
        ),
        Fault(
            "large_init_scale",
            "§2.3",
            "不要把线性层的scale设得太大否则第一批forward的attention分布就会接近one-hot梯度直接消失",
            "Attention projections initialised too large: scores are huge from the first step, softmax is one-hot "
            "and its gradient vanishes.",
            "线性层初始化尺度过大：第一步的注意力就接近 one-hot，梯度消失。",
            "a hand-written init (`normal_(std=1)` where 0.02 was meant: ×50)",
            "error",
            F.large_init_scale,
            {"factor": 50.0},
        ),
        Fault(
            "batchnorm_instead_of_layernorm",
            "§4.2",
            "BatchNorm依赖batch中样本的统计量序列任务中batch大小往往不大且样本长短不一",
            "BatchNorm over the tokens of a batch instead of LayerNorm per token: a token's output depends on the "
            "other sentences (and the padding) in its batch.",
            "用 BatchNorm 代替 LayerNorm：一个 token 的输出取决于同一 batch 里的其他句子和 padding。",
            "`nn.BatchNorm1d(d_model)` in the block",
            "error",
            F.batchnorm_instead_of_layernorm,
        ),
        Fault(
            "no_positional",
            "§3.1",
            "把词序打乱注意力分数会变得一模一样",
            "No positional encoding: self-attention is permutation-equivariant, 我打你 and 你打我 look the same.",
            "没有位置编码：自注意力对词序不敏感，“我打你”和“你打我”得到相同的表示。",
            "forgetting `x = x + pe[:T]` after the embedding",
            "error",
            F.no_positional,
        ),
    ]
}


def fault_names() -> list[str]:
    return list(FAULTS)


def apply(module: nn.Module, name: str, **params: Any) -> Callable[[], None]:
    """Activate fault ``name`` on ``module`` (and every matching sub-module); returns the function that undoes it."""
    if name not in FAULTS:
        raise ValueError(f"unknown fault {name!r}; valid names: {', '.join(FAULTS)}")
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    fault = FAULTS[name]
    unknown = set(params) - set(fault.defaults)
    if unknown:
        raise ValueError(f"fault {name!r} takes parameters {sorted(fault.defaults) or 'none'}, got {sorted(unknown)}")
    undo: list[Callable[[], None]] = []
    fault.apply(module, undo, **{**fault.defaults, **params})
    if not undo:
        raise ValueError(f"fault {name!r} found nothing to change in {type(module).__name__}")

    def remove() -> None:
        while undo:
            undo.pop()()

    return remove


@contextmanager
def inject(module: nn.Module, name: str, **params: Any) -> Iterator[nn.Module]:
    """Context manager form of :func:`apply`: the fault is active inside the block, removed on exit (or error)."""
    remove = apply(module, name, **params)
    try:
        yield module
    finally:
        remove()


__all__ = ["FAULTS", "Fault", "apply", "fault_names", "inject"]
