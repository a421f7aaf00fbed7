"""Span building: the spans of exchanges and WebSocket connections, and their phases.

The addon hands in timestamps (epoch nanoseconds) and the records it already
built; :class:`ExchangeSpan` and :class:`ConnectionSpan` turn them into spans
as the exchange goes, and :class:`~modeltap.telemetry.tree.SpanTree` decides
where each span hangs: under its session's root span, under the client's
``traceparent``, or under its WebSocket connection. Every entry point the
addon calls is cheap and never raises
(:func:`~modeltap.telemetry.tree.never_raises`): a span is never worth an
exchange.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from modeltap.records import AuditRecord, ErrorEvent, ResponseEvent, redact_path
from modeltap.telemetry.attributes import (
    ERROR_INTERRUPTED,
    ERROR_TYPE,
    HTTP_RESPONSE_STATUS_CODE,
    MODELTAP_INSTRUCTIONS_SHA256,
    MODELTAP_REQUEST_ID,
    MODELTAP_SEQ,
    MODELTAP_SESSION_ID,
    MODELTAP_WS_CLOSE_CODE,
    OPENAI_API_TYPE,
    OPERATION_CHAT,
    OPERATION_NAME,
    OUTPUT_MESSAGES,
    PROVIDER_NAME,
    REQUEST_MODEL,
    REQUEST_PREVIOUS_RESPONSE_ID,
    REQUEST_REASONING_LEVEL,
    REQUEST_STREAM,
    RESPONSE_FINISH_REASONS,
    RESPONSE_ID,
    RESPONSE_MODEL,
    RESPONSE_TIME_TO_FIRST_CHUNK,
    SERVER_ADDRESS,
    SERVER_PORT,
    USAGE_CACHE_READ_INPUT_TOKENS,
    USAGE_CACHE_WRITE_INPUT_TOKENS,
    USAGE_INPUT_TOKENS,
    USAGE_OUTPUT_TOKENS,
    USAGE_REASONING_OUTPUT_TOKENS,
    api_identity,
    request_content,
    response_content,
    server_address,
)
from modeltap.telemetry.tree import SessionRoot, SpanTree, never_raises

__all__ = ["ConnectionSpan", "ExchangeSpan", "open_connection", "open_exchange"]


# --------------------------------------------------------------------------
# Opening spans


def open_exchange(
    tree: SpanTree,
    *,
    session_id: str,
    traceparent: str | None,
    start_ns: int,
    transport: str,
    parent: ConnectionSpan | None,
) -> ExchangeSpan:
    """Open the span of one exchange (see :meth:`~modeltap.telemetry.Telemetry.start_exchange`)."""
    exchange = ExchangeSpan(tree, start_ns=start_ns, transport=transport)
    if tree.tracer is not None:
        _start_exchange_span(tree, exchange, session_id, traceparent, parent)
    return exchange


@never_raises
def _start_exchange_span(
    tree: SpanTree,
    exchange: ExchangeSpan,
    session_id: str,
    traceparent: str | None,
    parent: ConnectionSpan | None,
) -> None:
    exchange._span, exchange._root = tree.start_span(
        OPERATION_CHAT,
        session_id=session_id,
        traceparent=traceparent,
        parent=parent._span if parent is not None else None,
        start_ns=exchange.start_ns,
        attributes={OPERATION_NAME: OPERATION_CHAT, MODELTAP_SESSION_ID: session_id},
    )
    tree.track(exchange)


def open_connection(
    tree: SpanTree,
    *,
    session_id: str,
    traceparent: str | None,
    start_ns: int,
    path: str,
    upstream: str,
) -> ConnectionSpan:
    """Open the span of one WebSocket connection (see
    :meth:`~modeltap.telemetry.Telemetry.start_connection`)."""
    connection = ConnectionSpan(tree)
    if tree.tracer is not None:
        _start_connection_span(tree, connection, session_id, traceparent, start_ns, path, upstream)
    return connection


@never_raises
def _start_connection_span(
    tree: SpanTree,
    connection: ConnectionSpan,
    session_id: str,
    traceparent: str | None,
    start_ns: int,
    path: str,
    upstream: str,
) -> None:
    address, port = server_address(upstream)
    attributes: dict[str, str | int] = {MODELTAP_SESSION_ID: session_id}
    if address is not None:
        attributes[SERVER_ADDRESS] = address
    if port is not None:
        attributes[SERVER_PORT] = port
    # The query string never goes into a span name (it is unbounded and
    # may carry a key); the path itself is redacted all the same.
    connection._span, connection._root = tree.start_span(
        f"websocket {redact_path(path).split('?', 1)[0]}",
        session_id=session_id,
        traceparent=traceparent,
        parent=None,
        start_ns=start_ns,
        attributes=attributes,
    )
    tree.track(connection)


# --------------------------------------------------------------------------
# The spans


class ExchangeSpan:
    """The span of one exchange, filled in as the exchange goes.

    Every method is cheap and never raises; on a no-op :class:`Telemetry`
    they do nothing. Phase child spans are made in :meth:`finish`, from the
    timestamps handed in on the way.
    """

    def __init__(self, tree: SpanTree, *, start_ns: int, transport: str) -> None:
        self._tree = tree
        self._span: trace.Span | None = None
        self._root: SessionRoot | None = None
        self.start_ns = start_ns
        self.transport = transport
        self.end_ns: int | None = None
        self._record: AuditRecord | None = None
        self._forwarded_ns: int | None = None
        self._first_byte_ns: int | None = None
        self._first_chunk_ns: int | None = None

    @never_raises
    def audited(
        self,
        record: AuditRecord,
        content: bytes | None = None,
        *,
        forwarded_ns: int | None = None,
    ) -> None:
        """Name the span and set the request attributes from the audit record.

        Args:
            record: the record just written for this request.
            content: the decoded request body; used only with content capture.
            forwarded_ns: when the request went upstream (epoch ns); starts the
                ``wait upstream`` phase. Default: the exchange's start.
        """
        span = self._span
        if span is None or self.end_ns is not None:
            return
        span.update_name(f"{OPERATION_CHAT} {record.model}")
        address, port = server_address(record.upstream)
        provider, openai_api_type = api_identity(record.api)
        attributes: dict[str, str | int | bool | None] = {
            PROVIDER_NAME: record.provider or provider,  # the route's real provider
            REQUEST_MODEL: record.model,
            REQUEST_STREAM: record.stream,
            REQUEST_REASONING_LEVEL: record.reasoning_effort,
            REQUEST_PREVIOUS_RESPONSE_ID: record.previous_response_id,
            OPENAI_API_TYPE: openai_api_type,
            SERVER_ADDRESS: address,
            SERVER_PORT: port,
            MODELTAP_SEQ: record.seq,
            MODELTAP_REQUEST_ID: record.request_id,
            MODELTAP_SESSION_ID: record.session_id,
            MODELTAP_INSTRUCTIONS_SHA256: record.instructions_sha256,
        }
        span.set_attributes({key: value for key, value in attributes.items() if value is not None})
        # Kept only once the record proved usable, so finish() can rely on it.
        self._record = record
        self._forwarded_ns = forwarded_ns
        if content is not None and self._tree.capture_content:
            span.set_attributes(request_content(record.api, content))

    def upstream_first_byte(self, t_ns: int) -> None:
        """The upstream's first byte arrived: ``wait upstream`` ends, the rest begins."""
        if self._first_byte_ns is None:
            self._first_byte_ns = t_ns

    def first_chunk(self, t_ns: int) -> None:
        """The first content chunk arrived (sets ``gen_ai.response.time_to_first_chunk``)."""
        if self._first_chunk_ns is None:
            self._first_chunk_ns = t_ns

    @never_raises
    def finish(
        self,
        *,
        end_ns: int,
        response: ResponseEvent | None = None,
        error: ErrorEvent | None = None,
        rejected_rule: str | None = None,
        status_code: int | None = None,
        content: bytes | None = None,
    ) -> None:
        """Set the outcome, build the phase spans and end the span. Only the first call counts.

        Args:
            end_ns: when the exchange ended (epoch ns).
            response: what came back, if anything was observed.
            error: what broke (upstream unreachable, reset, client gone).
            rejected_rule: the refusal rule when modeltap refused the request.
            status_code: the HTTP status the client got (else ``response.status``).
            content: the decoded response body; used only with content capture.

        The span's status is ERROR, with ``error.type``, when the request was
        refused (the rule name), broke (``error.error``), the response failed
        (``response.failed``) or the status is 4xx/5xx (the code).
        """
        self._close(end_ns, response, error, rejected_rule, status_code, content, interrupted=False)

    def _close(
        self,
        end_ns: int,
        response: ResponseEvent | None,
        error: ErrorEvent | None,
        rejected_rule: str | None,
        status_code: int | None,
        content: bytes | None,
        *,
        interrupted: bool,
    ) -> None:
        span = self._span
        if span is None or self.end_ns is not None:
            return
        self.end_ns = end_ns
        try:
            self._outcome(
                span, end_ns, response, error, rejected_rule, status_code, content, interrupted
            )
        finally:
            # Whatever went wrong above, the span ends and stops being tracked.
            span.end(end_time=end_ns)
            self._tree.untrack(self, self._root)

    def _outcome(
        self,
        span: trace.Span,
        end_ns: int,
        response: ResponseEvent | None,
        error: ErrorEvent | None,
        rejected_rule: str | None,
        status_code: int | None,
        content: bytes | None,
        interrupted: bool,
    ) -> None:
        """Set the response attributes and status, and build the phase spans."""
        attributes: dict[str, Any] = {}
        if status_code is None and response is not None:
            status_code = response.status
        attributes[HTTP_RESPONSE_STATUS_CODE] = status_code
        if response is not None:
            usage = response.usage
            attributes |= {
                RESPONSE_MODEL: response.model,
                RESPONSE_ID: response.response_id,
                USAGE_INPUT_TOKENS: usage.input_tokens,
                USAGE_OUTPUT_TOKENS: usage.output_tokens,
                USAGE_CACHE_READ_INPUT_TOKENS: usage.cache_read_tokens,
                USAGE_CACHE_WRITE_INPUT_TOKENS: usage.cache_write_tokens,
                USAGE_REASONING_OUTPUT_TOKENS: usage.reasoning_tokens,
                RESPONSE_FINISH_REASONS: (
                    list(response.finish_reasons) if response.finish_reasons is not None else None
                ),
            }
        if self._first_chunk_ns is not None:
            attributes[RESPONSE_TIME_TO_FIRST_CHUNK] = (self._first_chunk_ns - self.start_ns) / 1e9
        elif response is not None and response.ttft_ms is not None:
            attributes[RESPONSE_TIME_TO_FIRST_CHUNK] = response.ttft_ms / 1000.0

        error_type = (
            ERROR_INTERRUPTED
            if interrupted
            else self._error_type(response, error, rejected_rule, status_code)
        )
        attributes[ERROR_TYPE] = error_type
        span.set_attributes({key: value for key, value in attributes.items() if value is not None})
        if self._first_chunk_ns is not None:
            span.add_event("first chunk", timestamp=self._first_chunk_ns)
        if content is not None and self._tree.capture_content:
            api = self._record.api if self._record is not None else None
            span.set_attribute(OUTPUT_MESSAGES, response_content(api, content))
        if error_type is not None:
            # The description is the error's class only: messages can hold
            # upstream text, and secrets must never reach a span.
            span.set_status(Status(StatusCode.ERROR, error_type))
        if rejected_rule is None:
            self._phases(span, end_ns, error_type)

    @staticmethod
    def _error_type(
        response: ResponseEvent | None,
        error: ErrorEvent | None,
        rejected_rule: str | None,
        status_code: int | None,
    ) -> str | None:
        if rejected_rule is not None:
            return rejected_rule
        if error is not None:
            return error.error
        if response is not None and response.response_status == "failed":
            return "response.failed"
        if status_code is not None and status_code >= 400:
            return str(status_code)
        return None

    def _phases(self, span: trace.Span, end_ns: int, error_type: str | None) -> None:
        """Child spans for the phases: ``wait upstream``, then ``stream`` or ``receive``."""
        if self._record is None and self._first_byte_ns is None:
            return  # never forwarded: there is no phase to show
        tracer = self._tree.tracer
        if tracer is None:
            return  # shut down meanwhile
        context = trace.set_span_in_context(span)
        wait_start = self._forwarded_ns if self._forwarded_ns is not None else self.start_ns
        first_byte = self._first_byte_ns
        phases: list[tuple[str, int, int]] = []
        if first_byte is None:
            phases.append(("wait upstream", wait_start, end_ns))
        else:
            streamed = self._record.stream if self._record is not None else False
            phases.append(("wait upstream", wait_start, max(wait_start, first_byte)))
            phases.append(
                ("stream" if streamed else "receive", first_byte, max(first_byte, end_ns))
            )
        for index, (name, start, end) in enumerate(phases):
            phase = tracer.start_span(
                name, context=context, kind=SpanKind.INTERNAL, start_time=start
            )
            if error_type is not None and index == len(phases) - 1:
                phase.set_status(Status(StatusCode.ERROR, error_type))
            phase.end(end_time=end)

    @never_raises
    def _interrupt(self, end_ns: int) -> None:
        """End a span left open at shutdown, marked ``modeltap.interrupted``."""
        end_ns = max(end_ns, self.start_ns)
        self._close(end_ns, None, None, None, None, None, interrupted=True)


class ConnectionSpan:
    """The span of one WebSocket connection; its messages' spans are its children."""

    def __init__(self, tree: SpanTree) -> None:
        self._tree = tree
        self._span: trace.Span | None = None
        self._root: SessionRoot | None = None
        self.end_ns: int | None = None

    @never_raises
    def finish(self, *, end_ns: int, code: int | None, error: str | None) -> None:
        """End the connection span. Only the first call counts.

        Args:
            end_ns: when the connection closed (epoch ns).
            code: the close code, if one was sent.
            error: an error class (e.g. ``upstream_reset``) if it ended badly;
                never a message, which could carry upstream text.
        """
        span = self._span
        if span is None or self.end_ns is not None:
            return
        self.end_ns = end_ns
        if code is not None:
            span.set_attribute(MODELTAP_WS_CLOSE_CODE, code)
        if error is not None:
            span.set_attribute(ERROR_TYPE, error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end_ns)
        self._tree.untrack(self, self._root)

    def _interrupt(self, end_ns: int) -> None:
        """End a connection left open at shutdown."""
        self.finish(end_ns=end_ns, code=None, error=ERROR_INTERRUPTED)
