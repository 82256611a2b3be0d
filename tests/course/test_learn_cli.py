"""`anatomy learn`: list with progress, start never overwrites, check's exit codes, solution after an attempt."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from anatomy.cli.main import main
from anatomy.course import EXERCISES

LEARNERS = Path(__file__).parent / "learners"


def _list(tmp_path, capsys) -> dict:
    assert main(["learn", "list", "--dir", str(tmp_path), "--format", "json"]) == 0
    return {e["id"]: e for e in json.loads(capsys.readouterr().out)["exercises"]}


def test_list_start_check_solution_and_progress_survive_a_restart(tmp_path, capsys):
    rows = _list(tmp_path, capsys)
    assert list(rows) == [e.id for e in EXERCISES] and {r["status"] for r in rows.values()} == {"not started"}
    assert rows["attention"]["section"] == "§1.3"
    assert main(["learn", "solution", "attention", "--dir", str(tmp_path)]) == 2  # no attempt yet
    assert "make a real attempt first" in capsys.readouterr().err
    assert main(["learn", "start", "attention", "--dir", str(tmp_path), "--lang", "zh"]) == 0
    skeleton = (tmp_path / "01_attention.py").read_text(encoding="utf-8")
    assert skeleton.startswith("# anatomy learn · exercise: attention") and "必须满足" in skeleton
    assert main(["learn", "check", "attention", "--dir", str(tmp_path)]) == 1  # the skeleton returns None
    out = capsys.readouterr().out
    assert "NOT YET" in out and "pitfall: wrong_return" in out and "NoneType" in out
    assert _list(tmp_path, capsys)["attention"]["status"] == "tried"
    assert main(["learn", "solution", "attention", "--dir", str(tmp_path)]) == 0
    assert "def attention(q, k, v, mask=None)" in capsys.readouterr().out
    shutil.copy(LEARNERS / "attention_ok_einsum_finfo.py", tmp_path / "01_attention.py")
    assert main(["learn", "check", "attention", "--dir", str(tmp_path), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and report["shape_table"] and report["shape_table"][0]["line"] > 0
    rows = _list(tmp_path, capsys)  # a new process reads the same file: progress survives a restart
    assert rows["attention"]["status"] == "done" and rows["heads"]["status"] == "not started"
    saved = json.loads((tmp_path / ".anatomy-learn.json").read_text(encoding="utf-8"))
    assert saved["exercises"]["attention"]["checks"] == 2


def test_start_never_overwrites(tmp_path, capsys):
    mine = tmp_path / "01_attention.py"
    mine.write_text("# my own work\n", encoding="utf-8")
    assert main(["learn", "start", "attention", "--dir", str(tmp_path)]) == 2
    assert "never overwritten" in capsys.readouterr().err
    assert mine.read_text(encoding="utf-8") == "# my own work\n"


def test_check_with_a_pitfall_exits_1_and_names_line_and_hint(tmp_path, capsys):
    assert (
        main(
            [
                "learn",
                "check",
                "heads",
                str(LEARNERS / "heads_split_no_transpose_view.py"),
                "--dir",
                str(tmp_path),
                "--lang",
                "en",
            ]
        )
        == 1
    )
    out = capsys.readouterr().out
    assert "pitfall: split_without_transpose" in out and "line 3" in out and "hint:" in out
    assert "reshape之后必须紧跟transpose" in out


def test_check_of_another_exercises_file_says_so(tmp_path, capsys):
    assert main(["learn", "start", "masks", "--dir", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["learn", "check", "attention", str(tmp_path / "03_masks.py"), "--dir", str(tmp_path)]) == 1
    assert "is the file of exercise 'masks'" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, words",
    [
        (["learn", "start", "nope"], "no exercise 'nope'"),
        (["learn", "check", "attention", "missing.py"], "no such file"),
        (["learn"], "choose: anatomy learn"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, words, tmp_path, capsys):
    assert main(argv + ["--dir", str(tmp_path)] if len(argv) > 1 else argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_the_language_follows_the_locale(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    monkeypatch.delenv("LC_ALL", raising=False)
    assert main(["learn", "list", "--dir", str(tmp_path)]) == 0
    assert "缩放点积注意力" in capsys.readouterr().out


def test_a_corrupt_progress_file_is_named_not_replaced(tmp_path, capsys):
    (tmp_path / ".anatomy-learn.json").write_text("{not json", encoding="utf-8")
    assert main(["learn", "list", "--dir", str(tmp_path)]) == 2
    assert ".anatomy-learn.json" in capsys.readouterr().err
    assert (tmp_path / ".anatomy-learn.json").read_text(encoding="utf-8") == "{not json"


def test_in_chinese_the_skeleton_list_and_page_speak_chinese(tmp_path, capsys):
    from anatomy.course import get, page, skeleton

    text = skeleton(get("attention"), "zh")
    assert "mask: 布尔型，True = 可以关注" in text and "may attend" not in text
    assert "不用写新代码" in skeleton(get("tiny_lm"), "zh") and "check tiny_lm 08_block.py" in skeleton(get("tiny_lm"))
    assert main(["learn", "list", "--dir", str(tmp_path), "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert "(未开始)" in out and "not started" not in out
    assert "未开始" in page(None, "zh") and "not started" not in page(None, "zh")


def test_check_prints_the_short_answer_and_details_on_request(tmp_path, capsys):
    path = str(LEARNERS / "block_relu.py")
    assert main(["learn", "check", "block", path, "--dir", str(tmp_path), "--lang", "en"]) == 1
    short = capsys.readouterr().out
    assert len(short.strip().splitlines()) <= 8 and "pitfall: relu_instead_of_gelu" in short and "line 34:" in short
    assert main(["learn", "check", "block", path, "--dir", str(tmp_path), "--lang", "en", "--details"]) == 1
    full = capsys.readouterr().out
    assert "shape table (your code):" in full and len(full.splitlines()) > 8
