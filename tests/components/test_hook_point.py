"""Hook points: identity when nothing is attached, cheap to reach (mirrored into their parent's ``__dict__`` by
``build_model``), and still the place every hook fires."""

from __future__ import annotations

import torch

from anatomy import ModelConfig, build_model
from anatomy.components.hook_point import HookPoint, mirror_hook_points

SMALL = dict(
    vocab_size=40, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=16, dropout=0.0, attention_dropout=0.0
)


def test_build_model_mirrors_every_hook_point_and_only_hook_points():
    model = build_model(ModelConfig.from_preset("gpt2", **SMALL))
    mirrored = 0
    for module in model.modules():
        for name, child in module._modules.items():
            if isinstance(child, HookPoint):
                assert vars(module)[name] is child
                mirrored += 1
            else:
                assert name not in vars(module), name  # other submodules stay behind nn.Module's own lookup
    assert mirrored >= 2 * 15


def test_a_hook_point_replaced_by_assignment_is_the_one_called():
    model = build_model(ModelConfig.from_preset("gpt2", **SMALL)).eval()
    ids = torch.randint(0, 40, (2, 5))
    calls = []

    class Counting(torch.nn.Module):
        def forward(self, x):
            calls.append(x.shape)
            return x

    block = model.stack.blocks[1]
    block.hook_resid_mid = Counting()
    assert "hook_resid_mid" not in vars(block)  # nn.Module.__setattr__ dropped the mirror
    with torch.no_grad():
        model(ids)
    assert calls == [(2, 5, 32)]


def test_hooks_on_mirrored_points_fire_and_edit():
    model = build_model(ModelConfig.from_preset("gpt2", **SMALL)).eval()
    ids = torch.randint(0, 40, (2, 5))
    with torch.no_grad():
        clean = model(ids).logits
        handle = model.stack.blocks[0].attn.hook_z.register_forward_hook(lambda m, a, out: out * 0)
        zeroed = model(ids).logits
        handle.remove()
        again = model(ids).logits
    assert not torch.allclose(clean, zeroed)
    assert torch.equal(clean, again)


def test_mirroring_twice_or_on_a_bare_component_changes_nothing():
    hp = HookPoint()
    x = torch.randn(3)
    mirror_hook_points(hp)
    assert hp(x) is x
    model = build_model(ModelConfig.from_preset("llama", **SMALL, n_kv_heads=2))
    ids = torch.randint(0, 40, (1, 4))
    with torch.no_grad():
        before = model(ids).logits
        mirror_hook_points(model)
        assert torch.equal(model(ids).logits, before)


def test_dropout_is_skipped_only_where_it_is_the_identity():
    config = ModelConfig.from_preset("gpt2", **{**SMALL, "dropout": 0.5})
    model = build_model(config)
    ids = torch.randint(0, 40, (2, 8))
    torch.manual_seed(0)
    a = model(ids).logits
    torch.manual_seed(1)
    b = model(ids).logits
    assert not torch.allclose(a, b)  # training with p > 0: dropout still draws
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, model(ids).logits)


def test_hook_points_are_declared_one_per_line_with_their_shape():
    """grep finds every hook point: one assignment per line, its shape beside it, no loop of names."""
    import inspect
    import re

    from anatomy.components import attention, block

    for module in (attention, block):
        source = inspect.getsource(module)
        assert 'setattr(self, f"hook_' not in source
        lines = [ln for ln in source.splitlines() if "HookPoint()" in ln and "self.hook_" in ln]
        assert len(lines) >= 8
        for line in lines:
            assert re.search(r"self\.hook_\w+ = HookPoint\(\)  # \(B, [A-Za-z·, ]+\)", line), line
