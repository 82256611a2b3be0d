"""The call contract completed on the first calls: lazy modules, keyword-only q/k/v, sequence-first inputs, a
failing mask=None, returns that are not weights, *args (anatomy/doctor/contract.py, subject.py)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from anatomy.doctor.contract.calls import detect_seq_first, first_call, is_lazy
from anatomy.doctor.loading.subject import CheckedModule, looks_like_weights

X = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


class Lazy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.LazyLinear(8)

    def forward(self, x):
        return self.lin(x)


class KeywordQKV(nn.Module):
    def forward(self, *, query, key, value, attn_mask=None):
        return query + 0 * key + 0 * value


class NeedsMask(nn.Module):
    def forward(self, x, mask=None):
        return x + 0.0 * mask.repeat(1, 1).float().sum()  # fails on None; any real mask will do


def test_a_lazy_module_is_materialised_by_the_first_call_and_said_so():
    m = Lazy().double()
    s = CheckedModule.inspect(m, "Lazy")
    assert is_lazy(m) == ["lin.weight", "lin.bias"]
    first_call(s, X)
    assert is_lazy(m) == [] and m.lin.weight.shape == (8, 8)
    assert "lazy parameter(s) (lin.weight, lin.bias)" in s.notes[0]["en"]


def test_keyword_only_query_key_value():
    s = CheckedModule.inspect(KeywordQKV(), "KeywordQKV")
    assert s.qkv_kw == ("query", "key", "value") and s.mask_kw == "attn_mask"
    assert s.call == "forward(query=x, key=x, value=x, attn_mask=mask)"
    assert torch.equal(s.run(X)[0], X)


def test_a_failing_mask_none_is_replaced_by_an_all_visible_mask():
    s = CheckedModule.inspect(NeedsMask(), "NeedsMask")
    first_call(s, X)
    assert s.no_mask is not None and s.fields["no_mask_format"] == {"sense": "bool_keep", "layout": "(B, S)"}
    assert s.mask_required  # from now on every call passes a mask
    assert torch.equal(s.run(X)[0], X) and "mask=None raised AttributeError" in s.notes[0]["en"]


def test_sequence_first_is_detected_and_batch_first_is_not():
    seq = nn.MultiheadAttention(8, 2).double().eval()
    batch = nn.MultiheadAttention(8, 2, batch_first=True).double().eval()
    for m, want in ((seq, True), (batch, False)):
        s = CheckedModule.inspect(m, "mha")
        s.qkv = True  # forward(query, key, value)
        base, _ = s.run(X)
        assert detect_seq_first(s, X, base, 1e-9) is want and s.seq_first is want
    assert tuple(s.run(X)[0].shape) == (2, 6, 8)


def test_weights_are_only_what_can_be_weights():
    w = torch.softmax(torch.randn(2, 3, 6, 6), -1)
    assert looks_like_weights(w, 2, 6) and looks_like_weights(w.mean(1), 2, 6)
    assert not looks_like_weights(torch.randn(2, 2, 3, 6, 4), 2, 6)  # a stacked k/v cache
    assert not looks_like_weights(torch.randn(2, 8), 2, 6)  # a state
    assert not looks_like_weights(torch.randn(2, 3, 6, 6), 2, 6)  # negative values: not a softmax


def test_varargs_is_only_tentatively_a_mask():
    class VarArgs(nn.Module):
        def forward(self, x, *args):
            return x

    s = CheckedModule.inspect(VarArgs(), "VarArgs")
    assert s.takes_mask and s.mask_tentative and s.call == "forward(x, *args)"


# --- issue 20 cause 2: roles and mask senses found by behaviour ------------------------------------------------

REAL = Path(__file__).parent / "zoo" / "real"


def test_qkv_roles_are_found_whatever_the_names():
    from anatomy.doctor import check

    aladdin = check(str(REAL / "signatures.py:AladdinSelfAttention"))  # forward(values, keys, query, mask)
    assert aladdin.found["call"] == "forward(x, x, x, mask)"
    assert aladdin.found["qkv_roles"] == ["key/value", "key/value", "query"]
    capital = check(str(REAL / "signatures.py:CapitalQKV"))  # forward(Q, K, V, attn_mask=None)
    assert capital.found["qkv_roles"] == ["query", "key/value", "key/value"] and capital.errors == []


def test_a_required_mask_whose_true_means_padding_gets_the_right_all_visible_mask():
    from anatomy.doctor import check

    report = check(str(REAL / "signatures.py:RequiredPadTrue"))  # forward(x, pad), True = padding, never None
    assert report.errors == [] and report.diagnosis["status"] == "matches", report.render()
    assert report.found["mask"]["sense"] == "bool_ignore"
    assert any("(bool_ignore, (B, S))" in n["en"] for n in report.found["call_notes"])
