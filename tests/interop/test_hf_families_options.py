"""The new families' design choices: read into named ModelConfig fields, each one shown to matter, RoPE scaling
tables equal to transformers' own functions, what cannot be expressed refused by name, and to_hf choosing the
family that holds a config of ours."""

from __future__ import annotations

import math
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

from test_hf_families import FAMILIES, IDS, LEFT, LLAMA3, _diff, _logits, gemma2, llama  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

from anatomy import ModelConfig, build_model  # noqa: E402
from anatomy.components.positional import RopeScaling  # noqa: E402
from anatomy.interop.hf import config_from_hf, from_hf, to_hf  # noqa: E402
from anatomy.interop.safetensors_io import CheckpointError  # noqa: E402


def _variant(ours, **changes):
    """The same weights in a model whose config differs by ``changes``."""
    other = build_model(ours.config.replace(**changes)).eval()
    other.load_state_dict(ours.state_dict())
    return other


# ------------------------------------------------------------------------------------------ read, and they matter


@pytest.mark.parametrize(
    "name, fields, off",
    [
        (
            "llama3-rope",
            dict(
                rope_scaling="llama3",
                rope_factor=8.0,
                rope_original_max_len=32,
                rope_low_freq_factor=1.0,
                rope_high_freq_factor=4.0,
                head_dim=16,
            ),
            dict(rope_scaling=None, rope_factor=1.0),
        ),
        ("llama-linear-rope", dict(rope_scaling="linear", rope_factor=4.0), dict(rope_scaling=None, rope_factor=1.0)),
        (
            "llama-yarn-rope",
            dict(
                rope_scaling="yarn",
                rope_factor=4.0,
                rope_original_max_len=16,
                rope_attention_factor=None,
                rope_beta_fast=32.0,
                rope_truncate=True,
            ),
            dict(rope_attention_factor=1.0),
        ),  # the yarn cos/sin multiplier 0.1 ln 4 + 1 matters on its own
        ("qwen2", dict(bias=False, qkv_bias=True, qk_norm=False), dict(qkv_bias=None)),
        (
            "gemma",
            dict(
                norm_weight_offset=1.0, scale_embeddings=True, activation="geglu_tanh", head_dim=16, norm_position="pre"
            ),
            dict(norm_weight_offset=0.0),
        ),
        ("gemma", {}, dict(scale_embeddings=False)),
        (
            "gemma2",
            dict(
                norm_position="sandwich",
                attn_softcap=5.0,
                final_logit_softcap=3.0,
                sliding_window=4,
                window_pattern="LG",
                attn_scale=12**-0.5,
            ),
            dict(attn_softcap=None),
        ),
        ("gemma2", {}, dict(final_logit_softcap=None)),
        ("gemma2", {}, dict(attn_scale=None)),
        (
            "phi3-partial-window",
            dict(fused_qkv=True, rope_fraction=0.5, sliding_window=4, bias=False),
            dict(rope_fraction=1.0),
        ),
        (
            "gpt-neox",
            dict(
                parallel_residual=True,
                rope_fraction=0.5,
                fused_qkv=True,
                norm="layernorm",
                bias=True,
                tie_embeddings=False,
                activation="gelu",
            ),
            dict(parallel_residual=False),
        ),
        ("gpt-neox", {}, dict(rope_fraction=1.0)),
    ],
)
def test_family_options_are_read_and_each_one_matters(name, fields, off):
    hf = FAMILIES[name]()
    ours = from_hf(hf)
    for field, value in fields.items():
        assert getattr(ours.config, field) == value, field
    a, b, where = _logits(hf, ours, mask=LEFT)
    assert _diff(a[where], b[where]) <= 1e-5
    if "qkv_bias" in off:  # Qwen2 without its q/k/v bias: zero them (the state has them)
        other = ours
        with torch.no_grad():
            for block in other.stack.blocks:
                for p in (block.attn.q_proj, block.attn.k_proj, block.attn.v_proj):
                    p.bias.zero_()
        assert all(block.attn.o_proj.bias is None for block in ours.stack.blocks)
    else:
        other = _variant(ours, **off)
    _, c, _ = _logits(hf, other, mask=LEFT)
    assert _diff(c[where], b[where]) > 1e-3, f"{name}: {off} changed nothing"


def test_gemma2_final_logits_stay_inside_the_cap():
    ours = from_hf(gemma2())
    logits = ours(IDS).logits
    assert logits.abs().max() < 3.0 and logits.abs().max() > 2.5  # capped at 3, and the cap is reached
    assert _variant(ours, final_logit_softcap=None)(IDS).logits.abs().max() > 3.0


