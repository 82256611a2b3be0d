"""The positional schemes' four views (``pe_views.py``): computed by ``components/positional``, shaped for the
figure and the page, and JSON-ready (no matplotlib needed)."""

from __future__ import annotations

import json
import math

import pytest

from anatomy.inspection import viz_pe
from anatomy.inspection.pe_views import BUILDERS


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_positional_data_is_computed_and_shaped(kind):
    data = viz_pe.positional_data(kind, d_model=32, max_len=48, train_len=24, n_heads=4)
    heat, waves, sim, beyond = data.panels()
    assert heat.image is not None and len(heat.image) == 48
    assert waves.series and sim.series and beyond.series
    for panel in (waves, sim, beyond):
        assert all(len(ys) == len(panel.x) for _, ys in panel.series)
    if kind == "sinusoidal":
        ys = sim.series[0][1]
        zero = sim.x.index(0)
        assert ys[zero] == pytest.approx(1.0) and max(ys) == ys[zero]
        assert ys[zero - 3] == pytest.approx(ys[zero + 3])  # depends on |k| only
        assert len(waves.series) >= 3  # a fast and a slow dimension at least
    if kind == "learned":
        assert "ValueError" in beyond.note and "max_seq_len=24" in beyond.note
        assert all(math.isnan(v) for v in beyond.series[0][1][24:])
    if kind == "alibi":
        assert all(v == 0.0 for _, ys in beyond.series for v in ys[:24])
    if kind == "t5":
        ys = beyond.series[0][1]
        assert len(set(ys[24:])) == 1  # every distance past max_distance shares one bucket
    assert data.to_dict()["panels"][0]["image"]  # JSON-ready, NaN as None


def test_every_view_is_json_with_nan_written_as_none():
    for kind in BUILDERS:
        data = viz_pe.positional_data(kind, d_model=16, max_len=24, train_len=12, n_heads=2)
        json.dumps(data.to_dict(), allow_nan=False)  # the learned table's undefined positions are None, not NaN
    learned = viz_pe.positional_data("learned", d_model=16, max_len=24, train_len=12).to_dict()
    assert None in learned["panels"][3]["series"][0]["y"]
