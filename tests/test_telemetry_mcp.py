"""MCP spans and metric (telemetry/mcp.py): names as the conventions spell them, and
the spans' ends decoded from real OTLP, driven through the API the addon uses."""

from __future__ import annotations

from typing import Any

import pytest

from modeltap.evidence.records import McpResultEvent, ToolCall
from modeltap.telemetry import Telemetry, conventions
from modeltap.telemetry.mcp import error_type_of
from tests.factories import audit_record, mcp_audit_record, response_event
from tests.otlp_receiver import GrpcReceiver, HttpReceiver, ReceivedSpan

pytest_plugins = ["tests.otlp_fixtures"]

Receiver = HttpReceiver | GrpcReceiver
RUN = "run-1"
T0 = 1_700_000_000_000_000_000
MS = 1_000_000
METRIC = "mcp.client.operation.duration"


def test_mcp_names_are_spelled_as_the_conventions_text() -> None:
    """v1.41.1 docs/gen-ai/mcp.md (and semantic-conventions-genai main), letter by letter."""
    spelled = {
        conventions.MCP_METHOD_NAME: "mcp.method.name",
        conventions.MCP_PROTOCOL_VERSION: "mcp.protocol.version",
        conventions.MCP_SESSION_ID: "mcp.session.id",
        conventions.JSONRPC_REQUEST_ID: "jsonrpc.request.id",
        conventions.RPC_RESPONSE_STATUS_CODE: "rpc.response.status_code",
        conventions.NETWORK_TRANSPORT: "network.transport",
        conventions.NETWORK_PROTOCOL_NAME: "network.protocol.name",
        conventions.TOOL_NAME: "gen_ai.tool.name",
        conventions.OPERATION_NAME: "gen_ai.operation.name",
        conventions.ERROR_TYPE: "error.type",
        conventions.METRIC_MCP_CLIENT_OPERATION_DURATION: "mcp.client.operation.duration",
    }
    assert all(name == text for name, text in spelled.items()), spelled
    assert conventions.OPERATION_EXECUTE_TOOL == "execute_tool"
    assert conventions.MCP_ERROR_TOOL == "tool_error"
    assert conventions.NETWORK_TRANSPORT_TCP == "tcp"
    assert conventions.ERROR_OTHER == "_OTHER"
    assert conventions.MCP_SECONDS_BUCKETS == (
        0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300,
    )  # fmt: skip
    assert conventions.CONVENTIONS_VERSION == "1.41.1"  # no genai release to follow yet


@pytest.mark.parametrize(
    ("method", "tool", "name"),
    [
        ("tools/call", "add", "tools/call add"),
        ("initialize", None, "initialize"),
        ("notifications/initialized", None, "notifications/initialized"),
    ],
)
def test_span_name_is_method_and_target(method: str, tool: str | None, name: str) -> None:
    assert conventions.mcp_span_name(method, tool) == name


def result(**fields: Any) -> McpResultEvent:
    values: dict[str, Any] = {
        "ts": "2026-01-01T00:00:00.000Z",
        "run_id": RUN,
        "session_id": "s-1",
        "seq": 1,
        "mcp_server": "files",
        "mcp_session": None,
        "mcp_method": "tools/call",
        "jsonrpc_id": 1,
        "tool_name": "add",
        "outcome": "result",
        "status": 200,
        "framing": "json",
        "is_error": False,
        "error_code": None,
        "content": (),
        "structured_content": False,
        "result_type": None,
        "tools": None,
        "tools_sha256": None,
        "next_cursor": None,
        "duration_ms": 5.0,
        "evidence_complete": True,
        "capture_errors": (),
    }
    return McpResultEvent(**(values | fields))


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, None),
        ({"is_error": True}, "tool_error"),
        ({"outcome": "error", "error_code": -32601, "is_error": None}, "-32601"),
        ({"outcome": "error", "error_code": None, "is_error": None}, "_OTHER"),
        ({"outcome": "http_error", "status": 404, "is_error": None}, "404"),
        ({"mcp_method": "tools/list", "tool_name": None, "is_error": None}, None),
    ],
)
def test_error_type_of_an_answer(fields: dict[str, Any], expected: str | None) -> None:
    assert error_type_of(result(**fields)) == expected


# --------------------------------------------------------------------------
# When a span ends, over real OTLP


def telemetry_for(receiver: Receiver) -> Telemetry:
    url = receiver.endpoint if isinstance(receiver, HttpReceiver) else receiver.grpc_url
    return Telemetry.configure(otlp=url, capture_content=False, environ={}, run_id=RUN)


def collect(telemetry: Telemetry, receiver: Receiver) -> list[ReceivedSpan]:
    summary = telemetry.shutdown()
    assert " 0 dropped" in summary and " 0 failed" in summary, summary
    return receiver.wait_for(telemetry.stats().exported)


