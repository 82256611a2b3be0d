"""The mha and block exercises against the spec's reference: what the doctor's match does not settle by itself.

The doctor maps the learner's weights onto our reference and says whether the outputs agree ("matches"); it
accepts any valid design (Post-Norm, ReLU, any FFN width, norms without parameters). An exercise fixes its
design, so here: the exercise's variant (Pre-Norm, GELU, ``d_ff`` = 4 D, two norms with their own gamma and beta,
initialised to ones and zeros), the same output in training mode, no randomness in evaluation, and, when the
output differs from the reference, the learner's step that makes it differ, read from the recorded dataflow
(:func:`named`): the residual added twice, an extra activation, no output projection, one pattern for every head,
the softmax's axis, the scale's place and size, interleaved heads. Whatever is left is said plainly
(:func:`differs`): by how much, and the learner's line where it first appears.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from anatomy.course import block_words as W
from anatomy.course.spec import BrokenRule, _same_file, definition_line
from anatomy.tracing.steps import Recording, Step

if TYPE_CHECKING:
    from anatomy.doctor.report.findings import Report

SIZES = {"B": 2, "T": 5, "H": 3, "Dh": 4, "D": 12}
ADDS = ("add", "__add__", "__radd__", "add_", "__iadd__")
ACTS = ("gelu", "relu", "silu", "tanh", "sigmoid", "leaky_relu", "elu", "mish", "relu_", "gelu_")
DROPS = ("dropout", "dropout_", "feature_dropout", "alpha_dropout")
SCALES = ("div", "__truediv__", "mul", "__mul__", "__rmul__", "div_", "mul_", "__itruediv__", "__imul__")
MERGES = ("view", "reshape", "flatten", "contiguous")


def _causal(t: int = 5) -> torch.Tensor:
    return torch.ones(t, t, dtype=torch.bool).tril()[None, None]


def record(m: nn.Module, x: torch.Tensor) -> Recording | None:
    """The learner's forward on ``x`` under a causal mask, recorded step by step (None when it cannot be)."""
    from anatomy.tracing import recorder as rec_mod

    try:
        return rec_mod.record(m, x, _causal(x.shape[1]), module=m, sizes=SIZES)
    except Exception:  # noqa: BLE001 - the verdict stands without the recording; only the naming is lost
        return None


def _mine(rec: Recording | None, file: str) -> list[Step]:
    return [s for s in rec.steps if s.data and _same_file(s.file, file)] if rec is not None else []


def _by_index(rec: Recording | None) -> dict[str, Step]:
    return {f"step {s.index}": s for s in rec.steps} if rec is not None else {}


def _find(name: str, step: Step | None, what_args: tuple[Any, ...] = ()) -> BrokenRule:
    return W.finding(name, step.line if step is not None else None, step.source if step is not None else "", *what_args)


# ------------------------------------------------------------------------------------------------ always: rules


def eval_random(call: Callable[[], Any], file: str, rec: Recording | None) -> BrokenRule | None:
    """Two evaluations of the same input differ: dropout left on at evaluation (``F.dropout(w, 0.1)`` trains by
    default)."""
    torch.manual_seed(1)
    a = call()
    torch.manual_seed(2)
    b = call()
    a, b = (t[0] if isinstance(t, (tuple, list)) else t for t in (a, b))
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape:
        return None
    if bool(torch.equal(a.nan_to_num(0), b.nan_to_num(0))):
        return None
    step = next((s for s in _mine(rec, file) if s.op in DROPS), None)
    return _find("dropout_at_eval", step)


def variant(found: dict[str, Any], d_model: int, m: nn.Module, file: str, rec: Recording | None) -> BrokenRule | None:
    """The block's design the doctor found, against the exercise's: FFN width, norms with parameters."""
    mine = _mine(rec, file)
    steps = _by_index(rec) if rec is not None else {}
    pairs = (found.get("mapping") or {}).get("pairs") or []
    if any(ref.endswith("o_proj.weight") and str(user).startswith("(") for ref, user, _ in pairs):
        return _no_projection(mine, steps, True) or W.finding("no_output_projection", None, "")
    interleaved = _interleaved(mine, steps, True)  # a layout the doctor maps, but not the exercise's heads
    if interleaved is not None:
        return interleaved
    block = found.get("block") or {}
    d_ff = block.get("d_ff")
    if isinstance(d_ff, int) and d_ff != 4 * d_model:
        return _ffn_width(m, file, rec, d_ff, d_model)
    bare = [n for n in block.get("norms_by_behaviour") or [] if not n.get("weight") or not n.get("bias")]
    norms = [s for s in mine if s.op in ("layer_norm", "rms_norm")]
    plain = [s for s in norms if not any(i.source.startswith("param") for i in s.inputs[1:])]
    if plain or bare:
        return _find("norm_without_parameters", plain[0] if plain else (norms[0] if norms else None))
    return None


