"""The error budget: layer by layer, how far our model's activations are from a Hugging Face model's.

Both models get the same token ids; forward hooks record, on HF's side, the output of named submodules, and on ours
the matching HookPoints and modules (``stack.blocks.N.hook_attn_out``, ``hook_ffn_out``, ``stack.final_norm``, ...).
Each row is one place in the network; each column pair is ``max |a - b|`` and ``mean |a - b|`` with both models
in one dtype (float32, then bfloat16). The first row where the difference jumps is where a conversion went wrong;
in bfloat16 the numbers show how much rounding the two implementations' different operation orders cost.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from anatomy.config import ModelConfig


@dataclass(frozen=True)
class Probe:
    name: str
    hf: str | None  # HF submodule path (output[0] when it returns a tuple); None: the model's output
    ours: str | None  # our submodule path; None: the model's output
    call: int = 0  # which call of the HF module, when it runs more than once per forward


@dataclass
class Row:
    name: str
    diffs: dict[str, tuple[float, float]] = field(default_factory=dict)  # dtype name → (max, mean) |diff|


def _blocks(n: int, hf: str, attn: str, ffn: str, ours: str, label: str = "block") -> list[Probe]:
    """Two rows per block ``i`` of ``n``: its attention and its FFN output, HF's ``{hf}.{i}.{attn}`` and
    ``{hf}.{i}.{ffn}`` against our ``{ours}.{i}``'s hooks."""
    rows = []
    for i in range(n):
        rows += [
            Probe(f"{label} {i} attention", f"{hf}.{i}.{attn}", f"{ours}.{i}.hook_attn_out"),
            Probe(f"{label} {i} ffn", f"{hf}.{i}.{ffn}", f"{ours}.{i}.hook_ffn_out"),
        ]
    return rows


def probes(config: ModelConfig, arch: str) -> list[Probe]:
    """The rows for one architecture: embeddings, each block's attention and FFN output, final norm, output."""
    n = config.n_layers
    if arch == "GPTNeoXForCausalLM":
        rows = [Probe("embeddings", "gpt_neox.embed_in", "embeddings")]
        rows += _blocks(n, "gpt_neox.layers", "attention", "mlp", "stack.blocks")
        return rows + [
            Probe("final norm", "gpt_neox.final_layer_norm", "stack.final_norm"),
            Probe("logits", None, None),
        ]
    if arch in (
        "GPT2LMHeadModel",
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Qwen3ForCausalLM",  # Llama's names
        "Qwen2ForCausalLM",
        "Phi3ForCausalLM",
        "GemmaForCausalLM",
        "Gemma2ForCausalLM",
    ):
        gpt = arch == "GPT2LMHeadModel"
        h = "transformer.h" if gpt else "model.layers"
        rows = [Probe("embeddings", "transformer.drop" if gpt else "model.embed_tokens", "embeddings")]
        rows += _blocks(n, h, "attn" if gpt else "self_attn", "mlp", "stack.blocks")
        return rows + [
            Probe("final norm", "transformer.ln_f" if gpt else "model.norm", "stack.final_norm"),
            Probe("logits", None, None),
        ]
    if arch in ("BertModel", "BertForSequenceClassification"):
        b, e = ("bert.", "encoder.") if arch == "BertForSequenceClassification" else ("", "")
        rows = [Probe("embeddings (after LayerNorm)", f"{b}embeddings", f"{e}embeddings")]
        rows += _blocks(n, f"{b}encoder.layer", "attention.output.dense", "output.dense", f"{e}stack.blocks")
        rows.append(Probe("last_hidden_state (last Post-LN)", f"{b}encoder", f"{e}stack.hook_out"))
        return rows + ([Probe("logits", None, None)] if b else [])
    if arch == "T5ForConditionalGeneration":
        # a T5 stack's first dropout call is on its input embeddings (identity in eval)
        rows = [Probe("encoder embeddings", "encoder.dropout", "encoder.embeddings")]
        rows += _blocks(
            n,
            "encoder.block",
            "layer.0.SelfAttention",
            "layer.1.DenseReluDense",
            "encoder.stack.blocks",
            "encoder block",
        )
        rows += [
            Probe("encoder final norm", "encoder.final_layer_norm", "encoder.stack.final_norm"),
            Probe("decoder embeddings", "decoder.dropout", "decoder.embeddings"),
        ]
        for i in range(config.decoder_layers):
            rows += [
                Probe(
                    f"decoder block {i} self-attention",
                    f"decoder.block.{i}.layer.0.SelfAttention",
                    f"decoder.stack.blocks.{i}.hook_attn_out",
                ),
                Probe(
                    f"decoder block {i} cross-attention",
                    f"decoder.block.{i}.layer.1.EncDecAttention",
                    f"decoder.stack.blocks.{i}.hook_cross_out",
                ),
                Probe(
                    f"decoder block {i} ffn",
                    f"decoder.block.{i}.layer.2.DenseReluDense",
                    f"decoder.stack.blocks.{i}.hook_ffn_out",
                ),
            ]
        return rows + [
            Probe("decoder final norm", "decoder.final_layer_norm", "decoder.stack.final_norm"),
            Probe("logits", None, None),
        ]
    raise ValueError(f"no error-budget probes for architecture {arch!r}")


