"""Training options and presets: ``key=value`` words beside the model's config fields.

A run is described by one ``TrainOptions`` (how to train, on what) plus ``ModelConfig`` overrides (what to
train). The command line mixes both kinds of words freely: ``anatomy train --preset char-tang steps=500 lr=3e-4
d_model=256``; ``parse_words`` sorts them, converts each value to its field's type and names the valid keys when a
word is unknown.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

from anatomy import words as key_value
from anatomy.config import PRESETS as MODEL_PRESETS
from anatomy.config import ModelConfig

TASKS = ("lm", "classify", "seq2seq")
PRECISIONS = ("fp32", "bf16", "fp16")
TOKENIZERS = ("char", "bpe")
DEVICES = ("auto", "cpu", "cuda")
# Options a resumed run may change: they do not touch the numbers the run computes.
RESUMABLE = frozenset(
    {"steps", "log_every", "save_every", "keep_last", "progress", "plot", "eval_every", "eval_batches", "spike_z"}
)


@dataclass(frozen=True)
class TrainOptions:
    task: str = "lm"
    model: str = "gpt2"  # the model preset the overrides apply to
    # data
    corpus: str = "shakespeare"  # lm: a shipped corpus or a UTF-8 text file
    dataset: str = "sentiment-en"  # classify: a shipped labelled set or a TSV file LABEL<TAB>TEXT
    seq2seq_task: str = "reverse"  # seq2seq: copy | reverse | sort
    min_len: int = 4
    max_len: int = 12
    tokenizer: str = "char"
    bpe_vocab: int = 2000
    data_seed: int = 0  # the train/val/test split; independent of ``seed``
    init_from: str | None = None  # fine-tune a checkpoint (ours or HF): its tokenizer and architecture (finetune.py)
    # optimisation
    steps: int = 1000
    batch_size: int = 12  # the global batch: divided among torchrun's processes
    accumulate: int = 1  # each process's rows run in this many micro-batches, gradients summed: one optimizer step
    block_size: int = 64
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0
    seed: int = 1337
    precision: str = "fp32"
    compile: bool = False
    device: str = "auto"
    # evaluation, logging, checkpoints
    eval_every: int = 250
    eval_batches: int = 20
    patience: int = 0  # early stop after this many evaluations without a better val loss; 0 = never
    log_every: int = 10
    spike_z: float = 6.0  # say so when a step's loss is this many std above its recent mean (and 1.2x it); 0 = never
    save_every: int = 500
    keep_last: int = 2
    progress: bool = True
    plot: bool = True
    baselines: bool = True  # classify: majority-class and bag-of-characters logistic regression on the test set

    def __post_init__(self) -> None:
        for name, choices in (
            ("task", TASKS),
            ("precision", PRECISIONS),
            ("tokenizer", TOKENIZERS),
            ("device", DEVICES),
            ("model", tuple(MODEL_PRESETS)),
        ):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}")
        for name in (
            "steps",
            "batch_size",
            "accumulate",
            "block_size",
            "eval_every",
            "eval_batches",
            "log_every",
            "save_every",
            "keep_last",
            "bpe_vocab",
            "min_len",
            "max_len",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        for name in ("warmup_steps", "patience", "spike_z"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not -(2**63) <= self.seed < 2**64:  # seed=10**20 once ended in torch's "Overflow when unpacking long long"
            raise ValueError(f"seed must be an integer in [-2**63, 2**64 - 1] (torch's seeds), got {self.seed}")
        if not self.lr > 0 or not 0 <= self.min_lr <= self.lr:
            raise ValueError(f"need lr > 0 and 0 <= min_lr <= lr, got lr={self.lr}, min_lr={self.min_lr}")
        if self.weight_decay < 0 or self.grad_clip <= 0:
            raise ValueError(f"need weight_decay >= 0 and grad_clip > 0, got {self.weight_decay}, {self.grad_clip}")
        if self.min_len > self.max_len:
            raise ValueError(f"min_len={self.min_len} must be <= max_len={self.max_len}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# The training presets: a task, its data and a small model on top of a model preset. Each task's presets share
# their schedule and model (the _LM, _CLASSIFY and _SEQ2SEQ bases) and differ in their data.
SMALL_LM = dict(n_layers=4, n_heads=4, d_model=128, d_ff=512, dropout=0.0, attention_dropout=0.0)
# nanoGPT's shakespeare_char at its CPU settings (4 layers, 4 heads, 128 dims, block 64, batch 12, 2000 iters)
_LM: dict[str, Any] = dict(
    task="lm", steps=2000, batch_size=12, block_size=64, lr=1e-3, warmup_steps=100, eval_every=250, **SMALL_LM
)
_CLASSIFY: dict[str, Any] = dict(
    task="classify",
    model="bert",
    steps=1500,
    batch_size=32,
    lr=5e-4,
    min_lr=5e-5,
    warmup_steps=100,
    eval_every=250,
    n_layers=2,
    n_heads=4,
    d_model=128,
    d_ff=512,
    dropout=0.1,
    attention_dropout=0.0,
    pooling="mean",
    pooler=False,
    type_vocab_size=0,
    weight_decay=0.01,
)
_SEQ2SEQ: dict[str, Any] = dict(
    task="seq2seq",
    model="vaswani-2017",
    tokenizer="char",
    min_len=4,
    max_len=12,
    steps=1500,
    batch_size=32,
    block_size=32,
    lr=1e-3,
    min_lr=1e-4,
    warmup_steps=100,
    eval_every=250,
    weight_decay=0.01,
    n_layers=2,
    n_heads=4,
    d_model=64,
    d_ff=256,
    dropout=0.0,
    scale_embeddings=True,
)
RUN_PRESETS: dict[str, dict[str, Any]] = {
    "char-shakespeare": dict(_LM, model="gpt2", corpus="shakespeare", tokenizer="char", min_lr=1e-4),
    "char-tang": dict(_LM, model="gpt2", corpus="tang", tokenizer="char", min_lr=1e-4),
    "bpe-shakespeare": dict(_LM, model="llama", corpus="shakespeare", tokenizer="bpe", bpe_vocab=2000, n_kv_heads=2),
    "sentiment-en": dict(_CLASSIFY, dataset="sentiment-en", tokenizer="bpe", bpe_vocab=4000, block_size=64),
    "sentiment-zh": dict(_CLASSIFY, dataset="sentiment-zh", tokenizer="char", block_size=128),
    **{f"seq2seq-{task}": dict(_SEQ2SEQ, seq2seq_task=task) for task in ("copy", "reverse", "sort")},
}

OPTION_FIELDS = {f.name: f for f in fields(TrainOptions)}
MODEL_FIELDS = {f.name: f for f in fields(ModelConfig)}
# Set from the data, never by hand.
DERIVED_MODEL_FIELDS = ("architecture", "vocab_size", "num_labels", "pad_token_id")
DERIVED_REASON = "is set from the data and cannot be given"


def valid_keys() -> list[str]:
    return sorted(set(OPTION_FIELDS) | set(MODEL_FIELDS) - set(DERIVED_MODEL_FIELDS))


def parse_words(words: list[str]) -> dict[str, Any]:
    """``["steps=10", "d_model=64"]`` → ``{"steps": 10, "d_model": 64}``, typed, validated by name
    (:func:`anatomy.words.parse_words` over the run's and the model's fields)."""
    return key_value.parse_words(
        words,
        {**MODEL_FIELDS, **OPTION_FIELDS},
        valid=valid_keys(),
        refused=dict.fromkeys(DERIVED_MODEL_FIELDS, DERIVED_REASON),
    )


def resolve(preset: str | None, overrides: dict[str, Any]) -> tuple[TrainOptions, dict[str, Any]]:
    """A preset (optional) and typed overrides → ``(TrainOptions, model overrides)``. The model overrides are
    checked against ``ModelConfig`` later, once the data has fixed the vocabulary size."""
    values: dict[str, Any] = {}
    if preset is not None:
        if preset not in RUN_PRESETS:
            raise ValueError(f"unknown preset {preset!r}; valid presets: {', '.join(sorted(RUN_PRESETS))}")
        values.update(RUN_PRESETS[preset])
    if overrides.get("init_from"):  # fine-tuning: the checkpoint, not the preset, fixes model and tokenizer
        check_options(overrides)
        values = {k: v for k, v in values.items() if k not in MODEL_FIELDS and k not in FIXED_OPTIONS}
    values.update(overrides)
    options = TrainOptions(**{k: v for k, v in values.items() if k in OPTION_FIELDS})
    model = {k: v for k, v in values.items() if k in MODEL_FIELDS}
    return options, model


# Training options a fine-tuning run's checkpoint fixes (init_from; training/finetune.py).
FIXED_OPTIONS = ("model", "tokenizer", "bpe_vocab")


def check_options(explicit: dict[str, Any]) -> None:
    """Refuse, by name, explicit training options that init_from replaces with the checkpoint's."""
    for key in FIXED_OPTIONS:
        if key in explicit:
            why = "the checkpoint's tokenizer is kept" if key != "model" else "the checkpoint fixes the architecture"
            raise ValueError(f"{key}={explicit[key]!r} cannot be given with init_from: {why}")
