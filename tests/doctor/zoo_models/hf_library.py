# Not re-typed: the real classes of the installed transformers library (huggingface/transformers, the version the
# project pins), built at tiny sizes from their configs with the eager attention, so that the doctor meets the
# models people load every day -- ModelOutput returns (.logits, .loss), labels shifted inside, attention_mask,
# past_key_values, tie_word_embeddings.
#   tiny_gpt2    GPT2LMHeadModel (learned positions, Conv1D, tied head).
#   tiny_llama   LlamaForCausalLM (RoPE, RMSNorm, SwiGLU, grouped-query attention, untied head).
#   tiny_qwen2   Qwen2ForCausalLM (q/k/v bias, RoPE, tied head).
#   tiny_bloom   BloomForCausalLM (ALiBi, no position table, fused query_key_value): in float64 its additive mask
#                (finfo(float64).min plus the ALiBi bias) overflows to -inf and a row of left pads turns NaN, which then
#                reaches the real tokens through the next layer; in float32 it does not (gathered by fresh33).
import torch


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)
    return _eager(GPT2LMHeadModel, config)


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16)
    return _eager(LlamaForCausalLM, config)


def tiny_qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                         tie_word_embeddings=True)
    return _eager(Qwen2ForCausalLM, config)


def tiny_bloom():
    from transformers import BloomConfig, BloomForCausalLM

    return _eager(BloomForCausalLM, BloomConfig(vocab_size=50, hidden_size=32, n_layer=2, n_head=4))


def _eager(cls, config):
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return cls(config)
