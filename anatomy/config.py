"""``ModelConfig``: one frozen, validated description of a model (the presets: anatomy/presets.py).

Every field is also a ``key=value`` word on the command line. Validation names the field, the value and what
was expected, before any module is built. ``build_model`` (models/build.py) is the only place a config becomes
modules; components never see a config.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, fields
from typing import Any

from anatomy.components.add_norm import PLACEMENTS
from anatomy.components.ffn import ACTIVATION_NAMES
from anatomy.components.kernels import KERNEL_NAMES
from anatomy.components.norms import NORMS
from anatomy.components.positional import POSITIONAL, ROPE_LAYOUTS
from anatomy.config_checks import check_family_options, check_tokens, is_type
from anatomy.presets import LOOK_VOCAB, PRESET_RULES, PRESETS, large_vocab_presets, preset_sizes
from anatomy.shapes import check_choice

# the presets live in anatomy/presets.py; these names stay importable from here
__all__ = [
    "ARCHITECTURES",
    "INITS",
    "LOOK_VOCAB",
    "OPTIONAL_FIELDS",
    "POOLINGS",
    "PRESETS",
    "PRESET_RULES",
    "TOKEN_FIELDS",
    "ModelConfig",
    "large_vocab_presets",
    "preset_sizes",
]

ARCHITECTURES = ("encoder", "decoder_lm", "seq2seq", "classifier")
# fields that describe tokens and labels for generation, ``predict`` and Hugging Face, never a module (the builder
# does not read them; a checkpoint written before they existed loads with their defaults)
TOKEN_FIELDS = ("bos_token_id", "eos_token_id", "label_names", "problem_type")
# fields younger than the checkpoint format: a checkpoint without them loads with their defaults (which build the
# model it was written from)
OPTIONAL_FIELDS = (*TOKEN_FIELDS, "encoder_pooler")
INITS = ("normal", "xavier", "deepnet")
POOLINGS = ("cls", "mean")


@dataclass(frozen=True)
class ModelConfig:
    """Every field below is one design choice, with its unit, its choices and what its default means; the
    ``key=value`` command-line word of each is its name. Derived values (``dh``, ``kv_heads``, ``decoder_layers``,
    ``use_final_norm``, ``rotary_dim``, ``qk_norm_kind``, ``layer_window``) are properties further down."""

    # --- architecture & sizes -------------------------------------------------------------------------------------
    architecture: str = "decoder_lm"  # "encoder" | "decoder_lm" | "seq2seq" | "classifier" (an encoder + a head)
    vocab_size: int = 256  # tokens V of the embedding (and of the LM head)
    d_model: int = 128  # model width D: the residual stream, the embeddings
    n_layers: int = 2  # blocks of the encoder / the decoder-only LM; seq2seq: the encoder's (N)
    n_decoder_layers: int | None = None  # seq2seq: the decoder's blocks (M); None: n_layers (read .decoder_layers)
    max_seq_len: int = 512  # longest sequence, in tokens (the learned table's rows; RoPE scaling's trained length)
    bias: bool = True  # biases on every Linear (q/k/v/o, FFN) and LayerNorm's shift; RMSNorm has none either way
    pad_token_id: int | None = 0  # the padding token id (None: none named, as HF's null); seq2seq: the decoder start
    num_labels: int = 2  # classifier: output classes
    pooling: str = "cls"  # classifier: "cls" (the first real token) | "mean" (the mean over real tokens)
    pooler: bool = False  # classifier: BERT's tanh(Linear(D, D)) on the pooled vector
    # encoder: BertModel's pooler too (HF's add_pooling_layer): pooler_output = tanh(Linear(first token's vector));
    # other architectures ignore it (an encoder fine-tuned into a classifier keeps the flag, its head has `pooler`)
    encoder_pooler: bool = False
    # --- attention ----------------------------------------------------------------------------------------------
    n_heads: int = 4  # query heads H
    n_kv_heads: int | None = None  # key/value heads Hkv (GQA; 1 is MQA); None: H (read .kv_heads)
    head_dim: int | None = None  # None: d_model // n_heads; set to decouple (T5 v1.1 small, Gemma); read .dh
    kernel: str = "auto"  # the attention arithmetic: "auto" | "sdpa" | "math" | "loop" (components/kernels.py)
    attn_scale: float | None = None  # the scores' scale; None: 1/sqrt(Dh) (T5: 1.0, folded into its init)
    fused_qkv: bool = False  # one qkv_proj Linear instead of q/k/v_proj (GPT-2's c_attn); the same arithmetic
    qk_norm: bool = False  # QK-norm: each head's q and k normalised over Dh (the model's norm kind) before RoPE
    sliding_window: int | None = None  # local self-attention over the last W key slots (Mistral); None: all
    # with sliding_window: which layers are local ('L', windowed) and which global ('G'), one letter per layer or
    # a shorter cycle that repeats ("LG": Gemma 2's alternation; "LLLLLG": Gemma 3's 5:1); None: every layer local
    window_pattern: str | None = None
    # --- positions ----------------------------------------------------------------------------------------------
    positional: str = "sinusoidal"  # "none" | "sinusoidal" | "learned" | "shaw" | "t5" | "rope" | "alibi"
    rope_base: float = 10000.0  # RoPE: the base of its frequencies base^(-2i/Dh)
    rope_layout: str = "half"  # RoPE: "half" (dim i pairs with i + Dh/2: Llama, HF) | "interleaved" (2i with 2i+1)
    max_relative_distance: int = 16  # shaw: relative distances clipped to [-k, k]
    t5_num_buckets: int = 32  # t5: buckets of the relative bias (half per direction when bidirectional)
    t5_max_distance: int = 128  # t5: the distance where the log-spaced buckets end
    rope_scaling: str | None = None  # RoPE context extension: None | "linear" | "dynamic" | "llama3" | "yarn"
    rope_factor: float = 1.0  # the stretch factor of rope_scaling (>= 1)
    rope_original_max_len: int | None = None  # llama3/yarn: the pretraining context; None: max_seq_len
    rope_low_freq_factor: float = 1.0  # llama3: wavelengths > original_max_len / this are divided by rope_factor
    rope_high_freq_factor: float = 4.0  # llama3: wavelengths < original_max_len / this are kept
    rope_beta_fast: float = 32.0  # yarn: the ramp's fast end (rotations over original_max_len)
    rope_beta_slow: float = 1.0  # yarn: the ramp's slow end
    rope_attention_factor: float | None = None  # yarn: cos/sin multiplier; None: 0.1 * ln(rope_factor) + 1
    rope_truncate: bool = True  # yarn: round the ramp's ends to whole dimensions
    rope_fraction: float = 1.0  # partial rotary: RoPE on the first int(Dh * rope_fraction) dims (GPT-NeoX: 0.25)
    # --- norms & residual ---------------------------------------------------------------------------------------
    norm: str = "layernorm"  # "layernorm" | "rmsnorm" | "batchnorm" (over the batch's tokens: the post's §4.2 foil)
    # "post" | "pre" | "sandwich" | "deepnorm" (components/add_norm.py). "deepnorm" is DeepNet's whole recipe:
    # alpha on the residual AND the init "deepnet" with its beta gains, each stack its own (encoder-decoder: the
    # encoder's and the decoder's formulas), whatever `init` says (models/build.py, _deepnorm)
    norm_position: str = "pre"
    norm_eps: float = 1e-5  # the epsilon of every norm (the QK-norm's too)
    final_norm: bool | None = None  # a norm after the last block; None: for "pre" and "sandwich" (.use_final_norm)
    # --- FFN ----------------------------------------------------------------------------------------------------
    d_ff: int | None = None  # FFN hidden width F; None: 4·D, gated activations 8/3·D rounded up to a multiple of 8
    activation: str = "gelu"  # "relu" | "gelu" | "gelu_tanh" | "silu" | gated: "swiglu" | "geglu" | "geglu_tanh"
    # --- embeddings & head --------------------------------------------------------------------------------------
    tie_embeddings: bool = True  # the LM head shares the token embedding's matrix (Press & Wolf 2017)
    scale_embeddings: bool = False  # token embeddings times sqrt(D) (the 2017 paper, §3.4)
    embedding_norm: bool = False  # a norm on the summed embeddings (BERT)
    type_vocab_size: int = 0  # token-type (segment) embeddings (BERT: 2); 0: none
    output_scale: float = 1.0  # seq2seq: hidden * output_scale before lm_head (T5 v1.0 tied: d_model**-0.5)
    # --- initialisation (models/init.py) ------------------------------------------------------------------------
    init: str = "normal"  # "normal" (GPT-2's) | "xavier" (the 2017 paper's) | "deepnet"; see also norm_position
    init_std: float = 0.02  # the std of "normal" (and of the embeddings under "deepnet")
    # --- regularisation -----------------------------------------------------------------------------------------
    dropout: float = 0.0  # on each sub-layer's output and on the embeddings, in training only; [0, 1)
    attention_dropout: float = 0.0  # on the attention weights, in training only; [0, 1)
    # --- options of more Hugging Face families (Llama 3, Qwen2, Gemma, Gemma 2, Phi-3, GPT-NeoX); the defaults are
    # the plain designs above (the rope_* fields too). Docs: docs/interop.md; formulas: positional/rope.py, kernels.py
    qkv_bias: bool | None = None  # bias on the q/k/v projections; None: as `bias` (Qwen2: True, with bias=False)
    parallel_residual: bool = False  # GPT-NeoX/GPT-J: x + attn(norm_1(x)) + ffn(norm_2(x)); Pre-Norm only
    norm_weight_offset: float = 0.0  # RMSNorm scale = offset + weight (Gemma: 1.0, weights stored around 0)
    attn_softcap: float | None = None  # Gemma 2: scaled scores -> c * tanh(scores / c) before the mask
    final_logit_softcap: float | None = None  # Gemma 2 (decoder_lm): logits -> c * tanh(logits / c)
    # --- tokens & labels: what Hugging Face keeps in config.json / generation_config.json beside the weights; no
    # module reads them (TOKEN_FIELDS). bos/eos are kept as read, even outside vocab_size (HF's class defaults are)
    bos_token_id: int | None = None  # the begin-of-sequence token; None: the model names none
    # the end-of-sequence token(s) generate stops at by default (one id or a tuple of ids); None: it never stops early
    eos_token_id: int | tuple[int, ...] | None = None
    label_names: tuple[str, ...] | None = None  # classifier: class i's name (HF's id2label); None: "0", "1", ...
    # classifier: the loss of labels=, HF's problem_type: "regression" (MSE), "single_label_classification" (cross
    # entropy), "multi_label_classification" (BCE with logits); None: HF's guess from num_labels and the labels' dtype
    problem_type: str | None = None

    def __post_init__(self) -> None:
        for name, choices in (
            ("architecture", ARCHITECTURES),
            ("positional", POSITIONAL),
            ("norm", NORMS),
            ("norm_position", PLACEMENTS),
            ("activation", ACTIVATION_NAMES),
            ("kernel", KERNEL_NAMES),
            ("rope_layout", ROPE_LAYOUTS),
            ("init", INITS),
            ("pooling", POOLINGS),
        ):
            check_choice(name, getattr(self, name), choices)
        for f in fields(self):
            value = getattr(self, f.name)
            want = _FIELD_TYPES.get(f.name)
            if want is not None and value is not None and not is_type(value, want):
                raise TypeError(f"{f.name} must be {want.__name__}, got {value!r} ({type(value).__name__})")
        positive = [
            "vocab_size",
            "d_model",
            "n_heads",
            "n_layers",
            "max_seq_len",
            "num_labels",
            "max_relative_distance",
            "t5_num_buckets",
            "t5_max_distance",
        ]
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        for name in ("n_kv_heads", "head_dim", "n_decoder_layers", "d_ff", "sliding_window"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer or None, got {getattr(self, name)}")
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} must be divisible by n_heads={self.n_heads} "
                "(or set head_dim to give the heads their own width)"
            )
        if self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads={self.n_heads} must be divisible by n_kv_heads={self.n_kv_heads}")
        if self.positional == "rope" and self.dh % 2:
            raise ValueError(
                f"positional='rope' needs an even head dimension, got Dh={self.dh}"
                + ("" if self.head_dim else f" (d_model // n_heads = {self.d_model} // {self.n_heads})")
            )
        if self.window_pattern is not None:
            if self.sliding_window is None:
                raise ValueError("window_pattern needs sliding_window (the window its 'L' layers use)")
            if not self.window_pattern or set(self.window_pattern) - {"L", "G"}:
                raise ValueError(
                    f"window_pattern must be letters L (local) and G (global), got {self.window_pattern!r}"
                )
            stacks = {
                "encoder": self.n_layers,
                "decoder_lm": self.n_layers,
                "classifier": self.n_layers,
                "seq2seq": self.n_layers,
            }
            layers = [stacks[self.architecture]] + ([self.decoder_layers] if self.architecture == "seq2seq" else [])
            for n in layers:
                if n % len(self.window_pattern):
                    raise ValueError(
                        f"window_pattern {self.window_pattern!r} ({len(self.window_pattern)} letters) "
                        f"must cover {n} layers: give one letter per layer or a cycle dividing {n}"
                    )
        if self.sliding_window is not None and self.positional == "t5":
            raise ValueError(
                "sliding_window does not combine with positional='t5': the stack computes T5's shared "
                "bias over every cached key, a rolling window cache keeps only the last W"
            )
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"positional='sinusoidal' needs an even d_model, got d_model={self.d_model}")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.norm_eps <= 0 or self.init_std <= 0:
            raise ValueError(f"norm_eps and init_std must be > 0, got {self.norm_eps}, {self.init_std}")
        if not self.output_scale > 0:
            raise ValueError(f"output_scale must be > 0, got {self.output_scale}")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"pad_token_id must be in [0, vocab_size={self.vocab_size}) or None, got {self.pad_token_id}"
            )
        if self.pad_token_id is None and self.architecture == "seq2seq":
            raise ValueError("pad_token_id=None with architecture='seq2seq': the decoder starts from pad_token_id")
        check_tokens(self)
        if self.type_vocab_size < 0:
            raise ValueError(f"type_vocab_size must be >= 0, got {self.type_vocab_size}")
        check_family_options(self)

    # derived values -------------------------------------------------------------------------------------------
    @property
    def dh(self) -> int:
        """The heads' width Dh: ``head_dim`` when set, else ``d_model // n_heads``."""
        return self.d_model // self.n_heads if self.head_dim is None else self.head_dim

    @property
    def qk_norm_kind(self) -> str | None:
        """What ``qk_norm`` builds: RMSNorm in an RMSNorm model, else LayerNorm (never BatchNorm); None when off."""
        if not self.qk_norm:
            return None
        return "rmsnorm" if self.norm == "rmsnorm" else "layernorm"

    def layer_window(self, layer: int) -> int | None:
        """The self-attention window of layer ``layer`` (0-based, within its stack): ``sliding_window`` on a local
        layer, None on a global one."""
        if self.window_pattern is None:
            return self.sliding_window
        return self.sliding_window if self.window_pattern[layer % len(self.window_pattern)] == "L" else None

    @property
    def rotary_dim(self) -> int:
        """How many leading dims of each head RoPE rotates: ``int(Dh * rope_fraction)`` (Hugging Face's rule)."""
        return int(self.dh * self.rope_fraction)

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def decoder_layers(self) -> int:
        return self.n_layers if self.n_decoder_layers is None else self.n_decoder_layers

    @property
    def use_final_norm(self) -> bool:
        return self.norm_position in ("pre", "sandwich") if self.final_norm is None else self.final_norm

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """``eos_token_id`` as a tuple (empty when None)."""
        eos = self.eos_token_id
        return () if eos is None else (eos,) if isinstance(eos, int) else tuple(eos)

    @property
    def id2label(self) -> dict[int, str]:
        """HF's ``id2label``: ``{0: "negative", ...}`` (``{i: "LABEL_i"}`` like HF when no names are known)."""
        names = self.label_names or tuple(f"LABEL_{i}" for i in range(self.num_labels))
        return dict(enumerate(names))

    @property
    def label2id(self) -> dict[str, int]:
        return {name: i for i, name in self.id2label.items()}

    # construction -----------------------------------------------------------------------------------------------
    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """The preset ``name`` with ``overrides``. Sizes the preset derives from ``d_model`` follow an overridden
        ``d_model`` unless given too (``PRESET_RULES``): ``from_preset("gpt2", d_model=256)`` has ``d_ff=1024``
        and 4 heads of 64, like ``GPT2Config(n_embd=256)``'s 4·n_embd. Rates are not sizes: ``dropout`` and
        ``attention_dropout`` keep the preset's values (0.1 for gpt2, bert, t5, vaswani-2017) at any size; pass
        ``dropout=0.0, attention_dropout=0.0`` to time a model or to train without them."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; valid names: {', '.join(sorted(PRESETS))}")
        return cls.from_dict({**PRESETS[name], **preset_sizes(name, overrides), **overrides})

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown config field(s) {', '.join(unknown)}; valid fields: {', '.join(sorted(known))}")
        return cls(**values)

    def replace(self, **changes: Any) -> ModelConfig:
        return self.from_dict({**self.to_dict(), **changes})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


_FIELD_TYPES: dict[str, type] = {}  # filled below from the annotations


def _field_types() -> dict[str, type]:
    out = {}
    for f in fields(ModelConfig):
        if f.name in ("eos_token_id", "label_names"):  # checked by check_tokens
            continue
        base = str(f.type).split("|")[0].strip()
        out[f.name] = {"int": int, "float": float, "bool": bool, "str": str}[base]
    return out


_FIELD_TYPES.update(_field_types())
