"""``anatomy.experiments.probes``: measurements on a model."""

from __future__ import annotations

import torch

from anatomy import ModelConfig, build_model
from anatomy.experiments.probes import hook_output
from anatomy.inspection import capture


def _lm():
    torch.manual_seed(0)
    return build_model(ModelConfig(vocab_size=11, d_model=8, n_heads=2, n_layers=2, max_seq_len=6)).eval()


def test_hook_output_is_the_hook_points_tensor_of_one_forward_without_gradients():
    model, ids = _lm(), torch.tensor([[1, 2, 3, 4, 5]])
    got = hook_output(model, "stack.blocks.1.attn.hook_scores", input_ids=ids)
    with capture(model, "stack.blocks.1.attn.hook_scores") as cache:
        model(input_ids=ids)
    want = cache["stack.blocks.1.attn.hook_scores"]
    assert got.shape == (1, 2, 5, 5) and torch.equal(got, want) and not got.requires_grad


def test_hook_output_leaves_the_mode_to_the_caller():
    model = _lm().train()
    hook_output(model, "stack.blocks.0.hook_resid_post", input_ids=torch.tensor([[1, 2]]))
    assert model.training
