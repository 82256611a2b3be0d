"""Facts read from a recording: the observed scale, the q/k/v/o roles, the mapping and the learner's lines."""

from pathlib import Path

import pytest
import torch

from anatomy.components.attention import MultiHeadAttention
from anatomy.components.inputs import attention_inputs
from anatomy.doctor.loading.building import import_file
from anatomy.doctor.mapping import projections as mp
from anatomy.doctor.recording import observed as ob
from anatomy.tracing.recorder import record
from anatomy.tracing.steps import sizes_for

ZOO = Path(__file__).parent / "zoo_learners"
SIZES = sizes_for(12, 3, 2, 7)  # the modules here are built with d_model=12, n_heads=3
CASES = [
    ("trace_heads_loop.py", "MultiHeadAttention"),
    ("trace_einsum_fused.py", "FusedAttention"),
    ("trace_split_no_transpose.py", "MultiHeadAttention"),
    ("trace_heads_loop.py", "MultiHeadAttentionC"),
    ("trace_more_styles.py", "FlashStyle"),
    ("trace_more_styles.py", "GPT2Attention"),
    ("trace_more_styles.py", "LazyAttention"),
    ("trace_annotated_block.py", "MultiHeadedAttention"),
    ("trace_more_styles.py", "PreallocatedHeads"),
]


def build(name, cls, d=12, h=3):
    torch.manual_seed(0)
    make = getattr(import_file(ZOO / name), cls)
    m = make(h, d) if cls == "MultiHeadedAttention" else make(d, h)  # the annotated transformer takes (h, d_model)
    z = torch.zeros(1, 2, d)
    m(*(z, z, z) if cls == "MultiHeadedAttention" else (z,))  # LazyLinear takes its shape here
    return m.double().eval()


