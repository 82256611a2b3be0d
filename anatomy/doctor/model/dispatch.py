"""Is the target a whole language model? Decided without running the learner's file twice: a ``FILE.py:CLASS``
target is read with ``ast`` (its ``__init__``'s arguments), a class, factory or module by its signature or its
sub-modules (``build.looks_like_model``). With ``kind="auto"`` a model that cannot be built is handed back to the
block doctor (``None``), unless it was built and holds an embedding: then its error is the model's."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from anatomy.doctor.loading.subject import CheckError, CheckTimeout, ModuleExited
from anatomy.doctor.model.blocks import BlockCheck
from anatomy.doctor.model.build import SYNONYMS, Sizes, looks_like_model
from anatomy.doctor.model.report import ModelReport

__anatomy_transparent__ = True


def _init_args(tree: ast.Module, name: str, depth: int = 0) -> list[tuple[str, bool]] | None:
    """(argument, has a default) of ``name``'s ``__init__`` (a class) or of ``name`` (a function), without self; a
    class without one inherits its first base's that this file defines (``class ScaledTwice(Gemma3ForCausalLM)``)."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            init = next(
                (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"),
                None,
            )
            if init is None:
                got = _dataclass_args(node)
                if got is None and depth < 8:
                    bases = (b.id for b in node.bases if isinstance(b, ast.Name))
                    got = next((a for b in bases if (a := _init_args(tree, b, depth + 1)) is not None), None)
                return got
            return _args(init.args, skip_first=True)
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return _args(node.args, skip_first=False)
    return None


def _dataclass_args(node: ast.ClassDef) -> list[tuple[str, bool]] | None:
    if not any("dataclass" in ast.unparse(d) for d in node.decorator_list):
        return None
    return [
        (s.target.id, s.value is not None)
        for s in node.body
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
    ]


def _args(a: ast.arguments, skip_first: bool) -> list[tuple[str, bool]]:
    pos = a.posonlyargs + a.args
    defaults = [False] * (len(pos) - len(a.defaults)) + [True] * len(a.defaults)
    out = [(p.arg, d) for p, d in zip(pos, defaults)][1 if skip_first else 0 :]
    return out + [(p.arg, d is not None) for p, d in zip(a.kwonlyargs, a.kw_defaults)]


def _looks_like(args: list[tuple[str, bool]], is_class: bool) -> bool:
    names = {n.lower() for n, _ in args}
    if names & set(SYNONYMS["vocab_size"]):
        return True
    req = [n for n, d in args if not d]
    if not req:
        return True  # a class or factory of no arguments: its own sizes (a block needs d_model and n_heads)
    size_names = {n for role in SYNONYMS.values() for n in role}
    return (len(req) == 1 and req[0].lower() not in size_names) or len(req) >= 3


def is_model_target(target: Any, factory: str | None) -> bool:
    """Worth trying as a model (the module docstring); False when the file cannot be read (the block doctor
    then says why)."""
    if not isinstance(target, str):
        try:
            return looks_like_model(target)
        except Exception:  # noqa: BLE001 - an odd object: the block doctor says what it expected
            return False
    path, sep, name = target.rpartition(":")
    if not sep:
        path, name = target, ""
    name = factory or name
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return False
    args = _init_args(tree, name) if name else None
    if args is None:
        return False
    return _looks_like(
        args, is_class=factory is None and any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body)
    )


def model_check(
    target: Any,
    *,
    kind: str,
    factory: str | None,
    sizes: Sizes,
    seed: int,
    timeout: float | None,
    block_check: BlockCheck,
) -> ModelReport | None:
    """The model's report, or None when ``kind="auto"`` and the target is not a model (the block doctor's turn).
    ``block_check`` is the block doctor's ``check``, handed in (the block doctor imports this package)."""
    from anatomy.doctor.model.check import check_model

    if kind == "auto" and not is_model_target(target, factory):
        return None
    try:
        return check_model(target, factory=factory, sizes=sizes, seed=seed, timeout=timeout, block_check=block_check)
    except (CheckTimeout, ModuleExited):
        raise  # the file hung or ended the process: trying it again as a block would only do it again
    except CheckError as err:
        if kind == "lm" or getattr(err, "model_built", False) or (_built_badly(err) and _config_only(target, factory)):
            raise
        return None


def _built_badly(err: CheckError) -> bool:
    """The error was raised by the model's constructor (``construct``'s message), not by its forward: a block taking a
    config, built as a model and then fed ids, is the block doctor's to say."""
    return " failed: " in str(err) and "the doctor builds" in str(err)


def _config_only(target: Any, factory: str | None) -> bool:
    """A class built from one config argument named so (``GemmaForCausalLM(config)``): the block doctor's
    ``CLASS(d_model, n_heads)`` cannot build it either, so the model's own error is the one to say."""
    if not isinstance(target, str) or factory:
        return False
    path, sep, name = target.rpartition(":")
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return False
    args = _init_args(tree, name) if sep and name else None
    req = [n for n, d in args or [] if not d]
    return len(req) == 1 and any(w in req[0].lower() for w in ("config", "cfg", "args", "params", "hparams"))


def model_sizes(
    vocab_size: int | None, d_model: int, n_heads: int, n_layers: int | None, block_size: int | None
) -> Sizes:
    """The sizes a model is built with: the caller's, else :class:`Sizes`' defaults."""
    base = Sizes()
    for name, value in (("vocab_size", vocab_size), ("n_layers", n_layers), ("block_size", block_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise CheckError(f"{name} must be a positive integer, got {value!r}")
    return Sizes(
        vocab_size=vocab_size or base.vocab_size,
        d_model=d_model,
        n_heads=n_heads,
        n_layers=n_layers or base.n_layers,
        block_size=block_size or base.block_size,
    )
