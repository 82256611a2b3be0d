"""--dry-run: the plan of a run (units, estimated CPU-hours per experiment from the stored measured costs), printed
without running or connecting anything; the step probe those costs were measured with."""

from __future__ import annotations

import re

import torch

from anatomy.cli.main import main
from anatomy.experiments import estimate
from anatomy.experiments.fitting import POST_SIZES, StepProbe, budget, fit, tiny_model
from anatomy.experiments.registry import CLAIMS, DEFAULT_SEEDS, EXPERIMENTS
from anatomy.experiments.runner import select


def test_a_dry_run_of_paper_prints_its_plan_and_runs_nothing(tmp_path, capsys, monkeypatch):
    def never(*_a, **_k):
        raise AssertionError("a dry run ran an experiment")

    select(None)
    for exp in EXPERIMENTS.values():
        monkeypatch.setattr(exp, "fn", never)
    out = tmp_path / "never-made"
    assert main(["report", "--preset", "paper", "--dry-run", "--out", str(out), "--jobs", "4"]) == 0
    text = capsys.readouterr().out
    n_exp = len({c.experiment for c in CLAIMS.values()})
    assert DEFAULT_SEEDS["paper"] == 5
    assert f"55 claims in {n_exp} experiments -> {5 * n_exp} units" in text and "on 4 local processes" in text
    assert "stored table of per-step costs measured at the paper preset" in text
    rows = {
        line.split()[0]: line.split() for line in text.splitlines() if line.split() and line.split()[0] in EXPERIMENTS
    }
    assert set(rows) == {c.experiment for c in CLAIMS.values()}
    table = estimate.MEASURED["paper"]
    assert set(table) == set(EXPERIMENTS) and len(table) == 19  # every experiment measured: no row left blank
    total, longest = 0.0, 0.0
    for exp, row in rows.items():
        seconds, steps = table[exp]
        assert seconds > 0 and row[-4:] == [str(5), str(steps), f"{seconds:.2f}", f"{seconds * 5 / 3600:.3f}"], row
        total += seconds * 5 / 3600
        longest = max(longest, seconds / 3600)
    said = re.search(
        r"total: ([0-9.]+) CPU-hours; the longest unit ([0-9.]+) h; on 4 CPUs at least ([0-9.]+) h of "
        "wall time",
        text,
    )
    assert said and abs(float(said.group(1)) - total) < 0.006 and abs(float(said.group(2)) - longest) < 0.006
    assert abs(float(said.group(3)) - max(total / 4, longest)) < 0.006
    assert "?" not in text  # nothing unmeasured
    assert text.rstrip().endswith("nothing was run (--dry-run)")
    assert not out.exists()


def test_a_dry_run_on_a_cluster_does_not_connect_and_names_missing_costs(capsys):
    text = estimate.dry_run(["C20", "C4"], preset="smoke", seeds=2, cluster="10.0.0.1:6379")
    assert "2 claims in 2 experiments -> 4 units" in text and "the Ray cluster at 10.0.0.1:6379" in text
    assert "none stored for the smoke preset" in text and text.count(" ? ") >= 2


def test_the_paper_preset_takes_the_posts_sizes_and_otherwise_the_full_budget():
    assert POST_SIZES == {"d_model": 512, "n_heads": 8, "n_layers": 6, "T": 128}
    assert budget("paper", 1, 2, 3) == 3 and budget("paper", 1, 2, 3, 512) == 512
    assert [budget(p, 1, 2, 3, 512) for p in ("smoke", "quick", "full")] == [1, 2, 3]


def test_the_step_probe_times_the_first_steps_and_keeps_the_curve_length():
    def batches(_step):
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, 64, (4, 16), generator=g)
        return {"input_ids": ids, "labels": ids}

    torch.manual_seed(0)
    plain = fit(tiny_model(d_model=16, n_heads=2, n_layers=1), batches, 6)
    torch.manual_seed(0)
    with StepProbe(limit=3) as probe:
        probed = fit(tiny_model(d_model=16, n_heads=2, n_layers=1), batches, 6)
    assert StepProbe.active is None
    assert probed[:3] == plain[:3] and probed[3:] == [probed[2]] * 3  # the steps taken are the same steps
    assert len(probe.calls) == 1 and probe.calls[0][0] == 6 and probe.calls[0][1] > 0
    assert probe.seconds >= probe.calls[0][1]  # three steps timed, the mean of the last two per step
