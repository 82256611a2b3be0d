"""The lab's ``fit`` takes ``anatomy train``'s own step (training/step.train_step), and gives the numbers of the
plain loop it replaced bit for bit: the claims' metrics depend on it."""

from __future__ import annotations

import math

import pytest
import torch

from anatomy.experiments import fitting
from anatomy.experiments.fitting import fit, tiny_model
from anatomy.training import step as training_step


def _batches(seed: int = 0, n: int = 40):
    g = torch.Generator().manual_seed(seed)
    ids = [(torch.randint(0, 64, (4, 1), generator=g) + torch.arange(16)) % 64 for _ in range(n)]  # (B, T) counting
    return lambda step: {"input_ids": ids[step], "labels": ids[step]}


def _plain_fit(model, batch, steps, *, lr=3e-3, warmup=0, clip=1.0, decay=False):
    """The loop ``fit`` was before it took train_step: forward, zero_grad, backward, clip, step, item()."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    model.train()
    for step in range(steps):
        for group in opt.param_groups:
            ramp = min(1.0, (step + 1) / warmup) if warmup else 1.0
            group["lr"] = lr * ramp * ((1 - step / steps) if decay else 1.0)
        loss = model(**batch(step)).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            losses += [float("nan")] * (steps - step - 1)
            break
    model.eval()
    return losses


def _pair(**overrides):
    torch.manual_seed(0)
    a = tiny_model(n_layers=1, d_model=32, **overrides)
    b = tiny_model(n_layers=1, d_model=32, **overrides)
    b.load_state_dict(a.state_dict())
    return a, b


@pytest.mark.parametrize("kwargs", [{}, {"clip": None, "lr": 1e-2}, {"warmup": 5, "decay": True}])
def test_fit_equals_the_plain_loop_bit_for_bit(kwargs):
    ours, plain = _pair()
    got = fit(ours, _batches(), 12, **kwargs)
    want = _plain_fit(plain, _batches(), 12, **kwargs)
    assert got == want and len(got) == 12 and got[-1] < got[0]
    for (name, p), q in zip(ours.named_parameters(), plain.parameters()):
        assert torch.equal(p, q), name


def test_fit_with_decay_falls_linearly_after_the_warmup():
    ours, plain = _pair()
    assert fit(ours, _batches(), 10, warmup=3, decay=True) == _plain_fit(plain, _batches(), 10, warmup=3, decay=True)


def test_fit_takes_train_step_and_its_hook_sees_the_gradients(monkeypatch):
    calls, seen = [], []
    real = training_step.train_step

    def counting(*args, **kwargs):
        calls.append(kwargs.get("lr", args[2]))
        return real(*args, **kwargs)

    monkeypatch.setattr(fitting, "train_step", counting)
    model, _ = _pair()
    fit(
        model,
        _batches(),
        4,
        lr=1e-3,
        warmup=2,
        on_step=lambda s, m: seen.append((s, m.lm_head.weight.grad is not None)),
    )
    assert calls == pytest.approx([5e-4, 1e-3, 1e-3, 1e-3])
    assert seen == [(0, True), (1, True), (2, True), (3, True)]
    assert all(p.grad is None for p in model.parameters())  # cleared after the last step


def test_a_nan_run_stays_nan_and_the_nan_step_is_taken():
    ours, plain = _pair()
    got = fit(ours, _batches(), 6, lr=1e6, clip=None)
    want = _plain_fit(plain, _batches(), 6, lr=1e6, clip=None)
    assert len(got) == 6 and math.isnan(got[-1])
    assert [repr(v) for v in got] == [repr(v) for v in want]
    assert all(
        torch.equal(p, q) or (p.isnan() == q.isnan()).all() for p, q in zip(ours.parameters(), plain.parameters())
    )
