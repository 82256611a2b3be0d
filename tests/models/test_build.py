"""The builder says what it builds: each part from named config fields, no argument swallowed, and a named value
(``norm_position="deepnorm"``) sets everything it implies, per stack, by the paper's formulas."""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import fields
from pathlib import Path

import pytest
import torch
from torch import nn

from anatomy.components import positional as pos
from anatomy.components.add_norm import AddNorm
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import DecoderBlock, EncoderBlock
from anatomy.components.embedding import InputEmbeddings, TokenEmbedding
from anatomy.components.ffn import FeedForward
from anatomy.components.kv_cache import KVCache
from anatomy.components.norms import LayerNorm, RMSNorm, TokenBatchNorm
from anatomy.config import TOKEN_FIELDS, ModelConfig
from anatomy.models import build_model
from anatomy.models.classifier import Classifier
from anatomy.models.decoder import DecoderStack
from anatomy.models.encoder import EncoderStack

BUILD = Path(__file__).resolve().parents[2] / "anatomy" / "models" / "build.py"


def _attn():
    return MultiHeadAttention(d_model=8, n_heads=2)


def _add_norm():
    return AddNorm(8, placement="pre", make_norm=LayerNorm)


# Each component with arguments that build it; the test adds one misspelt keyword.
COMPONENTS = {
    "LayerNorm": lambda **kw: LayerNorm(8, **kw),
    "RMSNorm": lambda **kw: RMSNorm(8, **kw),
    "TokenBatchNorm": lambda **kw: TokenBatchNorm(8, **kw),
    "FeedForward": lambda **kw: FeedForward(d_model=8, **kw),
    "AddNorm": lambda **kw: AddNorm(8, placement="pre", make_norm=LayerNorm, **kw),
    "MultiHeadAttention": lambda **kw: MultiHeadAttention(d_model=8, n_heads=2, **kw),
    "TokenEmbedding": lambda **kw: TokenEmbedding(10, 8, **kw),
    "InputEmbeddings": lambda **kw: InputEmbeddings(embed_tokens=TokenEmbedding(10, 8), **kw),
    "EncoderBlock": lambda **kw: EncoderBlock(
        attn=_attn(), ffn=FeedForward(d_model=8), attn_add_norm=_add_norm(), ffn_add_norm=_add_norm(), **kw
    ),
    "DecoderBlock": lambda **kw: DecoderBlock(
        attn=_attn(),
        cross_attn=_attn(),
        ffn=FeedForward(d_model=8),
        attn_add_norm=_add_norm(),
        cross_add_norm=_add_norm(),
        ffn_add_norm=_add_norm(),
        **kw,
    ),
    "EncoderStack": lambda **kw: EncoderStack(blocks=[], **kw),
    "DecoderStack": lambda **kw: DecoderStack(blocks=[], **kw),
    "KVCache": lambda **kw: KVCache(**kw),
    "Classifier": lambda **kw: Classifier(encoder=nn.Identity(), classifier=nn.Linear(8, 2), **kw),
    "SinusoidalPositional": lambda **kw: pos.POSITIONAL["sinusoidal"](d_model=8, **kw),
    "LearnedPositional": lambda **kw: pos.POSITIONAL["learned"](d_model=8, max_seq_len=16, **kw),
    "ShawRelativePositional": lambda **kw: pos.POSITIONAL["shaw"](head_dim=4, **kw),
    "T5RelativeBias": lambda **kw: pos.POSITIONAL["t5"](n_heads=2, **kw),
    "RotaryPositional": lambda **kw: pos.POSITIONAL["rope"](head_dim=4, **kw),
    "ALiBiPositional": lambda **kw: pos.POSITIONAL["alibi"](n_heads=2, **kw),
    "NoPositional": lambda **kw: pos.POSITIONAL["none"](**kw),
}


@pytest.mark.parametrize("name", sorted(COMPONENTS))
def test_a_component_builds_and_refuses_a_misspelt_argument(name):
    assert COMPONENTS[name]() is not None  # the base arguments are valid
    with pytest.raises(TypeError, match="dropuot"):
        COMPONENTS[name](dropuot=0.1)