def _ffn_width(m: nn.Module, file: str, rec: Recording | None, d_ff: int, d_model: int) -> BrokenRule:
    """Where the FFN's first Linear is defined (its width is what is wrong), else where it runs."""
    mine = _mine(rec, file)
    norms = [s for s in rec.steps if s.op in ("layer_norm", "rms_norm")] if rec is not None else []
    after = f"step {norms[-1].index}" if norms else None
    up = next((s for s in mine if s.op == "linear" and after and s.inputs and s.inputs[0].source == after), None)
    line, source = (up.line, up.source) if up is not None else (None, "")
    if up is not None and up.module:
        path = up.module.split(".")
        owner = m.get_submodule(".".join(path[:-1])) if len(path) > 1 else m
        at, text = definition_line(type(owner), path[-1], file)
        if at == 0 and len(path) > 1:  # an nn.Sequential: the line that defines the container
            parent = m.get_submodule(".".join(path[:-2])) if len(path) > 2 else m
            at, text = definition_line(type(parent), path[-2], file)
        line, source = (at, text) if at else (line, source)
    return W.finding("ffn_ignores_d_ff", line, source, d_ff, d_model)


def initial_values(found: dict[str, Any], m: nn.Module, file: str) -> BrokenRule | None:
    """Each norm's gamma starts at ones and beta at zeros (the doctor's seeded weights hide any initialisation)."""
    params = dict(m.named_parameters())
    pairs = (found.get("mapping") or {}).get("pairs") or []
    for ref, user, _ in pairs:
        role = "weight" if ref.endswith("norm.weight") else "bias" if ref.endswith("norm.bias") else None
        p = params.get(user)
        if role is None or p is None:
            continue
        want = 1.0 if role == "weight" else 0.0
        if bool((p.detach() == want).all()):
            continue
        swapped = bool((p.detach() == 1.0 - want).all())
        path = user.split(".")
        owner = m.get_submodule(".".join(path[:-1])) if len(path) > 1 else m
        line, source = definition_line(type(owner), path[-1], file)
        if not line and len(path) > 1:
            parent = m.get_submodule(".".join(path[:-2])) if len(path) > 2 else m
            line, source = definition_line(type(parent), path[-2], file)
        return W.finding("norm_init_swapped" if swapped else "norm_init_wrong", line or None, source, user, role)
    return None


def training(m: nn.Module, x: torch.Tensor, file: str) -> BrokenRule | None:
    """In training mode with every ``nn.Dropout`` at p = 0 the block computes what it computes in evaluation (the
    reference has nothing else that trains): a BatchNorm, or a norm with running statistics, does not."""
    probe = copy.deepcopy(m)
    for d in probe.modules():
        if isinstance(d, nn.Dropout):
            d.p = 0.0
    with torch.no_grad():
        want = probe.eval()(x, _causal(x.shape[1]))
        torch.manual_seed(3)
        got = probe.train()(x, _causal(x.shape[1]))
        torch.manual_seed(4)
        again = probe(x, _causal(x.shape[1]))
    want, got, again = (t[0] if isinstance(t, (tuple, list)) else t for t in (want, got, again))
    if not all(isinstance(t, torch.Tensor) for t in (want, got, again)) or got.shape != want.shape:
        return None
    if not bool(torch.equal(got.nan_to_num(0), again.nan_to_num(0))):
        return None  # functional dropout with its own p: its place is judged by the dropout probe
    if bool(torch.allclose(got.nan_to_num(0), want.nan_to_num(0), rtol=1e-9, atol=1e-12)):
        return None
    rec = record(probe.train(), x)
    step = next((s for s in _mine(rec, file) if "batch_norm" in s.op or "instance_norm" in s.op), None)
    if step is not None and "batch_norm" in step.op:
        return _find("batchnorm_instead_of_layernorm", step)
    diff = float((got - want).abs().nan_to_num(float("inf")).max())
    return _find("differs_in_training", step, (diff,))


