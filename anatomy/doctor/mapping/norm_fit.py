"""Norms found by behaviour: a sub-module whose output is its input standardised per token, up to a gain and a
bias per feature, is a norm, whatever it is called and whatever its gain and bias are called (``a_2``/``b_2``,
``gamma``/``beta``, ``scale``/``shift``, ``weight``/``bias``, or none).

One plain forward is recorded (a hook on every sub-module); for each sub-module that maps a ``(..., D)`` tensor to
one of the same shape, three forms are fitted, each for a grid of eps (the module's own float attributes first):

==================  ===============================================  ==============================================
``layernorm``       ``g · (x − mean) / sqrt(var + eps) + b``         ``nn.LayerNorm``, ``F.layer_norm``, BERT
``rmsnorm``         ``g · x / sqrt(mean(x²) + eps)``                 ``nn.RMSNorm``, Llama, T5
``layernorm`` with  ``g · (x − mean) / (std + eps) + b``,            the annotated transformer's ``LayerNorm``
``unbiased std``    ``std`` with Bessel's correction                 (a variant of the same norm, not a bug)
==================  ===============================================  ==============================================

``g`` and ``b`` are solved per feature by least squares over the recorded tokens; the form and eps with the least
residual win, and a residual below ``FIT_TOL`` (relative) makes the sub-module a norm. The gain and bias are then
looked up among the sub-module's parameters by value (the doctor randomised them, so no two coincide); a gain of
exactly 1 or a bias of exactly 0 needs no parameter. :class:`StdNorm` carries the unbiased-std form into the
reference.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from anatomy.doctor.contract import precision

EPS_GRID = (1e-5, 1e-6, 1e-12, 1e-8, 1e-9, 1e-10, 1e-7, 1e-4, 1e-3, 1e-11, 1e-14, 0.0)
FIT_TOL = 1e-9  # relative residual of the per-feature affine fit: float64 norms fit to ~1e-15
FORMS = ("layernorm", "rmsnorm", "unbiased_std")
Fit = tuple[str, float, torch.Tensor, torch.Tensor, float]  # form, eps, gain, bias, relative residual


@dataclass
class NormInfo:
    path: str
    kind: str  # "layernorm" | "rmsnorm" (the reference's norm)
    form: str  # "layernorm" | "rmsnorm" | "unbiased_std"
    eps: float
    weight: str | None  # the learner's parameter holding the gain (None: gain 1)
    bias: str | None  # ... the bias (None: no bias, or 0)
    residual: float
    width: int = 0
    offset: float = 0.0  # the gain is offset + weight (Gemma's (1 + weight) RMSNorm: 1.0)

    def to_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "kind": self.kind,
            "form": self.form,
            "eps": self.eps,
            "weight": self.weight,
            "bias": self.bias,
            **({"gain": f"{self.offset:g} + weight"} if self.offset else {}),
        }


def standardise(x: torch.Tensor, form: str, eps: float) -> torch.Tensor:
    if form == "rmsnorm":
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    c = x - x.mean(-1, keepdim=True)
    if form == "unbiased_std":
        return c / (x.std(-1, keepdim=True) + eps)
    return c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + eps)


def _fit(z: torch.Tensor, y: torch.Tensor, with_bias: bool) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Per feature: y ≈ g z + b (least squares over the rows). Returns g, b and the relative residual."""
    if with_bias:
        zm, ym = z.mean(0), y.mean(0)
        zc, yc = z - zm, y - ym
        g = (zc * yc).sum(0) / (zc * zc).sum(0).clamp_min(1e-300)
        b = ym - g * zm
    else:
        g = (z * y).sum(0) / (z * z).sum(0).clamp_min(1e-300)
        b = torch.zeros_like(g)
    res = (y - (g * z + b)).abs().max() / y.abs().max().clamp_min(1e-300)
    return g, b, float(res)


def fit_norm(
    x: torch.Tensor, y: torch.Tensor, eps_hints: Sequence[float] = (), forms: Sequence[str] = FORMS
) -> Fit | None:
    """The form and eps that make ``y`` an affine function (per feature) of standardised ``x``, or None."""
    if x.shape != y.shape or x.dim() < 2 or not x.is_floating_point() or x.shape[-1] < 3:
        return None
    x2, y2 = x.reshape(-1, x.shape[-1]).double(), y.reshape(-1, y.shape[-1]).double()
    if x2.shape[0] < 4 or not bool(torch.isfinite(x2).all() and torch.isfinite(y2).all()):
        return None
    if float((x2 - y2).abs().max()) == 0.0:
        return None
    best = None
    for form in forms:
        for eps in dict.fromkeys([*eps_hints, *EPS_GRID]):
            z = standardise(x2, form, eps)
            g, b, res = _fit(z, y2, with_bias=form != "rmsnorm")
            if best is None or res < best[4]:
                best = (form, eps, g, b, res)
        if best is not None and best[4] <= FIT_TOL * 1e-3:
            break
    limit = precision.tol(FIT_TOL)  # a norm computing in float32 (T5's variance) fits to its precision
    if best is not None and limit < best[4] <= 1e-3 and best[1] > 0:  # a norm, with an eps off the grid
        best = _refine(x2, y2, best)
    return best if best is not None and best[4] <= limit else None