def test_token_batchnorm_honours_bias_false():
    x = torch.randn(3, 5, 8) * 4 + 2
    bn = TokenBatchNorm(8, bias=False).train()
    assert bn.bn.bias is None and "bn.bias" not in dict(bn.named_parameters())
    with torch.no_grad():
        bn.bn.weight.fill_(2.0)
        ref = TokenBatchNorm(8).train()
        ref.bn.weight.fill_(2.0)
        ref.bn.bias.fill_(0.5)
    assert torch.allclose(bn(x) + 0.5, ref(x), atol=1e-6)


# Config fields the builder reads through a derived property (or not at all: construction-time checks only).
READ_THROUGH = {
    "n_decoder_layers": "decoder_layers",
    "qk_norm": "qk_norm_kind",
    "window_pattern": "layer_window",
    "sliding_window": "layer_window",
    "final_norm": "use_final_norm",
    "rope_fraction": "rotary_dim",
    "head_dim": "dh",
    "n_layers": "n_layers",
}


def test_the_builder_names_every_config_field_it_uses():
    """Every field of ModelConfig is read by name in build.py (``config.<field>``, or through the property that
    derives from it): nothing reaches a component through a keyword bag."""
    text = BUILD.read_text(encoding="utf-8")
    assert not re.search(r"\*\*\s*_?\w*(kwargs|options|kw)\b", text)  # no pass-through bags
    assert "partial(" not in text.replace("partial(_norm, config)", "")
    missing = [
        f.name
        for f in fields(ModelConfig)
        if f.name not in TOKEN_FIELDS  # no module reads those
        and f"config.{f.name}" not in text
        and f"config.{READ_THROUGH.get(f.name, '?')}" not in text
    ]
    assert not missing, missing


# ---------------------------------------------------------------------------------------- DeepNorm, per stack

SMALL = dict(
    vocab_size=50,
    d_model=64,
    n_heads=4,
    d_ff=128,
    max_seq_len=32,
    positional="sinusoidal",
    norm="layernorm",
    norm_position="deepnorm",
    bias=True,
    dropout=0.0,
)


def _paper(n_enc: int, n_dec: int) -> dict[str, tuple[float, float]]:
    """DeepNet (Wang et al. 2022), Fig. 2 / Table 1, written out here independently of the library."""
    if n_enc and n_dec:
        return {
            "encoder": (0.81 * (n_enc**4 * n_dec) ** (1 / 16), 0.87 * (n_enc**4 * n_dec) ** (-1 / 16)),
            "decoder": ((3 * n_dec) ** 0.25, (12 * n_dec) ** -0.25),
        }
    n = n_enc or n_dec
    return {"encoder" if n_enc else "decoder": ((2 * n) ** 0.25, (8 * n) ** -0.25)}


def _measured_gain(modules, suffixes) -> tuple[float, int]:
    """The std of the weights ending in ``suffixes``, each divided by Xavier-normal's std for its shape
    (sqrt(2 / (fan_in + fan_out))), pooled: the gain they were drawn with. Returns (gain, sample size)."""
    parts = []
    for module in modules:
        for name, p in module.named_parameters():
            if name.endswith(suffixes):
                fan_out, fan_in = p.shape
                parts.append(p.detach().flatten() / math.sqrt(2 / (fan_in + fan_out)))
    pooled = torch.cat(parts)
    return pooled.std().item(), pooled.numel()


def _check_stack(stack, alpha: float, beta: float) -> None:
    adds = [m for m in stack.modules() if isinstance(m, AddNorm)]
    assert adds and all(m.alpha == pytest.approx(alpha, rel=1e-12) for m in adds)
    scaled, n = _measured_gain(stack.blocks, ("v_proj.weight", "o_proj.weight", "up_proj.weight", "down_proj.weight"))
    unit, m = _measured_gain(stack.blocks, ("q_proj.weight", "k_proj.weight"))
    # the sample std of n normal draws has relative standard error 1/sqrt(2n): allow 5 of them
    assert scaled == pytest.approx(beta, rel=5 / math.sqrt(2 * n))
    assert unit == pytest.approx(1.0, rel=5 / math.sqrt(2 * m))


