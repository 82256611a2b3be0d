"""Every code snippet of docs/tutorial.md and docs/tutorial.zh.md runs; every verdict they cite is the one the
lab's full preset gave (docs/claims/full/claims.json), and every claim link lands on a heading."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
TUTORIALS = ["tutorial.md", "tutorial.zh.md"]
VERDICT_WORDS = {
    "supported": "supported",
    "nuanced": "nuanced",
    "refuted": "refuted",
    "inconclusive": "inconclusive",
    "成立": "supported",
    "有条件成立": "nuanced",
    "不成立": "refuted",
    "无定论": "inconclusive",
}


def _snippets(name: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / name).read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.parametrize("name", TUTORIALS)
def test_both_tutorials_follow_the_post_with_the_same_snippets(name):
    assert len(_snippets(name)) == 11
    code = lambda s: [line.split("#")[0].rstrip() for line in s.splitlines() if not line.lstrip().startswith("print")]  # noqa: E731
    assert [code(s) for s in _snippets(name)] == [code(s) for s in _snippets("tutorial.md")]


@pytest.mark.parametrize("index", range(11))
@pytest.mark.parametrize("name", TUTORIALS)
def test_every_snippet_runs(name, index, capsys):
    exec(compile(_snippets(name)[index], f"{name}[{index}]", "exec"), {"__name__": "__tutorial__"})  # noqa: S102
    assert capsys.readouterr().out.strip()  # each snippet shows something


@pytest.mark.parametrize("name", TUTORIALS)
def test_cited_verdicts_are_the_labs_and_links_land(name):
    claims = {c["id"]: c["verdict"] for c in json.loads((DOCS / "claims/full/claims.json").read_text())["claims"]}
    text = (DOCS / name).read_text(encoding="utf-8")
    cited = re.findall(r"\]\(claims/full/report(?:\.zh)?\.md#(c\d+-[a-z0-9-]+)\)\s*[（(]([^）)：:]+)", text)
    assert len(cited) >= 18
    for anchor, word in cited:
        claim = next(i for i in claims if i.lower() == anchor)
        assert VERDICT_WORDS[word.strip()] == claims[claim], (anchor, word, claims[claim])
    report = (DOCS / ("claims/full/report.zh.md" if "zh" in name else "claims/full/report.md")).read_text()
    for anchor, _ in cited:
        assert re.search(rf"^## {re.escape(anchor)}$", report, flags=re.M | re.I), anchor
