"""``anatomy trace my_gpt.py:GPT``: the shape table of a learner's whole language model, embedding to logits.

    from anatomy.doctor.trace.model_trace import trace_model
    t = trace_model("my_gpt.py:GPT")          # built as GPT(vocab_size, d_model, n_heads, n_layers, block_size)
    for g in t.groups: print(g.title, g.layers, len(g.rows))     # embedding · blocks 0-2 × 3 · after · loss
    t.loss.logits, t.loss.targets, t.loss.shift                  # "logits[:, :-1]", "targets[:, 1:]", 1
    print(t.render("table", lang="zh"))

The model is built as ``anatomy check`` builds it (``doctor/model/build.py``) with sizes that are all different
(B=2, T=7, D=20, H=5, Dh=4, V=29, three layers, block_size=11), called once as ``forward(ids, targets=...)``
under the recorder (``anatomy.tracing``), each block's calls delimited by hooks, and each block recorded once more
on its own input so that its rows get the learner trace's labels (projections, scores, softmax, merge, FFN...).
Blocks whose rows are the same (same lines, ops and shapes) are shown once, "× L". The loss's pairing comes from a
gradient probe (``model_loss.py``), so ``logits[:, :-1]`` against ``targets[:, 1:]`` is read from what the model
does.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from anatomy.doctor.loading.isolation import isolated, require_sizes
from anatomy.doctor.loading.limits import Hung, guard
from anatomy.doctor.loading.subject import CheckError, CheckTimeout, _quiet, one_line
from anatomy.doctor.model.build import Sizes, build_model, infer_sizes
from anatomy.doctor.model.contract import _required_starts
from anatomy.doctor.model.dispatch import is_model_target
from anatomy.doctor.recording import observed as ob
from anatomy.doctor.trace import model_loss as ml
from anatomy.doctor.trace import model_parts as mp
from anatomy.doctor.trace.learner_labels import label_steps
from anatomy.doctor.trace.learner_trace import trace_dict
from anatomy.doctor.trace.model_groups import Group, block_groups, learner_file, notes_for
from anatomy.doctor.trace.model_trace_text import render
from anatomy.tracing import steps as r
from anatomy.tracing.dims import letters
from anatomy.tracing.recorder import _raised_at, record
from anatomy.tracing.steps import call_learner

SCHEMA = "anatomy.trace.model/1"
MODULE_KINDS = ("module", "attention", "block")  # the learner trace's (``anatomy check --kind``'s names too)


class NotAModel(CheckError):
    """The target built, but it is not a language model (no embedding of token ids): the block trace applies."""


@dataclass
class ModelTrace:
    target: str
    file: str
    sizes: dict[str, int]
    call: str
    groups: list[Group]
    loss: ml.Loss
    deviations: list[dict[str, Any]]
    unfollowed: list[str]
    notes: list[tuple[str, str]]
    recording: r.Recording | None = field(repr=False, default=None)
    kind: str = "lm"

    @property
    def rows(self) -> list[mp.ModelRow]:
        return [row for g in self.groups for row in g.rows]

    @property
    def deviation(self) -> dict[str, Any] | None:
        return self.deviations[0] if self.deviations else None

    def to_dict(self) -> dict[str, Any]:
        rows = [row.to_dict() for row in self.rows]
        body = {"groups": [g.to_dict() for g in self.groups], "rows": rows, "loss": self.loss.to_dict()}
        return trace_dict(self, {"schema": SCHEMA, "kind": self.kind}, body)

    def render(self, fmt: str = "table", lang: str = "en") -> str:
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)
        return render(self, fmt, lang)


@dataclass(frozen=True)
class ModelSizes:
    vocab_size: int = 29
    d_model: int = 20
    n_heads: int = 5
    n_layers: int = 3
    block_size: int = 11
    batch: int = 2
    seq: int = 7

    def build(self) -> Sizes:
        """The doctor's sizes (``doctor/model/build.py``): the model is built as ``anatomy check`` builds it."""
        return Sizes(self.vocab_size, self.d_model, self.n_heads, self.n_layers, self.block_size)

    def named(self) -> dict[str, int]:
        out = r.sizes_for(self.d_model, self.n_heads, self.batch, self.seq, V=self.vocab_size)
        if self.seq - 1 not in out.values() and self.seq > 1:
            out["T-1"] = self.seq - 1
        return out


