"""The block references' positional schemes (anatomy/doctor/diagnosis/references.py): the RoPE bases a module
states and the partial rotary schemes (the parallel placement: tests/doctor/model/test_blocks.py)."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from anatomy.doctor.diagnosis.references import ROPE_BASES, References, stated_rope_bases


def _rope_table(base: float, r: int) -> torch.Tensor:
    return 1.0 / base ** (torch.arange(0, r, 2, dtype=torch.float32) / r)


def test_a_base_is_read_from_an_inv_freq_buffer_in_float32():
    m = nn.Module()
    m.rotary = nn.Module()
    m.rotary.register_buffer("inv_freq", _rope_table(100000.0, 8))
    assert stated_rope_bases(m) == [100000]


def test_a_base_is_read_from_a_config_or_an_attribute_and_the_usual_ones_are_left_out():
    m = nn.Linear(2, 2)
    m.config = SimpleNamespace(rope_parameters={"rope_theta": 2_000_000.0, "rope_type": "default"})
    assert stated_rope_bases(m) == [2000000]
    m.config = SimpleNamespace(rope_theta=float(ROPE_BASES[1]))
    assert stated_rope_bases(m) == []
    m.rope_theta = 25000  # Persimmon's
    m.base = True  # a flag, not a number
    assert stated_rope_bases(m) == [25000]


def test_stated_bases_are_tried_and_named():
    refs = References("attention", 32, 4, None, {}, positional=True)
    refs.state_bases([100000])
    schemes = [v[-1] for v in refs.variants() if v]
    assert "rope-half@100000" in schemes and "rope-interleaved@100000" in schemes
    assert refs.describe(("rope-half@100000",))["positional"].endswith("base 100,000 (your module's)")


def test_partial_rotary_needs_an_even_number_of_rotated_dims():
    wide = [v[-1] for v in References("attention", 32, 4, None, {}, positional=True).variants() if v]
    narrow = [v[-1] for v in References("attention", 16, 4, None, {}, positional=True).variants() if v]
    assert "rope-half@10000/4" in wide and "rope-interleaved@10000/2" in wide  # Dh 8: 2 and 4 dims
    assert "rope-half@10000/4" not in narrow and "rope-half@10000/2" in narrow  # Dh 4: 1 dim cannot rotate
