"""The life of one WebSocket connection and its turns, as data.

The WebSocket addon hands every message here, to the WebSocket mode of the
handshake's wire (:class:`~modeltap.apis.websocket_mode.WebSocketMode`: the
Responses API's). A client's ``response.create`` is audited like an HTTP
request (one audit line, a *turn*), a control message is logged, anything
else is refused (the connection stays usable); the server's events are
routed to the turns they answer (the mode's
:class:`~modeltap.apis.websocket_mode.ServerEvents`), and each turn ends with
its response event. Nothing here imports mitmproxy or OpenTelemetry.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import orjson

from modeltap import apis
from modeltap.apis.contract import WireApi
from modeltap.apis.websocket_mode import Control, WebSocketMode
from modeltap.core.body_audit import sha256_hex
from modeltap.core.gate import fail_closed
from modeltap.core.notices import ExchangeView, Outcome
from modeltap.core.run import Run
from modeltap.evidence.records import (
    ErrorEvent,
    ResponseFacts,
    WsCloseEvent,
    WsControlEvent,
    WsOpenEvent,
)
from modeltap.evidence.redaction import redact_path
from modeltap.rules.errors import Rejected, Rule, error_message
from modeltap.rules.failures import PHASE_TEXT, Phase


@dataclass(frozen=True, slots=True)
class MessageVerdict:
    """What becomes of a client's WebSocket message."""

    #: What to forward (the message as sent, or rewritten by ``--image-detail``).
    content: bytes
    #: Drop the message and send the client this error event instead.
    refusal: bytes | None = None


@dataclass(slots=True)
class _Turn:
    """One forwarded ``response.create`` waiting for its response."""

    view: ExchangeView
    started_ns: int
    first_byte_ns: int | None = None
    first_chunk_ns: int | None = None