DOCTOR_SIZES = ModelSizes(vocab_size=29, d_model=16, n_heads=4, n_layers=3, block_size=12)  # ``anatomy check``'s


def trace_model(
    target: Any,
    *,
    factory: str | None = None,
    sizes: ModelSizes | None = None,
    seed: int = 0,
    timeout: float | None = 60.0,
) -> ModelTrace:
    """Build ``target`` (``FILE.py:CLASS``, a class, a factory or a model) as a whole language model, run it once
    under the recorder and return the table. A factory's model keeps its own sizes (read from it). Without
    ``sizes``, a model that cannot be built or run with the trace's (D=20, H=5: all sizes different) is built with
    ``anatomy check``'s (D=16, H=4), and a note says why. :class:`NotAModel` when it builds but holds no token
    embedding; :class:`CheckError` (one line) when it cannot be built, run or followed; :class:`CheckTimeout` past
    ``timeout`` seconds."""
    z = sizes or ModelSizes()
    require_sizes(z.d_model, z.n_heads, batch=z.batch, seq=z.seq, vocab_size=z.vocab_size, n_layers=z.n_layers)
    if z.seq > z.block_size:
        raise CheckError(f"seq={z.seq} is longer than block_size={z.block_size}")
    with isolated(seed):
        try:
            return _build_and_trace(target, factory, z, seed, timeout or None)
        except (NotAModel, CheckTimeout):
            raise
        except CheckError as err:
            if sizes is not None:
                raise
            first = err
        try:
            t = _build_and_trace(target, factory, DOCTOR_SIZES, seed, timeout or None)
        except CheckError:
            raise first from None  # the first error stands
    why = " ".join(str(first).split())
    t.notes.insert(
        0,
        (
            "built with anatomy check's sizes (d_model=16, n_heads=4, so H and Dh are both 4) because with "
            f"d_model=20, n_heads=5: {why}",
            f"改用 anatomy check 的大小构造（d_model=16、n_heads=4，所以 H 和 Dh 都是 4）：用 d_model=20、"
            f"n_heads=5 时 {why}",
        ),
    )
    return t


def _build_and_trace(target: Any, factory: str | None, z: ModelSizes, seed: int, timeout: float | None) -> ModelTrace:
    model, label = build_model(target, factory, z.build(), seed, timeout)
    if not _has_embedding(model, z.vocab_size):
        raise NotAModel(f"{label}: no embedding of {z.vocab_size} token ids in it: not a language model")
    return _trace(model, label, _own_sizes(model, z), seed, timeout)


def _own_sizes(model: nn.Module, z: ModelSizes) -> ModelSizes:
    """The sizes the built model has (a factory keeps its own: ``infer_sizes``), the input no longer than it takes."""
    _stack, blocks = mp.find_blocks(model, z.n_layers)
    got = infer_sizes(model, z.build(), len(blocks) or None)
    seq = z.seq if got.block_size >= z.seq else max(2, got.block_size - 1)
    heads = z.n_heads if got.d_model == z.d_model else got.n_heads  # built with ours: ours (its guess may be off)
    return replace(
        z,
        vocab_size=got.vocab_size,
        d_model=got.d_model,
        n_heads=heads,
        n_layers=got.n_layers,
        block_size=got.block_size,
        seq=seq,
    )


def _has_embedding(model: nn.Module, vocab: int) -> bool:
    return any(isinstance(m, nn.Embedding) for m in model.modules()) or any(
        p.dim() == 2 and vocab in p.shape for p in model.parameters()
    )


def _guarded(what: tuple[str, str], timeout: float | None, fn: Any) -> Any:
    """``fn()`` under the time limit; the learner's exception as one line naming its own line."""
    try:
        with _quiet(), guard(timeout, lambda: what):
            return fn()
    except Hung as hung:
        raise CheckTimeout.from_hung(hung) from None
    except (CheckError, r.RecordError):
        raise
    except (Exception, SystemExit) as err:  # noqa: BLE001 - the learner's forward
        raise CheckError(f"{what[0]} raised {one_line(err)}{_raised_at(err)}") from None


