"""A real OTLP receiver for tests: traces, metrics and logs, OTLP/HTTP protobuf and OTLP/gRPC.

Spans, metrics and log records arrive over the wire exactly as a collector
would get them, and are decoded into plain :class:`ReceivedSpan`,
:class:`ReceivedPoint` and :class:`ReceivedLog` objects to assert on. Each
receiver binds 127.0.0.1 on a free port and stops when its ``with`` block ends.

- :class:`HttpReceiver` serves ``POST /v1/traces``, ``/v1/metrics`` and
  ``/v1/logs`` (``http.server`` in a thread, HTTP/1.1 keep-alive).
- :class:`GrpcReceiver` serves ``TraceService/Export``,
  ``MetricsService/Export`` and ``LogsService/Export`` (``grpcio``).
- ``hang=SECONDS`` makes either one sit on each request before answering, a
  collector that accepts connections and never replies in time (nothing is
  kept).
- ``delay=SECONDS`` makes either one slow: each request is kept and answered
  after that long (a collector that keeps up badly, but keeps everything).
- :func:`closed_endpoint` gives a port nothing listens on: a collector that is
  down (connections are refused at once).
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

_KINDS = {
    trace_pb2.Span.SPAN_KIND_UNSPECIFIED: "UNSPECIFIED",
    trace_pb2.Span.SPAN_KIND_INTERNAL: "INTERNAL",
    trace_pb2.Span.SPAN_KIND_SERVER: "SERVER",
    trace_pb2.Span.SPAN_KIND_CLIENT: "CLIENT",
    trace_pb2.Span.SPAN_KIND_PRODUCER: "PRODUCER",
    trace_pb2.Span.SPAN_KIND_CONSUMER: "CONSUMER",
}
_STATUS = {
    trace_pb2.Status.STATUS_CODE_UNSET: "UNSET",
    trace_pb2.Status.STATUS_CODE_OK: "OK",
    trace_pb2.Status.STATUS_CODE_ERROR: "ERROR",
}


def decode_value(value: common_pb2.AnyValue) -> Any:
    """Turn an OTLP ``AnyValue`` into the Python value it carries."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [decode_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return {item.key: decode_value(item.value) for item in value.kvlist_value.values}
    return getattr(value, which)


def decode_attributes(attributes: Any) -> dict[str, Any]:
    """Turn repeated ``KeyValue`` into a dict."""
    return {item.key: decode_value(item.value) for item in attributes}


