"""Seeing: capture activations at hook points, the shape trace of a real forward pass, attention weights beside
the fused kernel, pictures (viz.py, needs matplotlib when drawing) and a self-contained HTML page (page.py).
Changing them: edits at hook points for one ``with`` block (patching.py); the logit lens (logit_lens.py).
TransformerLens's habits beside our names: ``run_with_cache`` / ``run_with_hooks`` (hooked.py), its names and layouts
(tl_names.py, activation_cache.py) and weights (tl_weights.py)."""

from anatomy.inspection.activation_cache import ActivationCache
from anatomy.inspection.capture import capture, hook_names
from anatomy.inspection.hooked import LensHook, hooks, run_with_cache, run_with_hooks
from anatomy.inspection.logit_lens import LogitLens, lens_figure, lens_hooks, logit_lens
from anatomy.inspection.patching import ablate_head, patch_from, patching, replace, run_patched, scale, zero
from anatomy.inspection.tl_names import get_act_name
from anatomy.inspection.tl_weights import tl_weight
from anatomy.inspection.trace import TraceRow, trace_model
from anatomy.inspection.weights import LayerWeights, attention_modules, attention_weights

__all__ = [
    "ActivationCache",
    "LayerWeights",
    "LensHook",
    "LogitLens",
    "TraceRow",
    "ablate_head",
    "attention_modules",
    "attention_weights",
    "capture",
    "get_act_name",
    "hook_names",
    "hooks",
    "lens_figure",
    "lens_hooks",
    "logit_lens",
    "patch_from",
    "patching",
    "replace",
    "run_patched",
    "run_with_cache",
    "run_with_hooks",
    "scale",
    "tl_weight",
    "trace_model",
    "zero",
]
