"""One run of the proxy: its id, settings, sessions, ``seq``, files and listeners.

A :class:`Run` is what every exchange shares: the last gate before
forwarding (:meth:`Run.audit`: session policy, then the audit line), the
lines of ``events.jsonl`` and ``sessions.jsonl``, the sessions (open,
resumable, ended by the harness), and the listeners it publishes to
(:class:`~modeltap.core.listeners.Listeners`). :meth:`Run.stop` ends whatever
is still in flight, then every session, and makes the files final.

The life of one exchange is in :mod:`modeltap.core.exchange` (HTTP, its MCP
side in :mod:`modeltap.core.mcp_exchange`) and
:mod:`modeltap.core.ws_connection` (WebSocket); both register here what must be
ended at stop. :meth:`Run.audit_mcp` is the same last gate for the messages of
an MCP POST, whose MCP sessions the run follows in :attr:`Run.mcp`.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol

from modeltap import apis
from modeltap.apis.websocket_mode import WsPolicy
from modeltap.core.listeners import Listeners
from modeltap.core.mcp_sessions import McpSessions
from modeltap.core.notices import ExchangeView, McpOutcome, Outcome
from modeltap.core.sessions import Ended, Sessions, SessionTracker
from modeltap.evidence.cost import response_cost
from modeltap.evidence.mcp_pairing import Execution
from modeltap.evidence.records import (
    OPERATION_CREATE,
    AuditRecord,
    ErrorEvent,
    Event,
    McpAuditRecord,
    McpRefused,
    McpResultEvent,
    RejectedEvent,
    RequestFacts,
    ResponseEvent,
    ResponseFacts,
    SessionStatus,
    UnauditedEvent,
    utc_now,
)
from modeltap.evidence.redaction import redact_path
from modeltap.evidence.sink import LineObserver, Sink
from modeltap.rules.errors import Rejected, Rule, SinkError
from modeltap.rules.routing import RouteTable

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY: Final = 64 * 1024 * 1024


def new_run_id() -> str:
    """A run id: UTC start time plus randomness, sortable and unique across processes."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def _ms(start_ns: int, end_ns: int | None) -> float | None:
    if end_ns is None:
        return None
    return round((end_ns - start_ns) / 1e6, 3)


@dataclass(frozen=True, slots=True)
class Settings:
    """The options the core decides with (set by the addons' ``configure``)."""

    mode: str = "reverse"
    routes: RouteTable = field(default_factory=lambda: RouteTable.build([], None))
    strict: bool = False
    fail_closed: bool = False
    image_detail: str | None = None
    max_body: int = DEFAULT_MAX_BODY
    #: ``--session``: the session of requests without a session header.
    session: str | None = None
    ws_policy: WsPolicy = field(default_factory=WsPolicy)
    #: Content capture is on: observers keep the output for spans.
    capture_content: bool = False
    #: Whether the upstreams check request signatures: reverse mode then
    #: refuses an AWS SigV4-signed request it would have to change. A replay's
    #: upstream is the recording, which checks none.
    upstreams_check_signatures: bool = True
    #: Upstream TLS certificates are not verified (``--upstream-insecure``).
    upstream_insecure: bool = False


class InFlight(Protocol):
    """An exchange or connection that must end when the run stops."""

    def stop(self, now: int) -> None:
        """End it now (``proxy_stopped``)."""


