"""Session status and the tool-call budget (pure; no mitmproxy).

A :class:`SessionTracker` follows one session through what the addon saw —
audited requests, refusals, responses, errors — and produces the
``sessions.jsonl`` line when the session ends. These are execution facts,
never a verdict on the agent's task.

The tool-call budget (``--max-tool-calls N``) counts the tool calls the model
asked for, numbered in the order the responses carried them. A request that
carries results only of calls within the budget is admitted, and each call
whose result it carries for the first time is counted in
``tool_calls_admitted``. Once a request has carried the result of the call
that reached the budget (call number N), the budget is spent: every later
model request of the session is refused with ``tool_budget_exceeded``, and so
is any request carrying the result of a call beyond it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from modeltap.errors import Rejected
from modeltap.records import (
    NO_REQUESTS_MESSAGE,
    RequestFacts,
    ResponseFacts,
    SessionStatus,
    utc_now,
)


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
    client_gone: bool = False
    #: call_id -> its number in request order (1-based); None ids get a number too.
    requested: dict[str, int] = field(default_factory=dict)
    calls_requested: int = 0
    admitted: set[str] = field(default_factory=set)
    budget_spent: bool = False
    #: seq of audited requests whose response has not been seen yet.
    open_requests: set[int] = field(default_factory=set)
    capture_errors: list[str] = field(default_factory=list)

    def admit(self, facts: RequestFacts) -> None:
        """Apply the tool-call budget to a request about to be audited.

        Raises:
            Rejected: ``tool_budget_exceeded`` if the budget is spent, or the
                request carries the result of a call beyond it.
        """
        if self.max_tool_calls is None:
            return
        if self.budget_spent:
            raise Rejected("tool_budget_exceeded")
        new = [
            r.call_id
            for r in facts.tool_results
            if r.call_id is not None
            and r.call_id in self.requested
            and r.call_id not in self.admitted
        ]
        if any(self.requested[c] > self.max_tool_calls for c in new):
            raise Rejected("tool_budget_exceeded")

    def audited(self, seq: int, facts: RequestFacts) -> None:
        """Count a request whose audit line was written (it is being forwarded)."""
        self.requests_audited += 1
        self.open_requests.add(seq)
        for result in facts.tool_results:
            c = result.call_id
            if c is not None and c in self.requested and c not in self.admitted:
                self.admitted.add(c)
                if self.max_tool_calls is not None and self.requested[c] >= self.max_tool_calls:
                    self.budget_spent = True

    def refused(self, rule: str) -> None:
        """Count a refusal."""
        self.refusals += 1
        if rule == "tool_budget_exceeded":
            self.budget_refusals += 1

    def responded(self, seq: int, facts: ResponseFacts) -> None:
        """Take in a response: its tool calls and whether its evidence is whole."""
        self.open_requests.discard(seq)
        for call in facts.tool_calls:
            self.calls_requested += 1
            key = call.call_id if call.call_id is not None else f"#anon{self.calls_requested}"
            self.requested.setdefault(key, self.calls_requested)
        if not facts.evidence_complete:
            reasons = "; ".join(facts.capture_errors) or "incomplete response"
            self.capture_errors.append(f"[seq {seq}] {reasons}")

    def errored(self, kind: str) -> None:
        """Count an ``error`` event (``upstream_*`` or ``client_gone``)."""
        if kind == "client_gone":
            self.client_gone = True
        else:
            self.upstream_errors += 1

    @property
    def untouched(self) -> bool:
        """True if no model request, refusal or error was ever seen in this session."""
        return not (
            self.requests_audited or self.refusals or self.upstream_errors or self.client_gone
        )

    @property
    def tool_calls_admitted(self) -> int:
        """Requested tool calls whose results were let through to the model."""
        return len(self.admitted)

    def status(self, ts: str | None = None) -> SessionStatus:
        """The ``sessions.jsonl`` line for this session, as of now."""
        errors = list(self.capture_errors)
        errors += [f"[seq {seq}] no response was seen" for seq in sorted(self.open_requests)]
        if self.budget_refusals:
            reason = "tool_budget_exceeded"
        elif self.refusals:
            reason = "request_audit_error"
        elif self.upstream_errors:
            reason = "upstream_error"
        elif self.client_gone:
            reason = "client_gone"
        else:
            reason = "completed"
        message = None
        if self.requests_audited == 0:
            message = NO_REQUESTS_MESSAGE
            errors.append(NO_REQUESTS_MESSAGE)
        return SessionStatus(
            run_id=self.run_id,
            session_id=self.session_id,
            ts=ts or utc_now(),
            stop_reason=reason,
            requests_audited=self.requests_audited,
            refusals=self.refusals,
            tool_calls_admitted=self.tool_calls_admitted,
            evidence_complete=not errors,
            capture_errors=tuple(errors),
            message=message,
        )
