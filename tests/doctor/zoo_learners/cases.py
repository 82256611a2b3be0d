"""The learner zoo's table: each module, what the doctor must say about it, and the line it must point at.

``expect``: ``"ok"`` (a correct module: exit 0, no error; warnings allowed only where ``warn`` says which), a
bug-zoo fault name (it must be among the report's faults), ``"error:PROBE"`` (an error from that probe, no zoo
fault for it), or ``"refused"`` (a :class:`CheckError` whose message contains ``refusal``). ``point``: a piece of
the line the pitfall sits on (the case's own file), resolved to its line number by :func:`line_of`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Case:
    target: str  # "file.py:CLASS" or "file.py:factory" (factories are given as factory=)
    expect: str
    kw: dict = field(default_factory=dict)
    point: str | None = None  # a piece of the pitfall's line in the target's file
    style: str = ""  # which learner style (cause 1-6 of issue 12) the case is about
    refusal: str = ""  # for "refused": a piece of the CheckError's message
    also: tuple = ()  # further facts the report must show (checked by the test by name)
    runs: tuple = ()  # pieces of the lines where the faulty step executes, when it is not the pitfall's own line
    # (a constant set in __init__ and used in forward; an argument passed to a shared helper): also right

    @property
    def file(self) -> Path:
        return HERE / self.target.partition(":")[0]

    @property
    def correct(self) -> bool:
        return self.expect == "ok"

    @property
    def id(self) -> str:
        return self.target.replace(".py:", ".")


def lines_of(case: Case) -> set[int]:
    """Every line a diagnosis of ``case`` may point at: the pitfall's own, and where its faulty step runs."""
    return {line_of(case)} | {line_of(case, piece) for piece in case.runs} if case.point else set()


def line_of(case: Case, point: str | None = None) -> int | None:
    """The 1-based line of ``point`` (default ``case.point``) in the case's file (the first after the target's
    definition, else the first in the file)."""
    point = point or case.point
    if point is None:
        return None
    text = case.file.read_text(encoding="utf-8")
    name = case.target.partition(":")[2]
    found = re.search(rf"^(class|def) {re.escape(name)}\b", text, re.M)
    start = found.start() if found else 0
    at = text.find(point, start)
    at = text.find(point) if at < 0 else at
    if at < 0:
        raise LookupError(f"{point!r} is not in {case.file.name}")
    return text.count("\n", 0, at) + 1


def F(file: str, factory: str) -> str:
    return f"{file}:{factory}"


