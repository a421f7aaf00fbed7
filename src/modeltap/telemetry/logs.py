"""OTLP log records: every audit record, event and session line, for fleet-wide search.

SPEC section 9. The local JSONL files stay the evidence; this is a copy for a
Collector, made from the very bytes the sink appended (the sink's observer,
:data:`modeltap.evidence.sink.LineObserver`), so the copy cannot drift from the file:

- **Body**: the line as a string, without its ``\\n``: ``body.encode() + b"\\n"``
  is the local line byte for byte. A string, not a structured map: a map
  would be re-serialised by every hop (key order, number spelling), and the
  Collector's ClickHouse exporter stores a string body as it is, so
  ``JSONExtract*(Body, ...)`` reads the same JSON the file holds.
- **Attributes** repeat what backends index on: ``modeltap.run_id``,
  ``modeltap.session_id``, ``modeltap.seq``, ``modeltap.request_id``,
  ``modeltap.kind`` (``audit``, ``session`` or the event's ``kind``),
  ``modeltap.api``, ``log.file.name`` (as the Collector's ``file_log``
  receiver names it, so both paths look alike), ``log.record.uid`` (SHA-256
  of the body: the same line sent twice, or by both paths, dedupes on it),
  and the GenAI convention's names where the line has the fact
  (``gen_ai.operation.name``, ``gen_ai.provider.name``,
  ``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.response.id``,
  ``http.response.status_code``, ``error.type``).
- **Event name** (the logs data model's ``EventName``): ``modeltap.{kind}``,
  e.g. ``modeltap.audit``, ``modeltap.response``, ``modeltap.session``.
- **Time**: the line's ``ts``; observed time is when it was handed over.
- **Trace context**: a line with a ``seq`` links to its exchange's span (the
  one carrying ``modeltap.seq``); other lines to their session's root span
  while it is open; else none. The audit line is written before its span
  learns its ``seq``, so its record waits in memory for the link (the glue
  names the span right after the write); a record still waiting after
  :data:`LINK_WAIT_S` goes unlinked with the next line, or at shutdown.

Delivery is never awaited and never assumed. Records go through the SDK's
``BatchLogRecordProcessor`` (its worker thread does the network I/O; the
``OTEL_BLRP_*`` variables size it) to the official OTLP exporter, HTTP or
gRPC. A line is **dropped** when it will not reach the collector: refused
because the queue was full, in an export that failed (collector down, slow
past the timeout, refusing), or still queued when shutdown gave up. Counting
is exact, because modeltap never lets the SDK's queue overflow (it refuses a
record itself, and counts it, when the records not yet exported fill the
queue): ``written = exported + dropped`` once :meth:`LogExport.shutdown`
returned. A batch whose export was still unanswered at that moment counts
as dropped (the collector may yet keep it), so the count never claims a
delivery that was not acknowledged. The official exporters do not report an
OTLP partial success: records a collector accepted and then rejected in its
answer count as exported.

Why ~600 lines in one module: the export's accounting (queue, drops,
shutdown, the written = exported + dropped invariant) is one state machine;
split, its invariant would be spread over files.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry import trace
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.context import Context
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext

from modeltap import __version__
from modeltap.evidence.records import Usage
from modeltap.telemetry import conventions as names
from modeltap.telemetry.attributes import api_identity, usage_totals
from modeltap.telemetry.export import shutdown_aside
from modeltap.telemetry.targets import ExportTarget, env_value, exporter_arguments
from modeltap.telemetry.tree import SpanTree

__all__ = [
    "LINK_WAIT_S",
    "LogExport",
    "LogSettings",
    "LogStats",
    "log_attributes",
    "log_settings_from_env",
]

_logger = logging.getLogger("modeltap.telemetry")

#: ``modeltap.kind`` of ``audit.jsonl`` and ``sessions.jsonl`` lines (events carry their own).
KIND_AUDIT: Final = "audit"
KIND_SESSION: Final = "session"
_KIND_BY_FILE: Final = {"audit.jsonl": KIND_AUDIT, "sessions.jsonl": KIND_SESSION}

#: The longest an audit line's record waits for its exchange span's context.
LINK_WAIT_S: Final = 1.0

_INFO = (SeverityNumber.INFO, "INFO")
_WARN = (SeverityNumber.WARN, "WARN")
_ERROR = (SeverityNumber.ERROR, "ERROR")

#: Kept in a record when nothing links it: an explicit invalid span, so the
#: SDK never borrows the caller's current span (an embedding test's own trace).
_UNLINKED: Final = trace.set_span_in_context(trace.INVALID_SPAN, Context())


# --------------------------------------------------------------------------
# Settings


@dataclass(frozen=True, slots=True)
class LogSettings:
    """The batch processor's sizes (``OTEL_BLRP_*``) and the export's bounds.

    Attributes:
        max_queue_size: records waiting for export before new ones are dropped.
        max_export_batch_size: records per export request.
        schedule_delay_ms: the longest a record waits for its batch.
        export_timeout: seconds one export may take, retries included.
    """

    max_queue_size: int = 2048
    max_export_batch_size: int = 512
    schedule_delay_ms: int = 1000
    export_timeout: float = 3.0


def log_settings_from_env(environ: Mapping[str, str], export_timeout: float) -> LogSettings:
    """Read ``OTEL_BLRP_MAX_QUEUE_SIZE``, ``OTEL_BLRP_MAX_EXPORT_BATCH_SIZE`` and
    ``OTEL_BLRP_SCHEDULE_DELAY`` (milliseconds), as the OpenTelemetry SDK does.

    Raises:
        ValueError: a value is not a positive whole number, or the batch is
            larger than the queue.
    """
    defaults = LogSettings()
    values: dict[str, int] = {}
    for name, field, default in (
        ("OTEL_BLRP_MAX_QUEUE_SIZE", "max_queue_size", defaults.max_queue_size),
        ("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "max_export_batch_size", 0),
        ("OTEL_BLRP_SCHEDULE_DELAY", "schedule_delay_ms", defaults.schedule_delay_ms),
    ):
        raw = env_value(environ, name)
        if raw is None:
            values[field] = default
            continue
        if not raw.isdigit() or int(raw) <= 0:
            raise ValueError(f"{name} must be a positive whole number")
        values[field] = int(raw)
    if not values["max_export_batch_size"]:
        values["max_export_batch_size"] = min(
            defaults.max_export_batch_size, values["max_queue_size"]
        )
    if values["max_export_batch_size"] > values["max_queue_size"]:
        raise ValueError("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE must not exceed OTEL_BLRP_MAX_QUEUE_SIZE")
    return LogSettings(**values, export_timeout=export_timeout)


# --------------------------------------------------------------------------
# One line -> one log record


@functools.lru_cache(maxsize=4)
def _epoch_second(prefix: str) -> int | None:
    try:
        moment = datetime.datetime.fromisoformat(prefix + "+00:00")
    except ValueError:
        return None
    return int(moment.timestamp())


def _ts_ns(ts: object) -> int | None:
    """Epoch ns of a line's ``ts`` (``2026-01-02T03:04:05.678Z``); ``None`` if unreadable."""
    if not isinstance(ts, str):
        return None
    if len(ts) == 24 and ts[19] == "." and ts[23] == "Z" and ts[20:23].isdigit():
        second = _epoch_second(ts[:19])  # one parse per second of traffic
        if second is not None:
            return second * 1_000_000_000 + int(ts[20:23]) * 1_000_000
    try:
        moment = datetime.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return int(moment.timestamp() * 1e6) * 1000


