"""Seeing: capture activations at hook points, the shape trace of a real forward pass, attention weights beside
the fused kernel, pictures (viz.py, needs matplotlib when drawing) and a self-contained HTML page (page.py)."""

from anatomy.inspection.capture import capture, hook_names
from anatomy.inspection.trace import TraceRow, trace_model
from anatomy.inspection.weights import LayerWeights, attention_modules, attention_weights

__all__ = ["LayerWeights", "TraceRow", "attention_modules", "attention_weights", "capture", "hook_names",
           "trace_model"]
