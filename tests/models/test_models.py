"""The five models: outputs, losses, pooling, tying, presets, naming, initialisation."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from anatomy import PRESETS, ModelConfig, build_model
from anatomy.models import Classifier, DecoderLM, DecoderStack, Encoder, EncoderStack, Seq2Seq
from anatomy.models.seq2seq import shift_right

SMALL = dict(
    vocab_size=40, d_model=32, n_heads=4, n_layers=2, d_ff=None, max_seq_len=32, dropout=0.0, attention_dropout=0.0
)


def small(preset: str, **kw) -> ModelConfig:
    kv = {"n_kv_heads": 2} if preset in ("llama", "qwen3") else {}
    return ModelConfig.from_preset(preset, **{**SMALL, **kv, **kw})


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_builds_and_runs_small(preset):
    torch.manual_seed(0)
    model = build_model(small(preset)).eval()
    ids = torch.randint(1, 40, (2, 6))
    out = model(ids, labels=ids) if isinstance(model, (DecoderLM, Seq2Seq)) else model(ids)
    tensor = out.logits if hasattr(out, "logits") else out.last_hidden_state
    assert torch.isfinite(tensor).all()
    if hasattr(out, "loss") and out.loss is not None:
        assert abs(out.loss.item() - math.log(40)) < 1.5  # near uniform at init


def test_lm_loss_is_shifted_cross_entropy_with_ignore_index():
    model = build_model(small("gpt2")).eval()
    ids = torch.randint(0, 40, (2, 7))
    labels = ids.clone()
    labels[0, 3] = -100
    out = model(ids, labels=labels)
    ref = F.cross_entropy(out.logits[:, :-1].reshape(-1, 40), labels[:, 1:].reshape(-1), ignore_index=-100)
    assert torch.allclose(out.loss, ref)


def test_seq2seq_teacher_forcing_and_cross_attention_shapes():
    model = build_model(small("vaswani-2017")).eval()
    src, tgt = torch.randint(1, 40, (2, 9)), torch.randint(1, 40, (2, 5))
    assert shift_right(tgt, 0)[:, 0].tolist() == [0, 0] and torch.equal(shift_right(tgt, 0)[:, 1:], tgt[:, :-1])
    out = model(src, labels=tgt, output_attentions=True)
    assert out.logits.shape == (2, 5, 40)
    assert out.cross_attentions[0].shape == (2, 4, 5, 9)  # (B, H, T, S) with S != T
    assert out.decoder_attentions[0].shape == (2, 4, 5, 5)
    ref = F.cross_entropy(out.logits.reshape(-1, 40), tgt.reshape(-1))
    assert torch.allclose(out.loss, ref)
    w = out.decoder_attentions[1]
    assert torch.count_nonzero(w.triu(1)) == 0  # causal self-attention


def test_tied_and_untied_heads():
    tied = build_model(small("gpt2"))
    assert tied.lm_head.weight is tied.embeddings.embed_tokens.weight
    untied = build_model(small("gpt2", tie_embeddings=False))
    assert untied.lm_head.weight is not untied.embeddings.embed_tokens.weight
    s2s = build_model(small("t5"))
    assert s2s.encoder.embeddings.embed_tokens is s2s.decoder.embeddings.embed_tokens


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_classifier_pooling_ignores_padding(pooling):
    torch.manual_seed(0)
    model = build_model(small("bert", architecture="classifier", pooling=pooling, num_labels=3)).eval()
    assert isinstance(model, Classifier)
    ids = torch.randint(1, 40, (1, 5))
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1] * 5 + [0] * 3])
    alone = model(ids).logits
    assert torch.allclose(model(padded, mask).logits, alone, atol=1e-5)
    out = model(ids, labels=torch.tensor([2]))
    assert torch.allclose(out.loss, F.cross_entropy(alone, torch.tensor([2])), atol=1e-5)


def test_bert_token_types_change_the_output():
    model = build_model(small("bert")).eval()
    assert isinstance(model, Encoder)
    ids = torch.randint(1, 40, (1, 5))
    a = model(ids).last_hidden_state
    b = model(ids, token_type_ids=torch.ones_like(ids)).last_hidden_state
    assert (a - b).abs().max() > 1e-3


def test_state_dict_names_follow_the_checkpoint_vocabulary():
    keys = set(build_model(small("llama")).state_dict())
    for key in [
        "stack.blocks.0.attn.q_proj.weight",
        "stack.blocks.0.attn.k_proj.weight",
        "stack.blocks.0.attn.o_proj.weight",
        "stack.blocks.0.ffn.gate_proj.weight",
        "stack.blocks.0.ffn.up_proj.weight",
        "stack.blocks.0.ffn.down_proj.weight",
        "stack.blocks.0.attn_add_norm.norm.weight",
        "stack.final_norm.weight",
        "lm_head.weight",
    ]:
        assert key in keys, key
    assert build_model(small("llama")).stack.blocks[0].attn.k_proj.out_features == 16  # Hkv * Dh = 2 * 8


def test_gpt2_init_scales_residual_projections():
    torch.manual_seed(0)
    model = build_model(small("gpt2", d_model=256, n_layers=8))
    o = model.stack.blocks[0].attn.o_proj.weight.std().item()
    qkv = model.stack.blocks[0].attn.qkv_proj.weight.std().item()
    assert qkv == pytest.approx(0.02, rel=0.05)
    assert o == pytest.approx(0.02 / math.sqrt(16), rel=0.05)


def test_deepnorm_blocks_carry_alpha_and_beta_scaled_init():
    cfg = small("bert", norm_position="deepnorm", init="deepnet", n_layers=6, d_model=128)
    model = build_model(cfg)
    alpha, beta = (12) ** 0.25, (48) ** -0.25
    assert model.stack.blocks[0].attn_add_norm.alpha == pytest.approx(alpha)
    v = model.stack.blocks[0].attn.v_proj.weight
    expected = beta * math.sqrt(2 / (v.shape[0] + v.shape[1]))
    assert v.std().item() == pytest.approx(expected, rel=0.1)


def test_final_norm_follows_placement():
    assert build_model(small("gpt2")).stack.final_norm is not None
    assert build_model(small("bert")).stack.final_norm is None
    assert build_model(small("bert", final_norm=True)).stack.final_norm is not None


def test_config_round_trips_through_json_and_overrides():
    cfg = ModelConfig.from_preset("llama", n_layers=3)
    assert cfg.n_layers == 3 and cfg.positional == "rope"
    assert ModelConfig.from_dict(__import__("json").loads(cfg.to_json())) == cfg
    assert cfg.replace(d_model=288).dh == 32
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d_model = 3  # frozen


def test_dropout_is_active_in_training_only():
    model = build_model(small("gpt2", dropout=0.5, attention_dropout=0.5))
    ids = torch.randint(0, 40, (2, 6))
    model.train()
    assert not torch.allclose(model(ids).logits, model(ids).logits)
    model.eval()
    assert torch.equal(model(ids).logits, model(ids).logits)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_train_and_eval_agree_on_real_tokens_with_padding(preset):
    """PyTorch's test_train_with_pad_and_catch_error: without dropout, train and eval modes give the same outputs at
    the positions that are not padding (we have one code path; this keeps it so), and nothing is NaN anywhere."""
    torch.manual_seed(0)
    model = build_model(small(preset))
    ids = torch.randint(1, 40, (3, 7))
    keep = torch.ones(3, 7, dtype=torch.bool)
    keep[1, :3] = False  # left padding
    keep[2, 5:] = False  # right padding
    if isinstance(model, Seq2Seq):

        def run():
            return model(ids, attention_mask=keep, decoder_input_ids=ids[:, :5]).logits

        real = torch.ones(3, 5, dtype=torch.bool)  # the decoder side has no padding here
    elif isinstance(model, Classifier):

        def run():
            return model(ids, attention_mask=keep).logits

        real = torch.ones(3, dtype=torch.bool)
    else:

        def run():
            out = model(ids, attention_mask=keep)
            return out.logits if hasattr(out, "logits") else out.last_hidden_state

        real = keep
    model.train()
    trained = run()
    model.eval()
    with torch.no_grad():
        evaluated = run()
    assert torch.isfinite(trained).all() and torch.isfinite(evaluated).all()
    torch.testing.assert_close(trained[real], evaluated[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_decoupled_head_width_builds_every_preset(preset):
    """head_dim set: 3 heads of 16 on d_model 32 (not divisible); q/k/v project to H·Dh = 48 and back to 32."""
    torch.manual_seed(0)
    kv = {"n_kv_heads": 1} if preset in ("llama", "qwen3") else {}
    config = ModelConfig.from_preset(preset, **{**SMALL, "n_heads": 3, "head_dim": 16, **kv})
    assert config.dh == 16
    model = build_model(config).eval()
    attn = next(m for m in model.modules() if hasattr(m, "inner_dim"))
    assert (attn.head_dim, attn.inner_dim, tuple(attn.o_proj.weight.shape)) == (16, 48, (32, 48))
    ids = torch.randint(1, 40, (2, 6))
    out = model(ids, labels=ids) if isinstance(model, (DecoderLM, Seq2Seq)) else model(ids)
    tensor = out.logits if hasattr(out, "logits") else out.last_hidden_state
    assert tensor.shape[:2] == (2, 6) and torch.isfinite(tensor).all()


def test_head_dim_validation():
    with pytest.raises(ValueError, match="d_model=32 must be divisible by n_heads=3 \\(or set head_dim"):
        ModelConfig.from_preset("gpt2", **{**SMALL, "n_heads": 3})
    with pytest.raises(ValueError, match="head_dim must be a positive integer or None, got 0"):
        ModelConfig.from_preset("gpt2", **{**SMALL, "head_dim": 0})
    with pytest.raises(ValueError, match="positional='rope' needs an even head dimension, got Dh=7"):
        ModelConfig.from_preset("llama", **{**SMALL, "n_kv_heads": 2, "head_dim": 7})
    assert ModelConfig.from_preset("gpt2", **SMALL).head_dim is None  # the post's d_k = d_model / h, implicit


def test_qk_norm_normalises_each_head_before_rope_and_survives_layout_conversion():
    from anatomy.interop.rope_layout import convert_rope_layout

    torch.manual_seed(0)
    config = small("llama", qk_norm=True, head_dim=12)
    assert (config.qk_norm_kind, small("gpt2", qk_norm=True).qk_norm_kind) == ("rmsnorm", "layernorm")
    assert small("seed-block", norm="batchnorm", qk_norm=True).qk_norm_kind == "layernorm"
    model = build_model(config).eval()
    attn = model.stack.blocks[0].attn
    assert tuple(attn.q_norm.weight.shape) == tuple(attn.k_norm.weight.shape) == (12,)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    q = {}
    ids = torch.randint(1, 40, (2, 6))
    with torch.no_grad():
        out = model(ids).logits
        attn.q_proj.weight.mul_(100.0)  # QK-norm makes the query's size irrelevant
        again = model(ids).logits
    torch.testing.assert_close(again, out, rtol=1e-4, atol=1e-4)  # 100x W_q: the same logits
    with torch.no_grad():  # with a unit weight every head's query has rms 1 (RoPE rotates pairs: norms kept)
        attn.q_norm.weight.fill_(1.0)
        q.clear()
        handle = attn.hook_q.register_forward_hook(lambda m, a, o: q.setdefault("q", o))
        model(ids)
        handle.remove()
    rms = q["q"].pow(2).mean(-1).sqrt()  # (B, H, T)
    torch.testing.assert_close(rms, torch.ones_like(rms), rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        attn.q_norm.weight.copy_(torch.linspace(0.5, 2.0, 12))  # not symmetric: the permutation must be right
        inter = convert_rope_layout(model, "interleaved")
        torch.testing.assert_close(inter(ids).logits, model(ids).logits, rtol=1e-5, atol=1e-5)
    assert not torch.equal(inter.stack.blocks[0].attn.q_norm.weight, attn.q_norm.weight)  # permuted with the dims


@pytest.mark.parametrize("preset", ["gpt2", "t5"])
def test_padded_forward_traces_into_one_graph(preset):
    """torch.compile sees one graph: the value checks (mask values, learned-position range, the zero-row guarantee)
    run in eager mode only, so a padded batch breaks no graph (it used to break 15 times for a 2-layer GPT-2)."""
    torch._dynamo.reset()
    model = build_model(small(preset)).eval()
    ids = torch.randint(1, 40, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, :2] = 0
    kw = {"decoder_input_ids": ids} if preset == "t5" else {}
    explained = torch._dynamo.explain(model)(ids, mask, **kw)
    assert explained.graph_break_count == 0, [r.reason.splitlines()[0] for r in explained.break_reasons]
    with pytest.raises(ValueError, match="attention_mask must hold only 0 and 1"):  # eager still checks values
        model(ids, mask * 2, **kw)


def test_window_with_t5_bias_is_refused():
    with pytest.raises(ValueError, match="sliding_window does not combine with positional='t5'"):
        ModelConfig.from_preset("t5", sliding_window=4)


@pytest.mark.parametrize(
    "pattern, layers, windows",
    [
        (None, 4, [3, 3, 3, 3]),  # a window without a pattern: every layer local (Mistral)
        ("LG", 4, [3, None, 3, None]),  # Gemma 2's alternation, the cycle repeated
        ("LLG", 6, [3, 3, None, 3, 3, None]),
        ("GGLL", 4, [None, None, 3, 3]),  # Qwen3's max_window_layers=2: the first two attend fully
    ],
)
def test_window_pattern_gives_each_layer_its_window(pattern, layers, windows):
    config = small("llama", n_layers=layers, sliding_window=3, window_pattern=pattern)
    model = build_model(config)
    assert [b.attn.sliding_window for b in model.stack.blocks] == windows
    assert [config.layer_window(i) for i in range(layers)] == windows
    assert [c.window for c in model.new_caches(16)] == windows  # a rolling cache on the local layers only
    seq = build_model(small("vaswani-2017", n_layers=2, n_decoder_layers=4, sliding_window=3, window_pattern="LG"))
    assert [b.attn.sliding_window for b in seq.encoder.stack.blocks] == [3, None]
    assert [b.attn.sliding_window for b in seq.decoder.stack.blocks] == [3, None, 3, None]
    assert all(b.cross_attn.sliding_window is None for b in seq.decoder.stack.blocks)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(window_pattern="LG"), "window_pattern needs sliding_window"),
        (
            dict(sliding_window=3, window_pattern="LX"),
            "window_pattern must be letters L \\(local\\) and G \\(global\\)",
        ),
        (dict(sliding_window=3, window_pattern=""), "window_pattern must be letters"),
        (dict(sliding_window=3, window_pattern="LGL"), "must cover 4 layers: give one letter per layer or a cycle"),
    ],
)
def test_window_pattern_is_validated(overrides, message):
    with pytest.raises(ValueError, match=message):
        small("llama", n_layers=4, **overrides)


def test_lm_loss_reads_the_logits_in_place_and_equals_the_shifted_copy():
    """The speed lever of issue 14: labels shifted (last one ignored) instead of the logits sliced and copied;
    the same value and the same gradient as the copy."""
    from anatomy.models.lm import lm_loss

    logits = torch.randn(3, 7, 11, requires_grad=True)
    labels = torch.randint(0, 11, (3, 7))
    labels[1, 4] = -100
    new = lm_loss(logits, labels)
    (g_new,) = torch.autograd.grad(new, logits)
    old = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
    (g_old,) = torch.autograd.grad(old, logits)
    torch.testing.assert_close(new, old, rtol=1e-6, atol=0)
    torch.testing.assert_close(g_new, g_old, rtol=1e-6, atol=1e-9)
    assert torch.count_nonzero(g_new[:, -1]) == 0  # the last position predicts nothing


def test_one_stack_class_and_one_block_class_serve_every_architecture():
    from anatomy.components.block import DecoderBlock, EncoderBlock, TransformerBlock
    from anatomy.models.stack import TransformerStack

    assert EncoderBlock.build.__func__ is DecoderBlock.build.__func__  # one shared build
    assert TransformerStack.forward is EncoderStack.forward is DecoderStack.forward
    cfg = dict(vocab_size=40, d_model=16, n_heads=2, n_layers=2, max_seq_len=16)
    for arch in ("decoder_lm", "encoder", "seq2seq"):
        model = build_model(ModelConfig(architecture=arch, **cfg))
        stacks = [m for m in model.modules() if isinstance(m, TransformerStack)]
        assert stacks and all(isinstance(b, TransformerBlock) for s in stacks for b in s.blocks)
        crossed = [s.cross for s in stacks]
        assert crossed == ([False, True] if arch == "seq2seq" else [False])


def test_seq2seq_logits_to_keep_are_the_full_logits_rows():
    """The encoder-decoder's head reads only the decoder positions kept, as ``DecoderLM``'s (HF's meaning)."""
    from anatomy import ModelConfig, build_model

    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset("t5", vocab_size=40, d_model=16, n_heads=2, n_layers=1, d_ff=32)).eval()
    ids, dec = torch.randint(1, 40, (2, 6)), torch.randint(1, 40, (2, 5))
    with torch.no_grad():
        full = model(ids, decoder_input_ids=dec).logits
        for keep, rows in [(2, [3, 4]), (0, [0, 1, 2, 3, 4]), (torch.tensor([0, 3]), [0, 3])]:
            kept = model(ids, decoder_input_ids=dec, logits_to_keep=keep).logits
            torch.testing.assert_close(kept, full[:, rows], atol=1e-6 * full.abs().max().item(), rtol=0)
    with pytest.raises(ValueError, match="labels need the logits of every position"):
        model(ids, labels=dec, logits_to_keep=1)