@pytest.mark.parametrize("n_enc,n_dec", [(6, 6), (12, 12), (18, 6)])
def test_deepnorm_encoder_and_decoder_get_their_own_alpha_and_beta(n_enc, n_dec):
    torch.manual_seed(0)
    model = build_model(ModelConfig(architecture="seq2seq", n_layers=n_enc, n_decoder_layers=n_dec, **SMALL))
    paper = _paper(n_enc, n_dec)
    _check_stack(model.encoder.stack, *paper["encoder"])
    _check_stack(model.decoder.stack, *paper["decoder"])
    cross, n = _measured_gain([b.cross_attn for b in model.decoder.stack.blocks], ("v_proj.weight", "o_proj.weight"))
    assert cross == pytest.approx(paper["decoder"][1], rel=5 / math.sqrt(2 * n))
    if (n_enc, n_dec) == (6, 6):  # the numbers the issue quotes: the encoder's gain 0.50, the decoder's 0.34
        assert (round(paper["encoder"][1], 2), round(paper["decoder"][1], 2)) == (0.5, 0.34)


@pytest.mark.parametrize("n_layers", [6, 12, 24])
def test_deepnorm_decoder_only_alpha_and_beta(n_layers):
    torch.manual_seed(0)
    model = build_model(ModelConfig(architecture="decoder_lm", n_layers=n_layers, **SMALL))
    _check_stack(model.stack, *_paper(0, n_layers)["decoder"])


def test_deepnorm_encoder_only_alpha_and_beta():
    torch.manual_seed(0)
    model = build_model(ModelConfig(architecture="encoder", n_layers=12, **SMALL))
    _check_stack(model.stack, *_paper(12, 0)["encoder"])


@pytest.mark.parametrize("init", ["normal", "xavier", "deepnet"])
def test_deepnorm_brings_its_beta_whatever_init_says(init):
    """``norm_position="deepnorm"`` is DeepNet's whole recipe: the same weights from the same seed for any
    ``init`` (the field's comment in config.py says so)."""

    def weights(init_name):
        torch.manual_seed(0)
        cfg = ModelConfig(architecture="decoder_lm", n_layers=4, init=init_name, **SMALL)
        return torch.cat([p.detach().flatten() for p in build_model(cfg).parameters()])

    assert torch.equal(weights(init), weights("deepnet"))


def test_deepnorm_scales_the_value_third_of_a_fused_qkv():
    torch.manual_seed(0)
    model = build_model(ModelConfig(architecture="decoder_lm", n_layers=12, fused_qkv=True, **SMALL))
    beta = _paper(0, 12)["decoder"][1]
    q, k, v = (
        torch.cat([b.attn.qkv_proj.weight.detach()[i * 64 : (i + 1) * 64].flatten() for b in model.stack.blocks])
        for i in range(3)
    )
    xavier = math.sqrt(2 / (64 + 64))  # each third is a (D, D) matrix
    tol = 5 / math.sqrt(2 * v.numel())
    assert v.std().item() / xavier == pytest.approx(beta, rel=tol)
    assert q.std().item() / xavier == pytest.approx(1.0, rel=tol)
    assert k.std().item() / xavier == pytest.approx(1.0, rel=tol)


def test_without_deepnorm_alpha_and_beta_are_one():
    torch.manual_seed(0)
    model = build_model(
        ModelConfig(architecture="seq2seq", n_layers=6, init="deepnet", **{**SMALL, "norm_position": "post"})
    )
    _check_stack(model.encoder.stack, 1.0, 1.0)
    _check_stack(model.decoder.stack, 1.0, 1.0)


# ---------------------------------------------------------------------------------------- the t5 preset is T5

T5_SMALL_HF = {  # t5-small's config.json (the fields the converter reads; the others are at HF's defaults)
    "architectures": ["T5ForConditionalGeneration"],
    "model_type": "t5",
    "d_model": 512,
    "d_kv": 64,
    "d_ff": 2048,
    "num_layers": 6,
    "num_heads": 8,
    "vocab_size": 32128,
    "relative_attention_num_buckets": 32,
    "dropout_rate": 0.1,
    "layer_norm_epsilon": 1e-6,
    "feed_forward_proj": "relu",
    "decoder_start_token_id": 0,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "n_positions": 512,
}


def test_the_t5_preset_is_what_the_hf_converter_reads_from_t5_small():
    from anatomy.interop.hf import config_from_hf

    ours, hf = ModelConfig.from_preset("t5"), config_from_hf(T5_SMALL_HF)
    assert ours.decoder_layers == hf.decoder_layers == 6  # None (= n_layers) in the preset, 6 from HF
    ours, hf = (
        {k: v for k, v in c.to_dict().items() if k != "n_decoder_layers" and k not in TOKEN_FIELDS} for c in (ours, hf)
    )  # the preset names no tokens; t5-small's eos is 1
    assert {k for k in ours if ours[k] != hf[k]} == set()
    assert ours["output_scale"] == pytest.approx(512**-0.5)