def _first_tensor(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    first: torch.Tensor = output[0]  # tuples and transformers' ModelOutput: the hidden states come first
    return first


def _run(
    model: nn.Module, paths: list[tuple[str, int]], call: Callable[[nn.Module], Any]
) -> tuple[dict[tuple[str, int], torch.Tensor], Any]:
    seen: dict[str, list[torch.Tensor]] = {}
    handles = []
    for path in {p for p, _ in paths}:

        def hook(_m: nn.Module, _args: Any, out: Any, path: str = path) -> None:
            seen.setdefault(path, []).append(_first_tensor(out).detach().float())

        handles.append(model.get_submodule(path).register_forward_hook(hook))
    try:
        with torch.inference_mode():
            out = call(model)
    finally:
        for h in handles:
            h.remove()
    return {(p, c): seen[p][c] for p, c in paths}, out


def example_inputs(config: ModelConfig, *, batch: int = 2, seq: int = 16, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    t = min(seq, config.max_seq_len)
    ids = torch.randint(0, config.vocab_size, (batch, t), generator=g)
    if config.architecture == "seq2seq":
        return {"input_ids": ids, "decoder_input_ids": torch.randint(0, config.vocab_size, (batch, t), generator=g)}
    return {"input_ids": ids}


def _output(out: Any) -> torch.Tensor:
    value: torch.Tensor = out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state
    return value.detach().float()


def error_budget(
    ours: nn.Module,
    hf_model: nn.Module,
    *,
    arch: str | None = None,
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16),
    batch: int = 2,
    seq: int = 16,
    seed: int = 0,
) -> list[Row]:
    """One ``Row`` per probe, with ``(max, mean) |diff|`` per dtype. The models are copied, never changed."""
    arch = arch or type(hf_model).__name__
    config = cast(ModelConfig, ours.config)  # our models carry the ModelConfig they were built from
    table = probes(config, arch)
    inputs = example_inputs(config, batch=batch, seq=seq, seed=seed)
    rows = [Row(p.name) for p in table]
    for dtype in dtypes:
        a_model = copy.deepcopy(ours).eval().to(dtype)
        b_model = copy.deepcopy(hf_model).eval().to(dtype)
        ours_paths = [(p.ours, 0) for p in table if p.ours is not None]
        hf_paths = [(p.hf, p.call) for p in table if p.hf is not None]
        a_seen, a_out = _run(a_model, ours_paths, lambda m: m(**inputs))
        b_seen, b_out = _run(b_model, hf_paths, lambda m: m(**inputs))
        for row, p in zip(rows, table):
            a = _output(a_out) if p.ours is None else a_seen[(p.ours, 0)]
            b = _output(b_out) if p.hf is None else b_seen[(p.hf, p.call)]
            if a.shape != b.shape:
                raise ValueError(
                    f"error budget row {p.name!r}: shapes differ, ours {tuple(a.shape)} vs HF {tuple(b.shape)}"
                )
            diff = (a - b).abs()
            row.diffs[str(dtype).removeprefix("torch.")] = (diff.max().item(), diff.mean().item())
    return rows


def render(rows: list[Row]) -> str:
    dtypes = list(rows[0].diffs) if rows else []
    width = max([len(r.name) for r in rows] + [5])
    head = f"{'layer':<{width}}" + "".join(f"  {d + ' max':>14}{d + ' mean':>15}" for d in dtypes)
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.name:<{width}}" + "".join(f"  {r.diffs[d][0]:>14.3e}{r.diffs[d][1]:>15.3e}" for d in dtypes))
    return "\n".join(lines)
