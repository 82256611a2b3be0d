"""HTML fragments: escaped, the verdict and its lines, the full CLI text folded; claims and verdicts."""

from __future__ import annotations

from types import SimpleNamespace

from anatomy.experiments.registry import Verdict
from anatomy.notebook import display, formatters, show


def test_course_result_html_escapes_and_shows_the_pitfall():
    r = SimpleNamespace(
        ok=False,
        exercise="attention",
        pitfalls=["no_scaling"],
        lines=[{"where": "cell [3], line 5", "source": "s = q @ k.T <b>", "en": "unscaled"}],
        render=lambda lang: "NOT YET · attention <x>",
    )
    html = display.course_html(r)
    assert "NOT YET" in html and "<code" in html and "no_scaling" in html and "cell [3], line 5" in html
    assert "&lt;b&gt;" in html and "&lt;x&gt;" in html and "<b>" not in html.replace("<b>anatomy", "")


def test_verdict_and_claims_display():
    v = Verdict("supported", "variance 63.9 ≈ d_k", "方差 63.9 ≈ d_k")
    html = formatters.html(v)
    assert html is not None and "supported" in html and "63.9" in html
    doc = {
        "claims": [
            {
                "id": "C5",
                "section": "§1.3",
                "statement_en": "dot variance ≈ d_k",
                "statement_zh": "方差",
                "verdict": "refuted",
                "reason_en": "no",
                "reason_zh": "不",
            }
        ]
    }
    html = show.claims(doc)._repr_html_()
    assert "C5" in html and "refuted" in html and "dot variance" in html
    assert "方差" in show.claims(doc, lang="zh")._repr_html_()


def test_pictures_are_png_and_a_model_trace_is_a_table():
    pic = show.pe("sinusoidal", d_model=16, max_len=32, train_len=16)
    png = pic._repr_png_()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000 and "displays in Jupyter" in repr(pic)
    t = show.trace(preset="seed-block", batch=2, seq=10)
    assert "<table" in t._repr_html_() and repr(t).startswith("anatomy trace · encoder")


def test_reports_traces_and_verdicts_register_with_ipythons_html_formatter():
    """The doctor's and the lab's classes carry no _repr_html_ (their rooms must not import this one): IPython's
    formatter table is given them by name, and then formats them as HTML as Jupyter would."""
    import pytest

    core = pytest.importorskip("IPython.core.formatters", reason="waits for IPython (pip install '.[notebook]')")
    shell = SimpleNamespace(display_formatter=SimpleNamespace(formatters={"text/html": core.HTMLFormatter()}))
    assert formatters.register(shell)
    v = Verdict("refuted", "variance 3.1", "方差 3.1")
    html = shell.display_formatter.formatters["text/html"](v)
    assert html is not None and "refuted" in html and "3.1" in html
    assert formatters.register(SimpleNamespace()) is False and formatters.html(object()) is None
