"""Line pointers for diagnoses (``pointers.py``) and the mapping read from the dataflow (``mapping_observed.py``)."""

from pathlib import Path

import torch
from torch import nn

from anatomy.doctor.loading.building import import_file
from anatomy.doctor.mapping import projections as mp
from anatomy.doctor.mapping.from_recording import agrees, from_dataflow, with_observed
from anatomy.doctor.recording import observed as ob
from anatomy.doctor.report.findings import Finding, Report
from anatomy.doctor.report.pointers import point, pointers
from anatomy.tracing.recorder import record
from anatomy.tracing.steps import sizes_for

ZOO = Path(__file__).parent / "zoo_learners"
SIZES = sizes_for(12, 3, 2, 7)  # the modules here are built with d_model=12, n_heads=3


def rec_of(name, cls, d=12, h=3):
    torch.manual_seed(0)
    m = getattr(import_file(ZOO / name), cls)(d, h).double().eval()
    x = torch.randn(2, 7, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return m, record(m, x, sizes=SIZES)


def line_of(name, text):
    return next(i + 1 for i, s in enumerate((ZOO / name).read_text().splitlines()) if text in s)


def test_split_without_transpose_points_at_the_view_then_the_matmul():
    name = "trace_split_no_transpose.py"
    _, rec = rec_of(name, "MultiHeadAttention")
    where = pointers(rec, "split_without_transpose")
    assert [w["line"] for w in where] == [line_of(name, "q = self.W_q(x).view"), line_of(name, "torch.matmul(q, k")]
    assert where[1]["en"].endswith("without transpose(1, 2): the scores are (B, T, H, H)")
    assert "没有 transpose(1, 2)" in where[0]["zh"]


def test_scale_pointer_names_the_line_and_the_width():
    name = "trace_heads_loop.py"
    _, rec = rec_of(name, "MultiHeadAttentionC")
    where = pointers(rec, "scale_by_d_model")
    assert where[0]["line"] == line_of(name, "wei = q @ k.transpose(-2, -1) * C ** -0.5")
    assert "1/sqrt(D)" in where[0]["en"]
    assert pointers(rec, None, "scaling") == where  # a probe without a fault name points at the same place


def test_no_scaling_points_at_the_scores_matmul():
    class NoScale(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k = nn.Linear(12, 12), nn.Linear(12, 12)

        def forward(self, x):
            s = self.q(x) @ self.k(x).transpose(1, 2)
            return torch.softmax(s, -1)

    where = pointers(record(NoScale().double(), torch.randn(2, 7, 12, dtype=torch.float64), sizes=SIZES), "no_scaling")
    assert "nothing scales them" in where[0]["en"] and where[0]["source"].startswith("s = self.q(x) @")


def test_mask_pointers_before_and_after_the_softmax():
    class Masked(nn.Module):
        def __init__(self, after):
            super().__init__()
            self.q, self.k, self.after = nn.Linear(12, 12), nn.Linear(12, 12), after

        def forward(self, x):
            keep = torch.ones(7, 7, dtype=torch.bool).tril()
            s = self.q(x) @ self.k(x).transpose(1, 2) / 12**0.5
            if self.after:
                w = torch.softmax(s, -1)
                return w.masked_fill(~keep, 0.0)
            s = s.masked_fill(~keep, float("-inf"))
            return torch.softmax(s, -1)

    x = torch.randn(2, 7, 12, dtype=torch.float64)
    before = pointers(record(Masked(False).double(), x, sizes=SIZES), "causal_off_by_one")
    assert before and before[0]["source"] == 's = s.masked_fill(~keep, float("-inf"))'
    after = pointers(record(Masked(True).double(), x, sizes=SIZES), "mask_after_softmax")
    assert after and after[0]["source"] == "return w.masked_fill(~keep, 0.0)" and "after the softmax" in after[0]["en"]


def test_point_fills_where_in_the_json_and_the_text():
    name = "trace_split_no_transpose.py"
    _, rec = rec_of(name, "MultiHeadAttention")
    findings = [
        Finding("diagnosis", "error", "en", "zh", {}, fault="split_without_transpose"),
        Finding("token_order", "error", "en", "zh", {}, explained_by="split_without_transpose"),
        Finding("weights", "warning", "en", "zh", {}),
    ]
    point(findings, rec)
    assert findings[0].where and findings[1].where == findings[0].where and findings[2].where == []
    report = Report(
        "x.py:A",
        "attention",
        {"d_model": 12, "n_heads": 3, "head_dim": 4, "batch": 2, "seq": 7, "seed": 0},
        {},
        findings,
        [],
        [],
        {"status": "fault"},
    )
    doc = report.to_dict()
    assert doc["findings"][0]["where"][0]["line"] == line_of(name, "q = self.W_q(x).view")
    text = report.render(lang="en")
    assert text.count("splits into heads without transpose(1, 2)") == 1  # once per group, not per finding


def test_with_observed_confirms_names_or_adds_the_dataflow_reading():
    m, rec = rec_of("trace_split_no_transpose.py", "MultiHeadAttention")
    params = dict(m.named_parameters())
    names, _ = mp.find_attention(m, 12, 3)
    obs = from_dataflow(rec, 12, 3)
    assert names and agrees(names[0], obs, params)
    assert with_observed(names, obs, params) == names  # confirmed: the names' readings stay as they were
    m, rec = rec_of("trace_heads_loop.py", "MultiHeadAttention")
    obs = ob.hypothesis(rec, 12, 3)
    assert mp.find_attention(m, 12, 3)[0] == [] and with_observed([], obs, dict(m.named_parameters())) == [obs]


def test_a_key_used_as_the_query_is_mapped_by_what_it_feeds():
    class Swapped(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.h = h
            self.q_proj, self.k_proj = nn.Linear(d, d), nn.Linear(d, d)
            self.v_proj, self.o_proj = nn.Linear(d, d), nn.Linear(d, d)

        def forward(self, x):
            b, t, d = x.shape
            q = self.k_proj(x).view(b, t, self.h, -1).transpose(1, 2)  # (B, H, T, Dh): "k_proj" makes the query
            k = self.q_proj(x).view(b, t, self.h, -1).transpose(1, 2)  # (B, H, T, Dh)
            v = self.v_proj(x).view(b, t, self.h, -1).transpose(1, 2)  # (B, H, T, Dh)
            w = torch.softmax(q @ k.transpose(-2, -1) / (d // self.h) ** 0.5, -1)  # (B, H, T, S)
            return self.o_proj((w @ v).transpose(1, 2).reshape(b, t, d))  # (B, T, D)

    m = Swapped(12, 3).double()
    rec = record(m, torch.randn(2, 7, 12, dtype=torch.float64), sizes=SIZES)
    params = dict(m.named_parameters())
    names, _ = mp.find_attention(m, 12, 3)
    hyps = with_observed(names, from_dataflow(rec, 12, 3), params)
    assert hyps[0].style.startswith("observed") and len(hyps) == len(names) + 1
    assert hyps[0].sources["q_proj.weight"].user == "k_proj.weight"
