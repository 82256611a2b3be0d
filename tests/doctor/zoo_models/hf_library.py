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
#   tiny_mixtral MixtralForCausalLM (a mixture of experts: a router's softmax over experts, then top-k, and the
#                experts' torch._grouped_mm, which has no float64 kernel; gathered by fresh39).
#   tiny_granitemoe GraniteMoeForCausalLM (use_cache only through **kwargs: the blocks' arguments must be taken
#                from a forward without the cache, as for the others; gathered by fresh39).
#   tiny_gpt_neox GPTNeoXForCausalLM (a parallel block, two norms, RoPE on the first quarter of each head).
#   tiny_gptj    GPTJForCausalLM (a parallel block reading one norm, interleaved RoPE on half of each head).
#   tiny_helium  HeliumForCausalLM (Llama-like, RoPE base 100,000: stated by its config, not a usual base).
#   tiny_arcee   ArceeForCausalLM (an up/down FFN with squared ReLU, transformers' ReLUSquaredActivation module).
#   tiny_gpt_neo GPTNeoForCausalLM (global and local layers; its attention does not divide the scores by sqrt(d_k),
#                as EleutherAI's Mesh TensorFlow original did not: the doctor names no_scaling, and no line, since the
#                code is the library's, not the learner's; gathered by fresh39).
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


def tiny_mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                           num_local_experts=4, num_experts_per_tok=2, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return _eager(MixtralForCausalLM, config)


def tiny_granitemoe():
    from transformers import GraniteMoeConfig, GraniteMoeForCausalLM

    config = GraniteMoeConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                              num_local_experts=4, num_experts_per_tok=2, attention_multiplier=8**-0.5,
                              pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return _eager(GraniteMoeForCausalLM, config)


def tiny_gpt_neox():
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, max_position_embeddings=16, rotary_pct=0.25,
                           bos_token_id=0, eos_token_id=0)
    return _eager(GPTNeoXForCausalLM, config)


def tiny_gptj():
    from transformers import GPTJConfig, GPTJForCausalLM

    config = GPTJConfig(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=16, rotary_dim=4,
                        bos_token_id=0, eos_token_id=0)
    return _eager(GPTJForCausalLM, config)


def tiny_helium():
    from transformers import HeliumConfig, HeliumForCausalLM

    config = HeliumConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=16,
                          pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return _eager(HeliumForCausalLM, config)


def tiny_arcee():
    from transformers import ArceeConfig, ArceeForCausalLM

    config = ArceeConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=16,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return _eager(ArceeForCausalLM, config)


def tiny_gpt_neo():
    from transformers import GPTNeoConfig, GPTNeoForCausalLM

    config = GPTNeoConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=16,
                          attention_types=[[["global", "local"], 1]], window_size=4, bos_token_id=0, eos_token_id=0)
    return _eager(GPTNeoForCausalLM, config)


def _eager(cls, config):
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return cls(config)
