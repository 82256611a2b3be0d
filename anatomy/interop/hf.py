"""Hugging Face ``transformers`` ⇄ anatomy: one explicit key table per architecture.

    ours = from_hf(hf_model)          hf_model = to_hf(ours)          ours = load_pretrained(hf_directory)

Supported: ``GPT2LMHeadModel``, ``BertModel``, ``BertForSequenceClassification``, ``LlamaForCausalLM``,
``MistralForCausalLM``, ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM``, ``GemmaForCausalLM``, ``Gemma2ForCausalLM``,
``Phi3ForCausalLM``, ``GPTNeoXForCausalLM``, ``T5ForConditionalGeneration`` (both directions). ``transformers``
is an optional dependency (``[hf]``): reading an HF *directory* needs only its ``config.json`` and safetensors
weights; only ``from_hf``/``to_hf`` on live HF objects import it.

Each architecture has three small functions (``hf_families.py`` and the family modules it imports; this module holds
the conversion that applies them):

* a config reader: HF ``config.json`` dict → ``ModelConfig`` (every field that matters is read, everything we
  cannot express is refused by name, never silently dropped);
* a key table: one ``Entry(hf keys, our keys, op)`` per tensor. The first key of a side is the stored one, the
  others are tied names of the same tensor (``lm_head.weight`` tied to the token embedding). Conversion asserts
  that every checkpoint key is used once (or is a known buffer), that every key of our model is filled, and that
  every tensor has the shape the config implies — a mismatch names the key and both shapes;
* a config writer: ``ModelConfig`` → HF config kwargs (``to_hf``).

``op`` is ``"copy"``; a split (``hf_common.SPLITS``: one HF tensor whose rows stack several of ours, Phi-3's
``gate_up_proj``, or whose rows are regrouped, GPT-NeoX's per-head ``query_key_value``); or ``"conv1d"`` for GPT-2's
``Conv1D`` layers, which store ``W`` as ``(in, out)`` and compute ``x @ W + b``; ``nn.Linear`` stores ``(out, in)``
and computes ``x @ W.T + b``: the weight is transposed, the bias is copied. ``"drop"`` marks a checkpoint tensor our
model has no place for; it is read past on purpose, never by accident. BertModel's pooler is carried: a checkpoint
with ``pooler.dense`` weights becomes an Encoder with ``encoder_pooler=True`` (its ``pooler_output`` is HF's).

Layouts that need no permutation, and why:
* GPT-2's fused ``c_attn`` output columns are ``[q | k | v]``, heads contiguous inside each: exactly the row order of
  our ``qkv_proj`` (``fused_qkv=True``) after the transpose.
* HF Llama rotates q/k in the ``"half"`` layout, our default; ``from_hf(model, rope_layout="interleaved")`` and
  ``to_hf`` of an interleaved model permute q/k rows (``interop.rope_layout``).
* T5 keeps one relative-bias table per stack in block 0 (``relative_attention_bias``, ``(num_buckets, H)``): our
  ``stack.position_bias``; it does not scale scores (``attn_scale=1.0``); its norm is RMSNorm without bias; v1.0's
  tied head rescales the decoder output by ``d_model**-0.5`` (our ``output_scale``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
from torch import nn

from anatomy.config import ModelConfig
from anatomy.errors import CheckpointError
from anatomy.interop.hf_common import SPLITS, label_names, special_tokens
from anatomy.interop.hf_families import ARCH_FAMILY, FAMILIES, Family
from anatomy.interop.rope_layout import convert_state_dict as convert_rope_state

SUPPORTED = (
    "GPT2LMHeadModel",
    "BertModel",
    "BertForSequenceClassification",
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen3ForCausalLM",
    "T5ForConditionalGeneration",
    "Qwen2ForCausalLM",
    "GemmaForCausalLM",
    "Gemma2ForCausalLM",
    "Phi3ForCausalLM",
    "GPTNeoXForCausalLM",
)


def family_for_arch(arch: str) -> Family:
    if arch not in ARCH_FAMILY:
        raise CheckpointError(f"unsupported architecture {arch!r}; supported: {', '.join(SUPPORTED)}")
    return ARCH_FAMILY[arch]


def arch_of(hf_config: dict[str, Any]) -> str:
    archs = hf_config.get("architectures") or []
    if not archs:
        raise CheckpointError(
            f'Hugging Face config names no "architectures" (model_type '
            f"{hf_config.get('model_type')!r}); supported: {', '.join(SUPPORTED)}"
        )
    arch: str = archs[0]
    return arch


def config_from_hf(hf_config: Any, arch: str | None = None, *, generation: Any = None) -> ModelConfig:
    """A ``ModelConfig`` from an HF config (``PretrainedConfig`` or its ``config.json`` dict) and, when given, its
    generation config (``GenerationConfig`` or the ``generation_config.json`` dict), which names the special tokens
    HF's ``generate`` uses where it names them."""
    c = hf_config if isinstance(hf_config, dict) else hf_config.to_dict()
    gen = generation if generation is None or isinstance(generation, dict) else generation.to_dict()
    arch = arch or arch_of(c)
    config = family_for_arch(arch).read_config(c, arch)
    tokens = special_tokens(c, gen, config.vocab_size)
    if config.architecture == "seq2seq":  # T5's pad id is also our decoder start (read by the family)
        tokens.pop("pad_token_id")
    if config.architecture == "classifier":  # the class names, and the loss labels= computes (HF's problem_type)
        tokens["label_names"] = label_names(c, config.num_labels)
        tokens["problem_type"] = c.get("problem_type")
    return config.replace(**tokens)


