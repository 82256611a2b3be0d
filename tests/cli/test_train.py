"""``anatomy train / generate / predict``: bad input exits 2 with one clear line and overwrites nothing; the three
commands run with no network at all (``unshare -rn``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from anatomy.cli.main import main
from anatomy.training import checkpoint as ckpt
from anatomy.training import resuming

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
]


def _corpus(tmp: Path) -> Path:
    path = tmp / "corpus.txt"
    path.write_text(
        "\n\n".join(f"line {i}: the cat sat on the mat.\nand the dog ran." for i in range(80)) + "\n", encoding="utf-8"
    )
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A tiny language model trained once for the tests of this file."""
    tmp = tmp_path_factory.mktemp("cli")
    torch.set_num_threads(1)
    assert main(["train", "task=lm", f"corpus={_corpus(tmp)}", *TINY, "steps=4", "--out", str(tmp / "run")]) == 0
    return tmp / "run"


def _fingerprint(run_dir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1] if err else ""


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["train", "--preset", "char-nope", "--out", "X"],
            "unknown preset 'char-nope'; valid presets: bpe-shakespeare, char-shakespeare",
        ),
        (["train", "stepz=3", "--out", "X"], "unknown key 'stepz'; valid keys: "),
        (["train", "steps=three", "--out", "X"], "steps must be an integer, got 'three'"),
        (["train", "compile=maybe", "--out", "X"], "compile must be a boolean (true/false), got 'maybe'"),
        (["train", "lr", "--out", "X"], "expected key=value, got 'lr'"),
        (["train", "vocab_size=10", "--out", "X"], "vocab_size is set from the data"),
        (["train", "d_model=30", "n_heads=4", "corpus=tang300", "steps=1", "--out", "X"], "divisible by n_heads"),
        (["train", "precision=fp8", "--out", "X"], "precision must be one of fp32, bf16"),
        (["train", "--preset", "char-tang"], "--out DIR is required"),
    ],
)
def test_bad_usage_exits_2_with_one_line(argv, expected, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert expected in _error(capsys)
    assert not (tmp_path / "X").exists()


def test_unknown_key_lists_valid_keys(capsys):
    assert main(["train", "stepz=3", "--out", "X"]) == 2
    line = _error(capsys)
    for key in (
        "steps",
        "batch_size",
        "block_size",
        "lr",
        "warmup_steps",
        "eval_every",
        "save_every",
        "seed",
        "precision",
        "compile",
        "d_model",
        "n_heads",
        "positional",
    ):
        assert key in line


def test_corpus_not_utf8_or_empty(tmp_path, capsys):
    bad = tmp_path / "gbk.txt"
    bad.write_bytes("床前明月光".encode("gb18030"))
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n", encoding="utf-8")
    assert main(["train", f"corpus={bad}", *TINY, "--out", str(tmp_path / "a")]) == 2
    assert "is not UTF-8 text: byte 0xb4 at offset 0" in _error(capsys)
    assert main(["train", f"corpus={empty}", *TINY, "--out", str(tmp_path / "b")]) == 2
    assert "is empty" in _error(capsys)
    assert main(["train", "corpus=missing.txt", *TINY, "--out", str(tmp_path / "c")]) == 2
    assert "does not exist" in _error(capsys)
    assert not any((tmp_path / n).exists() for n in "abc")


def test_resume_missing_or_from_another_config_overwrites_nothing(run, tmp_path, capsys):
    before = _fingerprint(run)
    assert main(["train", "--resume", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in _error(capsys)
    assert main(["train", "--resume", str(run), "lr=0.5"]) == 2
    assert "lr=0.5 cannot change on resume" in _error(capsys)
    assert main(["train", "--resume", str(run), "d_model=64"]) == 2
    assert "d_model=64 cannot change on resume" in _error(capsys)
    assert main(["train", "--preset", "char-shakespeare", "--resume", str(run)]) == 2
    assert "comes from another configuration than --preset char-shakespeare" in _error(capsys)
    assert main(["train", "task=lm", *TINY, "steps=4", "--out", str(run)]) == 2  # --out of an existing run
    assert "already holds a training run" in _error(capsys)
    not_training = tmp_path / "plain"
    not_training.mkdir()
    (not_training / "config.json").write_text("{}")
    (not_training / "model.safetensors").write_bytes(b"")
    assert main(["train", "--resume", str(not_training)]) == 2
    assert "is not a training checkpoint" in _error(capsys)
    assert _fingerprint(run) == before


def test_generate_and_predict_bad_input(run, tmp_path, capsys):
    assert main(["generate", "--checkpoint", str(run), "--prompt", "the 猫"]) == 2
    assert "1 character(s) are not in the tokenizer's vocabulary: '猫'" in _error(capsys)
    assert main(["generate", "--checkpoint", str(tmp_path / "none"), "--prompt", "the"]) == 2
    assert "does not exist" in _error(capsys)
    assert main(["predict", "--checkpoint", str(run), "--text", "the"]) == 2
    assert "needs a classifier" in _error(capsys)
    assert main(["generate", "--checkpoint", str(run), "--prompt", "the", "--max-new-tokens", "40"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("the") and len(out.rstrip("\n")) >= len("the") + 1


def test_resume_extends_a_finished_run(run, tmp_path, capsys):
    copy = tmp_path / "more"
    shutil.copytree(run, copy)
    assert main(["train", "--resume", str(copy), "steps=6"]) == 0
    assert "step-000006" in {p.name for p in (copy / "checkpoints").iterdir()}


def _unshare_works() -> bool:
    if not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="`unshare -rn` is not permitted here (needs user namespaces)")
def test_train_generate_predict_evaluate_offline(tmp_path):
    """Inside a network namespace with no interface but loopback down: nothing may reach for the network."""
    root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "HF_HUB_OFFLINE": "0",
    }
    py = [sys.executable, "-m", "anatomy"]
    script = " && ".join(
        [
            " ".join(
                [
                    *py,
                    "train",
                    "--preset",
                    "char-tang",
                    "corpus=tang300",
                    *TINY,
                    "steps=2",
                    "--out",
                    str(tmp_path / "lm"),
                ]
            ),
            " ".join(
                [
                    *py,
                    "generate",
                    "--checkpoint",
                    str(tmp_path / "lm"),
                    "--prompt",
                    "床前明月光",
                    "--max-new-tokens",
                    "10",
                ]
            ),
            " ".join(
                [
                    *py,
                    "train",
                    "--preset",
                    "sentiment-en",
                    *TINY,
                    "bpe_vocab=300",
                    "baselines=false",
                    "steps=2",
                    "--out",
                    str(tmp_path / "cls"),
                ]
            ),
            " ".join([*py, "predict", "--checkpoint", str(tmp_path / "cls"), "--text", "'a fine film'"]),
            " ".join([*py, "evaluate", "--checkpoint", str(tmp_path / "cls")]),
        ]
    )
    done = subprocess.run(
        ["unshare", "-rn", "bash", "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("床前明月光")
    assert "a fine film" in lines[1] and "positive" in done.stdout and "negative" in done.stdout
    assert "(step 2, classify), test: loss " in lines[-1] and "accuracy " in lines[-1]


# ------------------------------------------------------------- a hostile world: full disks, read-only, bad --out


def small_disk(where: Path, size: str = "2m"):
    """A real, small file system: a tmpfs of ``size`` mounted at ``where`` (root only; pytest.skip with the reason
    otherwise). Returns a function that unmounts it; ``remount(ro=True)`` makes it read-only."""
    if os.geteuid() != 0:
        pytest.skip("a full or read-only disk is tested on a tmpfs the test mounts, which needs root")
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    return lambda: subprocess.run(["umount", "-l", str(where)], capture_output=True)


def remount(where: Path, *, ro: bool) -> None:
    subprocess.run(["mount", "-o", f"remount,{'ro' if ro else 'rw'}", str(where)], check=True, capture_output=True)


def fill(where: Path, leave: int) -> Path:
    """Fill the file system of ``where`` until ``leave`` bytes are free; the filler file is returned."""
    stat = os.statvfs(where)
    free = stat.f_bavail * stat.f_frsize
    filler = where / "filler.bin"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def losses(run_dir: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows]


def _words(tmp: Path, *extra: str) -> list[str]:
    return ["task=lm", f"corpus={_corpus(tmp)}", *TINY, "log_every=1", "keep_last=3", *extra]


def _one_error_line(capsys) -> str:
    """The stderr of a failed command: exactly one error line (after any progress lines), no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("anatomy ")]
    assert len(errors) == 1, err
    return errors[0]


def _no_temporary_files(run: Path) -> None:
    left = [str(p) for p in run.rglob("*") if p.name.startswith((".tmp", ".old", ".trash", ".anatomy.lock"))]
    assert not left, left


def _pages(n: int) -> int:
    return -(-n // 4096) * 4096


@pytest.mark.parametrize("dies_in", ["model.safetensors", "optimizer.pt"])
def test_full_disk_gives_one_line_keeps_every_checkpoint_and_resume_is_bit_exact(
    tmp_path, capsys, monkeypatch, dies_in
):
    torch.set_num_threads(1)
    umount = small_disk(tmp_path / "disk", "1m")
    try:
        words = _words(tmp_path, "steps=8")
        assert main(["train", *words, "--out", str(tmp_path / "solo")]) == 0  # the reference, on a roomy disk
        run = tmp_path / "disk" / "run"
        real, filler = ckpt.save_checkpoint, []

        def full_at_step_6(run_dir, step, **kw):
            if step == 6:  # the disk fills up just before this save: it dies writing `dies_in`
                files = [p for p in ckpt.step_dirs(run_dir)[-1].iterdir() if p.name not in ("optimizer.pt", "rng.pt")]
                room = 0 if dies_in == "model.safetensors" else sum(_pages(p.stat().st_size) for p in files)
                filler.append(fill(run_dir, room + 4096))
            return real(run_dir, step, **kw)

        monkeypatch.setattr(ckpt, "save_checkpoint", full_at_step_6)
        assert main(["train", *words, "--out", str(run)]) == 1
        line = _one_error_line(capsys)
        assert "no space left on the device holding" in line and str(run / "checkpoints") in line, line
        assert f"{dies_in}'" in line, line  # the file the disk filled under
        assert f"--resume {run}" in line
        monkeypatch.undo()
        _no_temporary_files(run)
        assert [d.name for d in ckpt.step_dirs(run)] == ["step-000002", "step-000004"]
        for d in ckpt.step_dirs(run):  # every earlier checkpoint loads, weights and training state
            ckpt.load_model(d)
            assert resuming.load_training_state(d)["state"]["step"] == int(d.name[-6:])

        assert main(["train", "--resume", str(run)]) == 1  # resume on the still-full disk: one line again
        assert "no space left" in _one_error_line(capsys)
        _no_temporary_files(run)
        assert [d.name for d in ckpt.step_dirs(run)] == ["step-000002", "step-000004"]

        filler[0].unlink()  # the space returns
        assert main(["train", "--resume", str(run)]) == 0
        assert losses(run) == losses(tmp_path / "solo")  # bit for bit, as if the disk had never filled
        a, b = ckpt.load_model(run)[0].state_dict(), ckpt.load_model(tmp_path / "solo")[0].state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a)
        _no_temporary_files(run)
    finally:
        umount()


def test_read_only_folder_gives_one_line_and_changes_nothing(tmp_path, capsys):
    torch.set_num_threads(1)
    disk = tmp_path / "disk"
    umount = small_disk(disk, "1m")
    try:
        run = disk / "run"
        assert main(["train", *_words(tmp_path, "steps=4"), "--out", str(run)]) == 0
        before = _fingerprint(run)
        remount(disk, ro=True)
        capsys.readouterr()
        assert main(["train", "--resume", str(run), "steps=6"]) == 1
        line = _one_error_line(capsys)
        assert "is on a read-only file system" in line and str(run) in line, line
        assert main(["train", *_words(tmp_path, "steps=4"), "--out", str(disk / "new")]) == 1
        line = _one_error_line(capsys)
        assert "is on a read-only file system" in line and str(disk / "new") in line, line
        assert _fingerprint(run) == before
        ckpt.load_model(run)
    finally:
        remount(disk, ro=False)
        umount()


def test_out_that_is_a_file_or_below_a_file_is_refused_by_name(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    assert main(["train", *_words(tmp_path, "steps=2"), "--out", str(notes)]) == 2
    line = _one_error_line(capsys)
    assert f"--out {str(notes)!r}: is an existing file" in line, line
    assert main(["train", *_words(tmp_path, "steps=2"), "--out", str(notes / "run")]) == 2
    line = _one_error_line(capsys)
    assert f"({str(notes)!r} is a file)" in line, line
    assert notes.read_text() == "mine\n"


def test_out_refuses_a_folder_that_is_not_ours_unless_overwrite(tmp_path, capsys):
    torch.set_num_threads(1)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    for name, text in (("summary.json", "my own notes\n"), ("metrics.jsonl", "{}\n"), ("keep.txt", "x\n")):
        (theirs / name).write_text(text)
    before = _fingerprint(theirs)
    assert main(["train", *_words(tmp_path, "steps=2"), "--out", str(theirs)]) == 2
    line = _one_error_line(capsys)
    assert "is a non-empty folder that `anatomy train` did not create" in line and "--overwrite" in line
    assert _fingerprint(theirs) == before
    assert main(["train", *_words(tmp_path, "steps=2"), "--out", str(theirs), "--overwrite"]) == 0
    assert (theirs / "keep.txt").read_text() == "x\n"
    assert json.loads((theirs / "summary.json").read_text())["steps"] == 2
    # a folder of ours whose run died before its first checkpoint may be started again without --overwrite
    ours = tmp_path / "ours"
    assert main(["train", *_words(tmp_path, "steps=2"), "--out", str(ours)]) == 0
    shutil.rmtree(ours / "checkpoints")
    assert main(["train", *_words(tmp_path, "steps=2"), "--out", str(ours)]) == 0
    assert [s for s, _ in losses(ours)] == [1, 2]
