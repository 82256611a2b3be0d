"""The pair the TransformerLens surface tests compare: our model and TransformerLens 4.3's bridge on the same weights
and the same tokenizer (a tiny word-level one built here, saved beside the weights; nothing downloaded)."""

from __future__ import annotations

import pytest
import torch

import anatomy

WORDS = ["<pad>", "<s>", "</s>", "<unk>", "the", "cat", "sat", "on", "mat", *(f"w{i}" for i in range(23))]
ATOL = 1e-5


@pytest.fixture(scope="module")
def tl_pair(tmp_path_factory):
    """``(ours, bridge, ids)``: a random GPT-2 saved with its tokenizer, loaded by us and wrapped by TransformerLens."""
    transformers = pytest.importorskip("transformers", reason="waits for transformers (pip install transformers)")
    pytest.importorskip("transformer_lens", reason="waits for transformer-lens (pip install transformer-lens)")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=len(WORDS),
        n_positions=32,
        n_embd=16,
        n_layer=2,
        n_head=4,
        attn_implementation="eager",
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    d = tmp_path_factory.mktemp("gpt2_with_tokenizer")
    hf.save_pretrained(d)
    fast.save_pretrained(d)
    ours = anatomy.load_pretrained(d)
    bridge = build_bridge_from_module(
        hf, "GPT2LMHeadModel", hf_config=cfg, tokenizer=transformers.AutoTokenizer.from_pretrained(d)
    )
    bridge.enable_compatibility_mode(no_processing=True, disable_warnings=True)
    ids = torch.randint(3, len(WORDS), (2, 7), generator=torch.Generator().manual_seed(1))
    ours.hf_dir = d  # for the test that gives a live model transformers' own tokenizer
    return ours, bridge, ids
