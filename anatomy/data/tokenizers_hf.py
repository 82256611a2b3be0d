"""Any Hugging Face tokenizer, behind the same small interface as ours (``encode``, ``decode``, ``pad_id``...).

A converted model keeps the tokenizer it was trained with: ``anatomy convert --from-hf`` copies it into the
checkpoint in Hugging Face's own files, and every command that takes ``--checkpoint`` reads it back from there:

    tokenizer.json          the tokenizer itself (``tokenizers.Tokenizer.from_file`` reads it)
    tokenizer_config.json   which tokens are special (bos, eos, pad, unk) and the transformers class name

A directory that holds only GPT-2's original files (``vocab.json`` + ``merges.txt``) is read too: byte-level BPE
with GPT-2's byte alphabet, no prefix space, and ``<|endoftext|>`` as its one special token, as HF's GPT-2
tokenizer builds it. A sentencepiece ``tokenizer.model`` alone is refused by name (save a fast tokenizer first).

``encode`` adds the tokenizer's own special tokens (a Llama BOS, BERT's ``[CLS] ... [SEP]``), as
``AutoTokenizer(text)`` does by default; ``decode`` drops special tokens unless asked to keep them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizers import Tokenizer as RustTokenizer  # the `tokenizers` package, imported when one is built

FILE, CONFIG_FILE = "tokenizer.json", "tokenizer_config.json"
VOCAB_FILE, MERGES_FILE, SP_FILE, SPECIAL_MAP = "vocab.json", "merges.txt", "tokenizer.model", "special_tokens_map.json"
ROLES = ("bos_token", "eos_token", "pad_token", "unk_token")
GPT2_EOS = "<|endoftext|>"
TOKENIZER_LIMIT = 1 << 30  # bytes: a tokenizer.json of a large vocabulary runs to tens of MB, never a GB


def _read_json(path: Path) -> dict[str, Any]:
    from anatomy.files import read_json

    data: dict[str, Any] = read_json(path, limit=TOKENIZER_LIMIT)  # BadJSON (a ValueError): one line naming it
    return data


def _content(value: object) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or ``{"content": "...", ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def has_tokenizer(directory: str | Path) -> bool:
    d = Path(directory)
    return (d / FILE).is_file() or ((d / VOCAB_FILE).is_file() and (d / MERGES_FILE).is_file())


class TokenizersBacked:
    """A tokenizer that is a ``tokenizers.Tokenizer`` (``self.tokenizer``): encoding and decoding go through it."""

    tokenizer: Any

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer.encode(text).ids
        return ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts)]

    def decode(self, ids: Iterable[int], *, skip_special: bool = True) -> str:
        text: str = self.tokenizer.decode(list(ids), skip_special_tokens=skip_special)
        return text


class HFTokenizer(TokenizersBacked):
    """A ``tokenizers.Tokenizer`` with its special tokens by role (``bos_token``, ``eos_token``, ``pad_token``,
    ``unk_token``: token strings or None) and the transformers class name it was saved with."""

    kind = "hf"

    def __init__(
        self,
        tokenizer: RustTokenizer,
        *,
        specials: dict[str, str | None] | None = None,
        tokenizer_class: str = "PreTrainedTokenizerFast",
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.tokenizer_class = tokenizer_class
        self.extra = dict(extra or {})  # the rest of the source's tokenizer_config.json (cls_token, chat_template...)
        self.specials: dict[str, str | None] = {role: None for role in ROLES}
        for role, token in (specials or {}).items():
            if role not in ROLES:
                raise ValueError(f"special token role must be one of {', '.join(ROLES)}, got {role!r}")
            if token is not None and tokenizer.token_to_id(token) is None:
                raise ValueError(f"the tokenizer's {role} {token!r} is not in its vocabulary")
            self.specials[role] = token

    def _id(self, role: str) -> int | None:
        token = self.specials[role]
        return None if token is None else self.tokenizer.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        size: int = self.tokenizer.get_vocab_size(with_added_tokens=True)
        return size

    @property
    def bos_id(self) -> int | None:
        return self._id("bos_token")

    @property
    def eos_id(self) -> int | None:
        return self._id("eos_token")

    @property
    def pad_id(self) -> int:
        """The pad token; without one, the eos token (HF's usual ``pad_token = eos_token``); else 0. Padding is
        always masked out, so only its being a valid id matters."""
        for role in ("pad_token", "eos_token"):
            found = self._id(role)
            if found is not None:
                return found
        return 0

    def config_json(self) -> dict[str, Any]:
        """tokenizer_config.json as transformers reads it (``AutoTokenizer.from_pretrained(dir)``)."""
        return {**self.extra, "tokenizer_class": self.tokenizer_class, **self.specials, "backend": "tokenizers"}

    def save(self, directory: str | Path) -> Path:
        d = Path(directory)
        # through Python's file, not tokenizers' save(path), which refuses a path that is not valid UTF-8
        (d / FILE).write_text(self.tokenizer.to_str(pretty=True), encoding="utf-8")
        (d / CONFIG_FILE).write_text(
            json.dumps(self.config_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        return d / FILE

    @classmethod
    def from_directory(cls, directory: str | Path) -> HFTokenizer:
        """The tokenizer of an HF (or converted) directory; ``ValueError`` naming the directory and the file
        expected when there is none."""
        from tokenizers import Tokenizer

        d = Path(directory)
        if (d / FILE).is_file():
            try:
                tok = Tokenizer.from_str((d / FILE).read_text(encoding="utf-8"))  # any path, UTF-8 or not
            except Exception as err:  # tokenizers raises its own Exception type on a malformed file
                raise ValueError(f"{str(d / FILE)!r} is not a Hugging Face tokenizer file: {err}") from None
        elif (d / VOCAB_FILE).is_file() and (d / MERGES_FILE).is_file():
            tok = _gpt2_from_files(d)
        elif (d / SP_FILE).is_file():
            raise ValueError(
                f"{str(d)!r} holds only a sentencepiece {SP_FILE}; anatomy reads {FILE} (save the "
                f"tokenizer with a fast tokenizer: AutoTokenizer.from_pretrained(dir).save_pretrained"
                "(dir) writes it)"
            )
        else:
            raise ValueError(f"no tokenizer in {str(d)!r} (expected {FILE}, or {VOCAB_FILE} + {MERGES_FILE})")
        specials, klass = _specials(d, tok)
        extra = _read_json(d / CONFIG_FILE) if (d / CONFIG_FILE).is_file() else {}
        return cls(
            tok,
            specials=specials,
            tokenizer_class=klass,
            extra={k: v for k, v in extra.items() if k not in ROLES and k != "tokenizer_class"},
        )


def _gpt2_from_files(d: Path) -> Any:
    """GPT-2's byte-level BPE from ``vocab.json`` + ``merges.txt``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    try:
        bpe = models.BPE.from_file(str(d / VOCAB_FILE), str(d / MERGES_FILE))
    except Exception as err:
        raise ValueError(f"cannot read {VOCAB_FILE} + {MERGES_FILE} in {str(d)!r} as byte-level BPE: {err}") from None
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    if tok.token_to_id(GPT2_EOS) is not None:
        tok.add_special_tokens([AddedToken(GPT2_EOS, special=True)])
    return tok


def _specials(d: Path, tok: Any) -> tuple[dict[str, str | None], str]:
    """Special tokens by role, from tokenizer_config.json, then special_tokens_map.json, then config.json's ids
    (``eos_token_id``...); GPT-2's ``<|endoftext|>`` when nothing names any."""
    config = _read_json(d / CONFIG_FILE) if (d / CONFIG_FILE).is_file() else {}
    mapping = _read_json(d / SPECIAL_MAP) if (d / SPECIAL_MAP).is_file() else {}
    model = _read_json(d / "config.json") if (d / "config.json").is_file() else {}
    out: dict[str, str | None] = {}
    for role in ROLES:
        token = _content(config.get(role)) or _content(mapping.get(role))
        if token is None:
            ident = model.get(f"{role}_id")
            ident = ident[0] if isinstance(ident, list) and ident else ident
            token = tok.id_to_token(ident) if isinstance(ident, int) and not isinstance(ident, bool) else None
        out[role] = token if token is not None and tok.token_to_id(token) is not None else None
    if not any(out.values()) and tok.token_to_id(GPT2_EOS) is not None:
        out.update(bos_token=GPT2_EOS, eos_token=GPT2_EOS, unk_token=GPT2_EOS)
    klass = config.get("tokenizer_class") if isinstance(config.get("tokenizer_class"), str) else None
    if klass is None:
        klass = (
            "GPT2Tokenizer" if (d / MERGES_FILE).is_file() and not (d / FILE).is_file() else "PreTrainedTokenizerFast"
        )
    return out, klass
