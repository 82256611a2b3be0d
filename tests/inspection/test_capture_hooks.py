"""capture() and attention_weights() leave the model exactly as they found it: no hooks, no stored tensors."""

from __future__ import annotations

import pytest
import torch

import anatomy
from anatomy.inspection import attention_weights, capture, hook_names


def _model(**overrides):
    torch.manual_seed(0)
    return anatomy.build_model(anatomy.ModelConfig.from_preset("seed-block", **overrides)).eval()


def _hooks(model) -> int:
    return sum(
        len(m._forward_hooks)
        + len(m._forward_pre_hooks)
        + len(m._forward_hooks_with_kwargs)
        + len(m._forward_pre_hooks_with_kwargs)
        for m in model.modules()
    )


def _attributes(model) -> dict[str, set[str]]:
    return {name: set(vars(m)) | set(m._buffers) | set(m._parameters) for name, m in model.named_modules()}


def _ids():
    return torch.randint(1, 100, (2, 10), generator=torch.Generator().manual_seed(1))


def test_capture_records_and_removes_its_hooks():
    model = _model()
    before = _attributes(model)
    with capture(model, names="*.hook_weights") as cache:
        assert _hooks(model) == 1
        model(_ids())
    assert _hooks(model) == 0
    assert cache["stack.blocks.0.attn.hook_weights"].shape == (2, 4, 10, 10)
    assert _attributes(model) == before  # nothing stored on any module


def test_capture_removes_hooks_when_the_forward_raises():
    model = _model(n_layers=2)

    def boom(*_):
        raise RuntimeError("boom in the FFN")

    with pytest.raises(RuntimeError, match="boom"):
        with capture(model) as cache:  # every hook point
            handle = model.stack.blocks[1].ffn.register_forward_pre_hook(boom)
            try:
                model(_ids())
            finally:
                handle.remove()
    assert "stack.blocks.0.attn.hook_q" in cache  # hooks fired before the error...
    assert _hooks(model) == 0  # ...and none is left behind
    with capture(model, names="*.hook_out"):
        model(_ids())  # the model still runs normally afterwards
    assert _hooks(model) == 0


def test_capture_rejects_unknown_names_before_hooking():
    model = _model()
    with pytest.raises(ValueError, match="match no hook point"):
        with capture(model, names=["blocks.9.attn.hook_q"]):
            pass
    assert _hooks(model) == 0
    assert "stack.blocks.0.attn.hook_weights" in hook_names(model)


def test_attention_weights_removes_hooks_also_on_error():
    model = _model(n_layers=2)
    before = _attributes(model)

    def boom(*_):
        raise RuntimeError("boom in layer 1")

    with pytest.raises(RuntimeError, match="boom"):
        with attention_weights(model) as maps:
            handle = model.stack.blocks[1].attn.o_proj.register_forward_pre_hook(boom)
            try:
                model(_ids())
            finally:
                handle.remove()
    assert set(maps) == {0} and _hooks(model) == 0  # layer 0 finished, layer 1 raised; no hook left
    with pytest.raises(ValueError, match="attention_mask"):
        with attention_weights(model):
            model(_ids(), attention_mask=torch.ones(2, 3, dtype=torch.long))  # wrong shape: raises early
    assert _hooks(model) == 0
    with attention_weights(model, layers=[1], heads=[0]) as maps:
        model(_ids())
    assert _hooks(model) == 0 and set(maps) == {1}
    assert _attributes(model) == before