def _kind(file: str, record: object) -> str:
    kind = _KIND_BY_FILE.get(file)
    if kind is not None:
        return kind
    value = getattr(record, "kind", None)
    return value if isinstance(value, str) else "unknown"


#: Attributes every line's record carries when its line has the field.
_LINE_FIELDS: Final = (
    (names.MODELTAP_RUN_ID, "run_id"),
    (names.MODELTAP_SESSION_ID, "session_id"),
    (names.MODELTAP_SEQ, "seq"),
    (names.MODELTAP_REQUEST_ID, "request_id"),
    (names.MODELTAP_API, "api"),
)
#: Attributes of a ``response`` line's record.
_RESPONSE_FIELDS: Final = (
    (names.RESPONSE_MODEL, "model"),
    (names.RESPONSE_ID, "response_id"),
    (names.HTTP_RESPONSE_STATUS_CODE, "status"),
)


def log_attributes(file: str, body: bytes, record: object) -> dict[str, Any]:
    """The attributes of one line's log record (see the module docstring).

    Args:
        file: the file's name (``audit.jsonl``, ``events.jsonl``, ``sessions.jsonl``).
        body: the line without its ``\\n``.
        record: the record, event or session status the line was made from.

    Returns:
        Attribute names to values; facts the line does not have are left out.
    """
    kind = _kind(file, record)
    attributes: dict[str, Any] = {
        names.MODELTAP_KIND: kind,
        names.LOG_FILE_NAME: file,
        names.LOG_RECORD_UID: hashlib.sha256(body).hexdigest(),
    }
    # Fields a line does not have are None here, and left out at the end.
    attributes |= {name: getattr(record, key, None) for name, key in _LINE_FIELDS}
    api = attributes.get(names.MODELTAP_API)
    if kind == KIND_AUDIT:
        attributes[names.OPERATION_NAME] = names.operation_of(api if isinstance(api, str) else None)
        attributes[names.REQUEST_MODEL] = getattr(record, "model", None)
        # The route's real provider (azure.ai.openai, aws.bedrock, ...) as the audit
        # line states it (else its wire's). Other lines do not say it: left out.
        provider = getattr(record, "provider", None)
        if provider is None and isinstance(api, str):
            provider, _ = api_identity(api)
        attributes[names.PROVIDER_NAME] = provider
    elif kind == "response":
        attributes[names.OPERATION_NAME] = names.operation_of(api if isinstance(api, str) else None)
        attributes |= {name: getattr(record, key, None) for name, key in _RESPONSE_FIELDS}
        usage = getattr(record, "usage", None)
        if isinstance(usage, Usage) and isinstance(api, str):
            # As the conventions count them (all input tokens, cached ones
            # included); the body keeps the provider's own numbers.
            totals = usage_totals(api, usage)
            attributes[names.USAGE_INPUT_TOKENS] = totals.input_tokens
            attributes[names.USAGE_OUTPUT_TOKENS] = totals.output_tokens
    elif kind == "rejected":
        attributes[names.ERROR_TYPE] = getattr(record, "rule", None)
        attributes[names.HTTP_RESPONSE_STATUS_CODE] = getattr(record, "status", None)
    elif kind == "error":
        attributes[names.ERROR_TYPE] = getattr(record, "error", None)
    return {key: value for key, value in attributes.items() if value is not None}


