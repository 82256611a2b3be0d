"""What a Hugging Face directory's files say, checked before ``anatomy convert`` builds anything from them.

    check_json_files(hf_dir)                                # config.json etc. read by anatomy.files.read_json
    check_sizes(hf_config, tensors, source=...)             # sizes against the weights' own shapes
    check_memory(hf_config, config, source=...)             # the model built from them fits in memory
    check_finite(tensors, source=...)                       # NaN / inf in a weight, named
    check_files(hf_dir, hf_config, generation, tensors)     # bos / eos ids outside the vocabulary: warnings
    special_map_problems(hf_dir, tokenizer)                 # special_tokens_map.json's tokens not in the tokenizer

A ``config.json`` whose ``vocab_size`` says 10**9 (or ``n_embd`` 10**6, ``n_positions`` 10**12, ``n_layer``
10**5) once reached the allocator, or built for half a minute before "out of memory"; every field the weights
determine is now compared with the weights' shapes first, and a refusal names the file's own field
(``config.json: n_embd``), not ours. Every check raises :class:`~anatomy.errors.CheckpointError` with one line;
special ids outside the vocabulary are warned about, one line each (HF loads them, and tiny test models hold them).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from anatomy.errors import CheckpointError
from anatomy.sizes import SizeError, _refuse_over, human, parameter_count

JSON_FILES = ("config.json", "generation_config.json", "special_tokens_map.json", "tokenizer_config.json")
FIELDS = {  # our field -> the names Hugging Face's configs give it, in the order they are looked for
    "vocab_size": ("vocab_size",),
    "d_model": ("n_embd", "hidden_size", "d_model", "dim"),
    "max_seq_len": ("n_positions", "max_position_embeddings", "n_ctx"),
    "n_layers": ("n_layer", "num_hidden_layers", "num_layers", "n_layers"),
    "decoder_layers": ("num_decoder_layers",),
    "n_heads": ("n_head", "num_attention_heads", "num_heads"),
}
EMBEDDINGS = ("wte.weight", "embed_tokens.weight", "embed_in.weight", "word_embeddings.weight", "shared.weight")
POSITIONS = ("wpe.weight", "position_embeddings.weight", "embed_positions.weight")
LAYER = re.compile(r"^(.*?\.(?:h|layers|layer|block))\.(\d+)\.")


JSON_WHAT = {  # what each file must be, in the words load_pretrained's read of it uses (safetensors_io)
    "config.json": "a JSON object (the model's configuration)",
    "generation_config.json": "a JSON object (Hugging Face's generation defaults)",
}


def check_json_files(directory: str | Path) -> None:
    """Each small JSON file of the directory read as every JSON file is read (``anatomy.files.read_json``: bounded,
    UTF-8, nested at most ``DEPTH`` deep, an object), before anything is built from them: a ``CheckpointError``
    with read_json's one line naming the file (nested 100000 deep, Python's parser once ended in a
    ``RecursionError``)."""
    from anatomy.files import BadJSON, read_json

    for name in JSON_FILES:
        path = Path(directory) / name
        if not path.is_file():
            continue
        try:
            read_json(path, what=JSON_WHAT.get(name), finite=name == "config.json")
        except BadJSON as err:
            raise CheckpointError(str(err)) from None
        except OSError as err:  # vanished between the look and the read
            raise CheckpointError(f"{path}: cannot be read ({err.strerror or err})") from None


def _find(tensors: dict[str, torch.Tensor], endings: tuple[str, ...]) -> tuple[str, torch.Tensor] | None:
    for key, value in tensors.items():
        if key.endswith(endings) and value.dim() == 2:
            return key, value
    return None


def _layers(tensors: dict[str, torch.Tensor]) -> int:
    """How many numbered layers the weights hold, over every stack (``h.0``, ``encoder.block.3``...)."""
    return len({(m.group(1), m.group(2)) for m in map(LAYER.match, tensors) if m is not None})


def _raw(hf_config: dict[str, Any], ours: str) -> tuple[str, Any]:
    """(the file's field name, its value) for our field ``ours``; (ours, None) when the file has none."""
    for name in FIELDS.get(ours, ()):
        if name in hf_config:
            return name, hf_config[name]
    return ours, None


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_sizes(hf_config: dict[str, Any], tensors: dict[str, torch.Tensor], *, source: str = "") -> None:
    """The sizes ``config.json`` gives against the weights' own shapes, before a ``ModelConfig`` is made from them
    (its own checks would name our fields, not the file's)."""
    where = f"{source}: " if source else ""

    def check(ours: str, ok: Callable[[int], bool], what: str) -> None:
        name, value = _raw(hf_config, ours)
        if _int(value) and not ok(value):
            raise CheckpointError(f"{where}config.json: {name} is {value}, but {what}")

    embedding = _find(tensors, EMBEDDINGS)
    if embedding is not None:
        key, w = embedding
        rows, width = int(w.shape[0]), int(w.shape[1])
        check("vocab_size", lambda v: v == rows, f"the weights' {key} has {rows} rows (one per token)")
        check("d_model", lambda v: v == width, f"the weights' {key} has {width} columns (the model's width)")
    positions = _find(tensors, POSITIONS)
    if positions is not None:
        key, w = positions
        rows = int(w.shape[0])
        check("max_seq_len", lambda v: v <= rows, f"the weights' {key} has {rows} rows (one per position)")
    held = _layers(tensors)
    if held:
        what = f"the weights hold {held} numbered layers"
        check("n_layers", lambda v: v <= held, what)
        check("decoder_layers", lambda v: v <= held, what)
    _, width_value = _raw(hf_config, "d_model")
    if _int(width_value):
        check(
            "n_heads", lambda v: 1 <= v <= width_value, f"a model of width {width_value} has 1 to {width_value} heads"
        )


def check_memory(hf_config: dict[str, Any], config: Any, *, source: str = "", available: int | None = None) -> None:
    """The model built from ``config`` must fit in memory (parameters in float32, position tables)."""
    params = parameter_count(config)
    tables = 2 * config.max_seq_len * config.dh * 4  # position tables (RoPE's cos and sin, sinusoids), float32
    names = ", ".join(_raw(hf_config, f)[0] for f in ("vocab_size", "d_model", "n_layers", "max_seq_len"))
    try:
        _refuse_over(
            params * 4 + tables,
            what="building the model",
            part=f"{params:,} parameters in float32, position tables {human(tables)}",
            flags=f"config.json's {names}",
            available=available,
        )
    except SizeError as err:
        raise CheckpointError(f"{source + ': ' if source else ''}{err}") from None


def check_finite(tensors: dict[str, torch.Tensor], *, source: str = "") -> None:
    """No weight holds NaN or inf: the converted model would compute NaN from the first layer that reads it."""
    for key, value in tensors.items():
        if value.is_floating_point() and value.numel() and not bool(torch.isfinite(value).all()):
            nan = int(torch.isnan(value).sum())
            inf = int(torch.isinf(value).sum())
            raise CheckpointError(
                f"{source + ': ' if source else ''}the weight {key!r} holds {nan} NaN and {inf} infinite value(s) "
                f"of {value.numel()}; a converted model would compute NaN"
            )


def _ids(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def special_id_problems(
    hf_config: dict[str, Any], generation: dict[str, Any] | None, vocab: int, *, source: str = ""
) -> list[str]:
    """Each bos / eos / decoder-start id ``config.json`` or ``generation_config.json`` names outside the weights'
    vocabulary, as one line naming file and field. Not refused: a ``GPT2Config(vocab_size=100)`` keeps HF's
    default eos 50256, tiny test models are full of them, and HF loads them; but generation will never stop at it."""
    where = f"{source}/" if source else ""
    out = []
    for name, data in (("generation_config.json", generation), ("config.json", hf_config)):
        for key in ("bos_token_id", "eos_token_id", "decoder_start_token_id"):
            for ident in _ids((data or {}).get(key)):
                if isinstance(ident, int) and not isinstance(ident, bool) and not 0 <= ident < vocab:
                    out.append(
                        f"{where}{name}: {key} {ident} is outside the vocabulary [0, {vocab}) of the weights: "
                        "no token can be that id"
                        + (", so generation never stops at it" if key == "eos_token_id" else "")
                    )
    return out


def special_map_problems(directory: str | Path, tokenizer: Any) -> list[str]:
    """Each token ``special_tokens_map.json`` names (``eos_token``...) that the tokenizer's vocabulary lacks (the
    converted tokenizer then has no such role, and generation does not stop at it), as one line."""
    path = Path(directory) / "special_tokens_map.json"
    inner = getattr(tokenizer, "tokenizer", None)
    if not path.is_file() or inner is None or not hasattr(inner, "token_to_id"):
        return []
    from anatomy.files import read_json

    try:
        data = read_json(path)
    except (OSError, ValueError) as err:  # BadJSON: one line naming the file
        raise CheckpointError(str(err) if str(path) in str(err) else f"{path}: cannot be read ({err})") from None
    out = []
    for role in ("bos_token", "eos_token", "pad_token", "unk_token"):
        value = data.get(role)
        token = value.get("content") if isinstance(value, dict) else value
        if isinstance(token, str) and inner.token_to_id(token) is None:
            out.append(
                f"{path}: {role} {token!r} is not in the tokenizer's vocabulary: the converted tokenizer has none"
            )
    return out


def check_checkpoint(
    hf_config: dict[str, Any], tensors: dict[str, torch.Tensor], generation: dict[str, Any] | None, source: str
) -> None:
    """The checks of this module on the config and weights as read, before a ``ModelConfig`` is made, cheapest
    first. The special ids are looked at by ``anatomy convert`` (:func:`check_files`): an in-memory HF model built
    from a bare ``GPT2Config(vocab_size=100)`` keeps HF's default eos 50256, which HF accepts, and so does
    ``from_hf``."""
    check_sizes(hf_config, tensors, source=source)
    check_finite(tensors, source=source)


def check_files(
    directory: str | Path,
    hf_config: dict[str, Any],
    generation: dict[str, Any] | None,
    tensors: dict[str, torch.Tensor],
) -> list[str]:
    """``anatomy convert``'s look at the ids ``config.json`` and ``generation_config.json`` name (bos, eos,
    decoder start) against the weights' vocabulary: the lines to warn with."""
    embedding = _find(tensors, EMBEDDINGS)
    if embedding is None:
        return []
    return special_id_problems(hf_config, generation, int(embedding[1].shape[0]), source=str(directory))
