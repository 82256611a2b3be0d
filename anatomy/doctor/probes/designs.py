"""Designs the reference cannot carry, recognised and named instead of left "unexplained": a block normalised with
BatchNorm (PatchTST's post-norm for time series). The doctor says what the design is and what the post argues
instead; it is a choice of the module's authors, not an error."""

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


def batchnorm_block(ctx: ProbeState) -> tuple[Finding, str] | None:
    """A warning naming the BatchNorm design, and the diagnosis' reason, when the block's norms are BatchNorm."""
    if ctx.kind != "block" or ctx.parts is None:
        return None
    found = batchnorm_norms(ctx.subject.module, ctx.parts.norms)
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
