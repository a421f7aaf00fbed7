"""Export plumbing: trace ids, a private tracer provider, counting, and a bounded shutdown.

Export never touches traffic: spans go through a bounded
:class:`~opentelemetry.sdk.trace.export.BatchSpanProcessor` whose worker thread
does the network I/O, each export is bounded by a short timeout, and
:meth:`SpanExport.shutdown` gives up at its deadline. Dropped spans are
counted as *ended minus successfully exported*: the SDK counts queue-full drops
only in its opt-in internal metrics, so a wrapping span processor counts spans
ended and a wrapping exporter counts spans the collector accepted. That single
difference covers a full queue, failed exports and spans still queued when
shutdown gave up.

A session's trace id is derived from the run and the session
(:func:`session_trace_id`), so anyone holding an audit line can compute the
trace to open; :class:`SessionIdGenerator` is how a session root gets it.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from modeltap import __version__
from modeltap.telemetry.targets import ExportTarget, exporter_arguments

__all__ = [
    "SessionIdGenerator",
    "SpanExport",
    "SpanStats",
    "build_exporter",
    "session_trace_id",
    "shutdown_aside",
]

_logger = logging.getLogger("modeltap.telemetry")


# --------------------------------------------------------------------------
# Trace ids


def session_trace_id_int(run_id: str, session_id: str) -> int:
    """:func:`session_trace_id` as the integer the SDK takes."""
    digest = hashlib.sha256(f"{run_id}\x00{session_id}".encode()).digest()
    # An all-zero trace id is invalid; a sha256 prefix of zero is not going to
    # happen, but the fallback keeps the id valid by construction.
    return int.from_bytes(digest[:16], "big") or 1


def session_trace_id(run_id: str, session_id: str) -> str:
    """Return the trace id (32 hex digits) of a session's spans.

    It is the first 16 bytes of ``sha256(run_id + "\\0" + session_id)``, so a
    report can link an audit line to its trace in Jaeger.
    """
    return f"{session_trace_id_int(run_id, session_id):032x}"


class SessionIdGenerator(IdGenerator):
    """Random ids, except that a session root takes the trace id it is handed.

    The SDK gives no way to choose a root span's trace id other than its id
    generator, so :class:`~modeltap.telemetry.spans.SpanTree` sets :attr:`forced_trace_id`
    for the duration of one ``start_span`` call.
    """

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self.forced_trace_id: ContextVar[int | None] = ContextVar(
            "modeltap_forced_trace_id", default=None
        )

    def generate_span_id(self) -> int:
        return self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        return self.forced_trace_id.get() or self._random.generate_trace_id()


# --------------------------------------------------------------------------
# Counting


@dataclass(frozen=True, slots=True)
class SpanStats:
    """Span counts at a point in time.

    Attributes:
        ended: spans modeltap finished (each was handed to the batch processor).
        exported: spans the collector accepted.
        failed: spans in exports that failed (collector down, timeout, refusal).
        dropped: spans that will not reach the collector: ``ended - exported``
            (failed exports, a full queue, or still queued when shutdown gave up).
    """

    ended: int
    exported: int
    failed: int

    @property
    def dropped(self) -> int:
        """Spans ended but not exported."""
        return max(0, self.ended - self.exported)


class _CountingExporter(SpanExporter):
    """Counts what the real exporter delivered, and stops trying past a deadline."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.exported = 0
        self.failed = 0
        #: Set by shutdown: after it, batches are failed at once instead of
        #: waiting out a dead collector batch by batch.
        self.give_up_at: float | None = None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.give_up_at is not None and time.monotonic() >= self.give_up_at:
            result = SpanExportResult.FAILURE
        else:
            try:
                result = self._inner.export(spans)
            except Exception:
                _logger.debug("telemetry: span export raised", exc_info=True)
                result = SpanExportResult.FAILURE
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
                return result
            first_failure = self.failed == 0
            self.failed += len(spans)
        if first_failure and self.give_up_at is None:
            # Once, not per batch: a dead collector must not flood the console.
            _logger.warning("spans: export failed; spans are dropped and counted until it recovers")
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _CountingProcessor(SpanProcessor):
    """Counts ended spans on their way into the batch processor."""

    def __init__(self, inner: SpanProcessor) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.ended = 0

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self.ended += 1
        self._inner.on_end(span)

    def lost(self, n: int) -> None:
        """Count ``n`` spans that ended where this process never saw them
        (:mod:`modeltap.telemetry.remote`'s facts dropped on the way)."""
        with self._lock:
            self.ended += n

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def build_exporter(target: ExportTarget, timeout: float) -> SpanExporter:
    """The official OTLP span exporter for ``target`` (HTTP protobuf or gRPC)."""
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(**exporter_arguments(target, timeout))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    return Http(**exporter_arguments(target, timeout))


