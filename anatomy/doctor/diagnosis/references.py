"""The references the diagnosis compares with: our ``MultiHeadAttention`` / ``EncoderBlock`` carrying the learner's
weights, in each variant (placement, activation, a relative positional scheme), built, cached and run on a
:class:`Scenario` (the inputs and masks of one comparison). ``diagnose.py`` compares; ``difference.py`` walks to the
first difference; both use this module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import EncoderBlock
from anatomy.components.inputs import attention_inputs
from anatomy.components.positional import ALiBiPositional, RotaryPositional
from anatomy.components.positional.base import PositionalScheme
from anatomy.components.positional.rope import RopeScaling
from anatomy.components.positional.t5_bias import T5RelativeBias
from anatomy.doctor.diagnosis.own_norm import INSIDE, OwnNorm, wrap, wrapped_hypothesis
from anatomy.doctor.mapping.head_layouts import kv_heads
from anatomy.doctor.mapping.naming import Hypothesis
from anatomy.doctor.mapping.norm_fit import StdNorm
from anatomy.doctor.mapping.norms import BlockParts
from anatomy.doctor.mapping.projections import load_reference

Variant = tuple[str, ...]  # a reference's options: placement, activation, norm inside, positional scheme


@dataclass
class Scenario:
    name: str
    x: torch.Tensor
    ref_mask: torch.Tensor | None  # bool, True = may attend, broadcastable to (B, H, T, S)
    ref_causal: bool
    user_mask: torch.Tensor | None
    rows: torch.Tensor  # (B, T) bool: the query rows compared (real tokens)
    user_out: torch.Tensor | None = None
    user_weights: torch.Tensor | None = None

    @property
    def out(self) -> torch.Tensor:
        """``user_out``, for code that runs once ``diagnose.user_outputs`` has filled it in."""
        return cast(torch.Tensor, self.user_out)


# Relative schemes inside attention the reference can carry, as the report names them: RoPE with positions
# 0..T-1 in both pairings at the bases in use (10000: the paper, GPT-NeoX, Llama 1-2; 500000: Llama 3; 1000000:
# Qwen), then ALiBi with the paper's slopes.
ROPE_BASES = (10000, 500000, 1000000)
LAYOUTS = (("half", "pairs i, i + Dh/2"), ("interleaved", "pairs 2i, 2i+1"))  # RoPE's two pairings, as named
POSITIONAL_VARIANTS = {
    **{
        f"rope-{layout}@{base}": f"RoPE, {layout} layout ({pairs})" + ("" if base == 10000 else f", base {base:,}")
        for base in ROPE_BASES
        for layout, pairs in LAYOUTS
    },
    # Llama 3.1 (Meta's code, llm.c, HF's rope_type "llama3"): base 500,000 with the long wavelengths slowed by 8,
    # a smooth band between (low 1, high 4, pretraining context 8,192): it changes angles at every position.
    **{
        f"rope-{layout}@500000+llama3": f"RoPE, {layout} layout ({pairs}), base 500,000, Llama 3.1 frequency scaling"
        for layout, pairs in LAYOUTS
    },
    # Partial rotary: only the first Dh/4 or Dh/2 dims of each head rotate, the rest pass as they are (GPT-NeoX,
    # StableLM and Persimmon in the half layout; GPT-J and CodeGen interleaved; Phi half with Dh/2).
    **{
        f"rope-{layout}@10000/{part}": f"RoPE, {layout} layout ({pairs}), on the first Dh/{part} dims of each head"
        for part in (4, 2)
        for layout, pairs in (("half", "pairs i, i + r/2"), ("interleaved", "pairs 2i, 2i+1"))
    },
    "alibi": "ALiBi",
    # T5 (Raffel et al. 2020): a learned bias per (distance bucket, head) added to the scores, and no 1/sqrt(Dh):
    # the scale is folded into the initialisation by design. Tried only when the module holds a (buckets, H)
    # table, which then feeds the reference's; without such a table a missing scale stays the no_scaling bug.
    "t5": "T5 relative position bias (learned, bucketed), unscaled by design, as T5",
    "t5-causal": "T5 relative position bias (learned, bucketed, looking back), unscaled by design, as T5",
}
T5_SCHEMES = ("t5", "t5-causal")
BASE_NAMES = ("rope_theta", "rope_base", "theta", "base")  # attributes (and config keys) that state a RoPE base
MAX_STATED = 2  # bases a module states beyond ROPE_BASES that are tried


def stated_rope_bases(module: nn.Module) -> list[int]:
    """RoPE bases the module itself states, beyond :data:`ROPE_BASES`: an ``inv_freq`` buffer (``base^(-2i/r)``:
    the base is ``inv_freq[1] ** -len``), a ``config`` with ``rope_theta`` (or ``rope_parameters["rope_theta"]``,
    transformers 5), or an attribute of that name (``self.rope_theta = 100000``). Helium's 100,000 and SmolLM3's
    2,000,000 are then tried as the bases in use are; a number that is no base only costs a reference that never
    matches."""
    found: list[int] = []

    def add(value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1000 <= value <= 1e9:
            return
        b = int(float(f"{float(value):.4g}"))
        if b not in ROPE_BASES and b not in found and len(found) < MAX_STATED:
            found.append(b)

    for m in module.modules():
        for name, buf in m.named_buffers(recurse=False):
            if "inv_freq" in name and buf.dim() == 1 and len(buf) >= 2 and buf.is_floating_point():
                step = float(buf[1])
                if 0 < step < 1:
                    add(step ** (-len(buf)))
        config = getattr(m, "config", None)
        rope = getattr(config, "rope_parameters", None) if config is not None else None
        for source in (m, config):
            for key in BASE_NAMES:
                add(getattr(source, key, None) if source is not None else None)
        if isinstance(rope, dict):
            add(rope.get("rope_theta"))
    return found


LLAMA31_SCALING = RopeScaling("llama3", factor=8.0, original_max_len=8192, low_freq_factor=1.0, high_freq_factor=4.0)


class T5InAttention(T5RelativeBias):
    """T5's bias carried by one attention module (ours places it once per stack, at site ``"model"``)."""

    site = "attention"


