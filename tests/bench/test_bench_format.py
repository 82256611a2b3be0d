"""anatomy.bench.format_report: the printed columns cannot disagree (the ratio is the printed medians divided)."""

from __future__ import annotations

import re

import pytest

from anatomy.bench import RATIO_RULE, format_report, shown_ratio, table_unit
from anatomy.bench.timing import summarize


def _report(results: dict, unit: str = "s", busy: str | None = None) -> dict:
    return {
        "torch": "x",
        "threads": 1,
        "quick": True,
        "rounds": 3,
        "repeat": 1,
        "allocator": "default",
        "peers": {},
        "notes": [],
        "seconds": {"attention": 1.0},
        "busy": busy,
        "suites": {
            "attention": [{"name": "row", "setup": "B=1", "unit": unit, "reference": "ours", "results": results}]
        },
    }


def _rows(text: str) -> dict[str, tuple[float, float, float, str, float]]:
    rows = {}
    for line in text.splitlines():
        m = re.match(r"  (\S.*?)\s+([\d.·]+)\s+([\d.]+)\s+([\d.·]+) (\S+)\s+([\d.]+)", line)
        if m:
            rows[m.group(1)] = (m.group(2), float(m.group(3)), m.group(4), m.group(5), float(m.group(6)))
    return rows


def test_the_issue_row_cannot_happen_the_ratio_is_the_printed_medians_divided():
    # the issue's run: ours 6.435 ms, kernel=math 0.569 ms, and a median of per-round ratios of 1.37
    times = {"ours": [0.006435, 0.0007, 0.0065], "ours kernel=math": [0.000569, 0.0009, 0.00055]}
    results = {k: {"value": v["median"], **v} for k, v in summarize(times, "ours").items()}
    text = format_report(_report(results))
    assert RATIO_RULE in text
    rows = _rows(text)
    ours, math_ = rows["ours"], rows["ours kernel=math"]
    assert ours[3] == math_[3] == "ms"  # one unit per table
    assert (ours[1], math_[1]) == (6.435, 0.569)
    assert math_[4] == round(0.569 / 6.435, 2) == 0.09  # ours is slower here, and the ratio says so
    assert ours[4] == 1.0
    assert "unsteady: per-round ratios" in text  # the rounds disagreed with each other: said beside the row


@pytest.mark.parametrize("ours, peer", [(1.2345e-4, 9.87e-5), (0.5, 0.25), (3.0, 7.5), (2.5e-6, 2.5e-6)])
def test_every_printed_ratio_divides_the_printed_medians(ours, peer):
    results = {
        "ours": {"value": ours, "min": ours * 0.9, "median": ours, "max": ours * 1.1},
        "peer": {"value": peer, "min": peer, "median": peer, "max": peer * 2},
    }
    rows = _rows(format_report(_report(results)))
    unit, size = table_unit("s", ours)
    assert rows["peer"][3] == unit
    assert rows["peer"][4] == pytest.approx(round(rows["peer"][1] / rows["ours"][1], 2), abs=1e-9)
    assert rows["peer"][4] == pytest.approx(round(shown_ratio(peer, ours, size), 2), abs=1e-9)
    assert float(rows["peer"][0]) <= rows["peer"][1] <= float(rows["peer"][2])  # min <= median <= max


def test_memory_rows_have_one_value_and_the_same_rule():
    results = {"ours": {"value": 3 * 2**20}, "peer": {"value": 4.5 * 2**20}}
    rows = _rows(format_report(_report(results, unit="bytes")))
    assert rows["ours"][:4] == ("·", 3.0, "·", "MiB") and rows["peer"][4] == 1.5


def test_a_busy_machine_is_warned_about_at_the_top():
    text = format_report(
        _report(
            {"ours": {"value": 1.0, "min": 1.0, "median": 1.0, "max": 1.0}},
            busy="the machine was busy: load average 5.00 on 2 cores",
        )
    )
    assert text.splitlines()[2] == "WARNING: the machine was busy: load average 5.00 on 2 cores"
