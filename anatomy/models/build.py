"""``build_model(config)``: the only place where a ``ModelConfig`` becomes modules.

One small function per part, each spelling out which config fields become which constructor argument (the way
torchtune's component builders are the model): ``_norm``, ``_positional``, ``_block``, ``_stack``,
``_embeddings``, then one function per architecture. Nothing is passed through as a keyword bag, so a field no
part reads is visible here, and a constructor that does not take an argument refuses it (``TypeError``).

Parts are made in one place each, in components: ``norms.make_norm`` (the norm rules: RMSNorm has no bias, only it
has an offset) and ``block.build_block`` (a block's attention, FFN and Add & Norm from explicit arguments).
``_block`` hands the config's fields to ``build_block``, which ``EncoderBlock.build`` / ``DecoderBlock.build`` (what
interop, the doctor, the bench and the claims call) also call: there is one block factory.

Each design choice is resolved here, once, by name: the positional scheme's *site* decides whether it joins the
embeddings, every attention layer, or the stack (T5's shared bias); ``norm_position="deepnorm"`` brings DeepNet's
whole recipe, its residual weight ``alpha`` and its initialisation gain ``beta``, each stack its own
(:func:`deepnorm_constants`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from torch import nn

from anatomy.components.add_norm import deepnorm_constants
from anatomy.components.block import DecoderBlock, EncoderBlock, TransformerBlock, build_block
from anatomy.components.embedding import InputEmbeddings, TokenEmbedding, make_lm_head
from anatomy.components.hook_point import mirror_hook_points
from anatomy.components.norms import make_norm
from anatomy.components.positional import RopeScaling, positional_class
from anatomy.components.positional.base import PositionalScheme
from anatomy.config import ModelConfig
from anatomy.models.classifier import Classifier
from anatomy.models.decoder import Decoder, DecoderStack
from anatomy.models.encoder import Encoder, EncoderStack
from anatomy.models.init import init_weights
from anatomy.models.lm import DecoderLM
from anatomy.models.seq2seq import Seq2Seq
from anatomy.models.stack import TransformerStack

# ------------------------------------------------------------------------------------------------------ parts


def _norm(config: ModelConfig, width: int | None = None) -> nn.Module:
    """``config.norm`` over ``width`` features (default D)."""
    return make_norm(
        config.norm,
        config.d_model if width is None else width,
        eps=config.norm_eps,
        bias=config.bias,
        offset=config.norm_weight_offset,
    )


def _rope_scaling(config: ModelConfig) -> RopeScaling | None:
    if config.rope_scaling is None:
        return None
    return RopeScaling(
        config.rope_scaling,
        factor=config.rope_factor,
        original_max_len=config.rope_original_max_len,
        low_freq_factor=config.rope_low_freq_factor,
        high_freq_factor=config.rope_high_freq_factor,
        beta_fast=config.rope_beta_fast,
        beta_slow=config.rope_beta_slow,
        attention_factor=config.rope_attention_factor,
        truncate=config.rope_truncate,
    )


def _positional(config: ModelConfig, site: str, *, bidirectional: bool = True) -> PositionalScheme | None:
    """``config.positional`` at ``site`` (embedding / attention / model), or None when it lives elsewhere; each
    scheme is given the arguments it takes, by name (its constructor refuses any other)."""
    cls = positional_class(config.positional)
    if cls.site != site:
        return None
    makers: dict[str, Callable[[], dict[str, Any]]] = {
        "none": lambda: {},
        "sinusoidal": lambda: dict(d_model=config.d_model),
        "learned": lambda: dict(d_model=config.d_model, max_seq_len=config.max_seq_len),
        "shaw": lambda: dict(head_dim=config.dh, max_relative_distance=config.max_relative_distance),
        "t5": lambda: dict(
            n_heads=config.n_heads,
            bidirectional=bidirectional,
            num_buckets=config.t5_num_buckets,
            max_distance=config.t5_max_distance,
        ),
        "rope": lambda: dict(
            head_dim=config.dh,
            base=config.rope_base,
            layout=config.rope_layout,
            max_seq_len=config.max_seq_len,
            rotary_dim=config.rotary_dim,
            scaling=_rope_scaling(config),
        ),
        "alibi": lambda: dict(n_heads=config.n_heads),
    }
    args = makers[config.positional]
    return cls(**args())


def _block(config: ModelConfig, layer: int, kind: str, alpha: float) -> TransformerBlock:
    """``kind="encoder"``: self-attention then FFN; ``kind="decoder_only"``: the same parts as one
    ``TransformerBlock`` that a decoder-only LM runs causally; ``kind="decoder"``: self-attention, cross-attention
    to the encoder memory, FFN. Each config field named once, handed to the one block builder."""
    cls = {"encoder": EncoderBlock, "decoder_only": TransformerBlock, "decoder": DecoderBlock}[kind]
    return build_block(
        cls,
        d_model=config.d_model,
        n_heads=config.n_heads,
        n_kv_heads=config.n_kv_heads,
        head_dim=config.head_dim,
        d_ff=config.d_ff,
        activation=config.activation,
        norm=config.norm,
        norm_eps=config.norm_eps,
        norm_offset=config.norm_weight_offset,
        placement=config.norm_position,
        alpha=alpha,
        bias=config.bias,
        qkv_bias=config.qkv_bias,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        kernel=config.kernel,
        attn_scale=config.attn_scale,
        fused_qkv=config.fused_qkv,
        qk_norm=config.qk_norm_kind,
        attn_softcap=config.attn_softcap,
        positional=_positional(config, "attention"),
        sliding_window=config.layer_window(layer),
        parallel_residual=config.parallel_residual and kind != "decoder",
    )


def _stack(config: ModelConfig, kind: str, n_layers: int, alpha: float, *, bidirectional: bool) -> TransformerStack:
    """``n_layers`` blocks of ``kind``, the final norm (Pre-Norm and Sandwich by default) and the stack-site
    positional bias (T5's, one table shared by the layers; bidirectional in an encoder, causal in a decoder)."""
    blocks = [_block(config, i, kind, alpha) for i in range(n_layers)]
    stack = {"encoder": EncoderStack, "decoder_only": TransformerStack, "decoder": DecoderStack}[kind]
    return stack(
        blocks=blocks,
        final_norm=_norm(config) if config.use_final_norm else None,
        position_bias=_positional(config, "model", bidirectional=bidirectional),
    )


def _embeddings(config: ModelConfig, embed_tokens: TokenEmbedding, *, with_types: bool = True) -> InputEmbeddings:
    """Token embedding (shared by encoder, decoder and a tied head) + token types (BERT; not in a decoder) + an
    embedding-site positional scheme + BERT's embedding norm, then dropout."""
    return InputEmbeddings(
        embed_tokens=embed_tokens,
        positional=_positional(config, "embedding"),
        token_types=nn.Embedding(config.type_vocab_size, config.d_model)
        if with_types and config.type_vocab_size
        else None,
        norm=_norm(config) if config.embedding_norm else None,
        dropout=config.dropout,
    )


def _deepnorm(config: ModelConfig) -> dict[str, tuple[float, float]]:
    """``{"encoder": (alpha, beta), "decoder": (alpha, beta)}`` for the stacks the architecture has: DeepNet's
    formulas when ``norm_position="deepnorm"`` (Wang et al. 2022; encoder-decoder stacks get their own), else
    (1, 1). A decoder-only LM's stack is an encoder-style stack run causally: its constants are the "decoder" ones."""
    arch = config.architecture
    n = config.n_layers if arch != "decoder_lm" else 0
    m = config.decoder_layers if arch in ("seq2seq", "decoder_lm") else 0
    constants = deepnorm_constants(n, m)
    if config.norm_position != "deepnorm":
        constants = {kind: (1.0, 1.0) for kind in constants}
    return constants


# ---------------------------------------------------------------------------------------------- architectures


def _decoder_lm(
    config: ModelConfig, embed_tokens: TokenEmbedding, deep: dict[str, tuple[float, float]]
) -> tuple[nn.Module, dict[nn.Module, float]]:
    stack = _stack(config, "decoder_only", config.decoder_layers, deep["decoder"][0], bidirectional=False)
    model = DecoderLM(
        embeddings=_embeddings(config, embed_tokens),
        stack=stack,
        lm_head=make_lm_head(embed_tokens, tie=config.tie_embeddings),
        final_logit_softcap=config.final_logit_softcap,
    )
    return model, {stack: deep["decoder"][1]}


def _encoder_of(
    config: ModelConfig, embed_tokens: TokenEmbedding, deep: dict[str, tuple[float, float]], *, pooler: bool
) -> Encoder:
    """The bidirectional encoder of an encoder-only model, a classifier or a seq2seq model (BERT's pooler on
    ``pooler``)."""
    return Encoder(
        embeddings=_embeddings(config, embed_tokens),
        stack=_stack(config, "encoder", config.n_layers, deep["encoder"][0], bidirectional=True),
        pooler=nn.Linear(config.d_model, config.d_model) if pooler else None,
    )


def _seq2seq(
    config: ModelConfig, embed_tokens: TokenEmbedding, deep: dict[str, tuple[float, float]]
) -> tuple[nn.Module, dict[nn.Module, float]]:
    encoder = _encoder_of(config, embed_tokens, deep, pooler=False)
    decoder = Decoder(
        embeddings=_embeddings(config, embed_tokens, with_types=False),
        stack=_stack(config, "decoder", config.decoder_layers, deep["decoder"][0], bidirectional=False),
    )
    assert config.pad_token_id is not None  # the decoder start: ModelConfig refuses None for seq2seq
    model = Seq2Seq(
        encoder=encoder,
        decoder=decoder,
        lm_head=make_lm_head(embed_tokens, tie=config.tie_embeddings),
        decoder_start_token_id=config.pad_token_id,
        output_scale=config.output_scale,
    )
    return model, {encoder.stack: deep["encoder"][1], decoder.stack: deep["decoder"][1]}


def _encoder(
    config: ModelConfig, embed_tokens: TokenEmbedding, deep: dict[str, tuple[float, float]]
) -> tuple[nn.Module, dict[nn.Module, float]]:
    encoder = _encoder_of(config, embed_tokens, deep, pooler=config.encoder_pooler and config.architecture == "encoder")
    betas: dict[nn.Module, float] = {encoder.stack: deep["encoder"][1]}
    if config.architecture == "encoder":
        return encoder, betas
    model = Classifier(
        encoder=encoder,
        classifier=nn.Linear(config.d_model, config.num_labels),
        pooling=config.pooling,
        pooler=nn.Linear(config.d_model, config.d_model) if config.pooler else None,
        dropout=config.dropout,
    )
    return model, betas


ARCHITECTURE_BUILDERS = {"decoder_lm": _decoder_lm, "seq2seq": _seq2seq, "encoder": _encoder, "classifier": _encoder}


def build_model(config: ModelConfig) -> nn.Module:
    """Build the model ``config.architecture`` names, initialised by ``config.init`` (by DeepNet's scheme when
    ``norm_position="deepnorm"``); ``model.config`` is set."""
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config must be a ModelConfig, got {type(config).__name__}")
    embed_tokens = TokenEmbedding(config.vocab_size, config.d_model, scale=config.scale_embeddings)
    model, betas = ARCHITECTURE_BUILDERS[config.architecture](config, embed_tokens, _deepnorm(config))
    depth = {"decoder_lm": config.decoder_layers, "seq2seq": config.n_layers + config.decoder_layers}.get(
        config.architecture, config.n_layers
    )  # every block of the model: GPT-2's residual scaling 1/sqrt(2L)
    scheme = "deepnet" if config.norm_position == "deepnorm" else config.init
    init_weights(model, scheme=scheme, std=config.init_std, n_layers=depth, betas=betas)
    cast(Any, model).config = config  # an attribute nn.Module does not declare
    mirror_hook_points(model)
    return model
