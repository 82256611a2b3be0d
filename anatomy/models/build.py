"""``build_model(config)``: the only place where a ``ModelConfig`` becomes modules.

Each design choice is resolved here, once, by name: the positional scheme's *site* decides whether it joins the
embeddings, every attention layer, or the stack (T5's shared bias); the norm, placement, activation and kernel
names become constructor arguments of the components.
"""

from __future__ import annotations

from functools import partial

from torch import nn

from anatomy.components.add_norm import deepnorm_constants
from anatomy.components.block import DecoderBlock, EncoderBlock
from anatomy.components.embedding import InputEmbeddings, TokenEmbedding, make_lm_head
from anatomy.components.hook_point import mirror_hook_points
from anatomy.components.norms import norm_class
from anatomy.components.positional import RopeScaling, positional_class
from anatomy.config import ModelConfig
from anatomy.models.classifier import Classifier
from anatomy.models.decoder import Decoder, DecoderStack
from anatomy.models.encoder import Encoder, EncoderStack
from anatomy.models.init import init_weights
from anatomy.models.lm import DecoderLM
from anatomy.models.seq2seq import Seq2Seq


def _rope_options(config: ModelConfig) -> dict:
    """RoPE's partial rotary width and context scaling, only when they depart from plain RoPE."""
    if config.positional != "rope":
        return {}
    out = {}
    if config.rope_fraction != 1.0:
        out["rotary_dim"] = config.rotary_dim
    if config.rope_scaling is not None:
        out["scaling"] = RopeScaling(
            config.rope_scaling, factor=config.rope_factor, original_max_len=config.rope_original_max_len,
            low_freq_factor=config.rope_low_freq_factor, high_freq_factor=config.rope_high_freq_factor,
            beta_fast=config.rope_beta_fast, beta_slow=config.rope_beta_slow,
            attention_factor=config.rope_attention_factor, truncate=config.rope_truncate)
    return out


def _positional(config: ModelConfig, site: str, *, bidirectional: bool = True):
    """``config.positional`` at ``site`` (embedding / attention / model), or None when it lives elsewhere; each
    scheme is given the arguments it takes, by name (its constructor refuses any other)."""
    cls = positional_class(config.positional)
    if cls.site != site:
        return None
    args = {
        "none": lambda: {},
        "sinusoidal": lambda: dict(d_model=config.d_model),
        "learned": lambda: dict(d_model=config.d_model, max_seq_len=config.max_seq_len),
        "shaw": lambda: dict(head_dim=config.dh, max_relative_distance=config.max_relative_distance),
        "t5": lambda: dict(n_heads=config.n_heads, bidirectional=bidirectional, num_buckets=config.t5_num_buckets,
                           max_distance=config.t5_max_distance),
        "rope": lambda: dict(head_dim=config.dh, base=config.rope_base, layout=config.rope_layout,
                             max_seq_len=config.max_seq_len, **_rope_options(config)),
        "alibi": lambda: dict(n_heads=config.n_heads),
    }[config.positional]
    return cls(**args())


def _norm(config: ModelConfig) -> nn.Module:
    offset = {"offset": config.norm_weight_offset} if config.norm_weight_offset else {}
    return norm_class(config.norm)(config.d_model, eps=config.norm_eps, bias=config.bias, **offset)


def _block_kwargs(config: ModelConfig, alpha: float) -> dict:
    return dict(d_model=config.d_model, n_heads=config.n_heads, n_kv_heads=config.n_kv_heads, d_ff=config.d_ff,
                activation=config.activation, norm=config.norm, norm_eps=config.norm_eps,
                placement=config.norm_position, bias=config.bias, dropout=config.dropout,
                attention_dropout=config.attention_dropout, kernel=config.kernel, attn_scale=config.attn_scale,
                fused_qkv=config.fused_qkv, alpha=alpha, head_dim=config.head_dim, qk_norm=config.qk_norm_kind,
                sliding_window=config.sliding_window, **_family_options(config))


