"""The tutorials (docs/tutorial.md, docs/tutorial.zh.md) as notebooks (docs/tutorial.ipynb, docs/tutorial.zh.ipynb).

    python -m anatomy.notebook.tutorials          # rewrite the notebooks from the Markdown (outputs empty)
    python -m anatomy.notebook.tutorials --check  # exit 1 when a notebook no longer matches its Markdown

The Markdown is the source: each ```` ```python ```` block becomes a code cell, in order, and the prose between
them (other fenced blocks, ``bash`` ones included, stay prose: they are commands for a terminal) a Markdown cell.
The notebooks are committed with their outputs stripped (no outputs, no execution counts), so git holds only what
the Markdown says; ``tests/notebook/test_tutorials.py`` checks both, and executes every notebook on a kernel.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from anatomy.notebook.course import notebook

TUTORIALS = ("tutorial.md", "tutorial.zh.md")
_FENCE = re.compile(r"^```(\w*)\s*$")


def split(markdown: str) -> list[tuple[str, str]]:
    """``(kind, text)`` cells: ``code`` for each python block, ``markdown`` for the prose between them."""
    cells: list[tuple[str, str]] = []
    prose: list[str] = []
    block: list[str] | None = None
    fence_lang = ""
    for line in markdown.splitlines():
        m = _FENCE.match(line)
        if block is not None:
            if m and not m.group(1):  # the closing fence
                if fence_lang == "python":
                    cells.append(("code", "\n".join(block)))
                else:
                    prose.extend([f"```{fence_lang}", *block, "```"])
                block = None
            else:
                block.append(line)
            continue
        if m:
            fence_lang = m.group(1)
            if fence_lang == "python" and "\n".join(prose).strip():
                cells.append(("markdown", "\n".join(prose).strip("\n")))
                prose = []
            elif fence_lang == "python":
                prose = []
            block = []
            continue
        prose.append(line)
    if block is not None:
        raise ValueError("an unclosed ``` fence in the Markdown")
    if "\n".join(prose).strip():
        cells.append(("markdown", "\n".join(prose).strip("\n")))
    return cells


def python_blocks(markdown: str) -> list[str]:
    return [text for kind, text in split(markdown) if kind == "code"]


def to_notebook(markdown: str, lang: str) -> dict[str, Any]:
    return notebook(split(markdown), lang)


def text(markdown: str, lang: str) -> str:
    return json.dumps(to_notebook(markdown, lang), ensure_ascii=False, indent=1) + "\n"


def notebook_path(md: Path) -> Path:
    return md.with_name(md.name[: -len(".md")] + ".ipynb")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    docs = Path(next((a for a in args if not a.startswith("--")), "docs"))
    stale = []
    for name in TUTORIALS:
        md = docs / name
        if not md.is_file():
            print(f"no such file: {md}", file=sys.stderr)
            return 2
        want = text(md.read_text(encoding="utf-8"), "zh" if ".zh." in name else "en")
        out = notebook_path(md)
        if check:
            if not out.is_file() or out.read_text(encoding="utf-8") != want:
                stale.append(str(out))
        else:
            out.write_text(want, encoding="utf-8")
            print(f"wrote {out}")
    if stale:
        print(
            f"out of date with their Markdown: {', '.join(stale)} (python -m anatomy.notebook.tutorials)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