def _trace(model: nn.Module, label: str, z: ModelSizes, seed: int, timeout: float | None) -> ModelTrace:
    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, z.vocab_size, (z.batch, z.seq), generator=gen)
    targets = ml.make_targets(z.batch, z.seq, z.vocab_size)
    name = ml.targets_parameter(model)
    kwargs: dict[str, Any] = {**_required_starts(model), **({name: targets} if name else {})}  # start_pos=0
    call = "forward(" + ", ".join(["ids"] + [f"{k}={k if k == name else v}" for k, v in kwargs.items()]) + ")"
    what = (
        f"{label}: {call} with ids of shape {tuple(ids.shape)}",
        f"{label}：{call}（ids 形状 {tuple(ids.shape)}）时",
    )
    stack, blocks = mp.find_blocks(model, z.n_layers)
    spans = mp.BlockSpans(blocks, keep_inputs=True)
    try:
        out = _guarded(what, timeout, lambda: _plain(model, ids, kwargs))
        inputs = spans.calls
    finally:
        spans.remove()
    logits, _ = ml.split_output(out)
    if logits is None or logits.shape[-1] != z.vocab_size:
        shape = "nothing" if logits is None else f"a tensor of shape {tuple(logits.shape)}"
        raise CheckError(f"{label}: {call} returned {shape}; a language model returns logits (B, T, V={z.vocab_size})")
    spans = mp.BlockSpans(blocks, keep_inputs=False)
    try:
        rec = _guarded(what, timeout, lambda: _record(model, ids, kwargs, z.named()))
        calls = spans.calls
    finally:
        spans.remove()
    file = learner_file(rec)
    labels: dict[int, tuple[str, str]] = {}
    devs: list[dict[str, Any]] = []
    for got, given in zip(calls, inputs):
        lab, dev = _block_labels(rec, got, given, dict(blocks), z, timeout)
        labels.update(lab)
        devs += dev
    rows = _rows(rec, file, calls, labels, devs, z)
    groups = block_groups(rows, calls, rec.module_types, z.n_heads)
    pairs: dict[tuple[int, int], int] | str = ml.NO_TARGETS
    if name:
        pairs = _guarded(
            what,
            timeout,
            lambda: ml.loss_pairs(lambda: call_learner(model, ids, **kwargs), model, targets, z.vocab_size),
        )
    loss = ml.describe(pairs, z.seq, name or "targets")
    notes = notes_for(rec, blocks, calls, loss, z.named())
    return ModelTrace(
        label, file, z.named(), call, groups, loss, sorted(devs, key=lambda d: d["step"]), rec.unfollowed, notes, rec
    )


def _dims(dims: tuple[str, ...]) -> str:
    """``(B*T-1, V)`` → ``(B*(T-1), V)``: a product with T-1 in it keeps T-1 whole."""
    return letters(tuple("*".join(f"({p})" if "-" in p else p for p in d.split("*")) if "*" in d else d for d in dims))


def _plain(model: nn.Module, ids: torch.Tensor, kwargs: dict[str, Any]) -> Any:
    with torch.no_grad():
        return call_learner(model, ids, **kwargs)


def _record(model: nn.Module, ids: torch.Tensor, kwargs: dict[str, Any], named: dict[str, int]) -> r.Recording:
    try:
        return record(model, ids, sizes=named, dims=["B T", "B T"], names=["ids"], kwargs=kwargs)
    except r.RecordError as err:  # it ran once already: what differs under the recorder is said by the error
        raise CheckError(f"while being traced, {err}") from None


def _block_labels(
    rec: r.Recording, got: mp.Call, given: mp.Call, modules: dict[str, nn.Module], z: ModelSizes, timeout: float | None
) -> tuple[dict[int, tuple[str, str]], list[dict[str, Any]]]:
    """One block recorded on its own input: the learner trace's labels and deviations, on the model's steps."""
    block = modules.get(given.path)
    x = given.args[0] if given.args and isinstance(given.args[0], torch.Tensor) else None
    if block is None or x is None or x.dim() != 3:
        return {}, []
    what = (f"block {given.path} on its own input", f"单独运行块 {given.path} 时")
    try:
        brec = _guarded(
            what,
            timeout,
            lambda: record(
                block, *given.args, sizes=z.named(), dims=["B T D"], names=["x"], kwargs=given.kwargs, tag_kwargs=False
            ),
        )
    except (r.RecordError, CheckError):
        return {}, []  # a block that needs more than its input (a cache, a state): its rows stay unlabelled
    steps = [s for s in rec.data_steps() if got.start <= s.index < got.end]
    try:
        labels, where = mp.align_labels(steps, brec.data_steps(), label_steps(brec))
        found = ob.deviations(brec)
    except Exception:  # noqa: BLE001 - a recording the labeller cannot read: the rows stay, unlabelled
        return {}, []
    devs = []
    for dev in found:
        at = where.get(dev["step"])
        if at is not None:  # the model's step: its line is the one the learner reads in the table
            step = rec.steps[at]
            devs.append({**dev, "step": at, "layer": got.layer, "line": step.line, "file": step.file})
            devs[-1]["source"] = step.source
    return labels, devs