def t5_table(params: dict[str, torch.Tensor], h: int) -> str | None:
    """The learner's T5 bias table: the only ``(buckets, H)`` parameter (an ``nn.Embedding(buckets, H)``), or
    None."""
    found = [
        n
        for n, p in params.items()
        if p.dim() == 2 and p.shape[1] == h and p.shape[0] >= 4 and p.shape[0] % 2 == 0 and p.shape[0] != h
    ]
    return found[0] if len(found) == 1 else None


# res-post-norm (Swin Transformer v2): x + norm(f(x)), the stream itself never normalised; built as our
# "sandwich" placement with its input norm taken out, the learner's norms feeding the output norms
RES_POST = "res_post"
# parallel residual (GPT-J, GPT-NeoX, Falcon, Phi, PaLM): attention and FFN both read the block's input, one sum
PARALLEL = "parallel"


def res_post_hypothesis(hyp: Hypothesis) -> Hypothesis:
    """``hyp`` read onto a res-post-norm reference: ``*_add_norm.norm.*`` → ``*_add_norm.post_norm.*``."""

    def moved(name: str) -> str:
        return name.replace("_add_norm.norm", "_add_norm.post_norm", 1)

    return Hypothesis(
        hyp.style,
        {moved(k): v for k, v in hyp.sources.items()},
        {moved(k): v for k, v in hyp.modules.items()},
        hyp.heads,
        hyp.qk_norm,
    )


