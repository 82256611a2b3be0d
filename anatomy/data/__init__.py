"""Embedded corpora, labelled sets, synthetic seq2seq tasks and tokenizers; nothing is downloaded at run time."""

from anatomy.data.corpora import (
    CORPORA,
    LABEL_NAMES,
    LABELLED,
    corpus_splits,
    labelled_splits,
    load_corpus,
    load_labelled,
    read_text_file,
    split_units,
)
from anatomy.data.synthetic import TASKS as SEQ2SEQ_TASKS
from anatomy.data.synthetic import sample_pairs
from anatomy.data.tokenizers import BPETokenizer, CharTokenizer, UnknownCharactersError, load_tokenizer

__all__ = [
    "BPETokenizer",
    "CORPORA",
    "CharTokenizer",
    "LABELLED",
    "LABEL_NAMES",
    "SEQ2SEQ_TASKS",
    "UnknownCharactersError",
    "corpus_splits",
    "labelled_splits",
    "load_corpus",
    "load_labelled",
    "load_tokenizer",
    "read_text_file",
    "sample_pairs",
    "split_units",
]