def test_old_rope_scaling_spelling_and_top_level_theta_are_read():
    c = config_from_hf(
        {
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "vocab_size": 128,
            "intermediate_size": 128,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        }
    )
    assert (c.rope_scaling, c.rope_factor, c.rope_base, c.rope_original_max_len) == ("llama3", 8.0, 500000.0, 8192)
    neox = config_from_hf(
        {
            "architectures": ["GPTNeoXForCausalLM"],
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "vocab_size": 128,
            "intermediate_size": 256,
            "rotary_pct": 0.25,
            "rotary_emb_base": 10000,
            "use_parallel_residual": True,
        }
    )
    assert (neox.rope_fraction, neox.rotary_dim, neox.rope_base, neox.parallel_residual) == (0.25, 4, 10000.0, True)
    gemma = config_from_hf(
        {
            "architectures": ["GemmaForCausalLM"],
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "vocab_size": 128,
            "intermediate_size": 256,
            "head_dim": 32,
            "hidden_act": "gelu",
            "hidden_activation": None,
        }
    )  # Gemma's legacy "gelu": tanh
    assert (gemma.activation, gemma.head_dim, gemma.norm_weight_offset) == ("geglu_tanh", 32, 1.0)


# ------------------------------------------------------------------------------------------ RoPE tables vs HF


@pytest.mark.parametrize(
    "params",
    [
        {"rope_type": "linear", "factor": 4.0},
        dict(LLAMA3),
        {
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },  # Llama 3.2's, on a real head width
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
        {
            "rope_type": "yarn",
            "factor": 8.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 16.0,
            "beta_slow": 2.0,
            "truncate": False,
            "attention_factor": 0.9,
        },
    ],
)
@pytest.mark.parametrize("head_dim", [16, 128])
def test_rope_scaling_tables_equal_transformers(params, head_dim):
    hf_config = transformers.LlamaConfig(
        hidden_size=4 * head_dim,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=131072,
        rope_parameters=dict(params),
    )
    expected, expected_factor = ROPE_INIT_FUNCTIONS[params["rope_type"]](hf_config, "cpu")
    c = config_from_hf(
        hf_config.to_dict()
        | {"architectures": ["LlamaForCausalLM"], "vocab_size": 8, "intermediate_size": 8, "num_hidden_layers": 1}
    )
    scaling = RopeScaling(
        c.rope_scaling,
        factor=c.rope_factor,
        original_max_len=c.rope_original_max_len,
        low_freq_factor=c.rope_low_freq_factor,
        high_freq_factor=c.rope_high_freq_factor,
        beta_fast=c.rope_beta_fast,
        beta_slow=c.rope_beta_slow,
        attention_factor=c.rope_attention_factor,
        truncate=c.rope_truncate,
    )
    got, factor = scaling.inv_freq(
        head_dim, c.rope_base, max_len=c.max_seq_len, length=0, dtype=torch.float32, device=torch.device("cpu")
    )
    assert got.dtype == torch.float32 and got.shape == expected.shape
    assert torch.allclose(got, expected, rtol=2e-7, atol=0)
    assert math.isclose(factor, expected_factor, rel_tol=1e-12)


@pytest.mark.parametrize("length", [10, 64, 65, 200, 5000])
def test_dynamic_ntk_tables_follow_the_length_like_transformers(length):
    hf_config = transformers.LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        max_position_embeddings=64,
        rope_parameters={"rope_type": "dynamic", "factor": 2.0},
    )
    # HF's forward recomputes with the call's length as a tensor once it passes max_position_embeddings
    expected, _ = ROPE_INIT_FUNCTIONS["dynamic"](hf_config, "cpu", seq_len=torch.tensor(length))
    got, _ = RopeScaling("dynamic", factor=2.0).inv_freq(
        16, 10000.0, max_len=64, length=length, dtype=torch.float32, device=torch.device("cpu")
    )
    plain = 10000.0 ** -(torch.arange(0, 16, 2, dtype=torch.float32) / 16)
    if length <= 64:
        assert torch.equal(got, plain)
        assert torch.allclose(got, expected, rtol=2e-7, atol=0)
    else:
        assert torch.allclose(got, expected, rtol=2e-7, atol=0)
        assert (got[1:] < plain[1:]).all()  # a grown base: slower rotations


# ------------------------------------------------------------------------------------------ refused by name


def _llama_dict(**kw):
    return {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 32,
        "num_attention_heads": 4,
        "vocab_size": 64,
        "num_hidden_layers": 1,
        "intermediate_size": 64,
        **kw,
    }


