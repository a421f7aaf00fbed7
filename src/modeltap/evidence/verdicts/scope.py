"""What an assertion is judged on: a capture, a session or a turn, seen alike (pure).

The verdict layer reads :class:`~modeltap.evidence.capture.Turn` and
:class:`~modeltap.evidence.capture.Session` through the protocols below, so it
needs nothing of the reading code but what it reads (and the capture package
can hand every scope an ``expect`` without an import cycle). A
:class:`Scope` is built by the capture, the session or the turn itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from modeltap.evidence.coverage import EvidenceCoverage
from modeltap.evidence.records import (
    AuditRecord,
    Cost,
    ErrorEvent,
    ResponseEvent,
    SessionStatus,
    ToolCall,
    Usage,
)

__all__ = ["ExecutionFacts", "InvocationFacts", "Scope", "SessionFacts", "TurnFacts"]


class ExecutionFacts(Protocol):
    """What a verdict reads of an MCP execution
    (:class:`~modeltap.evidence.capture.executions.McpExecution`)."""

    @property
    def server(self) -> str: ...
    @property
    def tool(self) -> str | None: ...
    @property
    def seq(self) -> int: ...
    @property
    def outcome(self) -> str | None: ...
    @property
    def failed(self) -> bool | None: ...
    @property
    def error_code(self) -> int | None: ...


class InvocationFacts(Protocol):
    """What a verdict reads of a tool call with its pairings
    (:class:`~modeltap.evidence.capture.ToolInvocation`)."""

    @property
    def call(self) -> ToolCall: ...
    @property
    def execution(self) -> ExecutionFacts | None: ...


class TurnFacts(Protocol):
    """What a verdict reads of one turn (:class:`~modeltap.evidence.capture.Turn`)."""

    @property
    def record(self) -> AuditRecord: ...
    @property
    def response(self) -> ResponseEvent | None: ...
    @property
    def error_events(self) -> tuple[ErrorEvent, ...]: ...
    @property
    def coverage(self) -> EvidenceCoverage: ...
    @property
    def number(self) -> int: ...
    @property
    def index(self) -> int: ...
    @property
    def retry_of(self) -> int | None: ...
    @property
    def tool_calls(self) -> tuple[ToolCall, ...]: ...
    @property
    def usage(self) -> Usage: ...
    @property
    def total_tokens(self) -> int | None: ...
    @property
    def cost(self) -> Cost | None: ...
    @property
    def output_text(self) -> str | None: ...
    @property
    def tool_invocations(self) -> Sequence[InvocationFacts]: ...
    @property
    def results_of(self) -> Sequence[InvocationFacts]: ...


class SessionFacts(Protocol):
    """What a verdict reads of one session (:class:`~modeltap.evidence.capture.Session`)."""

    @property
    def session_id(self) -> str: ...
    @property
    def ends(self) -> tuple[SessionStatus, ...]: ...
    @property
    def coverage(self) -> EvidenceCoverage: ...
    @property
    def unasked_executions(self) -> Sequence[ExecutionFacts]: ...


@dataclass(frozen=True, slots=True)
class Scope:
    """One thing to judge.

    Attributes:
        label: how verdicts name it (``the capture``, ``session s1``,
            ``turn 2 of session s1``).
        turns: its turns in order (a capture's: each session's in turn).
        sessions: its sessions (a turn's: none; :meth:`completed` then reads
            the turn alone).
        coverage: its six-channel evidence coverage.
        target: what ``that(fn)`` hands ``fn`` (the Capture, Session or Turn).
        several_sessions: whether calls are named with their session.
    """

    label: str
    turns: Sequence[TurnFacts]
    sessions: Sequence[SessionFacts]
    coverage: EvidenceCoverage
    target: Any
    several_sessions: bool = False

    def turn_label(self, turn: TurnFacts) -> str:
        """``turn 2``, or ``session s1 turn 2`` in a scope of several sessions."""
        if self.several_sessions:
            return f"session {turn.record.session_id} turn {turn.number}"
        return f"turn {turn.number}"
