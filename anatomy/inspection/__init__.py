"""Seeing: capture activations at hook points, the shape trace of a real forward pass, attention weights beside
the fused kernel, pictures (viz.py, needs matplotlib when drawing) and a self-contained HTML page (page.py).
Changing them: edits at hook points for one ``with`` block (patching.py); the logit lens (logit_lens.py)."""

from anatomy.inspection.capture import capture, hook_names
from anatomy.inspection.logit_lens import LogitLens, lens_figure, lens_hooks, logit_lens
from anatomy.inspection.patching import ablate_head, patch_from, patching, replace, run_patched, scale, zero
from anatomy.inspection.trace import TraceRow, trace_model
from anatomy.inspection.weights import LayerWeights, attention_modules, attention_weights

__all__ = ["LayerWeights", "LogitLens", "TraceRow", "ablate_head", "attention_modules", "attention_weights", "capture",
           "hook_names", "lens_figure", "lens_hooks", "logit_lens", "patch_from", "patching", "replace", "run_patched",
           "scale", "trace_model", "zero"]
