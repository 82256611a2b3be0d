"""The data experiments train on: a Markov language with a known best loss, the embedded corpora as characters."""

from __future__ import annotations

import functools
import math

import torch

LM_T = 32  # the window of the character-LM experiments (§1, §2: head count, saturation, masks, init)


class MarkovTask:
    """A small text-like language with a known best loss.

    Token ``t`` is a fixed random function of the tokens ``lags`` places back with probability ``p``, else a
    uniform draw. With ``lags=(2,)`` the next token depends on the token two places back, so a model has to find
    that token *by its position* (no positional information: it cannot do much better than ``ln V``). With
    ``lags=(1, 2)`` it must combine two tokens through a table of ``V**2`` rows (work for the FFN). ``floor`` is the
    entropy of one predicted token (the best possible loss), ``uniform = ln V``.
    """

    def __init__(self, vocab: int = 16, lags: tuple[int, ...] = (2,), p: float = 0.9, seed: int = 0) -> None:
        if not lags or min(lags) < 1:
            raise ValueError(f"lags must be positive offsets, got {lags!r}")
        g = torch.Generator().manual_seed(10_000 + seed)
        self.vocab, self.lags, self.p = vocab, tuple(lags), p
        with torch.device("cpu"):  # drawn on the CPU's generator, whatever the default device
            self.table = (
                torch.randperm(vocab, generator=g)
                if len(lags) == 1
                else torch.randint(0, vocab, (vocab ** len(lags),), generator=g)
            )

    @property
    def start(self) -> int:
        """The first position whose token follows the rule (earlier ones are uniform and not scored)."""
        return max(self.lags)

    @property
    def floor(self) -> float:
        v, p = self.vocab, self.p
        hit, miss = p + (1 - p) / v, (1 - p) / v
        return -(hit * math.log(hit) + (v - 1) * miss * math.log(miss)) if miss > 0 else 0.0

    @property
    def uniform(self) -> float:
        return math.log(self.vocab)

    def sample(
        self, n: int, length: int, generator: torch.Generator, device: str | torch.device = "cpu"
    ) -> torch.Tensor:
        """``n`` sequences of ``length`` tokens, drawn on the CPU (``generator``), then moved to ``device``."""
        with torch.device("cpu"):
            x = torch.randint(0, self.vocab, (n, length), generator=generator)  # (N, T)
            keep = torch.rand(n, length, generator=generator) < self.p
            for t in range(self.start, length):
                idx = torch.zeros(n, dtype=torch.long)
                for lag in self.lags:
                    idx = idx * self.vocab + x[:, t - lag]
                x[:, t] = torch.where(keep[:, t], self.table[idx], x[:, t])
        return x.to(device)

    def batch(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """LM inputs with the unpredictable first tokens left out of the loss (label -100)."""
        labels = ids.clone()
        labels[:, : self.start] = -100
        return {"input_ids": ids, "labels": labels}


@functools.lru_cache(maxsize=4)
def char_corpus(
    name: str = "shakespeare", max_train: int = 300_000, max_val: int = 50_000
) -> tuple[torch.Tensor, torch.Tensor, tuple[str, ...]]:
    """An embedded corpus as character ids: ``(train ids, val ids, vocabulary)`` (split seed 0, cached; do not
    modify the tensors). Characters of the validation text unseen in training map to id 0."""
    from anatomy.data import corpus_splits

    parts = corpus_splits(name, 0)
    train_text, val_text = parts["train"][:max_train], parts["val"][:max_val]
    vocab = tuple(sorted(set(train_text)))
    stoi = {c: i for i, c in enumerate(vocab)}
    train = torch.tensor([stoi[c] for c in train_text], dtype=torch.long, device="cpu")
    val = torch.tensor([stoi.get(c, 0) for c in val_text], dtype=torch.long, device="cpu")
    return train, val, vocab


def lm_batch(
    data: torch.Tensor, length: int, batch: int, generator: torch.Generator, device: str | torch.device | None = None
) -> dict[str, torch.Tensor]:
    """``batch`` random windows of ``length`` tokens from a 1-D id tensor, as causal-LM inputs (labels = ids), on
    ``device`` (default: the data's). The windows are drawn on the CPU (``generator``)."""
    start = torch.randint(0, len(data) - length, (batch,), generator=generator, device="cpu")
    ids = torch.stack([data[s : s + length] for s in start.tolist()])  # (B, T)
    if device is not None:
        ids = ids.to(device)
    return {"input_ids": ids, "labels": ids}
