"""Norms found by behaviour: any names for gain and bias, eps read or fitted, the unbiased-std variant."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from anatomy.doctor.loading.building import randomize
from anatomy.doctor.mapping.norm_fit import StdNorm, find_norms, fit_norm


class Hand(nn.Module):
    def __init__(self, d, eps, unbiased=False):
        super().__init__()
        self.gamma, self.beta = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))
        self.eps, self.unbiased = eps, unbiased

    def forward(self, x):
        c = x - x.mean(-1, keepdim=True)
        if self.unbiased:
            return self.gamma * c / (x.std(-1, keepdim=True) + self.eps) + self.beta
        return self.gamma * c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + self.eps) + self.beta


class Wrapper(nn.Module):  # returns its child's output: the child is the norm
    def __init__(self, d):
        super().__init__()
        self.inner = nn.LayerNorm(d, eps=1e-6)

    def forward(self, x):
        return self.inner(x)


class Net(nn.Module):
    def __init__(self, d, norm):
        super().__init__()
        self.lin, self.norm, self.out = nn.Linear(d, d), norm, nn.Linear(d, d)

    def forward(self, x):
        return self.out(self.norm(self.lin(x)))


def found(norm, d=8):
    net = Net(d, norm).double().eval()
    randomize(net, d, 0)
    x = torch.randn(2, 5, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        return find_norms(net, lambda: net(x), d)


@pytest.mark.parametrize("eps", [1e-12, 1e-6, 3e-7, 2.5e-4])
def test_a_hand_written_layernorm_is_found_with_its_eps_and_its_parameters_by_value(eps):
    info = found(Hand(8, eps))["norm"]
    assert (info.kind, info.form, info.weight, info.bias) == ("layernorm", "layernorm", "norm.gamma", "norm.beta")
    assert info.eps == pytest.approx(eps, rel=1e-3) or eps < 1e-10  # eps far below var is not identifiable
    assert set(found(Hand(8, eps))) == {"norm"}  # the Linears are not norms


def test_the_unbiased_std_form_and_rmsnorm_and_a_wrapper():
    info = found(Hand(8, 1e-6, unbiased=True))["norm"]
    assert info.form == "unbiased_std" and info.eps == pytest.approx(1e-6)
    rms = found(nn.RMSNorm(8, eps=1e-5))["norm"]
    assert (rms.kind, rms.bias, rms.weight) == ("rmsnorm", None, "norm.weight")
    assert set(found(Wrapper(8))) == {"norm.inner"}


def test_std_norm_is_the_annotated_form_and_not_a_plain_layernorm():
    x = torch.randn(6, 8, dtype=torch.float64)
    ln = nn.LayerNorm(8, eps=1e-6).double()
    with torch.no_grad():
        y = StdNorm(8, 1e-6).double()(x)
        assert fit_norm(x, y)[0] == "unbiased_std"
        assert float((y - ln(x)).abs().max()) > 1e-3  # the two forms differ by sqrt(n / (n - 1))
