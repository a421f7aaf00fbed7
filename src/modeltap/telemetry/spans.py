"""Span building: the spans of exchanges and WebSocket connections, and their phases.

The addon hands in timestamps (epoch nanoseconds) and the records it already
built; :class:`ExchangeSpan` and :class:`ConnectionSpan` turn them into spans
as the exchange goes, and :class:`~modeltap.telemetry.tree.SpanTree` decides
where each span hangs: under its session's root span, under the client's
``traceparent``, or under its WebSocket connection. Every entry point the
addon calls is cheap and never raises
(:func:`~modeltap.telemetry.tree.never_raises`): a span is never worth an
exchange.

An exchange's span starts when its audit record is written (stamped with the
request's arrival): only then are the request model and settings known, and
the conventions want the sampling attributes (operation, provider, request
model, ``server.*``) at span creation, where a sampler sees them. A request
refused before its audit gets its span when it is refused. Each finished
exchange also records the GenAI metrics and hands its tool calls to the tree,
which draws their ``execute_tool`` spans when the results come back.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from modeltap.evidence.records import (
    AuditRecord,
    ErrorEvent,
    Json,
    RequestSettings,
    ResponseEvent,
    ResponseFacts,
)
from modeltap.evidence.redaction import redact_path
from modeltap.telemetry import conventions as names
from modeltap.telemetry.attributes import (
    Attributes,
    content_attributes,
    metric_attributes,
    output_attributes,
    response_attributes,
    server_address,
    start_attributes,
    usage_totals,
)
from modeltap.telemetry.tree import SessionRoot, SpanTree, never_raises

__all__ = ["ConnectionSpan", "ExchangeSpan"]


# --------------------------------------------------------------------------
# The spans


class ExchangeSpan:
    """The span of one exchange, filled in as the exchange goes.

    Opened by :meth:`~modeltap.telemetry.Telemetry.start_exchange` (its
    arguments are documented there). Its span starts when the request is
    audited (or refused); until then the exchange is only tracked, so shutdown
    can still end it. Every method is cheap and never raises; on a no-op
    :class:`Telemetry` they do nothing. Phase child spans are made in
    :meth:`finish`, from the timestamps handed in on the way.
    """

    def __init__(
        self,
        tree: SpanTree,
        *,
        session_id: str,
        traceparent: str | None,
        start_ns: int,
        transport: str,
        parent: ConnectionSpan | None,
        conversation_id: str | None,
        provider: str | None,
        upstream: str | None,
        api: str | None = None,
    ) -> None:
        self._tree = tree
        self._operation = names.operation_of(api)
        self._span: trace.Span | None = None
        self._root: SessionRoot | None = None
        self._context: Context | None = None
        self.session_id = session_id
        self._traceparent = traceparent
        self._parent = parent
        self._conversation_id = conversation_id
        self._provider = provider
        self._upstream = upstream
        self.start_ns = start_ns
        self.transport = transport
        self.end_ns: int | None = None
        self._record: AuditRecord | None = None
        self._forwarded_ns: int | None = None
        self._first_byte_ns: int | None = None
        self._first_chunk_ns: int | None = None
        if tree.tracer is not None or tree.metrics is not None:
            tree.track(self)

    def _start(self, name: str, attributes: Attributes) -> None:
        """Start the span (once), with every attribute known now."""
        if self._span is not None or self._tree.tracer is None:
            return
        parent = self._parent._span if self._parent is not None else None
        self._span, self._root, self._context = self._tree.start_span(
            name,
            session_id=self.session_id,
            traceparent=self._traceparent,
            parent=parent,
            start_ns=self.start_ns,
            attributes=attributes,
        )

    def _early_attributes(self) -> Attributes:
        """What is known of a request before its audit: operation, provider, server."""
        attributes: Attributes = {
            names.OPERATION_NAME: self._operation,
            names.MODELTAP_SESSION_ID: self.session_id,
        }
        address, port = server_address(self._upstream) if self._upstream else (None, None)
        for key, value in (
            (names.PROVIDER_NAME, self._provider),
            (names.SERVER_ADDRESS, address),
            (names.SERVER_PORT, port),
            (names.CONVERSATION_ID, self._conversation_id),
        ):
            if value is not None:
                attributes[key] = value
        return attributes

    @never_raises
    def audited(
        self,
        record: AuditRecord,
        content: bytes | None = None,
        *,
        parsed: Json | None = None,
        forwarded_ns: int | None = None,
        settings: RequestSettings | None = None,
    ) -> None:
        """Start the span with the request's attributes, from the audit record.

        Args:
            record: the record just written for this request.
            content: the decoded request body; used only with content capture.
            parsed: ``content`` parsed already (the exchange's), if it was.
            forwarded_ns: when the request went upstream (epoch ns); starts the
                ``wait upstream`` phase. Default: the exchange's start.
            settings: the generation settings the request sent (its facts').
        """
        if self.end_ns is not None or self._record is not None:
            return
        attributes = start_attributes(record, settings, self._conversation_id)
        if content is not None and self._tree.capture_content:
            attributes |= content_attributes(record.api, content, parsed)
        # Kept only once the record proved usable, so finish() can rely on it.
        self._record = record
        self._forwarded_ns = forwarded_ns
        self._start(names.exchange_span_name(record.model, self._operation), attributes)
        if self._span is not None:
            # The record's log record (and its exchange's later lines) link to this span.
            self._tree.link(record.seq, self._span.get_span_context())
        # The results this request carries end the tools that produced them.
        if record.tool_results:
            self._tree.tools_answered(self.session_id, record.tool_results, self.start_ns)

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
        observed: ResponseFacts | None = None,
    ) -> None:
        """Set the outcome, build the phase spans and end the span. Only the first call counts.

        Args:
            end_ns: when the exchange ended (epoch ns).
            response: what came back, if anything was observed.
            error: what broke (upstream unreachable, reset, client gone).
            rejected_rule: the refusal rule when modeltap refused the request.
            status_code: the HTTP status the client got (else ``response.status``).
            content: the decoded response body; used only with content capture.
            observed: the observer's facts behind ``response`` (the served
                service tier, system fingerprint, and with content capture a
                streamed output in the conventions' shape).

        The span's status is ERROR, with ``error.type``, when the request was
        refused (the rule name), broke (``error.error``), the response failed
        (``response.failed``) or the status is 4xx/5xx (the code). A forwarded
        exchange also records the GenAI metrics; the tool calls of its
        response wait in the tree for their results.
        """
        self._close(end_ns, response, error, rejected_rule, status_code, content, observed)

    def _close(
        self,
        end_ns: int,
        response: ResponseEvent | None,
        error: ErrorEvent | None,
        rejected_rule: str | None,
        status_code: int | None,
        content: bytes | None,
        observed: ResponseFacts | None,
        *,
        interrupted: bool = False,
    ) -> None:
        if self.end_ns is not None:
            return
        self.end_ns = end_ns
        if status_code is None and response is not None:
            status_code = response.status
        error_type = (
            names.ERROR_INTERRUPTED
            if interrupted
            else _error_type(response, error, rejected_rule, status_code)
        )
        try:
            if self._record is not None:
                self._measure(end_ns, response, observed, error_type)
            if self._tree.tracer is not None:
                self._start(self._operation, self._early_attributes())
            span = self._span
            if span is not None:
                try:
                    self._outcome(
                        span,
                        end_ns,
                        response,
                        rejected_rule,
                        status_code,
                        content,
                        observed,
                        error_type,
                    )
                finally:
                    # Whatever went wrong above, the span ends.
                    span.end(end_time=end_ns)
            if response is not None and response.tool_calls and self._context is not None:
                self._tree.tools_asked(
                    self.session_id,
                    response.tool_calls,
                    asked_ns=end_ns,
                    context=self._context,
                    root=self._root,
                )
        finally:
            self._tree.untrack(self, self._root, self.session_id)

    def _outcome(
        self,
        span: trace.Span,
        end_ns: int,
        response: ResponseEvent | None,
        rejected_rule: str | None,
        status_code: int | None,
        content: bytes | None,
        observed: ResponseFacts | None,
        error_type: str | None,
    ) -> None:
        """Set the response attributes and status, and build the phase spans."""
        attributes: dict[str, Any] = {names.HTTP_RESPONSE_STATUS_CODE: status_code}
        if response is not None:
            attributes |= response_attributes(self._record, response, observed)
        ttfc = self._time_to_first_chunk(response)
        if ttfc is not None and (self._streamed() or self._first_chunk_ns is not None):
            attributes[names.RESPONSE_TIME_TO_FIRST_CHUNK] = ttfc
        attributes[names.ERROR_TYPE] = error_type
        span.set_attributes({key: value for key, value in attributes.items() if value is not None})
        if self._first_chunk_ns is not None:
            span.add_event("first chunk", timestamp=self._first_chunk_ns)
        if self._tree.capture_content and (content is not None or observed is not None):
            api = self._record.api if self._record is not None else None
            span.set_attributes(output_attributes(api, content, observed))
        if error_type is not None:
            # The description is the error's class only: messages can hold
            # upstream text, and secrets must never reach a span.
            span.set_status(Status(StatusCode.ERROR, error_type))
        if rejected_rule is None:
            self._phases(span, end_ns, error_type)

    def _streamed(self) -> bool:
        return self.transport == "websocket" or (self._record is not None and self._record.stream)

    def _time_to_first_chunk(self, response: ResponseEvent | None) -> float | None:
        """Seconds from the request to its first content chunk, if one came."""
        if self._first_chunk_ns is not None:
            return (self._first_chunk_ns - self.start_ns) / 1e9
        if response is not None and response.ttft_ms is not None:
            return response.ttft_ms / 1000.0
        return None

    def _measure(
        self,
        end_ns: int,
        response: ResponseEvent | None,
        observed: ResponseFacts | None,
        error_type: str | None,
    ) -> None:
        """Record the GenAI metrics of a forwarded exchange."""
        metrics, record = self._tree.metrics, self._record
        if metrics is None or record is None:
            return
        usage = usage_totals(record.api, response.usage) if response is not None else None
        metrics.record_exchange(
            metric_attributes(record, response, observed),
            duration_s=(end_ns - self.start_ns) / 1e9,
            error_type=error_type,
            input_tokens=usage.input_tokens if usage is not None else None,
            output_tokens=usage.output_tokens if usage is not None else None,
            time_to_first_chunk_s=(
                self._time_to_first_chunk(response) if self._streamed() else None
            ),
        )

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
            phases.append(("wait upstream", wait_start, max(wait_start, first_byte)))
            phases.append(
                ("stream" if self._streamed() else "receive", first_byte, max(first_byte, end_ns))
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
        self._close(end_ns, None, None, None, None, None, None, interrupted=True)


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


class ConnectionSpan:
    """The span of one WebSocket connection; its messages' spans are its children.

    Opened by :meth:`~modeltap.telemetry.Telemetry.start_connection` (its
    arguments are documented there).
    """

    def __init__(
        self,
        tree: SpanTree,
        *,
        session_id: str,
        traceparent: str | None,
        start_ns: int,
        path: str,
        upstream: str,
    ) -> None:
        self._tree = tree
        self._span: trace.Span | None = None
        self._root: SessionRoot | None = None
        self.session_id = session_id
        self.end_ns: int | None = None
        if tree.tracer is not None:
            self._start(traceparent, start_ns, path, upstream)

    @never_raises
    def _start(self, traceparent: str | None, start_ns: int, path: str, upstream: str) -> None:
        address, port = server_address(upstream)
        attributes: Attributes = {names.MODELTAP_SESSION_ID: self.session_id}
        if address is not None:
            attributes[names.SERVER_ADDRESS] = address
        if port is not None:
            attributes[names.SERVER_PORT] = port
        # The query string never goes into a span name (it is unbounded and
        # may carry a key); the path itself is redacted all the same.
        self._span, self._root, _ = self._tree.start_span(
            f"websocket {redact_path(path).split('?', 1)[0]}",
            session_id=self.session_id,
            traceparent=traceparent,
            parent=None,
            start_ns=start_ns,
            attributes=attributes,
        )
        self._tree.track(self)

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
            span.set_attribute(names.MODELTAP_WS_CLOSE_CODE, code)
        if error is not None:
            span.set_attribute(names.ERROR_TYPE, error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end_ns)
        self._tree.untrack(self, self._root, self.session_id)

    def _interrupt(self, end_ns: int) -> None:
        """End a connection left open at shutdown."""
        self.finish(end_ns=end_ns, code=None, error=names.ERROR_INTERRUPTED)
