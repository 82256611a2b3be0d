"""Output head and cross-entropy in one pass, chunk by chunk: the logits ``(N, V)`` are never stored whole.

``linear_cross_entropy(hidden, weight, targets)`` equals ``F.cross_entropy(hidden @ weight.T, targets,
ignore_index=-100)`` to float round-off, forward and gradients (tests/training/test_fused_loss.py). It computes the
gradients in the forward pass, ``chunk`` rows at a time, while each chunk of logits is still in cache:

    logp_c   = log_softmax(h_c W^T)     (c, V)   one buffer per chunk
    loss    -= sum(logp_c[target])
    g_c      = exp(logp_c) - onehot(target)   in place
    dh_c     = (g_c W) / n              (c, D)   ignored rows: 0
    dW      += g_c^T (h_c / n)          (V, D)

and the backward pass only scales ``dh`` and ``dW`` by the incoming gradient (the loss is a scalar). So one
``(c, V)`` buffer replaces the ``(N, V)`` logits, their log-softmax and its gradient (three ``N x V`` tensors at
``N = B*T``). The matmuls are the same as the unfused path's; what it saves is memory traffic and peak memory.
Tied embeddings work as usual: autograd adds ``dW`` to the embedding's gradient.
"""

from __future__ import annotations

from typing import Any

import torch


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ignore_index: int, chunk: int
    ) -> torch.Tensor:
        n_rows = hidden.shape[0]
        valid = targets != ignore_index  # (N,)
        count = valid.sum()
        scale = 1.0 / count.clamp(min=1).to(torch.float32)  # the mean over counted rows
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros_like(weight, dtype=torch.float32) if need_w else None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        minus_one = torch.full((min(chunk, n_rows), 1), -1.0, device=hidden.device)  # (c, 1)
        for start in range(0, n_rows, chunk):
            h = hidden[start : start + chunk]  # (c, D)
            ok = valid[start : start + chunk]  # (c,)
            safe = torch.where(ok, targets[start : start + chunk], 0)[:, None]  # (c, 1)
            logp = torch.log_softmax((h @ weight.t()).float(), dim=1)  # (c, V)
            total -= logp.gather(1, safe).squeeze(1).mul_(ok).sum()
            if not (need_h or need_w):
                continue
            probs = logp.exp_()  # softmax, in place  (c, V)
            probs.scatter_add_(1, safe, minus_one[: len(safe)])  # minus the one-hot  (c, V)
            g = probs.to(hidden.dtype)  # (c, V)
            rows = (ok * scale).to(hidden.dtype)[:, None]  # 1/n, or 0 on ignored rows: on (c, D), not (c, V)  (c, 1)
            if grad_h is not None:
                torch.mm(g, weight, out=grad_h[start : start + chunk]).mul_(rows)  # (c, D)
            if grad_w is not None:
                grad_w.addmm_(g.t(), h * rows)  # (V, D)
        ctx.weight_dtype = weight.dtype
        ctx.save_for_backward(grad_h, grad_w)
        return total * scale

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_h, grad_w = ctx.saved_tensors
        dh = None if grad_h is None else grad_h * grad_out.to(grad_h.dtype)
        dw = None if grad_w is None else (grad_w * grad_out).to(ctx.weight_dtype)
        return dh, dw, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = -100, chunk: int = 256
) -> torch.Tensor:
    """Mean cross-entropy of ``hidden @ weight.T`` against ``targets``, rows labelled ``ignore_index`` left out.

    ``hidden: (N, D)``, ``weight: (V, D)`` (an ``nn.Linear``'s weight without bias, e.g. a tied LM head),
    ``targets: (N,)`` integer classes. ``chunk``: rows per pass (the ``(chunk, V)`` buffer is the only logits
    stored). Under ``torch.no_grad()`` (or when neither input needs a gradient) only the loss is computed."""
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(
            f"hidden must be (N, D) and weight (V, D) with the same D, got {tuple(hidden.shape)} "
            f"and {tuple(weight.shape)}"
        )
    if targets.shape != hidden.shape[:1]:
        raise ValueError(f"targets must have shape (N,)={tuple(hidden.shape[:1])}, got {tuple(targets.shape)}")
    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive integer (rows per pass), got {chunk!r}")
    loss: torch.Tensor = _LinearCrossEntropy.apply(  # type: ignore[no-untyped-call]  # torch's Function.apply
        hidden, weight, targets, ignore_index, chunk
    )
    return loss


def lm_linear_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, *, chunk: int = 256
) -> torch.Tensor:
    """``anatomy.models.lm.lm_loss(hidden @ weight.T, labels)`` without the logits: position ``t`` predicts
    ``labels[t + 1]``, label -100 ignored. ``hidden: (B, T, D)`` (after the final norm), ``labels: (B, T)``."""
    if labels.shape != hidden.shape[:2]:
        raise ValueError(f"labels must have shape (B, T)={tuple(hidden.shape[:2])}, got {tuple(labels.shape)}")
    targets = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)  # (B, T)
    return linear_cross_entropy(hidden.flatten(0, 1), weight, targets.flatten(), chunk=chunk)  # (B*T, D)
