"""``modeltap view [DIR]``: a capture as one self-contained HTML page.

People who debug agents would rather look than read JSONL. The page shows the
sessions (status, stop reason, the six evidence channels with their reasons),
per session a timeline of turns (model calls as bars with time to first chunk
and duration, the agent's tool execution between them, refusals and errors
marked, retries grouped), and per turn the audit facts, what changed from the
previous turn, tool calls with their arguments, result sizes and durations,
usage and cost. It reads the files through :class:`~modeltap.evidence.capture.Capture`,
so what it shows is the evidence (:mod:`modeltap.report.view.data`); with a
``--record`` directory a turn can also show its request and response bodies
(:mod:`modeltap.report.view.bodies`), and only then. The page is one file with no
network access (:mod:`modeltap.report.view.page`). With ``--expect CASES.toml``
each case's verdicts are judged (:mod:`modeltap.report.case_report`) and shown
beside the session they name; a case over the whole capture beside every
session.
"""

from __future__ import annotations

import argparse
import webbrowser
from collections.abc import Sequence
from pathlib import Path

from modeltap.evidence.capture import Capture
from modeltap.evidence.recordings import RecordingError
from modeltap.evidence.records import DEFAULT_OUT
from modeltap.evidence.verdicts.cases import CaseFileError, load_cases
from modeltap.report import case_report
from modeltap.report.terminal import print_document, print_lines
from modeltap.report.view.bodies import (
    DEFAULT_BODY_LIMIT,
    RecordingUnreadable,
    attach_bodies,
    load_recording,
)
from modeltap.report.view.data import FORMAT, build_view_data, turn_changes
from modeltap.report.view.page import content_security_policy, json_for_script, render_page

__all__ = [
    "FORMAT",
    "build_page",
    "build_view_data",
    "content_security_policy",
    "json_for_script",
    "main",
    "render_page",
    "turn_changes",
]

#: The file written into the capture directory when ``-o`` is not given.
DEFAULT_FILE = "view.html"


def build_page(
    directory: str | Path,
    *,
    record: str | Path | None = None,
    body_limit: int = DEFAULT_BODY_LIMIT,
    title: str | None = None,
    expect: str | Path | None = None,
) -> str:
    """The page of a capture directory, as HTML.

    Args:
        directory: a modeltap out dir (``audit.jsonl``, ``events.jsonl``, ``sessions.jsonl``).
        record: a ``modeltap run --record`` directory of the same run: turns
            then show their request and response bodies. Without it the page
            holds no content.
        body_limit: bytes of one body put into the page.
        title: the page's title (default: the directory).
        expect: a case file (``modeltap check --expect``'s): each case's
            verdicts are shown beside its session (with ``record``, the
            final text is read from the recording).

    Returns:
        The HTML document.

    Raises:
        NotADirectoryError, FileNotFoundError, OSError: as :meth:`Capture.load`.
        RecordingUnreadable: ``record`` is not a readable recording.
        CaseFileError: ``expect`` cannot be read (its line and key say where).
    """
    cases = load_cases(expect) if expect is not None else None
    recording = load_recording(Path(record)) if record is not None else None
    try:
        capture = Capture.load(directory, record=record if cases is not None else None)
    except RecordingError as e:
        raise RecordingUnreadable(str(e)) from None
    data = build_view_data(capture, title=title)
    blobs = None
    if recording is not None:
        blobs = attach_bodies(data, capture, recording, limit=body_limit).blobs
    if cases is not None:
        judged = case_report.judge(cases, capture)
        document = case_report.to_json(judged, capture, str(expect))
        data["cases"] = {
            "file": str(expect),
            "summary": document["summary"],
            "cases": document["cases"],
        }
    return render_page(data, blobs=blobs)


def _size(value: str) -> int:
    text = value.strip().lower()
    factor = 1
    for suffix, size in (("k", 1024), ("m", 1024 * 1024)):
        if text.endswith(suffix):
            text, factor = text[: -len(suffix)], size
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError("use a positive size such as 256k or 1m")
    return int(text) * factor


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="modeltap view",
        description="Write a capture as one self-contained HTML page (no network: it opens "
        "offline and from a CI artifact): sessions with status and evidence coverage, a "
        "timeline of turns, and per turn the audit facts, what changed from the previous "
        "turn, tool calls, usage and cost.",
    )
    parser.add_argument(
        "directory",
        metavar="DIR",
        nargs="?",
        default=DEFAULT_OUT,
        help=f"the capture (modeltap run --out DIR; default {DEFAULT_OUT}, as modeltap run's)",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help=f"where to write the page (default DIR/{DEFAULT_FILE}; - for standard output)",
    )
    parser.add_argument(
        "--open", action="store_true", help="open the page in the default browser when written"
    )
    parser.add_argument(
        "--record",
        metavar="RECDIR",
        help="a `modeltap run --record` directory of the same run: turns then show their "
        "request and response bodies (that is content: the page holds none without it)",
    )
    parser.add_argument(
        "--body-limit",
        type=_size,
        default=DEFAULT_BODY_LIMIT,
        metavar="SIZE",
        help=f"bytes of one body put into the page with --record (default "
        f"{DEFAULT_BODY_LIMIT // 1024}k; longer bodies are cut and say so)",
    )
    parser.add_argument(
        "--expect",
        metavar="CASES.toml",
        help="a case file (as `modeltap check --expect` reads it): each case's verdicts "
        "(passed, failed, unavailable) are shown beside its session",
    )
    parser.add_argument("--title", help="the page's title (default: DIR)")
    return parser


def main(argv: Sequence[str]) -> int:
    """``modeltap view [DIR] [-o FILE] [--open] [--record RECDIR] [--expect CASES.toml]``.

    Returns:
        0 when the page was written; 2 when the capture, the recording or a
        case file cannot be read (as ``report`` and ``check`` exit for the
        same directory); 1 when the page cannot be written (the reason on
        stderr).
    """
    args = build_parser().parse_args(argv)
    try:
        page = build_page(
            args.directory,
            record=args.record,
            body_limit=args.body_limit,
            title=args.title,
            expect=args.expect,
        )
    except CaseFileError as e:
        print_lines(f"modeltap view: {e}", stderr=True)
        return 2
    except (OSError, RecordingUnreadable) as e:
        print_lines(f"modeltap view: {e}", stderr=True)
        return 2
    if args.output == "-":
        print_document(page)
        return 0
    target = Path(args.output) if args.output else Path(args.directory) / DEFAULT_FILE
    try:
        target.write_text(page, encoding="utf-8")
    except OSError as e:
        print_lines(
            f"modeltap view: cannot write {target}: {e.strerror or e} "
            "(choose another file with -o)",
            stderr=True,
        )
        return 1
    print_lines(f"modeltap view: wrote {target} ({len(page.encode()) // 1024} KB)", stderr=True)
    if args.open:
        webbrowser.open(target.resolve().as_uri())
    return 0