def x_probe(d=12, t=7):
    return torch.randn(2, t, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def out_of(m, *args):
    out = m(*args)
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("name, cls", CASES)
def test_observed_mapping_loads_the_reference(name, cls):
    """The mapping read from the dataflow reproduces correct modules exactly; buggy ones differ (the bug)."""
    m, x = build(name, cls), x_probe()
    args = (x, x, x) if cls == "MultiHeadedAttention" else (x,)
    hyp = ob.hypothesis(record(m, *args, sizes=SIZES), 12, 3)
    assert hyp is not None and hyp.style.startswith("observed dataflow")
    ref = MultiHeadAttention(d_model=12, n_heads=3).double().eval()
    mp.load_reference(ref, hyp, dict(m.named_parameters()))
    with torch.no_grad():
        diff = float((ref(x)[0] - out_of(m, *args)).abs().max())
    correct = cls != "MultiHeadAttentionC" and "no_transpose" not in name
    assert (diff < 1e-12) == correct, diff


def test_scale_by_model_width_is_seen_in_per_head_modules():
    """C**-0.5 in a Head module: the observed scale is 1/sqrt(D), not 1/sqrt(Dh) -- with the doctor's sizes too."""
    for d, h in ((12, 3), (16, 4)):
        sizes = sizes_for(d, h, 2, 7)
        good = ob.observed_scale(
            record(build("trace_heads_loop.py", "MultiHeadAttention", d, h), x_probe(d), sizes=sizes)
        )
        bad = ob.observed_scale(
            record(build("trace_heads_loop.py", "MultiHeadAttentionC", d, h), x_probe(d), sizes=sizes)
        )
        assert good.by == "Dh" and good.value == pytest.approx((d // h) ** -0.5)
        assert bad.by == "D" and bad.value == pytest.approx(d**-0.5)
        assert "C ** -0.5" in bad.source


def test_scale_applied_to_q_before_the_matmul_counts():
    class PreScaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k = torch.nn.Linear(12, 12), torch.nn.Linear(12, 12)

        def forward(self, x):
            q = self.q(x) / 12**0.5  # scaled before the matmul, by D
            return torch.softmax(q @ self.k(x).transpose(1, 2), dim=-1)

    sc = ob.observed_scale(record(PreScaled().double(), x_probe(), sizes=SIZES))
    assert sc.value == pytest.approx(12**-0.5) and sc.by == "D"


def test_roles_follow_the_data_not_the_names():
    rl = ob.roles(record(build("trace_einsum_fused.py", "FusedAttention"), x_probe(), sizes=SIZES))
    assert [p.weight for p in rl["q"]] == ["w_qkv"] and rl["o"].weight == "to_out.0.weight"
    rl = ob.roles(record(build("trace_heads_loop.py", "MultiHeadAttention"), x_probe(), sizes=SIZES))
    assert [p.weight for p in rl["k"]] == [f"heads.{i}.key.weight" for i in range(3)]


def test_split_without_transpose_points_at_the_view_and_the_matmul():
    name = "trace_split_no_transpose.py"
    devs = ob.deviations(record(build(name, "MultiHeadAttention"), x_probe(), sizes=SIZES))
    lines = (ZOO / name).read_text().splitlines()
    view_line = next(i + 1 for i, s in enumerate(lines) if "q = self.W_q(x).view" in s)
    mm_line = next(i + 1 for i, s in enumerate(lines) if "scores = torch.matmul" in s)
    assert devs[0]["kind"] == "scores" and devs[0]["line"] == mm_line and devs[0]["dims"] == "(B, T, H, H)"
    assert devs[0]["seen"].startswith(f"line {view_line} `q = self.W_q(x).view(b, t, self.h, self.d_k)")
    assert "without transpose(1, 2): the scores are (B, T, H, H)" in devs[0]["seen"]
    assert ob.deviations(record(build("trace_heads_loop.py", "MultiHeadAttention"), x_probe(), sizes=SIZES)) == []


class ManualSoftmax(torch.nn.Module):
    """From-scratch style: heads folded into the batch for bmm, a -1e4 causal fill, a max-shifted exp / sum."""

    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.q, self.k = torch.nn.Linear(d, d), torch.nn.Linear(d, d)
        self.v, self.o = torch.nn.Linear(d, d), torch.nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        h, dk = self.h, d // self.h

        def fold(z):
            return z.view(b, t, h, dk).transpose(1, 2).reshape(b * h, t, dk)  # (B*H, T, Dh)

        q, k, v = fold(self.q(x)), fold(self.k(x)), fold(self.v(x))
        s = torch.bmm(q, k.transpose(1, 2)) / dk**0.5  # (B*H, T, S)
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -1e4)
        s = s - s.max(dim=-1, keepdim=True)[0]
        e = torch.exp(s)
        w = e / e.sum(-1, keepdim=True)
        z = torch.bmm(w, v).view(b, h, t, dk).transpose(1, 2).reshape(b, t, d)  # (B, T, D)
        return self.o(z)


def test_manual_softmax_bmm_heads_and_a_finite_fill():
    torch.manual_seed(0)
    m, x = ManualSoftmax(12, 3).double(), x_probe()
    rec = record(m, x, sizes=SIZES)
    sc = ob.observed_scale(rec)
    assert sc.by == "Dh" and sc.value == pytest.approx(0.5) and "torch.bmm" in sc.source
    hyp = ob.hypothesis(rec, 12, 3)
    ref = MultiHeadAttention(d_model=12, n_heads=3).double().eval()
    mp.load_reference(ref, hyp, dict(m.named_parameters()))
    with torch.no_grad():
        diff = float(
            (ref(x, ctx=attention_inputs(ref, x, mask=torch.ones(7, 7, dtype=torch.bool).tril()))[0] - m(x)).abs().max()
        )
    assert diff < 1e-12


def test_scale_inside_baddbmm_alpha():
    class Baddbmm(torch.nn.Module):  # an older GPT-2 style: the scale is baddbmm's alpha
        def __init__(self):
            super().__init__()
            self.q, self.k = torch.nn.Linear(12, 12), torch.nn.Linear(12, 12)

        def forward(self, x):
            q, k = self.q(x), self.k(x)
            empty = torch.empty(x.shape[0], x.shape[1], x.shape[1], dtype=x.dtype)
            s = torch.baddbmm(empty, q, k.transpose(1, 2), beta=0, alpha=12**-0.5)
            return torch.softmax(s, -1)

    sc = ob.observed_scale(record(Baddbmm().double(), x_probe(), sizes=SIZES))
    assert sc.value == pytest.approx(12**-0.5) and sc.by == "D"


class WideHeads(torch.nn.Module):
    """Heads of their own width (Gemma's explicit head_dim): 3 heads of 8 for d_model 12, scaled by 8 ** -0.5."""

    def __init__(self, scale: float, d: int = 12, h: int = 3, dh: int = 8):
        super().__init__()
        self.h, self.dh, self.scale = h, dh, scale
        self.q, self.k, self.v = (torch.nn.Linear(d, h * dh) for _ in range(3))
        self.o = torch.nn.Linear(h * dh, d)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, self.h, self.dh).transpose(1, 2) for p in (self.q, self.k, self.v))
        w = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * self.scale, dim=-1)
        return self.o(torch.matmul(w, v).transpose(1, 2).reshape(b, t, -1))


@pytest.mark.parametrize("scale, fault", [(8**-0.5, None), (1.0, "no_scaling"), (12**-0.5, "scale_by_d_model")])
def test_an_explicit_head_width_is_read_from_q(scale, fault):
    from anatomy.doctor.recording.dataflow import Observation, scale_verdict

    torch.manual_seed(0)
    rec = record(WideHeads(scale).double().eval(), x_probe())
    verdict = scale_verdict(Observation(rec=rec, scale=ob.observed_scale(rec)), 12, 3)
    assert verdict is not None and verdict[0] == fault
    assert verdict[1]["d_k"] == (8 if fault is None else 4)  # the seen width clears its own scale, never accuses
