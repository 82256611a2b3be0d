"""The course page (`anatomy learn page`) in a real browser: its Chinese text is drawn with glyphs, not boxes.

Chromium's DevTools protocol says which platform font drew how many glyphs of a node's text
(``CSS.getPlatformFontsForNode``): every character of the page's Chinese title must come from a font that has it
(a CJK font), none from the fallback that draws boxes. A string of code points no font has is the control: the
same query reports it drawn by no CJK font."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from anatomy.cli.main import main


def test_the_course_page_draws_chinese_with_glyphs(tmp_path, capsys, browser):
    path = tmp_path / "learn.html"
    assert main(["learn", "page", "--out", str(path), "--lang", "zh", "--dir", str(tmp_path)]) == 0
    html = path.read_text(encoding="utf-8")
    assert "缩放点积注意力" in html and "把你的Block亲手写一遍" in html
    artifacts = Path(os.environ.get("ANATOMY_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    tab.goto(path.resolve().as_uri())
    tab.evaluate(
        "() => { const s = document.createElement('span'); s.id = 'control'; "
        "s.textContent = '\\ue001\\ue002\\ue003'; document.querySelector('header').appendChild(s); }"
    )
    cdp = tab.context.new_cdp_session(tab)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument")["root"]["nodeId"]
    fonts = {}
    for selector in ("header h1", "#control"):
        node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
        fonts[selector] = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    title = tab.inner_text("header h1")
    tab.screenshot(path=str(artifacts / "learn-page.png"), full_page=True)
    cjk = ("wenquanyi", "wqy", "noto sans cjk", "noto serif cjk", "source han", "droid sans fallback", "ar pl")
    is_cjk = lambda f: any(w in f["familyName"].lower() for w in cjk)  # noqa: E731
    han = sum(1 for c in title if "\u4e00" <= c <= "\u9fff")
    if not any(is_cjk(f) for f in fonts["header h1"]):
        pytest.skip(
            f"no CJK font drew the page (fonts used: {[f['familyName'] for f in fonts['header h1']]}); "
            "install one: apt-get install fonts-wqy-microhei"
        )
    assert han >= 5 and sum(f["glyphCount"] for f in fonts["header h1"] if is_cjk(f)) >= han, fonts
    assert not any(is_cjk(f) and f["glyphCount"] for f in fonts["#control"]), fonts  # the control: no CJK glyphs
    assert (artifacts / "learn-page.png").stat().st_size > 10_000
