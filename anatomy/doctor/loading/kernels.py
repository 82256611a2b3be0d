"""The kernels the learner's code runs on during a check: ``scaled_dot_product_attention`` on its math backend.

The doctor runs the learner's code in float64; code written for float32 still makes some tensors in float32 (a mask
built as ``torch.full(..., float("-inf"))`` before the default dtype was set, ``(1 - m.float()) * finfo.min``).
``F.scaled_dot_product_attention`` accepts a float32 additive mask on float64 queries, and PyTorch's fused CPU
kernel (the CPU "flash attention", its vector width picked by the CPU's capability) then computes every row
wrongly, neither the masked nor the unmasked result. With ATen's baseline or AVX2 kernels
(``ATEN_CPU_CAPABILITY=default``/``avx2``) this happens from T = 8 keys on, with AVX-512 from T = 16 (torch 2.13; a
float64 mask, or float32 queries, are right on all): a correct model "sees the future" at T = 12 on one CPU and
not on another. The math backend is the op's definition, computes
the mixed-dtype mask right on every CPU, and gives fully masked rows the same zeros the fused kernel gives, so
every run of the learner's forward (the block doctor's and the model doctor's) goes through it.
tests/doctor/test_reference_kernel.py reproduces the kernel's error and checks the fix under both capabilities.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch.nn.attention import SDPBackend, sdpa_kernel

__anatomy_transparent__ = True


@contextmanager
def reference_kernels() -> Iterator[None]:
    """Inside: ``F.scaled_dot_product_attention`` runs on its math backend, the same on every CPU."""
    with sdpa_kernel(SDPBackend.MATH):
        yield
