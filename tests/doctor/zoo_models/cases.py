"""The model zoo's table (tests/doctor/zoo_models/): whole language models re-typed from public repositories, each with
what the doctor must say about it and the line it must point at.

``expect``: ``"ok"`` (a correct model: no error), a model-level or block-level pitfall name (it must be among the
report's faults, exit code 1), ``"error:PROBE"`` (an error from that probe) or ``"refused"`` (a CheckError whose
message contains ``refusal``). ``point``: a piece of the pitfall's line in the case's file (the first match after
the target's definition, else the first in the file); ``runs``: pieces of further lines where the faulty step runs
(a helper the class calls, the line that uses a constant), also right. ``source``: ``"real"`` when the bug (or the
whole model) is as published -- the file's header names the repository, file and the fixing commit, PR or issue --
and ``"injected"`` when the bug is ours. ``severity``: the level the pitfall's record gives it (a missing final norm
is a warning: the model still trains). ``construct``: the name of a factory in the file when the model is built
from something the doctor is not asked to guess (a plain dict config, a dropout rate above zero); otherwise the
doctor builds it from the standard sizes or the file's config class.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent


@dataclass(frozen=True)
class ModelCase:
    target: str  # "file.py:Class" (or "file.py:factory" with construct=factory)
    expect: str
    point: str | None = None
    source: str = "real"
    style: str = ""
    construct: str | None = None
    runs: tuple = ()
    refusal: str = ""
    severity: str = "error"  # the finding's level for a bug: "error" (exit 1) or "warning" (exit 0, named)
    slow: str = ""  # why the case is left to `-m slow` (the block doctor's diagnosis takes tens of seconds on it)

    @property
    def file(self) -> Path:
        return HERE / self.target.partition(":")[0]

    @property
    def name(self) -> str:
        return self.target.partition(":")[2]

    @property
    def correct(self) -> bool:
        return self.expect == "ok"

    @property
    def bug(self) -> bool:
        return self.expect not in ("ok", "refused")

    @property
    def id(self) -> str:
        return "models." + self.target.replace(".py:", ".")


def line_of(case: ModelCase, point: str | None = None) -> int | None:
    """The 1-based line of ``point`` (default ``case.point``) in the case's file, comments left out: the first match
    after the target's ``class``/``def`` line, else the first in the file."""
    point = point or case.point
    if point is None:
        return None
    text = case.file.read_text(encoding="utf-8")
    found = re.search(rf"^(class|def) {re.escape(case.name)}\b", text, re.M)
    code = []  # offsets of the matches outside comment lines
    at = text.find(point)
    while at >= 0:
        if not text[text.rfind("\n", 0, at) + 1 : at].lstrip().startswith("#"):
            code.append(at)
        at = text.find(point, at + 1)
    if not code:
        raise LookupError(f"{point!r} is not in {case.file.name}")
    after = [at for at in code if found and at >= found.start()]
    return text.count("\n", 0, (after or code)[0]) + 1


def lines_of(case: ModelCase) -> set[int]:
    """Every line a finding about ``case`` may point at."""
    if case.point is None:
        return set()
    return {line_of(case)} | {line_of(case, piece) for piece in case.runs}


M = ModelCase

