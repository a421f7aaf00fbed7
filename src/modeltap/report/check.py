"""``modeltap check [DIR]``: did every session end completed, with complete evidence?

This is the one line a CI job adds after running an agent. A session passes
when it has ended (its ``sessions.jsonl`` line: the harness ended it, its
WebSocket closed, or the proxy stopped), every line of it says ``stop_reason:
completed``, and its evidence is complete as :class:`~modeltap.evidence.capture.Capture`
reads it from all the files — the same computation (``modeltap.evidence.coverage``)
that wrote ``evidence_complete`` into ``sessions.jsonl``, so ``check``,
``report``, ``Capture`` and ``sessions.jsonl`` agree: a tool call that never
got its result, a refused request, an incomplete stream each fail the session.
A directory that holds only ``sessions.jsonl`` (the agent bypassed the proxy)
is read too. These are execution facts only — never whether the agent did its
task well; assert on the task's own output too.

Requests passed through unaudited (an SDK's ``GET .../models`` without a
session header) make no session (:class:`~modeltap.evidence.capture.Capture` keeps
them as ``pass_through``), so they never fail the check as "audit
unsupported". A failing session's evidence reasons are printed once each,
turns grouped as in ``modeltap report`` (``[turns 1-3] ...``).

``--expect CASES.toml`` judges the cases of a case file instead
(:mod:`modeltap.evidence.verdicts.cases`; printed by
:mod:`modeltap.report.case_report`, ``--json`` and ``--junit FILE`` for CI),
and the exit status is the cases' alone: 0 only when every case passed
(optional gaps allowed), 1 otherwise, 2 for a case file, capture or
recording that cannot be read. ``--record RDIR`` lets ``expect_text`` read
the final text.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import orjson

from modeltap.evidence.capture import Capture, Session
from modeltap.evidence.recordings import RecordingError
from modeltap.evidence.records import DEFAULT_OUT
from modeltap.evidence.verdicts.cases import Case, CaseFileError, load_cases
from modeltap.report import case_report
from modeltap.report.terminal import print_document, print_lines, printable


def problems(capture: Capture, session_id: str | None = None) -> dict[str, list[str]]:
    """Reasons each session fails the check (an empty list means it passes).

    Args:
        capture: a loaded out dir.
        session_id: check only this session (a session with no line at all
            fails as "no such session", naming the sessions there are;
            one that only passed unaudited requests through says so).

    Returns:
        Reasons by session id, and under ``"(files)"`` the unreadable lines.
    """
    ids = (
        [session_id]
        if session_id is not None
        else [sid for sid, s in capture.sessions.items() if not _pass_through_only(s)]
    )
    found: dict[str, list[str]] = {}
    for sid in ids:
        session = capture.sessions.get(sid)
        if session is None:
            found[sid] = _no_such_session(capture, sid)
            continue
        reasons: list[str] = []
        if not session.ends:
            reasons.append(
                "the session has not ended (no sessions.jsonl line yet): stop the proxy, or run "
                f"`modeltap session end {sid} --out {capture.directory}`, before the check "
                "(a proxy killed with -9 writes no line)"
            )
        for end in session.ends:
            reason = f"stop_reason is {end.stop_reason}"
            if end.stop_reason != "completed" and reason not in reasons:
                reasons.append(reason)
        if not session.evidence_complete:
            reasons.append("evidence is incomplete")
            reasons += [f"  {e}" for e in session.coverage.capture_errors]
        found[sid] = reasons
    for error in capture.load_errors:
        found.setdefault("(files)", []).append(str(error))
    return found


def _pass_through_only(session: Session) -> bool:
    """Only unaudited traffic and no end line: not a session anyone asked about
    (the proxy reports the run's implicit session only when it saw model traffic)."""
    return not (session.turns or session.refusals or session.errors or session.ends)


#: How many known sessions a "no such session" answer lists.
LISTED_SESSIONS: Final = 10


def _no_such_session(capture: Capture, session_id: str) -> list[str]:
    """Why a session nothing is known of fails: it does not exist, and what does."""
    passed = [e for e in capture.pass_through if e.session_id == session_id]
    if passed:
        what = ", ".join(dict.fromkeys(f"{e.method} {e.path}" for e in passed))
        first = (
            f"no such session: {session_id!r} sent no model request, only "
            f"{len(passed)} unaudited pass-through request{'s' if len(passed) != 1 else ''} "
            f"({what})"
        )
    else:
        first = (
            f"no such session: {session_id!r} is not in this out dir "
            "(nothing reached the proxy in its name)"
        )
    known = list(capture.sessions)
    if not known:
        return [first, "no session at all in this out dir"]
    shown = ", ".join(known[:LISTED_SESSIONS])
    more = f" and {len(known) - LISTED_SESSIONS} more" if len(known) > LISTED_SESSIONS else ""
    noun = "session" if len(known) == 1 else "sessions"
    return [first, f"{len(known)} {noun} in this out dir: {shown}{more}"]


def main(argv: Sequence[str] | None = None) -> int:
    """``modeltap check [DIR] [--session ID] [--expect CASES.toml [--json] [--junit FILE]]
    [--record RDIR]``.

    Returns:
        Without ``--expect``: 0 only when every session passes the check, 1
        otherwise. With it: 0 only when every case passed (optional
        unavailable verdicts allowed), 1 otherwise. 2 when the capture, the
        recording or the case file cannot be read.
    """
    parser = argparse.ArgumentParser(
        prog="modeltap check",
        description="Exit 0 only if every session (or the named one) completed, audited at "
        "least one model request, and has complete evidence. Execution facts, not a verdict "
        "on the agent's task. With --expect, judge the cases of a TOML case file instead: "
        "each verdict passed, failed or unavailable (the proxy did not see enough to tell).",
    )
    parser.add_argument(
        "dir",
        metavar="DIR",
        type=Path,
        nargs="?",
        default=Path(DEFAULT_OUT),
        help=f"the --out directory of a run (default {DEFAULT_OUT}, as modeltap run's)",
    )
    parser.add_argument("--session", metavar="ID", help="check only this session")
    parser.add_argument(
        "--expect",
        metavar="CASES.toml",
        type=Path,
        help="judge the [[case]] tables of this file; exit 0 only when every case passed "
        "(an unavailable verdict fails unless the case lists its key in `optional`), "
        "1 otherwise, 2 for a file that cannot be read",
    )
    parser.add_argument(
        "--json", action="store_true", help="with --expect: print the verdicts as JSON"
    )
    parser.add_argument(
        "--junit",
        metavar="FILE",
        type=Path,
        help="with --expect: also write JUnit XML (one <testcase> per case) to FILE",
    )
    parser.add_argument(
        "--record",
        metavar="RDIR",
        type=Path,
        help="the run's `modeltap run --record` directory: the final text is read from it "
        "(expect_text needs it)",
    )
    args = parser.parse_args(argv)
    if (args.json or args.junit) and args.expect is None:
        print_lines(
            "modeltap check: --json and --junit report cases: give --expect CASES.toml",
            stderr=True,
        )
        return 2
    try:
        cases = load_cases(args.expect) if args.expect is not None else None
    except CaseFileError as e:
        print_lines(f"modeltap check: {e}", stderr=True)
        return 2
    try:
        capture = Capture.load(args.dir, record=args.record)
    except OSError as e:  # the path and the OS's reason; nothing from the files
        print_lines(f"modeltap check: {e}", stderr=True)
        return 2
    except RecordingError as e:
        print_lines(f"modeltap check: --record: {e}", stderr=True)
        return 2
    if cases is not None:
        return _judge(capture, cases, args)
    found = problems(capture, args.session)
    if not found:
        print_lines("FAIL: no model traffic in this out dir (did the agent use the proxy?)")
        return 1
    failed = {sid: reasons for sid, reasons in found.items() if reasons}
    for sid, reasons in found.items():
        print_lines(
            f"{'FAIL' if reasons else 'ok  '} session {printable(sid)}",
            *(f"       {printable(reason)}" for reason in reasons),
        )
    noun = "session" if len(found) == 1 else "sessions"
    if failed:
        print_lines(f"{len(failed)} of {len(found)} {noun} failed the check.")
        return 1
    both = "the" if len(found) == 1 else "all"
    print_lines(f"{both} {len(found)} {noun} completed with complete evidence.")
    return 0


def _judge(capture: Capture, cases: list[Case], args: argparse.Namespace) -> int:
    """``--expect``: judge, print, write JUnit; the exit status is the cases' alone."""
    if args.session is not None:
        cases = [dataclasses.replace(c, session=c.session or args.session) for c in cases]
    judged = case_report.judge(cases, capture)
    if args.json:
        document = case_report.to_json(judged, capture, str(args.expect))
        print_document(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print_lines(*case_report.render_text(judged).split("\n"))  # its lines escaped
    if args.junit is not None:
        try:
            case_report.write_junit(args.junit, judged)
        except OSError as e:
            print_lines(
                f"modeltap check: --junit: cannot write {args.junit}: {e.strerror}", stderr=True
            )
            return 2
    return 0 if all(item.verdicts.status == "passed" for item in judged) else 1
