"""The real-module zoo's table (tests/doctor/zoo/real/): modules re-typed from public repositories, each with what
the doctor must say and the line it must point at. Same fields as the learner zoo (``zoo_learners/cases.py``):
``expect`` is ``"ok"``, a bug-zoo fault, ``"error:PROBE"`` or ``"refused"``; ``point`` a piece of the pitfall's line.
Every file's header comment names the repository and file each class follows; "injected" marks a bug we put in."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zoo_learners.cases import Case

HERE = Path(__file__).parent


@dataclass(frozen=True)
class RealCase(Case):
    source: str = "real"  # "real": the module (or its bug) as published; "injected": our bug in a real module

    @property
    def file(self) -> Path:
        return HERE / self.target.partition(":")[0]

    @property
    def id(self) -> str:
        return "real." + self.target.replace(".py:", ".")


C = {"causal": True}
BLOCK = {"kind": "block"}

FIRST = [
    # --- vision (timm, DeiT/CaiT, DINOv2, Swin-v2, vit-pytorch) --------------------------------------------------
    RealCase("vision.py:TimmAttention", "ok", style="fused qkv, permute(2, 0, 3, 1, 4), q * scale"),
    RealCase("vision.py:TimmAttentionMergeNoTranspose", "merge_wrong_transpose",
             point="x = (attn @ v).reshape(B, N, C)  # (B, H, N, Dh)", source="injected"),
    RealCase("vision.py:LayerScaleBlock", "ok", style="LayerScale modules ls1/ls2 (a learned per-channel gain)"),
    RealCase("vision.py:CaiTBlock", "ok", style="LayerScale as gamma_1/gamma_2 Parameters of the block"),
    RealCase("vision.py:ResPostNormBlock", "ok", style="res-post-norm x + norm(f(x))"),
    RealCase("vision.py:LucidViTAttention", "scale_by_d_model", point="self.scale = dim ** -0.5",
             runs=("dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale",), style="to_qkv chunk, dim ** -0.5"),
    RealCase("vision.py:LucidViTNormInside", "ok", style="the LayerNorm inside the attention, no residual there"),
    RealCase("vision.py:LucidViTLayer", "ok", style="norms inside attention and feed-forward"),
    RealCase("vision.py:DeiTBlockSharedNorm", "shared_layernorm", point="x = x + self.mlp(self.norm1(x))",
             source="injected"),
    RealCase("vision.py:TimmSdpaAttention", "ok", style="F.scaled_dot_product_attention"),
    # --- speech (Whisper, ESPnet, Conformer, fairseq) -------------------------------------------------------------
    RealCase("speech.py:WhisperAttention", "ok", style="Dh ** -0.25 on q and k, qk.float() before the softmax"),
    RealCase("speech.py:WhisperBlock", "ok", style="LayerNorm computing in float32 (x.float() ... .type(x.dtype))"),
    RealCase("speech.py:EspnetAttention", "ok", style="forward(query, key, value, mask) required, weights zeroed "
             "again after the softmax"),
    RealCase("speech.py:ConformerAttention", "scale_by_d_model", point="self.sqrt_dim = math.sqrt(d_model)",
             runs=("score = torch.matmul(query.transpose(1, 2), key.transpose(2, 3)) / self.sqrt_dim",),
             style="sqrt(d_model)"),
    RealCase("speech.py:FairseqAttention", "ok", style="(T, B, C), key_padding_mask True = pad, float() softmax",
             also=("seq_first",)),
    RealCase("speech.py:EspnetEncoderLayer", "ok", style="block with a required mask"),
    # --- LLMs in English (transformers' Llama/Falcon/NeoX, llama2.c, meta-llama, gemma) ----------------------------
    RealCase("llm.py:LlamaAttention", "ok", C, style="RoPE in float32, softmax(dtype=float32), 2 kv heads"),
    RealCase("llm.py:LlamaDecoderLayer", "ok", C, style="RMSNorm upcast to float32"),
    RealCase("llm.py:Llama2cAttention", "ok", C, style="interleaved RoPE on xq.float(), -inf triu buffer"),
    RealCase("llm.py:Llama2cBlock", "ok", C, style="RMSNorm _norm(x.float()).type_as(x)"),
    RealCase("llm.py:GemmaBlock", "ok", C, style="RMSNorm (1 + weight) in float32"),
    RealCase("llm.py:FalconMultiQuery", "ok", C, style="fused multi-query (H + 2) heads"),
    RealCase("llm.py:FalconInterleavedGQA", "ok", C, style="qkv interleaved per key/value group"),
    RealCase("llm.py:NeoXAttention", "ok", C, style="qkv interleaved per head (B, T, H, 3 Dh)"),
    RealCase("llm.py:LlamaSplitNoTranspose", "split_without_transpose", C,
             point="q = self.q_proj(hidden_states).view(bsz, self.num_heads, q_len, self.head_dim)",
             source="injected"),
    RealCase("llm.py:Llama2cNoScale", "no_scaling", C, point="scores = torch.matmul(xq, xk.transpose(2, 3))\n",
             source="injected"),
    # --- LLMs in Chinese tutorials (minimind, nlp-tutorial, blogs) ---------------------------------------------------
    RealCase("llm_zh.py:MiniMindAttention", "ok", C, style="RoPE float32 buffers, scores.float()"),
    RealCase("llm_zh.py:MiniMindBlock", "ok", C, style="RMSNorm x.float(), hidden_states += residual"),
    RealCase("llm_zh.py:NlpTutorialAttention", "ok",
             style="forward(Q, K, V, attn_mask) required, (B, T, S) True = pad"),
    RealCase("llm_zh.py:ZhKeyPaddingAttention", "ok", style="key_padding_mask= (B, S) True = pad, -inf"),
    RealCase("llm_zh.py:ZhKeyPaddingOnQueries", "padding_mask_on_queries",
             point="attn = attn.masked_fill(key_padding_mask[:, None, :, None], -1e9)", source="injected"),
    RealCase("llm_zh.py:ZhMaskAfterSoftmaxInf", "mask_after_softmax",
             point='attn = attn.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))', source="injected"),
    RealCase("llm_zh.py:QwenStyleAttention", "ok", style="q/k/v bias, RoPE float32 table, additive mask"),
    RealCase("llm_zh.py:ZhPostNormNoResidual", "no_residual", point="x = self.norm1(self.attn(x, key_padding_mask))",
             also=("sub_layer:attn",), source="injected"),
    # --- research code (T5, OLMo, attention-is-all-you-need-pytorch, x-transformers) --------------------------------
    RealCase("research.py:T5Attention", "ok", style="no 1/sqrt(d), relative position bias"),
    RealCase("research.py:T5Block", "ok", style="T5LayerNorm (RMS, float32 variance), unscaled attention"),
    RealCase("research.py:OlmoBlock", "ok", style="two non-parametric LayerNorm modules"),
    RealCase("research.py:FunctionalNormBlock", "ok", BLOCK, style="F.layer_norm(x, (D,)) twice, no parameters"),
    RealCase("research.py:JadoreMultiHeadAttention", "ok", style="residual + LayerNorm inside the attention"),
    RealCase("research.py:JadoreEncoderLayer", "ok", style="Conv1d(kernel 1) feed-forward"),
    RealCase("research.py:JadoreEncoderLayerNoFFResidual", "no_residual", point="return self.layer_norm(output)\n",
             also=("sub_layer:ffn",), source="injected"),
    RealCase("research.py:XAttention", "ok", style="forward(x, context=None, mask=None), ~mask, -finfo.max"),
    # --- named designs again, in other layouts (designs.py) -----------------------------------------------------------
    RealCase("designs.py:PostNormLayerScale", "ok", style="LayerScale gains 0.1 on a post-norm block"),
    RealCase("designs.py:LayerScaleAttnOnly", "ok", style="LayerScale on the attention branch only"),
    RealCase("designs.py:LayerScaleNoResidual", "no_residual", point="x = self.ls1 * self.attn(self.norm1(x))",
             also=("sub_layer:attn",), source="injected"),
    RealCase("designs.py:ResPostRMSBlock", "ok", style="res-post-norm with RMSNorm and a SwiGLU"),
    RealCase("designs.py:ResPostSharedNorm", "shared_layernorm", point="return x + self.norm1(self.mlp(x))",
             source="injected"),
    RealCase("designs.py:ResPostNoResidual", "no_residual", point="return self.norm2(self.mlp(x))",
             also=("sub_layer:ffn",), source="injected"),
    RealCase("designs.py:FunctionalPostNorm", "ok", BLOCK, style="F.layer_norm in a helper, post-norm"),
    RealCase("designs.py:FunctionalNormNoResidual", "no_residual", BLOCK, point="x = self.attn(_norm(x))",
             also=("sub_layer:attn",), source="injected"),
    RealCase("designs.py:T5CausalAttention", "ok", C, style="T5 decoder bias, unidirectional buckets, unscaled"),
    RealCase("designs.py:T5ScaledByDModel", "scale_by_d_model", C,
             point="return q @ k.transpose(-2, -1) / math.sqrt(self.o.in_features)", source="injected"),
    RealCase("designs.py:GemmaStyleBlock", "ok", style="(1 + scale) RMSNorm, SwiGLU"),
    RealCase("designs.py:GemmaStyleSharedNorm", "shared_layernorm", point="return x + self.ffn(self.pre_attn_norm(x))",
             source="injected"),
    RealCase("designs.py:ConvFFNPreNorm", "ok", style="Conv1d(kernel 1) FFN in a Sequential, pre-norm"),
    RealCase("designs.py:ConvFFNNoAttnResidual", "no_residual", point="x = self.attn(self.norm_a(x))",
             also=("sub_layer:attn",), source="injected"),
    RealCase("designs.py:RMSNormInsideAttention", "ok", style="an RMSNorm inside the attention, before it"),
    RealCase("designs.py:RMSNormInsideScaledByDModel", "scale_by_d_model",
             point="return torch.softmax(q @ k.transpose(-2, -1) / self.to_q.in_features ** 0.5, dim=-1)",
             source="injected"),
    RealCase("designs.py:ResidualNormInsideAttention", "ok", style="norm(x + attn(x)) inside one module"),
    # --- call contracts ----------------------------------------------------------------------------------------------
    RealCase("signatures.py:AladdinSelfAttention", "ok", style="forward(values, keys, query, mask)"),
    RealCase("signatures.py:AladdinScaledByEmbedSize", "scale_by_d_model", point="return self.embed_size ** (1 / 2)",
             runs=("attention = torch.softmax(energy / self.scale(), dim=3)",),
             style="forward(values, keys, query, mask), embed_size ** 0.5"),
    RealCase("signatures.py:RequiredAdditiveMask", "ok", style="forward(hidden_states, attention_mask) required"),
    RealCase("signatures.py:SrcKeyPadding", "ok", style="src_key_padding_mask (B, S) True = pad"),
    RealCase("signatures.py:AdditiveBS", "ok", style="additive (B, S)"),
    RealCase("signatures.py:AdditiveB1S", "ok", style="additive (B, 1, S)"),
    RealCase("signatures.py:ThirdArgumentKeep", "ok", style="forward(inputs, rel_bias=None, keep=None)"),
    RealCase("signatures.py:RequiredPadTrue", "ok", style="forward(x, pad) required, True = pad"),
    RealCase("signatures.py:CapitalQKV", "ok", style="forward(Q, K, V, attn_mask=None), additive (B, S)"),
    RealCase("signatures.py:AdditiveBSOnQueries", "padding_mask_on_queries",
             point="bias = None if mask is None else mask[:, None, :, None]", runs=("s = s + bias",),
             source="injected"),
    # --- attention slips learners make (issue 29): found in public code, re-typed -------------------------------
    RealCase("slips.py:Seq2SeqSoftmaxOverHeads", "softmax_wrong_axis", point="attention = torch.softmax(energy, dim=1)",
             style="softmax over the heads of (B, H, T, S), a required mask"),
    RealCase("slips.py:OneHeadSoftmaxOverQueries", "softmax_wrong_axis", {"n_heads": 1},
             point="attn = attn.softmax(dim=1)", style="one head, einsum, no scale, no output projection",
             source="injected"),
    RealCase("slips.py:AnnotatedDropoutAlwaysOn", "dropout_at_eval", point="p_attn = F.dropout(p_attn, p=dropout)",
             style="functional dropout without training=self.training"),
]

# the third wave (issue 29): sources not used above — geometric algebra, diffusion, recommendation, time series,
# proteins, graphs, speech, Chinese courses — and bugs from repositories' history
WAVE3 = [
    # --- research code outside language modelling (science.py) -----------------------------------------------------
    # GATr splits the query heads as (Dh, H) on purpose: its weights are learned in that layout, so the doctor matches
    # it and names the layout as a warning (heads_interleaved: a checkpoint laid out as the post's would not fit)
    RealCase("science.py:GeoMultiQueryAttention", "ok", also=("status:fault",),
             style="multi-query, q heads split (Dh, H), o in a parent"),
    RealCase("science.py:GeoBaselineBlock", "ok", also=("status:fault",),
             style="one parameter-free norm module called twice"),
    RealCase("science.py:GeoBaselineNoResidual", "no_residual", point="outputs = self.attention(self.norm(inputs)",
             also=("sub_layer:attn",), source="injected"),
    # --- time series, GPT-1, Chinese course code, bugs as published (wave3.py) --------------------------------------
    RealCase("wave3.py:PatchAttention", "ok", style="k permuted once, a frozen scale Parameter, forward(Q, K, V)"),
    RealCase("wave3.py:PatchEncoderLayer", "ok", style="post-norm; forward(src, prev=None): prev is not a mask"),
    RealCase("wave3.py:PatchAttentionByDModel", "scale_by_d_model",
             point="self.scale = nn.Parameter(torch.tensor(d_model**-0.5), requires_grad=False)",
             runs=("s = torch.matmul(q, k) * self.scale",), source="injected"),
    RealCase("wave3.py:GPT1Attention", "ok", C, style="Conv1D c_attn, w * b - 1e4 * (1 - b), returns a list"),
    RealCase("wave3.py:GPT1Block", "ok", C, style="post-norm, Conv1D MLP (weights (in, out)), returns a list"),
    RealCase("wave3.py:GPT1BlockWrongResidual", "no_residual", C,
             point='h = self.ln_2(self.c_proj(F.gelu(self.c_fc(n), approximate="tanh")))',
             also=("sub_layer:ffn",), source="injected"),
    RealCase("wave3.py:PadOnQueriesSelfAttention", "padding_mask_on_queries",
             point="energy = energy.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(-1), -1e10)"),
    RealCase("wave3.py:FutureMaskOnQueries", "padding_mask_on_queries",
             point="scores = scores.masked_fill((mask == 1), -1e9)",
             runs=("mask = mask.unsqueeze(1).unsqueeze(-1)",)),
    RealCase("wave3.py:DiscardedMaskAttention", "error:padding_leak",
             point='score.masked_fill(mask == 0, float("-inf"))'),
    RealCase("wave3.py:ZhLabAttention", "ok", style="padded query rows and outputs zeroed, returns (out, w)"),
    RealCase("wave3.py:ZhPreLNEncoderLayer", "ok", style="one norm on q, k and v of one sub-layer"),
    RealCase("wave3.py:ZhPreLNSharedNorm", "shared_layernorm",
             point="return x + self.linear2(F.gelu(self.linear1(self.norm1(x))))", source="injected"),
    RealCase("wave3.py:TwoMaskPaths", "padding_mask_on_queries", point="scores = scores.masked_fill(mask == 0, -1e9)",
             runs=("mask = mask.unsqueeze(1).unsqueeze(-1)",), source="injected"),
    RealCase("wave3.py:PatchBatchNormLayer", "ok", also=("status:unavailable",),
             style="BatchNorm post-norm (PatchTST's design): named, not compared with the LayerNorm reference"),
    RealCase("wave3.py:SequentialTupleBlock", "ok", style="forward(inputs): x, mask = inputs; returns (out, mask)"),
    RealCase("wave3.py:SequentialTupleNoResidual", "no_residual", point="return self.ln2(self.ffw(out)), mask",
             also=("sub_layer:ffn",), source="injected"),
    RealCase("wave3.py:SASRecOriginalBlock", "norm_on_residual_path", C,
             point="seqs = Q + mha_outputs",
             style="a design the repository later replaced: Q = LN(seqs) as query and residual"),
    RealCase("wave3.py:SASRecPreLNBlock", "ok", C, style="norm_first fix, torch MultiheadAttention (T, B, D)"),
    # --- diffusion (diffusers) -----------------------------------------------------------------------------------
    RealCase("wave3.py:DiffusersAttention", "ok", style="to_q/to_k/to_v, to_out ModuleList, SDPA"),
    RealCase("wave3.py:DiffusersBasicBlock", "ok", style="GEGLU: one Linear D -> 2F chunked into hidden, gate"),
    RealCase("wave3.py:DiffusersTwoAttentionBlock", "ok", also=("status:unavailable",),
             style="a second self-attention (no context given): named, not compared"),
    RealCase("wave3.py:DiffusersAttentionByDModel", "scale_by_d_model",
             point="h = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, scale=d**-0.5)",
             source="injected"),
    # --- diffusion U-Nets (DDPM: labml.ai / pdearena, pesser/pytorch_diffusion), the residual inside the block -------
    RealCase("diffusion.py:DDPMAttentionQueries", "softmax_wrong_axis", point="w = w.softmax(dim=1)",
             style="softmax over the queries of (B, T, S, H), res += x inside: as published before the fix"),
    RealCase("diffusion.py:DDPMAttention", "ok", style="softmax over dim=2 of (B, T, S, H), res += x, idle GroupNorm"),
    RealCase("diffusion.py:DDPMConvAttnBlock", "ok", {"n_heads": 1}, also=("status:unexplained",),
             style="GroupNorm over channels and positions (no reference carries it), x + h: an honest can't-tell"),
    RealCase("diffusion.py:DDPMConvAttnBlockQueries", "softmax_wrong_axis", {"n_heads": 1},
             point="w = torch.nn.functional.softmax(w, dim=1)", source="injected",
             style="the same with softmax over the queries of (B, T, S): named from the recorded flow"),
    # --- time series (Informer) and a repository's first published attention ---------------------------------------
    RealCase("wave3.py:InformerAttentionLayer", "ok", style="einsum blhe,bshe->bhls, triangular mask built inside"),
    RealCase("wave3.py:InformerMixAttention", "merge_wrong_transpose", C,
             point="out = out.transpose(2, 1).contiguous()",
             runs=("return self.out_projection(out.view(B, L, -1)), attn",),
             style="Informer's mix=True: (B, L, H, D) transposed then viewed, tokens and heads mixed"),
    RealCase("wave3.py:HyunwoongFirstAttention", "split_without_transpose",
             point="return tensor.view(batch_size, self.n_head, length, d_model // self.n_head)",
             style="a first published version: view without transpose, sqrt(d_model), -1e-12 fill"),
    RealCase("wave3.py:HyunwoongEncoderLayer", "ok", style="unbiased-std LayerNorm (eps 1e-12) named gamma/beta"),
    # --- an LLM course in Chinese (happy-llm) ------------------------------------------------------------------------
    RealCase("wave3.py:HappyCausalAttention", "ok", C, style="forward(q, k, v), triu(-inf) buffer, softmax in float32"),
    RealCase("wave3.py:HappyEncoderLayer", "norm_on_residual_path", point="h = x + self.attention.forward(x, x, x)",
             also=("sub_layer:attn",), style="as published: x = norm(x) then h = x + attention(x)"),
]

CASES = FIRST + WAVE3

# pitfalls whose line the recording does not place (a missing residual has no line of its own to run; a missing
# scale is pointed at the softmax line when a cast sits between the product and the softmax)
LINE_GAPS = {"real.llm_zh.ZhPostNormNoResidual", "real.research.JadoreEncoderLayerNoFFResidual",
             "real.llm.Llama2cNoScale", "real.designs.LayerScaleNoResidual",
             "real.designs.ResPostNoResidual", "real.designs.FunctionalNormNoResidual",
             "real.designs.GemmaStyleSharedNorm",  # a norm written as tensor ops: its shared call is not placed
             "real.designs.ConvFFNNoAttnResidual",
             "real.science.GeoBaselineNoResidual", "real.wave3.GPT1BlockWrongResidual",
             "real.wave3.DiscardedMaskAttention", "real.wave3.ZhPreLNSharedNorm",
             "real.wave3.SequentialTupleNoResidual", "real.wave3.SASRecOriginalBlock"}
assert LINE_GAPS <= {c.id for c in CASES}
