"""Checkpoints on disk: ``config.json`` + ``model.safetensors``. Never pickle.

``save_pretrained(model, dir)`` writes one of our models; ``load_pretrained(dir)`` reads it back bit-exact, and
also reads a Hugging Face directory of a supported architecture (``anatomy.interop.hf.SUPPORTED``), single-file
or sharded (``model.safetensors.index.json`` + ``model-0000k-of-0000n.safetensors``), without importing
``transformers``.

Why never pickle: ``torch.load`` on a ``.bin``/``.pt`` file unpickles it, and unpickling runs whatever callable the
file names (``os.system``, ``builtins.open``, ...). safetensors is a JSON header plus raw bytes: reading it runs
nothing. This module therefore never opens a pickle file at all; it refuses it with a message that says how to
convert it where the file is trusted.

Tied weights: ``lm_head.weight is embed_tokens.weight`` in a tied model, and safetensors refuses to store two names
for one storage. We store each tensor once and record the other names in ``config.json`` (``"tied"``); the
builder ties them again on load.

Our ``config.json``::

    {"format": "anatomy", "format_version": 1, "anatomy_version": "0.1.0", "model_class": "DecoderLM",
     "dtype": "float32", "tied": {"lm_head.weight": "embeddings.embed_tokens.weight"}, "config": {...ModelConfig...}}
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from anatomy._version import __version__
from anatomy.config import ModelConfig
from anatomy.errors import CheckpointError
from anatomy.files import BadJSON, read_json
from anatomy.interop.tensor_files import read_tensor_file, save_tensor_file

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
FORMAT = "anatomy"
FORMAT_VERSION = 1
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
# Pickles beside the weights of a training checkpoint that hold training state, never weights: their presence does
# not make a directory "a pickle checkpoint" (anatomy.training.checkpoint reads them with weights_only=True).
TRAINING_STATE_PICKLES = ("optimizer.pt", "rng.pt")


def _weight_pickles(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.suffix in PICKLE_SUFFIXES and p.name not in TRAINING_STATE_PICKLES)


def _no_weights(d: Path) -> CheckpointError:
    state = [name for name in TRAINING_STATE_PICKLES if (d / name).is_file()]
    beside = f" ({', '.join(state)} beside it hold training state, not weights)" if state else ""
    return CheckpointError(
        f"{d / WEIGHTS_NAME}: missing{beside}; no {WEIGHTS_NAME} or {INDEX_NAME} found, the checkpoint is incomplete"
    )


# ------------------------------------------------------------------------------------------------ tensors


def unique_tensors(state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Split a state dict into tensors to store (each storage once, contiguous) and ``{alias: stored name}``.

    Two names are one tensor when they view the same memory the same way (tied weights). Other tensors that share
    a storage (views into one buffer) are copied, so safetensors never sees shared memory.
    """
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple[object, ...], str] = {}
    storages: set[int] = set()
    for name, t in state_dict.items():
        ident = (t.device.type, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        if t.numel() and ident in seen:
            aliases[name] = seen[ident]
            continue
        ptr = t.untyped_storage().data_ptr()
        shared = t.numel() and ptr in storages
        tensors[name] = t.detach().clone() if shared or not t.is_contiguous() else t.detach()
        if t.numel():
            seen[ident] = name
            storages.add(ptr)
    return tensors, aliases


def write_tensors(tensors: dict[str, torch.Tensor], directory: Path, *, max_shard_size: int | None = None) -> None:
    """``model.safetensors``, or shards + ``model.safetensors.index.json`` when larger than ``max_shard_size`` bytes."""
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    if max_shard_size is None or total <= max_shard_size:
        save_tensor_file(tensors, directory / WEIGHTS_NAME)
        return
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > max_shard_size:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nbytes
    weight_map = {}
    for k, shard in enumerate(shards, start=1):
        file = f"model-{k:05d}-of-{len(shards):05d}.safetensors"
        save_tensor_file(shard, directory / file)
        weight_map.update(dict.fromkeys(shard, file))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / INDEX_NAME).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def _refuse_pickle(path: Path) -> CheckpointError:
    return CheckpointError(
        f"{path}: refusing to read a pickle checkpoint; unpickling runs code named by the file. "
        "Convert it to safetensors where the file is trusted (transformers: model.save_pretrained(dir), "
        "which writes model.safetensors) and load that directory"
    )