def shutdown_aside(shutdown: Callable[[], object], name: str, deadline: float) -> None:
    """Run an SDK provider's ``shutdown`` on a thread of its own, waiting until ``deadline``.

    The SDK's shutdowns join their workers for up to 30 s and cannot be told
    otherwise; modeltap stops waiting at its own deadline (half a second
    past it, for a worker just finishing). The thread is a daemon: one still
    stuck on a dead collector does not hold the process.

    Args:
        shutdown: the provider's shutdown (``TracerProvider.shutdown``, ...).
        name: the thread's name.
        deadline: a :func:`time.monotonic` time.
    """
    worker = threading.Thread(target=shutdown, name=name, daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()) + 0.5)


# --------------------------------------------------------------------------
# The pipeline


class SpanExport:
    """The export pipeline of one run: a private ``TracerProvider``, counted.

    The global provider is never set, so an embedding process keeps its own.
    Sampling is ``ALWAYS_ON`` on purpose: an unsampled parent must not hide
    audited exchanges from the waterfall.

    Args:
        target: where spans go.
        ids: the id generator (shared with the span tree, which forces the
            trace id of session roots through it).
        service_name: ``service.name`` of the resource.
        resource_attributes: further resource attributes.
        export_timeout: seconds one export may take (retries included).
        max_queue_size: spans buffered before new ones are dropped.
    """

    def __init__(
        self,
        target: ExportTarget,
        *,
        ids: SessionIdGenerator,
        service_name: str,
        resource_attributes: Mapping[str, str],
        export_timeout: float,
        max_queue_size: int,
    ) -> None:
        self.target = target
        self._exporter = _CountingExporter(build_exporter(target, export_timeout))
        batch = BatchSpanProcessor(
            self._exporter,
            max_queue_size=max_queue_size,
            # Spans should show up in Jaeger while the run goes on.
            schedule_delay_millis=1000,
            max_export_batch_size=min(512, max_queue_size),
        )
        self._processor = _CountingProcessor(batch)
        resource = Resource(
            {
                **resource_attributes,
                "service.name": service_name,
                "service.version": __version__,
            }
        )
        self._provider = TracerProvider(
            sampler=ALWAYS_ON,
            resource=resource,
            id_generator=ids,
            # modeltap flushes in its own shutdown, with a deadline; the SDK's
            # exit hook would wait up to 30 s on a dead collector.
            shutdown_on_exit=False,
        )
        self._provider.add_span_processor(self._processor)
        self.tracer: trace.Tracer = self._provider.get_tracer("modeltap", __version__)

    def lost(self, n: int) -> None:
        """Count ``n`` ended spans that never reached this process: dropped."""
        self._processor.lost(n)

    def stats(self) -> SpanStats:
        """Span counts so far (exact once :meth:`shutdown` returned)."""
        return SpanStats(self._processor.ended, self._exporter.exported, self._exporter.failed)

    def shutdown(self, deadline: float) -> str:
        """Flush and stop exporting, giving up at ``deadline``.

        Args:
            deadline: a :func:`time.monotonic` time.

        Returns:
            One line for the exit screen, e.g.
            ``spans: 12 exported, 0 dropped (OTLP/HTTP -> http://...)``.
        """
        # The batch processor's own shutdown joins its worker for up to 30 s
        # and cannot be told otherwise; run it aside and stop waiting at our
        # deadline. Past the deadline the exporter fails batches at once, so
        # the worker drains instead of timing out batch by batch.
        self._exporter.give_up_at = deadline
        shutdown_aside(self._provider.shutdown, "modeltap-telemetry-shutdown", deadline)
        stats = self.stats()
        if stats.dropped:
            unsent = max(0, stats.dropped - stats.failed)
            detail = f"{stats.dropped} dropped ({stats.failed} in failed exports, {unsent} unsent)"
        else:
            detail = "0 dropped"
        return f"spans: {stats.exported} exported, {detail} ({self.target.describe()})"
