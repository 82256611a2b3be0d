"""transformer-anatomy: the Transformer's core components, readable, fast and proven.

>>> import anatomy
>>> model = anatomy.build_model(anatomy.ModelConfig.from_preset("seed-block"))
"""

from anatomy.config import PRESETS, ModelConfig
from anatomy.interop.safetensors_io import load_pretrained, save_pretrained
from anatomy.models import build_model

__version__ = "0.1.0"
__all__ = ["PRESETS", "ModelConfig", "__version__", "build_model", "load_pretrained", "save_pretrained"]
