"""OpenTelemetry spans and metrics (the waterfall of a run, SPEC section 5) and
log records (every JSONL line, section 9).

This package is the only part of modeltap that imports OpenTelemetry. The
addon hands it timestamps (epoch nanoseconds; converting monotonic clocks is
the caller's job) and the records it already built; it turns them into spans
and GenAI metrics and ships them over OTLP. Spans are for looking: nothing
here is evidence, and nothing here may delay, fail or drop traffic.

Trace layout::

    session s1                      INTERNAL, trace id = session_trace_id(run, s1)
     ├── chat gpt-5                 CLIENT, one per exchange (GenAI attributes)
     │    ├── wait upstream         forwarded -> upstream's first byte
     │    └── stream | receive      first byte -> end (``stream`` if it streamed)
     │    └── tools/call get_weather    CLIENT, the MCP execution of a call it asked for
     ├── execute_tool get_weather   INTERNAL, response asked -> request carried the result
     ├── chat gpt-5                 the next turn
     └── websocket /openai/v1/responses     CLIENT, one per WebSocket connection
          └── chat gpt-5            one per ``response.create``, phases as above

The package splits along one seam::

    Telemetry (this module)    the object the addon holds: configure, start spans, shut down
     ├── targets.py            where spans, metrics and logs go: --otlp and the OTEL_* variables
     ├── export.py             span export: trace ids, provider, counting, bounded shutdown
     ├── metrics.py            metric export and the GenAI client histograms
     ├── logs.py               every JSONL line as an OTLP log record, linked to its span
     └── span building
          ├── tree.py          where a span hangs: session roots, traceparent, open
          │                    spans, tool calls awaiting their results
          ├── spans.py         ExchangeSpan, ConnectionSpan and their phase spans
          ├── mcp.py           MCP client spans and mcp.client.operation.duration
          ├── attributes.py    attribute values, asked of the API modules (modeltap.apis)
          └── conventions.py   every name emitted, and the convention version followed

Telemetry reads no request or response body by key: provider, OpenAI API type
and content come from the API's module (:class:`modeltap.apis.contract.WireApi`),
so a new wire needs nothing here. Content (prompts, outputs) goes into spans
only with ``capture_content``, decided once at configuration. Secrets never
do: no headers are read here, and paths are redacted.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Final

from opentelemetry.sdk.resources import Resource
from opentelemetry.util.re import parse_env_headers

from modeltap import __version__
from modeltap.evidence.sink import LineObserver
from modeltap.telemetry.export import SessionIdGenerator, SpanExport, SpanStats, session_trace_id
from modeltap.telemetry.logs import LogExport, LogSettings, LogStats, log_settings_from_env
from modeltap.telemetry.mcp import McpSpans
from modeltap.telemetry.metrics import DEFAULT_EXPORT_INTERVAL, MetricExport
from modeltap.telemetry.spans import ConnectionSpan, ExchangeSpan
from modeltap.telemetry.targets import (
    NO_ENDPOINT,
    ExportTarget,
    capture_content_from_env,
    env_value,
    resolve_export_target,
)
from modeltap.telemetry.tree import SpanTree, never_raises

#: What the start-up and exit screens say of a signal that goes nowhere.
NOT_EXPORTED: Final = "not exported"

__all__ = [
    "ConnectionSpan",
    "ExchangeSpan",
    "ExportTarget",
    "LogStats",
    "SpanStats",
    "Telemetry",
    "capture_content_from_env",
    "resolve_export_target",
    "session_trace_id",
]


class Telemetry:
    """Tracer setup and span building for one modeltap run.

    Build it with :meth:`configure`. It owns a private ``TracerProvider`` and
    ``MeterProvider`` (the global ones are never set, so an embedding process
    keeps its own) and works as a no-op when no endpoint is configured.
    """

    def __init__(
        self,
        *,
        target: ExportTarget | None,
        capture_content: bool,
        run_id: str,
        service_name: str = "modeltap",
        resource_attributes: Mapping[str, str] | None = None,
        export_timeout: float = 3.0,
        shutdown_timeout: float = 5.0,
        max_queue_size: int = 2048,
        metrics_target: ExportTarget | None = None,
        metric_export_interval: float = DEFAULT_EXPORT_INTERVAL,
        logs_target: ExportTarget | None = None,
        log_settings: LogSettings | None = None,
    ) -> None:
        """Prefer :meth:`configure`; this takes already resolved settings."""
        self.target = target
        self.metrics_target = metrics_target
        self.logs_target = logs_target
        self.capture_content = capture_content
        self.run_id = run_id
        self._shutdown_timeout = shutdown_timeout
        self._summary: str | None = None
        ids = SessionIdGenerator()
        self._export: SpanExport | None = None
        if target is not None:
            self._export = SpanExport(
                target,
                ids=ids,
                service_name=service_name,
                resource_attributes=resource_attributes or {},
                export_timeout=export_timeout,
                max_queue_size=max_queue_size,
            )
        self._metrics: MetricExport | None = None
        if metrics_target is not None:
            self._metrics = MetricExport(
                metrics_target,
                service_name=service_name,
                resource_attributes=resource_attributes or {},
                export_timeout=export_timeout,
                export_interval=metric_export_interval,
            )
        self._tree = SpanTree(
            self._export.tracer if self._export is not None else None,
            ids,
            run_id=run_id,
            capture_content=capture_content,
            metrics=self._metrics,
        )
        #: The MCP client spans and metric, fed by the addon (SPEC 3b).
        self.mcp = McpSpans(self._tree)
        self._logs: LogExport | None = None
        if logs_target is not None:
            self._logs = LogExport(
                logs_target,
                settings=log_settings or LogSettings(export_timeout=export_timeout),
                resource=Resource(
                    {
                        **(resource_attributes or {}),
                        "service.name": service_name,
                        "service.version": __version__,
                    }
                ),
                links=self._tree,
            )

    @classmethod
    def configure(
        cls,
        *,
        otlp: str | None,
        capture_content: bool | None,
        service_name: str = "modeltap",
        environ: Mapping[str, str] | None = None,
        run_id: str = "",
        export_timeout: float = 3.0,
        shutdown_timeout: float = 5.0,
        max_queue_size: int = 2048,
        logs: bool = True,
    ) -> Telemetry:
        """Turn options and environment into a ready :class:`Telemetry`.

        Args:
            otlp: the ``--otlp`` URL, or ``None`` for the ``OTEL_EXPORTER_OTLP_*``
                variables (see :func:`resolve_export_target` for the rule).
            capture_content: ``--capture-content``; ``None`` reads
                ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``.
            service_name: ``service.name`` of the spans; ``OTEL_SERVICE_NAME``
                wins over the default. ``OTEL_RESOURCE_ATTRIBUTES`` is added.
            environ: the environment to read (default ``os.environ``).
            run_id: the run's id, part of each session's trace id.
            export_timeout: seconds one export may take (retries included).
            shutdown_timeout: seconds :meth:`shutdown` may take in all.
            max_queue_size: spans buffered before new ones are dropped.
            logs: ``--otlp-logs``: export every JSONL line as a log record when an
                endpoint is configured (``OTEL_EXPORTER_OTLP_LOGS_*`` or the shared
                variables; ``OTEL_LOGS_EXPORTER=none`` turns it off too). Queue and
                batch sizes come from ``OTEL_BLRP_*``.

        Returns:
            A :class:`Telemetry`; a no-op one when there is no endpoint. Spans
            and metrics share the endpoint configuration (see
            :func:`resolve_export_target`); ``OTEL_METRIC_EXPORT_INTERVAL``
            (milliseconds) sets how often metrics are sent.

        Raises:
            ValueError: an unusable ``--otlp`` URL or OTLP variable.
        """
        if environ is None:
            environ = os.environ
        target = resolve_export_target(otlp, environ, "traces")
        metrics_target = resolve_export_target(otlp, environ, "metrics")
        logs_target = resolve_export_target(otlp, environ, "logs") if logs else None
        log_settings = log_settings_from_env(environ, export_timeout) if logs_target else None
        interval = env_value(environ, "OTEL_METRIC_EXPORT_INTERVAL")
        try:
            metric_export_interval = (
                float(interval) / 1000 if interval is not None else DEFAULT_EXPORT_INTERVAL
            )
        except ValueError:
            raise ValueError(
                "OTEL_METRIC_EXPORT_INTERVAL must be a number of milliseconds"
            ) from None
        if capture_content is None:
            capture_content = capture_content_from_env(environ)
        resource_attributes = parse_env_headers(
            env_value(environ, "OTEL_RESOURCE_ATTRIBUTES") or "", liberal=True
        )
        if service_name == "modeltap":
            service_name = env_value(environ, "OTEL_SERVICE_NAME") or service_name
        settings = dict(
            target=target,
            capture_content=capture_content,
            run_id=run_id,
            service_name=service_name,
            resource_attributes=resource_attributes,
            export_timeout=export_timeout,
            shutdown_timeout=shutdown_timeout,
            max_queue_size=max_queue_size,
            metrics_target=metrics_target,
            metric_export_interval=max(0.1, metric_export_interval),
            logs_target=logs_target,
            log_settings=log_settings,
        )
        return cls._from_settings(settings)

    @classmethod
    def _from_settings(cls, settings: Mapping[str, object]) -> Telemetry:
        """Build from :meth:`configure`'s resolved settings (a subclass may build
        something else: :class:`~modeltap.telemetry.remote.RemoteTelemetry`)."""
        return Telemetry(**settings)  # type: ignore[arg-type]

    @property
    def enabled(self) -> bool:
        """Whether spans, metrics or log records are exported (false without endpoint
        or after shutdown)."""
        return self._summary is None and (
            self._tree.tracer is not None or self._tree.metrics is not None or bool(self._logs)
        )

    @property
    def line_observer(self) -> LineObserver | None:
        """What the sink calls with every line it wrote (``sink.observer``), while
        log records are exported; ``None`` otherwise."""
        return self._logs.observe if self._logs is not None else None

    def logs_dropped(self) -> int | None:
        """Log records known not to reach the collector so far, for ``sessions.jsonl``
        (``otlp_logs_dropped``); ``None`` when log records are not exported."""
        return self._logs.dropped if self._logs is not None else None

    def log_stats(self) -> LogStats | None:
        """Log record counts (exact once :meth:`shutdown` returned); ``None`` without log export."""
        return self._logs.stats() if self._logs is not None else None

    def describe_logs(self) -> str:
        """One line for the start-up screen: where the log records of the lines go."""
        if self.logs_target is None:
            return "logs: not exported (no OTLP endpoint, or --no-otlp-logs)"
        return f"logs: audit, events and sessions lines -> {self.logs_target.describe()}"

    def describe(self) -> str:
        """One line for the start-up screen: where spans and metrics go."""
        if self.target is None and self.metrics_target is None:
            return f"spans: {NO_ENDPOINT}"
        spans = self.target.describe() if self.target is not None else NOT_EXPORTED
        capture = ", prompt and output content captured" if self.capture_content else ""
        metrics = (
            self.metrics_target.describe() if self.metrics_target is not None else NOT_EXPORTED
        )
        return f"spans: {spans}{capture}; metrics: {metrics}"

    def stats(self) -> SpanStats:
        """Span counts so far (exact once :meth:`shutdown` returned)."""
        if self._export is None:
            return SpanStats(0, 0, 0)
        return self._export.stats()

    def start_exchange(
        self,
        *,
        session_id: str,
        traceparent: str | None,
        start_ns: int,
        transport: str = "http",
        parent: ConnectionSpan | None = None,
        conversation_id: str | None = None,
        provider: str | None = None,
        upstream: str | None = None,
        api: str | None = None,
    ) -> ExchangeSpan:
        """Open one exchange (an HTTP request or a ``response.create``).

        Its span starts at ``start_ns`` once :meth:`ExchangeSpan.audited` names
        its model and settings (or :meth:`ExchangeSpan.finish` says it was
        refused), so the sampling attributes are there at span creation.

        Args:
            session_id: the session (section 5); picks the trace.
            traceparent: the client's ``traceparent`` header, if sent; the span
                then joins that trace. Ignored when ``parent`` is given.
            start_ns: when the request arrived (epoch ns).
            transport: ``http`` or ``websocket``.
            parent: the WebSocket connection this message came on.
            conversation_id: the session when the user named it (the
                ``x-modeltap-session`` header or ``--session``), for
                ``gen_ai.conversation.id``; ``None`` for the run's or a
                connection's implicit session.
            provider: the exchange's ``gen_ai.provider.name``, when known
                before its audit (a refusal's span then names it; once
                audited, the record's ``provider`` is used).
            upstream: where it goes, when known before its audit.
            api: the API its endpoint names, when known before its audit
                (``gen_ai.operation.name`` of a refusal's span).

        Returns:
            The exchange's span; call :meth:`ExchangeSpan.finish` exactly once.
        """
        return ExchangeSpan(
            self._tree,
            session_id=session_id,
            traceparent=traceparent,
            start_ns=start_ns,
            transport=transport,
            parent=parent,
            conversation_id=conversation_id,
            provider=provider,
            upstream=upstream,
            api=api,
        )

    def start_connection(
        self,
        *,
        session_id: str,
        traceparent: str | None,
        start_ns: int,
        path: str,
        upstream: str,
    ) -> ConnectionSpan:
        """Open the span of one WebSocket connection.

        Each ``response.create`` on it gets its own exchange span through
        ``start_exchange(parent=connection, transport="websocket")``.

        Args:
            session_id: the session the connection belongs to.
            traceparent: the handshake's ``traceparent``, if sent.
            start_ns: when the handshake arrived (epoch ns).
            path: the handshake's path (query strings are left out of the name).
            upstream: the upstream base URL, for ``server.address``/``server.port``.

        Returns:
            The connection's span; call :meth:`ConnectionSpan.finish` once.
        """
        return ConnectionSpan(
            self._tree,
            session_id=session_id,
            traceparent=traceparent,
            start_ns=start_ns,
            path=path,
            upstream=upstream,
        )

    def lost(self, *, spans: int, lines: int) -> None:
        """Count spans and written lines that ended elsewhere and never reached this
        :class:`Telemetry` (an exporter process's facts dropped on the way): they
        are in the exit summary's dropped counts."""
        if self._export is not None and spans:
            self._export.lost(spans)
        if self._logs is not None and lines:
            self._logs.lost(lines)

    @never_raises
    def end_session(self, session_id: str, *, end_ns: int | None = None) -> None:
        """End a session's root span (when the session ends, e.g. its socket closed).

        Args:
            session_id: the session.
            end_ns: when it ended; default the end of its last finished span.
        """
        self.mcp.end_session(session_id, end_ns)
        self._tree.end_session(session_id, end_ns)

    def shutdown(self, *, end_ns: int | None = None) -> str:
        """End open spans, flush, and stop exporting, within ``shutdown_timeout``.

        Spans still open (an exchange cut short by Ctrl-C) are ended at
        ``end_ns`` (default now) with ``error.type`` ``modeltap.interrupted``;
        session roots are ended at their last exchange's end. Safe to call twice.

        Returns:
            The lines for the exit screen: ``spans: 12 exported, 0 dropped
            (OTLP/HTTP -> http://...); metrics: 2 exports, 0 failed (...)``, and
            when log records are exported a second line (after ``\n``) such as
            ``logs: 40 of 40 lines exported, 0 dropped (OTLP/HTTP -> http://...)``.
        """
        if self._summary is not None:
            return self._summary
        deadline = time.monotonic() + self._shutdown_timeout
        # Log records flush beside spans and metrics, within the same deadline.
        logs_summary: list[str] = []
        flush: threading.Thread | None = None
        if self._logs is not None:
            logs = self._logs
            flush = threading.Thread(
                target=lambda: logs_summary.append(logs.shutdown(deadline)),
                name="modeltap-logs-flush",
                daemon=True,
            )
            flush.start()
        if self._export is None and self._metrics is None:
            summary = f"spans: {NO_ENDPOINT}"
        else:
            # From here on new exchanges get no-op spans: nothing would export them.
            end = end_ns if end_ns is not None else time.time_ns()
            self.mcp.stop(end)
            self._tree.stop(end)
            spans = (
                self._export.shutdown(deadline)
                if self._export is not None
                else "spans: not exported"
            )
            metrics = f"metrics: {NOT_EXPORTED}"
            if self._metrics is not None:
                metrics = self._metrics.shutdown(deadline)
            summary = f"{spans}; {metrics}"
        if flush is not None:
            flush.join(max(0.0, deadline - time.monotonic()) + 1.0)
            summary += "\n" + (logs_summary[0] if logs_summary else "logs: flush did not end")
        self._summary = summary
        return self._summary
