"""Loss-spike watch: say so when one step's training loss jumps far above its recent average.

A spike is not skipped or undone (nanoGPT's maintainers refused "skip the step if the loss is NaN": instability is
a fact about the run, not about the batch); it is reported — a line in the log and ``spike_z`` in
``metrics.jsonl`` — so that a learner sees *when* the run went wrong, before a non-finite loss stops it. The
usual causes: a learning rate too high for the warmup, Post-Norm at depth, fp16 overflow.

The average is an exponential moving mean and variance of the per-step loss (about the last 50 steps). A step is a
spike when its loss is more than ``z`` standard deviations above the mean **and** more than 20% above it (the
second condition keeps a nearly constant loss, whose deviation is tiny, from flagging noise). Nothing is flagged
before the warmup has ended and the average has seen 50 steps. Consecutive spiking steps are one event: each is
recorded, the first is said.
"""

from __future__ import annotations

import math
from typing import Any

ALPHA = 0.02  # weight of the newest step in the moving mean and variance (~50 steps)
MIN_SEEN = 50
MIN_RATIO = 1.2


class SpikeWatch:
    def __init__(self, z: float, warmup_steps: int):
        self.z, self.warmup_steps = z, warmup_steps
        self.mean, self.var, self.seen = 0.0, 0.0, 0
        self.continuing = False  # the last spike followed another one: the same event (said once)
        self._last_spiked = False

    def update(self, step: int, loss: float) -> float | None:
        """Take one step's loss; return its z-score when it is a spike, else None. A spike does not enter the
        average (the next steps are judged against the run as it was)."""
        if not math.isfinite(loss):
            return None
        spike = None
        if self.z > 0 and self.seen >= MIN_SEEN and step > self.warmup_steps:
            std = math.sqrt(self.var)
            z = (loss - self.mean) / std if std > 0 else math.inf
            if z > self.z and loss > MIN_RATIO * self.mean:
                spike = z
        if spike is None:
            if self.seen == 0:
                self.mean = loss
            else:
                delta = loss - self.mean
                self.mean += ALPHA * delta
                self.var = (1 - ALPHA) * (self.var + ALPHA * delta * delta)
            self.seen += 1
        self.continuing = spike is not None and self._last_spiked
        self._last_spiked = spike is not None
        return spike

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "var": self.var, "seen": self.seen, "last_spiked": self._last_spiked}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean, self.var, self.seen = float(state["mean"]), float(state["var"]), int(state["seen"])
        self._last_spiked = bool(state.get("last_spiked", False))