def by_seq(spans: list[ReceivedSpan]) -> dict[int, ReceivedSpan]:
    return {s.attributes["modeltap.seq"]: s for s in spans if "mcp.method.name" in s.attributes}


def test_each_way_a_span_ends(otlp_receiver: Receiver) -> None:
    telemetry = telemetry_for(otlp_receiver)
    mcp = telemetry.mcp
    answered_late = mcp_audit_record(seq=1, mcp_method="tools/list")
    broken = mcp_audit_record(seq=2, mcp_method="tools/call", tool_name="add")
    refused_by_http = mcp_audit_record(seq=3, mcp_method="ping")
    notified = mcp_audit_record(
        seq=4, message_type="notification", mcp_method="notifications/initialized", jsonrpc_id=None
    )
    unanswered = mcp_audit_record(seq=5, mcp_method="resources/list")
    interrupted = mcp_audit_record(seq=6, mcp_method="prompts/list", session_id="s-2")
    for record in (answered_late, broken, refused_by_http, notified, unanswered, interrupted):
        mcp.sent((record,), traceparent=None, sent_ns=T0 + record.seq * MS)
    # HTTP+SSE: the POST is acknowledged (202), the answer comes later on the stream.
    mcp.exchange_ended((answered_late,), status=202, failure=None, end_ns=T0 + 10 * MS)
    mcp.answered(1, result(seq=1, mcp_method="tools/list"), end_ns=T0 + 40 * MS)
    mcp.exchange_ended((broken,), status=None, failure="upstream_reset", end_ns=T0 + 12 * MS)
    mcp.exchange_ended((refused_by_http,), status=500, failure=None, end_ns=T0 + 13 * MS)
    mcp.exchange_ended((notified,), status=202, failure=None, end_ns=T0 + 14 * MS)
    mcp.exchange_ended((unanswered,), status=200, failure=None, end_ns=T0 + 15 * MS)
    telemetry.end_session("s-1", end_ns=T0 + 50 * MS)
    spans = by_seq(collect(telemetry, otlp_receiver))

    ends = {seq: (s.end_ns - T0) // MS for seq, s in spans.items()}
    assert ends == {1: 40, 2: 12, 3: 13, 4: 14, 5: 50, 6: ends[6]}
    errors = {seq: s.attributes.get("error.type") for seq, s in spans.items()}
    assert errors == {
        1: None,
        2: "upstream_reset",
        3: "500",
        4: None,
        5: "modeltap.mcp.unanswered",
        6: "modeltap.interrupted",
    }
    assert ends[6] >= 6  # ended at shutdown, never before it was sent
    assert {s.kind for s in spans.values()} == {"CLIENT"}
    # Measured: what was answered, acknowledged or failed; not what never got an answer.
    measured = {
        p.attributes["mcp.method.name"]: p
        for (metric, _), p in otlp_receiver.last_points().items()
        if metric == METRIC
    }
    assert set(measured) == {"tools/list", "tools/call", "ping", "notifications/initialized"}
    assert measured["tools/list"].sum == pytest.approx(0.039)
    assert measured["tools/call"].attributes["error.type"] == "upstream_reset"


def test_a_call_paired_by_the_agents_id_hangs_under_its_turn(
    otlp_http_receiver: HttpReceiver,
) -> None:
    """Claude Code puts the model's call id in ``_meta``: the names need not match."""
    telemetry = telemetry_for(otlp_http_receiver)
    turn = telemetry.start_exchange(session_id="s-1", traceparent=None, start_ns=T0)
    asking = audit_record(seq=1, session_id="s-1")
    turn.audited(asking, forwarded_ns=T0)
    call = ToolCall(call_id="toolu_1", name="some_other_name", arguments="{}")
    turn.finish(end_ns=T0 + 5 * MS, response=response_event(seq=1, tool_calls=(call,)))
    telemetry.mcp.model_asked("s-1", 1, (call,))
    execution = mcp_audit_record(
        seq=2, mcp_method="tools/call", tool_name="add", tool_call_id="toolu_1"
    )
    stranger = mcp_audit_record(seq=3, mcp_method="tools/call", tool_name="add")
    telemetry.mcp.sent((execution, stranger), traceparent=None, sent_ns=T0 + 6 * MS)
    for seq in (2, 3):
        telemetry.mcp.answered(seq, result(seq=seq), end_ns=T0 + 9 * MS)
    spans = collect(telemetry, otlp_http_receiver)
    (chat,) = [s for s in spans if s.attributes.get("modeltap.seq") == 1]
    mcp = by_seq(spans)
    assert mcp[2].parent_span_id == chat.span_id
    assert mcp[2].attributes["gen_ai.tool.call.id"] == "toolu_1"
    # The model's one call was executed once: a second tools/call is no child of the turn.
    assert mcp[3].parent_span_id != chat.span_id and mcp[3].trace_id == chat.trace_id
