"""The report as typed objects: :class:`Report`, what the pytest fixture's
``report()`` returns and ``modeltap.Report.load(DIR)`` reads.

The report itself is :mod:`modeltap.report.report`'s (its JSON is
``schemas/report.schema.json``, its text what ``modeltap report`` prints);
this module gives it attributes to read in a test (``report.sessions[0]
.turns[1].tool_calls``), a text rendering (``str(report)``, ``report.text()``)
and, for code written against the dict, the same keys (``report["sessions"]``
is the JSON's list of dicts). Typed fields are the report's own, read from its
JSON; anything else is there by key or in ``.json``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modeltap.evidence.capture import Capture

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ReportTurn:
    """One turn (one audited model request) of a session."""

    #: Its 0-based position in the session's turns (``turn_index``).
    index: int
    #: Its number as the text report and every message show it (``turn``): from 1, like ``seq``.
    number: int
    #: The number of the earlier attempt this turn retried, or None (``retry_of_turn``).
    retry_of_turn: int | None
    #: 1 for a first attempt, 2 for its first retry, ... (``attempt``).
    attempt: int
    #: The ``seq`` of its audit record.
    seq: int
    model: str
    #: Tools the request advertised (None: not stated, a continuation).
    tools_advertised: tuple[str, ...] | None
    #: Tool calls the model made in its response, qualified names, in order.
    tool_calls: tuple[str, ...]
    errors: tuple[str, ...]
    evidence_complete: bool
    capture_errors: tuple[str, ...]
    #: The turn as the report's JSON has it (usage, invocations, coverage, ...).
    json: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Json) -> ReportTurn:
        """Read one turn of the report's JSON."""
        tools = data.get("tools_advertised")
        return cls(
            index=int(data["turn_index"]),
            number=int(data["turn"]),
            retry_of_turn=data.get("retry_of_turn"),
            attempt=int(data.get("attempt", 1)),
            seq=int(data["seq"]),
            model=str(data["model"]),
            tools_advertised=None if tools is None else tuple(tools),
            tool_calls=tuple(data.get("tool_calls") or ()),
            errors=tuple(data.get("errors") or ()),
            evidence_complete=bool(data.get("evidence_complete")),
            capture_errors=tuple(data.get("capture_errors") or ()),
            json=data,
        )


@dataclass(frozen=True, slots=True)
class ReportSession:
    """One session: its turns, and how it ended."""

    session_id: str
    #: ``completed``, ``upstream_error``, ... or None while the session is open.
    stop_reason: str | None
    models: tuple[str, ...]
    tool_calls: tuple[str, ...]
    errors: tuple[str, ...]
    evidence_complete: bool
    capture_errors: tuple[str, ...]
    turns: tuple[ReportTurn, ...]
    #: The session as the report's JSON has it.
    json: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Json) -> ReportSession:
        """Read one session of the report's JSON."""
        return cls(
            session_id=str(data["session_id"]),
            stop_reason=data.get("stop_reason"),
            models=tuple(data.get("models") or ()),
            tool_calls=tuple(data.get("tool_calls") or ()),
            errors=tuple(data.get("errors") or ()),
            evidence_complete=bool(data.get("evidence_complete")),
            capture_errors=tuple(data.get("capture_errors") or ()),
            turns=tuple(ReportTurn.from_json(t) for t in data.get("turns") or ()),
            json=data,
        )


@dataclass(frozen=True, slots=True)
class Report(Mapping[str, Any]):
    """``modeltap report`` of a capture, typed; ``str()`` is its text.

    Also a read-only mapping over the report's JSON, so ``report["sessions"]``
    and ``report["counts"]["turns"]`` keep working.
    """

    directory: str
    run_ids: tuple[str, ...]
    evidence_complete: bool
    capture_errors: tuple[str, ...]
    sessions: tuple[ReportSession, ...]
    #: The whole report as ``modeltap report --json`` prints it.
    json: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Json) -> Report:
        """Read a report's JSON (``modeltap report --json``, parsed).

        Raises:
            KeyError: it lacks a field the report always has.
        """
        return cls(
            directory=str(data["directory"]),
            run_ids=tuple(data.get("run_ids") or ()),
            evidence_complete=bool(data["evidence_complete"]),
            capture_errors=tuple(data.get("capture_errors") or ()),
            sessions=tuple(ReportSession.from_json(s) for s in data.get("sessions") or ()),
            json=data,
        )

    @classmethod
    def of(cls, capture: Capture) -> Report:
        """The report of a loaded capture."""
        from modeltap.report.report import build_report

        return cls.from_json(build_report(capture))

    @classmethod
    def load(cls, directory: str | Path) -> Report:
        """The report of an out dir, as ``modeltap report DIR`` reads it.

        Raises:
            OSError: the directory cannot be read.
        """
        from modeltap.evidence.capture import Capture

        return cls.of(Capture.load(directory))

    @property
    def turns(self) -> tuple[ReportTurn, ...]:
        """Every turn of every session, sessions in report order."""
        return tuple(turn for session in self.sessions for turn in session.turns)

    def session(self, session_id: str) -> ReportSession:
        """The session of that id.

        Raises:
            KeyError: the report has no such session.
        """
        for session in self.sessions:
            if session.session_id == session_id:
                return session
        raise KeyError(session_id)

    def text(self) -> str:
        """The report as ``modeltap report DIR`` prints it."""
        from modeltap.report.report import render_text

        return render_text(self.json)

    def __str__(self) -> str:
        return self.text()

    def __getitem__(self, key: str) -> Any:
        return self.json[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.json)

    def __len__(self) -> int:
        return len(self.json)
