"""Building the learner's language model: ``CLASS(vocab_size, d_model, n_heads, n_layers, block_size)`` by keyword
(under the names people use: ``n_embd``, ``dim``, ``n_layer``, ``max_seq_len``...) or by position, a config
class found in the same file when ``__init__`` takes one argument (nanoGPT's ``GPTConfig``, LLaMA's ``ModelArgs``),
or a ``--factory`` function. The file is loaded by the block doctor's loader (``doctor/loading/building.py``)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from anatomy.doctor.loading.building import construct, resolve_target
from anatomy.doctor.loading.subject import CheckError, one_line

__anatomy_transparent__ = True

SYNONYMS: dict[str, tuple[str, ...]] = {  # our size -> the names learners give it (lower case)
    "vocab_size": (
        "vocab_size",
        "vocab",
        "n_vocab",
        "num_tokens",
        "ntoken",
        "ntokens",
        "vocab_len",
        "n_tokens",
        "vocab_sz",
        "num_embeddings",
        "token_size",
    ),
    "d_model": (
        "d_model",
        "n_embd",
        "n_embed",
        "embed_dim",
        "emb_dim",
        "dim",
        "hidden_size",
        "d_emb",
        "embedding_dim",
        "model_dim",
        "hidden_dim",
        "d_embed",
        "n_embedding",
        "embed_size",
        "emb_size",
    ),
    "n_heads": (
        "n_heads",
        "n_head",
        "num_heads",
        "nhead",
        "heads",
        "num_attention_heads",
        "n_attn_heads",
        "h",
        "head_num",
        "num_head",
        "nheads",
    ),
    "n_layers": (
        "n_layers",
        "n_layer",
        "num_layers",
        "nlayers",
        "layers",
        "depth",
        "num_hidden_layers",
        "num_blocks",
        "n_blocks",
        "n",
        "layer_num",
        "num_layer",
        "nlayer",
    ),
    "block_size": (
        "block_size",
        "max_len",
        "max_seq_len",
        "context_length",
        "context_len",
        "seq_len",
        "max_seq_length",
        "max_position_embeddings",
        "n_ctx",
        "ctx_len",
        "context_size",
        "max_length",
        "n_positions",
        "max_seq",
        "seq_length",
        "context_window",
        "ctx_size",
        "max_position",
        "max_positions",
        "maxlen",
    ),
    # key/value heads (grouped-query attention): set to n_heads, a divisor of itself; a default left larger than
    # our n_heads (tiny-llm-zh's 8, happy-llm's 8) makes n_heads // n_kv_heads = 0 groups: no keys at all
    "n_kv_heads": (
        "n_kv_heads",
        "num_key_value_heads",
        "num_kv_heads",
        "n_kv_head",
        "n_kv_groups",
        "n_query_groups",
        "num_kv_groups",
    ),
    "dropout": ("dropout", "dropout_rate", "drop", "p_drop", "pdrop", "resid_pdrop", "attn_pdrop", "embd_pdrop"),
}
ORDER = ("vocab_size", "d_model", "n_heads", "n_layers", "block_size")


@dataclass(frozen=True)
class Sizes:
    """The model the doctor builds: every size distinct, so that an axis mixed up cannot broadcast by luck."""

    vocab_size: int = 29
    d_model: int = 16
    n_heads: int = 4
    n_layers: int = 3
    block_size: int = 12
    dropout: float = 0.1  # passed where a dropout is required: a functional dropout left on in eval() shows

    def value(self, key: str) -> Any:
        return self.n_heads if key == "n_kv_heads" else getattr(self, key)

    def describe(self) -> str:
        return ", ".join(f"{k}={self.value(k)}" for k in ORDER)


ROUNDING = {"multiple_of": 8}  # config fields that round a width up, set to what suits the doctor's small sizes


def _role(name: str) -> str | None:
    low = name.lower()
    return next((role for role, names in SYNONYMS.items() if low in names), None)


def _params(fn: Callable[..., Any]) -> list[inspect.Parameter] | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return [
        p
        for p in sig.parameters.values()
        if p.name != "self" and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]


def _required(params: list[inspect.Parameter]) -> list[inspect.Parameter]:
    return [p for p in params if p.default is inspect.Parameter.empty]


def looks_like_model(obj: Any) -> bool:
    """Is ``obj`` (a class, a factory or a module) worth trying as a whole language model? A module holding an
    ``nn.Embedding``; a constructor that takes one argument (a config), a vocabulary size, or three or more."""
    if isinstance(obj, nn.Module):
        return any(isinstance(m, nn.Embedding) for m in obj.modules())
    params = _params(obj)
    if params is None:
        return False
    req = _required(params)
    if not req:
        return not inspect.isclass(obj)  # a factory of no arguments
    if any(_role(p.name) == "vocab_size" for p in params):
        return True
    return len(req) == 1 and _role(req[0].name) is None or len(req) >= 3


class _AnyConfig(dict[str, Any]):
    """A config the learner's code reads by attribute or by key, under any of the names in :data:`SYNONYMS`; a
    name it does not know reads as a neutral default (an ``eps``: 1e-5, a ``bias``: True, anything else: None)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self:
            return self[name]
        low = name.lower()
        if "eps" in low:
            return 1e-5
        if low == "bias" or low.startswith("use_bias"):
            return True
        return None


