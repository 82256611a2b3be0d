"""transformer-anatomy: the Transformer's core components, readable, fast and proven.

>>> import anatomy
>>> model = anatomy.build_model(anatomy.ModelConfig.from_preset("seed-block"))
"""

import sys

from anatomy._version import __version__
from anatomy.components.inputs import attention_inputs
from anatomy.config import PRESETS, ModelConfig
from anatomy.interop.safetensors_io import load_pretrained, save_pretrained
from anatomy.models import build_model

__all__ = [
    "PRESETS",
    "ModelConfig",
    "__version__",
    "attention_inputs",
    "build_model",
    "check",
    "load_pretrained",
    "save_pretrained",
    "trace",
]

_LAZY = {"check": "anatomy.notebook.api", "trace": "anatomy.notebook.api"}  # objects, not files (docs/notebooks.md)


def __getattr__(name: str) -> object:
    """``anatomy.check`` / ``anatomy.trace`` load the doctor on first use: ``import anatomy`` stays light."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'anatomy' has no attribute {name!r}")


def _show_in_jupyter() -> None:
    """Inside a notebook kernel (IPython already loaded), the doctor's reports, traces and claim verdicts display
    as HTML (anatomy/notebook/formatters.py); elsewhere nothing happens and IPython is never imported."""
    get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
    shell = get_ipython() if callable(get_ipython) else None
    if shell is not None:
        from anatomy.notebook.formatters import register

        register(shell)


_show_in_jupyter()
