"""Seeing: capture activations at hook points, and the shape trace of a real forward pass."""

from anatomy.inspection.capture import capture, hook_names
from anatomy.inspection.trace import TraceRow, trace_model

__all__ = ["TraceRow", "capture", "hook_names", "trace_model"]