def _refine(x: torch.Tensor, y: torch.Tensor, best: Fit) -> Fit:
    """Ternary search of log10(eps) within a decade either side of the best grid value (the residual is unimodal
    there): an eps like 3e-7 is fitted, not rounded to the grid."""
    form = best[0]

    def at(log_eps: float) -> Fit:
        eps = 10.0**log_eps
        return (form, eps, *_fit(standardise(x, form, eps), y, with_bias=form != "rmsnorm"))

    lo, hi = math.log10(best[1]) - 1.0, math.log10(best[1]) + 1.0
    for _ in range(80):
        a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        if at(a)[4] < at(b)[4]:
            hi = b
        else:
            lo = a
    found = at((lo + hi) / 2)
    return found if found[4] < best[4] else best


def _eps_hints(m: nn.Module) -> list[float]:
    return [float(v) for k, v in vars(m).items() if isinstance(v, float) and 0 <= v < 0.1 and "eps" in k.lower()]


def _by_value(m: nn.Module, prefix: str, value: torch.Tensor, used: set[str]) -> str | None:
    for name, p in m.named_parameters():
        full = f"{prefix}{name}"
        if full in used or p.shape != value.shape:
            continue
        if float((p.detach().double() - value).abs().max()) <= 1e-7 * max(1.0, float(value.abs().max())):
            return full
    return None


def find_norms(module: nn.Module, run: Callable[[], object], d: int) -> dict[str, NormInfo]:
    """Every sub-module of ``module`` that behaves as a norm over ``d`` features on the plain forward ``run()``,
    in call order; a wrapper that only returns its child norm's output is left out (the child is the norm)."""
    calls: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    handles = []
    for p, m in module.named_modules():
        if not p or isinstance(m, (nn.ModuleList, nn.ModuleDict)):
            continue

        def hook(mod: nn.Module, args: tuple[object, ...], out: object, p: str = p) -> None:
            if p not in calls and args and isinstance(args[0], torch.Tensor) and isinstance(out, torch.Tensor):
                calls[p] = (args[0].detach(), out.detach())

        handles.append(m.register_forward_hook(hook))
    try:
        run()
    except Exception:  # noqa: BLE001 - the caller ran the same forward already; no norms is the safe answer
        return {}
    finally:
        for hd in handles:
            hd.remove()
    named = dict(module.named_modules())
    found: dict[str, NormInfo] = {}
    for p, (x, y) in calls.items():
        if x.shape[-1] != d or x.shape != y.shape:
            continue
        m = named[p]
        fit = fit_norm(x, y, _eps_hints(m))
        if fit is None:
            continue
        form, eps, g, b, res = fit
        used: set[str] = set()
        weight = None if float((g - 1).abs().max()) <= 1e-9 else _by_value(m, f"{p}.", g, used)
        if weight is None and form != "unbiased_std" and float((g - 1).abs().max()) > 1e-9:
            # a tiny eps makes the unbiased std a constant multiple of the biased one: both forms fit, and only
            # the one the code computes gives a gain equal to its parameter (gamma * (x - mean) / (std + 1e-12))
            other = fit_norm(x, y, _eps_hints(m), forms=("unbiased_std",))
            if other is not None and _by_value(m, f"{p}.", other[2], used) is not None:
                form, eps, g, b, res = other
                weight = _by_value(m, f"{p}.", g, used)
        offset = 0.0
        if weight is None and float((g - 1).abs().max()) > 1e-9:  # Gemma's RMSNorm: x̂ · (1 + weight)
            weight = _by_value(m, f"{p}.", g - 1, used)
            offset = 1.0 if weight is not None else 0.0
        if weight is not None:
            used.add(weight)
        bias = None if float(b.abs().max()) <= 1e-9 else _by_value(m, f"{p}.", b, used)
        if (weight is None and float((g - 1).abs().max()) > 1e-9) or (bias is None and float(b.abs().max()) > 1e-9):
            continue  # a gain or bias the doctor cannot map (a buffer, a product of parameters)
        found[p] = NormInfo(p, "rmsnorm" if form == "rmsnorm" else "layernorm", form, eps, weight, bias, res, d, offset)
    # a wrapper whose output is its child's (SublayerConnection's norm is the child, not the wrapper)
    for p in list(found):
        if any(q != p and q.startswith(p + ".") and torch.equal(calls[q][1], calls[p][1]) for q in found):
            del found[p]
    return found


class StdNorm(nn.Module):
    """The annotated transformer's norm, ``weight · (x − mean) / (std + eps) + bias`` with the unbiased std, as a
    drop-in for the reference's norm (same parameter names)."""

    def __init__(self, d: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * standardise(x, "unbiased_std", self.eps) + self.bias
