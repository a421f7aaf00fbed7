"""Session status, the tool-call budget and the run's sessions (pure; no mitmproxy).

A :class:`SessionTracker` follows one session through the lines the proxy
writes for it — audit records, refusals, responses, errors — and produces the
``sessions.jsonl`` line when the session ends. These are execution facts,
never a verdict on the agent's task. Whether the evidence is complete is not
decided here: the tracker feeds the same lines to a
:class:`modeltap.evidence.coverage.SessionEvidence`, the one definition that
:class:`modeltap.evidence.capture.Capture`, ``modeltap report`` and ``modeltap check``
read the files with.

The tool-call budget (``--max-tool-calls N``) counts the tool calls the model
asked for, numbered in the order the responses carried them. A request that
carries results only of calls within the budget is admitted, and each call
whose result it carries for the first time is counted in
``tool_calls_admitted``. Once a request has carried the result of the call
that reached the budget (call number N), the budget is spent: every later
model request of the session is refused with ``tool_budget_exceeded``, and so
is any request carrying the result of a call beyond it. Calls are matched
to results as the evidence matches them (:mod:`modeltap.evidence.pairing`: by
``call_id``, or by position for Gemini's calls without one).

MCP ``tools/call`` executions count in the same budget, each tool call once
(SPEC 3b): an execution that answers a model call the session's responses
asked for (:mod:`modeltap.evidence.mcp_pairing`) is that call, numbered as it
was; one no model call asked for is a call of its own, numbered next; an
``input_required`` retry continues its execution and is not counted again.
A ``tools/call`` whose number is beyond the budget is refused
(``tool_budget_exceeded``) before it is forwarded.

``stop_reason`` names the first thing that went wrong, in this order: the
budget (``tool_budget_exceeded``), a refusal (``request_audit_error``), an
upstream failure (``upstream_error``), a client that left (``client_gone``),
the proxy stopping mid-exchange (``proxy_stopped``); else ``completed``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from modeltap.evidence.coverage import SessionEvidence
from modeltap.evidence.coverage_reasons import NO_RESPONSE_AT_END, mcp_only
from modeltap.evidence.mcp_pairing import Execution, ExecutionPairing
from modeltap.evidence.pairing import ToolPairing
from modeltap.evidence.records import (
    NO_REQUESTS_MESSAGE,
    AuditRecord,
    ErrorEvent,
    McpAuditRecord,
    McpResultEvent,
    RejectedEvent,
    ResponseEvent,
    SessionStatus,
    ToolResult,
    utc_now,
)
from modeltap.rules.errors import Rejected, Rule
from modeltap.rules.failures import stop_reason_for


@dataclass
class SessionTracker:
    """What one session did so far, as the proxy saw it."""

    run_id: str
    session_id: str
    max_tool_calls: int | None = None
    requests_audited: int = 0
    refusals: int = 0
    budget_refusals: int = 0
    upstream_errors: int = 0
    #: Requests the client broke or never finished (bad_request, client_timeout).
    request_errors: int = 0
    client_gone: bool = False
    proxy_stopped: bool = False
    #: Open WebSocket connections whose connection is this session.
    connections: int = 0
    #: With a budget: the number of each call whose result was not let through yet.
    requested: ToolPairing[int] = field(default_factory=ToolPairing)
    calls_requested: int = 0
    budget_spent: bool = False
    #: MCP messages audited, and ``tools/call`` executions let through (once each).
    mcp_messages: int = 0
    mcp_tool_calls: int = 0
    #: With a budget: model calls awaiting their MCP execution (and executions
    #: awaiting their model call), by call number.
    executions: ExecutionPairing[int] = field(default_factory=ExecutionPairing)
    evidence: SessionEvidence = field(default_factory=lambda: SessionEvidence(usage=False))
    #: seq -> turn index, for audited requests whose response has not been seen yet.
    _turn_of: dict[int, int] = field(default_factory=dict)

    def admit(self, tool_results: Iterable[ToolResult]) -> None:
        """Apply the tool-call budget to a request about to be audited.

        Args:
            tool_results: the tool results the request carries.

        Raises:
            Rejected: ``tool_budget_exceeded`` if the budget is spent, or the
                request carries the result of a call beyond it.
        """
        if self.max_tool_calls is None:
            return
        if self.budget_spent:
            raise Rejected(Rule.TOOL_BUDGET_EXCEEDED)
        if any(number > self.max_tool_calls for number, _ in self.requested.peek(tool_results)):
            raise Rejected(Rule.TOOL_BUDGET_EXCEEDED)

    def audited(self, record: AuditRecord) -> None:
        """Take in a request whose audit line was written (it is being forwarded)."""
        self.requests_audited += 1
        self._turn_of[record.seq] = self.evidence.request(record)
        if self.max_tool_calls is None:
            return
        answered = self.requested.answer(record.tool_results)
        if any(number >= self.max_tool_calls for number, _ in answered):
            self.budget_spent = True

    def refused(self, event: RejectedEvent) -> None:
        """Take in a refusal."""
        self.refusals += 1
        if event.rule == Rule.TOOL_BUDGET_EXCEEDED:
            self.budget_refusals += 1
        self.evidence.refused(event)

    def responded(self, event: ResponseEvent) -> None:
        """Take in a response: its tool calls and whether its evidence is whole."""
        turn = self._turn_of.pop(event.seq, None) if event.seq is not None else None
        if turn is None:
            return
        self.evidence.response(turn, event)
        if self.max_tool_calls is None:
            return
        for call in event.tool_calls:
            # An execution seen before the response that asked for it ended is this call.
            number = self.executions.asked(call, self.calls_requested + 1)
            if number is None:
                self.calls_requested += 1
                number = self.calls_requested
            self.requested.asked(call.call_id, number)

    def admit_executions(self, executions: Sequence[Execution]) -> None:
        """Apply the tool-call budget to the MCP executions a body is about to start.

        Args:
            executions: its ``tools/call`` messages that begin an execution
                (retries of an ``input_required`` one are not).

        Raises:
            Rejected: ``tool_budget_exceeded`` when one of them would be a
                call numbered beyond the budget.
        """
        if self.max_tool_calls is None:
            return
        taken: set[int] = set()
        new = 0
        for execution in executions:
            number = self.executions.find_call(execution)
            if number is None or number in taken:
                new += 1
                number = self.calls_requested + new
            taken.add(number)
            if number > self.max_tool_calls:
                raise Rejected(Rule.TOOL_BUDGET_EXCEEDED)

    def mcp_audited(
        self, records: Sequence[McpAuditRecord], executions: Sequence[Execution]
    ) -> None:
        """Take in an MCP body whose audit lines were written (it is being forwarded).

        Args:
            records: the lines written.
            executions: its ``tools/call`` messages that begin an execution
                (none when the body was refused after some lines were written).
        """
        self.mcp_messages += len(records)
        self.mcp_tool_calls += len(executions)
        for record in records:
            # Every line written, as the readers will read it: the evidence pairs
            # executions with model calls (a refused batch's lines included).
            self.evidence.mcp_call(record)
        if self.max_tool_calls is None:
            return
        for execution in executions:
            if self.executions.executed(execution, self.calls_requested + 1) is None:
                self.calls_requested += 1  # no model call asked for it: a call of its own

    def mcp_answered(self, event: McpResultEvent) -> None:
        """Take in an ``mcp_result`` line written: an execution's answer
        completes the tool side of the call it ran."""
        self.evidence.mcp_result(event)

    def errored(self, event: ErrorEvent) -> None:
        """Take in an ``error`` event, counted by the stop reason its kind leads to
        (:func:`modeltap.rules.failures.stop_reason_for`)."""
        reason = stop_reason_for(event.error)
        if reason == "client_gone":
            self.client_gone = True
        elif reason == "proxy_stopped":
            self.proxy_stopped = True
        elif reason == "upstream_error":
            self.upstream_errors += 1
        else:
            self.request_errors += 1
        turn = self._turn_of.get(event.seq) if event.seq is not None else None
        if turn is not None:
            self.evidence.turn_error(turn, event)
        else:
            self.evidence.error(event)

    def file_reopened(self, file: str) -> None:
        """``file`` was moved or deleted under the proxy while it held this
        session's lines (the proxy names the session in a ``file_reopened`` event)."""
        self.evidence.file_reopened(file)

    def line_lost(self, file: str) -> None:
        """A line of this session could not be written: the files miss something."""
        self.evidence.lower("data", "partial", f"a line of {file} could not be written")

    @property
    def untouched(self) -> bool:
        """True if no model request, MCP message, refusal or error was ever seen in this session."""
        return not (
            self.requests_audited
            or self.mcp_messages
            or self.refusals
            or self.request_errors
            or self.upstream_errors
            or self.client_gone
            or self.proxy_stopped
        )

    @property
    def tool_calls_admitted(self) -> int:
        """Requested tool calls whose results were let through to the model."""
        return self.evidence.answered

    def _message(self) -> str | None:
        """What a session without a model request is: MCP traffic only, or nothing audited."""
        if self.requests_audited:
            return None
        if self.mcp_messages:
            return mcp_only(self.mcp_messages, self.mcp_tool_calls)
        return NO_REQUESTS_MESSAGE

    def status(self, ts: str | None = None) -> SessionStatus:
        """The ``sessions.jsonl`` line for this session, as of now.

        A request still in flight is reported as not answered (yet): the line
        says what had been seen when the session ended.
        """
        result = self.evidence.result(open_reason=NO_RESPONSE_AT_END)
        if self.budget_refusals:
            reason = "tool_budget_exceeded"
        elif self.refusals or self.request_errors:
            reason = "request_audit_error"
        elif self.upstream_errors:
            reason = "upstream_error"
        elif self.client_gone:
            reason = "client_gone"
        elif self.proxy_stopped:
            reason = "proxy_stopped"
        else:
            reason = "completed"
        return SessionStatus(
            run_id=self.run_id,
            session_id=self.session_id,
            ts=ts or utc_now(),
            stop_reason=reason,
            requests_audited=self.requests_audited,
            refusals=self.refusals,
            tool_calls_admitted=self.tool_calls_admitted,
            evidence_complete=result.evidence_complete,
            capture_errors=tuple(result.capture_errors),
            mcp_messages_audited=self.mcp_messages,
            mcp_tool_calls=self.mcp_tool_calls,
            message=self._message(),
        )


