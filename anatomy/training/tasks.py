"""The three tasks the loop trains: ``lm``, ``classify``, ``seq2seq``.

A task owns its data and tokenizer, fixes the model's data-dependent fields (vocabulary size, labels, length),
draws batches from a ``torch.Generator`` (so a batch is a pure function of the generator's state: exact resume,
and the same global batch on every torchrun process) and evaluates. A batch is a dict of keyword arguments for
``model(**batch)``, which returns ``.loss`` like a Hugging Face model.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from anatomy.config import ModelConfig
from anatomy.data import corpora, synthetic
from anatomy.data.tokenizers import BPETokenizer, CharTokenizer, Tokenizer, encode_many
from anatomy.training.options import TrainOptions

# evaluation's forward: a batch -> (loss, logits), under the run's autocast
LossAndLogits = Callable[[dict[str, torch.Tensor]], tuple[torch.Tensor, torch.Tensor]]
EVAL_SEED = 20_17  # evaluation batches come from their own generator: the same batches at every evaluation


def eval_generator(split: str) -> torch.Generator:
    return torch.Generator().manual_seed(EVAL_SEED + ("train", "val", "test").index(split))


def train_tokenizer(options: TrainOptions, texts: list[str], *, strict_chars: bool) -> CharTokenizer | BPETokenizer:
    if options.tokenizer == "bpe":
        return BPETokenizer.train(texts, vocab_size=options.bpe_vocab)
    return CharTokenizer.train(texts, unk=not strict_chars)


def _model_config(
    options: TrainOptions, tokenizer: Tokenizer, overrides: dict[str, Any], architecture: str, **data_fields: Any
) -> ModelConfig:
    """The model preset ``options.model`` with the user's ``overrides`` (``max_seq_len``: the block size unless
    given) and what the task's data sets: the architecture, the tokenizer's vocabulary and pad id, ``data_fields``."""
    values = {"max_seq_len": options.block_size, **overrides}
    values.update(architecture=architecture, vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id)
    return ModelConfig.from_preset(options.model, **{**values, **data_fields})


def _pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists → ``ids (B, T)`` and ``attention_mask (B, T)`` (True on real tokens)."""
    t = max(len(r) for r in rows)
    ids = torch.full((len(rows), t), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), t), dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = True
    return ids, mask


class LMTask:
    """Next-token prediction on a corpus: each row is ``block_size`` consecutive tokens at a random offset."""

    name = "lm"

    def __init__(self, options: TrainOptions, tokenizer: Tokenizer | None = None) -> None:
        self.options = options
        splits, digest = corpora.corpus_splits_and_digest(options.corpus, seed=options.data_seed)
        self.data_digest = {"corpus": options.corpus, "sha256": digest}  # checked on resume (state.py)
        # the character vocabulary is the whole corpus's, so that validation text never holds an unknown one
        self.tokenizer = tokenizer or train_tokenizer(
            options,
            [splits["train"], splits["val"], splits["test"]] if options.tokenizer == "char" else [splits["train"]],
            strict_chars=True,
        )
        self.data = {k: torch.tensor(self.tokenizer.encode(v), dtype=torch.long) for k, v in splits.items()}
        for split, ids in self.data.items():
            if len(ids) <= options.block_size:
                raise ValueError(
                    f"the {split} split of corpus {options.corpus!r} has {len(ids)} tokens, fewer than "
                    f"block_size + 1 = {options.block_size + 1}; use a bigger corpus or a smaller "
                    "block_size"
                )

    def model_config(self, overrides: dict[str, Any]) -> ModelConfig:
        return _model_config(self.options, self.tokenizer, overrides, "decoder_lm")

    def batch(self, split: str, generator: torch.Generator, batch_size: int) -> dict[str, torch.Tensor]:
        data, t = self.data[split], self.options.block_size
        starts = torch.randint(len(data) - t, (batch_size,), generator=generator)
        ids = torch.stack([data[s : s + t] for s in starts.tolist()])  # (B, T)
        return {"input_ids": ids, "labels": ids}

    @staticmethod
    def n_tokens(batch: dict[str, torch.Tensor]) -> int:
        return batch["input_ids"].numel()

    def evaluate(self, loss_and_logits: LossAndLogits, split: str, batch_size: int) -> dict[str, torch.Tensor]:
        g = eval_generator(split)
        losses = [
            loss_and_logits(self.batch(split, g, batch_size))[0].float().cpu() for _ in range(self.options.eval_batches)
        ]
        return {"loss": torch.stack(losses).mean()}