class Run:
    """One run of the proxy: its id, settings, sessions, files and listeners."""

    def __init__(self, run_id: str | None = None) -> None:
        self.run_id = run_id or new_run_id()
        self.settings = Settings()
        self.sink: Sink | None = None
        self.sessions = Sessions(self.run_id)
        self.counts = {"audited": 0, "refused": 0, "unaudited": 0, "errors": 0, "mcp": 0}
        #: Set once :meth:`stop` ran: files are final, nothing more is forwarded.
        self.stopped = False
        #: The control listener's address, refused as a target in regular mode.
        self.control_address: tuple[str, int] | None = None
        self._seq = itertools.count(1)
        #: Audited HTTP exchanges whose response has not ended, and open
        #: WebSocket connections, by id: what :meth:`stop` ends.
        self.in_flight: dict[str, InFlight] = {}
        #: Who hears what the run's exchanges do (:meth:`Listeners.subscribe`).
        self.listeners = Listeners()
        #: The MCP sessions its exchanges share (answers matched across exchanges).
        self.mcp = McpSessions()
        #: Copies each written line elsewhere (the OTLP log records), if set.
        self.line_observer: LineObserver | None = None
        #: Log records known lost so far, for each ``sessions.jsonl`` line.
        self.logs_dropped: Callable[[], int | None] = lambda: None

    def use_sink(self, sink: Sink) -> None:
        """Write into ``sink`` from now on (the previous one is closed)."""
        if self.sink is not None:
            self.sink.close()
        sink.sessions_with_lines = self.file_reopened
        sink.observer = self.line_observer
        self.sink = sink

    def observe_lines(self, observer: LineObserver | None) -> None:
        """Hand every line written from now on to ``observer`` too (SPEC 9)."""
        self.line_observer = observer
        if self.sink is not None:
            self.sink.observer = observer

    # ------------------------------------------------------------------ the audit

    def audit(
        self,
        view: ExchangeView,
        facts: RequestFacts,
        body_bytes: int,
        body_sha256: str,
    ) -> AuditRecord:
        """The last gate before forwarding: session policy, then the audit line.

        Args:
            view: the exchange (its ids, route, API and transport).
            facts: the request's audit facts.
            body_bytes: the size of the body as forwarded.
            body_sha256: its SHA-256.

        Returns:
            The record written; the request may now be forwarded.

        Raises:
            Rejected: ``proxy_stopped``, ``session_ended``, ``fail_closed``,
                ``tool_budget_exceeded``, or ``audit_write_failed`` (then the
                request must not be forwarded).
        """
        assert self.sink is not None and view.api is not None
        session = self.admit(view)
        session.admit(facts.tool_results)
        endpoint = view.endpoint  # matched once, by the gate
        record = AuditRecord.build(
            facts,
            request_id=view.request_id,
            seq=next(self._seq),
            run_id=self.run_id,
            session_id=view.session_id,
            transport=view.transport,
            api=view.api,
            provider=apis.provider_for(view.route, view.api, endpoint=endpoint),
            route=view.route.name if view.route else None,
            upstream=view.upstream,
            path=view.path,
            model_from_path=None if endpoint is None else endpoint.model_from_path,
            operation=OPERATION_CREATE if endpoint is None else endpoint.operation,
            body_bytes=body_bytes,
            body_sha256=body_sha256,
        )
        try:
            self.sink.write_audit(record)
        except SinkError:
            # If we cannot write the audit line we must not let the request through
            # unrecorded: refuse it, visibly.
            raise Rejected(Rule.AUDIT_WRITE_FAILED) from None
        session.audited(record)
        self.counts["audited"] += 1
        return record

    def audit_mcp(
        self,
        view: ExchangeView,
        drafts: list[McpAuditRecord],
        executions: list[Execution],
    ) -> tuple[McpAuditRecord, ...]:
        """The last gate before an MCP POST is forwarded: session policy, the
        tool-call budget, then one audit line per message.

        Args:
            view: the exchange.
            drafts: its lines, one per JSON-RPC message in order, but for
                ``seq`` and ``ts`` (given here, as each is written).
            executions: its ``tools/call`` messages that begin an execution
                (the budget counts them).

        Returns:
            The lines written; the body may now be forwarded.

        Raises:
            Rejected: ``proxy_stopped``, ``session_ended``, ``fail_closed``,
                ``tool_budget_exceeded``, or ``audit_write_failed`` (then the
                body must not be forwarded; lines of a batch's earlier
                members may be on disk already, and the refusal says why).
        """
        assert self.sink is not None
        session = self.admit(view)
        session.admit_executions(executions)
        written: list[McpAuditRecord] = []
        try:
            for draft in drafts:
                record = replace(draft, seq=next(self._seq), ts=utc_now())
                self.sink.write_audit(record)
                written.append(record)
        except SinkError:
            # As for a model request: never forward what could not be recorded.
            # A batch's earlier lines are on disk all the same: the session counts them.
            session.mcp_audited(written, ())
            raise Rejected(Rule.AUDIT_WRITE_FAILED) from None
        finally:
            self.counts["mcp"] += len(written)
        session.mcp_audited(written, executions)
        return tuple(written)

    def admit(self, view: ExchangeView) -> SessionTracker:
        """The session policy: whether an exchange may go on in its session (a
        model request, an MCP POST's messages, an MCP GET stream or DELETE): not
        after stop, not in an ended session, not after a refusal under
        ``--fail-closed``.

        Returns:
            Its session's tracker.

        Raises:
            Rejected: ``proxy_stopped``, ``session_ended`` or ``fail_closed``.
        """
        if self.stopped:
            raise Rejected(Rule.PROXY_STOPPED)
        session = self.session(view.session_id)
        if session is None:
            raise Rejected(Rule.SESSION_ENDED)
        if self.settings.fail_closed and session.refusals:
            raise Rejected(Rule.FAIL_CLOSED)
        return session

    # ------------------------------------------------------------------ sessions

    def session(self, session_id: str) -> SessionTracker | None:
        """The session's tracker (opened if new); ``None`` once the harness ended it."""
        return self.sessions.get(session_id)

    def _write_end(self, session_id: str) -> SessionStatus:
        """Write an open session's ``sessions.jsonl`` line; it is open no more."""
        status = replace(
            self.sessions.close(session_id),
            otlp_logs_dropped=self.logs_dropped(),
            upstream_insecure=self.settings.upstream_insecure,
        )
        if self.sink is not None and not self.sink.write_session(status):
            logger.warning("modeltap: a sessions.jsonl line could not be written")
        self.listeners.session_ended(session_id)
        return status

    def file_reopened(self, file: str) -> list[str]:
        """An out file was moved or deleted under the proxy: the sessions that had
        lines before (open, or a WebSocket conversation that may resume) lose
        evidence (the sink's ``sessions_with_lines``).

        Returns:
            Their ids: each gets a ``file_reopened`` event.
        """
        lost = [session for session in self.sessions.holding_lines() if not session.untouched]
        for session in lost:
            session.file_reopened(file)
        return [session.session_id for session in lost]

    def end_session(self, session_id: str, *, unseen: bool = False) -> Ended | None:
        """End a session for good (the control API: the harness asked).

        Idempotent: a session that already has its line (ended before, or a
        WebSocket conversation whose socket closed) answers that line's status
        and nothing is written. Requests that arrive in it later are refused
        (``session_ended``).

        A session no traffic carried is the harness's word that the agent ran
        and none of its requests came here (it bypassed the proxy): with
        ``unseen`` it is ended all the same, and its line says "No outbound
        model requests captured; audit unsupported", so ``modeltap check``
        fails it by name. Without, it is left alone (another proxy writing to
        the same out dir may have seen it: the harness's client asks them
        all first).

        Args:
            session_id: the session.
            unseen: end it even if this proxy never saw it.

        Returns:
            Its status and whether this call wrote it; ``None`` for a session
            this proxy has not seen, unless ``unseen`` (nothing is written).
        """
        status = self.sessions.ended(session_id)
        if status is not None:
            return Ended(status, now=False)
        status = self.sessions.unpark(session_id)
        if status is not None:
            ended = Ended(status, now=False)
        elif session_id in self.sessions.open or (unseen and not self.stopped):
            self.sessions.get(session_id)  # opened, if no traffic ever did
            ended = Ended(self._write_end(session_id), now=True)
        else:
            return None
        self.sessions.end(session_id, ended.status)
        return ended

    def stop(self, now: int) -> None:
        """Stop: in-flight exchanges end (``proxy_stopped``), then sessions; then nothing.

        Everything written after this would contradict the session lines, so
        every later call is ignored and a request that still arrives is
        refused, never forwarded.
        """
        if self.stopped:
            return
        for exchange in list(self.in_flight.values()):
            exchange.stop(now)
        for session_id, session in list(self.sessions.open.items()):
            if session_id == self.run_id and session.untouched:
                # The run's implicit session only saw pass-through traffic (an SDK's
                # GET /models beside a WebSocket agent, say): it is not a session the
                # user asked about, and "audit unsupported" for it would be noise.
                del self.sessions.open[session_id]
                continue
            self._write_end(session_id)
        self.stopped = True
        self.listeners.stopped()
        if self.sink is not None:
            self.sink.close()

    # ------------------------------------------------------------------ lines

    def envelope(self, view: ExchangeView, seq: int | None = None) -> dict[str, Any]:
        """The fields every ``events.jsonl`` line carries, for an exchange."""
        return {
            "ts": utc_now(),
            "run_id": self.run_id,
            "session_id": view.session_id,
            "seq": seq,
            "request_id": view.request_id,
        }

    def write_event(self, event: Event) -> None:
        """Write one ``events.jsonl`` line; a lost one lowers its session's evidence."""
        if self.sink is None:
            return
        session = self.sessions.open.get(event.session_id)
        if not self.sink.write_event(event):
            logger.warning("modeltap: an events.jsonl line could not be written")
            if session is not None:
                session.line_lost("events.jsonl")
        elif session is not None and isinstance(event, McpResultEvent):
            # As the readers will: the answer completes its call's tool side.
            session.mcp_answered(event)

    def refused(
        self,
        view: ExchangeView,
        rejected: Rejected,
        status: int | None,
        now: int,
        mcp: McpRefused | None = None,
    ) -> None:
        """Record a refusal: its event (not after stop), the session's count, the notice.

        ``mcp`` names what an MCP refusal refused (its server, session and messages).
        """
        self.counts["refused"] += 1
        if not self.stopped:  # after stop the files are final
            event = RejectedEvent(
                **self.envelope(view),
                rule=rejected.rule,
                message=rejected.message,
                status=status,
                transport=view.transport,
                method=view.method,
                path=redact_path(view.path),
                api=view.api,
                mcp=mcp,
            )
            self.write_event(event)
            session = self.session(view.session_id)
            if session is not None:  # None: the harness ended it (rule session_ended)
                session.refused(event)
        if self.listeners.hear.finished:
            told = McpOutcome(mcp.mcp_server, refused=mcp) if mcp is not None else None
            self.listeners.finished(Outcome(view, now, status=status, rejected=rejected, mcp=told))

    def unaudited(self, view: ExchangeView, host: str, status: int | None) -> UnauditedEvent:
        """Write the ``unaudited`` event of a request passed through (or unrouted)."""
        self.counts["unaudited"] += 1
        event = UnauditedEvent(
            **self.envelope(view),
            method=view.method or "",
            host=host or None,
            path=redact_path(view.path),
            status=status,
        )
        self.write_event(event)
        return event

    def failure(self, view: ExchangeView, seq: int | None, kind: str, text: str) -> ErrorEvent:
        """Write an exchange's ``error`` event and count it in its session."""
        self.counts["errors"] += 1
        error = ErrorEvent(
            **self.envelope(view, seq),
            error=kind,
            message=text,
            transport=view.transport,
            method=view.method,
            path=redact_path(view.path),
        )
        self.write_event(error)
        session = self.session(view.session_id)
        if session is not None:
            session.errored(error)
        return error

    def respond(
        self,
        view: ExchangeView,
        facts: ResponseFacts,
        *,
        status: int | None,
        stream: bool,
        start_ns: int,
        first_byte_ns: int | None,
        first_chunk_ns: int | None,
        end_ns: int,
    ) -> ResponseEvent:
        """Write the response event of an audited exchange (or turn) and count it."""
        assert view.api is not None and view.record is not None
        event = ResponseEvent(
            **self.envelope(view, view.record.seq),
            api=view.api,
            transport=view.transport,
            status=status,
            stream=stream,
            response_id=facts.response_id,
            model=facts.model,
            usage=facts.usage,
            finish_reasons=facts.finish_reasons,
            tool_calls=facts.tool_calls,
            response_status=facts.status,
            ttfb_ms=_ms(start_ns, first_byte_ns),
            ttft_ms=_ms(start_ns, first_chunk_ns),
            duration_ms=_ms(start_ns, end_ns),
            evidence_complete=facts.evidence_complete,
            capture_errors=facts.capture_errors,
            invocation_metrics=facts.invocation_metrics,
            cost=response_cost(
                api=view.api,
                upstream=view.upstream,
                request_model=view.record.model,
                facts=facts,
                provider=view.record.provider,  # as the audit found it
            ),
        )
        self.write_event(event)
        session = self.session(view.session_id)
        if session is not None:
            session.responded(event)
        return event
