"""The op-level recorder on modules written in different styles: lines, shapes, dimension names, projections."""

from pathlib import Path

import pytest
import torch
from torch import nn

from anatomy.doctor.loading.building import import_file
from anatomy.tracing.recorder import record
from anatomy.tracing.steps import PROBE_SIZES, RecordError

ZOO = Path(__file__).parents[1] / "doctor" / "zoo_learners"


def load(name: str, cls: str, d: int = 20, h: int = 5) -> nn.Module:
    torch.manual_seed(0)
    return getattr(import_file(ZOO / name), cls)(d, h).double().eval()


def x_probe(b: int = 2, t: int = 7, d: int = 20) -> torch.Tensor:
    return torch.randn(b, t, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def source_line(name: str, text: str) -> int:
    lines = (ZOO / name).read_text().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if text in line)


def test_per_head_loop_steps_name_lines_and_dims():
    rec = record(load("trace_heads_loop.py", "MultiHeadAttention"), x_probe())
    soft = rec.find("softmax")
    assert len(soft) == 5  # one softmax per Head module
    line = source_line("trace_heads_loop.py", "wei = F.softmax(wei, dim=-1)  # (B, T, T)")
    assert soft[0].line == line and soft[0].file.endswith("trace_heads_loop.py")
    assert soft[0].outputs[0].dims == ("B", "T", "S")
    # the projections are the Linears inside each Head, applied to x, and the output projection
    weights = [p.weight for p in rec.projections]
    assert weights[:3] == ["heads.0.key.weight", "heads.0.query.weight", "heads.0.value.weight"]
    assert weights[-1] == "proj.weight" and rec.projections[-1].applied_to.startswith("step ")
    cat = rec.find("cat")[0]
    assert cat.outputs[0].dims == ("B", "T", "D") and [i.dims for i in cat.inputs] == [("B", "T", "Dh")] * 5


def test_split_without_transpose_scores_are_b_t_h_h():
    name = "trace_split_no_transpose.py"
    rec = record(load(name, "MultiHeadAttention"), x_probe())
    soft = rec.find_softmax()
    assert soft.inputs[0].dims == ("B", "T", "H", "H")
    scores = rec.find("matmul")[0]
    assert scores.line == source_line(name, "scores = torch.matmul(q, k.transpose(-2, -1))")
    view = rec.find("view")[0]
    assert view.outputs[0].dims == ("B", "T", "H", "Dh") and view.note == ""


def test_view_that_interleaves_heads_and_positions_is_noted():
    class Interleave(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.h, self.q = h, nn.Linear(d, d)

        def forward(self, x):
            b, t, d = x.shape
            return self.q(x).view(b, self.h, t, d // self.h)

    rec = record(Interleave(20, 5).double(), x_probe())
    view = rec.find("view")[0]
    assert view.outputs[0].dims == ("B", "H", "T", "Dh")
    assert "transpose is missing" in view.note


def test_einsum_with_bare_fused_parameter_and_sequential_output():
    rec = record(load("trace_einsum_fused.py", "FusedAttention"), x_probe())
    assert [p.weight for p in rec.projections] == ["w_qkv", "to_out.0.weight"]
    qkv = rec.projections[0]
    assert (qkv.n_features, qkv.n_in) == (60, 20)
    m = qkv.matrix(dict(rec_params := dict(load("trace_einsum_fused.py", "FusedAttention").named_parameters())))
    assert torch.equal(m, rec_params["w_qkv"].T)  # x @ W: the matrix is W transposed
    dots = rec.find("einsum")[1]
    assert dots.outputs[0].dims == ("B", "H", "T", "S")
    merge = rec.find("reshape")[-1]
    assert merge.inputs[0].dims == ("B", "T", "H", "Dh") and merge.outputs[0].dims == ("B", "T", "D")


def test_lazy_linear_gets_a_warm_up_and_bare_parameter_bias_is_found():
    class Lazy(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.LazyLinear(20)
            self.w = nn.Parameter(torch.randn(20, 20))
            self.b = nn.Parameter(torch.randn(20))

        def forward(self, x):
            return self.q(x) + (x @ self.w.T + self.b)

    mod = Lazy().double()
    rec = record(mod, x_probe())
    assert [p.weight for p in rec.projections] == ["q.weight", "w"]
    params = dict(mod.named_parameters())
    assert torch.equal(rec.projections[1].matrix(params), params["w"])  # x @ W.T: the matrix is W
    assert rec.projections[1].bias_param == "b"
    assert torch.equal(rec.projections[1].bias(params), params["b"])


def test_addmm_projection_is_named_after_its_matrix_not_its_bias():
    class Conv1D(nn.Module):  # GPT-2's layer: addmm(bias, x, weight), weight stored (in, out)
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(20, 12))
            self.bias = nn.Parameter(torch.randn(12))

        def forward(self, x):
            return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(*x.shape[:-1], 12)

    mod = Conv1D().double()
    rec = record(mod, x_probe())
    (proj,) = rec.projections
    params = dict(mod.named_parameters())
    assert proj.weight == "weight" and proj.bias_param == "bias"
    assert torch.equal(proj.matrix(params), params["weight"].T)


def test_a_forward_that_raises_names_its_line():
    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(20, 20)

        def forward(self, x):
            return self.q(x).view(3, -1, 7)

    with pytest.raises(RecordError, match=r"RuntimeError.*at line \d+ of test_recorder.py: `return self.q\(x\)"):
        record(Broken().double(), x_probe())


def test_probe_sizes_are_all_different():
    assert len(set(PROBE_SIZES.values())) == len(PROBE_SIZES)


def test_sys_exit_in_a_forward_is_an_error_not_the_end():
    class Exits(nn.Module):
        def forward(self, x):
            import sys

            sys.exit(0)  # a debugging leftover

    with pytest.raises(RecordError, match="SystemExit"):
        record(Exits(), x_probe())


def test_a_long_forward_stops_being_recorded_not_running(monkeypatch):
    import anatomy.tracing.steps as recorder  # MAX_STEPS lives with the recording (ops.py reads it there)

    monkeypatch.setattr(recorder, "MAX_STEPS", 50)

    def loop(x):
        for _ in range(200):
            x = x + 1
        return x

    rec = record(loop, x_probe())
    assert len(rec.steps) == 50 and rec.truncated and float(rec.output[0, 0, 0] - x_probe()[0, 0, 0]) == 200
