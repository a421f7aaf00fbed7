"""Judged cases for people and CI: text, JSON and JUnit XML (``modeltap check --expect``).

* :func:`render_text`: ``[PASS]`` / ``[FAIL]`` / ``[UNAVAILABLE]`` per case,
  one line per verdict that did not pass (optional gaps too, marked), then
  ``N/M passed, F failed, U unavailable`` (counting cases), as ``seeds/003``'s
  report prints;
* :func:`to_json`: the verdicts, as ``schemas/verdicts.schema.json`` says;
* :func:`junit_xml`: one ``<testcase>`` per case, each verdict that did not
  pass inside it as ``<failure>`` (failed) or ``<error>`` (unavailable), and
  a case whose only gaps are optional as ``<skipped>``: what CI systems show.

Text from the wire (tool and model names, session ids) is made safe for a
terminal (:func:`~modeltap.rules.printable.printable`) and for XML (no
control characters, which XML 1.0 cannot hold).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from modeltap.evidence.capture import Capture
from modeltap.evidence.verdicts import FAILED, PASSED, UNAVAILABLE, Verdict
from modeltap.evidence.verdicts.cases import Case, Judged, judge_cases
from modeltap.report.terminal import printable

__all__ = ["JSON_VERSION", "judge", "junit_xml", "render_text", "summary", "to_json"]

#: ``version`` of the verdicts JSON.
JSON_VERSION: Final = 1
_XML_UNSAFE: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def judge(cases: Sequence[Case], capture: Capture) -> list[Judged]:
    """Judge every case on ``capture`` (a case naming a session: on that session)."""
    sessions = {sid: session.expect for sid, session in capture.sessions.items()}
    return judge_cases(cases, capture.expect, sessions)


def summary(judged: Sequence[Judged]) -> dict[str, int]:
    """How many cases passed, failed and were unavailable."""
    statuses = [j.verdicts.status for j in judged]
    return {
        "cases": len(judged),
        PASSED: statuses.count(PASSED),
        FAILED: statuses.count(FAILED),
        UNAVAILABLE: statuses.count(UNAVAILABLE),
    }


def render_text(judged: Sequence[Judged]) -> str:
    """The cases' report, as ``modeltap check --expect`` prints it."""
    lines: list[str] = []
    for item in judged:
        lines.extend(printable(line) for line in item.verdicts.lines())
    counts = summary(judged)
    lines.append("")
    lines.append(
        f"{counts[PASSED]}/{counts['cases']} passed, {counts[FAILED]} failed, "
        f"{counts[UNAVAILABLE]} unavailable"
    )
    return "\n".join(lines)


def to_json(judged: Sequence[Judged], capture: Capture, cases_file: str) -> dict[str, Any]:
    """The verdicts as JSON (``schemas/verdicts.schema.json``)."""
    return {
        "version": JSON_VERSION,
        "capture": str(capture.directory),
        "recording": None if capture.recording is None else str(capture.recording),
        "cases_file": cases_file,
        "cases": [
            {
                "name": item.case.name,
                "session": item.case.session,
                "scope": item.scope,
                "status": item.verdicts.status,
                "verdicts": [v.to_dict() for v in item.verdicts],
            }
            for item in judged
        ],
        "summary": summary(judged),
    }


def _xml_text(text: str) -> str:
    return _XML_UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def junit_xml(judged: Sequence[Judged], suite: str = "modeltap") -> bytes:
    """JUnit XML: one ``<testsuite>``, one ``<testcase>`` per case.

    Args:
        judged: the judged cases.
        suite: the suite's name (and each test case's ``classname``).

    Returns:
        The document, UTF-8, with its XML declaration.
    """
    counts = summary(judged)
    failures = errors = skipped = 0
    root = ET.Element("testsuite", name=suite)
    for item in judged:
        case = ET.SubElement(
            root, "testcase", name=_xml_text(item.case.name), classname=_xml_text(suite)
        )
        gaps: list[Verdict] = []
        for verdict in item.verdicts:
            if verdict.status == PASSED:
                continue
            if verdict.is_optional and verdict.status == UNAVAILABLE:
                gaps.append(verdict)
                continue
            tag = "failure" if verdict.status == FAILED else "error"
            element = ET.SubElement(
                case, tag, message=_xml_text(verdict.headline), type=verdict.status
            )
            element.text = _xml_text(str(verdict))
        if item.verdicts.status == FAILED:
            failures += 1
        elif item.verdicts.status == UNAVAILABLE:
            errors += 1
        elif gaps:
            skipped += 1
            element = ET.SubElement(
                case,
                "skipped",
                message=_xml_text(f"optional, unavailable: {', '.join(v.name for v in gaps)}"),
            )
            element.text = _xml_text("\n".join(str(v) for v in gaps))
        out = ET.SubElement(case, "system-out")
        out.text = _xml_text("\n".join(str(v) for v in item.verdicts))
    root.set("tests", str(counts["cases"]))
    root.set("failures", str(failures))
    root.set("errors", str(errors))
    root.set("skipped", str(skipped))
    ET.indent(root)
    document: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


def write_junit(path: Path, judged: Sequence[Judged]) -> None:
    """Write :func:`junit_xml` to ``path`` (its directory is made).

    Raises:
        OSError: it cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(junit_xml(judged))
