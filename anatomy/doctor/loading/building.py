"""Loading and building the learner's module: its file executed from its path (never written: no ``__pycache__``
next to it), the target resolved to a class or a factory, the module built as ``CLASS(d_model, n_heads)`` under a
forked RNG, and its parameters seeded so that no fault hides behind an identity initialisation."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import inspect
import math
import sys
import types
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from anatomy.doctor.loading.limits import Hung, guard
from anatomy.doctor.loading.subject import CheckError, CheckTimeout, ModuleExited, _quiet, one_line

Target = str | nn.Module | Callable[..., object]  # "FILE.py:CLASS", a module instance, a class or a factory


def import_file(path: str | Path, timeout: float | None = None) -> types.ModuleType:
    """Execute a Python file as a fresh module without writing bytecode next to it and without registering it.
    Its top-level code runs under the time limit ``timeout`` (seconds; :class:`CheckTimeout` past it)."""
    path = Path(path)
    if path.suffix != ".py":
        raise CheckError(f"expected a Python file FILE.py, got {str(path)!r}")
    if not path.is_file():
        raise CheckError(f"no such file: {str(path)!r}")
    packages = _packages_above(path)
    prefix = f"_anatomy_doctor_{uuid.uuid4().hex[:8]}"
    if packages:  # a module of a package (`from .attention import ...`): imported as one, under a name of its own
        name = ".".join([prefix, *(p.name for p in packages[1:]), path.stem])
    else:
        name = f"_anatomy_doctor_{path.stem}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CheckError(f"cannot import {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    saved_flag, folder = sys.dont_write_bytecode, str(path.resolve().parent)
    # the learner's file may import its neighbours, and a package's module its own package by name (`from gemma import
    # config`): the folder above the outermost package is searched too
    folders = [folder] + ([str(packages[0].parent)] if packages else [])
    sys.dont_write_bytecode = True
    for one in reversed(folders):
        sys.path.insert(0, one)
    before = set(sys.modules)
    try:
        with (
            _quiet(),
            guard(
                timeout,
                lambda: (
                    f"importing {path.name} (the code at the top level of the file)",
                    f"导入 {path.name}（文件顶层的代码）时",
                ),
            ),
        ):
            _register_packages(prefix, packages)
            if name in sys.modules:  # the package's __init__.py imported it already: that copy is the one
                module = sys.modules[name]
            else:
                sys.modules[name] = module  # dataclasses and typing look the module up while it executes
                spec.loader.exec_module(module)
    except Hung as hung:
        raise CheckTimeout.from_hung(hung) from None
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # noqa: BLE001 - a learner's file may even call sys.exit
        raise CheckError(f"could not import {path.name}: {one_line(err)}") from None
    finally:
        sys.dont_write_bytecode = saved_flag
        for one in folders:
            with contextlib.suppress(ValueError):
                sys.path.remove(one)
        sys.modules.pop(name, None)
        _forget(set(sys.modules) - before, prefix, Path(folders[-1]))
    return module


def _forget(new: set[str], prefix: str, root: Path) -> None:
    """Drop the modules this import added from the learner's folders (the package under ``prefix``, and what its
    code imported by name: ``from src import norm``), so that the next file checked finds its own, not these."""
    for name in new:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None)
        inside = where is not None and Path(where).resolve().is_relative_to(root.resolve())
        if name == prefix or name.startswith(prefix + ".") or inside:
            sys.modules.pop(name, None)


def _packages_above(path: Path) -> list[Path]:
    """The folders holding ``path`` that are packages (an ``__init__.py`` each), outermost first; empty for a plain
    script."""
    chain: list[Path] = []
    folder = path.resolve().parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        chain.insert(0, folder)
        folder = folder.parent
    return chain


def _register_packages(prefix: str, packages: list[Path]) -> None:
    """Make ``prefix`` (and ``prefix.sub`` ...) the packages of ``packages``, so that the module's relative imports
    find their neighbours there, each executed once like any package (its ``__init__.py`` included)."""
    for depth, folder in enumerate(packages):
        dotted = ".".join([prefix, *(p.name for p in packages[1 : depth + 1])])
        spec = importlib.util.spec_from_file_location(
            dotted, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        if spec is None or spec.loader is None:
            raise CheckError(f"cannot import the package {str(folder)!r}")
        package = importlib.util.module_from_spec(spec)
        sys.modules[dotted] = package
        spec.loader.exec_module(package)


def resolve_target(
    target: Target, factory: str | None = None, timeout: float | None = None
) -> tuple[Callable[..., object] | nn.Module, str, str]:
    """``target`` → (the thing to call with ``(d_model, n_heads)`` or a module instance, label, its name)."""
    if isinstance(target, nn.Module):
        return target, type(target).__name__, type(target).__name__
    if callable(target) and not isinstance(target, str):
        name = getattr(target, "__name__", type(target).__name__)
        return target, name, name
    if not isinstance(target, str):
        raise CheckError(f"expected FILE.py:CLASS, a class, a factory or a module, got {type(target).__name__}")
    path, sep, name = target.rpartition(":")
    if not sep or not path:
        path, name = target, ""
    if factory:
        name = factory
    if not name:
        raise CheckError(f"expected FILE.py:CLASS (or --factory FUNC), got {target!r}")
    module = import_file(path, timeout)
    if not hasattr(module, name):
        public = sorted(
            n
            for n, v in vars(module).items()
            if not n.startswith("_")
            and (inspect.isclass(v) or inspect.isfunction(v))
            and getattr(v, "__module__", None) == module.__name__
        )
        raise CheckError(f"{Path(path).name} has no {name!r}; it defines: {', '.join(public) or 'nothing public'}")
    return getattr(module, name), f"{Path(path).name}:{name}", name


def construct(
    obj: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    shown: str,
    name: str,
    label: str,
    what: tuple[str, str],
    how: str,
    seed: int,
    timeout: float | None,
) -> nn.Module:
    """``obj(*args, **kwargs)`` under a forked RNG seeded with ``seed`` and the time limit ``timeout``; a hang, an exit
    or an error is one line naming the call (``shown``: its arguments as written) and ``how`` the doctor builds
    ``what`` (en, zh: the module, the model)."""
    step = (f"{label}: {name}({shown}) (building the {what[0]})", f"{label}：构造{what[1]} {name}({shown}) 时")
    try:
        with _quiet(), torch.random.fork_rng(devices=[]), guard(timeout, lambda: step):
            torch.manual_seed(seed)
            built = obj(*args, **kwargs)
    except Hung as hung:
        raise CheckTimeout.from_hung(hung) from None
    except SystemExit as err:
        raise ModuleExited(
            step[0].replace(f" (building the {what[0]})", f", building the {what[0]},"), err.code, step[1]
        ) from None
    except Exception as err:  # noqa: BLE001
        raise CheckError(
            f"{name}({shown}) failed: {one_line(err)}; the doctor builds {how} "
            "(use --factory FUNC for another signature)"
        ) from None
    if not isinstance(built, nn.Module):
        raise CheckError(f"{name}({shown}) returned {type(built).__name__}; expected a torch.nn.Module")
    return built


def build(
    target: Target, factory: str | None, d_model: int, n_heads: int, seed: int = 0, timeout: float | None = None
) -> tuple[nn.Module, str]:
    """The learner's module in float64 and eval mode. It is built under a forked, seeded RNG: the same module every
    time (its initial values stay as built where :func:`randomize` leaves them), and the caller's RNG untouched.
    Importing the file and building the module each run under the time limit ``timeout`` (seconds)."""
    obj, label, name = resolve_target(target, factory, timeout)
    built: object
    if isinstance(obj, nn.Module):
        built = copy.deepcopy(obj)  # never change the caller's instance
    else:
        how = "FUNC(d_model, n_heads)" if factory else "CLASS(d_model, n_heads)"
        built = construct(
            obj, (d_model, n_heads), {}, f"{d_model}, {n_heads}", name, label, ("module", "模块"), how, seed, timeout
        )
    assert isinstance(built, nn.Module)  # a copied instance, or checked above
    try:
        module = built.double().eval()
    except Exception as err:  # noqa: BLE001
        raise CheckError(f"could not move {name} to float64: {one_line(err)}") from None
    return module, label


def randomize(module: nn.Module, d_model: int, seed: int) -> None:
    """Give every parameter seeded, lively values so that no fault hides behind an identity initialisation.

    Matrices get N(0, 1/fan_in) (so q·k has variance ~Dh before scaling), gains that start at 1 get 1 + N(0, 0.2),
    biases that start at 0 get N(0, 0.2), a small constant
    gain (LayerScale's ``1e-5 * ones``) gets 1 + N(0, 0.2) too. Scalars (a learned temperature, say) are left alone.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if p.numel() <= 1:
                continue
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype)
            if p.dim() == 2:
                p.copy_(noise / math.sqrt(p.shape[-1]))
            elif p.dim() > 2:
                p.copy_(noise / math.sqrt(d_model))
            elif bool((p == 1).all()):
                p.copy_(1 + 0.2 * noise)
            elif bool((p == 0).all()):
                p.copy_(0.2 * noise)
            elif p.dim() == 1 and bool((p == p[0]).all()) and 0 < abs(float(p[0])) < 0.1:
                p.copy_(1 + 0.2 * noise)  # a small constant gain (LayerScale's 1e-5 * ones) would hide its branch
