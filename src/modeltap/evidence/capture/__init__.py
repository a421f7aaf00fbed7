"""Reading a capture back: typed records and events, grouped by session.

``Capture.load(DIR)`` reads ``audit.jsonl``, ``events.jsonl`` and, when it
exists, ``sessions.jsonl`` from one output directory and gives:

* ``records``, ``events``, ``session_ends``: every line, typed
  (:mod:`modeltap.evidence.capture.lines` decodes them).
* ``sessions``: a dict by ``session_id``, ordered by each session's earliest
  timestamp (file order breaks ties). A :class:`Session` holds its
  :class:`Turn` objects (one audited request = one model turn, in file order;
  a turn that sends again a request that had just failed is marked a retry,
  :mod:`modeltap.evidence.capture.retries`) and what belongs to no turn: refusals (a
  refused request has no audit record), unaudited pass-throughs, errors
  without a ``seq`` (:mod:`modeltap.evidence.capture.grouping` builds them). Ids that
  saw only unaudited pass-throughs (an SDK's ``GET .../models``) are no
  session: their events are ``pass_through``.
* ``load_errors``: every line that could not be read, naming file and line
  number. A torn last line (the writer was killed mid-append) is reported
  here; loading never crashes on file content and never drops a line silently.
* MCP (SPEC 3b): each session's ``mcp_records`` and ``mcp_events``, its
  ``mcp_executions`` (:mod:`modeltap.evidence.capture.executions`: server,
  tool, ids, timing, outcome; sizes, never content), each model call's
  ``ToolInvocation.execution`` (the one that ran it, ``None`` when none was
  observed) and ``denied_tool_calls`` (``tools/call`` messages refused).
* the helpers of :mod:`modeltap.evidence.capture.turns` (``tool_was_called``,
  ``tool_call_count``, ``tool_calls_for``, ``tools_advertised``, ``usage``,
  ``cost``),
  ``coverage`` (the six-channel evidence coverage of :mod:`modeltap.evidence.coverage`),
  ``evidence_complete`` and ``capture_errors``.

``evidence_complete`` is true exactly when the ``events``, ``actions``,
``status`` and ``data`` channels are complete. ``usage`` is left out on
purpose (a provider that reports no usage has not hidden what happened: that
shows as ``None`` totals and in coverage) and so is ``messages`` (never
recorded). ``capture_errors`` lists the reasons of those four channels, turn
reasons prefixed ``[turn N]`` (turns counted from 1, like ``seq``; and
``[session ID]`` on a :class:`Capture`),
so ``evidence_complete`` is equivalent to ``capture_errors == []``.

The package::

    capture (Capture.load)  ->  lines.py     files and lines -> records.py types
                            ->  grouping.py  lines -> sessions and turns, fed to coverage.py
                            ->  executions.py  MCP tools/call lines and answers -> executions
                            ->  retries.py   which turns retry a failed attempt
                            ->  turns.py     Turn, Session and their queries
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from modeltap.evidence.capture.executions import DeniedToolCall, McpExecution
from modeltap.evidence.capture.grouping import data_reasons, group, with_output
from modeltap.evidence.capture.lines import (
    AUDIT_FILE,
    EVENTS_FILE,
    SESSIONS_FILE,
    LoadError,
    SessionEnd,
    decode_audit_line,
    decode_event,
    decode_record,
    decode_session_end,
    read_lines,
)
from modeltap.evidence.capture.retries import RETRY_WINDOW_MS, Attempt, attempt_failed, find_retries
from modeltap.evidence.capture.turns import (
    Session,
    ToolInvocation,
    Turn,
    TurnQueries,
    sum_costs,
    sum_usage,
    tool_call_matches,
)
from modeltap.evidence.coverage import (
    CHANNELS,
    EVIDENCE_CHANNELS,
    MESSAGES_NOT_RECORDED,
    NO_REQUESTS,
    NO_RESPONSE,
    USAGE_FIELDS,
    ChannelCoverage,
    CoverageStatus,
    EvidenceCoverage,
    qualified_tool_name,
)
from modeltap.evidence.recordings import Recording
from modeltap.evidence.records import AuditRecord, Event, McpAuditRecord, UnauditedEvent
from modeltap.evidence.verdicts import Expect, Scope

# Coverage lives in modeltap.evidence.coverage; readers have always found it here too.
__all__ = [
    "CHANNELS",
    "EVIDENCE_CHANNELS",
    "MESSAGES_NOT_RECORDED",
    "NO_REQUESTS",
    "NO_RESPONSE",
    "RETRY_WINDOW_MS",
    "USAGE_FIELDS",
    "Attempt",
    "Capture",
    "ChannelCoverage",
    "CoverageStatus",
    "DeniedToolCall",
    "EvidenceCoverage",
    "LoadError",
    "McpExecution",
    "Session",
    "SessionEnd",
    "ToolInvocation",
    "Turn",
    "TurnQueries",
    "attempt_failed",
    "decode_event",
    "decode_record",
    "decode_session_end",
    "find_retries",
    "qualified_tool_name",
    "sum_costs",
    "sum_usage",
    "tool_call_matches",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Capture(TurnQueries):
    """The contents of one modeltap output directory. Build it with :meth:`load`."""

    directory: Path
    records: tuple[AuditRecord, ...]
    events: tuple[Event, ...]
    session_ends: tuple[SessionEnd, ...]
    sessions: dict[str, Session]
    load_errors: tuple[LoadError, ...] = ()
    #: Unaudited pass-throughs (``GET .../models``) of ids that saw no model
    #: traffic: not sessions, so they lower no coverage.
    pass_through: tuple[UnauditedEvent, ...] = ()
    #: The ``--record`` directory the turns' output text was read from, or ``None``.
    recording: Path | None = None
    #: Every MCP audit line (SPEC 3b), in file order (each session holds its own).
    mcp_records: tuple[McpAuditRecord, ...] = ()

    def _turns(self) -> Iterable[Turn]:
        return (turn for session in self.sessions.values() for turn in session.turns)

    @property
    def expect(self) -> Expect:
        """Assertions on the whole capture (:class:`~modeltap.evidence.verdicts.Expect`):
        ``capture.expect.tool_not_called("delete_account")`` is ``passed``,
        ``failed`` or ``unavailable`` (the proxy did not see enough to tell)."""
        sessions = list(self.sessions.values())
        return Expect(
            Scope(
                label="the capture",
                turns=list(self._turns()),
                sessions=sessions,
                coverage=self.coverage,
                target=self,
                several_sessions=len(sessions) > 1,
            )
        )

    @property
    def run_ids(self) -> list[str]:
        """Every run id seen, in first-seen order."""
        seen: dict[str, None] = {}
        for session in self.sessions.values():
            for run_id in session.run_ids:
                seen.setdefault(run_id, None)
        return list(seen)

    @property
    def coverage(self) -> EvidenceCoverage:
        """The worst over the sessions; every reason prefixed ``[session ID]``."""
        if not self.sessions:
            coverage = EvidenceCoverage()
            for name in ("events", "actions", "usage", "status"):
                coverage = coverage.lower(name, "unavailable", NO_REQUESTS)
            for error in self.load_errors:
                coverage = coverage.lower("data", "partial", f"unreadable line: {error}")
            return coverage
        merged = EvidenceCoverage()
        load_reasons = set(data_reasons(self.load_errors))
        for session in self.sessions.values():
            session_coverage = session.coverage
            for name in CHANNELS:
                if name == "messages":
                    continue
                channel = session_coverage.channel(name)
                for reason in channel.reasons:
                    # Load errors lower every session alike: say them once.
                    text = (
                        reason
                        if reason in load_reasons
                        else f"[session {session.session_id}] {reason}"
                    )
                    merged = merged.lower(name, channel.status, text)
        return merged

    @property
    def evidence_complete(self) -> bool:
        """Whether every session's evidence is complete (and there is a session)."""
        return self.coverage.evidence_complete

    @property
    def capture_errors(self) -> list[str]:
        """Every session's capture errors, prefixed ``[session ID]``; load errors once."""
        if not self.sessions:
            return [NO_REQUESTS, *data_reasons(self.load_errors)]
        load_reasons = data_reasons(self.load_errors)
        out: list[str] = list(load_reasons)
        for session in self.sessions.values():
            for error in session.capture_errors:
                if error not in load_reasons:
                    out.append(f"[session {session.session_id}] {error}")
        return out

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike[str],
        *,
        record: str | os.PathLike[str] | None = None,
    ) -> Capture:
        """Read a capture directory.

        Args:
            directory: a directory holding any of ``audit.jsonl``,
                ``events.jsonl`` and ``sessions.jsonl`` (only the last: the
                agent bypassed the proxy, and the sessions say so).
            record: the run's ``--record`` directory: each turn's output
                text is read from it (``Turn.output_text``, the ``messages``
                channel of its coverage), for ``final_text_contains``.
                Without it message content is unavailable.

        Returns:
            The capture. Unreadable lines are listed in ``load_errors``.

        Raises:
            NotADirectoryError: ``directory`` is not a directory.
            FileNotFoundError: it holds none of the three files.
            OSError: a file could not be read.
            modeltap.evidence.recordings.RecordingError: ``record`` is not a
                readable recording (a ``ValueError``).
        """
        root = Path(directory)
        if not root.is_dir():
            what = "not a directory" if root.exists() else "no such directory"
            raise NotADirectoryError(f"{what}: {root} (give the --out directory of a run)")
        if not any((root / name).exists() for name in (AUDIT_FILE, EVENTS_FILE, SESSIONS_FILE)):
            # A run writes each file with its first line: an out dir a run
            # never saw a request in stays empty.
            raise FileNotFoundError(
                f"no {AUDIT_FILE}, {EVENTS_FILE} or {SESSIONS_FILE} in {root}: nothing was "
                "captured there (did the agent's requests go through the proxy, and is this "
                "the run's --out?)"
            )
        errors: list[LoadError] = []
        lines = [r for _, r in read_lines(root / AUDIT_FILE, decode_audit_line, errors)]
        records = [r for r in lines if isinstance(r, AuditRecord)]
        mcp_records = [r for r in lines if isinstance(r, McpAuditRecord)]
        events = [e for _, e in read_lines(root / EVENTS_FILE, decode_event, errors)]
        ends = [s for _, s in read_lines(root / SESSIONS_FILE, decode_session_end, errors)]
        sessions, pass_through = group(records, events, ends, tuple(errors), mcp_records)
        recording = Recording.load(Path(record)) if record is not None else None
        if recording is not None:
            sessions = {sid: with_output(s, recording) for sid, s in sessions.items()}
        return cls(
            directory=root,
            records=tuple(records),
            mcp_records=tuple(mcp_records),
            events=tuple(events),
            session_ends=tuple(ends),
            sessions=sessions,
            load_errors=tuple(errors),
            pass_through=pass_through,
            recording=recording.root if recording is not None else None,
        )
