"""TransformerLens's token calls on our models: ``to_tokens``, ``to_string``, ``to_str_tokens``.

They need the tokenizer that travelled with the model: ``anatomy.load_pretrained(dir)`` sets ``model.tokenizer``
when ``dir`` holds one; assign ``model.tokenizer`` yourself otherwise (ours, or a ``transformers`` tokenizer).
Without one they raise, naming the missing tokenizer. As in TransformerLens, ``to_tokens`` prepends the bos token
by default (``prepend_bos=False`` does not) and right-pads a batch with the pad token; ``to_string`` decodes keeping
special tokens; ``to_str_tokens`` gives each token's own text.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def tokenizer_of(model: nn.Module, call: str) -> Any:
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise ValueError(
            f"{call} needs the model's tokenizer, and {type(model).__name__} has none: no tokenizer.json travelled "
            "with it (anatomy.load_pretrained(dir) sets model.tokenizer when dir holds one); set model.tokenizer"
        )
    return tok


def _is_hf(tok: Any) -> bool:
    return callable(getattr(tok, "convert_ids_to_tokens", None))  # a transformers tokenizer


def _encode(tok: Any, text: str) -> list[int]:
    if _is_hf(tok):
        return list(tok.encode(text, add_special_tokens=False))
    inner = getattr(tok, "tokenizer", None)
    if inner is not None and callable(getattr(inner, "encode", None)):  # tokenizers-backed: no post-processor
        return list(inner.encode(text, add_special_tokens=False).ids)
    return list(tok.encode(text))


def _decode(tok: Any, ids: list[int]) -> str:
    if _is_hf(tok):
        return str(tok.decode(ids, clean_up_tokenization_spaces=False))
    return str(tok.decode(ids, skip_special=False))


def _special(model: nn.Module, tok: Any, role: str) -> int | None:
    found = getattr(tok, f"{role}_token_id", None) if _is_hf(tok) else getattr(tok, f"{role}_id", None)
    if found is None and role == "bos":
        found = getattr(getattr(model, "config", None), "bos_token_id", None)
    return found if isinstance(found, int) else None


def to_tokens(
    model: nn.Module,
    input: str | list[str],
    prepend_bos: bool | None = None,
    padding_side: str | None = None,
    move_to_device: bool = True,
    truncate: bool = True,
) -> torch.Tensor:
    """``(B, T)`` token ids of a text or a list of texts, TransformerLens's ``to_tokens``: the bos token first
    (unless ``prepend_bos=False``), a batch padded on ``padding_side`` (default right) with the pad token, cut to
    the model's ``max_seq_len`` when ``truncate``."""
    tok = tokenizer_of(model, "to_tokens")
    texts = [input] if isinstance(input, str) else input
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError(f"to_tokens: input must be a string or a non-empty list of strings, got {input!r}")
    if padding_side not in (None, "left", "right"):
        raise ValueError(f"to_tokens: padding_side must be 'left' or 'right', got {padding_side!r}")
    rows = [_encode(tok, t) for t in texts]
    if prepend_bos is None or prepend_bos:
        bos = _special(model, tok, "bos")
        if bos is None and prepend_bos:
            raise ValueError("to_tokens(prepend_bos=True): neither the tokenizer nor the model names a bos token")
        rows = rows if bos is None else [[bos, *r] for r in rows]
    limit = getattr(getattr(model, "config", None), "max_seq_len", None)
    if truncate and isinstance(limit, int):
        rows = [r[:limit] for r in rows]
    width = max(len(r) for r in rows)
    pad = _special(model, tok, "pad")
    pad = pad if pad is not None else (_special(model, tok, "eos") or 0)
    left = (padding_side or getattr(tok, "padding_side", "right")) == "left"
    out = [([pad] * (width - len(r)) + r) if left else (r + [pad] * (width - len(r))) for r in rows]
    ids = torch.tensor(out, dtype=torch.long)  # (B, T)
    if move_to_device:
        first = next(model.parameters(), None)
        ids = ids if first is None else ids.to(first.device)
    return ids


def _id_rows(tokens: Any) -> tuple[list[list[int]], bool]:
    t = tokens if isinstance(tokens, torch.Tensor) else torch.as_tensor(tokens)
    if t.dim() > 2:
        raise ValueError(f"token ids must be (T,) or (B, T), got shape {tuple(t.shape)}")
    return (t.tolist() if t.dim() == 2 else [t.reshape(-1).tolist()]), t.dim() == 2


def to_string(model: nn.Module, tokens: Any) -> str | list[str]:
    """The text of ``(T,)`` ids (a string) or ``(B, T)`` ids (a list), special tokens kept."""
    tok = tokenizer_of(model, "to_string")
    rows, batched = _id_rows(tokens)
    texts = [_decode(tok, r) for r in rows]
    return texts if batched else texts[0]


def to_str_tokens(
    model: nn.Module, input: Any, prepend_bos: bool | None = None, padding_side: str | None = None
) -> list[str] | list[list[str]]:
    """Each token's own text: of a text (tokenized by ``to_tokens``), a list of texts (a list per text), or ids."""
    tok = tokenizer_of(model, "to_str_tokens")
    if isinstance(input, list) and input and all(isinstance(t, str) for t in input):
        return [to_str_tokens(model, t, prepend_bos, padding_side) for t in input]  # type: ignore[return-value]
    if isinstance(input, str):
        input = to_tokens(model, input, prepend_bos=prepend_bos, padding_side=padding_side)[0]
    t = input if isinstance(input, torch.Tensor) else torch.as_tensor(input)
    if t.dim() == 2 and t.shape[0] == 1:
        t = t[0]
    if t.dim() != 1:
        raise ValueError(f"to_str_tokens: ids must be (T,) or (1, T), got shape {tuple(t.shape)}")
    return [_decode(tok, [i]) for i in t.tolist()]


def to_single_token(model: nn.Module, string: str) -> int:
    """The id of a text that is one token (no bos), TransformerLens's ``to_single_token``; more or fewer tokens are
    a ``ValueError`` naming them."""
    tok = tokenizer_of(model, "to_single_token")
    ids = _encode(tok, string)
    if len(ids) != 1:
        raise ValueError(f"to_single_token: {string!r} is {len(ids)} tokens ({ids}), not one")
    return ids[0]