def read_tensors(directory: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Every tensor of ``model.safetensors`` or of the shards listed in ``model.safetensors.index.json``."""
    d = Path(directory)
    single, index = d / WEIGHTS_NAME, d / INDEX_NAME
    if single.is_file():
        return read_tensor_file(single)
    if index.is_file():
        weight_map = _json(index, "a safetensors index (a JSON object with a weight_map)").get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index}: field 'weight_map' must be an object {{tensor name: shard file}}")
        by_file: dict[str, list[str]] = {}
        for name, file in weight_map.items():
            if not isinstance(file, str) or Path(file).name != file:
                raise CheckpointError(f"{index}: shard name {file!r} must be a plain file name in {d}")
            by_file.setdefault(file, []).append(name)
        tensors: dict[str, torch.Tensor] = {}
        for file, names in by_file.items():
            if not (d / file).is_file():
                raise CheckpointError(f"{d / file}: shard listed in {index.name} is missing")
            tensors.update(read_tensor_file(d / file, names))
        return tensors
    pickles = _weight_pickles(d) if d.is_dir() else []
    if pickles:
        raise _refuse_pickle(pickles[0])
    raise _no_weights(d)


# ------------------------------------------------------------------------------------------------ our format


def save_pretrained(model: nn.Module, directory: str | os.PathLike[str], *, max_shard_size: int | None = None) -> Path:
    """Write ``config.json`` + ``model.safetensors`` (sharded above ``max_shard_size`` bytes) for a model built by
    ``anatomy.build_model``, and ``generation_config.json`` when ``model.generation_config`` sets options besides
    the special tokens (``do_sample``, ``temperature``...: HF's file, read back by ``load_pretrained``). Returns
    the directory."""
    config = getattr(model, "config", None)
    if not isinstance(config, ModelConfig):
        raise TypeError(
            f"save_pretrained needs a model built by anatomy.build_model (it carries .config), "
            f"got {type(model).__name__}"
        )
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise CheckpointError(f"{d}: exists and is not a directory")
    d.mkdir(parents=True, exist_ok=True)
    tensors, aliases = unique_tensors(model.state_dict())
    dtypes = {str(t.dtype).removeprefix("torch.") for t in tensors.values() if t.is_floating_point()}
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "anatomy_version": _version(),
        "model_class": type(model).__name__,
        "dtype": dtypes.pop() if len(dtypes) == 1 else "mixed",
        "tied": aliases,
        "config": config.to_dict(),
    }
    for stale in [d / WEIGHTS_NAME, d / INDEX_NAME, *d.glob("model-*-of-*.safetensors")]:
        stale.unlink(missing_ok=True)  # a previous save with another sharding must not leave files behind
    write_tensors(tensors, d, max_shard_size=max_shard_size)
    (d / CONFIG_NAME).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    from anatomy.generation.options import generation_options

    options = generation_options(getattr(model, "generation_config", None))  # sampling defaults, as HF keeps them
    (d / GENERATION_CONFIG_NAME).unlink(missing_ok=True)
    if options:
        (d / GENERATION_CONFIG_NAME).write_text(json.dumps(options, indent=2, sort_keys=True) + "\n")
    return d


def _version() -> str:
    return __version__


def read_config(directory: str | os.PathLike[str]) -> dict[str, Any]:
    d = Path(directory)
    if d.is_file():
        if d.suffix in PICKLE_SUFFIXES:
            raise _refuse_pickle(d)
        raise CheckpointError(f"{d}: expected a checkpoint directory (config.json + model.safetensors), got a file")
    if not d.is_dir():
        raise CheckpointError(f"{d}: no such checkpoint directory")
    path = d / CONFIG_NAME
    if not path.is_file():
        pickles = _weight_pickles(d)
        if pickles:
            raise _refuse_pickle(pickles[0])
        raise CheckpointError(f"{path}: missing; a checkpoint directory holds config.json + model.safetensors")
    return _json(path, "a JSON object (the model's configuration)")


def _json(path: Path, what: str) -> dict[str, Any]:
    """A checkpoint's JSON file, or a one-line ``CheckpointError`` naming it (anatomy.files.read_json)."""
    try:
        data: dict[str, Any] = read_json(path, what=what, finite=True)  # a NaN size or eps is no configuration
    except BadJSON as err:
        raise CheckpointError(str(err)) from None
    except OSError as err:  # vanished between the look and the read
        raise CheckpointError(f"{path}: cannot be read ({err.strerror or err})") from None
    return data


GENERATION_CONFIG_NAME = "generation_config.json"


def read_generation_config(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """A directory's ``generation_config.json`` (the tokens and defaults HF's ``generate`` uses), checked field by
    field (``interop.generation_file``), or None when there is none."""
    path = Path(directory) / GENERATION_CONFIG_NAME
    if not path.is_file():
        return None
    from anatomy.interop.generation_file import check_generation_file

    return check_generation_file(_json(path, "a JSON object (Hugging Face's generation defaults)"), path)


def load_pretrained(directory: str | os.PathLike[str], *, dtype: torch.dtype | None = None) -> nn.Module:
    """Read one of our checkpoints (bit-exact) or a Hugging Face directory of a supported architecture.

    Returns our model in eval mode, in the checkpoint's dtype unless ``dtype`` is given; ``model.tokenizer`` is the
    directory's tokenizer when it holds one (a size that does not fit the vocabulary is warned about).
    """
    data = read_config(directory)
    d = Path(directory)
    if data.get("format") == FORMAT:
        model = _load_ours(d, data)
        from anatomy.interop.hf import set_generation_defaults

        set_generation_defaults(model, read_generation_config(d))  # the sampling defaults save_pretrained wrote
    elif "architectures" in data or "model_type" in data:
        from anatomy.interop import hf

        model = hf.model_from_checkpoint(data, read_tensors(d), source=str(d), generation=read_generation_config(d))
    else:
        raise CheckpointError(
            f'{d / CONFIG_NAME}: neither an anatomy checkpoint ("format": "anatomy") nor a '
            'Hugging Face config ("architectures")'
        )
    if dtype is not None:
        model.to(dtype)
    from anatomy.interop.tokenizer_io import travelling_tokenizer

    config = cast(ModelConfig, model.config)
    tokenizer = travelling_tokenizer(d, config.vocab_size)
    if tokenizer is not None:  # TransformerLens's to_tokens/to_string read it (anatomy.inspection.tl_surface)
        setattr(model, "tokenizer", tokenizer)  # noqa: B010 - an attribute nn.Module does not declare
    return model.eval()


def _load_ours(d: Path, data: dict[str, Any]) -> nn.Module:
    from anatomy.models import build_model

    if data.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{d / CONFIG_NAME}: format_version {data.get('format_version')!r} is not supported "
            f"(this anatomy reads {FORMAT_VERSION})"
        )
    config = config_from(data, d / CONFIG_NAME)
    tensors = read_tensors(d)
    for alias, stored in data.get("tied", {}).items():
        if stored not in tensors:
            raise CheckpointError(f"{d}: tied weight {alias!r} refers to {stored!r}, which the weights lack")
        tensors[alias] = tensors[stored]
    model = build_model(config)
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{d}: weights do not match config.json: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    for name, want in expected.items():  # in the model's order: the first mismatch is the earliest layer's
        if tuple(tensors[name].shape) != tuple(want.shape):
            raise CheckpointError(
                f"{d}: weight {name!r} has shape {tuple(tensors[name].shape)} in the file, but "
                f"config.json implies {tuple(want.shape)}"
            )
    declared = data.get("dtype")
    if declared not in (None, "mixed"):
        dtype = getattr(torch, str(declared), None)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise CheckpointError(f"{d / CONFIG_NAME}: field 'dtype' is {declared!r}, not a floating-point dtype")
        model.to(dtype)
        expected = model.state_dict()
    uniform = declared not in (None, "mixed")
    for name, want in expected.items():  # load_state_dict would cast silently: an int64 file tensor is a wrong file
        have = tensors[name].dtype
        if want.is_floating_point():
            ok = have == want.dtype if uniform else have.is_floating_point
        else:
            ok = have == want.dtype
        if not ok:
            said = f"declares dtype {declared!r}" if uniform and want.is_floating_point() else f"implies {want.dtype}"
            raise CheckpointError(
                f"{d}: weight {name!r} is {str(have).removeprefix('torch.')} in the file, but config.json {said}"
            )
    model.load_state_dict(tensors)
    return model


def config_from(data: dict[str, Any], path: Path) -> ModelConfig:
    """The ``ModelConfig`` of our ``config.json`` (``data``), every field required: a missing field would load with
    its default and change the model silently (``activation`` moves the logits, ``d_model`` a shape), so it is named
    with the default it would take. The fields younger than the format (``OPTIONAL_FIELDS``: the tokens, the labels,
    ``encoder_pooler``) load with their defaults, which are what such a checkpoint was written with."""
    values = data.get("config")
    if not isinstance(values, dict):
        raise CheckpointError(f'{path}: missing the "config" object')
    from anatomy.config import OPTIONAL_FIELDS

    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    missing = [name for name in defaults if name not in values and name not in OPTIONAL_FIELDS]
    if missing:
        shown = ", ".join(f"{name!r} (would default to {defaults[name]!r})" for name in missing[:4])
        raise CheckpointError(
            f"{path}: config field(s) missing: {shown}{', ...' if len(missing) > 4 else ''}; an "
            "anatomy checkpoint records every field: add them with the values the model was "
            "trained with"
        )
    try:
        return ModelConfig.from_dict(values)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f'{path}: field of "config": {err}') from None