class References:
    """Builds (and caches) the reference for a hypothesis and a variant, and runs it."""

    def __init__(
        self,
        kind: str,
        d: int,
        h: int,
        parts: BlockParts | None,
        params: dict[str, torch.Tensor],
        positional: bool = False,
    ):
        """``positional``: the outputs depend on token positions (:func:`probes.positions`), so the references
        with a relative scheme inside attention are tried too, after the plain one."""
        self.kind, self.d, self.h, self.parts, self.params = kind, d, h, parts, params
        self.positional = positional
        self.t5 = t5_table(params, h) if positional else None  # T5's bias table, tried as a scheme when found
        self.own_norm: OwnNorm | None = None  # an attention holding its own norm (own_norm.py), set by the caller
        self._cache: dict[tuple[int, Variant], nn.Module] = {}
        self.schemes: dict[str, str] = dict(POSITIONAL_VARIANTS)  # with the bases the module states (state_bases)
        self.stated: set[str] = set()  # the schemes of those bases

    def state_bases(self, bases: list[int]) -> None:
        """RoPE at the bases the learner's module states (:func:`stated_rope_bases`), tried after the usual ones."""
        for base in bases:
            for layout, pairs in LAYOUTS:
                self.stated.add(f"rope-{layout}@{base}")
                self.schemes[f"rope-{layout}@{base}"] = (
                    f"RoPE, {layout} layout ({pairs}), base {base:,} (your module's)"
                )

    def variants(self, placement_hint: str | None = None) -> list[Variant]:
        schemes = (
            [None, *(s for s in self.schemes if (s not in T5_SCHEMES or self.t5) and self._fits(s))]
            if self.positional
            else [None]
        )
        if self.kind == "attention" and self.own_norm is not None:
            return [(inside,) + (() if s is None else (s,)) for s in schemes for inside in INSIDE]
        if self.kind == "attention":
            return [() if s is None else (s,) for s in schemes]
        placements = ["pre", "post"] if placement_hint in ("pre", "norm_on_residual_path") else ["post", "pre"]
        placements.append(RES_POST)  # Swin v2's x + norm(f(x)), a named placement, tried last
        placements.append(PARALLEL)  # GPT-NeoX, GPT-J, Falcon, Phi: x + attn(norm1(x)) + ffn(norm2(x))
        return [
            (p, a) + (() if s is None else (s,))
            for s in schemes
            for p in placements
            for a in self._parts().activations
            if p in ("pre", PARALLEL) or not self._design_scheme(s)  # partial RoPE, stated bases: Pre-Norm models
        ]

    def design_only(self, variant: Variant) -> bool:
        """A variant for published designs (a parallel block, partial RoPE, a base the module states): compared
        plain, but searched for faults only when it is the nearest design (``diagnose``), which keeps the fault
        search, the diagnosis' slowest stage, at the size it had before these designs."""
        placed = self.kind != "attention" and bool(variant) and variant[0] == PARALLEL
        return placed or (bool(variant) and self._design_scheme(variant[-1]))

    def _design_scheme(self, scheme: object) -> bool:
        """Partial RoPE (``rope-half@10000/4``) or a base the module states."""
        return isinstance(scheme, str) and ("/" in scheme or scheme in self.stated)

    def _fits(self, scheme: str) -> bool:
        """A partial rotary scheme needs an even number of rotated dims, fewer than the head's."""
        part = scheme.partition("/")[2]
        if not part:
            return True
        r = self.d // self.h // int(part)
        return r >= 2 and r % 2 == 0 and (self.d // self.h) % int(part) == 0

    def _parts(self) -> BlockParts:
        """The block's parts (a block's references only: attention has none)."""
        if self.parts is None:
            raise ValueError("an attention's references have no block parts")
        return self.parts

    def _positional(self, variant: Variant) -> PositionalScheme | None:
        scheme = variant[-1] if variant and variant[-1] in self.schemes else None
        if scheme is None:
            return None
        if scheme == "alibi":
            return ALiBiPositional(n_heads=self.h)
        if scheme in T5_SCHEMES and self.t5 is not None:
            return T5InAttention(
                n_heads=self.h, bidirectional=scheme == "t5", num_buckets=self.params[self.t5].shape[0]
            )
        layout, rest = scheme.removeprefix("rope-").split("@")
        rest, _, part = rest.partition("/")
        base, _, scaled = rest.partition("+")
        scaling = LLAMA31_SCALING if scaled == "llama3" else None
        dh = self.d // self.h
        return RotaryPositional(
            head_dim=dh, layout=layout, base=float(base), scaling=scaling, rotary_dim=dh // int(part) if part else None
        )

    def build(self, hyp_index: int, hyp: Hypothesis, variant: Variant) -> nn.Module:
        key = (hyp_index, variant)
        if key not in self._cache:
            kv = kv_heads(hyp, self.params, self.d, self.h)  # fewer than H: grouped-query attention
            qk = hyp.qk_norm.kind if hyp.qk_norm is not None else None
            positional = self._positional(variant)
            ref: nn.Module
            if self.kind == "attention":
                ref = MultiHeadAttention(
                    d_model=self.d, n_heads=self.h, n_kv_heads=kv, kernel="math", qk_norm=qk, positional=positional
                )
                if variant and variant[0] in INSIDE and self.own_norm is not None:  # its own norm around it
                    ref = wrap(ref, self.own_norm, self.d, variant[0])
                    hyp = wrapped_hypothesis(hyp, self.own_norm)
            else:
                placement, activation = variant[:2]
                parts = self._parts()
                block = EncoderBlock.build(
                    d_model=self.d,
                    n_heads=self.h,
                    n_kv_heads=kv,
                    d_ff=parts.d_ff,
                    activation=activation,
                    norm=parts.norm,
                    norm_eps=parts.eps,
                    placement="sandwich" if placement == RES_POST else "pre" if placement == PARALLEL else placement,
                    kernel="math",
                    qk_norm=qk,
                    positional=positional,
                    parallel_residual=placement == PARALLEL,
                )
                if placement == PARALLEL and len(parts.norms) == 1:  # GPT-J, Phi, Falcon-7B: one norm, read once
                    block.ffn_add_norm.norm = block.attn_add_norm.norm
                if placement == RES_POST:  # sandwich without its input norm: x + post_norm(f(x))
                    for an in (block.attn_add_norm, block.ffn_add_norm):
                        an.pre_norm = nn.Identity()
                    hyp = res_post_hypothesis(hyp)
                if parts.form == "unbiased_std":  # the annotated transformer's norm, carried as it is
                    for an in (block.attn_add_norm, block.ffn_add_norm):
                        setattr(an, "post_norm" if placement == RES_POST else "norm", StdNorm(self.d, parts.eps))
                ref = block
            if hyp.qk_norm is not None:  # the learner's eps (a block's builder gives the QK-norm the block's)
                attn = self.attention(ref)
                # torch's stubs read a sub-module's attributes as Tensor | Module; the norms' eps is a plain float
                attn.q_norm.eps = attn.k_norm.eps = hyp.qk_norm.eps  # type: ignore[assignment]
            ref = ref.double().eval()
            load_reference(ref, hyp, self.params)
            if isinstance(positional, T5InAttention) and self.t5 is not None:  # the learner's table, no scale
                with torch.no_grad():
                    positional.relative_attention_bias.weight.copy_(self.params[self.t5])
                self.attention(ref).scale = 1.0
            self._cache[key] = ref
        return self._cache[key]

    @staticmethod
    def attention(ref: nn.Module) -> MultiHeadAttention:
        return ref if isinstance(ref, MultiHeadAttention) else cast(MultiHeadAttention, ref.attn)

    @staticmethod
    def run(ref: nn.Module, sc: Scenario) -> torch.Tensor:
        with torch.no_grad():
            layer = ref if isinstance(ref, EncoderBlock) else References.attention(ref)  # inside its own norm, say
            ctx = attention_inputs(layer, sc.x, mask=sc.ref_mask, is_causal=sc.ref_causal)
            out: torch.Tensor = ref(sc.x, ctx=ctx)[0]
            return out

    def describe(self, variant: Variant) -> dict[str, Any]:
        out = (
            {}
            if self.kind == "attention"
            else {"placement": variant[0], "activation": variant[1], **self._parts().describe()}
        )
        if self.kind == "attention" and variant and variant[0] in INSIDE:
            out["norm_inside"] = INSIDE[variant[0]]
        scheme = variant[-1] if variant and variant[-1] in self.schemes else None
        if scheme is not None:
            out["positional"] = self.schemes[scheme]
        return out
