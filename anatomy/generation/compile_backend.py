"""How the compiled decode step is built (anatomy.generation.compiled): the inductor's options, frozen weights and
the graph's key for them, attention traced as its math on CPU, and the backend wrapper that lets a generation's later
steps call the graph its first step ran (docs/performance.md, "Round 6")."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

# the inductor's options for the step (docs/performance.md, "Where a compiled step's time goes"): cpp_wrapper
# launches the graph's kernels from C++ instead of a Python function of ~200 lines per call; cpp.threads 1 makes
# the graph's own fused kernels (norms, GELU, residual adds: at most a few thousand elements a token) loops
# without an OpenMP fork and join (on CPU with frozen weights the GEMMs are the inductor's own kernels too, below,
# so the whole step runs on one thread: on this shared 2-core VM a second thread's fork and join cost more than it
# saved, docs/performance.md, rounds 6 and 7)
INDUCTOR_OPTIONS: dict[str, Any] = {"cpp_wrapper": True, "cpp.threads": 1}
# freezing (inductor's): the weights become the graph's constants, and on CPU the Linears' weights are packed
# once for the GEMMs (a copy of each weight, kept with the graph): the largest saving measured. A frozen graph
# does not see later changes to the weights, so the graph's key holds every weight's address and version
# (``weights_state``): a changed weight makes a new graph. False: the weights stay inputs of the graph.
FREEZE = True
# With frozen weights on CPU, the Linears are the inductor's own C++ GEMMs (its "CPP" GEMM template, chosen through
# ``max_autotune`` with that one backend, so nothing is benchmarked at compile time): each weight packed into the
# template's blocks once, the bias and the pointwise ops after it fused into the same kernel, no ATen call. Against
# MKL's packed GEMM (``_mkl_linear``) this halved the step at d 128 (1.8x the floor -> 1.0x) and at d 256 (0.88x ->
# 0.45x), 1 thread, process CPU time (docs/performance.md, "Round 7"); MKL's one-row GEMMs take its generic code
# path on this VM's AMD EPYC (``mkl_blas_def_xsgemv``). The warm-up grows by ~15-20 s (the GEMMs are C++ to compile).
# The template needs the weights constant, hence frozen only.
CPP_GEMM_ON_CPU: dict[str, Any] = {"max_autotune": True, "max_autotune_gemm_backends": "CPP"}
# On CPU the step's ``scaled_dot_product_attention`` is traced as its math (two matmuls and a softmax), which the
# inductor fuses with the cache writes into its own loops, instead of ATen's flash kernel for CPU: one OpenMP fork
# and join less per layer, and less time at one thread too (docs/performance.md, round 6). The same function:
# logits within 1e-6 of the eager flash kernel's, the tokens identical (tests/generation/test_compiled.py).
SDPA_MATH_ON_CPU = True


def weights_state(model: nn.Module) -> tuple[tuple[int, int], ...] | None:
    """Every parameter's and buffer's ``(address, version)``: an in-place update (an optimiser's step,
    ``load_state_dict``) bumps the version, a new tensor changes the address. None when a tensor keeps no
    version (made under ``torch.inference_mode``): such a model's graph is not frozen."""
    try:
        return tuple((t.data_ptr(), t._version) for t in (*model.parameters(), *model.buffers()))
    except RuntimeError:  # "Inference tensors do not track version counter"
        return None


def _frozen(key: tuple[Any, ...]) -> bool:
    return FREEZE and key[6] == "inductor" and key[-1] is not None and not torch.is_grad_enabled()


@contextlib.contextmanager
def tracing(key: tuple[Any, ...]) -> Iterator[None]:
    """The settings the step is traced and compiled under: ``FREEZE`` (dynamo reads it while tracing, to hold the
    weights static, and the inductor after), with it on CPU ``CPP_GEMM_ON_CPU``, and on CPU ``SDPA_MATH_ON_CPU``."""
    with contextlib.ExitStack() as stack:
        if _frozen(key):
            import torch._inductor.config as inductor_config

            stack.enter_context(inductor_config.patch(freezing=True))
            if key[2] == "cpu" and CPP_GEMM_ON_CPU:
                stack.enter_context(inductor_config.patch(CPP_GEMM_ON_CPU))
        if SDPA_MATH_ON_CPU and key[2] == "cpu":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
        yield


class Capture:
    """The backend of one compiled step, wrapped so that it keeps the flat inputs of the compiled graph's latest
    call (``last``: the graph and its arguments, the model's weights and the caches' tensors).

    Calling a ``torch.compile`` d function costs more than the graph it runs at this size: dynamo checks ~1,100
    guards (every module's attributes, every tensor's shape and strides) and pulls ~70 tensors out of the
    modules, about a third of the weight-read floor per token on CPU. Within one generation none of that can
    change (the same model, the same cache objects, the token written into one buffer), so the first step of
    each generation goes through dynamo (guards checked, a recompilation if anything changed) and the later steps
    call the graph it ran with the same arguments. Dynamo's code around the graph only gathers its inputs and
    returns its output (nothing runs after it), so the two calls do the same work."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.last: tuple[Callable[..., Any], tuple[Any, ...]] | None = None

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        if isinstance(self.backend, str):
            from torch._dynamo import lookup_backend  # how torch's custom-backend guide composes a named backend

            options = {"config_patches": dict(INDUCTOR_OPTIONS)} if self.backend == "inductor" else {}
            graph = lookup_backend(self.backend)(gm, example_inputs, **options)
        else:
            graph = self.backend(gm, example_inputs)

        def run(*args: Any) -> Any:
            self.last = (graph, args)
            return graph(*args)

        return run