CASES = [
    # --- cause 2: one module per head (the video lecture) ---------------------------------------------------------
    Case(F("karpathy.py", "heads"), "ok", {"factory": "heads"}, style="per-head ModuleList"),
    Case(F("karpathy.py", "heads_scaled_by_c"), "scale_by_d_model", {"factory": "heads_scaled_by_c"},
         "wei = q @ k.transpose(-2, -1) * C**-0.5", "per-head ModuleList, C**-0.5"),
    Case(F("karpathy.py", "heads_no_scale"), "no_scaling", {"factory": "heads_no_scale"},
         "wei = q @ k.transpose(-2, -1)\n", "per-head ModuleList"),
    Case(F("karpathy.py", "heads_see_next"), "causal_off_by_one", {"factory": "heads_see_next", "causal": True},
         "diagonal=1", "per-head ModuleList, tril buffer"),
    Case(F("karpathy.py", "heads_no_projection"), "ok", {"factory": "heads_no_projection"},
         style="per-head ModuleList, no output projection"),
    Case("karpathy.py:Block", "ok", style="per-head block, pre-norm"),
    Case("karpathy.py:BlockOneNorm", "shared_layernorm", point="x = x + self.ffwd(self.ln1(x))",
         style="per-head block"),
    Case(F("karpathy.py", "block_scaled_by_c"), "scale_by_d_model", {"factory": "block_scaled_by_c"},
         "wei = q @ k.transpose(-2, -1) * C**-0.5", "per-head block, C**-0.5"),
    # --- cause 1 and 4: the annotated transformer ------------------------------------------------------------------
    Case(F("annotated.py", "mha"), "ok", {"factory": "mha"}, style="linears = clones(4), forward(q, k, v, mask)"),
    Case(F("annotated.py", "mha_zero_after_softmax"), "mask_after_softmax", {"factory": "mha_zero_after_softmax"},
         "p_attn = p_attn.masked_fill(mask == 0, 0)", "free attention function"),
    Case(F("annotated.py", "encoder_layer"), "ok", {"factory": "encoder_layer"},
         style="a_2/b_2 LayerNorm, unbiased std, SublayerConnection", also=("unbiased_std",)),
    Case(F("annotated.py", "encoder_layer_no_residual"), "no_residual", {"factory": "encoder_layer_no_residual"},
         "return self.dropout(sublayer(self.norm(x)))", "SublayerConnection without x +"),
    Case(F("annotated.py", "encoder_layer_normed_residual"), "norm_on_residual_path",
         {"factory": "encoder_layer_normed_residual"}, "x = self.norm(x)", "SublayerConnection, x = norm(x)"),
    Case(F("annotated.py", "encoder_layer_one_sublayer"), "shared_layernorm",
         {"factory": "encoder_layer_one_sublayer"}, "self.sublayer = SublayerConnection(size, dropout)",
         "one SublayerConnection for both"),
    # --- cause 3 and 4: d2l (LazyLinear, AddNorm) --------------------------------------------------------------
    Case(F("d2l.py", "mha"), "ok", {"factory": "mha"}, style="LazyLinear, queries/keys/values, valid_lens"),
    Case(F("d2l.py", "mha_scaled_by_num_hiddens"), "scale_by_d_model", {"factory": "mha_scaled_by_num_hiddens"},
         "math.sqrt(self.scale_dim or d)", "LazyLinear"),
    Case(F("d2l.py", "mha_no_permute"), "split_without_transpose", {"factory": "mha_no_permute"},
         "X = X.reshape(X.shape[0], self.num_heads, X.shape[1], -1)", "LazyLinear, reshape without permute"),
    Case(F("d2l.py", "encoder_block"), "ok", {"factory": "encoder_block"}, style="AddNorm sub-layers, LazyLinear"),
    Case(F("d2l.py", "encoder_block_forgot_x"), "no_residual", {"factory": "encoder_block_forgot_x"},
         "return self.ln(self.dropout(Y))", "AddNorm without + X"),
    Case(F("d2l.py", "encoder_block_shared_addnorm"), "shared_layernorm",
         {"factory": "encoder_block_shared_addnorm"}, "self.addnorm2 = self.addnorm1 if share", "one AddNorm twice"),
    # --- cause 1: Chinese tutorials, hand-written norms --------------------------------------------------------------
    Case("zh_tutorial.py:MultiHeadSelfAttention", "ok", style="中文注释, W_q/W_k/W_v/W_o"),
    Case("zh_tutorial.py:ScaleByDModel", "scale_by_d_model", point="/ math.sqrt(self.d_model)"),
    Case("zh_tutorial.py:SplitWithoutTranspose", "split_without_transpose",
         point="return x.view(batch_size, self.n_heads, seq_len, self.d_k)"),
    Case("zh_tutorial.py:SplitWithoutTransposeTanh", "split_without_transpose",
         point="return x.view(batch_size, self.n_heads, seq_len, self.d_k)",
         style="a valid variation (tanh on the output) beside a known pitfall"),
    Case("zh_tutorial.py:MergeWithoutTranspose", "merge_wrong_transpose",
         point="return x.contiguous().view(batch_size, seq_len, self.d_model)"),
    Case("zh_tutorial.py:MaskOnQueries", "padding_mask_on_queries", point="mask = mask.transpose(-2, -1)"),
    Case("zh_tutorial.py:MaskRepeat", "ok", point="mask = mask.repeat(1, self.n_heads, 1, 1)",
         style="mask=None default that fails", also=("retried_mask",)),
    Case("zh_tutorial.py:MaskRequired", "ok", style="a required mask whose code fails on None",
         also=("retried_mask",)),
    Case("zh_tutorial.py:TinyFill", "error:padding_leak", point="scores.masked_fill(mask == 0, -1e-9)",
         style="every mask convention leaks", also=("all_leak",)),
    Case("zh_tutorial.py:EncoderLayer", "ok", style="gamma/beta LayerNorm, eps 1e-12", also=("eps",)),
    Case("zh_tutorial.py:AttnNoResidual", "no_residual", point="x = self.norm1(attn_out)",
         style="residual missing around attention only", also=("sub_layer:attn",)),
    Case("zh_tutorial.py:PreNormLayer", "ok", style="scale/shift, eps hard-coded in F.layer_norm"),
    Case("zh_tutorial.py:PreNormFFNWired", "norm_on_residual_path", point="x = self.norm2(x)",
         style="norm on the residual path in one sub-layer", also=("sub_layer:ffn",)),
    Case("zh_tutorial.py:EpsNoScale", "no_scaling", point="scores = torch.matmul(Q, K.transpose(-2, -1))  #",
         style="a different eps beside a known pitfall"),
    # --- cause 4: research-repository layouts ---------------------------------------------------------------------
    Case("research.py:Attention", "ok", style="to_qkv + to_out = Sequential(Linear, Dropout), einsum"),
    Case("research.py:AttentionScaledByDim", "scale_by_d_model", point="scale=dim ** -0.5",
         style="to_out.0"),
    Case("research.py:EinsumQKV", "ok", style="bare (D, H, Dh) Parameters + Linear output"),
    Case("research.py:EinsumQKVScaledByDModel", "scale_by_d_model",
         point="self.scale = 1 / math.sqrt(d_model if scale_by_d_model else d_head)"),
    Case("research.py:TorchMHAThenLinear", "ok", style="an extra Linear after nn.MultiheadAttention"),
    Case("research.py:CausalSelfAttention", "ok", style="GPT-2 c_attn/c_proj, detected causal"),
    Case("research.py:LocalWindowEncoder", "error:token_order", point='band = ((i[:, None] - i[None, :]).abs() <= 1)',
         style="local mixing is not called causal (and is not the post's attention)", also=("not_causal",)),
    # --- library code learners copy (hub.py) --------------------------------------------------------------------
    Case("hub.py:BertSelfAttention", "ok", style="BERT self-attention without an output projection, (ctx,) tuple"),
    Case("hub.py:BertLayer", "ok", style="BERT layer: LayerNorm eps 1e-12 inside each sub-layer's output module"),
    Case("hub.py:GPT2Attention", "ok", style="GPT-2 Conv1D (weights (in, out)), causal by torch.where"),
    Case("hub.py:GPT2AttentionScaledByEmbed", "scale_by_d_model", point="self.embed_dim ** 0.5)",
         style="GPT-2 Conv1D"),
    Case("hub.py:SdpaAttention", "ok", style="F.scaled_dot_product_attention(is_causal=True)"),
    Case("hub.py:SdpaNoTranspose", "split_without_transpose",
         point="q, k, v = (t.reshape(B, self.n_heads, T, C // self.n_heads)",
         style="sdpa; the mixing hides causality from the detection", also=("causal_from_diagnosis",)),
    Case("hub.py:Transformer", "ok", style="Residual(PreNorm(fn)) wrappers, to_out = Sequential"),
    Case("hub.py:TransformerNoFFResidual", "no_residual", point="self.layers[0][1] = PreNorm(dim, FeedForward(",
         style="Residual(PreNorm(fn)) wrappers", also=("sub_layer:ffn",)),
    Case(F("hub.py", "torch_encoder_layer"), "ok", {"factory": "torch_encoder_layer"},
         style="torch.nn.TransformerEncoderLayer, post-norm"),
    Case(F("hub.py", "torch_encoder_layer_pre"), "ok", {"factory": "torch_encoder_layer_pre"},
         style="torch.nn.TransformerEncoderLayer, norm_first, GELU"),
    Case(F("hub.py", "torch_encoder_layer_seq_first"), "ok", {"factory": "torch_encoder_layer_seq_first"},
         style="torch.nn.TransformerEncoderLayer, sequence-first", also=("seq_first",)),
    # --- cause 3: call contracts ------------------------------------------------------------------------------------
    Case("contract.py:KeywordOnly", "ok", style="keyword-only query=/key=/value="),
    Case("contract.py:KeywordOnlyNoScale", "no_scaling", point="self.heads(self.v_proj(value)), scale=1.0)",
         style="keyword-only"),
    Case("contract.py:SeqFirst", "ok", style="sequence-first (T, B, D)", also=("seq_first",)),
    Case("contract.py:SeqFirstNoScale", "no_scaling", point="scale=1.0)\n        return out.transpose(0, 1)",
         style="sequence-first (T, B, D)", also=("seq_first",)),
    Case("contract.py:MaskNoneRepeat", "ok", point="keep = mask.repeat(1, 1, 1, 1).bool()",
         style="mask=None default that fails", also=("retried_mask",)),
    Case("contract.py:MaskNoneRepeatScaledByDModel", "scale_by_d_model", point="scale=math.sqrt(self.h * self.dk)",
         style="mask=None default that fails"),
    Case("contract.py:ReturnsCache", "ok", style="a returned cache is not weights"),
    Case("contract.py:ReturnsState", "ok", style="a returned state is not weights"),
    Case("contract.py:VarArgs", "ok", style="*args does not take a mask"),
    Case("contract.py:VarArgsNoScale", "no_scaling", point="scale=1.0)\n        return out\n\n\nclass Exits",
         style="*args"),
    Case("contract.py:ThroughNumpy", "ok", style="a module the recorder cannot follow (numpy inside)",
         also=("unmapped_reason",)),
    Case("contract.py:ExitsInForward", "refused", point="sys.exit(0)", refusal="sys.exit",
         style="a forward that ends the process"),
    # --- cause 4-6: blocks arranged differently ----------------------------------------------------------------------
    Case("blocks.py:CompleteSublayers", "ok", style="residual + norm inside each sub-layer"),
    Case("blocks.py:CompleteSublayersFFNNoResidual", "no_residual", point="return x + y if self.residual else y",
         style="complete sub-layers", also=("sub_layer:ffn",)),
    Case("blocks.py:CompleteSublayersScaledByDModel", "scale_by_d_model",
         point="scale=1 / math.sqrt(d_model))\n\n\nclass AttentionWithNorm", style="complete sub-layers"),
    Case("blocks.py:NormInsideAttention", "ok", style="the norm inside the attention module"),
    Case("blocks.py:PreNormBlock", "ok", style="pre-norm, GELU"),
    Case("blocks.py:QueryOnlyPreNorm", "norm_on_query_only", point="x = x + self.attn(self.ln1(x), x, x)",
         style="pre-norm applied to the query only"),
    Case("blocks.py:ExtraActivation", "ok", style="an extra activation (a valid variation)"),
    Case("blocks.py:ExtraActivationScaledByDModel", "scale_by_d_model",
         point="self.attn = MHA(d_model, n_heads, scale=1 / math.sqrt(d_model))",
         style="an extra activation beside a known pitfall"),
    Case("blocks.py:TorchMHABlock", "ok", style="post-norm around nn.MultiheadAttention + an extra Linear"),
]


