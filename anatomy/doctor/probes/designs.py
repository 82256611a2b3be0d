"""Designs the reference cannot carry, recognised and named instead of left "unexplained": a block normalised with
BatchNorm (PatchTST's post-norm for time series), a block with two attention sub-layers (Stable Diffusion's
BasicTransformerBlock: self-attention, then attention over a context, a second self-attention when none is given).
The doctor says what the design is and, where the post argues otherwise, what it argues; a choice of the module's
authors is not an error."""

from __future__ import annotations

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from anatomy.doctor.probes.state import ProbeState
from anatomy.doctor.report.findings import Finding

POST_ON_BATCHNORM = "BatchNorm依赖batch中样本的统计量序列任务中batch大小往往不大且样本长短不一"


def batchnorm_norms(module: nn.Module, norms: list[str]) -> list[str]:
    """The block's norms that are BatchNorm modules (``nn.BatchNorm1d`` between two transposes, say)."""
    named = dict(module.named_modules())
    return [p for p in norms if isinstance(named.get(p), _BatchNorm)]


def named_design(state: ProbeState) -> tuple[Finding, str] | None:
    """The first design of this module the reference cannot carry: a warning naming it, and the diagnosis' reason."""
    return batchnorm_block(state) or two_attention_block(state)


def two_attention_block(state: ProbeState) -> tuple[Finding, str] | None:
    """A block whose one forward runs two softmaxes over the tokens: two attention sub-layers."""
    obs = state.observation
    n = obs.summary.get("softmaxes", 0) if obs is not None else 0
    # H softmaxes: one per head, one sub-layer
    if state.kind != "block" or n < 2 or (n >= state.h and n % state.h == 0):
        return None
    en = (
        f"the block runs {n} attention sub-layers in one forward (softmax {n} times): Stable Diffusion's "
        "BasicTransformerBlock, say, runs self-attention, then attention over a context, which is a second "
        "self-attention when no context is given. The reference block has one attention sub-layer, so your output "
        "is not compared with it; the probes above still apply to the block as a whole"
    )
    zh = (
        f"这个 block 在一次 forward 里运行了 {n} 个注意力子层（softmax {n} 次）：例如 Stable Diffusion 的 "
        "BasicTransformerBlock 先做自注意力，再对 context 做注意力；没有给 context 时，这就是第二个自注意力。"
        "参考 block 只有一个注意力子层，所以不与它比较输出；上面的探针仍然对整个 block 有效"
    )
    reason = f"the block runs {n} attention sub-layers: the reference block has one"
    return Finding("block_design", "warning", en, zh, {"design": "attention_sub_layers", "softmaxes": n}), reason


def batchnorm_block(state: ProbeState) -> tuple[Finding, str] | None:
    """A warning naming the BatchNorm design, and the diagnosis' reason, when the block's norms are BatchNorm."""
    if state.kind != "block" or state.parts is None:
        return None
    found = batchnorm_norms(state.subject.module, state.parts.norms)
    if not found:
        return None
    names = ", ".join(f"`{p}`" for p in found)
    en = (
        f"the block normalises with BatchNorm ({names}): statistics per channel over the batch and the time steps, "
        "PatchTST's choice for patches of a time series. The post argues for LayerNorm in a Transformer: "
        "statistics per token, so a token's output never depends on the other sequences of its batch, on the "
        "padding, or on the batch size (at inference the running averages stand in for them). A deliberate design, "
        "not an error; the reference uses LayerNorm, so your output is not compared with it"
    )
    zh = (
        f"这个 block 用 BatchNorm 做归一化（{names}）：对每个通道在 batch 和时间步上统计，这是 PatchTST 为时间序列"
        "patch 做的选择。原文主张 Transformer 用 LayerNorm：按每个 token 统计，token 的输出不依赖同一 batch 里的其他"
        "序列、padding 或 batch 大小（推理时由滑动平均代替）。这是有意的设计，不是错误；参考实现用的是 LayerNorm，"
        "所以不与它比较输出"
    )
    reason = f"the block normalises with BatchNorm ({', '.join(found)}): a design the LayerNorm reference cannot carry"
    finding = Finding(
        "norm_design",
        "warning",
        en,
        zh,
        {"design": "batchnorm", "norms": found, "post": POST_ON_BATCHNORM},
    )
    return finding, reason
