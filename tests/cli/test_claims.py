"""`anatomy claims run` / `anatomy report`: their running options (--jobs or --cluster, --cluster-cpus, --resume,
--dry-run), each refused in one line when wrong, before anything runs."""

from __future__ import annotations

import sys

import pytest

from anatomy.cli.main import main


def test_jobs_and_cluster_are_one_choice(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["claims", "run", "C4", "--jobs", "2", "--cluster", "auto", "--out", str(tmp_path)])
    assert stop.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_cluster_cpus_must_be_positive(tmp_path, capsys):
    assert main(["report", "--preset", "smoke", "--out", str(tmp_path), "--cluster", "auto",
                 "--cluster-cpus", "0"]) == 2
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