RUNS = {  # where the faulty step executes (what a recording sees), for pitfalls set elsewhere
    "karpathy.heads_see_next": ("wei = wei.masked_fill(self.tril[:T, :T] == 0",),
    "annotated.encoder_layer_normed_residual": ("return x + self.dropout(sublayer(x))",),
    "d2l.encoder_block_shared_addnorm": ("return self.ln(self.dropout(Y) + X)",),
    "zh_tutorial.PreNormFFNWired": ("x = x + self.ffn(x)",),
    "zh_tutorial.MaskOnQueries": ("scores = scores.masked_fill(mask == 0, -1e9)  #",),
    "research.AttentionScaledByDim": ("sim = einsum('b h i d, b h j d -> b h i j', q, k) * self.scale",),
    "research.EinsumQKVScaledByDModel": ("scores = torch.einsum('bhte,bhse->bhts', q, k) * self.scale",),
    "contract.KeywordOnlyNoScale": ("s = q @ k.transpose(-2, -1) / (math.sqrt(self.dk) if scale",),
    "contract.SeqFirstNoScale": ("s = q @ k.transpose(-2, -1) / (math.sqrt(self.dk) if scale",),
    "contract.MaskNoneRepeatScaledByDModel": ("s = q @ k.transpose(-2, -1) / (math.sqrt(self.dk) if scale",),
    "contract.VarArgsNoScale": ("s = q @ k.transpose(-2, -1) / (math.sqrt(self.dk) if scale",),
    "blocks.CompleteSublayersScaledByDModel": ("w = torch.softmax(q @ k.transpose(-2, -1) * self.scale",),
    "blocks.ExtraActivationScaledByDModel": ("w = torch.softmax(q @ k.transpose(-2, -1) * self.scale",),
}
CASES = [replace(c, runs=RUNS.get(c.id, ())) for c in CASES]
assert set(RUNS) <= {c.id for c in CASES}

# Pitfalls whose line the recording does not place yet (pointers.py has no step for a residual that is missing, or
# for one norm module called twice through a wrapper); the verdict is right, the line is not asserted.
LINE_GAPS = {"hub.TransformerNoFFResidual", "annotated.encoder_layer_no_residual",
             "annotated.encoder_layer_one_sublayer", "d2l.encoder_block_forgot_x", "zh_tutorial.AttnNoResidual",
             "blocks.CompleteSublayersFFNNoResidual", "research.LocalWindowEncoder"}
assert LINE_GAPS <= {c.id for c in CASES}
