"""Components: one idea per file. Import what you need from here."""

from anatomy.components import kernels, masks
from anatomy.components.add_norm import PLACEMENTS, AddNorm, deepnorm_constants
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import DecoderBlock, EncoderBlock, TransformerBlock
from anatomy.components.context import AttentionContext, build_context
from anatomy.components.embedding import TokenEmbedding, make_lm_head
from anatomy.components.ffn import ACTIVATION_NAMES, FeedForward, default_d_ff
from anatomy.components.hook_point import HookPoint
from anatomy.components.inputs import attention_inputs
from anatomy.components.kv_cache import KVCache
from anatomy.components.norms import NORMS, LayerNorm, RMSNorm, TokenBatchNorm
from anatomy.components.positional import POSITIONAL

__all__ = [
    "ACTIVATION_NAMES",
    "NORMS",
    "PLACEMENTS",
    "POSITIONAL",
    "AddNorm",
    "AttentionContext",
    "DecoderBlock",
    "EncoderBlock",
    "FeedForward",
    "HookPoint",
    "KVCache",
    "LayerNorm",
    "MultiHeadAttention",
    "RMSNorm",
    "TokenBatchNorm",
    "TokenEmbedding",
    "TransformerBlock",
    "attention_inputs",
    "build_context",
    "deepnorm_constants",
    "default_d_ff",
    "kernels",
    "make_lm_head",
    "masks",
]
