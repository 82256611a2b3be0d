"""Tokenizers across the Hugging Face boundary: ``anatomy convert`` carries a model's tokenizer both ways.

    tok = read_hf_tokenizer(hf_dir)                   # HFTokenizer, or None when hf_dir holds no tokenizer
    check_fits(tok, config, source=hf_dir)            # every id the tokenizer can produce has an embedding row
    write_hf_tokenizer(load_tokenizer(ours), hf_out)  # tokenizer.json + tokenizer_config.json for AutoTokenizer

Into a checkpoint the tokenizer goes in Hugging Face's own files (``tokenizer.json``, ``tokenizer_config.json``), so
a converted checkpoint is also a directory ``AutoTokenizer.from_pretrained`` reads, and ``--to-hf`` writes the same
files back. Our two tokenizers are written for HF too: the byte-level BPE one is already a ``tokenizers`` file (its
``<pad>``/``<eos>`` are named in tokenizer_config.json); the character one becomes a ``WordLevel`` model that
splits every character (``[\\s\\S]``) and fuses tokens on decode, with the same ids. HF's ``WordLevel`` needs an
unknown token: a character tokenizer without ``<unk>`` reads unknown characters as ``<pad>`` there, where anatomy
refuses them by name.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from anatomy.data.tokenizers import BPETokenizer, CharTokenizer, Tokenizer
from anatomy.data.tokenizers_hf import HFTokenizer, has_tokenizer
from anatomy.errors import CheckpointError


def read_hf_tokenizer(directory: str | Path) -> HFTokenizer | None:
    """The tokenizer of an HF model directory, or None when it holds none (``tokenizer.json``, or GPT-2's
    ``vocab.json`` + ``merges.txt``); a ``CheckpointError`` naming the file when one is there but unreadable."""
    if not has_tokenizer(directory):
        return None
    try:
        return HFTokenizer.from_directory(directory)
    except ValueError as err:
        raise CheckpointError(str(err)) from None


def check_fits(tokenizer: Tokenizer, vocab_size: int, *, source: str = "") -> None:
    """Every id the tokenizer can produce must index the model's embedding (``vocab_size`` rows); a model's
    vocabulary may be larger than its tokenizer's (GPT-2 and Llama pad theirs), never smaller."""
    if tokenizer.vocab_size > vocab_size:
        where = f"{source}: " if source else ""
        raise CheckpointError(
            f"{where}the tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is "
            f"{vocab_size}: ids >= {vocab_size} would have no embedding"
        )


def travelling_tokenizer(directory: str | Path, vocab_size: int) -> Tokenizer | None:
    """The tokenizer saved beside a model's weights (ours or Hugging Face's), or None when the directory holds
    none. One that cannot be read, or whose size does not fit the model's ``vocab_size`` (more tokens than
    embedding rows; fewer than half of them: another model's tokenizer), is named in a ``UserWarning`` with both
    numbers; an unreadable one is left out."""
    from anatomy.data.tokenizers import FILE, load_tokenizer

    d = Path(directory)
    if not ((d / FILE).is_file() or has_tokenizer(d)):
        return None
    try:
        tok = load_tokenizer(d)
    except (ValueError, OSError, KeyError, CheckpointError) as err:
        warnings.warn(f"{d}: its tokenizer cannot be read ({err}); the model loads without one", stacklevel=3)
        return None
    size = tok.vocab_size
    if size > vocab_size:
        warnings.warn(
            f"{d}: the tokenizer has {size} tokens but the model's vocab_size is {vocab_size}: ids from "
            f"{vocab_size} on have no embedding row",
            stacklevel=3,
        )
    elif 2 * size < vocab_size:
        warnings.warn(
            f"{d}: the tokenizer has {size} tokens under a vocabulary of {vocab_size}: fewer than half the "
            "embedding rows, so probably not the tokenizer these weights were trained with",
            stacklevel=3,
        )
    return tok


def char_to_hf(tokenizer: CharTokenizer) -> HFTokenizer:
    """A ``tokenizers`` WordLevel model with the character tokenizer's ids, one token per character."""
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFFile

    vocab = {s: i for i, s in enumerate(tokenizer.itos)}
    unk = "<unk>" if tokenizer.unk_id is not None else "<pad>"
    tok = HFFile(models.WordLevel(vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character, newlines too
    tok.decoder = decoders.Fuse()  # concatenate, no spaces between characters
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in tokenizer.specials])
    return HFTokenizer(
        tok,
        specials={
            "pad_token": "<pad>",
            "eos_token": "<eos>",
            "unk_token": "<unk>" if tokenizer.unk_id is not None else None,
        },
    )


def as_hf(tokenizer: Tokenizer) -> HFTokenizer:
    """Any of our tokenizers as an ``HFTokenizer`` with the same ids."""
    if isinstance(tokenizer, HFTokenizer):
        return tokenizer
    if isinstance(tokenizer, BPETokenizer):
        return HFTokenizer(tokenizer.tokenizer, specials={"pad_token": "<pad>", "eos_token": "<eos>"})
    if isinstance(tokenizer, CharTokenizer):
        return char_to_hf(tokenizer)
    raise TypeError(f"cannot write a {type(tokenizer).__name__} for Hugging Face")


def write_hf_tokenizer(tokenizer: Tokenizer, directory: str | Path) -> Path:
    """``tokenizer.json`` + ``tokenizer_config.json`` in ``directory``: ``AutoTokenizer.from_pretrained`` reads
    them, and so does ``anatomy.data.tokenizers.load_tokenizer``."""
    return as_hf(tokenizer).save(directory)


def describe(tokenizer: Tokenizer) -> str:
    """One line for the convert log: the kind, the size and the special tokens."""
    if isinstance(tokenizer, HFTokenizer):
        named = ", ".join(f"{role.removesuffix('_token')} {tok!r}" for role, tok in tokenizer.specials.items() if tok)
        return f"{tokenizer.tokenizer_class} ({tokenizer.vocab_size} tokens{'; ' + named if named else ''})"
    return f"{type(tokenizer).__name__} ({tokenizer.vocab_size} tokens)"