CASES = [
    # --- karpathy: nanoGPT, minGPT, build-nanogpt, the "Let's build GPT" lecture ------------------------------------
    M("nanogpt.py:GPT", "ok", style="GPTConfig dataclass, tril `bias` buffer, wte tied by assignment, generate()"),
    M("nanogpt.py:GPTMaskIndexed", "causal_mask_sliced_wrong", "att = att.masked_fill(self.bias[:, :, T, :T] == 0",
      source="injected", style="bias[:, :, T, :T]: one tril row broadcast over every query"),
    M("nanogpt.py:GPTTemperatureLate", "temperature_after_softmax",
      "probs = F.softmax(logits, dim=-1) / temperature", style="generate(): probs divided by T, multinomial renormalises"),
    M("nanogpt.py:tiny_functional_dropout", "functional_dropout_in_eval", "return F.dropout(x, p=self.dropout.p)",
      construct="tiny_functional_dropout", style="F.dropout without training=self.training, dropout=0.1"),
    M("nanogpt.py:tiny_flash_dropout", "functional_dropout_in_eval",
      "y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout, is_causal",
      construct="tiny_flash_dropout", style="nanoGPT before 7399dfe: SDPA dropout_p=self.dropout in eval() too"),
    M("mingpt.py:GPT", "ok", style="CfgNode from get_default_config(), model_type=None, NewGELU, untied head"),
    M("ng_lecture.py:GPTLanguageModel", "ok",
      style="positional sizes, one module per head, logits.view(B*T, C) when targets are given"),
    M("ng_lecture_globals.py:GPTLanguageModel", "ok",
      style="the lecture script's own style: module-level hyperparameters, GPTLanguageModel() takes no argument"),
    M("ng_lecture.py:BigramLanguageModel", "scale_by_d_model", "wei = q @ k.transpose(-2, -1) * C**-0.5",
      style="ng-video-lecture before PR #6: scaled by the embedding width"),
    M("build_nanogpt.py:GPT", "ok", style="GPT-2 124M reproduction, SDPA is_causal=True, NANOGPT_SCALE_INIT"),
    M("build_nanogpt.py:GPTPositionsTwice", "positions_added_twice", "x = x + self.transformer.wpe(pos)",
      style="I-JEPA #4's double add, in a GPT"),
    M("build_nanogpt.py:GPTPositionsAfterBlocks", "positions_after_blocks", "x = x + self.transformer.wpe(pos)",
      source="injected", style="the position table added after the stack"),
    M("train_llm_scratch.py:Transformer", "ok",
      style="Transformer(n_head, n_embed, context_length, vocab_size, N_BLOCKS): other names, other order"),
    M("train_llm_scratch.py:TransformerScaledByC", "scale_by_d_model", "scale_factor = 1 / math.sqrt(C)",
      runs=("attn_weights = q @ k.transpose(-2, -1) * scale_factor",), style="train-llm-from-scratch before PR #3"),
    # --- Raschka's LLMs-from-scratch (dict configs) --------------------------------------------------------------------
    M("llms_from_scratch.py:tiny_gpt", "ok", construct="tiny_gpt",
      style="dict cfg, scale/shift LayerNorm, forward(in_idx) -> logits, loss outside the model"),
    M("llms_from_scratch.py:tiny_gpt_kv", "ok", construct="tiny_gpt_kv",
      style="use_cache, current_pos, reset_kv_cache; generate() through the cache"),
    M("llms_from_scratch.py:tiny_llama3", "ok", construct="tiny_llama3",
      style="Llama 3.2: RoPE cos/sin, GQA, RMSNorm, out_head.weight = tok_emb.weight"),
    M("llms_from_scratch.py:tiny_llama3_copy_tied", "tied_by_copy",
      "self.out_head.weight = assign(self.out_head.weight, self.tok_emb.weight)", construct="tiny_llama3_copy_tied",
      runs=("return torch.nn.Parameter(right.clone().detach()",), style="issue #822: a Parameter made of a copy",
      severity="warning"),
    # --- LLaMA family ----------------------------------------------------------------------------------------------------
    M("llama_meta.py:Transformer", "ok",
      style="ModelArgs, complex RoPE, cache_k/cache_v, forward(tokens, start_pos) under inference_mode"),
    M("llama_meta.py:TransformerFirstLogit", "generate_reads_first_position",
      "next_token = torch.argmax(logits[:, 0], dim=-1)", style="run-llama-locally before PR #1"),
    M("hkproj_llama.py:Transformer", "refused", refusal="Only one token at a time",
      style="forward(tokens, start_pos) asserts seq_len == 1: an inference-only model, nothing to compare in one call"),
    M("llama2c.py:Transformer", "ok",
      style="forward(tokens) returns only the last position's logits; the loss in self.last_loss"),
    M("lit_gpt.py:GPT", "ok", style="Config dataclass with padded_vocab_size (logits wider than the vocabulary)"),
    M("lit_gpt.py:GPTMaskFirstLayer", "causal_mask_missing_in_layer",
      "x = block(x, cos, sin, mask if i == 0 else None)", source="injected", style="the mask handed to block 0 only"),
    # --- Chinese course code ----------------------------------------------------------------------------------------------
    M("minimind_zh.py:MiniMindLM", "ok", style="中文注释, past_key_values, pos_cis[start_pos:], pad mask to every layer"),
    M("minimind_zh.py:MiniMindNoPadMask", "padding_mask_not_passed",
      "h, past_kv = layer(h, pos_cis, past_key_value=past_key_values[l], use_cache=use_cache)",
      style="minimind-v #76: attention_mask accepted, never handed on"),
    M("happy_llm_zh.py:Transformer", "ok",
      style="中文注释, returns an output object (.logits, .last_loss), per-token loss ignoring id 0, last position only"),
    M("tiny_llm_zh.py:TinyllmForCausalLM", "ok", style="中文注释, HF-style labels shifted inside, q/k/v bias"),
    M("tiny_llm_zh_ptm.py:TinyllmForCausalLM", "targets_shifted_twice", "Y = np.array(sample[1:]).astype(np.int64)",
      style="tiny-llm-zh #10: the dataset's Y = sample[1:], then the model's own shift"),
    # --- Hugging Face-style models -----------------------------------------------------------------------------------
    M("hf_gpt2.py:GPT2LMHeadModel", "ok", style="Conv1D, past_key_values, attention_mask, labels shifted inside"),
    M("hf_gpt2.py:GPT2LMHeadUnshifted", "targets_not_shifted",
      "return F.cross_entropy(lm_logits.view(-1, lm_logits.size(-1)), labels.view(-1), ignore_index=-1)",
      style="transformers PR #404: labels = input_ids, no shift"),
    M("hf_gpt2.py:GPT2PastFromHeads", "positions_restart_with_cache",
      "return 0 if past_key_values is None else past_key_values[0][0].shape[1]",
      style="gluon-nlp #1015: the cached length read from the heads axis"),
    M("hf_gpt2.py:GPT2CachePositions", "positions_restart_with_cache",
      "position_ids = torch.arange(hidden_states.shape[1], device=input_ids.device)",
      runs=("if hidden_states.shape[1] > 1:",), style="mlx-lm PR #93: positions from 0, none for one token"),
    M("hf_library.py:tiny_gpt2", "ok", construct="tiny_gpt2", style="transformers' own GPT2LMHeadModel, ModelOutput"),
    M("hf_library.py:tiny_llama", "ok", construct="tiny_llama", style="transformers' own LlamaForCausalLM (GQA, RoPE)"),
    M("hf_library.py:tiny_qwen2", "ok", construct="tiny_qwen2", style="transformers' own Qwen2ForCausalLM, tied"),
    M("xglm.py:XGLMForCausalLM", "ok", style="sinusoidal table with offset 2, pad-aware positions, embed_scale once"),
    M("xglm.py:XGLMPastIgnored", "positions_restart_with_cache",
      "return create_position_ids_from_input_ids(input_ids, self.padding_idx)\n", style="transformers PR #15751"),
    M("neox_like.py:GPTNeoXForCausalLM", "ok", style="parallel residual, partial rotary (25%), untied embed_out"),
    M("gemma_like.py:Gemma3ForCausalLM", "ok", style="the embedding module scales by sqrt(hidden) itself, (1 + w) RMSNorm"),
    M("gemma_like.py:Gemma3ScaledTwice", "embedding_scaled_twice", "return lang_emb * math.sqrt(lang_emb_dim)",
      style="OpenTau PR #179: Gemma 1's hand scaling on Gemma 3's scaled embedding"),
    # --- other designs ----------------------------------------------------------------------------------------------------
    M("nemo_decoder.py:NemoLM", "ok", style="pre-LN decoder with the final LayerNorm, (B, T) input_mask"),
    M("nemo_decoder.py:NemoLMNoFinalNorm", "final_norm_missing", "return self.log_softmax(hidden_states)",
      runs=("final_norm = False",), severity="warning", style="NeMo before PR #2197"),
    M("dalle_text.py:TextTransformer", "ok", style="lucidrains layout, GEGLU, pads (id 0) ignored in the loss"),
    M("dalle_text.py:TextTransformerPadLoss", "pads_in_loss", "return F.cross_entropy(logits.transpose(1, 2), labels)\n",
      style="DALLE-pytorch #57: ignore_index stored, never passed; forward(text, return_loss=True) -> loss"),
    M("annotated_decoder.py:DecoderOnlyLM", "ok",
      style="a_2/b_2 LayerNorm (unbiased std), sinusoidal PE, Embeddings * sqrt(d_model), log_softmax Generator"),
    M("annotated_decoder.py:DecoderOnlyNoPE", "positions_missing", "x = self.embed[0](tgt)", source="injected",
      style="the PositionalEncoding built, never called"),
    # --- gathered by gptdoc2 (each checked verbatim first, /tmp/gptdoc2-scratch) ------------------------------------------
    M("palm_lucidrains.py:tiny_palm", "ok", construct="tiny_palm",
      style="a function returning nn.Sequential(Embedding, *Residual(parallel block), LayerNorm, Linear); multi-query"),
    M("llmc_llama3.py:LLaMA", "ok",
      style="llm.c: config __init__(**kwargs), multiple_of=1024, complex freqs_cis on x.float(), float32 KV cache"),
    M("llmc_gpt2.py:GPT", "ok", style="llm.c: SDPA is_causal, return_logits flag, (B, 1, V) without targets"),
    M("makemore_gpt.py:Transformer", "ok", style="ModelConfig with None sizes, ignore_index=-1, mlpf closure"),
    M("rasbt_qwen3.py:tiny_qwen3", "ok", construct="tiny_qwen3",
      style="dict config with dtype: x.to(cfg['dtype']) before the head, QK-RMSNorm, explicit head_dim, GQA"),
    M("rasbt_qwen3.py:tiny_qwen3_moe", "ok", construct="tiny_qwen3_moe", style="the same with a top-2 MoE FFN"),
    M("rasbt_swa.py:tiny_swa", "ok", construct="tiny_swa",
      style="sliding-window mask from absolute positions, KV cache trimmed to the window, use_cache flag"),
    M("rasbt_swa.py:tiny_swa_trim_first", "error:lm_cache",
      "self.cache_k, self.cache_v = self.cache_k[:, -self.window:], self.cache_v[:, -self.window:]",
      construct="tiny_swa_trim_first", style="LLMs-from-scratch PR #1013: the cache trimmed before attention"),
    # --- gathered by falsealarm ---------------------------------------------------------------------------------------
    M("nanochat_like.py:GPT", "ok", style="nanochat: parameter-free QK RMS-norm, then q and k times a constant gain"),
    M("nanochat_like.py:GPTGainNoNorm", "error:scaling", "y = F.scaled_dot_product_attention(q, k,", source="injected",
      style="the same gains with the QK-norm removed: the scale is no longer a temperature of unit vectors"),
    M("palm_unnormed_qkv.py:tiny_palm_unnormed", "error:norm_placement", "q, k, v = self.project(x)", construct="tiny_palm_unnormed",
      style="PaLM-pytorch before 49232e1: q, k, v projected from x, the norm's output unused"),
    M("palm_unnormed_qkv.py:tiny_palm_normed", "ok", construct="tiny_palm_normed", style="the same, after the fix"),
    # --- gathered by fresh33 (models nobody had shown the doctor; each checked verbatim first, /tmp/fresh33-scratch) ----
    M("llama_src_zh/model.py:LlamaTransformer", "ok",
      style="中文课程 (base-nlp): a package src/ of five files importing each other relatively, forward(tokens, start_pos)"),
    M("falcon_alibi.py:FalconLM", "ok",
      style="Falcon: multi-query, parallel attention + MLP, ALiBi slopes multiplied in bfloat16, labels shifted inside"),
    M("hf_library.py:tiny_bloom", "ok", construct="tiny_bloom",
      style="transformers' own BloomForCausalLM: ALiBi; NaN in float64 only (finfo.min + bias), none in float32"),
    M("hf_library.py:tiny_mixtral", "ok", construct="tiny_mixtral",
      style="transformers' own MixtralForCausalLM: a router softmax over experts, grouped_mm with no float64 kernel"),
    M("minimind_flash_mask.py:MiniMindLM", "ok",
      style="中文注释, MiniMind2: SDPA only for an all-ones mask, the padded batch through (1 - mask) * -1e9"),
    M("minimind_flash_mask.py:MiniMindFlashMask", "error:lm_padding",
      'pads = (1.0 - attention_mask.unsqueeze(1).unsqueeze(2)) * float("-inf")',
      style="minimind before f5374dc: (1 - mask) * -inf, 0 * -inf = NaN in every row of a padded batch"),
]

# case id -> why a finding's line cannot be the bug's own line (the doctor may still be right about the bug)
LINE_GAPS: dict[str, str] = {
    "models.palm_unnormed_qkv.tiny_palm_unnormed": "the unused norm is found by perturbing its output (nothing "
    "changes downstream), which names the norm's module but no line of the file",
    "models.rasbt_swa.tiny_swa_trim_first": "the cache probe compares the logits of a prefill through the cache with "
    "a plain forward's and says which positions differ; it does not follow the cache to the line that trims it",
    "models.hf_gpt2.GPT2PastFromHeads": "positions_restart_with_cache is named, but the finding points at the arange "
    "that turns the past length into positions (line 149, shared with the correct model) rather than the line that "
    "reads the past length from the heads axis (a tuple index, no torch op to see)",
}
