"""--device: refused in one line when the device is unknown or absent; and the plumbing proven without a GPU: every
experiment makes its models and tensors where ``trial.device`` says, never on the default device."""

from __future__ import annotations

import fnmatch
import json
import math

import pytest
import torch

from anatomy.experiments import devices
from anatomy.experiments.registry import EXPERIMENTS
from anatomy.experiments.runner import NONDETERMINISTIC, select
from anatomy.experiments.units import run_one

NO_CUDA = not torch.cuda.is_available()


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA: the refusal is for machines without it")
def test_cuda_on_a_machine_without_it_is_refused_naming_what_is_available():
    with pytest.raises(ValueError) as err:
        devices.check_device("cuda")
    line = str(err.value)
    assert "\n" not in line and line.startswith("--device cuda: CUDA is not available on this machine")
    assert line.endswith("available here: cpu")
    with pytest.raises(ValueError, match=r"^--device cuda:1: CUDA is not available"):
        devices.check_device("cuda:1")


@pytest.mark.parametrize(
    "name, said",
    [
        ("gpu", "--device 'gpu': not a device name (expected cpu or cuda[:N]; available here: cpu"),
        ("cuda:x", "--device 'cuda:x': not a device name"),
        ("mps", "--device 'mps': the claims lab runs on cpu or cuda[:N], not mps"),
        ("cpu:1", "--device 'cpu:1': there is one CPU device, cpu"),
    ],
)
def test_an_unknown_device_is_refused_in_one_line(name, said):
    with pytest.raises(ValueError) as err:
        devices.check_device(name)
    assert said in str(err.value) and "\n" not in str(err.value)


def test_the_cpu_is_always_there_and_nothing_is_synchronised_on_it():
    assert devices.check_device("cpu") == "cpu" and devices.check_device("cpu:0") == "cpu"
    assert devices.available()[0] == "cpu" and not devices.is_cuda("cpu")
    devices.synchronize("cpu")  # a no-op, not an error
    made = devices.on("cpu", lambda: {"x": torch.arange(3), "n": 1})
    assert made["x"].tolist() == [0, 1, 2] and made["n"] == 1


def _equal(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def test_every_experiment_builds_on_trial_device_not_on_the_default_one(smoke_serial, tmp_path):
    """Every experiment at the smoke preset, seed 0, run again with ``torch.set_default_device("meta")`` and
    ``Trial.device = "cpu"``: a model or tensor made without naming a device (the trial's, or the CPU where data are
    drawn on its generator) lands on the meta device, which has no values, so the run fails or its numbers change.
    Its metrics must equal the normal CPU run's (conftest's serial smoke run, every metric of every unit as stored)
    bit for bit, except the wall-clock ones the runner declares (``NONDETERMINISTIC``).

    What a meta default cannot break, and so this test cannot see: a tensor made explicitly on the CPU that then
    meets a tensor on the trial's device (both are the CPU here); that needs a GPU (docs/claims.md says how to check
    with ``--device cuda``). Python floats, ints and ``torch.Generator()`` (always a CPU generator) are untouched by
    the default device, so nothing device-free had to be exempted. Experiments declared ``cpu_only`` run on the CPU
    by an explicit ``torch.device(trial.device)``, which this test checks as well.

    One metric is exempted, for a reason of torch's, not ours: ``torch.nn.TransformerEncoderLayer`` takes its fused
    fast path only when no TorchFunctionMode is active, and ``set_default_device`` installs one (so does ``with
    torch.device("cpu")``: checked below). Under the trap, layernorm-reference's torch layer runs its Python path,
    whose float64 rounding differs by about 1e-16, so ``post_norm_parity_err`` (ours vs torch's layer) moves at that
    level; it must still be far below the claim's 1e-10."""
    out, _ = smoke_serial
    select(None)
    assert len(EXPERIMENTS) == 19
    torch.set_default_device("meta")
    try:
        assert torch.empty(1).device.type == "meta"  # the trap is set
        again = {name: run_one(name, "smoke", 0, str(tmp_path), "cpu")[0] for name in sorted(EXPERIMENTS)}
    finally:
        torch.set_default_device(None)
    assert torch.empty(1).device.type == "cpu"
    torch_fast_path = {("layernorm-reference", "post_norm_parity_err")}
    layer = torch.nn.TransformerEncoderLayer(16, 4, 64, dropout=0.0, batch_first=True).double().eval()
    h = torch.randn(2, 10, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), torch.device("cpu"):
        slow = layer(h)
    with torch.no_grad():
        assert not torch.equal(layer(h), slow)  # the mode alone changes torch's rounding: the exemption is needed
    compared = 0
    for name, metrics in again.items():
        stored = json.loads((out / "units" / f"{name}.seed0.json").read_text(encoding="utf-8"))["metrics"]
        assert set(metrics) == set(stored), name
        patterns = NONDETERMINISTIC.get(name, ((), ""))[0]
        for key, value in metrics.items():
            if any(fnmatch.fnmatchcase(key, p) for p in patterns):
                continue
            if (name, key) in torch_fast_path:
                assert value < 1e-10 and float(stored[key]) < 1e-10, (name, key, value)
                continue
            assert _equal(value, float(stored[key])), (name, key, value, stored[key])
            compared += 1
    assert compared > 300  # every experiment's numbers (356 at the smoke preset), not a handful


def test_a_cpu_only_experiment_says_so_in_claims_json(tmp_path):
    from anatomy.experiments.runner import run_claims

    select(None)
    cpu_only = {n for n, e in EXPERIMENTS.items() if e.cpu_only}
    assert cpu_only == {"sinusoidal-algebra"}  # LAPACK's gelsd is CPU-only in torch
    assert EXPERIMENTS["sinusoidal-algebra"].device_for("cuda") == "cpu"
    assert EXPERIMENTS["pe-lm"].device_for("cuda") == "cuda"
    doc = run_claims(["C24", "C4"], preset="smoke", out=tmp_path, progress=False)
    assert doc["environment"]["device"] == "cpu"
    by_id = {c["id"].split("-")[0]: c for c in doc["claims"]}
    assert by_id["C24"]["device"] == "cpu" and "gelsd" in by_id["C24"]["cpu_only"]
    assert by_id["C4"]["device"] == "cpu" and "cpu_only" not in by_id["C4"]
