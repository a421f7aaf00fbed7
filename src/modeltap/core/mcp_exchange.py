"""The MCP side of one HTTP exchange on an MCP route (SPEC 3b), as data.

:class:`~modeltap.core.exchange.Exchange` runs every exchange's life; on an
MCP route (``--mcp NAME=URL``, ``--mcp-host``) it hands each step's MCP part
to an :class:`McpExchange`::

    request head   ──▶ judge_request_line()        the path and the method (no model
                                                   endpoint is matched on an MCP route)
    POST body      ──▶ read_body()                 JSON-RPC, through the body audit (codings,
                                                   --max-body, duplicate keys)
                       McpExchange.audit()         headers against the body, then one audit
                                                   line per message (Run.audit_mcp), then upstream
    GET, DELETE    ──▶ McpExchange.forwarding()    passed after the session policy, observed
    response head  ──▶ McpExchange.response()      an SSE answer: a tap observing each
                                                   event as it passes (HTTP+SSE's endpoint
                                                   put on the mount)
    response end   ──▶ McpExchange.ended()         a JSON answer's messages, http_error results,
                                                   the mcp_exchange line

Each server-to-client message gets its line when it arrives (an
``mcp_result``, ``mcp_request`` or ``mcp_notification``), and answers are
matched to their requests by (MCP session, direction, id) across the
session's exchanges (:mod:`modeltap.core.mcp_sessions`). Nothing is held
back: a stream's chunks go on as they come (only HTTP+SSE's first event, the
endpoint, is held until it is whole, to be put on the mount). Nothing here
imports mitmproxy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from functools import partial
from typing import Final, Protocol

import orjson

from modeltap.apis.mcp.errors import refusal_body
from modeltap.apis.mcp.headers import VERSION_HEADER, check_headers
from modeltap.apis.mcp.messages import ERROR, RESULT, McpBody, parse_body
from modeltap.apis.mcp.observe import (
    REQUEST,
    AnswerFacts,
    Endpoint,
    ServerMessage,
    Unreadable,
    answer_facts,
    read_messages,
    read_sse_event,
)
from modeltap.apis.mcp.transport import (
    ELSEWHERE,
    KEPT,
    LAST_EVENT_HEADER,
    REWRITTEN,
    SESSION_HEADER,
    EndpointRewriter,
    endpoint_on_mount,
    query_session_id,
    session_key,
)
from modeltap.core.body_audit import Read
from modeltap.core.gate import utf8_content_type
from modeltap.core.mcp_sessions import McpState, Pending
from modeltap.core.notices import ExchangeView, Forward, McpCall, McpOutcome, Reply
from modeltap.core.run import Run
from modeltap.evidence.mcp_pairing import Execution
from modeltap.evidence.records import (
    MAX_ID_CHARS,
    McpAuditRecord,
    McpExchangeEvent,
    McpMessageRef,
    McpNotificationEvent,
    McpRefused,
    McpRequestEvent,
    McpResultEvent,
)
from modeltap.evidence.redaction import redact_path
from modeltap.rules.errors import Rejected, Rule, UpstreamProtocolError
from modeltap.rules.routing import (
    Route,
    check_path,
    overrides_method,
    overrides_path,
)
from modeltap.wire.decoding import StreamDecompressor, decode_body
from modeltap.wire.sse import SSEDecoder, SSEEvent

logger = logging.getLogger("modeltap")

POST: Final = "POST"
#: Media types an MCP answer comes in.
_SSE_MEDIA: Final = "text/event-stream"
_JSON_MEDIA: Final = "application/json"


def mcp_session_id(server: str, key: str) -> str:
    """The modeltap session of an MCP session's traffic when none is named (no
    ``x-modeltap-session``, no ``--session``): one per ``Mcp-Session-Id``."""
    return f"mcp-{server}-{key}"


def request_session_key(headers: Mapping[str, str], target: str) -> str | None:
    """The MCP session a request names, as the files name it: its
    ``Mcp-Session-Id``, else HTTP+SSE's ``session_id`` query value, hashed."""
    value = headers.get(SESSION_HEADER) or query_session_id(target)
    return session_key(value) if value else None


