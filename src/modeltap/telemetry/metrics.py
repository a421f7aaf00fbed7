"""GenAI client metrics over OTLP, beside the spans (SPEC section 5).

Three histograms of semantic-conventions v1.41.1 (names and buckets in
:mod:`modeltap.telemetry.conventions`), recorded once per forwarded exchange:

- ``gen_ai.client.operation.duration`` (s): request arrival to the response's
  end, with ``error.type`` when the exchange failed;
- ``gen_ai.client.token.usage`` ({token}): input and output tokens as the
  conventions count them (``gen_ai.token.type`` ``input`` / ``output``), only
  when the provider reported them ("it MUST NOT report usage metric" it does
  not have);
- ``gen_ai.client.operation.time_to_first_chunk`` (s): streamed exchanges only.

The pipeline is the SDK's own: a private ``MeterProvider`` (the global one is
never set), a periodic reader and the official OTLP metric exporter (HTTP or
gRPC), on the same endpoint configuration as the spans. Like span export it
never touches traffic: the reader's thread does the network I/O, each export
is bounded by a timeout, and :meth:`MetricExport.shutdown` gives up at its
deadline. Failed exports are counted and said at exit.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource

from modeltap import __version__
from modeltap.telemetry import conventions as names
from modeltap.telemetry.attributes import Attributes
from modeltap.telemetry.export import shutdown_aside
from modeltap.telemetry.targets import ExportTarget, exporter_arguments

__all__ = ["DEFAULT_EXPORT_INTERVAL", "MetricExport"]

_logger = logging.getLogger("modeltap.telemetry")

#: Seconds between metric exports unless ``OTEL_METRIC_EXPORT_INTERVAL`` says.
DEFAULT_EXPORT_INTERVAL = 10.0


def build_metric_exporter(target: ExportTarget, timeout: float) -> MetricExporter:
    """The official OTLP metric exporter for ``target`` (HTTP protobuf or gRPC)."""
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(**exporter_arguments(target, timeout))
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as Http

    return Http(**exporter_arguments(target, timeout))


class _CountingMetricExporter(MetricExporter):
    """Counts what the real exporter delivered, and stops trying past a deadline."""

    def __init__(self, inner: MetricExporter) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner = inner
        self._lock = threading.Lock()
        self.exported = 0
        self.failed = 0
        self.give_up_at: float | None = None

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        if self.give_up_at is not None and time.monotonic() >= self.give_up_at:
            result = MetricExportResult.FAILURE
        else:
            try:
                result = self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            except Exception:
                _logger.debug("telemetry: metric export raised", exc_info=True)
                result = MetricExportResult.FAILURE
        with self._lock:
            if result is MetricExportResult.SUCCESS:
                self.exported += 1
                return result
            first_failure = self.failed == 0
            self.failed += 1
        if first_failure and self.give_up_at is None:
            _logger.warning("metrics: export failed; retried at the next interval")
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._inner.shutdown(timeout_millis=timeout_millis, **kwargs)


class MetricExport:
    """The metrics pipeline of one run and its three instruments.

    Args:
        target: where metrics go.
        service_name: ``service.name`` of the resource.
        resource_attributes: further resource attributes.
        export_timeout: seconds one export may take.
        export_interval: seconds between exports.
    """

    def __init__(
        self,
        target: ExportTarget,
        *,
        service_name: str,
        resource_attributes: Mapping[str, str],
        export_timeout: float,
        export_interval: float = DEFAULT_EXPORT_INTERVAL,
    ) -> None:
        self.target = target
        self._exporter = _CountingMetricExporter(build_metric_exporter(target, export_timeout))
        reader = PeriodicExportingMetricReader(
            self._exporter,
            export_interval_millis=export_interval * 1000,
            export_timeout_millis=export_timeout * 1000,
        )
        resource = Resource(
            {**resource_attributes, "service.name": service_name, "service.version": __version__}
        )
        self._provider = MeterProvider(
            metric_readers=[reader], resource=resource, shutdown_on_exit=False
        )
        meter = self._provider.get_meter(
            "modeltap", __version__, schema_url=names.METRICS_SCHEMA_URL
        )
        #: ``mcp.client.operation.duration``, recorded by :mod:`modeltap.telemetry.mcp`.
        self.mcp_operation_duration = meter.create_histogram(
            names.METRIC_MCP_CLIENT_OPERATION_DURATION,
            unit=names.UNIT_SECONDS,
            description=(
                "The duration of the MCP request or notification as observed on the sender"
                " from the time it was sent until the response or ack is received."
            ),
            explicit_bucket_boundaries_advisory=list(names.MCP_SECONDS_BUCKETS),
        )
        self._duration = meter.create_histogram(
            names.METRIC_OPERATION_DURATION,
            unit=names.UNIT_SECONDS,
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(names.SECONDS_BUCKETS),
        )
        self._tokens = meter.create_histogram(
            names.METRIC_TOKEN_USAGE,
            unit=names.UNIT_TOKENS,
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=list(names.TOKEN_BUCKETS),
        )
        self._first_chunk = meter.create_histogram(
            names.METRIC_TIME_TO_FIRST_CHUNK,
            unit=names.UNIT_SECONDS,
            description=(
                "Time to receive the first chunk, measured from when the client issues the"
                " generation request to when the first chunk is received in the response stream."
            ),
            explicit_bucket_boundaries_advisory=list(names.SECONDS_BUCKETS),
        )

    def record_exchange(
        self,
        attributes: Attributes,
        *,
        duration_s: float,
        error_type: str | None,
        input_tokens: int | None,
        output_tokens: int | None,
        time_to_first_chunk_s: float | None,
    ) -> None:
        """Record one exchange's measurements (see the module docstring).

        Args:
            attributes: the exchange's metric attributes.
            duration_s: request arrival to end, in seconds.
            error_type: ``error.type`` when it failed.
            input_tokens: input tokens as the conventions count them, if known.
            output_tokens: output tokens, if known.
            time_to_first_chunk_s: for a streamed exchange whose first chunk came.
        """
        failed = attributes | {names.ERROR_TYPE: error_type} if error_type else attributes
        self._duration.record(max(0.0, duration_s), failed)
        for kind, count in (
            (names.TOKEN_TYPE_INPUT, input_tokens),
            (names.TOKEN_TYPE_OUTPUT, output_tokens),
        ):
            if count is not None:
                self._tokens.record(count, attributes | {names.TOKEN_TYPE: kind})
        if time_to_first_chunk_s is not None:
            self._first_chunk.record(max(0.0, time_to_first_chunk_s), attributes)

    def _shutdown_provider(self, timeout_millis: float) -> None:
        try:
            self._provider.shutdown(timeout_millis=timeout_millis)
        except Exception:
            # A reader that ran out of time says so by raising: the exit line
            # already counts what was not exported.
            _logger.debug("telemetry: metrics shutdown incomplete", exc_info=True)

    def shutdown(self, deadline: float) -> str:
        """Export what is left and stop, giving up at ``deadline`` (:func:`time.monotonic`).

        Returns:
            One line for the exit screen, e.g.
            ``metrics: 3 exports, 0 failed (OTLP/HTTP -> http://...)``.
        """
        self._exporter.give_up_at = deadline
        millis = max(0.0, deadline - time.monotonic()) * 1000
        shutdown_aside(
            functools.partial(self._shutdown_provider, millis),
            "modeltap-metrics-shutdown",
            deadline,
        )
        return (
            f"metrics: {self._exporter.exported} exports, {self._exporter.failed} failed"
            f" ({self.target.describe()})"
        )