def _config_values(sizes: Sizes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for role, names in SYNONYMS.items():
        for n in names:
            out.setdefault(n, sizes.value(role))
    return out


def _config_class(module_vars: dict[str, Any], param: inspect.Parameter) -> type | None:
    ann = param.annotation
    if isinstance(ann, str):
        ann = module_vars.get(ann)
    if inspect.isclass(ann) and ann is not inspect.Parameter.empty and ann.__module__ not in ("builtins", "typing"):
        return ann
    found = [
        v
        for n, v in module_vars.items()
        if inspect.isclass(v)
        and not issubclass(v, nn.Module)
        and (dataclasses.is_dataclass(v) or any(w in n.lower() for w in ("config", "args", "cfg", "hparams")))
        and getattr(v, "__module__", None) == module_vars.get("__name__")
    ]
    return found[0] if len(found) == 1 else None


def make_config(cls: type | None, sizes: Sizes) -> Any:
    """An instance of the learner's config class with our sizes set on every field it names, or a namespace."""
    if cls is None:
        return _AnyConfig(_config_values(sizes))
    values = {}
    fields = (
        [f.name for f in dataclasses.fields(cls)]
        if dataclasses.is_dataclass(cls)
        else [p.name for p in _params(cls) or []]
        + [n for n in vars(cls) if not n.startswith("_") and not callable(getattr(cls, n))]
    )
    for name in fields:
        role = _role(name)
        if role is not None and role != "dropout":
            values[name] = sizes.value(role)
        elif name.lower() in ROUNDING:  # LLaMA's FFN width rounded up to a multiple of 256 (llm.c: 1024) would be
            values[name] = ROUNDING[name.lower()]  # 16-64 x d_model at the doctor's sizes
    init = {n: v for n, v in values.items() if n in {p.name for p in _params(cls) or []}}
    try:
        cfg = cls(**init)
    except Exception as err:  # noqa: BLE001 - the learner's config class
        raise CheckError(f"could not build the config {cls.__name__}(...): {one_line(err)}") from None
    for name, value in values.items():
        try:
            setattr(cfg, name, value)
        except Exception:  # noqa: BLE001, S112 - a frozen config keeps what its constructor was given
            continue
    return cfg


def _call_default(default: Callable[[], Any]) -> Any:
    try:
        return default()
    except Exception as err:  # noqa: BLE001 - the learner's own
        raise CheckError(f"get_default_config() failed: {one_line(err)}") from None


def _filled(cfg: Any, sizes: Sizes) -> Any:
    """The config with our sizes on every field it names (a ``model_type`` that would override them cleared)."""
    for name in list(vars(cfg)):
        role = _role(name)
        if role is not None and role != "dropout":
            setattr(cfg, name, sizes.value(role))
    if hasattr(cfg, "model_type"):
        cfg.model_type = None
    return cfg


def arguments(fn: Callable[..., Any], sizes: Sizes, module_vars: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """How to call ``fn`` (a class or a factory) with our sizes: (args, kwargs); a :class:`CheckError` when no
    rule fits its signature."""
    params = _params(fn)
    if params is None:
        return [], {}
    req = _required(params)
    roles = {p.name: _role(p.name) for p in params}
    if len(req) == 1 and roles[req[0].name] is None:
        default = getattr(fn, "get_default_config", None)  # minGPT: GPT.get_default_config() gives its CfgNode
        if inspect.isclass(fn) and callable(default):
            return [_filled(_call_default(default), sizes)], {}
        return [make_config(_config_class(module_vars, req[0]), sizes)], {}
    if all(roles[p.name] is not None for p in req):
        kw = {p.name: sizes.value(r) for p in params if (r := roles[p.name]) is not None and r != "dropout"}
        kw.update({p.name: sizes.dropout for p in req if roles[p.name] == "dropout"})
        return [], kw
    if len(req) == 5:
        return [sizes.value(k) for k in ORDER], {}
    names = ", ".join(p.name for p in req)
    raise CheckError(
        f"cannot tell how to build it from ({names}); expected CLASS(vocab_size, d_model, n_heads, n_layers, "
        "block_size), one config argument, or --factory FUNC"
    )


def build_model(
    target: Any, factory: str | None, sizes: Sizes, seed: int, timeout: float | None
) -> tuple[nn.Module, str]:
    """The learner's model in float64 and eval mode, built under a forked seeded RNG; :class:`CheckError` when it
    cannot be built."""
    obj, label, name = resolve_target(target, factory, timeout)
    if isinstance(obj, nn.Module):
        module = copy.deepcopy(obj)
    else:
        module_vars = vars(sys.modules[obj.__module__]) if obj.__module__ in sys.modules else {}
        module_vars = module_vars or getattr(obj, "__globals__", None) or _globals_of(obj)
        args, kwargs = arguments(obj, sizes, module_vars)
        module = _call(obj, name, label, args, kwargs, seed, timeout)
    try:
        return module.double().eval(), label
    except Exception as err:  # noqa: BLE001
        raise CheckError(f"could not move {name} to float64: {one_line(err)}") from None


def _globals_of(obj: Any) -> dict[str, Any]:
    init = getattr(obj, "__init__", None)
    return dict(getattr(init, "__globals__", {}) or {})


def _call(
    obj: Callable[..., Any],
    name: str,
    label: str,
    args: list[Any],
    kwargs: dict[str, Any],
    seed: int,
    timeout: float | None,
) -> nn.Module:
    shown = ", ".join([_show(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    how = "CLASS(vocab_size, d_model, n_heads, n_layers, block_size) or CLASS(config)"
    return construct(obj, tuple(args), kwargs, shown, name, label, ("model", "模型"), how, seed, timeout)


def _show(a: Any) -> str:
    if isinstance(a, _AnyConfig):
        return "config"
    if dataclasses.is_dataclass(a) or hasattr(a, "__dict__"):
        return f"{type(a).__name__}(...)"
    return repr(a)


def infer_sizes(module: nn.Module, asked: Sizes, n_layers: int | None) -> Sizes:
    """The sizes the built model really has (a factory or a zero-argument class keeps its own): the vocabulary and
    width of the embedding the head reads into, the longest input (a positional table, a square mask buffer), the
    heads (an attribute ``n_head``... of a block, or a ModuleList of heads); the asked sizes where nothing says."""
    embs = [m for m in module.modules() if isinstance(m, nn.Embedding)]
    heads = [m.out_features for m in module.modules() if isinstance(m, nn.Linear)]
    tok = next((e for e in embs if e.num_embeddings in heads), embs[0] if embs else None)
    if tok is None:
        return asked
    v, d = tok.num_embeddings, tok.embedding_dim
    longest = [e.num_embeddings - _offset(e) for e in embs if e is not tok and e.embedding_dim == d]
    longest += [
        b.shape[-1] for b in module.buffers() if b.dim() >= 2 and b.shape[-1] == b.shape[-2] and b.shape[-1] > 1
    ]
    block = min(longest) if longest else asked.block_size
    return Sizes(
        vocab_size=v,
        d_model=d,
        n_heads=_heads(module, d) or asked.n_heads,
        n_layers=n_layers or asked.n_layers,
        block_size=block,
        dropout=asked.dropout,
    )


def _offset(table: nn.Embedding) -> int:
    """Rows of a position table that no position uses: OPT's and BART's ``offset`` (2), fairseq's positions that
    start after ``padding_idx``."""
    offset = getattr(table, "offset", None)
    if isinstance(offset, int) and not isinstance(offset, bool) and 0 < offset < table.num_embeddings:
        return offset
    if table.padding_idx is not None and 0 <= table.padding_idx < table.num_embeddings - 1:
        return table.padding_idx + 1
    return 0


def _heads(module: nn.Module, d: int) -> int | None:
    for m in module.modules():
        for n in SYNONYMS["n_heads"]:
            v = getattr(m, n, None)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0 and d % v == 0:
                return v
        cfg = getattr(m, "config", None)
        for n in SYNONYMS["n_heads"] if cfg is not None else ():
            v = getattr(cfg, n, None)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0 and d % v == 0:
                return v
    for m in module.modules():
        if isinstance(m, nn.ModuleList) and len(m) > 1 and len({type(k) for k in m}) == 1 and d % len(m) == 0:
            kid = m[0]
            if any(isinstance(x, nn.Linear) and x.out_features == d // len(m) for x in kid.modules()):
                return len(m)
    return None