def judge_request_line(
    method: str, target: str, header_names: Iterable[str], content_type: str | None
) -> None:
    """Judge the line of a request on an MCP route before anything is forwarded.

    The path checks of every route hold here too (SPEC 2); no model endpoint
    is matched (an HTTP+SSE server's ``/messages/`` is no Anthropic endpoint).

    Raises:
        Rejected: ``noncanonical_path`` (also for a path override header),
            ``method_override`` (a method override, or ``POST`` spelt
            otherwise: some servers fold a method's case), or
            ``unsupported_charset`` (a POST whose JSON is declared other than UTF-8).
    """
    check_path(target)
    names = list(header_names)
    if overrides_path(names):
        raise Rejected(Rule.NONCANONICAL_PATH, "path override header")
    if overrides_method(names, target) or (method != POST and method.upper() == POST):
        raise Rejected(Rule.METHOD_OVERRIDE)
    if method == POST and not utf8_content_type(content_type):
        raise Rejected(Rule.UNSUPPORTED_CHARSET)


def read_body(decoded: bytes) -> Read[McpBody]:
    """The body audit's reading of an MCP POST (:class:`~modeltap.core.body_audit.BodyAudit`).

    Raises:
        Rejected: as :func:`~modeltap.apis.mcp.messages.parse_body`.
    """
    return Read(parse_body(decoded))


def _ms(start_ns: int | None, end_ns: int) -> float | None:
    return None if start_ns is None else round((end_ns - start_ns) / 1e6, 3)


class Carrier(Protocol):
    """The exchange an :class:`McpExchange` is the MCP side of."""

    @property
    def view(self) -> ExchangeView:
        """Its view as it is now."""
        ...

    def rebind(self, session_id: str | None) -> None:
        """It turned out to belong to an MCP session (HTTP+SSE's endpoint named
        it): its view is made anew, in ``session_id`` when that is given."""
        ...


