"""Tests of modeltap.telemetry: spans over real OTLP (HTTP and gRPC) to a test receiver."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from modeltap.apis.anthropic_messages import NAME as API_ANTHROPIC
from modeltap.apis.openai_chat import NAME as API_CHAT
from modeltap.apis.openai_responses import NAME as API_RESPONSES
from modeltap.evidence.records import AuditRecord, ErrorEvent, ResponseEvent, Usage
from modeltap.telemetry import (
    ExportTarget,
    Telemetry,
    capture_content_from_env,
    resolve_export_target,
    session_trace_id,
)
from tests.factories import audit_record, response_event
from tests.factories import error_event as make_error_event
from tests.otlp_receiver import GrpcReceiver, HttpReceiver, ReceivedSpan

pytest_plugins = ["tests.otlp_fixtures"]

Receiver = HttpReceiver | GrpcReceiver

RUN = "run-1"
T0 = 1_700_000_000_000_000_000  # epoch ns; spans carry exactly the times handed in
MS = 1_000_000
PROMPT = "TOP-SECRET-PROMPT-TEXT"
ANSWER = "TOP-SECRET-ANSWER-TEXT"
INSTRUCTIONS_SHA = "a" * 64


def record(**fields: Any) -> AuditRecord:
    """An audit record built by hand: a streamed chat request with effort ``high``."""
    request = {
        "session_id": "s1",
        "reasoning_effort": "high",
        "instructions_sha256": INSTRUCTIONS_SHA,
        "tool_names": ("shell",),
        "ts": "2026-01-01T00:00:00.000Z",
        "body_bytes": 100,
        "body_sha256": "b" * 64,
    }
    return audit_record(**(request | fields))


#: The usage every response reports unless a test says otherwise: each count distinct.
USAGE = Usage(
    input_tokens=100,
    output_tokens=20,
    total_tokens=120,
    cache_read_tokens=64,
    cache_write_tokens=8,
    reasoning_tokens=12,
)


def response(**fields: Any) -> ResponseEvent:
    """A response event built by hand."""
    answer = {
        "session_id": "s1",
        "usage": USAGE,
        "ttft_ms": None,
        "ts": "2026-01-01T00:00:01.000Z",
        "response_id": "chatcmpl-1",
        "ttfb_ms": 100.0,
        "duration_ms": 500.0,
    }
    return response_event(**(answer | fields))


def error_event(kind: str = "upstream_unreachable") -> ErrorEvent:
    """An error event built by hand; its message must never reach a span."""
    return make_error_event(
        ts="2026-01-01T00:00:01.000Z",
        session_id="s1",
        error=kind,
        message="connect to https://api.openai.com/?key=sk-LEAK failed",
    )


def otlp_url(receiver: Receiver) -> str:
    """The ``--otlp`` spelling of a receiver."""
    return receiver.endpoint if isinstance(receiver, HttpReceiver) else receiver.grpc_url


def telemetry_for(receiver: Receiver, **kwargs: Any) -> Telemetry:
    """A Telemetry exporting to ``receiver``, isolated from the host environment."""
    kwargs.setdefault("capture_content", False)
    return Telemetry.configure(otlp=otlp_url(receiver), environ={}, run_id=RUN, **kwargs)


def one_exchange(
    telemetry: Telemetry,
    *,
    seq: int = 1,
    session_id: str = "s1",
    start: int = T0,
    traceparent: str | None = None,
    **finish: Any,
) -> None:
    """Drive one streamed exchange: start, audit, first byte, first chunk, finish."""
    span = telemetry.start_exchange(session_id=session_id, traceparent=traceparent, start_ns=start)
    span.audited(record(seq=seq, session_id=session_id), forwarded_ns=start + 2 * MS)
    span.upstream_first_byte(start + 100 * MS)
    span.first_chunk(start + 150 * MS)
    finish.setdefault("response", response(seq=seq, session_id=session_id))
    span.finish(end_ns=start + 500 * MS, **finish)


def by_name(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.name == name]


def the(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = by_name(spans, name)
    assert len(found) == 1, f"{name!r}: {[span.name for span in spans]}"
    return found[0]


def shutdown_and_collect(telemetry: Telemetry, receiver: Receiver) -> list[ReceivedSpan]:
    """Shut down (which flushes) and return every span the receiver got."""
    summary = telemetry.shutdown()
    assert " 0 dropped" in summary, summary
    return receiver.wait_for(telemetry.stats().exported)


# --------------------------------------------------------------------------
# Pure helpers


@pytest.mark.parametrize(
    ("otlp", "protocol", "endpoint"),
    [
        ("http://127.0.0.1:4318", "http/protobuf", "http://127.0.0.1:4318/v1/traces"),
        ("http://127.0.0.1:4318/", "http/protobuf", "http://127.0.0.1:4318/v1/traces"),
        (
            "https://otel.example:443/custom/path",
            "http/protobuf",
            "https://otel.example:443/custom/path",
        ),
        ("grpc://127.0.0.1:4317", "grpc", "http://127.0.0.1:4317"),
        ("grpc://collector:9999", "grpc", "http://collector:9999"),
        ("grpcs://collector:9999", "grpc", "https://collector:9999"),
        ("http://127.0.0.1:4317", "grpc", "http://127.0.0.1:4317"),
        ("https://collector:4317", "grpc", "https://collector:4317"),
    ],
)
def test_otlp_url_rule(otlp: str, protocol: str, endpoint: str) -> None:
    target = resolve_export_target(otlp, {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert target == ExportTarget(protocol, endpoint)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("environ", "protocol", "endpoint"),
    [
        ({}, None, None),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, None, None),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
            "http/protobuf",
            "http://c:4318/v1/traces",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"},
            "http/protobuf",
            "http://c:4318/v1/traces",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/x",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://d",
            },
            "http/protobuf",
            "http://c:4318/x",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "grpc",
            "http://c:4317",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            },
            "http/protobuf",
            "http://c:4318/v1/traces",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "grpc",
            "https://c:4317",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "c:4317",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_INSECURE": "true",
            },
            "grpc",
            "http://c:4317",
        ),
    ],
)
def test_environment_rule(
    environ: dict[str, str], protocol: str | None, endpoint: str | None
) -> None:
    target = resolve_export_target(None, environ)
    if protocol is None:
        assert target is None
    else:
        assert target == ExportTarget(protocol, endpoint or "")  # type: ignore[arg-type]


def test_headers_come_from_the_environment_and_never_show() -> None:
    environ = {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20tok,x-team=a"}
    target = resolve_export_target("http://user:pw@c:4318", environ)
    assert target is not None
    assert dict(target.headers) == {"authorization": "Bearer tok", "x-team": "a"}
    assert target.describe() == "OTLP/HTTP -> http://c:4318/v1/traces"


@pytest.mark.parametrize(
    ("otlp", "environ"),
    [
        ("127.0.0.1:4318", {}),
        ("ftp://c:21", {}),
        ("http://:4318", {}),
        ("http://c:notaport", {}),
        (
            None,
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
        ),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "c:4318"}),
    ],
)
def test_unusable_settings_are_refused(otlp: str | None, environ: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        resolve_export_target(otlp, environ)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("span_only", True),
        ("false", False),
        ("", False),
        ("1", False),
    ],
)
def test_capture_content_from_env(value: str, expected: bool) -> None:
    environ = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": value}
    assert capture_content_from_env(environ) is expected


def test_session_trace_id_is_deterministic() -> None:
    assert session_trace_id(RUN, "s1") == session_trace_id(RUN, "s1")
    assert session_trace_id(RUN, "s1") != session_trace_id(RUN, "s2")
    assert session_trace_id(RUN, "s1") != session_trace_id("run-2", "s1")
    assert len(session_trace_id(RUN, "s1")) == 32


def test_session_trace_id_is_pinned() -> None:
    """The id is a promise to anyone holding an audit line: sha256(run NUL session)[:16].

    A literal, so a change of the derivation (encoding, separator, byte
    order) fails here instead of silently breaking every saved trace link.
    """
    assert session_trace_id("run-1", "s1") == "e6f32933d05cf71fa06a40442a583464"
    assert session_trace_id("", "") == "6e340b9cffb37a989ca544e6bb780a2c"


# --------------------------------------------------------------------------
# describe() and the no-op telemetry


def test_describe_lines() -> None:
    none = Telemetry.configure(otlp=None, capture_content=None, environ={})
    assert none.describe() == (
        "spans: not exported (no OTLP endpoint; set --otlp or OTEL_EXPORTER_OTLP_ENDPOINT)"
    )
    http = Telemetry.configure(otlp="http://127.0.0.1:4318", capture_content=False, environ={})
    grpc = Telemetry.configure(otlp="grpc://127.0.0.1:4317", capture_content=True, environ={})
    try:
        assert http.describe() == (
            "spans: OTLP/HTTP -> http://127.0.0.1:4318/v1/traces;"
            " metrics: OTLP/HTTP -> http://127.0.0.1:4318/v1/metrics"
        )
        assert grpc.describe() == (
            "spans: OTLP/gRPC -> http://127.0.0.1:4317, prompt and output content captured;"
            " metrics: OTLP/gRPC -> http://127.0.0.1:4317"
        )
    finally:
        http.shutdown()
        grpc.shutdown()


def test_without_endpoint_everything_is_a_no_op() -> None:
    telemetry = Telemetry.configure(otlp=None, capture_content=True, environ={})
    assert not telemetry.enabled
    one_exchange(telemetry)
    connection = telemetry.start_connection(
        session_id="s1", traceparent=None, start_ns=T0, path="/v1/responses", upstream="https://x"
    )
    child = telemetry.start_exchange(
        session_id="s1", traceparent=None, start_ns=T0, parent=connection
    )
    child.finish(end_ns=T0 + MS)
    connection.finish(end_ns=T0 + 2 * MS, code=1000, error=None)
    telemetry.end_session("s1")
    assert (
        telemetry.shutdown()
        == "spans: not exported (no OTLP endpoint; set --otlp or OTEL_EXPORTER_OTLP_ENDPOINT)"
    )


# --------------------------------------------------------------------------
# Spans over the wire, HTTP and gRPC


def test_exchange_span_shape(otlp_receiver: Receiver) -> None:
    telemetry = telemetry_for(otlp_receiver)
    one_exchange(telemetry)
    spans = shutdown_and_collect(telemetry, otlp_receiver)

    assert sorted(span.name for span in spans) == [
        "chat gpt-5",
        "session s1",
        "stream",
        "wait upstream",
    ]
    root, chat = the(spans, "session s1"), the(spans, "chat gpt-5")
    wait, stream = the(spans, "wait upstream"), the(spans, "stream")

    assert {span.trace_id for span in spans} == {session_trace_id(RUN, "s1")}
    assert root.parent_span_id is None and root.kind == "INTERNAL"
    assert chat.parent_span_id == root.span_id and chat.kind == "CLIENT"
    assert wait.parent_span_id == chat.span_id and stream.parent_span_id == chat.span_id
    assert chat.scope == "modeltap"
    assert chat.resource["service.name"] == "modeltap"

    # Exactly the times handed in, phases back to back and in order.
    assert (chat.start_ns, chat.end_ns) == (T0, T0 + 500 * MS)
    assert (wait.start_ns, wait.end_ns) == (T0 + 2 * MS, T0 + 100 * MS)
    assert (stream.start_ns, stream.end_ns) == (T0 + 100 * MS, T0 + 500 * MS)
    assert (root.start_ns, root.end_ns) == (T0, T0 + 500 * MS)

    assert chat.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-5",
        "gen_ai.request.stream": True,
        "gen_ai.request.reasoning.level": "high",
        "openai.api.type": "chat_completions",
        "server.address": "api.openai.com",
        "server.port": 443,
        "modeltap.seq": 1,
        "modeltap.request_id": "req-1",
        "modeltap.session_id": "s1",
        "modeltap.instructions_sha256": INSTRUCTIONS_SHA,
        "http.response.status_code": 200,
        "gen_ai.response.model": "gpt-5-2025-08-07",
        "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.output_tokens": 20,
        "gen_ai.usage.cache_read.input_tokens": 64,
        "gen_ai.usage.cache_write.input_tokens": 8,
        "gen_ai.usage.reasoning.output_tokens": 12,
        "gen_ai.response.finish_reasons": ["stop"],
        "gen_ai.response.time_to_first_chunk": pytest.approx(0.150),
    }
    assert chat.status == "UNSET"
    assert [(event.name, event.time_ns) for event in chat.events] == [
        ("first chunk", T0 + 150 * MS)
    ]


def test_unknown_values_are_left_out(otlp_http_receiver: HttpReceiver) -> None:
    telemetry = telemetry_for(otlp_http_receiver)
    span = telemetry.start_exchange(session_id="s1", traceparent=None, start_ns=T0)
    span.audited(
        record(
            api=API_ANTHROPIC,
            model="claude-x",
            stream=False,
            reasoning_effort=None,
            instructions_sha256=None,
            upstream="http://127.0.0.1:9000",
        )
    )
    span.upstream_first_byte(T0 + 50 * MS)
    span.finish(
        end_ns=T0 + 80 * MS,
        response=response(api=API_ANTHROPIC, status=None, usage=Usage(), finish_reasons=None),
    )
    spans = shutdown_and_collect(telemetry, otlp_http_receiver)
    chat = the(spans, "chat claude-x")
    # Not streamed: gen_ai.request.stream is left out ("if unset, the request
    # is assumed to be non-streaming").
    assert chat.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-x",
        "server.address": "127.0.0.1",
        "server.port": 9000,
        "modeltap.seq": 1,
        "modeltap.request_id": "req-1",
        "modeltap.session_id": "s1",
        "gen_ai.response.model": "gpt-5-2025-08-07",
        "gen_ai.response.id": "chatcmpl-1",
    }
    # Not streamed: the phase after the first byte is "receive"; it starts at
    # the exchange's start when no forwarding time was given.
    wait, receive = the(spans, "wait upstream"), the(spans, "receive")
    assert (wait.start_ns, wait.end_ns, receive.start_ns, receive.end_ns) == (
        T0,
        T0 + 50 * MS,
        T0 + 50 * MS,
        T0 + 80 * MS,
    )


def test_responses_api_attributes(otlp_http_receiver: HttpReceiver) -> None:
    telemetry = telemetry_for(otlp_http_receiver)
    span = telemetry.start_exchange(session_id="s1", traceparent=None, start_ns=T0)
    span.audited(record(api=API_RESPONSES, previous_response_id="resp_1"))
    span.finish(end_ns=T0 + MS, response=response(api=API_RESPONSES, ttft_ms=250.0))
    chat = the(shutdown_and_collect(telemetry, otlp_http_receiver), "chat gpt-5")
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["openai.api.type"] == "responses"
    assert chat.attributes["gen_ai.request.previous_response.id"] == "resp_1"
    # Without first_chunk(), the observer's ttft stands in.
    assert chat.attributes["gen_ai.response.time_to_first_chunk"] == pytest.approx(0.25)


def test_one_trace_per_session(otlp_receiver: Receiver) -> None:
    telemetry = telemetry_for(otlp_receiver)
    one_exchange(telemetry, seq=1, session_id="a", start=T0)
    one_exchange(telemetry, seq=2, session_id="b", start=T0 + 10 * MS)
    one_exchange(telemetry, seq=3, session_id="a", start=T0 + 600 * MS)
    telemetry.end_session("a")
    spans = shutdown_and_collect(telemetry, otlp_receiver)

    roots = {span.name: span for span in spans if span.parent_span_id is None}
    assert set(roots) == {"session a", "session b"}
    for session, root in (("a", roots["session a"]), ("b", roots["session b"])):
        assert root.trace_id == session_trace_id(RUN, session)
        exchanges = [
            s
            for s in by_name(spans, "chat gpt-5")
            if s.attributes["modeltap.session_id"] == session
        ]
        assert {s.trace_id for s in exchanges} == {root.trace_id}
        assert {s.parent_span_id for s in exchanges} == {root.span_id}
    assert len(by_name(spans, "chat gpt-5")) == 3
    # The root spans its exchanges, no more (it ends with the last one, not at shutdown).
    assert (roots["session a"].start_ns, roots["session a"].end_ns) == (T0, T0 + 1100 * MS)
    assert (roots["session b"].start_ns, roots["session b"].end_ns) == (T0 + 10 * MS, T0 + 510 * MS)


def test_traceparent_joins_the_agents_trace(otlp_receiver: Receiver) -> None:
    telemetry = telemetry_for(otlp_receiver)
    agent_trace, agent_span = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    one_exchange(telemetry, traceparent=f"00-{agent_trace}-{agent_span}-01")
    spans = shutdown_and_collect(telemetry, otlp_receiver)
    assert sorted(span.name for span in spans) == ["chat gpt-5", "stream", "wait upstream"]
    chat = the(spans, "chat gpt-5")
    assert (chat.trace_id, chat.parent_span_id) == (agent_trace, agent_span)
    assert {span.trace_id for span in spans} == {agent_trace}


def test_unsampled_or_broken_traceparent(otlp_http_receiver: HttpReceiver) -> None:
    telemetry = telemetry_for(otlp_http_receiver)
    # Not sampled by the agent: still recorded (the waterfall is the product).
    one_exchange(
        telemetry, seq=1, traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
    )
    # Malformed: falls back to the session's own trace.
    one_exchange(telemetry, seq=2, traceparent="garbage")
    spans = shutdown_and_collect(telemetry, otlp_http_receiver)
    chats = sorted(by_name(spans, "chat gpt-5"), key=lambda s: s.attributes["modeltap.seq"])
    assert chats[0].trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert chats[1].trace_id == session_trace_id(RUN, "s1")


def test_websocket_connection_holds_its_responses(otlp_receiver: Receiver) -> None:
    telemetry = telemetry_for(otlp_receiver)
    connection = telemetry.start_connection(
        session_id="ws-1",
        traceparent=None,
        start_ns=T0,
        path="/openai/v1/responses?key=sk-LEAK",
        upstream="wss://api.openai.com",
    )
    for seq, start in ((1, T0 + 10 * MS), (2, T0 + 700 * MS)):
        span = telemetry.start_exchange(
            session_id="ws-1",
            traceparent=None,
            start_ns=start,
            transport="websocket",
            parent=connection,
        )
        span.audited(record(seq=seq, session_id="ws-1", api=API_RESPONSES, transport="websocket"))
        span.upstream_first_byte(start + 100 * MS)
        span.finish(
            end_ns=start + 300 * MS, response=response(seq=seq, session_id="ws-1", status=None)
        )
    connection.finish(end_ns=T0 + 1100 * MS, code=1000, error=None)
    spans = shutdown_and_collect(telemetry, otlp_receiver)

    ws = the(spans, "websocket /openai/v1/responses")
    root = the(spans, "session ws-1")
    assert ws.kind == "CLIENT" and ws.parent_span_id == root.span_id
    assert ws.attributes == {
        "modeltap.session_id": "ws-1",
        "server.address": "api.openai.com",
        "server.port": 443,
        "modeltap.websocket.close_code": 1000,
    }
    chats = by_name(spans, "chat gpt-5")
    assert len(chats) == 2 and {chat.parent_span_id for chat in chats} == {ws.span_id}
    assert {span.trace_id for span in spans} == {session_trace_id(RUN, "ws-1")}
    assert "sk-LEAK" not in repr(spans)
    assert (root.start_ns, root.end_ns) == (T0, T0 + 1100 * MS)


def test_websocket_error_and_traceparent(otlp_http_receiver: HttpReceiver) -> None:
    telemetry = telemetry_for(otlp_http_receiver)
    agent_trace = "1" * 32
    connection = telemetry.start_connection(
        session_id="ws-1",
        traceparent=f"00-{agent_trace}-{'2' * 16}-01",
        start_ns=T0,
        path="/v1/responses",
        upstream="https://api.openai.com",
    )
    connection.finish(end_ns=T0 + MS, code=None, error="upstream_reset")
    ws = the(shutdown_and_collect(telemetry, otlp_http_receiver), "websocket /v1/responses")
    assert (ws.trace_id, ws.parent_span_id) == (agent_trace, "2" * 16)
    assert (ws.status, ws.attributes["error.type"]) == ("ERROR", "upstream_reset")


def test_rejected_request(otlp_receiver: Receiver) -> None:
    telemetry = telemetry_for(otlp_receiver)
    span = telemetry.start_exchange(session_id="s1", traceparent=None, start_ns=T0)
    span.finish(end_ns=T0 + MS, rejected_rule="missing_model", status_code=400)
    spans = shutdown_and_collect(telemetry, otlp_receiver)
    # Never forwarded: no model to name it after, no phases.
    assert sorted(span.name for span in spans) == ["chat", "session s1"]
    chat = the(spans, "chat")
    assert (chat.status, chat.status_message) == ("ERROR", "missing_model")
    assert chat.attributes == {
        "gen_ai.operation.name": "chat",
        "modeltap.session_id": "s1",
        "http.response.status_code": 400,
        "error.type": "missing_model",
    }


def test_upstream_error(otlp_http_receiver: HttpReceiver) -> None:
    telemetry = telemetry_for(otlp_http_receiver)
    span = telemetry.start_exchange(session_id="s1", traceparent=None, start_ns=T0)
    span.audited(record(), forwarded_ns=T0 + MS)
    span.finish(end_ns=T0 + 30 * MS, error=error_event(), status_code=502)
    spans = shutdown_and_collect(telemetry, otlp_http_receiver)
    chat, wait = the(spans, "chat gpt-5"), the(spans, "wait upstream")
    assert (chat.status, chat.attributes["error.type"]) == ("ERROR", "upstream_unreachable")
    assert chat.attributes["http.response.status_code"] == 502
    # No first byte: only the wait phase, up to the end, and it carries the error.
    assert not by_name(spans, "stream")
    assert (wait.start_ns, wait.end_ns, wait.status) == (T0 + MS, T0 + 30 * MS, "ERROR")
    assert "sk-LEAK" not in repr(spans)


@pytest.mark.parametrize(
    ("status", "response_status", "error_type"),
    [
        (429, None, "429"),
        (500, None, "500"),
        (200, "failed", "response.failed"),
        (200, "incomplete", None),
    ],
)
def test_failed_responses(
    otlp_http_receiver: HttpReceiver,
    status: int,
    response_status: str | None,
    error_type: str | None,
) -> None:
    telemetry = telemetry_for(otlp_http_receiver)
    one_exchange(telemetry, response=response(status=status, response_status=response_status))
    chat = the(shutdown_and_collect(telemetry, otlp_http_receiver), "chat gpt-5")
    assert chat.attributes.get("error.type") == error_type
    assert chat.status == ("ERROR" if error_type else "UNSET")


# --------------------------------------------------------------------------
# Content capture


def request_body() -> bytes:
    return orjson.dumps(
        {
            "model": "gpt-5",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": PROMPT},
            ],
        }
    )


def response_body() -> bytes:
    return orjson.dumps(
        {"id": "chatcmpl-1", "choices": [{"message": {"role": "assistant", "content": ANSWER}}]}
    )


def content_exchange(telemetry: Telemetry, api: str = API_CHAT) -> None:
    span = telemetry.start_exchange(session_id="s1", traceparent=None, start_ns=T0)
    span.audited(record(api=api), content=request_body())
    span.finish(end_ns=T0 + MS, response=response(api=api), content=response_body())


def test_no_content_without_capture(otlp_receiver: Receiver) -> None:
    telemetry = telemetry_for(otlp_receiver, capture_content=False)
    content_exchange(telemetry)
    spans = shutdown_and_collect(telemetry, otlp_receiver)
    assert PROMPT not in repr(spans) and ANSWER not in repr(spans)
    assert not any(key.endswith("messages") for span in spans for key in span.attributes)


def test_content_with_capture(otlp_receiver: Receiver) -> None:
    telemetry = telemetry_for(otlp_receiver, capture_content=True)
    content_exchange(telemetry)
    chat = the(shutdown_and_collect(telemetry, otlp_receiver), "chat gpt-5")
    # The conventions' shapes, not the provider's: messages of parts.
    assert orjson.loads(chat.attributes["gen_ai.input.messages"]) == [
        {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
        {"role": "user", "parts": [{"type": "text", "content": PROMPT}]},
    ]
    assert orjson.loads(chat.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": ANSWER}], "finish_reason": ""}
    ]
    assert "modeltap.content.cut" not in chat.attributes


def test_content_is_what_the_api_module_reads(otlp_http_receiver: HttpReceiver) -> None:
    """Anthropic: ``system`` as instructions, output from ``content``; an error body has none."""
    telemetry = telemetry_for(otlp_http_receiver, capture_content=True)
    system = [{"type": "text", "text": "be brief"}]
    answer = [{"type": "text", "text": ANSWER}]
    bodies = ({"content": answer, "stop_reason": "end_turn"}, {"type": "error", "error": {}})
    for seq, body in enumerate(bodies, 1):
        span = telemetry.start_exchange(session_id="s1", traceparent=None, start_ns=T0)
        span.audited(
            record(seq=seq, api=API_ANTHROPIC),
            content=orjson.dumps(
                {"model": "m", "system": system, "messages": [{"role": "user", "content": PROMPT}]}
            ),
        )
        span.finish(end_ns=T0 + MS, content=orjson.dumps(body))
    spans = sorted(
        by_name(shutdown_and_collect(telemetry, otlp_http_receiver), "chat gpt-5"),
        key=lambda span: span.attributes["modeltap.seq"],
    )
    for span in spans:
        assert span.attributes["gen_ai.provider.name"] == "anthropic"
        assert "openai.api.type" not in span.attributes
        assert orjson.loads(span.attributes["gen_ai.system_instructions"]) == [
            {"type": "text", "content": "be brief"}
        ]
        assert orjson.loads(span.attributes["gen_ai.input.messages"]) == [
            {"role": "user", "parts": [{"type": "text", "content": PROMPT}]}
        ]
    assert orjson.loads(spans[0].attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": ANSWER}],
            "finish_reason": "stop",
        }
    ]
    assert "gen_ai.output.messages" not in spans[1].attributes


def test_capture_switched_on_by_environment(otlp_http_receiver: HttpReceiver) -> None:
    telemetry = Telemetry.configure(
        otlp=None,
        capture_content=None,
        environ={
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_http_receiver.endpoint,
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
            "OTEL_SERVICE_NAME": "agent-proxy",
            "OTEL_RESOURCE_ATTRIBUTES": "ci.job=42",
        },
        run_id=RUN,
    )
    assert telemetry.describe().startswith(f"spans: OTLP/HTTP -> {otlp_http_receiver.traces_url}")
    # Responses input and instructions; raw SSE text is never written as output.
    span = telemetry.start_exchange(session_id="s1", traceparent=None, start_ns=T0)
    span.audited(
        record(api=API_RESPONSES),
        content=orjson.dumps({"model": "gpt-5", "instructions": "be brief", "input": PROMPT}),
    )
    span.finish(end_ns=T0 + MS, content=f"data: {ANSWER}\n\n".encode())
    chat = the(shutdown_and_collect(telemetry, otlp_http_receiver), "chat gpt-5")
    assert orjson.loads(chat.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": PROMPT}]}
    ]
    assert orjson.loads(chat.attributes["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "be brief"}
    ]
    assert "gen_ai.output.messages" not in chat.attributes
    assert ANSWER not in repr(chat)
    assert chat.resource["service.name"] == "agent-proxy"
    assert chat.resource["ci.job"] == "42"


def test_grpc_by_environment(otlp_grpc_receiver: GrpcReceiver) -> None:
    telemetry = Telemetry.configure(
        otlp=None,
        capture_content=None,
        environ={
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_grpc_receiver.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        },
        run_id=RUN,
    )
    assert telemetry.describe() == (
        f"spans: OTLP/gRPC -> {otlp_grpc_receiver.endpoint};"
        f" metrics: OTLP/gRPC -> {otlp_grpc_receiver.endpoint}"
    )
    one_exchange(telemetry)
    assert len(shutdown_and_collect(telemetry, otlp_grpc_receiver)) == 4


# --------------------------------------------------------------------------
# A collector that is down, hangs, or cannot keep up


def exchanges(telemetry: Telemetry, count: int) -> None:
    for seq in range(count):
        one_exchange(telemetry, seq=seq, start=T0 + seq * 1000 * MS)


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_collector_down(otlp_down_port: int, scheme: str) -> None:
    telemetry = Telemetry.configure(
        otlp=f"{scheme}://127.0.0.1:{otlp_down_port}",
        capture_content=False,
        environ={},
        export_timeout=0.5,
        shutdown_timeout=2.0,
    )
    exchanges(telemetry, 3)
    started = time.monotonic()
    summary = telemetry.shutdown()
    took = time.monotonic() - started
    stats = telemetry.stats()
    assert (stats.ended, stats.exported, stats.dropped) == (10, 0, 10)
    assert summary.startswith("spans: 0 exported, 10 dropped (10 in failed exports, 0 unsent)"), (
        summary
    )
    assert took < 2.0 + 1.5  # bounded by shutdown_timeout (plus the join's grace)
    assert telemetry.shutdown() == summary  # idempotent


def test_collector_hanging(otlp_hanging_receiver: Receiver) -> None:
    telemetry = telemetry_for(otlp_hanging_receiver, export_timeout=0.5, shutdown_timeout=2.0)
    exchanges(telemetry, 2)
    started = time.monotonic()
    summary = telemetry.shutdown()
    took = time.monotonic() - started
    assert otlp_hanging_receiver.requests >= 1  # it did get the export, and sat on it
    assert telemetry.stats().exported == 0
    assert "0 exported, 7 dropped" in summary, summary
    assert took < 2.0 + 1.5


def test_queue_full_drops_are_counted(otlp_hanging_receiver: Receiver) -> None:
    telemetry = telemetry_for(
        otlp_hanging_receiver, export_timeout=0.5, shutdown_timeout=1.0, max_queue_size=4
    )
    exchanges(telemetry, 10)  # 31 spans into a queue of 4, with the worker stuck
    summary = telemetry.shutdown()
    stats = telemetry.stats()
    assert stats.ended == 31 and stats.exported == 0 and stats.dropped == 31
    assert stats.failed < 31  # some never made it into an export: the queue overflowed
    assert f"{31 - stats.failed} unsent" in summary


def test_open_spans_are_ended_at_shutdown(otlp_http_receiver: HttpReceiver) -> None:
    telemetry = telemetry_for(otlp_http_receiver)
    span = telemetry.start_exchange(session_id="s1", traceparent=None, start_ns=T0)
    span.audited(record())
    span.upstream_first_byte(T0 + 100 * MS)
    connection = telemetry.start_connection(
        session_id="s2", traceparent=None, start_ns=T0, path="/v1/responses", upstream="https://x"
    )
    spans = shutdown_and_collect_at(telemetry, otlp_http_receiver, T0 + 900 * MS)
    chat, ws = the(spans, "chat gpt-5"), the(spans, "websocket /v1/responses")
    assert (chat.end_ns, chat.status, chat.attributes["error.type"]) == (
        T0 + 900 * MS,
        "ERROR",
        "modeltap.interrupted",
    )
    assert ws.attributes["error.type"] == "modeltap.interrupted"
    assert the(spans, "stream").end_ns == T0 + 900 * MS
    assert the(spans, "session s1").end_ns == T0 + 900 * MS
    # Late calls after shutdown are harmless.
    span.finish(end_ns=T0 + 950 * MS)
    connection.finish(end_ns=T0 + 950 * MS, code=1000, error=None)


def shutdown_and_collect_at(
    telemetry: Telemetry, receiver: Receiver, end_ns: int
) -> list[ReceivedSpan]:
    summary = telemetry.shutdown(end_ns=end_ns)
    assert " 0 dropped" in summary, summary
    return receiver.wait_for(telemetry.stats().exported)


def test_telemetry_bugs_never_reach_the_caller(otlp_http_receiver: HttpReceiver) -> None:
    telemetry = telemetry_for(otlp_http_receiver)
    span = telemetry.start_exchange(session_id="s1", traceparent=None, start_ns=T0)
    span.audited(object())  # type: ignore[arg-type]  # a bug in the glue
    span.finish(end_ns=T0 + MS)
    chat = the(shutdown_and_collect(telemetry, otlp_http_receiver), "chat")
    assert chat.end_ns == T0 + MS


def test_end_session_then_a_late_exchange(otlp_http_receiver: HttpReceiver) -> None:
    telemetry = telemetry_for(otlp_http_receiver)
    one_exchange(telemetry, seq=1, start=T0)
    telemetry.end_session("s1", end_ns=T0 + 600 * MS)
    telemetry.end_session("s1")  # twice is harmless
    one_exchange(telemetry, seq=2, start=T0 + 1000 * MS)
    spans = shutdown_and_collect(telemetry, otlp_http_receiver)
    roots = by_name(spans, "session s1")
    # The ended root is not kept; the late exchange gets a new root in the same trace.
    assert sorted((root.start_ns, root.end_ns) for root in roots) == [
        (T0, T0 + 600 * MS),
        (T0 + 1000 * MS, T0 + 1500 * MS),
    ]
    assert {span.trace_id for span in spans} == {session_trace_id(RUN, "s1")}
