"""What the core publishes, and the answers it gives instead of forwarding.

The glue (:mod:`modeltap.addons`) hands facts to the core (:mod:`modeltap.core.run`,
:mod:`modeltap.core.exchange`, :mod:`modeltap.core.ws_connection`); the core writes the
lines and publishes what happened to :class:`Listener` subscribers (through
:class:`~modeltap.core.listeners.Listeners`, one typed method per notice), each
notice with a frozen :class:`ExchangeView`. The console, spans, recorder and
replayer addons are listeners: they never read another addon's state, and no
addon depends on the order mitmproxy calls them in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import orjson

from modeltap.apis.contract import EndpointMatch
from modeltap.evidence.records import (
    AuditRecord,
    ErrorEvent,
    Json,
    McpAuditRecord,
    McpExchangeEvent,
    McpNotificationEvent,
    McpRefused,
    McpRequestEvent,
    McpResultEvent,
    RequestFacts,
    ResponseEvent,
    ResponseFacts,
    UnauditedEvent,
    WsCloseEvent,
)
from modeltap.rules.errors import Rejected
from modeltap.rules.failures import Phase
from modeltap.rules.routing import Route


@dataclass(frozen=True, slots=True)
class ExchangeView:
    """An exchange as the other addons see it: small, frozen, public.

    Published with every :class:`Listener` notice; the WebSocket addon reads
    a handshake's from ``flow.metadata[VIEW_KEY]``.
    """

    #: Unique per exchange: mitmproxy's flow id; ``{flow id}/{seq}`` for a WebSocket turn.
    id: str
    session_id: str
    request_id: str
    #: ``http``, or ``websocket`` for a connection and its turns.
    transport: str
    method: str | None
    #: As it goes upstream, unredacted: pass it through ``redact_path`` before writing it.
    path: str
    route: Route | None
    upstream: str
    api: str | None
    traceparent: str | None = None
    #: The session when the user named it (header, or --session over HTTP),
    #: for ``gen_ai.conversation.id``; None for the run's or a connection's own.
    conversation_id: str | None = None
    #: A WebSocket handshake, or the connection it opened.
    websocket: bool = False
    #: A WebSocket turn: the id of its connection.
    parent: str | None = None
    #: The audit line written for it (None: not audited).
    record: AuditRecord | None = None
    #: Its 1-based place among its session's audited requests.
    turn: int | None = None
    #: The model endpoint its path names, matched once by the gate: read it
    #: rather than matching ``path`` again.
    endpoint: EndpointMatch | None = None
    #: The audited request body as it went upstream, parsed once by the audit
    #: (None before the audit, or when the audit elided large payloads):
    #: read it, never change it; :meth:`parsed_body` falls back to a parse.
    body: Json | None = None
    #: An exchange on an MCP route (``api`` is ``mcp``): the server's name
    #: (``--mcp NAME``, or the ``--mcp-host``) and its MCP session as the files
    #: name it (the hash, never the ``Mcp-Session-Id``; ``None`` without one).
    mcp_server: str | None = None
    mcp_session: str | None = None

    def parsed_body(self, sent: bytes) -> Json:
        """The audited request body as it went upstream, parsed.

        Args:
            sent: that body (a ``forwarding`` or ``audited`` notice's), parsed
                only when the audit did not keep its own parse (:attr:`body`).
        """
        if self.body is not None:
            return self.body
        parsed: Json = orjson.loads(sent)
        return parsed


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer modeltap gives itself instead of forwarding."""

    status: int
    body: bytes
    #: Close the client's connection after it.
    close: bool = False
    #: Headers beside ``Content-Type: application/json`` (an AWS error's
    #: ``x-amzn-ErrorType``, :meth:`~modeltap.apis.contract.ErrorShape.headers`).
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Forward:
    """Forward the request, with these headers set on it."""

    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class McpCall:
    """The client request an ``mcp_result`` answers, as its exchange sent it."""

    #: Its audit line.
    record: McpAuditRecord
    #: The exchange that carried it (not necessarily the one the answer came on).
    view: ExchangeView
    #: When it was forwarded (``time.perf_counter_ns()``).
    forwarded_ns: int


#: The events an MCP stream or body gives, one per server-to-client message.
McpEvent = McpResultEvent | McpRequestEvent | McpNotificationEvent


@dataclass(frozen=True, slots=True)
class McpOutcome:
    """What an exchange on an MCP route was, when it ended (:attr:`Outcome.mcp`)."""

    server: str
    #: Its audit lines, one per message of its POST body (none for a GET, a
    #: DELETE, or a refused body).
    records: tuple[McpAuditRecord, ...] = ()
    #: The JSON-RPC messages the server sent on it.
    messages_from_server: int = 0
    #: From forwarding to its end; ``None`` when it was not forwarded.
    duration_ms: float | None = None
    #: Its ``mcp_exchange`` line, when it has one (a GET stream, a DELETE).
    event: McpExchangeEvent | None = None
    #: A refused POST: what its ``rejected`` line says it held.
    refused: McpRefused | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an exchange (or a WebSocket turn) ended, and the lines written for it.

    One of: ``rejected`` (refused; its event is not written once the proxy
    stopped), ``response`` (audited, with ``error`` if it broke),
    ``unaudited`` (passed through; with ``error`` if it then broke), or only
    ``error`` (broke before it was audited).
    """

    view: ExchangeView
    end_ns: int
    #: The HTTP status the client got, if any.
    status: int | None = None
    rejected: Rejected | None = None
    response: ResponseEvent | None = None
    unaudited: UnauditedEvent | None = None
    error: ErrorEvent | None = None
    #: The failure kind when mitmproxy reported the exchange broken, even if
    #: the whole answer had been seen (a client that left after the last event).
    failure: str | None = None
    #: The phase whose limit modeltap enforced, when a timeout ended it.
    expired: Phase | None = None
    #: The response was streamed (its body went by in ``chunk`` notices).
    streamed: bool = False
    #: The response body as the upstream sent it (not for streamed responses).
    body: bytes | None = None
    #: The decoded response body, when it was read to observe it.
    content: bytes | None = None
    #: What was observed of the response (the facts its event was written from).
    observed: ResponseFacts | None = None
    #: An exchange on an MCP route: its lines and what it carried.
    mcp: McpOutcome | None = None


class Listener:
    """What a :class:`Run` publishes. Subclass and override the notices you need;
    once subscribed (:meth:`Listeners.subscribe <modeltap.core.listeners.Listeners.subscribe>`)
    only those are called, synchronously, in the order things happen. A listener
    that raises is logged and skipped, never the exchange."""

    def started(self, view: ExchangeView, t_ns: int) -> None:
        """A model exchange began: an HTTP model request's head, or a WebSocket turn."""

    def audited(self, view: ExchangeView, facts: RequestFacts, body: bytes, t_ns: int) -> None:
        """Its audit line was written (``view.record``, from ``facts``); ``body`` is
        what goes upstream."""

    def forwarding(
        self, view: ExchangeView, body: bytes, headers: Mapping[str, str]
    ) -> Forward | Reply | None:
        """A request is about to go upstream: audited, passed through, a WebSocket
        handshake or turn. Return a :class:`Forward` to tag it, a :class:`Reply`
        to answer it instead (HTTP only; the first reply wins), or None."""
        return None

    def first_byte(
        self, view: ExchangeView, status: int | None, headers: Mapping[str, str], t_ns: int
    ) -> None:
        """The response's head (HTTP) or first message (WebSocket turn) arrived."""

    def first_chunk(self, view: ExchangeView, t_ns: int) -> None:
        """The first model output arrived."""

    def chunk(self, view: ExchangeView, data: bytes, t_ns: int) -> None:
        """A piece of a streamed response passed through (unchanged)."""

    def message(
        self, view: ExchangeView, content: bytes, is_text: bool, from_client: bool, t_ns: int
    ) -> None:
        """A WebSocket message other than a ``response.create`` was relayed."""

    def finished(self, outcome: Outcome) -> None:
        """An exchange or turn ended."""

    def opened(self, view: ExchangeView, t_ns: int) -> None:
        """A WebSocket connection opened."""

    def closed(self, view: ExchangeView, event: WsCloseEvent, t_ns: int) -> None:
        """A WebSocket connection closed (``event`` is its ``ws_close`` line)."""

    def mcp_audited(
        self, view: ExchangeView, records: tuple[McpAuditRecord, ...], t_ns: int
    ) -> None:
        """An MCP POST's audit lines were written, one per JSON-RPC message; it is
        forwarded next (a ``forwarding`` notice follows, as for any request)."""

    def mcp_observed(
        self, view: ExchangeView, event: McpEvent, call: McpCall | None, t_ns: int
    ) -> None:
        """A server-to-client MCP message arrived on ``view``'s exchange and its
        line was written: an ``mcp_result`` (``call``: the request it answers,
        when seen), an ``mcp_request`` or an ``mcp_notification``."""

    def session_ended(self, session_id: str) -> None:
        """A session's ``sessions.jsonl`` line was written."""

    def stopped(self) -> None:
        """The run stopped: every exchange and session has ended; nothing follows."""


#: The notices' names, in the order :class:`Listener` declares them.
NOTICES: Final = tuple(
    name for name, value in vars(Listener).items() if callable(value) and not name.startswith("_")
)
