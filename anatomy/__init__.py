"""transformer-anatomy: the Transformer's core components, readable, fast and proven.

>>> import anatomy
>>> model = anatomy.build_model(anatomy.ModelConfig.from_preset("seed-block"))
"""

from anatomy.config import PRESETS, ModelConfig
from anatomy.interop.safetensors_io import load_pretrained, save_pretrained
from anatomy.models import build_model

__version__ = "0.1.0"
__all__ = ["PRESETS", "ModelConfig", "__version__", "build_model", "check", "load_pretrained", "save_pretrained",
           "trace"]

_LAZY = {"check": "anatomy.notebook.api", "trace": "anatomy.notebook.api"}  # objects, not files (docs/notebooks.md)


def __getattr__(name: str):
    """``anatomy.check`` / ``anatomy.trace`` load the doctor on first use: ``import anatomy`` stays light."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'anatomy' has no attribute {name!r}")
