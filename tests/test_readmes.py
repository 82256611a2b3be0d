"""The READMEs stay true: their Python blocks run, every `anatomy ...` line they and docs/ show parses with
today's CLI, and README.md opens with the two commands `.ci/run` relies on."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from anatomy.cli.main import build_parser, parse

ROOT = Path(__file__).parent.parent
READMES = ["README.md", "README.zh.md"]
DOCS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))


def _blocks(name: str, *langs: str) -> list[str]:
    """The fenced code blocks of ``name`` whose info string is one of ``langs`` ("" = no language given)."""
    blocks, current, lang = [], None, ""
    for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            if current is None:
                current, lang = [], line[3:].strip()
            else:
                if lang in langs:
                    blocks.append("\n".join(current) + "\n")
                current = None
        elif current is not None:
            current.append(line)
    return blocks


@pytest.mark.parametrize("name", READMES)
def test_python_blocks_run(name, capsys):
    blocks = _blocks(name, "python")
    assert blocks, f"{name} shows no Python"
    for code in blocks:
        exec(compile(code, f"<{name}>", "exec"), {"__name__": "__readme__"})  # noqa: S102 - our own README


@pytest.mark.parametrize("name", READMES + DOCS)
def test_every_anatomy_command_parses(name):
    parser = build_parser()
    lines = [line.split("  #")[0].strip() for block in _blocks(name, "bash", "sh", "") for line in block.splitlines()]
    commands = [line for line in lines if line.startswith("anatomy ")]
    assert commands or name not in READMES, f"{name} shows no anatomy command"
    for line in commands:
        args = shlex.split(re.sub(r"\s\[[^\]]*\]", "", line))[1:]  # a synopsis' [optional parts] left out
        try:
            parse(parser, args)  # as `anatomy` itself parses
        except SystemExit as exit_:  # argparse's way of refusing
            pytest.fail(f"{name}: `{line}` does not parse (exit {exit_.code})")


def test_readme_starts_with_the_two_commands_ci_runs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first_two = _blocks("README.md", "bash")[:2]
    assert text.index("```bash") < text.index("\n## "), "the commands come before any section"
    assert first_two[0].strip().endswith("anatomy report --out report")
    test_command = first_two[1].strip()
    assert test_command.endswith("python -m pytest -q") and test_command.startswith("pip install torch==2.13.0")
    assert test_command in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _report_minutes() -> dict[str, str]:
    """The report's run-time figure where a newcomer reads it: both READMEs and `anatomy report --help`."""
    import argparse

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    help_text = " ".join(sub.choices["report"].format_help().split())  # argparse wraps at the terminal's width
    found = {
        "README.md": re.findall(
            r"in about (\d+(?:-\d+)?) minutes on 2 CPU\s+cores", (ROOT / "README.md").read_text(encoding="utf-8")
        ),
        "README.zh.md": re.findall(
            r"2 核 CPU 上大约 (\d+(?:-\d+)?) 分钟", (ROOT / "README.zh.md").read_text(encoding="utf-8")
        ),
        "anatomy report --help": re.findall(r"about (\d+(?:-\d+)?) minutes on 2\s+cores", help_text),
    }
    return {where: figures[0] if len(figures) == 1 else repr(figures) for where, figures in found.items()}


def test_one_report_run_time_figure_everywhere():
    figures = _report_minutes()
    assert len(set(figures.values())) == 1 and re.fullmatch(r"\d+(-\d+)?", figures["README.md"]), figures


@pytest.mark.parametrize("name", READMES)
def test_readmes_say_how_to_get_cpu_torch_and_the_system_packages_tests_need(name):
    text = (ROOT / name).read_text(encoding="utf-8")
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in text
    assert "apt-get install chromium fonts-wqy-microhei" in text
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "chromium" in ci and "fonts-wqy-microhei" in ci  # what the README asks for is what CI installs


def test_skipped_tests_say_why_in_the_summary():
    """A skipped browser or font test prints its reason (which package to install) in pytest's short summary."""
    addopts = re.search(r'^addopts = "(.*)"$', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M).group(1)
    flags = "".join(word[2:] for word in addopts.split() if word.startswith("-r"))
    assert "a" in flags or "s" in flags, addopts
    page = (ROOT / "tests" / "conftest.py").read_text(encoding="utf-8")  # the browser fixture both page tests use
    figures = (ROOT / "tests" / "inspection" / "test_figures.py").read_text(encoding="utf-8")
    assert "apt-get install chromium" in page and "apt-get install fonts-wqy-microhei" in figures
