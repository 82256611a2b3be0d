"""The logit lens: each captured residual through the final norm and unembedding; the last row is the logits."""

from __future__ import annotations

import pytest
import torch

import anatomy
from anatomy.inspection import capture, lens_figure, lens_hooks, logit_lens
from anatomy.inspection.logit_lens import unembed


def _lm(preset: str, **overrides):
    torch.manual_seed(0)
    sizes = dict(n_layers=3, n_heads=4, n_kv_heads=2, d_model=32, d_ff=64, vocab_size=40, max_seq_len=16)
    return anatomy.build_model(anatomy.ModelConfig.from_preset(preset, **{**sizes, **overrides})).eval()


def _ids(t: int = 8):
    return torch.randint(0, 40, (2, t), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("preset", ["gpt2", "llama"])
def test_the_lens_on_the_last_layer_equals_the_models_logits(preset):
    model = _lm(preset)
    with torch.no_grad(), capture(model, lens_hooks(model)) as cache:
        logits = model(_ids()).logits
    lens = logit_lens(model, cache)
    assert lens.labels == ["embeddings", "block 0", "block 1", "block 2"]
    assert lens.logits.shape == (4, 2, 8, 40)
    assert torch.equal(lens.logits[-1], logits)
    assert not torch.allclose(lens.logits[1], logits, atol=1e-3)  # earlier layers do read differently
    # the embeddings row is the token embedding (+ positions) read through the head
    torch.testing.assert_close(lens.logits[0], unembed(model, cache["stack.blocks.0.hook_resid_pre"]))
    ids, p = lens.top()
    assert ids.shape == p.shape == (4, 2, 8) and bool(((p > 0) & (p <= 1)).all())
    assert torch.equal(ids[-1], logits.argmax(-1))


def test_the_lens_of_a_seq2seq_decoder_applies_the_output_scale():
    model = _lm("t5", n_layers=2, head_dim=8, output_scale=32**-0.5)
    src, tgt = _ids(6), _ids(5)
    hooks = lens_hooks(model)
    assert hooks[0] == "decoder.stack.blocks.0.hook_resid_pre"
    with torch.no_grad(), capture(model, hooks) as cache:
        logits = model(src, decoder_input_ids=tgt).logits
    assert model.output_scale != 1.0
    assert torch.equal(logit_lens(model, cache).logits[-1], logits)


def test_bad_input_is_named():
    model = _lm("gpt2")
    with pytest.raises(ValueError, match="the cache holds no 'stack.blocks.0.hook_resid_pre'"):
        logit_lens(model, {})
    with pytest.raises(ValueError, match="layers: block 5 does not exist"):
        logit_lens(model, {}, layers=[5])
    encoder = anatomy.build_model(
        anatomy.ModelConfig.from_preset(
            "bert", n_layers=1, d_model=32, n_heads=4, d_ff=64, vocab_size=40, max_seq_len=16
        )
    )
    with pytest.raises(ValueError, match="has no lm_head"):
        lens_hooks(encoder)


def test_lens_figure(tmp_path):
    pytest.importorskip("matplotlib")
    from anatomy.inspection.figures import save_figure

    model = _lm("gpt2")
    ids = _ids()
    with torch.no_grad(), capture(model, lens_hooks(model)) as cache:
        model(ids)
    lens = logit_lens(model, cache, layers=[0, 2])
    assert lens.labels == ["block 0", "block 2"]
    fig = lens_figure(
        lens, tokens=[f"t{i}" for i in range(8)], decode=lambda i: chr(97 + i % 26), targets=ids[0].roll(-1)
    )
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["block 0", "block 2"]
    assert len(ax.texts) == 2 * 8  # one top-1 token per layer and position
    image = ax.images[0].get_array()
    want = lens.probs()[:, 0].gather(-1, ids[0].roll(-1).expand(2, -1)[..., None])[..., 0]
    torch.testing.assert_close(torch.as_tensor(image.data), want.to(torch.float32), atol=1e-6, rtol=0)
    out = save_figure(fig, tmp_path / "lens.png")
    assert (tmp_path / "lens.png").stat().st_size > 1000 and out.endswith("lens.png")
    with pytest.raises(ValueError, match="tokens must label every position"):
        lens_figure(lens, tokens=["a"])


def test_the_lens_applies_a_final_logit_soft_cap():
    """Gemma 2 caps the logits after the head (c * tanh(logits / c)): the lens's last row still equals them."""
    model = _lm("gpt2", final_logit_softcap=3.0)
    with torch.no_grad(), capture(model, lens_hooks(model)) as cache:
        logits = model(_ids()).logits
    lens = logit_lens(model, cache)
    assert float(logits.abs().max()) < 3.0
    assert torch.equal(lens.logits[-1], logits)