class ClassifyTask:
    """Sequence classification of a labelled set; a batch is random examples, right-padded."""

    name = "classify"

    def __init__(self, options: TrainOptions, tokenizer: Tokenizer | None = None) -> None:
        self.options = options
        self.splits, digest = corpora.labelled_splits_and_digest(options.dataset, seed=options.data_seed)
        self.data_digest = {"dataset": options.dataset, "sha256": digest}  # checked on resume (state.py)
        train_texts = [t for t, _ in self.splits["train"]]
        self.tokenizer = tokenizer or train_tokenizer(options, train_texts, strict_chars=False)
        self.encoded = {
            k: [
                ids[: options.block_size] or [self.tokenizer.pad_id]
                for ids in encode_many(self.tokenizer, [t for t, _ in rows])
            ]
            for k, rows in self.splits.items()
        }
        self.labels = {k: torch.tensor([y for _, y in rows], dtype=torch.long) for k, rows in self.splits.items()}
        self.num_labels = int(max(int(v.max()) for v in self.labels.values())) + 1
        if self.num_labels < 2:
            raise ValueError(f"dataset {options.dataset!r} has a single label; classification needs at least two")
        self.label_names = corpora.LABEL_NAMES.get(options.dataset, tuple(str(i) for i in range(self.num_labels)))

    def model_config(self, overrides: dict[str, Any]) -> ModelConfig:
        return _model_config(self.options, self.tokenizer, overrides, "classifier", num_labels=self.num_labels)

    def _rows(self, split: str, index: list[int]) -> dict[str, torch.Tensor]:
        ids, mask = _pad([self.encoded[split][i] for i in index], self.tokenizer.pad_id)
        return {"input_ids": ids, "attention_mask": mask, "labels": self.labels[split][index]}

    def batch(self, split: str, generator: torch.Generator, batch_size: int) -> dict[str, torch.Tensor]:
        index = torch.randint(len(self.encoded[split]), (batch_size,), generator=generator).tolist()
        return self._rows(split, index)

    @staticmethod
    def n_tokens(batch: dict[str, torch.Tensor]) -> int:
        return int(batch["attention_mask"].sum())

    def evaluate(self, loss_and_logits: LossAndLogits, split: str, batch_size: int) -> dict[str, torch.Tensor]:
        """Loss and accuracy over the whole split, in fixed chunks."""
        n = len(self.encoded[split])
        loss_sum, correct = torch.zeros(()), torch.zeros(())
        for start in range(0, n, batch_size):
            rows = self._rows(split, list(range(start, min(n, start + batch_size))))
            loss, logits = loss_and_logits(rows)
            loss_sum += loss.float().cpu() * len(rows["labels"])
            correct += (logits.argmax(-1).cpu() == rows["labels"]).sum()
        return {"loss": loss_sum / n, "accuracy": correct / n}

    def baselines(self) -> dict[str, float]:
        """Majority class and bag-of-characters logistic regression, trained on train, scored on test."""
        train, test = self.splits["train"], self.splits["test"]
        majority = Counter(y for _, y in train).most_common(1)[0][0]
        out = {"majority_class": sum(y == majority for _, y in test) / len(test)}
        vocab = {c: i for i, (c, _) in enumerate(Counter(c for t, _ in train for c in set(t)).most_common(5000))}

        def features(rows: list[tuple[str, int]]) -> tuple[torch.Tensor, torch.Tensor]:
            x = torch.zeros(len(rows), len(vocab))
            for i, (t, _) in enumerate(rows):
                for c, k in Counter(t).items():
                    if c in vocab:
                        x[i, vocab[c]] = math.log1p(k)
            return x, torch.tensor([y for _, y in rows])

        with torch.random.fork_rng():
            torch.manual_seed(0)
            x, y = features(train)
            x_test, y_test = features(test)
            mu, sd = x.mean(0), x.std(0) + 1e-6
            x, x_test = (x - mu) / sd, (x_test - mu) / sd
            lr = nn.Linear(len(vocab), self.num_labels)
            opt = torch.optim.LBFGS(lr.parameters(), max_iter=100, line_search_fn="strong_wolfe")

            def closure() -> torch.Tensor:
                opt.zero_grad()
                loss = F.cross_entropy(lr(x), y) + 1e-3 * lr.weight.square().sum()
                loss.backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward is unannotated
                return loss

            opt.step(closure)  # type: ignore[no-untyped-call]  # torch's LBFGS.step is unannotated
            with torch.no_grad():
                out["bag_of_characters_logreg"] = float((lr(x_test).argmax(-1) == y_test).float().mean())
        return out


