"""``anatomy convert --out``: never into a checkpoint or run, a non-empty folder only with --overwrite, one line for a
file, a read-only folder or a full disk (and no half-written folder left)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
import torch

from anatomy.cli.main import main
from anatomy.training import checkpoint as ckpt

pytest.importorskip("transformers")

TINY = [
    "d_model=16",
    "n_heads=2",
    "n_layers=1",
    "d_ff=32",
    "batch_size=4",
    "block_size=16",
    "eval_batches=2",
    "warmup_steps=2",
    "progress=false",
    "plot=false",
    "eval_every=100",
    "save_every=2",
    "steps=2",
]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    """A trained run and its checkpoint written in Hugging Face's format."""
    tmp = tmp_path_factory.mktemp("convert")
    torch.set_num_threads(1)
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n\n".join(f"line {i}: the cat sat on the mat." for i in range(60)) + "\n", encoding="utf-8")
    assert main(["train", "task=lm", f"corpus={corpus}", *TINY, "--out", str(tmp / "run")]) == 0
    step = ckpt.step_dirs(tmp / "run")[-1]
    assert main(["convert", "--to-hf", str(step), "--out", str(tmp / "hf")]) == 0
    return {"run": tmp / "run", "step": step, "hf": tmp / "hf"}


def _fingerprint(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1, err
    return lines[0]


def test_a_checkpoint_or_run_folder_is_never_a_target(dirs, capsys):
    before = _fingerprint(dirs["run"])
    for target in (dirs["step"], dirs["run"]):
        for extra in ([], ["--overwrite"]):
            assert main(["convert", "--from-hf", str(dirs["hf"]), "--out", str(target), *extra]) == 2
            line = _one_line(capsys)
            assert f"--out {str(target)!r} is a training checkpoint or run folder" in line, line
    assert _fingerprint(dirs["run"]) == before
    ckpt.load_model(dirs["run"])  # its tokenizer still fits its weights


def test_an_existing_folder_is_refused_unless_overwrite(dirs, tmp_path, capsys):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "config.json").write_text('{"mine": true}\n')
    for flag in ("--to-hf", "--from-hf"):
        source = dirs["step"] if flag == "--to-hf" else dirs["hf"]
        assert main(["convert", flag, str(source), "--out", str(theirs)]) == 2
        line = _one_line(capsys)
        assert f"--out {str(theirs)!r} is a non-empty folder (config.json)" in line and "--overwrite" in line, line
        assert (theirs / "config.json").read_text() == '{"mine": true}\n'
    assert main(["convert", "--to-hf", str(dirs["step"]), "--out", str(theirs), "--overwrite"]) == 0
    assert "architectures" in (theirs / "config.json").read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["convert", "--from-hf", str(dirs["hf"]), "--out", str(empty)]) == 0


def test_a_file_as_out_is_refused_by_name(dirs, tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    assert main(["convert", "--from-hf", str(dirs["hf"]), "--out", str(notes)]) == 2
    assert f"--out {str(notes)!r}: is an existing file" in _one_line(capsys)
    assert notes.read_text() == "mine\n"


def _mount(where: Path, size: str):
    if os.geteuid() != 0:
        pytest.skip("a full or read-only disk is tested on a tmpfs the test mounts, which needs root")
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


def test_read_only_and_full_disks_give_one_line_and_leave_no_folder(dirs, tmp_path, capsys):
    disk = tmp_path / "disk"
    _mount(disk, "256k")
    try:
        stat = os.statvfs(disk)
        with open(disk / "filler.bin", "wb") as f:  # leave one page: the weights do not fit
            f.write(b"\0" * (stat.f_bavail * stat.f_frsize - 4096))
        assert main(["convert", "--from-hf", str(dirs["hf"]), "--out", str(disk / "ours")]) == 1
        line = _one_line(capsys)
        assert "no space left on the device holding" in line and str(disk / "ours") in line, line
        assert sorted(p.name for p in disk.iterdir()) == ["filler.bin"]  # the folder it created is gone
        (disk / "filler.bin").unlink()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        assert main(["convert", "--from-hf", str(dirs["hf"]), "--out", str(disk / "ours")]) == 1
        line = _one_line(capsys)
        assert f"{str(disk / 'ours')!r} is on a read-only file system" in line, line
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.mark.parametrize(
    "name,what",
    [
        ("config.json", "a JSON object (the model's configuration)"),
        ("generation_config.json", "a JSON object (Hugging Face's generation defaults)"),
        ("tokenizer_config.json", "a JSON object"),
    ],
)
def test_a_deeply_nested_json_file_is_refused_as_read_json_refuses_it(dirs, tmp_path, capsys, name, what):
    """convert reads the source's JSON files through anatomy.files.read_json, as load_pretrained does: one
    behaviour, one wording (its own depth check once said "not a configuration file")."""
    import shutil

    from anatomy.files import BadJSON, read_json

    source = tmp_path / "hf"
    shutil.copytree(dirs["hf"], source)
    path = source / name
    path.write_text('{"a": ' + "[" * 50_000 + "]" * 50_000 + "}")
    with pytest.raises(BadJSON) as said:
        read_json(path, what=what)
    assert main(["convert", "--from-hf", str(source), "--out", str(tmp_path / "out")]) == 1
    assert _one_line(capsys) == f"anatomy convert: error: {said.value}"
    assert str(said.value) == f"{path}: nested more than 200 levels deep; expected {what}"
    assert not (tmp_path / "out").exists()


def test_a_path_transformers_cannot_use_is_refused_by_name_and_ours_reads_back(dirs, tmp_path, capsys, monkeypatch):
    """A folder whose name is not UTF-8: transformers cannot write or read it (it once failed after "converted"
    was printed, with "surrogates not allowed"), so --to-hf's --out and --from-hf --verify's source are refused
    naming the flag; our own checkpoint and tokenizer go there and read back."""
    import io
    import sys

    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="surrogateescape")  # as Python's own stdout
    monkeypatch.setattr(sys, "stdout", stdout)
    weird = Path(os.fsdecode(os.fsencode(tmp_path) + b"/\xff-latin1"))
    assert main(["convert", "--to-hf", str(dirs["step"]), "--out", str(weird / "hf")]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"anatomy convert: error: --out {str(weird / 'hf')!r}: the path is not valid UTF-8"), line
    assert not weird.exists()
    code = main(["convert", "--from-hf", str(dirs["hf"]), "--out", str(weird / "ours")])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["generate", "--checkpoint", str(weird / "ours"), "--prompt", "the", "--max-new-tokens", "4"]) == 0
    stdout.flush()
    assert stdout.buffer.getvalue().decode("utf-8", "surrogateescape").splitlines()[-1].startswith("the")
    capsys.readouterr()
    assert main(["convert", "--from-hf", str(weird / "ours"), "--out", str(tmp_path / "o"), "--verify"]) == 2
    assert "the path is not valid UTF-8, which transformers cannot read" in _one_line(capsys)
