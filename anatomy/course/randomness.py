"""Dropout left on at evaluation in a function exercise: the same call, twice, gives two answers.

``F.dropout(w, 0.1)`` trains by default (``training=True``), so a function that calls it is random whatever mode
the model is in. The learner's function is called again under two seeds; outputs that differ are named
``dropout_at_eval``, at the learner's line that calls dropout."""

from __future__ import annotations

import torch

from anatomy.course.compare import as_tensors, source_line
from anatomy.course.grader import Result, Subject, run_guarded
from anatomy.course.probe import Run


def random_outputs(result: Result, module: Subject, runs: list[Run], timeout: float | None) -> Result | None:
    """The finding when a call of the learner's function gives two different outputs under two seeds, else None."""
    from anatomy.course import block_words

    for call, *_ in runs:
        fn = getattr(module, call.entry)
        outs = []
        for seed in (1, 2):
            torch.manual_seed(seed)
            what = (f"{call.entry} (called again)", f"{call.entry}（再次调用）")
            outs.append(as_tensors(run_guarded(fn, call.args, what, timeout, record=False)[0]))
        if any(
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and not torch.equal(a.nan_to_num(0), b.nan_to_num(0))
            for a, b in zip(*outs)
        ):
            line, source = source_line(module, call.entry, r"dropout")
            f = block_words.finding("dropout_at_eval", line, source)
            result.pitfall = f.pitfall
            result.point(line, source)
            result.brief(*f.what)
            if f.post[0]:  # the post says nothing of some pitfalls
                result.brief(f"the post: 「{f.post[0]}」", f"原文：「{f.post[0]}」")
            result.brief(f"hint: {f.hint[0]}", f"提示：{f.hint[1]}")
            result.say(f"pitfall `{f.pitfall}` — {f.what[0]}", f"坑 `{f.pitfall}` —— {f.what[1]}")
            result.say(f"hint: {f.hint[0]}", f"提示：{f.hint[1]}")
            return result
    return None
