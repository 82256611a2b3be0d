"""Where the claims lab computes: ``--device`` (``cpu`` by default; ``cuda`` where there is a GPU).

The rule every experiment follows: random draws stay on the CPU's generators, seeded as before, and models are
initialised on the CPU (:func:`on`), then moved to ``trial.device``; everything computed from them (training,
evaluations, Monte-Carlo sums, timings) runs on ``trial.device``. So a run on a GPU starts from the same data and the
same initial weights as the CPU run, and only the arithmetic differs; on the CPU nothing changed, bit for bit.
Tensors an experiment creates later are made on the device of what they meet (``device=x.device``), never on the
default device (tests/experiments/test_devices.py runs the experiments with the default device set to ``meta``).

A wall clock read on a GPU waits for the GPU first (:func:`synchronize`): kernels are launched asynchronously.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch

T = TypeVar("T")


def available() -> list[str]:
    """The devices this machine offers the lab: ``cpu``, and ``cuda``/``cuda:N`` when torch sees GPUs."""
    out = ["cpu"]
    if torch.cuda.is_available():
        out += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return out


def check_device(device: str) -> str:
    """``device`` if the lab can run on it here (``cpu``, ``cuda``, ``cuda:N``); ValueError in one line naming
    ``--device`` and what is available otherwise. Nothing is started: this is asked before a run begins."""
    here = ", ".join(available())
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(
            f"--device {device!r}: not a device name (expected cpu or cuda[:N]; available here: {here})"
        ) from None
    if parsed.type == "cpu":
        if parsed.index not in (None, 0):
            raise ValueError(f"--device {device!r}: there is one CPU device, cpu (available here: {here})")
        return "cpu"
    if parsed.type != "cuda":
        raise ValueError(
            f"--device {device!r}: the claims lab runs on cpu or cuda[:N], not {parsed.type} (available here: {here})"
        )
    if not torch.cuda.is_available():
        why = "torch was built without CUDA" if torch.version.cuda is None else "no GPU is visible"
        raise ValueError(
            f"--device {device}: CUDA is not available on this machine ({why}, torch "
            f"{torch.__version__}); available here: {here}"
        )
    if parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise ValueError(
            f"--device {device}: this machine has {torch.cuda.device_count()} GPU(s); available here: {here}"
        )
    return str(parsed)


def is_cuda(device: str | torch.device) -> bool:
    return torch.device(device).type == "cuda"


def synchronize(device: str | torch.device) -> None:
    """Wait for the kernels queued on ``device`` (a GPU) before a clock is read; nothing on the CPU."""
    if is_cuda(device):
        torch.cuda.synchronize(device)


def on(device: str | torch.device, make: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``make(*args, **kwargs)`` (a module, a tensor or a dict of tensors) built on the CPU, with the CPU's generator
    (the same initial weights or draws on every device), then moved to ``device``: ``on(dev, torch.randn, 4, 8,
    generator=g)``, ``on(dev, lambda: MultiHeadAttention(d_model=8, n_heads=2).double())``."""
    with torch.device("cpu"):
        made: Any = make(*args, **kwargs)
    moved: Any = to_device(made, device) if isinstance(made, dict) else made.to(device)
    return cast(T, moved)


def to_device(batch: dict[str, Any], device: str | torch.device) -> dict[str, Any]:
    """A batch of keyword arguments with every tensor moved to ``device`` (the others as they are)."""
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def cpu_draws() -> torch.device:
    """The context in which an experiment draws its data and builds its models: ``with cpu_draws(): ...`` (the
    CPU, whatever the default device)."""
    return torch.device("cpu")