@dataclass(frozen=True)
class ReceivedEvent:
    """A span event as received."""

    name: str
    time_ns: int
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as a collector received it."""

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status: str
    status_message: str
    events: tuple[ReceivedEvent, ...]
    resource: dict[str, Any]
    scope: str
    #: Its links, as ``(trace id, span id)``.
    links: tuple[tuple[str, str], ...] = ()

    @classmethod
    def decode(cls, span: trace_pb2.Span, resource: dict[str, Any], scope: str) -> ReceivedSpan:
        """Build from a protobuf span."""
        return cls(
            name=span.name,
            kind=_KINDS[span.kind],
            trace_id=span.trace_id.hex(),
            span_id=span.span_id.hex(),
            parent_span_id=span.parent_span_id.hex() or None,
            start_ns=span.start_time_unix_nano,
            end_ns=span.end_time_unix_nano,
            attributes=decode_attributes(span.attributes),
            status=_STATUS[span.status.code],
            status_message=span.status.message,
            events=tuple(
                ReceivedEvent(event.name, event.time_unix_nano, decode_attributes(event.attributes))
                for event in span.events
            ),
            resource=resource,
            scope=scope,
            links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
        )


@dataclass(frozen=True)
class ReceivedPoint:
    """One histogram data point of one metric export, as received."""

    metric: str
    unit: str
    description: str
    attributes: dict[str, Any]
    count: int
    sum: float
    bucket_counts: tuple[int, ...]
    explicit_bounds: tuple[float, ...]
    temporality: str
    resource: dict[str, Any]
    scope: str
    schema_url: str

    @classmethod
    def decode_all(cls, request: metrics_service_pb2.ExportMetricsServiceRequest) -> list[Self]:
        """Every histogram point of an export request (other kinds are not expected)."""
        points = []
        for rm in request.resource_metrics:
            resource = decode_attributes(rm.resource.attributes)
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    assert metric.WhichOneof("data") == "histogram", metric.name
                    histogram = metric.histogram
                    temporality = metrics_pb2.AggregationTemporality.Name(
                        histogram.aggregation_temporality
                    )
                    for point in histogram.data_points:
                        points.append(
                            cls(
                                metric=metric.name,
                                unit=metric.unit,
                                description=metric.description,
                                attributes=decode_attributes(point.attributes),
                                count=point.count,
                                sum=point.sum,
                                bucket_counts=tuple(point.bucket_counts),
                                explicit_bounds=tuple(point.explicit_bounds),
                                temporality=temporality,
                                resource=resource,
                                scope=sm.scope.name,
                                schema_url=sm.schema_url,
                            )
                        )
        return points


@dataclass(frozen=True)
class ReceivedLog:
    """One log record as a collector received it."""

    body: Any
    attributes: dict[str, Any]
    event_name: str
    time_ns: int
    observed_time_ns: int
    severity_number: int
    severity_text: str
    trace_id: str | None
    span_id: str | None
    resource: dict[str, Any]
    scope: str

    @classmethod
    def decode(
        cls, record: logs_pb2.LogRecord, resource: dict[str, Any], scope: str
    ) -> ReceivedLog:
        """Build from a protobuf log record."""
        return cls(
            body=decode_value(record.body),
            attributes=decode_attributes(record.attributes),
            event_name=record.event_name,
            time_ns=record.time_unix_nano,
            observed_time_ns=record.observed_time_unix_nano,
            severity_number=record.severity_number,
            severity_text=record.severity_text,
            trace_id=record.trace_id.hex() or None,
            span_id=record.span_id.hex() or None,
            resource=resource,
            scope=scope,
        )


@dataclass
class _Store:
    """Spans, metric points and log records received so far, with a way to wait for more."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    points: list[ReceivedPoint] = field(default_factory=list)
    logs: list[ReceivedLog] = field(default_factory=list)
    requests: int = 0
    metric_requests: int = 0
    #: Bytes of the log export requests kept (as they arrived, before decoding).
    log_bytes: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)

    def add_logs(self, request: logs_service_pb2.ExportLogsServiceRequest, size: int) -> None:
        decoded = [
            ReceivedLog.decode(record, decode_attributes(rl.resource.attributes), sl.scope.name)
            for rl in request.resource_logs
            for sl in rl.scope_logs
            for record in sl.log_records
        ]
        with self.changed:
            self.log_bytes += size
        self._kept(self.logs, decoded)

    def add_metrics(self, request: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        decoded = ReceivedPoint.decode_all(request)
        with self.changed:
            self.metric_requests += 1
            self.points.extend(decoded)
            self.changed.notify_all()

    def add(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        decoded = [
            ReceivedSpan.decode(span, decode_attributes(rs.resource.attributes), ss.scope.name)
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]
        self._kept(self.spans, decoded)

    def _kept[T](self, kept: list[T], decoded: list[T]) -> None:
        """Count one trace or log export request and keep what it carried."""
        with self.changed:
            self.requests += 1
            kept.extend(decoded)
            self.changed.notify_all()

    def wait[T](self, kept: list[T], count: int, timeout: float) -> list[T]:
        """Wait until ``kept`` holds at least ``count`` items; return a snapshot of them."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while len(kept) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.changed.wait(remaining)
            return list(kept)


class _Receiver:
    """What both receivers share: the store, the hang switch, the context manager."""

    protocol: str

    def __init__(self, *, hang: float = 0.0, delay: float = 0.0) -> None:
        self.hang = hang
        self.delay = delay
        self._store = _Store()
        #: Set on stop so a hanging handler lets go at once.
        self._stopping = threading.Event()

    @property
    def logs(self) -> list[ReceivedLog]:
        """A snapshot of the log records received so far."""
        with self._store.changed:
            return list(self._store.logs)

    @property
    def log_bytes(self) -> int:
        """Bytes of the log export requests kept, as they came over the wire."""
        with self._store.changed:
            return self._store.log_bytes

    def wait_for_logs(self, count: int, timeout: float = 5.0) -> list[ReceivedLog]:
        """Wait until at least ``count`` log records arrived; return them all."""
        return self._store.wait(self._store.logs, count, timeout)

    @property
    def spans(self) -> list[ReceivedSpan]:
        """A snapshot of the spans received so far."""
        with self._store.changed:
            return list(self._store.spans)

    @property
    def requests(self) -> int:
        """How many export requests arrived (answered or not)."""
        with self._store.changed:
            return self._store.requests

    @property
    def points(self) -> list[ReceivedPoint]:
        """A snapshot of the metric points received so far (every export's)."""
        with self._store.changed:
            return list(self._store.points)

    def last_points(self) -> dict[tuple[str, tuple[tuple[str, Any], ...]], ReceivedPoint]:
        """The latest point of each metric and attribute set (cumulative: the totals)."""
        latest = {}
        for point in self.points:
            latest[(point.metric, tuple(sorted(point.attributes.items())))] = point
        return latest

    def wait_for(self, count: int, timeout: float = 5.0) -> list[ReceivedSpan]:
        """Wait until at least ``count`` spans arrived; return them all."""
        return self._store.wait(self._store.spans, count, timeout)

    def _received_metrics(self, body: bytes) -> None:
        request = metrics_service_pb2.ExportMetricsServiceRequest()
        request.ParseFromString(body)
        if self.hang:
            self._stopping.wait(self.hang)
            return
        if self.delay:
            self._stopping.wait(self.delay)
        self._store.add_metrics(request)

    def _held(self) -> bool:
        """Apply ``hang`` / ``delay`` to one request; False when it is not to be kept."""
        if self.hang:
            # Count the request, then sit on it: the exporter must give up.
            with self._store.changed:
                self._store.requests += 1
                self._store.changed.notify_all()
            self._stopping.wait(self.hang)
            return False
        if self.delay:
            self._stopping.wait(self.delay)
        return True

    def _received(self, body: bytes) -> None:
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        if self._held():
            self._store.add(request)

    def _received_logs(self, body: bytes) -> None:
        request = logs_service_pb2.ExportLogsServiceRequest()
        request.ParseFromString(body)
        if self._held():
            self._store.add_logs(request, len(body))

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class HttpReceiver(_Receiver):
    """OTLP/HTTP protobuf receiver on ``http://127.0.0.1:PORT/v1/traces``."""

    protocol = "http/protobuf"

    def __init__(self, *, hang: float = 0.0, delay: float = 0.0) -> None:
        super().__init__(hang=hang, delay=delay)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.1 keep-alive, as a collector serves it (the exporter reuses
            # its connection).
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/logs":
                    receiver._received_logs(body)
                    reply = logs_service_pb2.ExportLogsServiceResponse().SerializeToString()
                elif self.path == "/v1/traces":
                    receiver._received(body)
                    reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    receiver._received_metrics(body)
                    reply = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
                else:
                    self.send_error(404)
                    return
                if receiver._stopping.is_set():
                    self.close_connection = True
                    return
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # A short poll interval keeps stop() (and so every test's teardown) quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        """Base URL, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``--otlp`` would take it."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def traces_url(self) -> str:
        """The full traces URL (``.../v1/traces``)."""
        return f"{self.endpoint}/v1/traces"

    @property
    def logs_url(self) -> str:
        """The full logs URL (``.../v1/logs``)."""
        return f"{self.endpoint}/v1/logs"

    def start(self) -> None:
        """Serve in a daemon thread."""
        self._thread.start()

    def stop(self) -> None:
        """Release hanging handlers, stop serving and close the socket."""
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class _Service:
    """One OTLP gRPC service (``Export``): the request's bytes go to the receiver
    as over HTTP, and the answer is the service's empty response."""

    def __init__(self, received: Callable[[bytes], None], response: Callable[[], Any]) -> None:
        self._received = received
        self._response = response

    def Export(self, request: Any, context: Any) -> Any:
        self._received(request.SerializeToString())
        return self._response()


class GrpcReceiver(_Receiver):
    """OTLP/gRPC receiver on ``127.0.0.1:PORT`` (plaintext)."""

    protocol = "grpc"

    def __init__(self, *, hang: float = 0.0, delay: float = 0.0) -> None:
        super().__init__(hang=hang, delay=delay)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        # The generated gRPC module is untyped.
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _Service(self._received, trace_service_pb2.ExportTraceServiceResponse), self._server
        )
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _Service(self._received_metrics, metrics_service_pb2.ExportMetricsServiceResponse),
            self._server,
        )
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _Service(self._received_logs, logs_service_pb2.ExportLogsServiceResponse), self._server
        )
        self.port = int(self._server.add_insecure_port("127.0.0.1:0"))

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT`` (plaintext gRPC, as the OTLP exporter takes it)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def grpc_url(self) -> str:
        """``grpc://127.0.0.1:PORT``, the ``--otlp`` spelling."""
        return f"grpc://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start serving."""
        self._server.start()

    def stop(self) -> None:
        """Release hanging handlers and stop at once."""
        self._stopping.set()
        self._server.stop(grace=None).wait(5)


@contextmanager
def closed_endpoint() -> Iterator[int]:
    """Yield a loopback port that refuses connections: a collector that is down.

    The port stays bound (without listening) for the duration, so nothing
    else can take it and every connection attempt is refused at once.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])
    finally:
        sock.close()