def _severity(kind: str, record: object) -> tuple[SeverityNumber, str]:
    """ERROR for an ``error`` event; WARN for refusals, moved files, failed or partial
    responses and sessions that did not complete with full evidence; else INFO."""
    if kind == "error":
        return _ERROR
    if kind in ("rejected", "file_reopened"):
        return _WARN
    if kind == "response":
        status = getattr(record, "status", None)
        failed = isinstance(status, int) and status >= 400
        return _WARN if failed or getattr(record, "evidence_complete", True) is False else _INFO
    if kind == KIND_SESSION:
        complete = getattr(record, "stop_reason", None) == "completed"
        return _INFO if complete and getattr(record, "evidence_complete", None) is True else _WARN
    return _INFO


# --------------------------------------------------------------------------
# Counting


@dataclass(frozen=True, slots=True)
class LogStats:
    """Log record counts at a point in time.

    Attributes:
        written: lines handed over (each one a local line that was written).
        exported: records the collector acknowledged.
        failed: records in exports that failed (collector down, timeout, refusal).
        queue_full: records refused because the queue was full.
        unanswered: records in an export still unanswered (at exit: counted dropped).
    """

    written: int
    exported: int
    failed: int
    queue_full: int
    unanswered: int = 0

    @property
    def dropped(self) -> int:
        """Records that did not reach the collector so far: failed and refused ones.

        Exact once :meth:`LogExport.shutdown` returned, when it is
        ``written - exported``; before that, records still queued are not in it.
        """
        return self.failed + self.queue_full

    @property
    def unsent(self) -> int:
        """Records neither exported nor dropped yet (queued, or being exported)."""
        return self.written - self.exported - self.failed - self.queue_full