# ================================================================================================ HF → ours


def _normalize(tensors: dict[str, torch.Tensor], fam: Family, arch: str) -> dict[str, torch.Tensor]:
    """Checkpoints saved from the headless class (``GPT2Model``: ``h.0...``) get the head class's prefix; older key
    spellings the family names (``Family.renames``) get today's."""
    for pattern, replacement in fam.renames:
        tensors = {re.sub(pattern, replacement, k): v for k, v in tensors.items()}
    prefix = fam.base_prefix.get(arch)
    if not prefix or any(k.startswith(prefix) for k in tensors):
        return tensors
    heads = ("lm_head.", "classifier.")
    return {k if k.startswith(heads) else prefix + k: v for k, v in tensors.items()}


def load_hf_state(model: nn.Module, tensors: dict[str, torch.Tensor], arch: str, *, source: str = "") -> None:
    """Fill ``model`` (built from ``config_from_hf``) from an HF state dict through the key table, checking counts
    and shapes first. Errors name ``source``, the key and both shapes."""
    fam = family_for_arch(arch)
    where = f"{source}: " if source else ""
    tensors = _normalize(tensors, fam, arch)
    config: Any = model.config
    expected = model.state_dict()
    out: dict[str, torch.Tensor] = {}
    used, missing = set(), []
    for entry in fam.table(config, arch):
        present = [k for k in entry.hf if k in tensors]
        if not present:
            if entry.op != "drop":
                missing.append(entry.hf[0])
            continue
        used.update(present)
        value = tensors[present[0]]
        for alias in present[1:]:
            other = tensors[alias]
            if other.shape != value.shape or not torch.equal(other, value):
                raise CheckpointError(
                    f"{where}{alias!r} should be tied to {present[0]!r} "
                    "(tie_word_embeddings) but holds different values"
                )
        if entry.op == "drop":
            continue
        if entry.op in SPLITS:  # one HF tensor ↔ our parts, rows stacked in order
            parts = [tuple(expected[k].shape) for k in entry.ours]
            want_hf = (sum(shape[0] for shape in parts), *parts[0][1:])
            if tuple(value.shape) != want_hf:
                raise CheckpointError(
                    f"{where}weight {present[0]!r} has shape {tuple(value.shape)}, but the config implies {want_hf}"
                )
            out.update(zip(entry.ours, SPLITS[entry.op].to_ours(value, config, len(entry.ours)), strict=True))
            continue
        want = tuple(expected[entry.ours[0]].shape)
        want_hf = want[::-1] if entry.op == "conv1d" and len(want) == 2 else want
        if tuple(value.shape) != want_hf:
            raise CheckpointError(
                f"{where}weight {present[0]!r} has shape {tuple(value.shape)}, but the config implies {want_hf}"
            )
        value = value.t() if entry.op == "conv1d" and value.dim() == 2 else value
        out.update(dict.fromkeys(entry.ours, value))
    buffers = [re.compile(p) for p in fam.buffers]
    unexpected = sorted(k for k in set(tensors) - used if not any(p.search(k) for p in buffers))
    if missing or unexpected:
        raise CheckpointError(
            f"{where}checkpoint keys do not match the {arch} key table: missing "
            f"{missing[:6]}{' ...' if len(missing) > 6 else ''}, unexpected "
            f"{unexpected[:6]}{' ...' if len(unexpected) > 6 else ''}"
        )
    if set(out) != set(expected):  # the table and the builder disagree: a bug here, not in the checkpoint
        raise RuntimeError(
            f"{arch} key table does not cover our model: unfilled {sorted(set(expected) - set(out))}"
            f", unknown {sorted(set(out) - set(expected))}"
        )
    floats = {t.dtype for t in out.values() if t.is_floating_point()}
    if len(floats) == 1:
        model.to(floats.pop())
    model.load_state_dict(out)