class McpExchange:
    """The MCP side of one exchange on an MCP route.

    Args:
        run: the run.
        carrier: the exchange (its view, read as it changes).
        route: the MCP route.
        key: the MCP session its request names, hashed
            (:func:`request_session_key`), or ``None``.
        method: the request method as sent.
        headers: the request's headers.
        named_session: the modeltap session was named (``x-modeltap-session``
            or ``--session``): an MCP session does not choose it.
    """

    def __init__(
        self,
        run: Run,
        carrier: Carrier,
        route: Route,
        key: str | None,
        method: str,
        headers: Mapping[str, str],
        *,
        named_session: bool,
    ) -> None:
        self.run = run
        self.carrier = carrier
        self.route = route
        self.server = route.name
        self.key = key
        self.method = method
        self.resumed = LAST_EVENT_HEADER in headers
        self.named_session = named_session
        self.regular = run.settings.mode == "regular"
        #: The POST body, once read as JSON-RPC; its audit lines once written.
        self.body: McpBody | None = None
        self.records: tuple[McpAuditRecord, ...] = ()
        #: This exchange's requests awaiting their answers, by id.
        self.own: dict[bytes, Pending] = {}
        self.forwarded_ns: int | None = None
        self.status: int | None = None
        #: The session the answer's ``Mcp-Session-Id`` names (initialize's).
        self.response_key: str | None = None
        self.framing: str | None = None
        self.tap: McpStreamTap | None = None
        self.messages = 0
        self.endpoint: str | None = None
        self.errors: list[str] = []

    @property
    def state(self) -> McpState:
        """The MCP session (or the server's sessionless traffic) it belongs to."""
        return self.run.mcp.state((self.server, self.key))

    @property
    def related_seq(self) -> int | None:
        """The seq of its POST's first request: what a message on its stream relates to."""
        return next((r.seq for r in self.records if r.message_type == REQUEST), None)

    # ------------------------------------------------------------------ the request

    def audit(
        self,
        body: McpBody,
        headers: Mapping[str, str],
        size: int,
        sha256: str,
        now: int,
    ) -> tuple[McpAuditRecord, ...]:
        """Check a POST's headers against its body, then write its audit lines.

        Args:
            body: the body's messages (:func:`read_body`).
            headers: its headers.
            size: the body's size as it goes upstream.
            sha256: its SHA-256.
            now: when.

        Returns:
            Its lines, one per message; it may now be forwarded.

        Raises:
            Rejected: ``mcp_header_mismatch``, ``value_too_long`` (an
                ``MCP-Protocol-Version`` longer than 256 characters), or any
                refusal of :meth:`~modeltap.core.run.Run.audit_mcp`.
        """
        self.body = body
        view = self.carrier.view
        state = self.state
        version = headers.get(VERSION_HEADER)
        if version is not None and len(version) > MAX_ID_CHARS:
            raise Rejected(Rule.VALUE_TOO_LONG, "MCP-Protocol-Version")
        unchecked = check_headers(body, headers, state.tool_headers)
        drafts: list[McpAuditRecord] = []
        executions: list[Execution] = []
        for index, message in enumerate(body.messages):
            key = message.id_key
            method = message.method
            if message.message_type in (RESULT, ERROR):
                method = state.asked.get(key) if key is not None else None
            state_sha = message.request_state_sha256
            continues = state.open_executions.get(state_sha) if state_sha is not None else None
            drafts.append(
                McpAuditRecord(
                    request_id=view.request_id,
                    seq=0,  # given as it is written
                    run_id=self.run.run_id,
                    session_id=view.session_id,
                    ts="",
                    transport=view.transport,
                    route=view.route.name if view.route else None,
                    upstream=view.upstream,
                    path=redact_path(view.path),
                    mcp_server=self.server,
                    mcp_session=self.key,
                    protocol_version=version or message.protocol_version,
                    message_type=message.message_type,
                    mcp_method=method,
                    jsonrpc_id=message.jsonrpc_id,
                    batch_index=index if body.batch else None,
                    tool_name=message.tool_name,
                    arguments_sha256=message.arguments_sha256,
                    arguments_bytes=message.arguments_bytes,
                    tool_call_id=message.tool_call_id,
                    continues_seq=continues,
                    unchecked_headers=unchecked,
                    body_bytes=size,
                    body_sha256=sha256,
                )
            )
            if message.tool_name is not None and continues is None:
                executions.append(
                    Execution(
                        self.server,
                        message.tool_name,
                        message.arguments_sha256,
                        message.tool_call_id,
                    )
                )
        records = self.run.audit_mcp(view, drafts, executions)
        self.records, self.forwarded_ns = records, now
        for record, message in zip(records, body.messages, strict=True):
            key = message.id_key
            if key is None:
                continue
            if message.expects_answer:
                execution = None
                if record.tool_name is not None:
                    execution = record.continues_seq or record.seq
                pending = Pending(record, view, now, execution)
                self.own[key] = pending
                state.await_answer(key, pending)
            else:
                state.asked.pop(key, None)  # the client answered the server's request
        if self.run.listeners.hear.mcp_audited:
            self.run.listeners.mcp_audited(view, records, now)
        return records

    def forwarding(self, decision: Forward | Reply) -> Forward | Reply:
        """A GET (or another body-less request) goes: in reverse mode, asked for
        uncompressed, so an HTTP+SSE endpoint event can be put on the mount."""
        if isinstance(decision, Forward) and self.method == "GET" and not self.regular:
            return Forward((*decision.headers, ("accept-encoding", "identity")))
        return decision

    def refusal(self, rejected: Rejected) -> Reply:
        """The JSON-RPC error answering a refused request (:mod:`~modeltap.apis.mcp.errors`)."""
        body = self.body
        ids = [m.jsonrpc_id for m in body.messages if m.expects_answer] if body else []
        content = refusal_body(
            rejected,
            (i for i in ids if i is not None),
            batch=body is not None and body.batch,
        )
        return Reply(rejected.status, content)

    def refused(self) -> McpRefused:
        """What a refusal refused, for its ``rejected`` line (never content)."""
        messages: tuple[McpMessageRef, ...] = ()
        if self.body is not None:
            messages = tuple(
                McpMessageRef(m.message_type, m.method, m.jsonrpc_id, m.tool_name)
                for m in self.body.messages
            )
        return McpRefused(self.server, self.key, messages)

    # ------------------------------------------------------------------ the answer

    def response(
        self,
        status: int,
        headers: Mapping[str, str],
        on_chunk: Callable[[bytes, int], None] | None,
    ) -> McpStreamTap | None:
        """The answer's head arrived.

        Returns:
            The tap an SSE answer streams through (observed as it passes), or
            ``None`` for a body read whole (JSON, an empty 202, text).
        """
        self.status = status
        sid = headers.get(SESSION_HEADER)
        self.response_key = session_key(sid) if sid else None
        media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        encoding = headers.get("content-encoding", "")
        if media == _SSE_MEDIA:
            self.framing = "sse"
            rewriter = None
            if self.method == "GET" and not self.regular and not encoding.strip():
                rewriter = EndpointRewriter(partial(endpoint_on_mount, route=self.route))
            self.tap = McpStreamTap(self._event, encoding, rewriter, on_chunk)
            return self.tap
        if media == _JSON_MEDIA or media.endswith("+json"):
            self.framing = "json"
        return None

    def ended(
        self,
        status: int | None,
        raw: bytes | None,
        encoding: str | None,
        now: int,
        failure: str | None = None,
    ) -> McpOutcome:
        """The exchange ended: what its answer says, and its lines.

        Args:
            status: the HTTP status, if an answer came.
            raw: a body read whole, as the upstream sent it.
            encoding: its ``Content-Encoding``.
            now: when.
            failure: the failure kind when it did not end by itself.
        """
        if self.tap is not None:
            self.errors.extend(self.tap.errors)
        if raw and self.framing == "json":
            self._body(raw, encoding, now)
        if status is not None and status >= 400:
            self._http_errors(status, now)
        event = None
        if self.method != POST or self.errors:
            event = McpExchangeEvent(
                **self.run.envelope(self.carrier.view, self.related_seq),
                method=self.method,
                path=redact_path(self.carrier.view.path),
                mcp_server=self.server,
                mcp_session=self.key,
                status=status,
                resumed=self.resumed,
                messages_from_server=self.messages,
                endpoint=self.endpoint,
                duration_ms=_ms(self.forwarded_ns, now),
                failure=failure,
                capture_errors=tuple(dict.fromkeys(self.errors)),
            )
            self.run.write_event(event)
        if self.method == "DELETE" and status is not None and 200 <= status < 300:
            self.run.mcp.drop((self.server, self.key))  # the server ended the MCP session
        return McpOutcome(
            self.server, self.records, self.messages, _ms(self.forwarded_ns, now), event
        )

    @property
    def answered(self) -> bool:
        """Whether every request of its body has its answer."""
        return all(pending.answered for pending in self.own.values())

    def _body(self, raw: bytes, encoding: str | None, now: int) -> None:
        try:
            value = orjson.loads(decode_body(raw, encoding))
        except (UpstreamProtocolError, orjson.JSONDecodeError):
            self.errors.append("the MCP server's JSON answer is not valid JSON")
            return
        found = read_messages(value)
        if isinstance(found, Unreadable):
            self.errors.append(found.reason)
            return
        for message in found:
            self._message(message, "json", now)

    def _http_errors(self, status: int, now: int) -> None:
        """Requests an HTTP error answered without a JSON-RPC answer for their id."""
        for key, pending in self.own.items():
            if pending.answered:
                continue
            self._state_of(pending).answered(key, pending)
            record = pending.record
            duration = _ms(pending.forwarded_ns, now)
            event = self._result(pending.view, record, record.jsonrpc_id, duration)
            event = replace(event, outcome="http_error", status=status)
            self._observed(event, pending, now)

    def _event(self, event: SSEEvent) -> None:
        """One SSE event of the answer, as it arrived."""
        now = time.perf_counter_ns()
        seen = read_sse_event(event)
        if seen is None:
            return  # a priming event (its id is the resume point) or a type MCP does not send
        if isinstance(seen, Endpoint):
            self._endpoint(seen)
        elif isinstance(seen, Unreadable):
            self.errors.append(seen.reason)
        else:
            for message in seen:
                self._message(message, "sse", now)

    def _endpoint(self, endpoint: Endpoint) -> None:
        """HTTP+SSE's endpoint: it names the session the stream is (its
        ``session_id``), and the client must reach it through the mount."""
        outcome = KEPT if self.regular else endpoint_on_mount(endpoint.data, self.route)[1]
        if outcome == REWRITTEN and (self.tap is None or self.tap.rewriter is None):
            outcome = ELSEWHERE  # it had to be rewritten and could not be (compressed)
        self.endpoint = outcome
        sid = query_session_id(endpoint.data)
        if sid is None:
            return
        self.key = session_key(sid)
        self.carrier.rebind(None if self.named_session else mcp_session_id(self.server, self.key))

    def _state_of(self, pending: Pending) -> McpState:
        return self.run.mcp.state((self.server, pending.record.mcp_session))

    def _message(self, message: ServerMessage, framing: str, now: int) -> None:
        """One server-to-client message: its line, and what it changes."""
        self.messages += 1
        if message.kind in (RESULT, ERROR):
            self._answer(message, framing, now)
            return
        view = self.carrier.view
        session = self.key or self.response_key
        seen: McpRequestEvent | McpNotificationEvent
        if message.kind == REQUEST:
            if message.id_key is not None:
                self.state.server_asked(message.id_key, message.method)
            seen = McpRequestEvent(
                **self.run.envelope(view, self.related_seq),
                mcp_server=self.server,
                mcp_session=session,
                mcp_method=message.method,
                jsonrpc_id=message.jsonrpc_id,
                origin="stream",
                input_key=None,
            )
        else:
            seen = McpNotificationEvent(
                **self.run.envelope(view, self.related_seq),
                mcp_server=self.server,
                mcp_session=session,
                mcp_method=message.method,
            )
        self.run.write_event(seen)
        if self.run.listeners.hear.mcp_observed:
            self.run.listeners.mcp_observed(view, seen, None, now)

    def _answer(self, message: ServerMessage, framing: str, now: int) -> None:
        """An answer to a client request: matched by id, on this exchange first,
        then anywhere in the MCP session."""
        key = message.id_key
        pending = None
        if key is not None:
            pending = self.own.get(key)
            if pending is None or pending.answered:
                pending = self.state.answer_for(key)
            if pending is not None and pending.answered:
                pending = None  # a second answer to one id: written unmatched
        record = pending.record if pending is not None else None
        facts = answer_facts(message, record.mcp_method if record else None)
        state = self.state if pending is None else self._state_of(pending)
        if pending is not None and key is not None:
            state.answered(key, pending)
        if facts.tool_headers:
            state.learn_tools(dict(facts.tool_headers))
        if facts.request_state_sha256 and pending is not None and pending.execution_seq:
            state.execution_open(facts.request_state_sha256, pending.execution_seq)
        view = pending.view if pending is not None else self.carrier.view
        duration = _ms(pending.forwarded_ns, now) if pending is not None else None
        event = self._result(view, record, message.jsonrpc_id, duration, facts)
        event = replace(event, outcome=message.kind, framing=framing)
        self._observed(event, pending, now)
        for input_key, method in facts.input_requests:
            asked = McpRequestEvent(
                **self.run.envelope(view, record.seq if record else None),
                mcp_server=self.server,
                mcp_session=event.mcp_session,
                mcp_method=method,
                jsonrpc_id=None,
                origin="input_required",
                input_key=input_key,
            )
            self.run.write_event(asked)
            if self.run.listeners.hear.mcp_observed:
                self.run.listeners.mcp_observed(self.carrier.view, asked, None, now)

    def _result(
        self,
        view: ExchangeView,
        record: McpAuditRecord | None,
        jsonrpc_id: int | str | None,
        duration_ms: float | None,
        facts: AnswerFacts | None = None,
    ) -> McpResultEvent:
        """The ``mcp_result`` of an answer to ``record`` (``None``: its request
        was not seen), from what the answer says (``None``: no answer came)."""
        said = facts or AnswerFacts()
        return McpResultEvent(
            **self.run.envelope(view, record.seq if record else None),
            mcp_server=self.server,
            mcp_session=(record.mcp_session if record else self.key) or self.response_key,
            mcp_method=record.mcp_method if record else None,
            jsonrpc_id=jsonrpc_id,
            tool_name=record.tool_name if record else None,
            outcome=RESULT,
            status=self.status,
            framing=None,
            is_error=said.is_error,
            error_code=said.error_code,
            content=said.content,
            structured_content=said.structured_content,
            result_type=said.result_type,
            tools=said.tools,
            tools_sha256=said.tools_sha256,
            next_cursor=said.next_cursor,
            duration_ms=duration_ms,
            evidence_complete=not said.capture_errors,
            capture_errors=said.capture_errors,
        )

    def _observed(self, event: McpResultEvent, pending: Pending | None, now: int) -> None:
        self.run.write_event(event)
        if self.run.listeners.hear.mcp_observed:
            call = None
            if pending is not None:
                call = McpCall(pending.record, pending.view, pending.forwarded_ns)
            self.run.listeners.mcp_observed(self.carrier.view, event, call, now)