class Connection:
    """One WebSocket connection: its turns in flight (the WebSocket addon's own)."""

    @classmethod
    def open(cls, run: Run, view: ExchangeView, now: int) -> Connection | None:
        """The connection a WebSocket handshake opened (None after stop).

        Args:
            run: the run it belongs to.
            view: the handshake's view.
            now: when it opened.
        """
        if run.stopped or not view.websocket:
            return None
        # The gate let the handshake through only to an endpoint whose wire has
        # a WebSocket mode (the Responses API's), and kept its match on the view.
        wire = apis.find(view.endpoint.api if view.endpoint is not None else None)
        if wire is None or wire.WEBSOCKET is None:
            return None
        conn = cls(run, view, wire, wire.WEBSOCKET, now)
        run.in_flight[conn.view.id] = conn
        return conn

    def __init__(
        self, run: Run, view: ExchangeView, wire: WireApi, mode: WebSocketMode, now: int
    ) -> None:
        self.run = run
        self.wire = wire
        self.mode = mode
        self.view = replace(view, transport="websocket", api=wire.NAME, method=None)
        self.observer = mode.ServerEventObserver(capture_content=run.settings.capture_content)
        #: Turns in flight, by the seq of their response.create.
        self.pending: dict[int, _Turn] = {}
        self.from_client = 0
        self.from_server = 0
        #: The deadline phase the glue watches while turns are in flight (None: none are).
        self.watching: Literal["waiting", "response"] | None = None
        if view.session_id == view.request_id:
            # The connection is the session: it ends when its last socket closes.
            session = run.session(view.session_id)
            if session is not None:
                session.connections += 1
        if run.listeners.hear.opened:
            run.listeners.opened(self.view, now)
        run.write_event(
            WsOpenEvent(
                **run.envelope(self.view),
                path=redact_path(view.path),
                route=view.route.name if view.route else None,
                upstream=view.upstream,
            )
        )

    def client_message(self, content: bytes, is_text: bool, now: int) -> MessageVerdict:
        """Judge a client message: a control message, a ``response.create`` to
        audit, or a refusal (the connection stays usable)."""
        run, policy = self.run, self.run.settings.ws_policy
        self.from_client += 1
        try:
            session = run.session(self.view.session_id)
            if session is None:
                raise Rejected(Rule.SESSION_ENDED)
            # Fail-closed refuses every later message of the session, control ones too.
            if run.settings.fail_closed and session.refusals:
                raise Rejected(Rule.FAIL_CLOSED)
            seen = fail_closed(self.mode.classify_client_message, content, is_text, policy)
            if isinstance(seen, Control):
                run.write_event(WsControlEvent(**run.envelope(self.view), type=seen.type))
                self._relayed(content, is_text, True, now)
                return MessageVerdict(content)
            detail = run.settings.image_detail
            if detail is not None and self.wire.set_image_detail(seen.body, detail):
                content = orjson.dumps(seen.body)
                seen = self.mode.classify_client_message(content, True, policy)
                assert not isinstance(seen, Control)
            record = run.audit(self.view, seen.facts, len(content), sha256_hex(content))
        except Rejected as rejected:
            run.refused(self.view, rejected, None, now)
            return MessageVerdict(content, refusal=self.mode.rejection_event(rejected))
        view = replace(
            self.view,
            id=f"{self.view.id}/{record.seq}",
            parent=self.view.id,
            record=record,
            turn=session.requests_audited,
            body=seen.body,
        )
        self.observer.expect(record.seq, seen.facts)
        self.pending[record.seq] = _Turn(view, now)
        if run.listeners.hear.started:
            run.listeners.started(view, now)
        if run.listeners.hear.audited:
            run.listeners.audited(view, seen.facts, content, now)
        if run.listeners.hear.forwarding:
            run.listeners.forwarding(view, content, {})
        return MessageVerdict(content)

    def server_message(self, content: bytes, is_text: bool, now: int) -> None:
        """Observe a server message; the turn it ends gets its response event."""
        self.from_server += 1
        seen = self.observer.feed(content)
        self._relayed(content, is_text, False, now)
        seq = seen.seq
        turn = self.pending.get(seq) if seq is not None else None
        if seq is None or turn is None:
            return
        if turn.first_byte_ns is None:
            turn.first_byte_ns = now
            if self.run.listeners.hear.first_byte:
                self.run.listeners.first_byte(turn.view, None, {}, now)
        if seen.first_output and turn.first_chunk_ns is None:
            turn.first_chunk_ns = now
            if self.run.listeners.hear.first_chunk:
                self.run.listeners.first_chunk(turn.view, now)
        if seen.finished is not None:
            self._respond(seq, seen.finished, now)

    def watch(self) -> Literal["waiting", "response"] | None:
        """The deadline phase to watch: while turns are in flight, the upstream has
        ``--upstream-timeout``'s first-byte limit to start one and its idle limit
        between messages."""
        if not self.pending:
            return None
        started = any(t.first_byte_ns is not None for t in self.pending.values())
        return "response" if started else "waiting"

    def close(
        self,
        code: int | None,
        reason: str | None,
        closed_by: str | None,
        *,
        too_big_from_client: bool,
        expired: Phase | None,
        now: int,
    ) -> None:
        """The connection closed: its turns in flight end, then it.

        Args:
            code: the close code, if one was sent.
            reason: the close reason, if one was sent.
            closed_by: ``client``, ``server``, or None when unknown.
            too_big_from_client: a client message passed ``--max-body`` (close 1009).
            expired: the phase whose limit modeltap enforced, if one did.
            now: when.
        """
        run = self.run
        if run.stopped:
            return
        run.in_flight.pop(self.view.id, None)
        if expired is not None:
            # modeltap closed the upstream: the responses in flight timed out.
            self._fail_pending("upstream_timeout", PHASE_TEXT[expired], now, expired=expired)
        if too_big_from_client:
            # The message was stopped part-way (close 1009), never forwarded.
            run.refused(self.view, Rejected(Rule.BODY_TOO_LARGE), None, now)
        # A turn still in flight was cut by whoever closed: the client left, or
        # the upstream closed (or dropped) the connection mid-response.
        kind = "client_gone" if closed_by == "client" else "upstream_reset"
        text = f"the WebSocket closed (code {code}) before the response ended"
        for done in self.observer.close(text):
            if done.seq in self.pending:
                error = run.failure(self.view, done.seq, kind, error_message(kind))
                self._respond(done.seq, done.facts, now, error=error)
        self._closed(code, reason, closed_by, now)
        session = run.sessions.open.get(self.view.session_id)
        if self.view.session_id == self.view.request_id and session is not None:
            session.connections -= 1
            if session.connections <= 0:
                # The connection was the session (no x-modeltap-session header): its line
                # is written now. A reconnect with the same x-client-request-id (Codex
                # sends its thread id) continues it, and the next line counts it all.
                status = run._write_end(self.view.session_id)
                run.sessions.park(self.view.session_id, session, status)

    def stop(self, now: int) -> None:
        """Shutdown: its turns in flight end (``proxy_stopped``), then it."""
        self._fail_pending("proxy_stopped", error_message("proxy_stopped"), now)
        self._closed(None, None, "proxy", now)

    def _relayed(self, content: bytes, is_text: bool, from_client: bool, now: int) -> None:
        if self.run.listeners.hear.message:
            self.run.listeners.message(self.view, content, is_text, from_client, now)

    def _fail_pending(self, kind: str, text: str, now: int, expired: Phase | None = None) -> None:
        """Each turn in flight ends with an ``error`` event of ``kind``, then its
        (incomplete) response event."""
        for done in self.observer.close(f"{kind}: {text}"):
            if done.seq in self.pending:
                error = self.run.failure(self.view, done.seq, kind, text)
                self._respond(done.seq, done.facts, now, error=error, expired=expired)

    def _respond(
        self,
        seq: int,
        facts: ResponseFacts,
        now: int,
        *,
        error: ErrorEvent | None = None,
        expired: Phase | None = None,
    ) -> None:
        """The turn's response event; an ``error`` (already written) goes with
        its notice, so the console and its span say what broke."""
        turn = self.pending.pop(seq, None)
        if turn is None:
            return
        event = self.run.respond(
            turn.view,
            facts,
            status=None,
            stream=True,
            start_ns=turn.started_ns,
            first_byte_ns=turn.first_byte_ns,
            first_chunk_ns=turn.first_chunk_ns,
            end_ns=now,
        )
        if self.run.listeners.hear.finished:
            outcome = Outcome(
                turn.view,
                now,
                response=event,
                error=error,
                failure=error.error if error is not None else None,
                expired=expired,
                observed=facts,
            )
            self.run.listeners.finished(outcome)

    def _closed(
        self, code: int | None, reason: str | None, closed_by: str | None, now: int
    ) -> None:
        event = WsCloseEvent(
            **self.run.envelope(self.view),
            code=code,
            reason=reason,
            closed_by=closed_by,
            messages_from_client=self.from_client,
            messages_from_server=self.from_server,
        )
        self.run.write_event(event)
        if self.run.listeners.hear.closed:
            self.run.listeners.closed(self.view, event, now)