# ------------------------------------------------------------------------------------------------ when it differs


# what the softmax step shows for itself, named even where the doctor names a fault it resembles
SPECIFIC = frozenset({"softmax_wrong_axis", "softmax_over_queries", "scale_after_softmax", "scale_from_wrong_size"})


def named(rec: Recording | None, file: str, mha: bool, only: frozenset[str] | None = None) -> BrokenRule | None:
    """The learner's step that makes the output differ from the reference, read from the dataflow (``only``: the
    names to accept)."""
    mine = _mine(rec, file)
    if not mine:
        return None
    steps = _by_index(rec)
    for check in (_residual_twice, _extra_activation, _dropout_on_input, _no_projection, _interleaved, _softmax):
        found = check(mine, steps, mha)
        if found is not None and (only is None or found.pitfall in only):
            return found
    return None


def _residual_twice(mine: list[Step], steps: dict[str, Step], mha: bool) -> BrokenRule | None:
    adds = [s for s in mine if s.op in ADDS and any(i.source == "x" for i in s.inputs)]
    return None if mha or len(adds) < 2 else _find("second_residual_from_input", adds[1])


def _extra_activation(mine: list[Step], steps: dict[str, Step], mha: bool) -> BrokenRule | None:
    for s in mine:
        src = steps.get(s.inputs[0].source) if s.op in ACTS and s.inputs else None
        if src is not None and src.op == "linear" and src.outputs and src.outputs[0].dims[-1:] == ("D",):
            feeding = steps.get(src.inputs[0].source) if src.inputs else None
            if feeding is not None and feeding.outputs and feeding.outputs[0].dims[-1:] != ("D",):
                return _find("ffn_extra_activation", s)
    return None


def _dropout_on_input(mine: list[Step], steps: dict[str, Step], mha: bool) -> BrokenRule | None:
    s = next((s for s in mine if s.op in DROPS and s.inputs and s.inputs[0].source == "x"), None)
    return None if s is None else _find("dropout_on_residual", s)


def _no_projection(mine: list[Step], steps: dict[str, Step], mha: bool) -> BrokenRule | None:
    """The heads merged to (B, T, D) and never through a Linear: added to the residual or returned as they are."""

    def heads_in(s: Step) -> bool:
        src = steps.get(s.inputs[0].source) if s.inputs else None
        return src is not None and bool(src.outputs) and "H" in src.outputs[0].dims

    merged = [s for s in mine if s.op in MERGES and s.outputs and s.outputs[0].dims == ("B", "T", "D") and heads_in(s)]
    if not merged:
        return None
    last = merged[-1]
    used = [s for s in steps.values() if any(i.source == f"step {last.index}" for i in s.inputs)]
    if any(s.op in ("linear", "matmul", "__matmul__", "einsum", "addmm", "mm") for s in used):
        return None
    return _find("no_output_projection", last)


def _interleaved(mine: list[Step], steps: dict[str, Step], mha: bool) -> BrokenRule | None:
    for s in mine:
        dims = s.outputs[0].dims if s.op in ("view", "reshape", "unflatten") and s.outputs else ()
        if any(a == "Dh" and b == "H" for a, b in zip(dims, dims[1:])):
            return _find("heads_interleaved", s)
    return None


def _softmax(mine: list[Step], steps: dict[str, Step], mha: bool) -> BrokenRule | None:
    soft = next((s for s in mine if s.op in ("softmax", "_softmax") and s.inputs), None)
    if soft is None:
        return None
    dims = soft.inputs[0].dims
    axis = soft.extra.get("dim")
    if isinstance(axis, int) and dims and axis % len(dims) != len(dims) - 1:
        letter = dims[axis % len(dims)]
        if letter == "T":
            return _find("softmax_over_queries", soft)
        return _find("softmax_wrong_axis", soft, (axis, {"H": "heads", "B": "batch"}.get(letter, letter)))
    if "H" not in "".join(soft.outputs[0].dims if soft.outputs else ()):
        return _find("heads_share_one_pattern", soft)
    after = next((s for s in mine if s.op in SCALES and s.inputs and s.inputs[0].source == f"step {soft.index}"), None)
    if after is not None:
        return _find("scale_after_softmax", after)
    return _scale_size(soft, steps)