@pytest.mark.parametrize(
    "overrides,scale",
    [({"d_model": 32}, 32**-0.5), ({"tie_embeddings": False}, 1.0), ({"d_model": 64, "output_scale": 1.0}, 1.0)],
)
def test_the_t5_output_scale_follows_d_model_and_the_tied_head(overrides, scale):
    assert ModelConfig.from_preset("t5", **overrides).output_scale == pytest.approx(scale)


def test_a_decoder_only_lm_is_built_from_a_transformer_stack_not_an_encoder():
    """Names say what a thing is: a decoder-only LM's body is the one TransformerStack of TransformerBlocks (no
    cross-attention), not an EncoderStack of EncoderBlocks; encoder and seq2seq keep their named forms."""
    from anatomy.components.block import DecoderBlock, EncoderBlock, TransformerBlock
    from anatomy.models.decoder import DecoderStack
    from anatomy.models.encoder import EncoderStack
    from anatomy.models.stack import TransformerStack

    lm = build_model(ModelConfig(architecture="decoder_lm", d_model=32, n_heads=4, n_layers=2, vocab_size=50))
    assert type(lm.stack) is TransformerStack and all(type(b) is TransformerBlock for b in lm.stack.blocks)
    assert all(b.cross_attn is None for b in lm.stack.blocks)
    s2s = build_model(ModelConfig(architecture="seq2seq", d_model=32, n_heads=4, n_layers=2, vocab_size=50))
    assert type(s2s.encoder.stack) is EncoderStack and type(s2s.decoder.stack) is DecoderStack
    assert all(type(b) is EncoderBlock for b in s2s.encoder.stack.blocks)
    assert all(type(b) is DecoderBlock for b in s2s.decoder.stack.blocks)


def test_rmsnorm_refuses_a_bias_it_has_no_place_for_and_build_gives_it_none():
    """RMSNorm has no shift: ``bias=`` is refused by name instead of accepted and ignored; ``EncoderBlock.build``
    with ``norm="rmsnorm"`` and the default ``bias=True`` gives the projections their bias and the norms none."""
    with pytest.raises(TypeError, match="bias"):
        RMSNorm(8, bias=False)
    block = EncoderBlock.build(d_model=8, n_heads=2, norm="rmsnorm", placement="pre", bias=True)
    norm = block.attn_add_norm.norm
    assert isinstance(norm, RMSNorm) and [n for n, _ in norm.named_parameters()] == ["weight"]
    assert block.attn.o_proj.bias is not None


def test_there_is_one_block_factory_and_each_norm_rule_is_written_once():
    """``EncoderBlock.build`` / ``DecoderBlock.build`` call components/block.py's ``build_block``, the builder
    ``build_model`` uses for every block (no class is patched at import); the RMSNorm rules live in ``make_norm``
    only."""
    from anatomy.components import block as blocks
    from anatomy.components.block import EncoderBlock
    from anatomy.models import build as builder

    assert builder.build_block is blocks.build_block and "build_block(cls" in inspect.getsource(blocks.TransformerBlock)
    assert "TransformerBlock.build =" not in BUILD.read_text(encoding="utf-8")
    components = Path(builder.__file__).parents[1] / "components"
    made = [
        p.name for p in components.rglob("*.py") if "RMSNorm(" in p.read_text(encoding="utf-8") and p.name != "norms.py"
    ]
    assert made == [], f"norms made outside components/norms.py: {made}"
    assert BUILD.read_text(encoding="utf-8").count("RMSNorm(") == 0
    block = EncoderBlock.build(d_model=8, n_heads=2, norm="rmsnorm", norm_offset=1.0)
    assert block.attn_add_norm.norm.offset == 1.0 and not hasattr(block.attn_add_norm.norm, "bias")
    with pytest.raises(ValueError, match="norm_offset=1.0 needs norm='rmsnorm'"):
        EncoderBlock.build(d_model=8, n_heads=2, norm="layernorm", norm_offset=1.0)