class Seq2SeqTask:
    """A synthetic transduction (copy, reverse, sort) over lower-case letters; targets end with ``<eos>``."""

    name = "seq2seq"

    def __init__(self, options: TrainOptions, tokenizer: Tokenizer | None = None) -> None:
        self.options = options
        if options.seq2seq_task not in synthetic.TASKS:
            raise ValueError(
                f"unknown seq2seq_task {options.seq2seq_task!r}; valid names: {', '.join(synthetic.TASKS)}"
            )
        if options.max_len + 1 > options.block_size:
            raise ValueError(
                f"max_len + 1 = {options.max_len + 1} (with <eos>) must be <= block_size={options.block_size}"
            )
        self.tokenizer = tokenizer or CharTokenizer(synthetic.ALPHABET)
        self.data_digest: dict[str, str] = {}  # synthetic: the options and the generator's state are the data
        eos = self.tokenizer.eos_id
        if eos is None:
            raise ValueError(
                f"task=seq2seq needs a tokenizer with an end-of-sequence token; "
                f"{type(self.tokenizer).__name__} has none"
            )
        self.eos_id: int = eos

    def model_config(self, overrides: dict[str, Any]) -> ModelConfig:
        return _model_config(self.options, self.tokenizer, overrides, "seq2seq")

    def encode_source(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        return _pad([self.tokenizer.encode(s) + [self.eos_id] for s in texts], self.tokenizer.pad_id)

    def batch(self, split: str, generator: torch.Generator, batch_size: int) -> dict[str, torch.Tensor]:
        pairs = synthetic.sample_pairs(
            self.options.seq2seq_task, generator, batch_size, min_len=self.options.min_len, max_len=self.options.max_len
        )
        ids, mask = self.encode_source([s for s, _ in pairs])
        labels, label_mask = _pad([self.tokenizer.encode(t) + [self.eos_id] for _, t in pairs], 0)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels.masked_fill(~label_mask, -100)}

    @staticmethod
    def n_tokens(batch: dict[str, torch.Tensor]) -> int:
        return int(batch["attention_mask"].sum() + (batch["labels"] != -100).sum())

    def evaluate(self, loss_and_logits: LossAndLogits, split: str, batch_size: int) -> dict[str, torch.Tensor]:
        """Loss, and exact match under teacher forcing: every target token is the argmax (then greedy decoding
        reproduces the target exactly)."""
        g = eval_generator(split)
        losses, exact = [], []
        for _ in range(self.options.eval_batches):
            rows = self.batch(split, g, batch_size)
            loss, logits = loss_and_logits(rows)
            labels = rows["labels"]
            right = (logits.argmax(-1).cpu() == labels) | (labels == -100)
            losses.append(loss.float().cpu())
            exact.append(right.all(-1).float().mean())
        return {"loss": torch.stack(losses).mean(), "exact_match": torch.stack(exact).mean()}


Task = LMTask | ClassifyTask | Seq2SeqTask
TASK_CLASSES: dict[str, type[Task]] = {"lm": LMTask, "classify": ClassifyTask, "seq2seq": Seq2SeqTask}


def make_task(options: TrainOptions, tokenizer: Tokenizer | None = None) -> Task:
    return TASK_CLASSES[options.task](options, tokenizer)
