"""The fused head + cross-entropy equals F.cross_entropy(lm_head(x)) to round-off: loss, gradient of the hidden
states and of the (tied) head weight, with ignored rows and chunks that do not divide the rows."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from anatomy import ModelConfig, build_model
from anatomy.training.fused_loss import linear_cross_entropy, lm_linear_cross_entropy


def _case(n=300, d=24, v=97, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=g, dtype=torch.float64).float().requires_grad_()
    weight = (torch.randn(v, d, generator=g) * 0.5).requires_grad_()
    targets = torch.randint(0, v, (n,), generator=g)
    targets[::7] = -100
    return hidden, weight, targets


@pytest.mark.parametrize("chunk", [1, 64, 256, 1000])
def test_loss_and_both_gradients_equal_the_unfused_ones(chunk):
    hidden, weight, targets = _case()
    ref = F.cross_entropy(hidden @ weight.t(), targets, ignore_index=-100)
    gh, gw = torch.autograd.grad(ref * 3.0, (hidden, weight))
    loss = linear_cross_entropy(hidden, weight, targets, chunk=chunk)
    fh, fw = torch.autograd.grad(loss * 3.0, (hidden, weight))  # the incoming gradient scales both
    assert abs(loss.item() - ref.item()) < 1e-5
    assert torch.allclose(fh, gh, atol=1e-5, rtol=0) and torch.allclose(fw, gw, atol=1e-5, rtol=0)
    assert gw.abs().max() > 1e-3 and fh[::7].abs().max() == 0  # ignored rows get no gradient


def test_a_wrong_target_changes_the_loss_and_all_ignored_gives_zero():
    hidden, weight, targets = _case(n=40)
    other = targets.clone()
    other[1] = (other[1] + 1) % 97
    assert linear_cross_entropy(hidden, weight, targets) != linear_cross_entropy(hidden, weight, other)
    none = torch.full_like(targets, -100)
    assert linear_cross_entropy(hidden, weight, none).item() == 0.0


def test_a_tied_lm_equals_lm_loss_forward_and_backward():
    torch.manual_seed(0)
    config = ModelConfig.from_preset(
        "gpt2",
        n_layers=2,
        n_heads=2,
        d_model=32,
        d_ff=64,
        vocab_size=50,
        max_seq_len=16,
        dropout=0.0,
        attention_dropout=0.0,
    )
    model = build_model(config)
    ids = torch.randint(0, 50, (3, 16), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[0, 5] = -100
    out = model(input_ids=ids, labels=labels, output_hidden_states=True)
    ref_grads = torch.autograd.grad(out.loss, list(model.parameters()), retain_graph=True)
    hidden = out.hidden_states[-1]  # (B, T, D) after the final norm
    fused = lm_linear_cross_entropy(hidden, model.lm_head.weight, labels, chunk=5)
    grads = torch.autograd.grad(fused, list(model.parameters()))
    assert abs(fused.item() - out.loss.item()) < 1e-5
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, atol=1e-5, rtol=0)


def test_no_grad_computes_only_the_loss_and_bad_shapes_are_refused():
    hidden, weight, targets = _case(n=20)
    with torch.no_grad():
        loss = linear_cross_entropy(hidden, weight, targets, chunk=3)
    assert loss.grad_fn is None
    assert abs(loss.item() - F.cross_entropy(hidden @ weight.t(), targets).item()) < 1e-5
    with pytest.raises(ValueError, match="same D"):
        linear_cross_entropy(hidden, weight[:, :5], targets)
    with pytest.raises(ValueError, match="targets must have shape"):
        linear_cross_entropy(hidden, weight, targets[:5])
    with pytest.raises(ValueError, match="chunk must be a positive integer"):
        linear_cross_entropy(hidden, weight, targets, chunk=0)
    with pytest.raises(ValueError, match="labels must have shape"):
        lm_linear_cross_entropy(hidden[None], weight, targets[None, :5])
