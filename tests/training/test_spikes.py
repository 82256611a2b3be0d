"""The loss-spike watch: a synthetic spike after warmup is reported (log line naming the step, ``spike_z`` in
metrics.jsonl) without changing training; ordinary noise and the steep fall of early training are not; the watch's
state survives a resume."""

from __future__ import annotations

import json
import random

import pytest

from anatomy.training import loop
from anatomy.training.options import parse_words, resolve
from anatomy.training.spikes import SpikeWatch

from .helpers import lm_words


def test_noise_and_the_early_fall_are_not_spikes():
    rng = random.Random(0)
    watch = SpikeWatch(z=6.0, warmup_steps=10)
    flagged = [
        step for step in range(1, 3001) if watch.update(step, 4.0 * 0.999**step + 1.0 + rng.gauss(0, 0.05)) is not None
    ]
    assert flagged == []


def test_a_jump_after_warmup_is_a_spike_and_stays_out_of_the_average():
    rng = random.Random(1)
    watch = SpikeWatch(z=6.0, warmup_steps=10)
    for step in range(1, 200):
        assert watch.update(step, 2.0 + rng.gauss(0, 0.05)) is None
    mean = watch.mean
    z = watch.update(200, 5.0)
    assert z is not None and z > 6 and watch.mean == mean and not watch.continuing
    assert watch.update(201, 4.0) is not None and watch.continuing  # the same event: recorded, not said again
    assert watch.update(202, 2.0) is None and not watch.continuing
    assert watch.update(203, 5.0) is not None and not watch.continuing  # a new event


@pytest.mark.parametrize("z, step, seen", [(0.0, 500, 100), (6.0, 5, 100), (6.0, 500, 10)])
def test_off_during_warmup_and_before_fifty_steps(z, step, seen):
    watch = SpikeWatch(z=z, warmup_steps=100)
    watch.load_state_dict({"mean": 2.0, "var": 0.01, "seen": seen})
    assert watch.update(step, 50.0) is None


def test_a_run_reports_an_injected_spike_and_resumes_the_watch(tmp_path, monkeypatch):
    import anatomy.models.lm as lm

    real, calls = lm.lm_loss, {"n": 0}

    def spiked(logits, labels):
        loss = real(logits, labels)
        if logits.requires_grad:  # training forwards only
            calls["n"] += 1
            if calls["n"] == 80:
                return loss * 4
        return loss

    monkeypatch.setattr(lm, "lm_loss", spiked)
    said = []
    options, model = resolve(
        None, parse_words(lm_words(tmp_path, "steps=100", "save_every=90", "eval_every=1000", "log_every=25"))
    )
    loop.train(options, model, tmp_path / "run", log=said.append)
    spikes = [line for line in said if "loss spike" in line]
    assert len(spikes) == 1 and spikes[0].startswith("step 80: loss spike:"), said
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    flagged = [r for r in rows if "spike_z" in r]
    assert [r["step"] for r in flagged] == [80] and flagged[0]["spike_z"] > 6
    state = json.loads((tmp_path / "run" / "checkpoints" / "step-000100" / "trainer_state.json").read_text())
    assert state["spikes"]["seen"] >= 50  # saved with the run, restored by --resume
