"""anatomy.experiments.report_page: index.html read as a learner reads it, on the lab's real claims.json
(docs/claims/full): the post's sections as navigation, the verdicts counted at the top and filterable, each
figure drawn once at a readable size and linked from every claim that shares it; one page that loads nothing
from the network. The browser test runs Debian's chromium through playwright (skipped where either is missing)."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from anatomy.experiments.report import load, write_reports
from anatomy.experiments.report_page import SECTIONS, anchor, figure_owners, render_page, section_key

FULL = Path(__file__).resolve().parents[2] / "docs" / "claims" / "full"


@pytest.fixture(scope="module")
def doc():
    return load(FULL)


def test_every_figure_is_drawn_once_and_every_claim_links_to_its_figures(doc):
    page = render_page(doc)
    drawn = re.findall(r'<img src="([^"]+)"', page)
    shared = {f for c in doc["claims"] for f in c["figures"]}
    assert sorted(drawn) == sorted(shared)  # each once, none left out
    assert max(Counter(f for c in doc["claims"] for f in dict.fromkeys(c["figures"])).values()) > 1  # real sharing
    figure_ids = dict(re.findall(r'<figure id="(fig-\d+)" data-claims="([^"]+)"', page))
    for c in doc["claims"]:
        article = page[page.index(f'id="{c["id"]}"') :].split("</article>")[0]
        linked = re.findall(r'href="#(fig-\d+)"', article)
        assert len(linked) == len(dict.fromkeys(c["figures"]))
        assert all(c["id"] in figure_ids[f].split() for f in linked)


def test_sections_follow_the_post_and_every_claim_is_under_its_first_section(doc):
    page = render_page(doc)
    order = re.findall(r'<section class="post-section" id="([^"]+)"', page)
    keys = [anchor(k) for k in SECTIONS]
    assert order == sorted(order, key=keys.index)  # the post's order
    for c in doc["claims"]:
        section = page[: page.index(f'<article class="claim {c["verdict"]}" id="{c["id"]}"')]
        assert section.rindex('<section class="post-section" id="') == section.rindex(
            f'<section class="post-section" id="{anchor(section_key(c["section"]))}"'
        )
    assert section_key("§1.1–1.2") == "§1.1" and section_key("结尾") == "结尾"
    counts = Counter(c["verdict"] for c in doc["claims"])
    for verdict, n in counts.items():
        assert re.search(rf'data-filter="{verdict}"[^>]*>[^<]*<b>{n}</b>', page), verdict


def test_the_page_in_a_browser_filters_navigates_and_shows_readable_figures(doc, browser, tmp_path):
    out = tmp_path / "report"
    shutil.copytree(FULL / "figures", out / "figures")
    (out / "claims.json").write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    write_reports(doc, out)
    artifacts = Path(os.environ.get("ANATOMY_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    tab.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
    tab.on("pageerror", lambda err: problems.append(str(err)))
    tab.on("request", lambda r: None if r.url.startswith("file://") else problems.append(f"network: {r.url}"))
    tab.goto((out / "index.html").as_uri())
    tab.wait_for_load_state("load")
    tab.screenshot(path=str(artifacts / "report-top.png"))

    # the verdict summary, counted from claims.json, and one chip per claim
    counts = Counter(c["verdict"] for c in doc["claims"])
    for verdict, n in counts.items():
        assert tab.locator(f"button[data-filter={verdict}] b").inner_text() == str(n)
    assert tab.locator(".chip").count() == len(doc["claims"])

    # every figure once, loaded, at a readable width
    owners = figure_owners(doc["claims"])
    assert tab.locator("figure img").count() == len(owners)
    tab.evaluate("document.querySelectorAll('figure img').forEach(i => i.loading = 'eager')")
    tab.wait_for_function("[...document.querySelectorAll('figure img')].every(i => i.complete && i.naturalWidth > 0)")
    widths = tab.evaluate("[...document.querySelectorAll('figure img')].map(i => i.getBoundingClientRect().width)")
    assert min(widths) >= 600, widths  # not a thumbnail

    # filter by each verdict: only those claims, only their figures, sections without any hidden
    for verdict, n in counts.items():
        tab.click(f"button[data-filter={verdict}]")
        shown = tab.evaluate(
            "[...document.querySelectorAll('article.claim')].filter(a => !a.hidden).map(a => a.dataset.verdict)"
        )
        assert shown == [verdict] * n
        visible_figs = tab.evaluate(
            "[...document.querySelectorAll('figure')].filter(f => !f.hidden).map(f => f.dataset.claims)"
        )
        ids = {c["id"] for c in doc["claims"] if c["verdict"] == verdict}
        assert all(set(f.split()) & ids for f in visible_figs)
        assert len(visible_figs) == len({f for c in doc["claims"] if c["id"] in ids for f in c["figures"]})
        assert tab.evaluate(
            "[...document.querySelectorAll('section.post-section')].every(s => s.hidden === "
            "!s.querySelector('article.claim:not([hidden])'))"
        )
        assert f"{n} of {len(doc['claims'])}" in tab.locator("#shown").inner_text()
    tab.screenshot(path=str(artifacts / f"report-{verdict}.png"))

    # a figure drawn with a claim the filter hides stays shown for the visible claim that links to it
    tab.click("button[data-filter=refuted]")
    later = next(c for c in doc["claims"] if c["verdict"] == "refuted" and owners[c["figures"][0]][0] != c["id"])
    fig = tab.locator(f'article[id="{later["id"]}"] .figrefs a').first.get_attribute("href")
    tab.locator(f'article[id="{later["id"]}"] .figrefs a').first.click()
    assert tab.evaluate(f"document.getElementById('{fig[1:]}').hidden") is False
    assert abs(tab.evaluate(f"document.getElementById('{fig[1:]}').getBoundingClientRect().top")) < 5
    # a chip of a claim the filter hides: the filter is lifted, the link never lands on nothing
    hidden = next(c for c in doc["claims"] if c["verdict"] != "refuted")
    tab.click(f'.chip[href="#{hidden["id"]}"]')
    assert tab.evaluate("document.querySelectorAll('article.claim[hidden]').length") == 0
    assert tab.locator("button[data-filter=all]").get_attribute("aria-pressed") == "true"

    # the post's sections as navigation: each link lands on its section heading
    tab.click("button[data-filter=all]")
    links = tab.evaluate("[...document.querySelectorAll('nav a')].map(a => a.getAttribute('href'))")
    assert len(links) == len({section_key(c["section"]) for c in doc["claims"]})
    for href in links[:: max(1, len(links) // 5)]:
        tab.click(f"nav a[href='{href}']")
        top = tab.evaluate(f"document.getElementById('{href[1:]}').getBoundingClientRect().top")
        assert abs(top) < 5, (href, top)
    assert not problems, problems
