"""The blocks inside a model, each replayed alone with what the model gave it: a cache object the model hands every
block (transformers' DynamicCache, created whenever ``use_cache`` is left at its default) is filled during the
forward, so the captured arguments are taken from a forward with ``use_cache=False``."""

from __future__ import annotations

from pathlib import Path

from anatomy.doctor import check

ZOO = Path(__file__).resolve().parents[1] / "zoo_models"


def test_transformers_layers_are_checked_alone():
    report = check(str(ZOO / "hf_library.py"), kind="lm", factory="tiny_llama")
    assert [row["status"] for row in report.layers] == ["checked", "checked"]
    assert report.errors == []
    assert report.found["positions"] == "inside the attention (rotary or relative)"


def test_a_layer_not_checked_is_said_under_its_own_name(monkeypatch):
    """Two alike blocks share one check; when it fails, each row names its own block (layer 1 said "h.0")."""
    from types import SimpleNamespace

    from torch import nn

    from anatomy.doctor import CheckError
    from anatomy.doctor.model import blocks

    def failing(target, **_kw):
        raise CheckError(f"{target.__name__}: it failed")

    extras = {0: ((), {})}
    monkeypatch.setattr(blocks, "layer_extras", lambda lm, stack: [extras, extras])
    lm = SimpleNamespace(sizes=SimpleNamespace(d_model=4, n_heads=1), seed=0, timeout=None)
    stack = blocks.Stack("h", [nn.Linear(4, 4), nn.Linear(4, 4)])
    assert blocks.diagnose_layers(lm, stack, failing) == ["h.0: it failed", "h.1: it failed"]
