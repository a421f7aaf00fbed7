"""The spans addon: the run's notices, as OpenTelemetry spans.

It owns ``--otlp`` and ``--capture-content`` and listens to the run only
while spans are exported: each model exchange gets an exchange span (a
WebSocket turn's is a child of its connection's span), each session a root,
each MCP message a client span (:mod:`modeltap.telemetry.mcp`), and the
export is flushed when the run stops (:mod:`modeltap.telemetry`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace

from mitmproxy import exceptions

from modeltap import apis
from modeltap.addons.base import Addon
from modeltap.core.notices import (
    ExchangeView,
    Forward,
    Listener,
    McpCall,
    McpEvent,
    Outcome,
    Reply,
)
from modeltap.core.run import Run
from modeltap.evidence.records import McpAuditRecord, McpResultEvent, RequestFacts, WsCloseEvent
from modeltap.evidence.redaction import redact_path
from modeltap.telemetry import ConnectionSpan, ExchangeSpan, Telemetry
from modeltap.telemetry.remote import telemetry_class

# Durations come from the monotonic clock; spans want epoch time. One fixed
# offset converts, so both views of an exchange agree.
_EPOCH_OFFSET_NS = time.time_ns() - time.perf_counter_ns()


def epoch_ns(perf_ns: int) -> int:
    """Convert a ``time.perf_counter_ns()`` reading to epoch nanoseconds."""
    return perf_ns + _EPOCH_OFFSET_NS


class Spans(Addon, Listener):
    """Export a span per exchange, per WebSocket connection and per session."""

    #: Its name among mitmproxy's addons (``master.addons.get``).
    name = "modeltap_spans"

    OPTIONS = ("otlp", "otlp_logs", "capture_content")

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.telemetry = Telemetry.configure(otlp=None, capture_content=False, environ={})
        #: The line the telemetry printed at exit (dropped spans), for the CLI.
        self.summary: str | None = None
        self._exchanges: dict[str, ExchangeSpan] = {}
        self._connections: dict[str, ConnectionSpan] = {}

    def configure(self, updated: set[str]) -> None:
        if not {"modeltap_otlp", "modeltap_otlp_logs", "modeltap_capture_content"} & updated:
            return
        opts = self.options
        try:
            # MODELTAP_TELEMETRY_PROCESS=1: the experimental exporter process.
            telemetry = telemetry_class().configure(
                otlp=opts.modeltap_otlp,
                capture_content=True if opts.modeltap_capture_content else None,
                run_id=self.run.run_id,
                logs=opts.modeltap_otlp_logs,
            )
        except ValueError as e:
            raise exceptions.OptionsError(str(e)) from None
        self.telemetry.shutdown()
        self.telemetry = telemetry
        # The observers keep the output for the spans when content capture is on.
        capture = telemetry.capture_content
        self.run.settings = replace(self.run.settings, capture_content=capture)
        # SPEC 9: every line written is also an OTLP log record (when exported).
        self.run.observe_lines(telemetry.line_observer)
        self.run.logs_dropped = telemetry.logs_dropped
        if telemetry.enabled:
            self.run.listeners.subscribe(self)
        else:
            self.run.listeners.unsubscribe(self)

    # ------------------------------------------------------------------ notices

    def started(self, view: ExchangeView, t_ns: int) -> None:
        if view.parent is not None:  # a WebSocket turn: a child of its connection's span
            span = self.telemetry.start_exchange(
                session_id=view.session_id,
                traceparent=view.traceparent,
                start_ns=epoch_ns(t_ns),
                transport=view.transport,
                parent=self._connections.get(view.parent),
                conversation_id=view.conversation_id,
            )
        else:
            assert view.api is not None
            span = self.telemetry.start_exchange(
                session_id=view.session_id,
                traceparent=view.traceparent,
                start_ns=epoch_ns(t_ns),
                conversation_id=view.conversation_id,
                provider=apis.provider_for(view.route, view.api, endpoint=view.endpoint),
                upstream=view.upstream,
                api=view.api,
            )
        self._exchanges[view.id] = span

    def audited(self, view: ExchangeView, facts: RequestFacts, body: bytes, t_ns: int) -> None:
        span = self._exchanges.get(view.id)
        if span is not None and view.record is not None:
            content = body if self.telemetry.capture_content else None
            span.audited(
                view.record,
                content,
                parsed=view.body,
                forwarded_ns=epoch_ns(t_ns),
                settings=facts.settings,
            )

    def first_byte(
        self, view: ExchangeView, status: int | None, headers: Mapping[str, str], t_ns: int
    ) -> None:
        span = self._exchanges.get(view.id)
        if span is not None:
            span.upstream_first_byte(epoch_ns(t_ns))

    def first_chunk(self, view: ExchangeView, t_ns: int) -> None:
        # Time to first chunk counts from forwarding. A WebSocket turn's span starts
        # then; an HTTP span starts at the request head, so it takes the response
        # event's ttft_ms (counted from forwarding) instead.
        span = self._exchanges.get(view.id)
        if span is not None and view.parent is not None:
            span.first_chunk(epoch_ns(t_ns))

    def finished(self, outcome: Outcome) -> None:
        if outcome.mcp is not None:
            self._mcp_finished(outcome)
        span = self._exchanges.pop(outcome.view.id, None)
        if span is None:
            return
        rejected = outcome.rejected
        span.finish(
            end_ns=epoch_ns(outcome.end_ns),
            response=outcome.response,
            error=outcome.error,
            rejected_rule=rejected.rule if rejected is not None else None,
            status_code=outcome.status,
            content=outcome.content,
            observed=outcome.observed,
        )
        record, response = outcome.view.record, outcome.response
        if record is not None and response is not None and response.tool_calls:
            self.telemetry.mcp.model_asked(record.session_id, record.seq, response.tool_calls)

    # ------------------------------------------------------------------ MCP

    def mcp_audited(
        self, view: ExchangeView, records: tuple[McpAuditRecord, ...], t_ns: int
    ) -> None:
        self.telemetry.mcp.sent(
            records, traceparent=view.traceparent, sent_ns=epoch_ns(t_ns), exchange_id=view.id
        )

    def forwarding(
        self, view: ExchangeView, body: bytes, headers: Mapping[str, str]
    ) -> Forward | Reply | None:
        # Only an MCP POST's tools/call arguments, only with content capture.
        if view.mcp_server is not None and body and self.telemetry.capture_content:
            self.telemetry.mcp.forwarded(view.id, body)
        return None

    def mcp_observed(
        self, view: ExchangeView, event: McpEvent, call: McpCall | None, t_ns: int
    ) -> None:
        if isinstance(event, McpResultEvent) and call is not None:
            self.telemetry.mcp.answered(call.record.seq, event, end_ns=epoch_ns(t_ns))

    def _mcp_finished(self, outcome: Outcome) -> None:
        mcp, view = outcome.mcp, outcome.view
        assert mcp is not None
        if mcp.refused is not None and outcome.rejected is not None:
            self.telemetry.mcp.refused(
                mcp.refused,
                session_id=view.session_id,
                traceparent=view.traceparent,
                rule=outcome.rejected.rule,
                start_ns=epoch_ns(outcome.end_ns),
                end_ns=epoch_ns(outcome.end_ns),
            )
            return
        error = outcome.error
        self.telemetry.mcp.exchange_ended(
            mcp.records,
            status=outcome.status,
            failure=error.error if error is not None else outcome.failure,
            end_ns=epoch_ns(outcome.end_ns),
        )

    def opened(self, view: ExchangeView, t_ns: int) -> None:
        self._connections[view.id] = self.telemetry.start_connection(
            session_id=view.session_id,
            traceparent=view.traceparent,
            start_ns=epoch_ns(t_ns),
            path=redact_path(view.path),
            upstream=view.upstream,
        )

    def closed(self, view: ExchangeView, event: WsCloseEvent, t_ns: int) -> None:
        span = self._connections.pop(view.id, None)
        if span is not None:
            span.finish(end_ns=epoch_ns(t_ns), code=event.code, error=None)

    def session_ended(self, session_id: str) -> None:
        self.telemetry.end_session(session_id)

    def stopped(self) -> None:
        self._exchanges.clear()
        self._connections.clear()
        self.summary = self.telemetry.shutdown()
