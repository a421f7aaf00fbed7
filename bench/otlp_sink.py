"""A minimal OTLP receiver for the bench, in its own process: OTLP/HTTP and OTLP/gRPC.

Run by ``bench/run.py``::

    python bench/otlp_sink.py [--delay SECONDS]

It prints ``PORTS <http> <grpc>`` once both listen, and on SIGINT/SIGTERM
(or after ``--max-seconds``) prints ``RECEIVED {json}``: spans, metric data
points and log records received per protocol, then exits. Each export is
decoded with the protobuf runtime (the C implementation: cheap) only to count
what it carries, so the proxy, not a collector, is what the bench measures.
``--delay`` answers every export that many seconds late (a collector that
keeps up badly but keeps everything). A dead collector needs no process: the
bench points modeltap at a port nothing listens on.

The services are ``opentelemetry-proto``'s, the same the test suite's
receiver (``tests/otlp_receiver.py``) serves; that one decodes every
attribute into Python objects to assert on, which costs more CPU than a
collector would on this 2-core machine.
"""

from __future__ import annotations

import argparse
import gzip
import json
import signal
import sys
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class Counts:
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.lock = threading.Lock()
        self.n: dict[str, int] = {}

    def add(self, key: str, value: int) -> None:
        with self.lock:
            self.n[key] = self.n.get(key, 0) + value

    def wait(self) -> None:
        if self.delay:
            time.sleep(self.delay)


def _spans(req: Any) -> int:
    return sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)


def _points(req: Any) -> int:
    n = 0
    for rm in req.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                if kind is not None:
                    n += len(getattr(m, kind).data_points)
    return n


def _logs(req: Any) -> int:
    return sum(len(sl.log_records) for rl in req.resource_logs for sl in rl.scope_logs)


#: path -> (request type, response type, counter, what it counts)
HTTP_ROUTES: dict[str, tuple[Any, Any, Any, str]] = {
    "/v1/traces": (
        trace_service_pb2.ExportTraceServiceRequest,
        trace_service_pb2.ExportTraceServiceResponse,
        _spans,
        "spans",
    ),
    "/v1/metrics": (
        metrics_service_pb2.ExportMetricsServiceRequest,
        metrics_service_pb2.ExportMetricsServiceResponse,
        _points,
        "points",
    ),
    "/v1/logs": (
        logs_service_pb2.ExportLogsServiceRequest,
        logs_service_pb2.ExportLogsServiceResponse,
        _logs,
        "logs",
    ),
}


def http_server(counts: Counts) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            route = HTTP_ROUTES.get(self.path)
            if route is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            req_type, resp_type, count, what = route
            counts.add(f"http {what}", count(req_type.FromString(body)))
            counts.wait()
            out = resp_type().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def grpc_server(counts: Counts) -> tuple[grpc.Server, int]:
    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            counts.add("grpc spans", _spans(request))
            counts.wait()
            return trace_service_pb2.ExportTraceServiceResponse()

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            counts.add("grpc points", _points(request))
            counts.wait()
            return metrics_service_pb2.ExportMetricsServiceResponse()

    class Logs(logs_service_pb2_grpc.LogsServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            counts.add("grpc logs", _logs(request))
            counts.wait()
            return logs_service_pb2.ExportLogsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    args = parser.parse_args()
    counts = Counts(args.delay)
    http = http_server(counts)
    grpc_srv, grpc_port = grpc_server(counts)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"PORTS {http.server_address[1]} {grpc_port}", flush=True)
    stop.wait(args.max_seconds)  # bounded: a forgotten receiver stops by itself
    with counts.lock:
        print("RECEIVED " + json.dumps(counts.n), flush=True)
    grpc_srv.stop(0)
    http.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
