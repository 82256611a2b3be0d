"""``anatomy learn list|start|check|solution``: the course on the post, exercise by exercise."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anatomy.course.exercises import Exercise
    from anatomy.course.progress import Progress


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="learn_command", metavar="list|start|check|solution|page")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", default=".", help="the working folder: exercises and progress (default: here)")
    common.add_argument("--lang", choices=("zh", "en"), default=None, help="language (default: from the locale)")
    ls = sub.add_parser("list", parents=[common], help="the exercises and your progress")
    ls.add_argument("--format", choices=("text", "json"), default="text")
    st = sub.add_parser("start", parents=[common], help="write an exercise's skeleton file (never overwrites)")
    st.add_argument("id", help="the exercise (see `anatomy learn list`)")
    st.add_argument("--hint", action="store_true", help="put the hint in the skeleton")
    st.add_argument(
        "--notebook",
        action="store_true",
        help="write NN_exercise.ipynb instead: the same texts, a cell to fill in, a cell that grades it",
    )
    ck = sub.add_parser("check", parents=[common], help="grade your file: pass, or the pitfall and its line")
    ck.add_argument("id")
    ck.add_argument("file", nargs="?", help="your file (default: the one `start` wrote)")
    ck.add_argument("--format", choices=("text", "json"), default="text")
    ck.add_argument("--details", action="store_true", help="the full report (default: the short answer)")
    ck.add_argument("--timeout", type=float, default=20.0, help="seconds one call of your code may take (default 20)")
    ck.add_argument(
        "--steps", type=int, default=None, help="tiny_lm, gpt: training steps (default 300, under a minute)"
    )
    ck.add_argument(
        "--figure",
        default=None,
        help="tiny_lm, gpt: where to draw the two loss curves (default ID_loss.png in --dir)",
    )
    pg = sub.add_parser("page", parents=[common], help="the exercises and your progress as one HTML page")
    pg.add_argument("--out", required=True, help="FILE.html")
    so = sub.add_parser("solution", parents=[common], help="the reference solution, after a real attempt")
    so.add_argument("id")
    so.add_argument("--force", action="store_true", help="show it without an attempt")


def run(args: argparse.Namespace) -> int:
    from anatomy.cli.usage import UsageError
    from anatomy.course import EXERCISES, get, language, skeleton, solution_text
    from anatomy.course.progress import Progress

    command = getattr(args, "learn_command", None)
    if command is None:
        raise UsageError("choose: anatomy learn list|start|check|solution (see anatomy learn --help)")
    lang = language(args.lang)
    folder = Path(args.dir)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--dir {args.dir!r} is not a folder")
    progress = Progress(folder)
    zh = lang == "zh"
    if command == "list":
        rows: list[dict[str, Any]] = [
            {
                "id": e.id,
                "section": e.section,
                "title": e.title[1] if zh else e.title[0],
                "status": progress.status(e.id),
                "file": e.file,
            }
            for e in EXERCISES
        ]
        for r in rows:  # worked in a notebook (anatomy learn start --notebook): said too
            r["notebook"] = progress.entry(r["id"]).get("notebook")
            if r["notebook"] and args.format != "json":
                r["title"] += f" · {r['notebook']}"
        if args.format == "json":
            print(json.dumps({"exercises": rows}, ensure_ascii=False, indent=2))
        else:
            from anatomy.course import STATUS_ZH

            mark = {"done": "✓", "tried": "~", "not started": " "}
            for r in rows:
                shown = STATUS_ZH[r["status"]] if zh else r["status"]
                print(f"[{mark[r['status']]}] {r['id']:<11} {r['section']:<9} {r['title']}  ({shown})")
        return 0
    if command == "page":
        from anatomy.course import page
        from anatomy.inspection.page import write_page

        if not args.out.endswith(".html"):
            raise UsageError(f"--out must end in .html, got {args.out!r}")
        write_page(args.out, page(progress, lang))
        print(("已写入 " if zh else "wrote ") + args.out)
        return 0
    try:
        exercise = get(args.id)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if command == "start":
        if getattr(args, "notebook", False):
            from anatomy.notebook.course import write_exercise

            try:
                path = write_exercise(exercise.id, folder, lang, hint=args.hint)
            except FileExistsError as err:
                raise UsageError(str(err)) from None
            print(("已写入 " if zh else "wrote ") + str(path))
            print(
                "用 Jupyter 打开它，写完后运行最后一个单元格评分"
                if zh
                else "open it in Jupyter; when it is written, run its last cell to grade it"
            )
            return 0
        path = folder / exercise.file
        if path.exists():
            raise UsageError(
                f"{path} already exists: it is never overwritten; check it with "
                f"`anatomy learn check {exercise.id} {path}`, or move it away to start over"
            )
        folder.mkdir(parents=True, exist_ok=True)
        with open(path, "x", encoding="utf-8") as f:  # "x": fails rather than replace a file made meanwhile
            f.write(skeleton(exercise, lang, hint=args.hint))
        progress.started(exercise.id, path)
        print(("已写入 " if zh else "wrote ") + str(path))
        target = (progress.file("block") or folder / get("block").file) if exercise.id == "tiny_lm" else path
        print(("写完后运行：" if zh else "when it is written: ") + f"anatomy learn check {exercise.id} {target}")
        return 0
    if command == "solution":
        if not args.force and progress.status(exercise.id) == "not started":
            how = f"anatomy learn check {exercise.id}"
            raise UsageError(
                f"先认真试一次（{how}），或者加 --force" if zh else f"make a real attempt first ({how}), or add --force"
            )
        print(solution_text(exercise), end="")
        return 0
    return _check(args, exercise, folder, progress, lang)


def _check(args: argparse.Namespace, exercise: Exercise, folder: Path, progress: Progress, lang: str) -> int:
    from anatomy.cli.usage import UsageError
    from anatomy.course import get
    from anatomy.course.check import LearnError, check_isolated

    if args.file:
        path = Path(args.file)
    elif exercise.id == "tiny_lm":
        path = progress.file("block") or folder / get("block").file
    else:
        path = progress.file(exercise.id) or folder / exercise.file
    if not path.is_file():
        raise UsageError(
            f"no such file: {str(path)!r} (write it with `anatomy learn start {exercise.id}` or give FILE)"
        )
    if not (math.isfinite(args.timeout) and args.timeout >= 0):  # nan and inf were blamed on the learner's file
        raise UsageError(f"--timeout must be a number of seconds >= 0 (0: no limit), got {args.timeout:g}")
    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps must be a positive integer, got {args.steps}")
    if exercise.id not in ("tiny_lm", "gpt") and (args.steps is not None or args.figure is not None):
        flag = "--steps" if args.steps is not None else "--figure"
        raise UsageError(f"{flag} applies to the exercises that train (tiny_lm, gpt), not to {exercise.id}")
    options = {}
    if exercise.id in ("tiny_lm", "gpt"):
        options = {
            "steps": args.steps,
            "figure_path": args.figure or str(folder / f"{exercise.id}_loss.png"),
            "progress": _progress_printer(lang),
        }
    try:
        result = check_isolated(exercise.id, path, timeout=args.timeout or None, **options)
    except LearnError as err:
        progress.checked(exercise.id, path, False, "error")
        if args.format == "json":
            print(
                json.dumps(
                    {
                        "exercise": exercise.id,
                        "file": str(path),
                        "passed": False,
                        "error": err.en,
                        "message": {"en": [err.en], "zh": [err.zh]},
                    },
                    ensure_ascii=False,
                    indent=2,
                )
            )
        else:
            print(("还没通过 · " if lang == "zh" else "NOT YET · ") + f"{exercise.id} · {path.name}")
            print("  " + err.text(lang))
            if exercise.id == "tiny_lm":
                print(_next(exercise.id, False, path, lang))
        return 1
    progress.checked(exercise.id, path, result.passed, result.pitfall)
    if args.format == "json":
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=2, default=str))
    else:
        print(result.render(lang, details=args.details))
        if "figure" in result.extra:
            print(("  损失曲线：" if lang == "zh" else "  loss curves: ") + result.extra["figure"])
        if exercise.id == "tiny_lm":
            print(_next(exercise.id, result.passed, path, lang))
    sys.stdout.flush()
    return 0 if result.passed else 1


def _progress_printer(lang: str) -> Callable[[tuple[str, str]], None]:
    """tiny_lm's progress, on stderr (stdout stays the answer, or JSON)."""

    def show(text: tuple[str, str]) -> None:
        print(text[1] if lang == "zh" else text[0], file=sys.stderr, flush=True)

    return show


def _next(exercise_id: str, passed: bool, path: Path, lang: str) -> str:
    """The command to run next (never the one just run)."""
    zh = lang == "zh"
    if passed:
        return "  全部完成：anatomy learn list 查看进度" if zh else "  all done: anatomy learn list shows your progress"
    return (
        f"  下一步：anatomy learn check block {path}（找出它看得到的坑）"
        if zh
        else f"  next: anatomy learn check block {path} (it names the pitfalls it can see)"
    )
