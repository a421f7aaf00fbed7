"""MCP spans and metrics end to end (SPEC 3b, 5): a model turn through the stub, its
tool call executed by the official ``mcp`` SDK client against the SDK's server
through the proxy, spans and metrics decoded from real OTLP (HTTP and gRPC)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
import openai
import orjson
import pytest
from mcp.client.sse import sse_client
from mcp.shared.exceptions import MCPError

from modeltap.telemetry import conventions
from tests import mcp_shapes
from tests.conftest import Running
from tests.mcp_server import serve
from tests.otlp_receiver import GrpcReceiver, HttpReceiver, ReceivedPoint, ReceivedSpan
from tests.upstream import Upstream, chat_tool_json

pytest_plugins = ["tests.otlp_fixtures"]

Receiver = HttpReceiver | GrpcReceiver
SERVER = "shapes"
ORDER = "ORDER-MARKER-5d1e"
METRIC = "mcp.client.operation.duration"


def otlp_url(receiver: Receiver) -> str:
    return receiver.grpc_url if isinstance(receiver, GrpcReceiver) else receiver.endpoint


def chat(running: Running, messages: Any) -> Any:
    c = openai.OpenAI(base_url=running.base() + "/v1", api_key="sk-x", max_retries=0)
    return c.chat.completions.create(model="gpt-5", messages=messages)


def stop(running: Running, receiver: Receiver) -> list[ReceivedSpan]:
    running.proxy.stop()  # flushes spans and metrics
    summary = running.proxy.spans.summary
    assert summary is not None and " 0 dropped" in summary and " 0 failed" in summary, summary
    return receiver.wait_for(running.proxy.spans.telemetry.stats().exported)


def named(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    (span,) = [s for s in spans if s.name == name]
    return span


def mcp_points(receiver: Receiver) -> dict[tuple[str | None, str | None], ReceivedPoint]:
    """The last ``mcp.client.operation.duration`` point per (method, tool)."""
    return {
        (p.attributes.get("mcp.method.name"), p.attributes.get("gen_ai.tool.name")): p
        for (metric, _), p in receiver.last_points().items()
        if metric == METRIC
    }


def test_a_model_tool_call_executed_over_mcp(
    start_proxy: Callable[..., Running], upstream: Upstream, otlp_receiver: Receiver
) -> None:
    upstream.replies.append(
        chat_tool_json("gpt-5", name="mcp__shapes__add", arguments='{"b": 3, "a": 2}', call_id="c1")
    )
    box: dict[str, Any] = {}

    async def scenario() -> None:
        async with serve() as base:
            box["port"] = int(base.rsplit(":", 1)[1])
            running = box["running"] = start_proxy(
                otlp=otlp_url(otlp_receiver), mcp=[f"{SERVER}={base}/mcp"], session="agent"
            )
            user: Any = [{"role": "user", "content": "add 2 and 3"}]
            asked = await anyio.to_thread.run_sync(chat, running, user)
            call = asked.choices[0].message.tool_calls[0]
            async with mcp_shapes.client(f"{running.proxy.url}/mcp/{SERVER}", "legacy") as c:
                added = await c.call_tool("add", {"a": 2, "b": 3})
                failed = await c.call_tool("lookup_order", {"order_id": ORDER})
                with pytest.raises(MCPError):
                    await c.read_resource("nope://x")
            assert isinstance(added, types.CallToolResult) and not added.is_error
            assert failed.is_error
            answered = [
                *user,
                {"role": "assistant", "tool_calls": [call.model_dump()]},
                {"role": "tool", "tool_call_id": call.id, "content": "5"},
            ]
            await anyio.to_thread.run_sync(chat, running, answered)
            await anyio.sleep(0.2)  # the DELETE passes

    asyncio.run(scenario())
    running: Running = box["running"]
    spans = stop(running, otlp_receiver)
    audit = {(r.get("mcp_method"), r.get("tool_name")): r for r in running.audit()}
    results = {e["seq"]: e for e in running.events("mcp_result")}

    root = named(spans, "session agent")
    asking, answering = sorted(
        (s for s in spans if s.name == "chat gpt-5"), key=lambda s: s.start_ns
    )
    add = named(spans, "tools/call add")
    record = audit[("tools/call", "add")]
    # The execution hangs under the model turn that asked for it, in the session's trace.
    assert add.kind == "CLIENT"
    assert add.trace_id == root.trace_id == asking.trace_id
    assert add.parent_span_id == asking.span_id
    assert asking.end_ns <= add.start_ns <= add.end_ns <= answering.start_ns
    assert add.attributes == {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "c1",
        "jsonrpc.request.id": str(record["jsonrpc_id"]),
        "mcp.protocol.version": "2025-11-25",
        "mcp.session.id": record["mcp_session"],
        "network.transport": "tcp",
        "network.protocol.name": "http",
        "server.address": "127.0.0.1",
        "server.port": box["port"],
        "http.response.status_code": 200,
        "modeltap.seq": record["seq"],
        "modeltap.request_id": record["request_id"],
        "modeltap.session_id": "agent",
        "modeltap.mcp.server": SERVER,
    }
    assert add.status == "UNSET"
    # The agent's time running the tool links to the MCP call that ran it.
    assert named(spans, "execute_tool mcp__shapes__add").links == ((add.trace_id, add.span_id),)
    # The span lasts what the mcp_result line says the answer took.
    duration_ms = results[record["seq"]]["duration_ms"]
    assert (add.end_ns - add.start_ns) / 1e6 == pytest.approx(duration_ms, abs=0.01)

    # An execution no model call asked for hangs under the session; isError is tool_error.
    lookup = named(spans, "tools/call lookup_order")
    assert lookup.parent_span_id == root.span_id
    assert (lookup.status, lookup.status_message) == ("ERROR", "tool_error")
    assert lookup.attributes["error.type"] == "tool_error"
    assert "gen_ai.tool.call.id" not in lookup.attributes
    # A JSON-RPC error: its code, as error.type and rpc.response.status_code.
    read = named(spans, "resources/read")
    assert (read.attributes["error.type"], read.attributes["rpc.response.status_code"]) == (
        "-32602",
        "-32602",
    )
    assert read.status == "ERROR" and "gen_ai.operation.name" not in read.attributes
    for name in ("initialize", "notifications/initialized"):
        span = named(spans, name)
        assert span.kind == "CLIENT" and span.parent_span_id == root.span_id
        assert "error.type" not in span.attributes and "gen_ai.tool.name" not in span.attributes
    assert "jsonrpc.request.id" not in named(spans, "notifications/initialized").attributes
    # The raw Mcp-Session-Id (32 hex digits) is in no span; neither is an argument.
    mcp_spans = [s for s in spans if "mcp.method.name" in s.attributes]
    assert {len(s.attributes["mcp.session.id"]) for s in mcp_spans if s.name != "initialize"} == {
        16
    }
    assert all(ORDER not in repr(s.attributes) + s.name for s in spans)

    # The audit line's log record and its answer's link to the MCP span.
    linked = {
        log.attributes["modeltap.kind"]: (log.trace_id, log.span_id)
        for log in otlp_receiver.logs
        if log.attributes.get("modeltap.seq") == record["seq"]
    }
    assert linked == {"audit": (add.trace_id, add.span_id), "mcp_result": linked["audit"]}

    points = mcp_points(otlp_receiver)
    server = {"server.address": "127.0.0.1", "server.port": box["port"]}
    common = {
        **server,
        "network.transport": "tcp",
        "network.protocol.name": "http",
        "mcp.protocol.version": "2025-11-25",
    }
    added = points[("tools/call", "add")]
    assert added.attributes == {
        **common,
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
    }
    assert (added.unit, added.count) == ("s", 1)
    assert added.sum == pytest.approx(duration_ms / 1000, abs=1e-5)
    assert added.explicit_bounds == conventions.MCP_SECONDS_BUCKETS
    assert points[("tools/call", "lookup_order")].attributes["error.type"] == "tool_error"
    assert points[("resources/read", None)].attributes["rpc.response.status_code"] == "-32602"
    assert ("notifications/initialized", None) in points  # acknowledged: measured too
    for point in points.values():
        assert "mcp.session.id" not in point.attributes  # not a metric attribute
        assert "jsonrpc.request.id" not in point.attributes


def test_a_refused_tools_call_has_a_span_and_no_measurement(
    start_proxy: Callable[..., Running], otlp_http_receiver: HttpReceiver
) -> None:
    box: dict[str, Any] = {}

    async def scenario() -> None:
        async with serve() as base:
            running = box["running"] = start_proxy(
                otlp=otlp_http_receiver.endpoint,
                mcp=[f"{SERVER}={base}/mcp"],
                session="agent",
                max_tool_calls=1,
            )
            async with mcp_shapes.client(f"{running.proxy.url}/mcp/{SERVER}", "legacy") as c:
                await c.call_tool("add", {"a": 2, "b": 3})
                with pytest.raises(MCPError):
                    await c.call_tool("weather", {"city": "Oslo"})
            await anyio.sleep(0.2)

    asyncio.run(scenario())
    spans = stop(box["running"], otlp_http_receiver)
    refused = named(spans, "tools/call weather")
    assert (refused.status, refused.attributes["error.type"]) == ("ERROR", "tool_budget_exceeded")
    assert refused.attributes["mcp.method.name"] == "tools/call"
    assert refused.attributes["gen_ai.tool.name"] == "weather"
    assert refused.parent_span_id == named(spans, "session agent").span_id
    assert named(spans, "tools/call add").status == "UNSET"
    points = mcp_points(otlp_http_receiver)
    assert ("tools/call", "add") in points
    assert ("tools/call", "weather") not in points  # it never went


def test_content_capture_puts_the_arguments_in_the_tools_call_span(
    start_proxy: Callable[..., Running], otlp_http_receiver: HttpReceiver
) -> None:
    box: dict[str, Any] = {}

    async def scenario() -> None:
        async with serve(json_response=True) as base:
            running = box["running"] = start_proxy(
                otlp=otlp_http_receiver.endpoint,
                mcp=[f"{SERVER}={base}/mcp"],
                capture_content=True,
            )
            async with mcp_shapes.client(f"{running.proxy.url}/mcp/{SERVER}", "legacy") as c:
                await c.call_tool("lookup_order", {"order_id": ORDER})
            await anyio.sleep(0.2)

    asyncio.run(scenario())
    spans = stop(box["running"], otlp_http_receiver)
    lookup = named(spans, "tools/call lookup_order")
    assert orjson.loads(lookup.attributes["gen_ai.tool.call.arguments"]) == {"order_id": ORDER}
    assert "gen_ai.tool.call.result" not in lookup.attributes  # results are never kept
    assert all("gen_ai.tool.call.arguments" not in s.attributes for s in spans if s is not lookup)
    # The files keep only the hash, capture or not.
    assert ORDER not in (box["running"].out / "audit.jsonl").read_text()


@pytest.mark.parametrize("transport", ["sse", "2026-07-28"])
def test_answers_off_their_post_still_end_their_spans(
    start_proxy: Callable[..., Running], otlp_http_receiver: HttpReceiver, transport: str
) -> None:
    """HTTP+SSE answers every POST with 202 and the answer on the GET stream;
    2026-07-28 has no session at all (no ``mcp.session.id``)."""
    box: dict[str, Any] = {}

    async def scenario() -> None:
        kind: Any = "sse" if transport == "sse" else "streamable"
        async with serve(kind) as base:
            endpoint = base if transport == "sse" else f"{base}/mcp"
            running = box["running"] = start_proxy(
                otlp=otlp_http_receiver.endpoint, mcp=[f"{SERVER}={endpoint}"]
            )
            url = f"{running.proxy.url}/mcp/{SERVER}"
            server = sse_client(url + "/sse") if transport == "sse" else url
            mode = "legacy" if transport == "sse" else "auto"
            async with mcp_shapes.client(server, mode) as c:
                added = await c.call_tool("add", {"a": 2, "b": 3})
                assert not added.is_error
            await anyio.sleep(0.2)

    asyncio.run(scenario())
    running: Running = box["running"]
    spans = stop(running, otlp_http_receiver)
    add = named(spans, "tools/call add")
    (record,) = [r for r in running.audit() if r["tool_name"] == "add"]
    (answer,) = [e for e in running.events("mcp_result") if e["seq"] == record["seq"]]
    assert add.status == "UNSET" and "error.type" not in add.attributes
    assert (add.end_ns - add.start_ns) / 1e6 == pytest.approx(answer["duration_ms"], abs=0.01)
    if transport == "sse":
        assert add.attributes["mcp.session.id"] == record["mcp_session"]
    else:
        assert "mcp.session.id" not in add.attributes
        assert add.attributes["mcp.protocol.version"] == "2026-07-28"