@pytest.mark.parametrize(
    "config, words",
    [
        (
            _llama_dict(rope_parameters={"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4}),
            "rope_parameters key(s) long_factor, short_factor",
        ),
        (_llama_dict(rope_parameters={"rope_type": "longrope", "factor": 2.0}), "rope_type='longrope'"),
        (_llama_dict(rope_parameters={"rope_type": "proportional", "factor": 2.0}), "rope_type='proportional'"),
        (_llama_dict(rope_parameters={"rope_type": "linear"}), "'linear' without a factor"),
        (_llama_dict(rope_parameters={"rope_type": "default", "mrope_section": [2, 2]}), "mrope_section"),
        (
            _llama_dict(rope_parameters={"full_attention": {"rope_type": "default"}, "sliding_attention": {}}),
            "rope_parameters per layer type (full_attention, sliding_attention)",
        ),
        (_llama_dict(partial_rotary_factor=0.5), "partial_rotary_factor=0.5"),
        (_llama_dict(attention_bias=True, mlp_bias=False), "attention_bias=True != mlp_bias=False"),
        (
            _llama_dict(architectures=["Phi3ForCausalLM"], rope_parameters={"rope_type": "longrope", "factor": 2.0}),
            "longrope",
        ),
        (_llama_dict(architectures=["GemmaForCausalLM"], hidden_activation="relu"), "hidden_activation='relu'"),
        (_llama_dict(architectures=["GemmaForCausalLM"], attention_bias=True), "attention_bias=True"),
        (
            _llama_dict(architectures=["Gemma2ForCausalLM"], use_bidirectional_attention=True),
            "use_bidirectional_attention=True",
        ),
        (
            _llama_dict(architectures=["Gemma2ForCausalLM"], num_hidden_layers=2, layer_types=["chunked", "full"]),
            "layer_types",
        ),
        (_llama_dict(architectures=["GPTNeoXForCausalLM"], attention_bias=False), "attention_bias=False"),
        (_llama_dict(architectures=["GPTNeoXForCausalLM"], hidden_act="quick_gelu"), "activation 'quick_gelu'"),
    ],
)
def test_what_cannot_be_expressed_is_refused_by_name(config, words):
    with pytest.raises(CheckpointError, match="not supported by anatomy's converter") as info:
        config_from_hf(config)
    assert words in str(info.value) and config["architectures"][0] in str(info.value)


# ------------------------------------------------------------------------------------------ ours → HF


def test_to_hf_picks_the_family_that_holds_our_config():
    small = dict(vocab_size=100, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, d_ff=64, max_seq_len=64)
    llama_cfg = ModelConfig.from_preset("llama", **small)
    cases = {
        "Qwen2ForCausalLM": llama_cfg.replace(qkv_bias=True),
        "Phi3ForCausalLM": llama_cfg.replace(fused_qkv=True, rope_fraction=0.5),
        "LlamaForCausalLM": llama_cfg.replace(rope_scaling="yarn", rope_factor=2.0, rope_original_max_len=32),
        "GemmaForCausalLM": llama_cfg.replace(
            activation="geglu_tanh", scale_embeddings=True, norm_weight_offset=1.0, head_dim=16
        ),
        "Gemma2ForCausalLM": llama_cfg.replace(
            activation="geglu_tanh",
            scale_embeddings=True,
            norm_weight_offset=1.0,
            norm_position="sandwich",
            attn_softcap=20.0,
            final_logit_softcap=9.0,
        ),
        "GPTNeoXForCausalLM": ModelConfig.from_preset("gpt2", **{**small, "n_kv_heads": None}).replace(
            positional="rope",
            rope_fraction=0.25,
            parallel_residual=True,
            tie_embeddings=False,
            dropout=0.0,
            attention_dropout=0.0,
        ),
    }
    for arch, cfg in cases.items():
        torch.manual_seed(0)
        ours = build_model(cfg).eval()
        with torch.no_grad():
            for p in ours.parameters():
                p.add_(0.1 * torch.randn_like(p))
        hf = to_hf(ours)
        assert type(hf).__name__ == arch
        assert from_hf(hf).config.replace(max_seq_len=cfg.max_seq_len) == cfg.replace(
            d_ff=64, pad_token_id=from_hf(hf).config.pad_token_id
        ), arch
        a, b, where = _logits(hf, ours, mask=LEFT)
        assert _diff(a[where], b[where]) <= 1e-5, arch


def test_to_hf_names_a_q_k_v_bias_no_family_holds():
    cfg = ModelConfig.from_preset("gpt2", vocab_size=64, d_model=32, n_heads=4, n_layers=1, qkv_bias=False)
    with pytest.raises(ValueError, match=r"closest is gpt2, which needs: qkv_bias=False with bias=True"):
        to_hf(build_model(cfg))


def test_partial_rotary_models_refuse_a_rope_layout_conversion():
    ours = from_hf(FAMILIES["gpt-neox"]())
    with pytest.raises(ValueError, match=r"partial-rotary model \(rope_fraction=0.5\)"):
        from_hf(FAMILIES["gpt-neox"](), rope_layout="interleaved")
    assert ours.config.rope_layout == "half"


def test_llama_without_scaling_is_unchanged_by_the_new_fields():
    ours = from_hf(llama())
    c = ours.config
    assert (c.rope_scaling, c.rope_factor, c.rope_fraction, c.qkv_bias, c.norm_weight_offset) == (
        None,
        1.0,
        1.0,
        None,
        0.0,
    )
    assert "rope_scaling" not in repr(ours.stack.blocks[0].attn.positional)
