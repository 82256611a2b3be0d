"""Every mask form a module accepts is probed for leaks (``contract/masks.py:leaking_forms``): a module whose
``(B, S)`` path masks the queries is caught even though its ``(B, 1, 1, S)`` path is right, and a module right in
every form it takes gets no error."""

from __future__ import annotations

import math

from torch import nn

from anatomy.doctor import check


class _Heads(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d_model, d_model) for _ in range(4))

    def scores(self, x):
        b, t, d = x.shape
        q, k, v = (f(x).view(b, t, self.h, -1).transpose(1, 2) for f in (self.wq, self.wk, self.wv))
        return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), v

    def out(self, s, v):
        b, _, t, _ = v.shape
        return self.wo((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1))


class KeysWhenFourD(_Heads):
    """(B, 1, 1, S) used as given; a (B, S) mask widened on the query axis."""

    def forward(self, x, mask=None):
        s, v = self.scores(x)
        if mask is not None:
            if mask.dim() == 2:
                mask = mask.unsqueeze(1).unsqueeze(-1)  # (B, 1, S, 1): the queries
            s = s.masked_fill(mask == 0, -1e9)
        return self.out(s, v)


class KeysEveryForm(_Heads):
    """The same module with the (B, S) path right."""

    def forward(self, x, mask=None):
        s, v = self.scores(x)
        if mask is not None:
            if mask.dim() == 2:
                mask = mask[:, None, None, :]
            s = s.masked_fill(mask == 0, -1e9)
        return self.out(s, v)


class AdditiveEveryForm(_Heads):
    """An additive mask in (B, S) or (B, 1, 1, S): 0/1 keep masks are accepted too (adding 1 everywhere changes
    nothing) and leak, which is the sense, not the form: never blamed."""

    def forward(self, x, mask=None):
        s, v = self.scores(x)
        if mask is not None:
            s = s + (mask[:, None, None, :] if mask.dim() == 2 else mask)
        return self.out(s, v)


def test_a_leaking_form_behind_a_right_one_is_named():
    report = check(KeysWhenFourD)
    assert report.found["mask"]["layout"] == "(B, 1, 1, S)"  # the probes use the right form
    assert [f["layout"] for f in report.found["mask"]["leaking_forms"]] == ["(B, S)"]
    form = [f for f in report.errors if f.evidence.get("form")]
    assert len(form) == 1 and form[0].fault == "padding_mask_on_queries" and form[0].evidence["masks_queries"]
    assert "(B, S)" in form[0].en and "(B, S)" in form[0].zh
    assert report.exit_code() == 1
    assert any(w.get("line") for w in form[0].where)  # pointed at the learner's masking line


def test_right_in_every_form_gets_no_error():
    for cls in (KeysEveryForm, AdditiveEveryForm):
        report = check(cls)
        assert report.errors == [], report.render()
        assert "leaking_forms" not in report.found["mask"]