def _scale_size(soft: Step, steps: dict[str, Step]) -> BrokenRule | None:
    """The effective scale of the scores (the softmax's input over q·k), against the sizes it could be made of."""
    made = [s for s in steps.values() if s.index < soft.index and s.op in ("matmul", "__matmul__", "einsum", "bmm")]
    qk = next((s for s in reversed(made) if s.outputs and s.outputs[0].dims[-2:] in (("T", "S"), ("T", "T"))), None)
    if qk is None or qk.value is None or soft.in_value is None or qk.value.shape != soft.in_value.shape:
        return None
    raw, scaled = qk.value.double(), soft.in_value.double()
    keep = torch.isfinite(scaled) & (raw.abs() > 1e-3) & (scaled.abs() < 1e6)
    if not bool(keep.any()):
        return None
    factor = float((scaled[keep] / raw[keep]).median())
    for f in qk.extra.get("factors") or ():
        factor *= float(f)
    sizes = {"scale_from_wrong_size": 1 / math.sqrt(SIZES["T"]), "no_scaling": 1.0, "scale_not_sqrt": 1 / SIZES["Dh"]}
    sizes["scale_by_d_model"] = 1 / math.sqrt(SIZES["D"])
    for name, value in sizes.items():
        if abs(factor - value) <= 1e-6 * value:
            return _find(name, _scale_step(soft, steps), (factor,))
    return None


def _scale_step(soft: Step, steps: dict[str, Step]) -> Step:
    """The step that scaled the scores on their way to the softmax (through the mask), else the softmax."""
    step = steps.get(soft.inputs[0].source) if soft.inputs else None
    while step is not None and step.op not in SCALES and step.op in ("masked_fill", "masked_fill_", "where", "add"):
        step = steps.get(step.inputs[0].source) if step.inputs else None
    return step if step is not None and step.op in SCALES else soft


def reads_raw_input(rec: Recording | None, file: str) -> Step | None:
    """The learner's first projection applied to the block's raw input x (a Pre-Norm block projects norm(x))."""
    return next((s for s in _mine(rec, file) if s.op == "linear" and s.inputs and s.inputs[0].source == "x"), None)


def confirmed(fault: str, report: Report, rec: Recording | None, file: str) -> bool:
    """A block fault a probe named while the diagnosis found no reference that reproduces the output: kept only
    when the dataflow shows it (a normalised tensor added back as the residual)."""
    if fault != "norm_on_residual_path" or report.diagnosis.get("status") in ("fault", "ambiguous"):
        return True
    steps = _by_index(rec) if rec is not None else {}
    adds = [s for s in _mine(rec, file) if s.op in ADDS]
    return any(
        (src := steps.get(i.source)) is not None and src.op in ("layer_norm", "rms_norm")
        for s in adds
        for i in s.inputs
    )


def parallel(rec: Recording | None, file: str) -> BrokenRule:
    """The block matches the parallel reference (the FFN reads the block's input): the learner's FFN-side norm line,
    the last norm call of their file."""
    norms = [s for s in _mine(rec, file) if s.op in ("layer_norm", "rms_norm")]
    step = norms[-1] if norms else None
    return W.finding("parallel_residual_instead", step.line if step else None, step.source if step else "")


def differs(report: Report, rec: Recording | None, file: str, mha: bool) -> BrokenRule:
    """What differs from the reference, by how much, and the learner's line where it first appears."""
    diag = report.diagnosis
    first = diag.get("first_difference") or {}
    user = first.get("user")
    mine = _mine(rec, file)
    step = next((s for s in mine if user and (s.module == user or s.module.startswith(f"{user}."))), None)
    if step is None and first.get("reference") == "hook_weights":
        step = next((s for s in mine if s.op in ("softmax", "_softmax")), None)
    step = step or (mine[-1] if mine else None)
    size = diag.get("max_abs_diff_vs_reference")
    where = (first.get("where"), first.get("where_zh")) if first.get("where") else None
    return W.finding("unexplained", step.line if step else None, step.source if step else "", size, where, mha, diag)
