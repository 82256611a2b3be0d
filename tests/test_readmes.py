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
