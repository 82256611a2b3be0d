"""Flat views (``anatomy.generation.flat``): a module's own code without ``nn.Module``'s call machinery."""

from __future__ import annotations

import torch
from torch import nn

from anatomy import ModelConfig, build_model
from anatomy.components.block import TransformerBlock
from anatomy.components.embedding import TokenEmbedding
from anatomy.generation.flat import FlatView, flat


def _model():
    torch.manual_seed(0)
    return build_model(
        ModelConfig.from_preset(
            "llama", vocab_size=40, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, d_ff=32, max_seq_len=32
        )
    ).eval()


def test_a_view_gives_the_modules_floats_and_stands_for_its_class():
    model = _model()
    view = flat(model)
    ids = torch.randint(0, 40, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(view(ids).logits, model(ids).logits)
    block = view.stack.blocks[1]
    assert isinstance(block, TransformerBlock) and isinstance(block, FlatView)
    assert not isinstance(block, nn.Linear)
    assert len(view.stack.blocks) == 2 and [type(b) for b in view.stack.blocks] == [type(block)] * 2
    assert block.attn.n_heads == 4 and block.attn.hook_q(ids) is ids  # plain attributes; hook points: identity
    assert view.lm_head.weight is model.lm_head.weight  # the same tensors, not copies


def test_super_calls_and_parameters_in_place_are_seen():
    model = _model()
    view = flat(model)
    emb = view.embeddings.embed_tokens
    assert isinstance(emb, TokenEmbedding)  # its forward calls nn.Embedding's through super()
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.equal(emb(ids), model.embeddings.embed_tokens(ids))
        model.lm_head.weight.mul_(2.0)  # training or load_state_dict in place: the view reads the same tensor
        assert torch.equal(view(ids).logits, model(ids).logits)


def test_an_empty_container_is_false_like_the_module():
    assert not flat(nn.ModuleList()) and bool(flat(nn.ModuleList([nn.Linear(2, 2)])))
    norm = flat(nn.LayerNorm(4))  # a module that is no container: true, as the module is
    assert bool(norm) and not hasattr(type(norm), "__len__")
    module = nn.Linear(2, 3)
    linear = flat(module)  # a plain Linear: its op with the weights bound, and their attributes kept
    x = torch.randn(5, 2)
    assert (linear.in_features, linear.out_features) == (2, 3) and linear.weight is module.weight
    assert torch.equal(linear(x), module(x))
