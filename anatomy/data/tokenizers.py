"""Two tokenizers with one small interface: characters, and byte-level BPE trained offline with HF ``tokenizers``;
a third, ``HFTokenizer`` (``tokenizers_hf.py``), holds any Hugging Face tokenizer a converted model came with.

Both reserve ``<pad>`` = 0 (also the seq2seq decoder's start token) and ``<eos>`` = 1, and both are saved beside
a checkpoint as ``tokenizer.json``: the BPE one in Hugging Face's own format (``tokenizers.Tokenizer.from_file``
reads it), the character one as ``{"anatomy_tokenizer": "char", "vocab": [...]}``.

A character tokenizer refuses text with characters it has never seen (``UnknownCharactersError`` names them),
unless it was built with an ``<unk>`` token (the classifiers', whose test sentences hold rare characters).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anatomy.data.tokenizers_hf import CONFIG_FILE as HF_CONFIG_FILE
from anatomy.data.tokenizers_hf import HFTokenizer, TokenizersBacked
from anatomy.data.tokenizers_hf import has_tokenizer as has_hf_tokenizer

if TYPE_CHECKING:
    from tokenizers import Tokenizer as RustTokenizer  # the `tokenizers` package, imported when one is built

SPECIALS = ("<pad>", "<eos>")
PAD_ID, EOS_ID = 0, 1
FILE = "tokenizer.json"


class UnknownCharactersError(ValueError):
    def __init__(self, chars: list[str], vocab_hint: str) -> None:
        self.chars = chars
        shown = " ".join(repr(c) for c in chars[:20]) + (" ..." if len(chars) > 20 else "")
        super().__init__(f"{len(chars)} character(s) are not in the tokenizer's vocabulary: {shown} ({vocab_hint})")


class OurSpecials:
    """Our two tokenizers' special ids: ``<pad>`` = 0 and ``<eos>`` = 1."""

    @property
    def pad_id(self) -> int:
        return PAD_ID

    @property
    def eos_id(self) -> int:
        return EOS_ID


class CharTokenizer(OurSpecials):
    kind = "char"

    def __init__(self, chars: Iterable[str], *, unk: bool = False) -> None:
        chars = [c for c in chars if c not in SPECIALS]
        self.specials = (*SPECIALS, "<unk>") if unk else SPECIALS
        self.itos = [*self.specials, *chars]
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("CharTokenizer characters must be distinct")
        self.unk_id = self.stoi.get("<unk>")

    @classmethod
    def train(cls, texts: Iterable[str], *, unk: bool = False, min_count: int = 1) -> CharTokenizer:
        counts: Counter[str] = Counter()
        for t in texts:
            counts.update(t)
        chars = sorted(c for c, n in counts.items() if n >= min_count)
        if not chars:
            raise ValueError("cannot build a character vocabulary from empty text")
        return cls(chars, unk=unk)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        stoi = self.stoi
        try:
            return [stoi[c] for c in text]
        except KeyError:
            if self.unk_id is not None:
                return [stoi.get(c, self.unk_id) for c in text]
            unknown = sorted({c for c in text if c not in stoi})
            raise UnknownCharactersError(
                unknown, f"{self.vocab_size - len(self.specials)} characters known, taken from the training corpus"
            ) from None

    def decode(self, ids: Iterable[int], *, skip_special: bool = True) -> str:
        n_special = len(self.specials)
        return "".join(self.itos[i] for i in ids if not (skip_special and i < n_special))

    def to_json(self) -> dict[str, Any]:
        return {"anatomy_tokenizer": "char", "unk": self.unk_id is not None, "vocab": self.itos[len(self.specials) :]}

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / FILE
        path.write_text(json.dumps(self.to_json(), ensure_ascii=False), encoding="utf-8")
        return path


class BPETokenizer(OurSpecials, TokenizersBacked):
    """Byte-level BPE (GPT-2's scheme): every string is encodable, so there is no unknown token."""

    kind = "bpe"

    def __init__(self, tokenizer: RustTokenizer) -> None:
        self.tokenizer = tokenizer
        for i, s in enumerate(SPECIALS):
            if tokenizer.token_to_id(s) != i:
                raise ValueError(f"a BPE tokenizer for anatomy must have {s!r} at id {i}")

    @classmethod
    def train(cls, texts: Iterable[str], *, vocab_size: int = 2000) -> BPETokenizer:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        if vocab_size < 256 + len(SPECIALS):
            raise ValueError(
                f"bpe_vocab must be at least {256 + len(SPECIALS)} (the byte alphabet and "
                f"{len(SPECIALS)} special tokens), got {vocab_size}"
            )
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIALS),
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        size: int = self.tokenizer.get_vocab_size()
        return size

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / FILE
        path.write_text(self.tokenizer.to_str(pretty=True), encoding="utf-8")  # tokenizers' save needs a UTF-8 path
        return path


Tokenizer = CharTokenizer | BPETokenizer | HFTokenizer


def encode_many(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
    if isinstance(tokenizer, TokenizersBacked):
        return tokenizer.encode_batch(texts)
    return [tokenizer.encode(t) for t in texts]


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """The tokenizer saved in ``directory``: ours (``tokenizer.json``, either kind), or any Hugging Face tokenizer
    (``tokenizer.json`` + ``tokenizer_config.json``, or GPT-2's ``vocab.json`` + ``merges.txt``: ``HFTokenizer``)."""
    d = Path(directory)
    path = d / FILE
    if not path.is_file():
        if has_hf_tokenizer(d):
            return HFTokenizer.from_directory(d)
        raise ValueError(
            f"no {FILE} in {str(directory)!r} (a model converted with `anatomy convert --from-hf DIR` "
            "keeps DIR's tokenizer when DIR holds one)"
        )
    from anatomy.data.tokenizers_hf import TOKENIZER_LIMIT
    from anatomy.files import read_json

    data = read_json(path, what="a JSON tokenizer file (an object)", limit=TOKENIZER_LIMIT)  # BadJSON: one line
    if data.get("anatomy_tokenizer") == "char":
        return CharTokenizer(data["vocab"], unk=bool(data.get("unk")))
    if (d / HF_CONFIG_FILE).is_file():
        return HFTokenizer.from_directory(d)
    from tokenizers import Tokenizer as HFTokenizerFile

    try:
        tok = HFTokenizerFile.from_str(json.dumps(data))  # read bounded above; from_file needs a UTF-8 path
    except Exception as err:  # tokenizers raises its own Exception type on a malformed file
        raise ValueError(f"{str(path)!r} is not a Hugging Face tokenizer file: {err}") from None
    if all(tok.token_to_id(s) == i for i, s in enumerate(SPECIALS)):
        return BPETokenizer(tok)
    return HFTokenizer.from_directory(d)  # a foreign tokenizer without a config: its specials from config.json
