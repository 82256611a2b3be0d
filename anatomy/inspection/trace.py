"""The post's §5.1 shape table, generated from a real forward pass.

Forward hooks on the modules and hook points of a model record, in execution order, the shape every step
produces. Nothing here is typed by hand: change the model and the table changes with it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from anatomy.components.add_norm import AddNorm
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import TransformerBlock
from anatomy.components.embedding import InputEmbeddings
from anatomy.components.ffn import FeedForward
from anatomy.shapes import fmt

if TYPE_CHECKING:
    from anatomy.config import ModelConfig

# kind → (English operation, the post's words, dimension letters)
KINDS = {
    "embed": ("token embedding + positional encoding", "词嵌入结果 + 位置编码", "B T D"),
    "proj": ("linear projections Q, K, V", "线性投影生成Q/K/V", "B T D"),
    "split": ("split heads: view + transpose(1, 2)", "拆头 reshape + transpose", "B H T Dh"),
    "qknorm": ("QK-norm over Dh, per head (before RoPE)", "QK 归一化（每个头的 Dh 上，RoPE 之前）", "B H T Dh"),
    "scores": ("scaled dot product Q K^T / sqrt(Dh)", "缩放点积 QK^T / sqrt(dk)", "B H T S"),
    "softmax": ("softmax over keys (attention weights)", "softmax", "B H T S"),
    "z": ("weights @ V, per head", "softmax后加权 attn V", "B H T Dh"),
    "merge": ("merge heads: transpose + reshape", "并头 transpose + reshape", "B T D"),
    "out": ("output projection W^O", "输出投影 线性层", "B T D"),
    "add": ("residual add", "残差 Add", "B T D"),
    "norm": ("normalisation over the last dim", "在最后一维归一化", "B T D"),
    "hidden": ("FFN hidden: linear + activation", "前馈网络 线性+激活", "B T F"),
    "ffn": ("FFN output: linear", "前馈网络 线性", "B T D"),
    "final": ("final norm", "最终归一化", "B T D"),
    "head": ("output head", "输出层", "B T V"),
}


@dataclass
class TraceRow:
    step: str  # where: "layer 0 · self-attention"
    kind: str
    operation: str
    operation_zh: str
    shape: list[int]
    dims: str
    params: int
    module: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters(recurse=True))


def _letters(kind: str, shape: tuple[int, ...], which: str) -> str:
    letters = KINDS[kind][2]
    if kind in ("split", "qknorm") and which in ("k", "v"):
        letters = "B Hkv S Dh"
    if kind == "proj" and which in ("k", "v"):
        letters = "B S Hkv*Dh"
    if kind == "proj" and which == "qkv":
        letters = "B T (H+2Hkv)*Dh"
    if kind in ("proj", "merge") and which == "wide":  # heads of their own width: H·Dh != D
        letters = "B T H*Dh"
    if kind == "head" and len(shape) == 2:
        letters = "B C"
    return letters


def trace_model(model: nn.Module, inputs: dict[str, torch.Tensor]) -> list[TraceRow]:
    """Run ``model(**inputs)`` once with hooks and return one row per step, in execution order."""
    rows: list[TraceRow] = []
    handles = []
    names = {m: n for n, m in model.named_modules()}

    def where(name: str) -> str:
        parts = name.split(".")
        layer = next((parts[i + 1] for i, p in enumerate(parts[:-1]) if p == "blocks"), None)
        stack = "decoder " if "decoder" in parts else ("encoder " if "encoder" in parts else "")
        sub = (
            "cross-attention"
            if "cross_attn" in parts or "cross_add_norm" in parts
            else (
                "self-attention"
                if "attn" in parts or "attn_add_norm" in parts
                else ("FFN" if "ffn" in parts or "ffn_add_norm" in parts else "")
            )
        )
        return f"{stack}layer {layer} · {sub}".strip(" ·") if layer is not None else (stack + "model").strip()

    def emit(
        kind: str, name: str, tensor: torch.Tensor, params: int = 0, which: str = "", label: str = "", step: str = ""
    ) -> None:
        op, zh, _ = KINDS[kind]
        shape = tuple(tensor.shape)
        rows.append(
            TraceRow(
                step=step or where(name),
                kind=kind,
                operation=label or op,
                operation_zh=zh,
                shape=list(shape),
                dims=fmt(shape, _letters(kind, shape, which)),
                params=params,
                module=name,
            )
        )

    def on(
        module: nn.Module, kind: str, which: str = "", label: str = "", with_input: str | None = None, step: str = ""
    ) -> None:
        name = names[module]

        def hook(
            _m: nn.Module, args: tuple[torch.Tensor, ...], output: torch.Tensor | tuple[torch.Tensor, ...]
        ) -> None:
            if with_input:
                emit(with_input, name, args[0])
            emit(
                kind,
                name,
                output[0] if isinstance(output, tuple) else output,
                _params(module) if kind in ("proj", "out", "norm", "qknorm", "ffn", "head", "final", "embed") else 0,
                which,
                label,
                step,
            )

        handles.append(module.register_forward_hook(hook))

    for module in model.modules():
        if isinstance(module, InputEmbeddings):
            on(module, "embed")
        elif isinstance(module, MultiHeadAttention):
            wide = module.inner_dim != module.d_model
            for which in ("q", "k", "v"):
                proj = getattr(module, f"{which}_proj", None)
                if proj is not None:
                    on(proj, "proj", "wide" if wide and which == "q" else which, f"linear projection {which.upper()}")
                on(getattr(module, f"hook_{which}"), "split", which, f"split heads: {which}")
            if module.fused_qkv:
                on(module.qkv_proj, "proj", "qkv", "fused linear projection Q|K|V")
            if module.qk_norm is not None:
                for which in ("q", "k"):
                    label = f"QK-norm of {which} ({module.qk_norm}, over Dh)"
                    on(getattr(module, f"{which}_norm"), "qknorm", which, label)
            for hook, kind in (("scores", "scores"), ("weights", "softmax"), ("z", "z"), ("merged", "merge")):
                on(getattr(module, f"hook_{hook}"), kind, "wide" if wide and kind == "merge" else "")
            on(module.o_proj, "out")
        elif isinstance(module, AddNorm):
            norms = [module.pre_norm, module.post_norm] if module.placement == "sandwich" else [module.norm]
            label = f"{type(norms[0]).__name__} ({module.placement}-norm)"
            for norm in norms:
                on(norm, "norm", label=label, with_input="add" if module.placement in ("post", "deepnorm") else None)
        elif isinstance(module, TransformerBlock):
            if module.attn_add_norm.placement in ("pre", "sandwich"):
                block = names[module]
                for hook, sub in (
                    ("hook_resid_mid", "attn"),
                    ("hook_resid_cross", "cross_attn"),
                    ("hook_resid_post", "ffn"),
                ):
                    if hasattr(module, hook):
                        on(getattr(module, hook), "add", step=where(f"{block}.{sub}"))
        elif isinstance(module, FeedForward):
            on(module.hook_hidden, "hidden")
            on(module, "ffn")
    for attr, kind in (("final_norm", "final"), ("lm_head", "head"), ("classifier", "head")):
        for name, module in model.named_modules():
            if name.split(".")[-1] == attr and module is not None and not isinstance(module, nn.ModuleList):
                on(module, kind)
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        for h in handles:
            h.remove()
    return rows


def example_inputs(
    model: nn.Module, batch: int, seq: int, *, tgt_seq: int | None = None, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Random token ids for the model's architecture (a seq2seq model also gets decoder ids)."""
    config = cast("ModelConfig", model.config)  # set by build_model and load_pretrained
    g = torch.Generator().manual_seed(seed)
    low = 1 if config.vocab_size > 1 else 0
    ids = torch.randint(low, config.vocab_size, (batch, seq), generator=g)
    inputs = {"input_ids": ids}
    if config.architecture == "seq2seq":
        inputs["decoder_input_ids"] = torch.randint(low, config.vocab_size, (batch, tgt_seq or seq), generator=g)
    return inputs


def render(rows: list[TraceRow], fmt_name: str = "table", *, title: str = "") -> str:
    """Terminal table, GitHub markdown, or JSON."""
    import json

    if fmt_name == "json":
        return json.dumps({"title": title, "rows": [r.to_dict() for r in rows]}, indent=2, ensure_ascii=False)
    header = ["#", "where", "operation", "shape", "params"]
    body = [[str(i + 1), r.step, r.operation, r.dims, f"{r.params:,}" if r.params else ""] for i, r in enumerate(rows)]
    if fmt_name == "markdown":
        lines = [f"**{title}**", ""] if title else []
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines)
    widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    out = ([title] if title else []) + [line, "-" * len(line)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in body]
    return "\n".join(out)
