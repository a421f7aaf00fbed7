"""telemetry/logs.py: one line, one log record; where they go; what was dropped."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from modeltap.evidence.records import SessionStatus, WsOpenEvent
from modeltap.evidence.sink import Sink
from modeltap.telemetry import Telemetry, logs, resolve_export_target
from modeltap.telemetry.logs import LogSettings, _ts_ns, log_attributes, log_settings_from_env
from modeltap.telemetry.targets import ExportTarget
from tests.factories import RUN, audit_record, error_event, rejected_event, response_event
from tests.otlp_receiver import GrpcReceiver, HttpReceiver

pytest_plugins = ["tests.otlp_fixtures"]


def session_status(**fields: object) -> SessionStatus:
    values: dict[str, object] = {
        "run_id": RUN,
        "session_id": "s-1",
        "ts": "2025-06-01T12:00:02.000Z",
        "stop_reason": "completed",
        "requests_audited": 1,
        "refusals": 0,
        "tool_calls_admitted": 0,
        "evidence_complete": True,
    }
    return SessionStatus(**(values | fields))  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# One line -> attributes, severity, time


def test_an_audit_line_carries_what_backends_index_on() -> None:
    body = b'{"x":1}'
    assert log_attributes("audit.jsonl", body, audit_record(seq=7)) == {
        "modeltap.kind": "audit",
        "log.file.name": "audit.jsonl",
        "log.record.uid": hashlib.sha256(body).hexdigest(),
        "modeltap.run_id": RUN,
        "modeltap.session_id": "s-1",
        "modeltap.seq": 7,
        "modeltap.request_id": "req-7",
        "modeltap.api": "openai.chat_completions",
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-5",
        "gen_ai.provider.name": "openai",
    }


def test_events_and_sessions_carry_their_own_facts() -> None:
    response = log_attributes("events.jsonl", b"{}", response_event(status=429))
    assert response["modeltap.kind"] == "response"
    assert response["gen_ai.response.model"] == "gpt-5-2025-08-07"
    assert response["gen_ai.response.id"] == "resp-1"
    assert response["http.response.status_code"] == 429
    assert "gen_ai.request.model" not in response  # the event does not say it
    rejected = log_attributes("events.jsonl", b"{}", rejected_event())
    assert (rejected["error.type"], rejected["http.response.status_code"]) == (
        "malformed_tools",
        400,
    )
    assert "modeltap.seq" not in rejected  # unknown is left out, never 0
    error = log_attributes("events.jsonl", b"{}", error_event())
    assert error["error.type"] == "upstream_unreachable"
    session = log_attributes("sessions.jsonl", b"{}", session_status())
    assert session["modeltap.kind"] == "session"
    assert "gen_ai.operation.name" not in session
    anthropic = log_attributes(
        "audit.jsonl", b"{}", audit_record(api="anthropic.messages", model="claude-x")
    )
    assert anthropic["gen_ai.provider.name"] == "anthropic"
    # The route's real provider, as the audit line says it; never guessed for other lines.
    azure = log_attributes("audit.jsonl", b"{}", audit_record(provider="azure.ai.openai"))
    assert azure["gen_ai.provider.name"] == "azure.ai.openai"
    assert "gen_ai.provider.name" not in response


@pytest.mark.parametrize(
    ("file", "record", "severity"),
    [
        ("audit.jsonl", audit_record(), "INFO"),
        ("events.jsonl", response_event(), "INFO"),
        ("events.jsonl", response_event(status=500), "WARN"),
        ("events.jsonl", response_event(evidence_complete=False), "WARN"),
        ("events.jsonl", rejected_event(), "WARN"),
        ("events.jsonl", error_event(), "ERROR"),
        ("sessions.jsonl", session_status(), "INFO"),
        ("sessions.jsonl", session_status(stop_reason="client_gone"), "WARN"),
        ("sessions.jsonl", session_status(evidence_complete=None), "WARN"),
    ],
)
def test_severity(file: str, record: object, severity: str) -> None:
    kind = logs._kind(file, record)
    assert logs._severity(kind, record)[1] == severity


def test_the_records_time_is_the_lines_ts() -> None:
    assert _ts_ns("2026-01-02T03:04:05.678Z") == 1767323045_678_000_000
    assert _ts_ns("2026-01-02T04:04:05.678+01:00") == 1767323045_678_000_000
    assert _ts_ns("2026-01-02T03:04:05.123456Z") == 1767323045_123_456_000
    for unreadable in ("yesterday", "2026-01-02T03:04:05.678", None, 17):
        assert _ts_ns(unreadable) is None


def test_batch_sizes_come_from_the_sdk_variables() -> None:
    assert log_settings_from_env({}, 3.0) == LogSettings()
    assert log_settings_from_env(
        {"OTEL_BLRP_MAX_QUEUE_SIZE": "64", "OTEL_BLRP_SCHEDULE_DELAY": "50"}, 2.0
    ) == LogSettings(
        max_queue_size=64, max_export_batch_size=64, schedule_delay_ms=50, export_timeout=2.0
    )
    for bad in (
        {"OTEL_BLRP_MAX_QUEUE_SIZE": "0"},
        {"OTEL_BLRP_MAX_QUEUE_SIZE": "lots"},
        {"OTEL_BLRP_MAX_QUEUE_SIZE": "8", "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE": "16"},
    ):
        with pytest.raises(ValueError):
            log_settings_from_env(bad, 3.0)


# --------------------------------------------------------------------------
# Where they go


@pytest.mark.parametrize(
    ("otlp", "endpoint"),
    [
        ("http://c:4318", "http://c:4318/v1/logs"),
        ("http://c:4318/", "http://c:4318/v1/logs"),
        ("http://c:4318/v1/traces", "http://c:4318/v1/logs"),
        ("https://gw.example/otlp/v1/traces", "https://gw.example/otlp/v1/logs"),
        # A traces URL that does not end in /v1/traces says nothing of where logs go:
        # none (OTEL_EXPORTER_OTLP_LOGS_ENDPOINT says it), as for metrics.
        ("https://gw.example/otlp", None),
        ("grpc://c:4317", "http://c:4317"),
    ],
)
def test_otlp_url_rule_for_logs(otlp: str, endpoint: str | None) -> None:
    target = resolve_export_target(otlp, {}, "logs")
    assert (target.endpoint if target is not None else None) == endpoint


def test_environment_rule_for_logs() -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        "OTEL_EXPORTER_OTLP_LOGS_HEADERS": "authorization=Bearer%20logs",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20all",
    }
    assert resolve_export_target(None, environ, "logs") == ExportTarget(
        "http/protobuf", "http://c:4318/v1/logs", (("authorization", "Bearer logs"),)
    )
    assert resolve_export_target(None, environ) == ExportTarget(
        "http/protobuf", "http://c:4318/v1/traces", (("authorization", "Bearer all"),)
    )
    only_logs = {
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "c:4317",
        "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_LOGS_INSECURE": "true",
    }
    assert resolve_export_target(None, only_logs) is None
    assert resolve_export_target(None, only_logs, "logs") == ExportTarget("grpc", "http://c:4317")


def test_log_export_is_on_with_an_endpoint_and_off_when_asked() -> None:
    none = Telemetry.configure(otlp=None, capture_content=None, environ={})
    assert none.line_observer is None and none.logs_dropped() is None
    assert none.describe_logs().startswith("logs: not exported")
    switched_off = [
        Telemetry.configure(
            otlp="http://127.0.0.1:9", capture_content=None, environ={}, logs=False
        ),
        Telemetry.configure(
            otlp="http://127.0.0.1:9",
            capture_content=None,
            environ={"OTEL_LOGS_EXPORTER": "none"},
        ),
    ]
    on = Telemetry.configure(otlp="http://127.0.0.1:9", capture_content=None, environ={})
    logs_only = Telemetry.configure(
        otlp=None,
        capture_content=None,
        environ={"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://127.0.0.1:9/v1/logs"},
    )
    try:
        for telemetry in switched_off:
            assert telemetry.line_observer is None and telemetry.enabled
        assert on.line_observer is not None and on.logs_dropped() == 0
        assert on.describe_logs() == (
            "logs: audit, events and sessions lines -> OTLP/HTTP -> http://127.0.0.1:9/v1/logs"
        )
        assert logs_only.line_observer is not None and logs_only.enabled
        assert logs_only.describe().startswith("spans: not exported")
    finally:
        for telemetry in [*switched_off, on, logs_only]:
            telemetry.shutdown()
    assert not on.enabled
    assert on.shutdown().splitlines()[1] == (
        "logs: 0 of 0 lines exported, 0 dropped (OTLP/HTTP -> http://127.0.0.1:9/v1/logs)"
    )


def test_bad_batch_variables_are_refused_at_configuration() -> None:
    with pytest.raises(ValueError, match="OTEL_BLRP_MAX_QUEUE_SIZE"):
        Telemetry.configure(
            otlp="http://127.0.0.1:9",
            capture_content=None,
            environ={"OTEL_BLRP_MAX_QUEUE_SIZE": "-1"},
        )


# --------------------------------------------------------------------------
# Over the wire


def url(receiver: HttpReceiver | GrpcReceiver) -> str:
    return receiver.grpc_url if isinstance(receiver, GrpcReceiver) else receiver.endpoint


def test_an_audit_line_waits_for_its_span_and_links_to_it(
    tmp_path: Path, otlp_receiver: HttpReceiver | GrpcReceiver
) -> None:
    telemetry = Telemetry.configure(
        otlp=url(otlp_receiver), capture_content=False, environ={}, run_id=RUN
    )
    sink = Sink(tmp_path)
    sink.observer = telemetry.line_observer
    span = telemetry.start_exchange(session_id="s-1", traceparent=None, start_ns=time.time_ns())
    record = audit_record(seq=3)
    sink.write_audit(record)  # written first, as the proxy does: the span learns seq after
    span.audited(record)
    # A line without seq, while the session's root span is open: linked to the root.
    sink.write_event(
        WsOpenEvent(ts=record.ts, run_id=RUN, session_id="s-1", path="/", route=None, upstream="x")
    )
    sink.write_event(response_event(seq=3))
    span.finish(end_ns=time.time_ns())
    telemetry.end_session("s-1")
    telemetry.shutdown()
    received = {log.attributes["modeltap.kind"]: log for log in otlp_receiver.logs}
    exchange = next(s for s in otlp_receiver.spans if s.name == "chat gpt-5")
    root = next(s for s in otlp_receiver.spans if s.name == "session s-1")
    for kind in ("audit", "response"):
        assert (received[kind].trace_id, received[kind].span_id) == (
            exchange.trace_id,
            exchange.span_id,
        )
    # A line without seq links to its session's root.
    assert (received["ws_open"].trace_id, received["ws_open"].span_id) == (
        root.trace_id,
        root.span_id,
    )
    assert received["audit"].time_ns == _ts_ns(record.ts)
    assert received["audit"].severity_text == "INFO"


def test_a_line_whose_span_never_comes_goes_unlinked_after_the_wait(
    tmp_path: Path, otlp_http_receiver: HttpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "LINK_WAIT_S", 0.0)
    telemetry = Telemetry.configure(
        otlp=otlp_http_receiver.endpoint, capture_content=False, environ={}, run_id=RUN
    )
    sink = Sink(tmp_path)
    sink.observer = telemetry.line_observer
    sink.write_audit(audit_record(seq=1, session_id="never-spanned"))
    sink.write_audit(audit_record(seq=2, session_id="never-spanned"))  # releases the first
    stats = telemetry.log_stats()
    assert stats is not None and stats.written == 2
    telemetry.shutdown()  # releases the second
    received = otlp_http_receiver.logs
    assert sorted(log.attributes["modeltap.seq"] for log in received) == [1, 2]
    assert all(log.trace_id is None and log.span_id is None for log in received)


def test_a_full_queue_and_a_silent_collector_are_counted_exactly(
    tmp_path: Path, otlp_hanging_receiver: HttpReceiver | GrpcReceiver
) -> None:
    telemetry = Telemetry.configure(
        otlp=url(otlp_hanging_receiver),
        capture_content=False,
        environ={"OTEL_BLRP_MAX_QUEUE_SIZE": "8", "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE": "4"},
        run_id=RUN,
        export_timeout=0.5,
        shutdown_timeout=1.0,
    )
    sink = Sink(tmp_path)
    sink.observer = telemetry.line_observer
    for seq in range(1, 101):
        sink.write_event(response_event(seq=seq))
    dropped_so_far = telemetry.logs_dropped()
    assert dropped_so_far is not None and dropped_so_far >= 100 - 8  # refused at once
    lines = telemetry.shutdown().splitlines()
    stats = telemetry.log_stats()
    assert stats is not None
    assert (stats.written, stats.exported, stats.dropped) == (100, 0, 100)
    assert otlp_hanging_receiver.logs == []
    assert lines[1].startswith("logs: 0 of 100 lines exported, 100 dropped (")
    assert "over the queue" in lines[1]
    assert telemetry.logs_dropped() == 100  # final: the same number every time it is asked