def model_from_checkpoint(
    hf_config: dict[str, Any],
    tensors: dict[str, torch.Tensor],
    *,
    source: str = "",
    rope_layout: str = "half",
    generation: dict[str, Any] | None = None,
) -> nn.Module:
    """Our model from an HF ``config.json`` dict, its tensors and its ``generation_config.json`` dict when there is
    one (no ``transformers`` needed)."""
    from anatomy.interop import limits
    from anatomy.models import build_model

    arch = arch_of(hf_config)
    limits.check_checkpoint(hf_config, tensors, generation, source)  # sizes vs the weights, NaN, ids (limits.py)
    config = config_from_hf(hf_config, arch, generation=generation)
    limits.check_memory(hf_config, config, source=source)
    if arch == "BertModel":  # config.json does not say whether the pooler was built: its weights do
        config = config.replace(encoder_pooler=any(k.endswith("pooler.dense.weight") for k in tensors))
    model = build_model(config)
    load_hf_state(model, tensors, arch, source=source)
    if rope_layout != config.rope_layout:
        from anatomy.interop.rope_layout import convert_rope_layout

        model = convert_rope_layout(model, rope_layout)
    set_generation_defaults(model, generation)
    return model


def set_generation_defaults(model: nn.Module, generation: dict[str, Any] | None) -> None:
    """``model.generation_config`` as HF's ``from_pretrained`` sets it: the options ``generation_config.json`` sets
    (``do_sample``, ``temperature``, ``top_k``, ``top_p``, ``max_new_tokens``...) over the model's special tokens,
    so ``generate`` samples where HF's samples; explicit arguments still win (anatomy.generation.options)."""
    if generation and hasattr(model, "generate"):  # DecoderLM, Seq2Seq
        from anatomy.generation.options import from_hf_generation

        setattr(model, "generation_config", from_hf_generation(generation, getattr(model, "config", None)))  # noqa: B010


def from_hf(model: Any, *, rope_layout: str = "half") -> nn.Module:
    """Our model with the weights of a live HF model of a supported architecture (same device, dtype and
    train/eval mode).

    ``rope_layout="interleaved"`` permutes Llama's q/k rows into the interleaved layout (same logits)."""
    arch = type(model).__name__
    if arch not in SUPPORTED or not hasattr(model, "config"):
        raise TypeError(f"from_hf: unsupported model {arch}; supported: {', '.join(SUPPORTED)}")
    config = model.config.to_dict()
    config["architectures"] = [arch]
    generation = getattr(model, "generation_config", None)  # what HF's generate uses: its special tokens win
    ours = model_from_checkpoint(
        config,
        model.state_dict(),
        source=arch,
        rope_layout=rope_layout,
        generation=None if generation is None else generation.to_dict(),
    )
    if generation is not None:  # the options it sets (to_diff_dict: HF's unset defaults are None there)
        set_generation_defaults(ours, generation.to_diff_dict())
    return ours.to(next(model.parameters()).device).train(model.training)


# ================================================================================================ ours → HF


def family_of(config: ModelConfig) -> tuple[Family, str]:
    """The HF family and architecture that can hold ``config``, or a ValueError naming what does not fit."""
    best: tuple[int, str, list[str]] | None = None
    for fam in FAMILIES.values():
        wrong = [
            f"{name}={getattr(config, name)!r} (needs {' or '.join(map(repr, allowed))})"
            for name, allowed in fam.requires.items()
            if getattr(config, name) not in allowed
        ]
        if fam.name in ("gpt2", "bert", "t5", "gpt_neox") and config.kv_heads != config.n_heads:
            wrong.append(f"n_kv_heads={config.n_kv_heads} (needs n_kv_heads == n_heads)")
        if fam.name != "qwen2" and config.qkv_bias not in (None, config.bias):
            wrong.append(f"qkv_bias={config.qkv_bias} with bias={config.bias} (only Qwen2 biases q/k/v alone)")
        if fam.name == "bert" and config.type_vocab_size < 1:
            wrong.append("type_vocab_size=0 (BERT always adds token-type embeddings)")
        if fam.name == "bert" and config.architecture == "classifier" and not config.pooler:
            wrong.append("pooler=False (BertForSequenceClassification has a tanh pooler)")
        if fam.name == "t5" and not any(math.isclose(config.output_scale, s) for s in (1.0, config.d_model**-0.5)):
            wrong.append(f"output_scale={config.output_scale} (T5 uses 1.0 or d_model**-0.5)")
        if fam.name in ("gpt2", "bert", "phi3", "gpt_neox") and config.dh * config.n_heads != config.d_model:
            wrong.append(
                f"head_dim={config.head_dim} ({fam.name}'s heads split d_model: needs n_heads * head_dim == d_model)"
            )
        if fam.name != "t5" and config.output_scale != 1.0:
            wrong.append(f"output_scale={config.output_scale} (needs 1.0)")
        if not wrong:
            arch = {"classifier": "BertForSequenceClassification", "encoder": "BertModel"}.get(
                config.architecture, fam.archs[0]
            )
            return fam, arch
        if best is None or len(wrong) < best[0]:
            best = (len(wrong), fam.name, wrong)
    assert best is not None  # FAMILIES is not empty
    _, name, wrong = best
    raise ValueError(
        f"to_hf: this config fits no supported Hugging Face architecture ({', '.join(SUPPORTED)}); "
        f"closest is {name}, which needs: {'; '.join(wrong)}"
    )