def _family_options(config: ModelConfig) -> dict:
    """The block options of the Hugging Face families beyond Llama, only when set (keeps older blocks' calls)."""
    out = {}
    if config.qkv_bias is not None:
        out["qkv_bias"] = config.qkv_bias
    if config.attn_softcap is not None:
        out["attn_softcap"] = config.attn_softcap
    if config.norm_weight_offset:
        out["norm_offset"] = config.norm_weight_offset
    if config.parallel_residual:
        out["parallel_residual"] = True
    return out


def _embeddings(config: ModelConfig, embed_tokens: TokenEmbedding, *, with_types: bool = True) -> InputEmbeddings:
    return InputEmbeddings(
        embed_tokens=embed_tokens, positional=_positional(config, "embedding"),
        token_types=nn.Embedding(config.type_vocab_size, config.d_model)
        if with_types and config.type_vocab_size else None,
        norm=_norm(config) if config.embedding_norm else None, dropout=config.dropout,
    )


def _stack(config: ModelConfig, cls, block_cls, n_layers: int, alpha: float, *, bidirectional: bool):
    make = partial(block_cls.build, **_block_kwargs(config, alpha))
    blocks = [make(positional=_positional(config, "attention"), sliding_window=config.layer_window(i))
              for i in range(n_layers)]
    return cls(blocks=blocks, final_norm=_norm(config) if config.use_final_norm else None,
               position_bias=_positional(config, "model", bidirectional=bidirectional))


def build_model(config: ModelConfig) -> nn.Module:
    """Build the model ``config.architecture`` names, initialised by ``config.init``; ``model.config`` is set."""
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config must be a ModelConfig, got {type(config).__name__}")
    n_enc, n_dec = config.n_layers, config.decoder_layers
    embed_tokens = TokenEmbedding(config.vocab_size, config.d_model, scale=config.scale_embeddings)
    arch = config.architecture
    deep = deepnorm_constants(n_enc if arch != "decoder_lm" else 0,
                              n_dec if arch in ("seq2seq", "decoder_lm") else 0)
    enc_alpha, enc_beta = deep.get("encoder", (1.0, 1.0)) if config.norm_position == "deepnorm" else (1.0, 1.0)
    dec_alpha, dec_beta = deep.get("decoder", (1.0, 1.0)) if config.norm_position == "deepnorm" else (1.0, 1.0)

    if arch == "decoder_lm":
        stack = _stack(config, EncoderStack, EncoderBlock, n_dec, dec_alpha, bidirectional=False)
        model = DecoderLM(embeddings=_embeddings(config, embed_tokens), stack=stack,
                          lm_head=make_lm_head(embed_tokens, tie=config.tie_embeddings),
                          final_logit_softcap=config.final_logit_softcap)
        beta, depth = dec_beta, n_dec
    elif arch == "seq2seq":
        encoder = Encoder(embeddings=_embeddings(config, embed_tokens),
                          stack=_stack(config, EncoderStack, EncoderBlock, n_enc, enc_alpha, bidirectional=True))
        decoder = Decoder(embeddings=_embeddings(config, embed_tokens, with_types=False),
                          stack=_stack(config, DecoderStack, DecoderBlock, n_dec, dec_alpha, bidirectional=False))
        model = Seq2Seq(encoder=encoder, decoder=decoder, lm_head=make_lm_head(embed_tokens, tie=config.tie_embeddings),
                        decoder_start_token_id=config.pad_token_id, output_scale=config.output_scale)
        beta, depth = dec_beta, n_enc + n_dec
    else:
        encoder = Encoder(embeddings=_embeddings(config, embed_tokens),
                          stack=_stack(config, EncoderStack, EncoderBlock, n_enc, enc_alpha, bidirectional=True))
        beta, depth = enc_beta, n_enc
        if arch == "encoder":
            model = encoder
        else:
            model = Classifier(encoder=encoder, classifier=nn.Linear(config.d_model, config.num_labels),
                               pooling=config.pooling,
                               pooler=nn.Linear(config.d_model, config.d_model) if config.pooler else None,
                               dropout=config.dropout)
    init_weights(model, scheme=config.init, std=config.init_std, n_layers=depth, beta=beta)
    model.config = config
    mirror_hook_points(model)
    return model

