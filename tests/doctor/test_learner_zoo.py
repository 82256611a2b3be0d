"""The doctor on the learner zoo (tests/doctor/zoo_learners/, written in the styles learners use, not ours): every
correct module passes without an error, every buggy one gets its pitfall named, and the table's score is printed by
``python tests/doctor/test_learner_zoo.py``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from anatomy.doctor import CheckError, check

sys.path.insert(0, str(Path(__file__).parent))
from zoo_learners.cases import CASES, LINE_GAPS, Case, line_of, lines_of  # noqa: E402


def run(case: Case):
    kw = dict(case.kw)
    target = str(case.file) + ("" if "factory" in kw else ":" + case.target.partition(":")[2])
    try:
        return check(target, **kw), None
    except CheckError as err:
        return None, err


def judge(case: Case, report, err) -> str | None:
    """None when the doctor is right about ``case``, else what is wrong."""
    if case.expect == "refused":
        if err is None:
            return f"not refused (exit {report.exit_code()})"
        return None if case.refusal in str(err) else f"refused with another message: {err}"
    if err is not None:
        return f"refused: {err}"
    errors = report.errors
    if case.correct:
        if errors:
            return "errors on a correct module: " + "; ".join(f"{f.probe}/{f.fault}: {f.en[:90]}" for f in errors)
        want = next((a.partition(":")[2] for a in case.also if a.startswith("status:")), "matches")
        if report.diagnosis["status"] != want:  # a correct module the doctor can map equals the reference
            return f"diagnosis {report.diagnosis['status']}, expected {want}: {report.diagnosis.get('reason') or ''}"
        return None
    if case.expect.startswith("error:"):
        probe = case.expect.partition(":")[2]
        return None if any(f.probe == probe for f in errors) else f"no {probe} error; faults {sorted(report.faults)}"
    if case.expect not in report.faults:
        return (
            f"{case.expect} not named; faults {sorted(report.faults)}, diagnosis "
            f"{report.diagnosis.get('status')} ({report.diagnosis.get('reason') or ''})"
        )
    if report.exit_code() != 1:
        return "exit code 0 for an error"
    return None


def lines(report) -> set[tuple[str, int]]:
    """Every (file name, line) the report points at (``findings[].where``)."""
    return {(Path(w.get("file") or "").name, w["line"]) for f in report.findings for w in f.where if w.get("line")}


def pointed(case: Case, report) -> bool:
    """Does the report point at the case's pitfall line (in the case's file)?"""
    return any((case.file.name, n) in lines(report) for n in lines_of(case))


def facts(case: Case, report) -> list[str]:
    """The case's further facts (``also``) that the report does not show."""
    wrong = []
    for fact in case.also:
        if fact == "unbiased_std":
            if "unbiased" not in str(report.found.get("block", {}).get("norm_variant")):
                wrong.append(fact)
        elif fact == "eps":
            if "eps" not in str(report.diagnosis.get("variant")):
                wrong.append(fact)
        elif fact == "retried_mask":
            if not report.found.get("call_notes"):
                wrong.append(fact)
        elif fact == "all_leak":
            if not (report.found.get("mask") or {}).get("all_leak"):
                wrong.append(fact)
        elif fact == "not_causal":
            if report.found["causal"]["value"]:
                wrong.append(fact)
        elif fact == "seq_first":
            if not report.found.get("seq_first"):
                wrong.append(fact)
        elif fact == "causal_from_diagnosis":
            if report.found["causal"]["source"] != "diagnosis":
                wrong.append(fact)
        elif fact == "unmapped_reason":
            reason = report.diagnosis.get("reason") or ""
            if report.diagnosis["status"] != "unavailable" or "--map" not in reason or "recorde" not in reason:
                wrong.append(fact)
        elif fact.startswith("sub_layer:"):
            if report.diagnosis.get("sub_layer") != fact.partition(":")[2]:
                wrong.append(fact)
    return wrong


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_learner_module_gets_its_verdict(case):
    report, err = run(case)
    assert judge(case, report, err) is None, judge(case, report, err) + "\n" + (report.render() if report else "")
    if report is not None:
        assert facts(case, report) == [], report.render()
    if report is not None and not case.correct and case.id not in LINE_GAPS:  # the diagnosis points at the line
        assert pointed(case, report), f"line {line_of(case)} not among {sorted(lines(report))}\n" + report.render()


def test_the_zoo_covers_every_style_with_correct_and_buggy_modules():
    assert len(CASES) >= 40
    correct = [c for c in CASES if c.correct]
    assert len(correct) >= 20 and len(CASES) - len(correct) >= 20
    for c in CASES:  # every pitfall's line resolves in its file
        if not c.correct:
            assert c.point is not None and line_of(c) > 0, c.id


def score() -> None:
    ok_right = bug_right = false_errors = lines_right = 0
    for case in CASES:
        try:
            report, err = run(case)
            why = judge(case, report, err)
        except Exception as crash:  # noqa: BLE001 - the score goes on
            report, why = None, f"CRASH {type(crash).__name__}: {crash}"[:200]
        more = facts(case, report) if why is None and report is not None else []
        if case.correct:
            ok_right += why is None
            false_errors += why is not None and why.startswith("errors")
        else:
            bug_right += why is None
        if report is not None and not case.correct and case.point and pointed(case, report):
            lines_right += 1
        elif why is None and report is not None and not case.correct and case.point:
            more.append(f"line {line_of(case)} not pointed at (got {sorted(n for _, n in lines(report))})")
        mark = "ok " if why is None and not more else "BAD" if why else "~  "
        print(f"{mark} {case.id:45s} {case.expect:25s} {why or ''}{' missing ' + ','.join(more) if more else ''}")
    n_ok = sum(c.correct for c in CASES)
    print(
        f"correct modules right {ok_right}/{n_ok}, buggy modules right {bug_right}/{len(CASES) - n_ok}, "
        f"correct modules given an error: {false_errors}; pitfall lines pointed at: {lines_right}/"
        f"{len(CASES) - n_ok}"
    )


if __name__ == "__main__":
    score()


# --- a forward that ends the process (issue 16 point 8) ---------------------------------------------------------


def test_sys_exit_in_forward_is_a_failed_forward_with_its_own_message(capsys):
    from anatomy.cli.main import main

    target = str(Path(__file__).parent / "zoo_learners" / "contract.py:ExitsInForward")
    assert main(["check", target]) == 2
    err = capsys.readouterr().err
    assert "called sys.exit(0) (SystemExit)" in err and "nothing could be checked" in err
    assert main(["check", target, "--lang", "zh"]) == 2
    assert "调用了 sys.exit(0)（SystemExit）" in capsys.readouterr().err


def test_os_exit_in_forward_is_caught_by_the_child_process(capsys):
    from anatomy.cli.main import main

    target = str(Path(__file__).parent / "zoo_learners" / "contract.py:ExitsHard")
    assert main(["check", target]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "the module ended the process itself (os._exit(0) or a signal)" in out.err


def test_seq_first_option_skips_the_detection(capsys):
    from anatomy.cli.main import main

    target = str(Path(__file__).parent / "zoo_learners" / "contract.py:SeqFirst")
    assert main(["check", target, "--seq-first", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["found"]["seq_first"] is True and report["diagnosis"]["status"] == "matches"
    assert not any("sequence-first" in n["en"] for n in report["found"]["call_notes"])  # told, not detected
    detected = check(target)
    assert detected.found["seq_first"] is True
    assert any("sequence-first" in n["en"] for n in detected.found["call_notes"])
