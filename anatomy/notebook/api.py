"""``anatomy.check(obj)`` and ``anatomy.trace(obj)``: the doctor and the shape table for an object, not a file.

    import anatomy

    class MyAttention(nn.Module): ...            # typed into a notebook cell, a REPL, or imported from a file
    anatomy.check(MyAttention)                   # built as MyAttention(16, 4); pass, or the pitfall and its line
    anatomy.check(lambda d, h: MyAttention(d, h, causal=True), causal=True, timeout=10)
    anatomy.check(my_block_instance, kind="block", seq_first=True)
    anatomy.trace(MyAttention)                   # the post's §5.1 table for your code, one row per step

``obj`` is a class or factory called as ``(d_model, n_heads)``, a module instance (copied, never changed), or the
command line's ``"FILE.py:CLASS"``. The keywords are the command line's options (``anatomy check --help``):
``kind``, ``d_model``, ``n_heads`` (``heads`` too), ``causal``, ``seq_first``, ``factory``, ``mapping``, ``seed``,
``timeout``, ``lang``, ``strict``. Bad options raise ``ValueError`` with one line naming the option; a module that
cannot be checked (it fails to build or run, a step hangs past ``timeout``, it ends its process) gives a result
whose ``verdict`` is ``"error"`` and whose text is the command line's one line.

The check runs in a process of its own (``process.py``: a fork, so a class that exists only in the notebook's
memory is there too), under the doctor's time limits, with a watchdog that stops a forward hung in C code.
``isolate=False`` runs it in this process (the doctor's in-process limits only).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from anatomy.notebook import cells
from anatomy.notebook.copying import copy_refusal, uncopyable
from anatomy.notebook.process import isolated
from anatomy.notebook.results import CheckResult, TraceResult

KINDS = ("auto", "attention", "block", "lm")  # lm: a whole language model (doctor/model/)
LANGS = ("en", "zh")


def _label(obj: Any) -> str:
    if isinstance(obj, str):
        return obj
    if isinstance(obj, type) or callable(obj) and hasattr(obj, "__name__") and not hasattr(obj, "forward"):
        return str(getattr(obj, "__qualname__", None) or getattr(obj, "__name__", type(obj).__name__))
    return type(obj).__name__


def _timeout(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not timeout >= 0
        or timeout == float("inf")
    ):
        raise ValueError(f"timeout must be a number of seconds >= 0 (0 or None: no limit), got {timeout!r}")
    return float(timeout) or None


def _options(lang: str, d_model: int, n_heads: int, heads: int | None, **sizes: int) -> int:
    from anatomy.doctor.loading.isolation import require_sizes

    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    if heads is not None:
        n_heads = heads
    require_sizes(d_model, n_heads, **sizes)
    return n_heads


def check(
    obj: Any,
    *,
    kind: str = "auto",
    d_model: int = 16,
    n_heads: int = 4,
    heads: int | None = None,
    causal: bool = False,
    seq_first: bool | None = None,
    factory: str | None = None,
    mapping: dict | None = None,
    seed: int = 0,
    timeout: float | None = 60.0,
    lang: str = "en",
    strict: bool = False,
    isolate: bool | None = None,
) -> CheckResult:
    """Diagnose ``obj`` as ``anatomy check`` does (see the module docstring); the result prints as its text."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if seq_first is not None and not isinstance(seq_first, bool):
        raise ValueError(f"seq_first must be True, False or None (detect), got {seq_first!r}")
    if mapping is not None and not isinstance(mapping, dict):
        raise ValueError(
            f"mapping must be a dict {{reference parameter: your parameter}}, got {type(mapping).__name__}"
        )
    limit = _timeout(timeout)
    n_heads = _options(lang, d_model, n_heads, heads)

    def run() -> Any:
        from anatomy.doctor import check as doctor_check

        try:
            report = doctor_check(
                obj,
                kind=kind,
                d_model=d_model,
                n_heads=n_heads,
                causal=bool(causal),
                factory=factory,
                mapping=mapping,
                seed=seed,
                timeout=limit,
                seq_first=seq_first,
            )
        except TypeError as err:  # the doctor copies an instance: name what cannot be copied
            found = uncopyable(obj) if "pickle" in str(err) or "copy" in str(err) else None
            if found is None:
                raise
            from anatomy.doctor import CheckError

            raise CheckError(copy_refusal(_label(obj), *found)) from None
        return cells.name_cells(report)

    answer = isolated(run, isolate=isolate)
    return CheckResult(_label(obj), answer.value, answer.error, answer.isolation, lang, strict)


def trace(
    obj: Any,
    *,
    d_model: int = 20,
    n_heads: int = 5,
    heads: int | None = None,
    batch: int = 2,
    seq: int = 7,
    factory: str | None = None,
    seed: int = 0,
    timeout: float | None = 60.0,
    lang: str = "en",
    isolate: bool | None = None,
) -> TraceResult:
    """The post's §5.1 shape table for ``obj``'s own forward, as ``anatomy trace FILE.py:CLASS`` prints it; each
    row names the notebook cell of its line. Sizes default to the command line's (D=20, H=5, B=2, T=7)."""
    limit = _timeout(timeout)
    n_heads = _options(lang, d_model, n_heads, heads, batch=batch, seq=seq)

    def run() -> Any:
        from anatomy.doctor import trace_learner

        table = trace_learner(
            obj, factory=factory, d_model=d_model, n_heads=n_heads, batch=batch, seq=seq, seed=seed, timeout=limit
        )
        where = cells.trace_cells(table)
        return dataclasses.replace(table, recording=None), where  # type: ignore[arg-type] # the recording stays behind (tensors, hooks)

    answer = isolated(run, isolate=isolate)
    table, where = answer.value if answer.value is not None else (None, [])
    return TraceResult(_label(obj), table, where, answer.error, answer.isolation, lang)
