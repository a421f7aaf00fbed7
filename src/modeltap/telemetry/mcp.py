"""MCP client spans and ``mcp.client.operation.duration`` (SPEC sections 3b and 5).

modeltap sits between an agent and its MCP server, so it sees each
client-to-server message the way the client does: when it went and when its
answer came. Each one becomes a CLIENT span named by the MCP conventions
(``{mcp.method.name} {target}``: ``tools/call add``, ``initialize``), in its
session's trace, and each one answered (or acknowledged) is one measurement
of the ``mcp.client.operation.duration`` histogram (names and buckets in
:mod:`modeltap.telemetry.conventions`)::

    session agent
     ├── chat gpt-5                 the model asks for mcp__shapes__add
     │    └── tools/call add        CLIENT: forwarded -> its answer, under the turn that asked
     ├── execute_tool mcp__shapes__add   links to tools/call add
     └── chat gpt-5                 the request carrying the result

Where a span hangs: a ``tools/call`` the model asked for hangs under the model
exchange whose response asked for it, when that pairing is known as the
call is sent (the evidence's rule, :mod:`modeltap.evidence.mcp_pairing`: the
agent's call id, else the agent's tool name and equal canonical arguments);
everything else under its session's root (or the client's ``traceparent``).
MCP traffic is in the agent's session only when the session is named
(``x-modeltap-session`` or ``--session``); else each MCP session is a session
and a trace of its own (docs/MCP.md).

A span starts as its message is forwarded, with every attribute the audit
line gives (where a sampler sees them), and the log records of the lines of
its ``seq`` (its audit line, its ``mcp_result``) link to it. It ends: a
request's at its answer (the ``mcp_result`` event, on
whatever exchange it came); a notification's at the end of the POST that
carried it (the server's ``202`` is its acknowledgement); a request whose POST
failed (unreachable, reset, an HTTP error) at that end; a request still
unanswered when its session ends, then, with ``error.type``
``modeltap.mcp.unanswered``; at shutdown, ``modeltap.interrupted``. A refused
POST gives one span per message it held, ``error.type`` the rule, nothing
measured (it never went).

``error.type``: a JSON-RPC error's code (``-32601``, also in
``rpc.response.status_code``); ``tool_error`` for a ``CallToolResult`` with
``isError: true``; the HTTP status of an ``http_error``; modeltap's failure
kind (``upstream_unreachable``) or refusal rule (``tool_budget_exceeded``).

Content goes into these spans only with ``capture_content``, as for model
spans: then a ``tools/call`` span carries ``gen_ai.tool.call.arguments`` (the
opt-in attribute of the conventions), read from the body as it was forwarded
and bounded as every content attribute is. Results are never captured: the
observer passes an answer through without keeping it (only the sizes of its
content items), and holding it for a span would buffer it. ``mcp.session.id``
is the files' ``mcp_session`` hash, never the ``Mcp-Session-Id``.

This module is fed facts (the audit lines, the result events, the ends of
exchanges, and with content capture the forwarded body); it reads no header,
and keeps at most :data:`MAX_OPEN` requests waiting for answers (the oldest
ends first, unanswered).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import orjson
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from modeltap.evidence.mcp_pairing import Execution, ExecutionPairing
from modeltap.evidence.records import Json, McpAuditRecord, McpRefused, McpResultEvent, ToolCall
from modeltap.telemetry import conventions as names
from modeltap.telemetry.attributes import Attributes, content_values, server_address
from modeltap.telemetry.tree import SessionRoot, SpanTree, never_raises

__all__ = ["MAX_OPEN", "McpSpans", "error_type_of"]

#: Client requests kept waiting for their answers, over the run.
MAX_OPEN: Final = 4096
#: Model exchanges whose tool calls wait for their executions, per session
#: (each keeps at most :data:`~modeltap.evidence.mcp_pairing.MAX_WAITING` calls).
MAX_SESSIONS: Final = 1024


def error_type_of(event: McpResultEvent) -> str | None:
    """``error.type`` of an answer: the JSON-RPC error code, ``tool_error``, the
    HTTP status of an ``http_error``; ``None`` for a result that is no error."""
    if event.error_code is not None:
        return str(event.error_code)
    if event.outcome == "http_error":
        return str(event.status) if event.status is not None else names.ERROR_OTHER
    if event.outcome == "error":
        return names.ERROR_OTHER
    if event.is_error:
        return names.MCP_ERROR_TOOL
    return None


#: A model exchange's span context and the call's id, as a tool call waits.
_Asked = tuple[trace.SpanContext, str | None]


@dataclass(slots=True)
class _Sent:
    """A client-to-server message whose span is open (or, without spans, whose
    measurement is to come)."""

    record: McpAuditRecord
    sent_ns: int
    traceparent: str | None
    #: The model exchange span that asked for this tool call, when paired.
    parent: trace.SpanContext | None
    #: The model's call id, when known (the agent's ``_meta``, or the pairing).
    call_id: str | None
    end_ns: int | None = None
    #: ``tools/call`` with content capture: the arguments as forwarded.
    arguments: Json | None = None
    #: Its span, open from the send (``None`` when spans are not exported).
    span: trace.Span | None = None
    #: The session root it hangs under, if it does.
    root: SessionRoot | None = None

    def _interrupt(self, end_ns: int) -> None:
        """Never tracked by the tree: :meth:`McpSpans.stop` ends what still waits."""


class McpSpans:
    """The MCP side of a run's telemetry: spans and the operation-duration histogram.

    Args:
        tree: the run's span tree (where spans hang; its tracer and metrics).
    """

    def __init__(self, tree: SpanTree) -> None:
        self._tree = tree
        self._lock = threading.Lock()
        #: Requests awaiting their answer, by the ``seq`` of their audit line.
        self._open: OrderedDict[int, _Sent] = OrderedDict()
        #: Notifications awaiting the end of their POST, likewise.
        self._acks: OrderedDict[int, _Sent] = OrderedDict()
        #: Each session's model tool calls awaiting their execution, with the
        #: context of the exchange span that asked for them and the call's id.
        self._calls: OrderedDict[str, ExecutionPairing[_Asked | None]] = OrderedDict()
        #: With content capture: each POST's tools/call spans-to-be, until its body is
        #: read (:meth:`forwarded`), by exchange id.
        self._unread: OrderedDict[str, list[tuple[int, _Sent]]] = OrderedDict()
        #: The spans of paired executions, by (session, model call id), until the
        #: call's execute_tool span links to them.
        self._executions: OrderedDict[tuple[str, str], trace.SpanContext] = OrderedDict()
        tree.tool_links = self._tool_links

    # ------------------------------------------------------------------ facts in

    @never_raises
    def model_asked(self, session_id: str, seq: int, calls: Sequence[ToolCall]) -> None:
        """The model exchange of audit line ``seq`` asked for ``calls``: a ``tools/call``
        that executes one of them hangs under that exchange's span."""
        context = self._tree.exchange_link(seq)
        if context is None or not calls:
            return
        with self._lock:
            pairing = self._calls.get(session_id)
            if pairing is None:
                pairing = self._calls[session_id] = ExecutionPairing()
                if len(self._calls) > MAX_SESSIONS:
                    self._calls.popitem(last=False)
            for call in calls:
                pairing.asked(call, (context, call.call_id))

    @never_raises
    def sent(
        self,
        records: Sequence[McpAuditRecord],
        *,
        traceparent: str | None,
        sent_ns: int,
        exchange_id: str | None = None,
    ) -> None:
        """A POST's audit lines were written; it is forwarded now (``sent_ns``).

        Requests and notifications get spans; the client's answers to the
        server's requests do not (they are not operations of the client).
        ``exchange_id`` names the POST for :meth:`forwarded` (content capture).
        """
        unread: list[tuple[int, _Sent]] = []
        for index, record in enumerate(records):
            if record.message_type not in ("request", "notification") or not record.mcp_method:
                continue
            parent, call_id = self._paired(record)
            sent = _Sent(record, sent_ns, traceparent, parent, call_id)
            self._start(sent)
            if record.mcp_method == names.MCP_METHOD_TOOLS_CALL:
                unread.append((index, sent))
            # A notification is acknowledged by its POST's answer; a request by its own.
            waiting = self._open if record.message_type == "request" else self._acks
            with self._lock:
                waiting[record.seq] = sent
                oldest = waiting.popitem(last=False)[1] if len(waiting) > MAX_OPEN else None
            if oldest is not None:
                self._draw(oldest, sent_ns, names.ERROR_MCP_UNANSWERED)
        if unread and exchange_id is not None and self._tree.capture_content:
            with self._lock:
                self._unread[exchange_id] = unread
                if len(self._unread) > MAX_OPEN:
                    self._unread.popitem(last=False)

    @never_raises
    def forwarded(self, exchange_id: str, body: bytes) -> None:
        """With content capture: the POST ``exchange_id`` went with ``body`` (decoded,
        audited): its ``tools/call`` spans take their arguments from it."""
        with self._lock:
            unread = self._unread.pop(exchange_id, None)
        if not unread:
            return
        value = orjson.loads(body)
        messages = value if isinstance(value, list) else [value]
        for index, sent in unread:
            message = messages[index] if index < len(messages) else None
            params = message.get("params") if isinstance(message, dict) else None
            if isinstance(params, dict) and "arguments" in params:
                sent.arguments = params["arguments"]

    @never_raises
    def answered(self, seq: int, event: McpResultEvent, *, end_ns: int) -> None:
        """The answer to the request of audit line ``seq`` arrived at ``end_ns``.

        Args:
            seq: the request's audit line (the span started when it was forwarded).
            event: its ``mcp_result`` line.
            end_ns: when the answer arrived.
        """
        with self._lock:
            sent = self._open.pop(seq, None)
        if sent is None:
            return
        self._draw(sent, end_ns, error_type_of(event), event)

    @never_raises
    def exchange_ended(
        self,
        records: Sequence[McpAuditRecord],
        *,
        status: int | None,
        failure: str | None,
        end_ns: int,
    ) -> None:
        """The POST that carried ``records`` ended: its notifications are acknowledged
        (or failed); its requests without an answer fail with it when it failed
        (a broken exchange, an HTTP error), else keep waiting (their answer may
        come on another stream)."""
        failed = failure or (str(status) if status is not None and status >= 400 else None)
        for record in records:
            with self._lock:
                sent = self._acks.pop(record.seq, None)
                if sent is None and failed is not None:
                    sent = self._open.pop(record.seq, None)
            if sent is not None:
                self._draw(sent, end_ns, failed)

    @never_raises
    def refused(
        self,
        refused: McpRefused,
        *,
        session_id: str,
        traceparent: str | None,
        rule: str,
        start_ns: int,
        end_ns: int,
    ) -> None:
        """A POST was refused before forwarding: a span per message it held
        (``error.type`` the rule), none measured (nothing went)."""
        tracer = self._tree.tracer
        if tracer is None:
            return
        for message in refused.messages:
            if message.message_type not in ("request", "notification"):
                continue
            attributes: Attributes = {
                names.MODELTAP_SESSION_ID: session_id,
                names.MODELTAP_MCP_SERVER: refused.mcp_server,
                names.ERROR_TYPE: rule,
            }
            _put(attributes, names.MCP_METHOD_NAME, message.mcp_method)
            _put(attributes, names.TOOL_NAME, message.tool_name)
            _put(attributes, names.MCP_SESSION_ID, refused.mcp_session)
            if message.jsonrpc_id is not None:
                attributes[names.JSONRPC_REQUEST_ID] = str(message.jsonrpc_id)
            if message.mcp_method == names.MCP_METHOD_TOOLS_CALL:
                attributes[names.OPERATION_NAME] = names.OPERATION_EXECUTE_TOOL
            span, root, _ = self._tree.start_span(
                names.mcp_span_name(message.mcp_method, message.tool_name),
                session_id=session_id,
                traceparent=traceparent,
                parent=None,
                start_ns=start_ns,
                attributes=attributes,
            )
            span.set_status(Status(StatusCode.ERROR, rule))
            span.end(end_time=end_ns)
            if root is not None:
                with self._lock:
                    root.last_end_ns = max(root.last_end_ns, end_ns)

    @never_raises
    def end_session(self, session_id: str, end_ns: int | None) -> None:
        """The session ends (at ``end_ns``, default now): its requests still
        unanswered end with it."""
        ending: list[_Sent] = []
        with self._lock:
            self._calls.pop(session_id, None)
            for waiting in (self._open, self._acks):
                keys = [k for k, sent in waiting.items() if sent.record.session_id == session_id]
                ending.extend(waiting.pop(k) for k in keys)
        now = end_ns if end_ns is not None else time.time_ns()
        for sent in ending:
            self._draw(sent, now, names.ERROR_MCP_UNANSWERED)

    @never_raises
    def stop(self, end_ns: int) -> None:
        """Shutdown: what still waits ends now, ``modeltap.interrupted``."""
        with self._lock:
            leftovers = [*self._open.values(), *self._acks.values()]
            self._open.clear()
            self._acks.clear()
            self._calls.clear()
            self._unread.clear()
            self._executions.clear()
        for sent in leftovers:
            self._draw(sent, max(sent.sent_ns, end_ns), names.ERROR_INTERRUPTED)

    # ------------------------------------------------------------------ spans out

    def _paired(self, record: McpAuditRecord) -> tuple[trace.SpanContext | None, str | None]:
        """The model exchange span a ``tools/call`` executes a call of, and the call's id."""
        if record.tool_name is None or record.continues_seq is not None:
            return None, record.tool_call_id
        execution = Execution(
            record.mcp_server, record.tool_name, record.arguments_sha256, record.tool_call_id
        )
        with self._lock:
            pairing = self._calls.get(record.session_id)
            found = pairing.executed(execution, None) if pairing is not None else None
        if found is None:
            return None, record.tool_call_id
        context, call_id = found
        return context, record.tool_call_id or call_id

    def _attributes(self, sent: _Sent) -> Attributes:
        record = sent.record
        attributes: Attributes = {
            names.MCP_METHOD_NAME: record.mcp_method or "",
            names.NETWORK_TRANSPORT: names.NETWORK_TRANSPORT_TCP,
            names.NETWORK_PROTOCOL_NAME: names.NETWORK_PROTOCOL_HTTP,
        }
        if record.mcp_method == names.MCP_METHOD_TOOLS_CALL:
            attributes[names.OPERATION_NAME] = names.OPERATION_EXECUTE_TOOL
        _put(attributes, names.TOOL_NAME, record.tool_name)
        _put(attributes, names.MCP_PROTOCOL_VERSION, record.protocol_version)
        address, port = server_address(record.upstream)
        _put(attributes, names.SERVER_ADDRESS, address)
        _put(attributes, names.SERVER_PORT, port)
        return attributes

    def _start(self, sent: _Sent) -> None:
        """Start the span of ``sent`` as it is forwarded, every attribute known then
        set (a sampler sees them); the lines of its ``seq`` link to it."""
        if self._tree.tracer is None:
            return
        record = sent.record
        attributes = self._attributes(sent)
        attributes[names.MODELTAP_SEQ] = record.seq
        attributes[names.MODELTAP_REQUEST_ID] = record.request_id
        attributes[names.MODELTAP_SESSION_ID] = record.session_id
        attributes[names.MODELTAP_MCP_SERVER] = record.mcp_server
        _put(attributes, names.MCP_SESSION_ID, record.mcp_session)
        if record.jsonrpc_id is not None:
            attributes[names.JSONRPC_REQUEST_ID] = str(record.jsonrpc_id)
        _put(attributes, names.TOOL_CALL_ID, sent.call_id)
        sent.span, sent.root, _ = self._tree.start_span(
            names.mcp_span_name(record.mcp_method, record.tool_name),
            session_id=record.session_id,
            traceparent=sent.traceparent,
            parent=trace.NonRecordingSpan(sent.parent) if sent.parent is not None else None,
            start_ns=sent.sent_ns,
            attributes=attributes,
        )
        # The audit line's log record (and its answer's) link to this span.
        context = sent.span.get_span_context()
        self._tree.link(record.seq, context)
        if sent.parent is not None and sent.call_id is not None:
            with self._lock:
                self._executions[(record.session_id, sent.call_id)] = context
                if len(self._executions) > MAX_OPEN:
                    self._executions.popitem(last=False)

    def _tool_links(self, session_id: str, call: ToolCall) -> list[trace.Link]:
        """The link of a model call's ``execute_tool`` span to the MCP span that ran it."""
        if call.call_id is None:
            return []
        with self._lock:
            context = self._executions.pop((session_id, call.call_id), None)
        return [trace.Link(context)] if context is not None else []

    def _draw(
        self,
        sent: _Sent,
        end_ns: int,
        error_type: str | None,
        event: McpResultEvent | None = None,
    ) -> None:
        """End the span of ``sent`` at ``end_ns`` and measure it."""
        end_ns = max(end_ns, sent.sent_ns)
        ending: Attributes = {}
        if error_type is not None:
            ending[names.ERROR_TYPE] = error_type
        if event is not None and event.error_code is not None:
            ending[names.RPC_RESPONSE_STATUS_CODE] = str(event.error_code)
        if error_type not in (names.ERROR_INTERRUPTED, names.ERROR_MCP_UNANSWERED):
            self._measure(self._attributes(sent) | ending, (end_ns - sent.sent_ns) / 1e9)
        span = sent.span
        if span is None:
            return
        if event is not None and event.status is not None:
            ending[names.HTTP_RESPONSE_STATUS_CODE] = event.status
        if sent.arguments is not None and self._tree.capture_content:
            ending |= content_values({names.TOOL_CALL_ARGUMENTS: sent.arguments})
        try:
            span.set_attributes(ending)
            if error_type is not None:
                # The class only: a JSON-RPC error's message can hold the server's text.
                span.set_status(Status(StatusCode.ERROR, error_type))
        finally:
            span.end(end_time=end_ns)
            sent.end_ns = end_ns
            self._tree.untrack(sent, sent.root, sent.record.session_id)

    def _measure(self, attributes: Attributes, duration_s: float) -> None:
        metrics = self._tree.metrics
        if metrics is None:
            return
        metrics.mcp_operation_duration.record(max(0.0, duration_s), attributes)


def _put(attributes: Attributes, key: str, value: str | int | None) -> None:
    if value is not None:
        attributes[key] = value
