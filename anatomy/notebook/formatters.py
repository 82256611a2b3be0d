"""HTML for the doctor's ``Report``, the learner's ``LearnerTrace`` and a claim's ``Verdict`` in Jupyter.

Those classes live in rooms below this one and must not import it (no import cycle), so they carry no
``_repr_html_``: IPython's own formatter table is told, by module and class name, to call the functions here.
``anatomy/__init__.py`` calls :func:`register` when it is imported inside a running IPython (a notebook kernel),
without importing IPython itself; a terminal never gets here and prints the objects' text.
"""

from __future__ import annotations

from typing import Any

# (module, class name) → the function in anatomy.notebook that renders one as HTML
TYPES = {
    ("anatomy.doctor.report.findings", "Report"): ("anatomy.notebook.results", "report_html"),
    ("anatomy.doctor.trace.learner_trace", "LearnerTrace"): ("anatomy.notebook.results", "learner_trace_html"),
    ("anatomy.experiments.registry", "Verdict"): ("anatomy.notebook.display", "verdict_html"),
}


def _lazy(module: str, name: str) -> Any:
    def render(obj: Any) -> str:
        import importlib

        return str(getattr(importlib.import_module(module), name)(obj))

    render.__name__ = name
    return render


def register(shell: Any) -> bool:
    """Tell ``shell`` (an IPython ``InteractiveShell``) how to show our objects as HTML; False when it has no
    HTML formatter (a plain terminal IPython still shows text)."""
    formatter = getattr(getattr(shell, "display_formatter", None), "formatters", {}).get("text/html")
    if formatter is None:
        return False
    for (module, cls), (where, name) in TYPES.items():
        formatter.for_type_by_name(module, cls, _lazy(where, name))
    return True


def html(obj: Any) -> str | None:
    """The HTML Jupyter would show for ``obj`` (tests; no IPython needed), or None when it is not one of ours."""
    kind = (type(obj).__module__, type(obj).__name__)
    if kind not in TYPES:
        return None
    return str(_lazy(*TYPES[kind])(obj))