#: Sessions ended by the harness whose status is kept (for an idempotent second end,
#: and to refuse their late requests); the oldest is forgotten first.
ENDED_SESSIONS_KEPT = 10_000
#: WebSocket conversations (the connection is the session) whose socket closed, kept
#: so that a reconnect with the same x-client-request-id continues the session.
CLOSED_CONVERSATIONS_KEPT = 1_000


class Sessions:
    """The sessions of a run: open ones, conversations that may resume, ended ones.

    A session is open from its first request until its ``sessions.jsonl``
    line is written. A WebSocket conversation (the connection is the session)
    whose last socket closed gets its line, and is kept resumable: a reconnect
    with the same id continues it, and its next line counts it all. A session
    the harness ended stays ended: later requests in it are refused. Both
    kinds are remembered within a bound (oldest forgotten first), so memory
    stays flat over many sessions.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.max_tool_calls: int | None = None
        self.open: dict[str, SessionTracker] = {}
        self._closed: OrderedDict[str, tuple[SessionTracker, SessionStatus]] = OrderedDict()
        self._ended: OrderedDict[str, SessionStatus] = OrderedDict()

    def get(self, session_id: str) -> SessionTracker | None:
        """The session's tracker: open, resumed or new; ``None`` once ended for good."""
        session = self.open.get(session_id)
        if session is not None:
            return session
        if session_id in self._ended:
            return None
        closed = self._closed.pop(session_id, None)
        session = (
            closed[0]
            if closed is not None
            else SessionTracker(self.run_id, session_id, self.max_tool_calls)
        )
        self.open[session_id] = session
        return session

    def holding_lines(self) -> list[SessionTracker]:
        """The sessions whose lines the files hold and that may still write more:
        the open ones and the conversations that may resume."""
        return [*self.open.values(), *(tracker for tracker, _status in self._closed.values())]

    def close(self, session_id: str) -> SessionStatus:
        """An open session's status, for its line; it is open no more."""
        return self.open.pop(session_id).status()

    def park(self, session_id: str, tracker: SessionTracker, status: SessionStatus) -> None:
        """Keep a conversation whose socket closed (its line written) resumable."""
        self._closed[session_id] = (tracker, status)
        while len(self._closed) > CLOSED_CONVERSATIONS_KEPT:
            self._closed.popitem(last=False)

    def ended(self, session_id: str) -> SessionStatus | None:
        """The status of a session ended for good, if it is remembered."""
        return self._ended.get(session_id)

    def unpark(self, session_id: str) -> SessionStatus | None:
        """Take a resumable conversation out of the kept ones; its line's status."""
        closed = self._closed.pop(session_id, None)
        return closed[1] if closed is not None else None

    def end(self, session_id: str, status: SessionStatus) -> None:
        """Remember a session as ended for good (later requests in it are refused)."""
        self._ended[session_id] = status
        while len(self._ended) > ENDED_SESSIONS_KEPT:
            self._ended.popitem(last=False)


@dataclass(frozen=True, slots=True)
class Ended:
    """A session's end: its status, and whether this request ended it."""

    status: SessionStatus
    #: False when it had ended before (nothing was written this time).
    now: bool