class McpStreamTap:
    """An MCP SSE answer passing through: every chunk goes on as it arrives,
    and a copy is decoded (content coding, SSE) and observed event by event.

    When the copy cannot be decoded, observing stops, never the stream. An
    :class:`~modeltap.apis.mcp.transport.EndpointRewriter` (HTTP+SSE, reverse
    mode) may change the first event's data; nothing else is changed.

    Returns from a call the chunks to send (a list, possibly empty: an empty
    chunk would end a chunked answer).

    Args:
        on_event: called with each SSE event, in order.
        encoding: the answer's ``Content-Encoding``.
        rewriter: puts HTTP+SSE's endpoint on the mount, or ``None``.
        on_chunk: called with each chunk sent and its time (a listener asked).
    """

    __slots__ = ("decoder", "decompressor", "errors", "on_chunk", "on_event", "rewriter")

    def __init__(
        self,
        on_event: Callable[[SSEEvent], None],
        encoding: str,
        rewriter: EndpointRewriter | None,
        on_chunk: Callable[[bytes, int], None] | None,
    ) -> None:
        self.on_event = on_event
        self.rewriter = rewriter
        self.on_chunk = on_chunk
        self.errors: list[str] = []
        self.decoder: SSEDecoder | None = SSEDecoder()
        self.decompressor: StreamDecompressor | None = None
        try:
            self.decompressor = StreamDecompressor(encoding)
        except UpstreamProtocolError as e:
            self.errors.append(str(e))
            self.decoder = None

    def __call__(self, chunk: bytes) -> list[bytes]:
        self._observe(chunk)
        if self.rewriter is None:
            out = chunk
        else:
            out = self.rewriter.feed(chunk) if chunk else self.rewriter.flush()
        if out and self.on_chunk is not None:
            self.on_chunk(out, time.perf_counter_ns())
        return [out] if out else []

    def _observe(self, chunk: bytes) -> None:
        decoder, decompressor = self.decoder, self.decompressor
        if decoder is None or decompressor is None:
            return
        try:
            if chunk:
                events = decoder.feed(decompressor.feed(chunk))
            else:
                events = decoder.feed(decompressor.flush()) + decoder.close()
                self.decoder = None
            for event in events:
                self.on_event(event)
        except UpstreamProtocolError as e:
            self.errors.append(str(e))
            self.decoder = None
        except Exception as e:
            # Observing must never cost the stream: say so once, stop observing.
            logger.error("modeltap: observing an MCP stream failed (%s)", type(e).__name__)
            self.errors.append("the MCP stream could not be observed (a modeltap bug)")
            self.decoder = None