class _CountingLogExporter(LogRecordExporter):
    """Counts what the real exporter delivered, and stops trying past a deadline."""

    def __init__(self, inner: LogRecordExporter) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.exported = 0
        self.failed = 0
        self.in_flight = 0
        #: Set by shutdown: after it, batches fail at once instead of waiting out
        #: a dead collector batch by batch.
        self.give_up_at: float | None = None

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        count = len(batch)
        with self._lock:
            self.in_flight += count
        result = LogRecordExportResult.FAILURE
        try:
            if self.give_up_at is None or time.monotonic() < self.give_up_at:
                result = self._inner.export(batch)
        except Exception:
            _logger.debug("telemetry: log export raised", exc_info=True)
        first_failure = False
        with self._lock:
            self.in_flight -= count
            if result is LogRecordExportResult.SUCCESS:
                self.exported += count
            else:
                first_failure = self.failed == 0
                self.failed += count
        if first_failure and self.give_up_at is None:
            # Once, not per batch: a dead collector must not flood the console.
            _logger.warning(
                "logs: OTLP export failed; log records are dropped and counted until it "
                "recovers (the JSONL files are complete)"
            )
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def build_log_exporter(target: ExportTarget, timeout: float) -> LogRecordExporter:
    """The official OTLP log exporter for ``target`` (HTTP protobuf or gRPC)."""
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

        return OTLPLogExporter(**exporter_arguments(target, timeout))
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as Http

    return Http(**exporter_arguments(target, timeout))


# --------------------------------------------------------------------------
# The pipeline


