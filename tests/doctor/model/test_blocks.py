"""The blocks inside a model, each replayed alone with what the model gave it: a cache object the model hands every
block (transformers' DynamicCache, created whenever ``use_cache`` is left at its default) is filled during the
forward, so the captured arguments are taken from a forward with ``use_cache=False``."""

from __future__ import annotations

from pathlib import Path

import pytest

from anatomy.doctor import check

ZOO = Path(__file__).resolve().parents[1] / "zoo_models"


def test_transformers_layers_are_checked_alone():
    report = check(str(ZOO / "hf_library.py"), kind="lm", factory="tiny_llama")
    assert [row["status"] for row in report.layers] == ["checked", "checked"]
    assert report.errors == []
    assert report.found["positions"] == "inside the attention (rotary or relative)"


def test_a_mixture_of_experts_layer_is_checked_alone():
    """Mixtral's experts run torch._grouped_mm, which has no float64 kernel (run in float32, a float island), and its
    router's softmax over the experts is not a second attention sub-layer."""
    report = check(str(ZOO / "hf_library.py"), kind="lm", factory="tiny_mixtral")
    assert [row["status"] for row in report.layers] == ["checked", "checked"]
    assert report.errors == [] and report.exit_code() == 0
    assert not [f for f in report.findings if f.probe == "block_design"]


def test_a_model_taking_use_cache_through_kwargs_has_its_layers_checked():
    """GraniteMoe's forward takes ``use_cache`` in ``**kwargs``: still captured without the cache (a block replayed
    with the filled cache would attend over its own keys twice)."""
    report = check(str(ZOO / "hf_library.py"), kind="lm", factory="tiny_granitemoe")
    assert [row["status"] for row in report.layers] == ["checked", "checked"]
    assert report.errors == []


@pytest.mark.parametrize(
    ("factory", "positional"),
    [
        ("tiny_gpt_neox", "on the first Dh/4 dims of each head"),  # parallel, two norms, partial rotary
        ("tiny_gptj", "on the first Dh/2 dims of each head"),  # parallel, one norm read once, interleaved
        ("tiny_helium", "base 100,000 (your module's)"),  # a base its config states
        ("tiny_arcee", "RoPE, half layout"),  # squared ReLU, below
    ],
)
def test_published_designs_match_the_reference_that_carries_them(factory, positional):
    """Designs of published models, not faults: matched, not "unexplained" (and never shared_layernorm)."""
    report = check(str(ZOO / "hf_library.py"), kind="lm", factory=factory)
    assert report.errors == [] and report.warnings == []
    assert report.diagnosis["status"] == "matches"
    rows = [r for r in report.layers if r["status"] == "checked"]
    assert len(rows) == 2 and all(r["diagnosis"] == "matches" for r in rows)
    assert all(positional in r["variant"]["positional"] for r in rows)
    if factory in ("tiny_gpt_neox", "tiny_gptj"):
        assert all(r["variant"]["placement"] == "parallel" for r in rows)
    if factory == "tiny_arcee":
        assert all(r["variant"]["activation"] == "relu2" for r in rows)


def test_a_library_model_is_diagnosed_without_a_line_of_ours():
    """GPT-Neo does not scale its scores: the fault is named, and no line is given (the code is transformers', not
    the learner's), never the doctor's own call of the forward nor the ``anatomy`` script that called the doctor."""
    import anatomy

    report = check(str(ZOO / "hf_library.py"), kind="lm", factory="tiny_gpt_neo")
    assert "no_scaling" in report.faults
    ours = str(Path(anatomy.__file__).parent)
    files = [w.get("file") or "" for f in report.findings for w in f.where]
    assert not [f for f in files if f.startswith(ours)]
    assert not [w for f in report.findings for w in f.where if w.get("line")]


BOUND = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ff = nn.Linear(d, d)
        self.inside = False

    def forward(self, x):
        assert self.inside, "only the model calls me"
        return x + self.ff(x)


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, block_size):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(Block(d_model) for _ in range(n_layers))
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, ids):
        x = self.emb(ids)
        for b in self.blocks:
            b.inside = True
            x = b(x)
            b.inside = False
        return self.head(x)
"""


def test_blocks_that_cannot_run_alone_are_said_in_the_short_answer(tmp_path):
    """A PASS that covers the model as a whole only says so on its first line: the doctor can't tell about blocks
    it could not run alone."""
    from anatomy.doctor.report.short import short_answer

    path = tmp_path / "bound_gpt.py"
    path.write_text(BOUND)
    report = check(f"{path}:GPT", kind="lm")
    assert report.diagnosis["status"] == "unchecked" and report.diagnosis["checked"] == 0
    assert "only the model calls me" in report.diagnosis["reason"]
    first = " ".join(short_answer(report, width=400)[:1])
    assert "can't tell" in first and "3 blocks could not be run alone" in first
    zh = " ".join(short_answer(report, lang="zh", width=400)[:1])
    assert "无法单独运行" in zh


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


def test_blocks_that_differ_only_in_a_plain_attribute_are_checked_apart():
    """A window set on some layers only is not in ``repr``: those layers are not twins of the global ones. A layer
    number (``layer_idx``) is not a difference, nor does a flag read as one."""
    from torch import nn

    from anatomy.doctor.model.blocks import layer_settings

    class Block(nn.Module):
        def __init__(self, i: int, window: int | None, sliding: bool):
            super().__init__()
            self.proj = nn.Linear(4, 4)
            self.layer_idx, self.window, self.is_sliding = i, window, sliding

    blocks = [Block(0, 4, True), Block(1, 4, True), Block(2, None, False)]
    settings = layer_settings(blocks)
    assert settings[0] == settings[1] != settings[2]
    assert all(("", "layer_idx") not in s for s in settings) and ("", "window") in settings[0]
    two = layer_settings([Block(0, None, False), Block(1, None, True)])
    assert two[0] != two[1]  # the flag stays a setting though its values read as 0, 1


def test_a_sliding_window_model_checks_its_global_layer_apart(monkeypatch):
    from anatomy.doctor import check as doctor_check
    from anatomy.doctor.model import blocks
    from anatomy.doctor.model import check as model_check

    checked: list[str] = []
    original = blocks.diagnose_layers

    def counting(lm, stack, check, unmasked=frozenset()):
        def recording(factory, **kw):
            checked.append(factory.__name__)
            return check(factory, **kw)

        return original(lm, stack, recording, unmasked)

    monkeypatch.setattr(model_check, "diagnose_layers", counting)
    zoo = Path(__file__).parents[1] / "zoo_models" / "rasbt_swa.py"
    report = doctor_check(f"{zoo}:tiny_swa", factory="tiny_swa")
    assert report.counts() == (0, 0), report.render()
    assert len(checked) == 2  # layer 0 (window 4; layer 1 its twin) and layer 2 (global)