def hf_state_dict(model: nn.Module) -> tuple[str, dict[str, Any], dict[str, torch.Tensor]]:
    """``(architecture, HF config kwargs, HF state dict)`` for one of our models (no ``transformers`` needed)."""
    config = getattr(model, "config", None)
    if not isinstance(config, ModelConfig):
        raise TypeError(f"to_hf needs a model built by anatomy.build_model, got {type(model).__name__}")
    fam, arch = family_of(config)
    ours = model.state_dict()
    if config.positional == "rope" and config.rope_layout != "half":
        ours = convert_rope_state(ours, config, "half")  # HF Llama rotates in the half layout
        config = config.replace(rope_layout="half")
    out: dict[str, torch.Tensor] = {}
    for entry in fam.table(config, arch):
        if entry.op == "drop":
            continue
        if entry.op in SPLITS:
            out[entry.hf[0]] = SPLITS[entry.op].to_hf(tuple(ours[k] for k in entry.ours), config).contiguous()
            continue
        value = ours[entry.ours[0]]
        value = value.t().contiguous() if entry.op == "conv1d" and value.dim() == 2 else value
        out.update(dict.fromkeys(entry.hf, value))
    # every family names the vocabulary's size alike; the rest is the family's own
    written = {"vocab_size": config.vocab_size, **fam.write_config(config, arch), **write_tokens(config, arch)}
    return arch, written, out


def write_tokens(config: ModelConfig, arch: str) -> dict[str, Any]:
    """The special tokens (and a classifier's labels) as HF config kwargs, every one written, None included, so
    that none falls back to the HF class's default (GPT2Config's 50256, LlamaConfig's 1 and 2)."""
    eos = config.eos_token_id
    out: dict[str, Any] = dict(
        bos_token_id=config.bos_token_id, eos_token_id=list(eos) if isinstance(eos, tuple) else eos
    )
    if config.architecture != "seq2seq":  # T5's writer sets pad (= our decoder start) itself
        out["pad_token_id"] = config.pad_token_id
    if config.architecture == "classifier":
        out.update(id2label=config.id2label, label2id=config.label2id, problem_type=config.problem_type)
    return out


def to_hf(model: nn.Module) -> nn.Module:
    """A ``transformers`` model holding our model's weights (needs the ``[hf]`` extra). Every HF parameter is
    checked against the value written, so an HF-side tie we did not ask for is an error, not a silent change."""
    try:
        import transformers
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("to_hf needs transformers: pip install 'transformer-anatomy[hf]'") from err
    arch, kwargs, state = hf_state_dict(model)
    fam = ARCH_FAMILY[arch]
    hf_config = getattr(transformers, fam.config_class)(**kwargs)
    hf_config.architectures = [arch]
    ours_config: Any = model.config
    extra = {"add_pooling_layer": ours_config.encoder_pooler} if arch == "BertModel" else {}
    hf_model = getattr(transformers, arch)(hf_config, **extra)
    first = next(model.parameters())
    hf_model.to(device=first.device, dtype=first.dtype)
    result = hf_model.load_state_dict(state, strict=False)
    buffers = [re.compile(p) for p in fam.buffers]
    missing = [k for k in result.missing_keys if not any(p.search(k) for p in buffers)]
    if missing or result.unexpected_keys:
        raise RuntimeError(
            f"to_hf: {arch} state dict mismatch: missing {missing[:6]}, unexpected {result.unexpected_keys[:6]}"
        )
    for name, value in hf_model.state_dict().items():
        if name in state and not torch.equal(value, state[name].to(value.dtype)):
            raise ValueError(
                f"to_hf: transformers {transformers.__version__} does not keep {name!r} as written "
                f"(it ties it to another weight); this {arch} config cannot be expressed there"
            )
    from anatomy.generation.options import generation_options

    options = generation_options(getattr(model, "generation_config", None))
    if options and getattr(hf_model, "generation_config", None) is not None:  # travels back: HF's generate reads it
        hf_model.generation_config.update(**options)
    out: nn.Module = hf_model.train(model.training)
    return out