def _rows(
    rec: r.Recording,
    file: str,
    calls: list[mp.Call],
    labels: dict[int, tuple[str, str]],
    devs: list[dict[str, Any]],
    z: ModelSizes,
) -> list[mp.ModelRow]:
    """Every data step of the learner's files (and the position tables before the first block), with its part."""
    folder = os.path.dirname(file)
    mine = [s for s in rec.steps if not file or s.file == file or (folder and s.file.startswith(folder + os.sep))]
    used = {int(i.source.split()[1]) for s in rec.data_steps() for i in s.inputs if i.source.startswith("step ")}
    shown = [s for s in mine if s.data or (s.index in used and s.outputs[0].dims.count("T") == 1)]  # + positions
    first = calls[0].start if calls else None
    last = max((c.end for c in calls), default=None)
    if not calls:  # no stack found: everything before the head, then the head and the loss
        to_v = [s.index for s in shown if s.data and s.op in r.MATMUL_OPS and s.outputs[0].shape[-1] == z.vocab_size]
        first = last = to_v[0] if to_v else None
    embed = [s for s in shown if first is None or s.index < first]
    after = [s for s in shown if last is not None and s.index >= last]
    in_embed, in_after = {s.index for s in embed}, {s.index for s in after}
    model_labels = mp.label_outside(rec, embed, "embed", z.vocab_size, z.d_model)
    tail = mp.label_outside(rec, after, "final", z.vocab_size, z.d_model)
    mp.mark_hand_norms(rec, after, tail)
    model_labels.update(tail)
    data = {s.index for s in rec.data_steps()}
    head = next((i for i, (lab, _) in tail.items() if lab in ("head", "tied_head")), None)
    first_dev = devs[0]["step"] if devs else None
    also = {d["step"] for d in devs}
    rows = []
    for s in mine:
        if first is not None and last is not None and first <= s.index < last:
            part = "block"
            if not s.data:
                continue
        elif s.index in in_embed:
            part = "embed"
        elif s.index in in_after:
            part = "loss" if head is not None and s.index > head else "final"
        else:
            continue
        kind, role = labels.get(s.index, ("", ""))
        lab, detail = model_labels.get(s.index, ("", ""))
        if part == "block" and not lab and kind in ("", "cast") and mp.position_enters(s, rec, data):
            lab = "pos_in"
        if part == "block" and not kind and s.op == "multi_head_attention_forward":
            kind = "fused"  # torch's nn.MultiheadAttention: one call
        deviation = "first" if s.index == first_dev else "also" if s.index in also else ""
        rows.append(mp.ModelRow.of_step(s, kind, role, deviation, _dims, part=part, label=lab, detail=detail))
    return rows


def trace_if_model(target: Any, kind: str = "auto", factory: str | None = None, **options: Any) -> ModelTrace | None:
    """The model's table when ``target`` is a whole language model (``kind="lm"``, or ``"auto"`` and it is built
    as one: ``doctor/model/dispatch.py``, then holds a token embedding); ``None`` for a module (``kind="module"``, or
    found so): the learner trace applies. ``options``: :func:`trace_model`'s."""
    if kind not in MODULE_KINDS + ("auto", "lm"):
        raise CheckError(f"kind must be one of auto, {', '.join(MODULE_KINDS)}, lm, got {kind!r}")
    if kind in MODULE_KINDS:
        return None
    if kind == "auto" and not is_model_target(target, factory):
        return None  # read without running the file (doctor/model/dispatch.py): the module trace's turn
    try:
        return trace_model(target, factory=factory, **options)
    except NotAModel:
        if kind == "auto":
            return None
        raise
