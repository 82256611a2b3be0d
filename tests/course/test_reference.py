"""In an exercise the spec is fixed, so its reference is the truth: a solution passes, and the same solution with its
output moved by a small amount (far below what a plot would show, far above the precision it computes in) never
does, in every exercise, the tiny LM's included."""

from __future__ import annotations

import pytest
import torch

from anatomy.course import grade
from anatomy.course.solutions import add_norm, attention, block, gpt, heads, layernorm, masks, mha, sinusoidal

DELTA = 1e-5  # float64 code agrees with the reference to ~1e-13; every tolerance is below 1e-6


def _nudge(t):
    return t + DELTA if isinstance(t, torch.Tensor) and t.is_floating_point() else t


def _flip_last(t):
    t = t.clone()
    t.view(-1)[-1] = ~t.view(-1)[-1]
    return t


class NudgedLayerNorm(layernorm.LayerNorm):
    def forward(self, x):
        return _nudge(super().forward(x))


class NudgedPostNorm(add_norm.PostNorm):
    def forward(self, x):
        return _nudge(super().forward(x))


class NudgedMHA(mha.MultiHeadAttention):
    def forward(self, x, mask=None):
        out, weights = super().forward(x, mask)
        return _nudge(out), weights


class NudgedWeightsMHA(mha.MultiHeadAttention):
    def forward(self, x, mask=None):
        out, weights = super().forward(x, mask)
        return out, _nudge(weights)


class NudgedBlock(block.TransformerBlock):
    def forward(self, x, mask=None):
        out = super().forward(x, mask)
        return _nudge(out[0] if isinstance(out, tuple) else out)


class NudgedGPT(gpt.GPT):
    def forward(self, ids, targets=None):
        logits, loss = super().forward(ids, targets)
        return _nudge(logits), loss


class NudgedLossGPT(gpt.GPT):
    def forward(self, ids, targets=None):
        logits, loss = super().forward(ids, targets)
        return logits, _nudge(loss)


class NudgedWhenPaddedGPT(gpt.GPT):
    def forward(self, ids, targets=None):
        logits, loss = super().forward(ids, targets)
        padded = bool((ids == gpt.PAD).any())
        return (_nudge(logits), loss) if padded else (logits, loss)


class NudgedPaddedLossGPT(gpt.GPT):
    def forward(self, ids, targets=None):
        logits, loss = super().forward(ids, targets)
        return logits, _nudge(loss) if bool((ids == gpt.PAD).any()) else loss


class NudgedInTrainingGPT(gpt.GPT):
    def forward(self, ids, targets=None):
        logits, loss = super().forward(ids, targets)
        return (_nudge(logits) if self.training else logits), loss


class NudgedWithTargetsGPT(gpt.GPT):
    def forward(self, ids, targets=None):
        logits, loss = super().forward(ids, targets)
        return (logits if targets is None else _nudge(logits)), loss


def _attention_out(q, k, v, mask=None):
    out, w = attention.attention(q, k, v, mask)
    return _nudge(out), w


def _attention_weights(q, k, v, mask=None):
    out, w = attention.attention(q, k, v, mask)
    return out, _nudge(w)


def _split(x, n_heads):
    return _nudge(heads.split_heads(x, n_heads))


def _merge(x):
    return _nudge(heads.merge_heads(x))


def _padding(lengths, max_len):
    return _flip_last(masks.padding_mask(lengths, max_len))


def _causal(t):
    return _flip_last(masks.causal_mask(t))


def _table(max_len, d_model):
    return _nudge(sinusoidal.sinusoidal_encoding(max_len, d_model))


RIGHT = {
    "attention": attention.attention,
    "heads": (heads.split_heads, heads.merge_heads),
    "masks": (masks.padding_mask, masks.causal_mask),
    "sinusoidal": sinusoidal.sinusoidal_encoding,
    "layernorm": layernorm.LayerNorm,
    "add_norm": (add_norm.PostNorm, add_norm.PreNorm),
    "mha": mha.MultiHeadAttention,
    "block": block.TransformerBlock,
    "gpt": {"GPT": gpt.GPT, "TransformerBlock": block.TransformerBlock},
}
NUDGED = [
    ("attention", _attention_out),
    ("attention", _attention_weights),
    ("heads", (_split, heads.merge_heads)),
    ("heads", (heads.split_heads, _merge)),
    ("masks", (_padding, masks.causal_mask)),
    ("masks", (masks.padding_mask, _causal)),
    ("sinusoidal", _table),
    ("layernorm", NudgedLayerNorm),
    ("add_norm", (NudgedPostNorm, add_norm.PreNorm)),
    ("mha", NudgedMHA),
    ("mha", NudgedWeightsMHA),
    ("block", NudgedBlock),
    *[
        ("gpt", {"GPT": cls, "TransformerBlock": block.TransformerBlock})
        for cls in (
            NudgedGPT,
            NudgedLossGPT,
            NudgedWhenPaddedGPT,
            NudgedPaddedLossGPT,
            NudgedInTrainingGPT,
            NudgedWithTargetsGPT,
        )
    ],
]
OPTIONS = {"gpt": {"steps": 8}}  # its training from the same weights: a nudge is caught before it


@pytest.mark.parametrize("exercise", sorted(RIGHT))
def test_the_solution_passes(exercise):
    r = grade(exercise, RIGHT[exercise], **OPTIONS.get(exercise, {}))
    assert r.ok, str(r)


@pytest.mark.parametrize("exercise, obj", NUDGED, ids=[f"{e}-{i}" for i, (e, _) in enumerate(NUDGED)])
def test_an_output_that_differs_from_the_reference_never_passes(exercise, obj):
    r = grade(exercise, obj, lang="en", **OPTIONS.get(exercise, {}))
    assert not r.ok, str(r)
    assert r.pitfall and r.line, str(r)  # what differs, named or said, and the learner's line
    assert f"line {r.line}" in str(r)


def test_the_tiny_lm_grades_its_block_against_the_reference_first():
    r = grade("tiny_lm", NudgedBlock, steps=4)
    assert not r.ok and r.line, str(r)