class LogExport:
    """The log pipeline of one run: a private ``LoggerProvider``, counted.

    Hand :meth:`observe` to the sink (``sink.observer``); call :meth:`shutdown`
    once, after the last line. The global logger provider is never set.

    Args:
        target: where log records go.
        settings: queue, batch and timeout sizes.
        resource: the run's resource (the same as the spans').
        links: the span tree that tells each line's span, or ``None``
            (no spans: records go out unlinked).
    """

    def __init__(
        self,
        target: ExportTarget,
        *,
        settings: LogSettings,
        resource: Resource,
        links: SpanTree | None,
    ) -> None:
        self.target = target
        self.settings = settings
        self._links = links
        self._exporter = _CountingLogExporter(build_log_exporter(target, settings.export_timeout))
        self._provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
        self._provider.add_log_record_processor(
            BatchLogRecordProcessor(
                self._exporter,
                schedule_delay_millis=settings.schedule_delay_ms,
                max_export_batch_size=settings.max_export_batch_size,
                max_queue_size=settings.max_queue_size,
            )
        )
        self._logger = self._provider.get_logger("modeltap", __version__)
        self._lock = threading.Lock()
        self._written = 0
        self._accepted = 0
        self._queue_full = 0
        self._closed = False
        self._summary: str | None = None
        #: The counts at shutdown, once everything unacknowledged was counted dropped.
        self._final: LogStats | None = None
        #: Audit lines waiting for their exchange span: seq -> (since, file, line, record).
        self._waiting: OrderedDict[int, tuple[float, str, bytes, object]] = OrderedDict()
        if links is not None:
            links.on_link = self._linked

    # ------------------------------------------------------------------ lines in

    def observe(self, file: str, line: bytes, record: object) -> None:
        """The sink's observer: one written line becomes one log record.

        Never raises and never waits: a record that cannot be queued is counted.

        Args:
            file: the file the line went to.
            line: the exact bytes appended (ending in ``\\n``).
            record: what the line was made from.
        """
        now = time.monotonic()
        with self._lock:
            self._written += 1
            if self._closed:
                self._queue_full += 1  # after shutdown: nothing will send it
                return
            seq = getattr(record, "seq", None)
            wait = (
                file == "audit.jsonl"
                and isinstance(seq, int)
                and self._links is not None
                and self._links.tracer is not None
                and self._links.exchange_link(seq) is None
            )
            if wait:
                assert isinstance(seq, int)
                self._waiting[seq] = (now, file, line, record)
            overdue = self._overdue(now)
        for item in overdue:
            self._send(*item[1:])
        if not wait:
            self._send(file, line, record)

    def _overdue(self, now: float) -> list[tuple[float, str, bytes, object]]:
        """Waiting records past :data:`LINK_WAIT_S` (their span never learnt its seq)."""
        overdue = []
        while self._waiting:
            seq, item = next(iter(self._waiting.items()))
            if now - item[0] < LINK_WAIT_S:
                break
            del self._waiting[seq]
            overdue.append(item)
        return overdue

    def _linked(self, seq: int, context: SpanContext) -> None:
        """An exchange span learnt its seq: send the audit line that waited for it."""
        with self._lock:
            item = self._waiting.pop(seq, None)
        if item is not None:
            self._send(item[1], item[2], item[3], context)

    def _send(
        self, file: str, line: bytes, record: object, link: SpanContext | None = None
    ) -> None:
        try:
            if link is None and self._links is not None:
                seq = getattr(record, "seq", None)
                link = self._links.link_for(
                    seq if isinstance(seq, int) else None, str(getattr(record, "session_id", ""))
                )
            body = line[:-1] if line.endswith(b"\n") else line
            kind = _kind(file, record)
            severity, severity_text = _severity(kind, record)
            log_record = LogRecord(
                timestamp=_ts_ns(getattr(record, "ts", None)),
                context=(
                    trace.set_span_in_context(NonRecordingSpan(link), Context())
                    if link is not None and link.is_valid
                    else _UNLINKED
                ),
                severity_number=severity,
                severity_text=severity_text,
                body=body.decode("utf-8"),
                attributes=log_attributes(file, body, record),
                event_name=names.EVENT_NAME_PREFIX + kind,
            )
        except Exception:
            # A record we cannot build is a record we do not send: count it.
            _logger.debug("telemetry: a log record could not be built", exc_info=True)
            with self._lock:
                self._queue_full += 1
            return
        with self._lock:
            queued = self._accepted - self._exporter.exported - self._exporter.failed
            if queued >= self.settings.max_queue_size:
                # Never let the SDK's queue overflow: it drops silently, we count.
                self._queue_full += 1
                return
            self._accepted += 1
        self._logger.emit(log_record)

    def lost(self, n: int) -> None:
        """Count ``n`` written lines that never reached this process
        (:mod:`modeltap.telemetry.remote`'s facts dropped on the way): refused."""
        with self._lock:
            self._written += n
            self._queue_full += n

    # ------------------------------------------------------------------ counts out

    def stats(self) -> LogStats:
        """Counts so far (final, and exact, once :meth:`shutdown` returned)."""
        if self._final is not None:
            return self._final
        with self._lock:
            written, queue_full = self._written, self._queue_full
        exporter = self._exporter
        return LogStats(
            written=written,
            exported=exporter.exported,
            failed=exporter.failed,
            queue_full=queue_full,
            unanswered=exporter.in_flight,
        )

    def shutdown(self, deadline: float) -> str:
        """Send what waits, flush, and stop exporting, giving up at ``deadline``.

        Args:
            deadline: a :func:`time.monotonic` time.

        Returns:
            One line for the exit screen, e.g.
            ``logs: 40 of 40 lines exported, 0 dropped (OTLP/HTTP -> http://...)``.
        """
        if self._summary is not None:
            return self._summary
        with self._lock:
            waiting = list(self._waiting.values())
            self._waiting.clear()
        for item in waiting:
            self._send(*item[1:])
        with self._lock:
            self._closed = True
        # As for spans: the SDK's shutdown joins its worker for up to 30 s, so run
        # it aside; past the deadline the exporter fails batches at once.
        self._exporter.give_up_at = deadline
        shutdown_aside(self._provider.shutdown, "modeltap-logs-shutdown", deadline)
        before = self.stats()
        # Whatever was not acknowledged by now is dropped: records still queued,
        # or in an export nobody answered (the collector may yet keep those).
        self._final = LogStats(
            written=before.written,
            exported=before.exported,
            failed=before.failed + before.unanswered,
            queue_full=before.queue_full + before.unsent - before.unanswered,
        )
        self._summary = describe_stats(self._final, before, self.target)
        return self._summary

    @property
    def dropped(self) -> int:
        """Records known not to reach the collector so far (for ``sessions.jsonl``)."""
        return self.stats().dropped


def describe_stats(final: LogStats, before: LogStats, target: ExportTarget) -> str:
    """The exit line: ``logs: E of W lines exported, D dropped (...)``.

    Args:
        final: the counts once everything unacknowledged was counted dropped.
        before: the counts just before (to tell queued and unanswered apart).
        target: where the records went.
    """
    head = f"logs: {final.exported} of {final.written} lines exported"
    if not final.dropped:
        return f"{head}, 0 dropped ({target.describe()})"
    parts = []
    if before.failed:
        parts.append(f"{before.failed} in failed exports")
    if before.queue_full:
        parts.append(f"{before.queue_full} over the queue")
    queued = before.unsent - before.unanswered
    if queued:
        parts.append(f"{queued} still queued at exit")
    if before.unanswered:
        parts.append(f"{before.unanswered} in an export unanswered at exit")
    detail = ", ".join(parts)
    return f"{head}, {final.dropped} dropped ({detail}) ({target.describe()})"
