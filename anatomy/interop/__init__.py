"""Interop: convert to and from code we did not write (``torch_nn``: torch.nn's Transformer modules)."""
