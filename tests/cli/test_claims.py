"""`anatomy claims run` / `anatomy report`: their running options (--jobs or --cluster, --cluster-cpus, --resume,
--dry-run, --device), each refused in one line when wrong, before anything runs."""

from __future__ import annotations

import sys

import pytest
import torch

from anatomy.cli.main import main


def test_jobs_and_cluster_are_one_choice(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["claims", "run", "C4", "--jobs", "2", "--cluster", "auto", "--out", str(tmp_path)])
    assert stop.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_cluster_cpus_must_be_positive(tmp_path, capsys):
    assert (
        main(["report", "--preset", "smoke", "--out", str(tmp_path), "--cluster", "auto", "--cluster-cpus", "0"]) == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--cluster-cpus must be positive" in err


def test_a_cluster_without_ray_installed_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as without the extra
    assert main(["claims", "run", "C4", "--preset", "smoke", "--out", str(tmp_path), "--cluster", "auto"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--cluster needs Ray: pip install 'transformer-anatomy[cluster]'" in err
    assert not (tmp_path / "units").exists()


def test_resume_of_an_empty_folder_is_one_line(tmp_path, capsys):
    assert main(["claims", "run", "C4", "--preset", "smoke", "--out", str(tmp_path), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no units/run.json (nothing to resume)" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal is for machines without it")
@pytest.mark.parametrize(
    "argv",
    [
        ["report", "--preset", "smoke"],
        ["claims", "run", "C4", "--preset", "smoke"],
        ["report", "--preset", "paper", "--dry-run"],
    ],
)
def test_device_cuda_without_cuda_is_refused_before_anything_starts(tmp_path, capsys, argv):
    out = tmp_path / "never-made"
    assert main([*argv, "--out", str(out), "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--device cuda: CUDA is not available on this machine" in err
    assert err.rstrip().endswith("available here: cpu") and not out.exists()


def test_an_unknown_device_is_one_line_also_with_a_cluster(tmp_path, capsys):
    argv = ["claims", "run", "C4", "--preset", "smoke", "--out", str(tmp_path / "x"), "--device", "tpu"]
    assert main(argv) == 2
    assert "--device 'tpu': not a device name" in capsys.readouterr().err
    assert main(["report", "--out", str(tmp_path / "y"), "--cluster", "127.0.0.1:9", "--device", "cuda:x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--device 'cuda:x': not a device name" in err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_the_plan_names_the_device(capsys):
    assert main(["report", "--preset", "smoke", "--dry-run", "--jobs", "2", "--device", "cpu"]) == 0
    assert "on 2 local processes, device cpu" in capsys.readouterr().out
    from anatomy.experiments.estimate import dry_run

    text = dry_run(None, preset="paper", cluster="10.0.0.1:6379", device="cuda")  # for a cluster: not checked here
    assert "the Ray cluster at 10.0.0.1:6379 (1 CPU and 1 GPU per unit), device cuda" in text
    assert "no GPU costs are stored" in text and "(a GPU's time is not measured)" in text
