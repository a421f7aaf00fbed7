"""MCP through the proxy with the official SDK on both sides (SPEC 3b).

The server is tests/mcp_server.py (the SDK's ``MCPServer``) on a loopback
port, mounted with ``--mcp shapes=URL``; the client is the SDK's ``Client``
pointed at ``/mcp/shapes``: Streamable HTTP in JSON and SSE answer modes,
stateful and stateless, at 2025-11-25 (``initialize``) and 2026-07-28 (the
SDK's default), and the older HTTP+SSE transport (``sse_client``). Each test
checks the lines written; bad input is refused by name and never reaches the
server (it notes every request it receives).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import orjson
import pytest
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared._httpx_utils import create_mcp_http_client

from modeltap.app.proxy import Proxy, ProxyConfig
from modeltap.evidence.capture import Capture
from tests import mcp_shapes
from tests.conftest import read_jsonl
from tests.mcp_server import serve

SERVER = "shapes"


@contextlib.asynccontextmanager
async def proxied(
    tmp_path: Path,
    transport: mcp_shapes.Any = "streamable",
    *,
    json_response: bool = False,
    stateless: bool = False,
    server: MCPServer | None = None,
    seen: list[tuple[str, str]] | None = None,
    **config: Any,
) -> AsyncIterator[tuple[Proxy, str]]:
    """The test server behind a proxy mounting it at /mcp/shapes: the proxy and
    the server's URL through it (``/mcp/shapes``, whose ``/sse`` is HTTP+SSE's)."""
    async with serve(
        transport, json_response=json_response, stateless=stateless, server=server, seen=seen
    ) as base:
        endpoint = base if transport == "sse" else f"{base}/mcp"
        cfg = ProxyConfig(
            listen_port=0,
            out=str(tmp_path / "out"),
            mcp=[f"{SERVER}={endpoint}"],
            quiet=True,
            **config,
        )
        proxy = Proxy(cfg).start()
        try:
            yield proxy, f"{proxy.url}/mcp/{SERVER}"
        finally:
            await anyio.sleep(0.2)  # the DELETE and the GET stream's end pass
            proxy.stop()


def lines(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    return read_jsonl(tmp_path / "out" / name)


def audited(tmp_path: Path) -> list[tuple[Any, ...]]:
    """Each audit line as ``(message_type, mcp_method, jsonrpc_id, tool_name, continues_seq)``."""
    return [
        (r["message_type"], r["mcp_method"], r["jsonrpc_id"], r["tool_name"], r["continues_seq"])
        for r in lines(tmp_path, "audit.jsonl")
    ]


def results(tmp_path: Path) -> dict[int | None, dict[str, Any]]:
    return {e["seq"]: e for e in lines(tmp_path, "events.jsonl") if e["kind"] == "mcp_result"}


def kinds(tmp_path: Path, kind: str) -> list[tuple[Any, ...]]:
    return [
        (e["seq"], e.get("mcp_method") or e.get("method"))
        for e in lines(tmp_path, "events.jsonl")
        if e["kind"] == kind
    ]


def request(
    id: int, method: str, tool: str | None = None, continues: int | None = None
) -> tuple[Any, ...]:
    return ("request", method, id, tool, continues)


#: What the core steps (tests/mcp_shapes.py CORE_STEPS) send after the handshake.
HANDSHAKE = [
    request(1, "initialize"),
    ("notification", "notifications/initialized", None, None, None),
]
CORE = [
    request(2, "tools/list"),
    request(3, "tools/call", "add"),
    request(4, "tools/call", "lookup_order"),
    request(5, "tools/call", "count_slowly"),
    request(6, "ping"),
    request(7, "tools/call", "summarise"),
]

MODES = {
    # name: (client mode, json_response, stateless)
    "sse-stateful": ("legacy", False, False),
    "json-stateful": ("legacy", True, False),
    "sse-stateless": ("legacy", False, True),
    "json-stateless": ("legacy", True, True),
    "sse-2026-07-28": ("auto", False, False),
    "json-2026-07-28": ("auto", True, False),
}


async def run_core_steps(url: str, mode: str) -> list[dict[str, str]]:
    async with mcp_shapes.client(url, mode) as c:
        return await mcp_shapes.run_steps(c, mcp_shapes.steps(full=False, resumable=False))


@pytest.mark.parametrize("name", list(MODES))
def test_streamable_http_through_the_proxy(tmp_path: Path, name: str) -> None:
    mode, json_response, stateless = MODES[name]
    seen: list[tuple[str, str]] = []

    async def scenario() -> list[dict[str, str]]:
        async with proxied(
            tmp_path, json_response=json_response, stateless=stateless, seen=seen
        ) as (_, url):
            return await run_core_steps(url, mode)

    done = asyncio.run(scenario())
    assert [s["outcome"] for s in done if s["step"] == "tools/call add"] == ["ok"]
    modern = mode == "auto"
    back_channel = not json_response and not stateless  # sampling can reach the client
    expected = [request(1, "server/discover")] if modern else list(HANDSHAKE)
    expected += CORE
    if modern:
        # input_required, then the same execution retried with a new id: it
        # continues the tools/call of line 7 (discover, then the six above).
        expected.append(request(8, "tools/call", "summarise", continues=7))
        expected.append(request(9, "tools/call", "grow_catalogue"))
    else:
        if back_channel:
            expected.append(("result", "sampling/createMessage", 1, None, None))
        expected.append(request(8, "tools/call", "grow_catalogue"))
    got = audited(tmp_path)
    assert got == expected
    posts = [p for p in seen if p[0] == "POST"]
    assert len(posts) == len(got)  # one line per message, nothing unaudited went

    records = lines(tmp_path, "audit.jsonl")
    by_seq = results(tmp_path)
    for record in records:
        if record["message_type"] == "request":
            answer = by_seq[record["seq"]]
            assert (answer["mcp_method"], answer["jsonrpc_id"]) == (
                record["mcp_method"],
                record["jsonrpc_id"],
            )
    calls: dict[str, dict[str, Any]] = {}
    for r in records:
        if r["tool_name"]:
            calls.setdefault(r["tool_name"], r)  # an execution's first tools/call
    add = calls["add"]
    canonical = b'{"a":2,"b":3}'
    assert (add["arguments_sha256"], add["arguments_bytes"]) == (
        hashlib.sha256(canonical).hexdigest(),
        len(canonical),
    )
    assert by_seq[add["seq"]]["is_error"] is False
    assert by_seq[add["seq"]]["structured_content"] is True
    assert by_seq[calls["lookup_order"]["seq"]]["is_error"] is True
    assert by_seq[calls["lookup_order"]["seq"]]["framing"] == (
        "json" if json_response or modern else "sse"
    )
    listing = by_seq[next(r["seq"] for r in records if r["mcp_method"] == "tools/list")]
    assert [t["name"] for t in listing["tools"]][:3] == ["add", "weather", "forecast"]
    assert len(listing["tools_sha256"]) == 64

    versions = {r["protocol_version"] for r in records}
    assert versions == ({"2026-07-28"} if modern else {"2025-11-25"})
    sessions = {r["mcp_session"] for r in records[0 if modern else 1 :]}
    if stateless or modern:
        assert sessions == {None}  # no session on the wire
    else:
        (key,) = sessions
        assert key is not None and len(key) == 16
        assert {r["session_id"] for r in records[1:]} == {f"mcp-{SERVER}-{key}"}

    summarise = by_seq[calls["summarise"]["seq"]]
    if modern:
        assert summarise["result_type"] == "input_required"
        assert kinds(tmp_path, "mcp_request") == [(summarise["seq"], "sampling/createMessage")]
    elif back_channel:
        assert summarise["is_error"] is False
        assert kinds(tmp_path, "mcp_request") == [(summarise["seq"], "sampling/createMessage")]
    else:
        assert (summarise["outcome"], summarise["error_code"]) == ("error", -32600)
    ping = by_seq[next(r["seq"] for r in records if r["mcp_method"] == "ping")]
    if modern:
        assert (ping["outcome"], ping["error_code"], ping["status"]) == ("error", -32601, 404)
    notified = kinds(tmp_path, "mcp_notification")
    count = calls["count_slowly"]["seq"]
    progress = [seq for seq, method in notified if method == "notifications/progress"]
    assert progress == ([] if json_response else [count, count])
    if not stateless and not modern:
        assert (None, "notifications/tools/list_changed") in notified  # on the GET stream
        methods = [m for _, m in kinds(tmp_path, "mcp_exchange")]
        assert sorted(methods) == ["DELETE", "GET"]
    (status,) = [s for s in lines(tmp_path, "sessions.jsonl") if s["mcp_messages_audited"] > 1]
    assert status["mcp_tool_calls"] == 5  # add, lookup_order, count_slowly, summarise, grow
    assert status["refusals"] == 0

    # The Mcp-Session-Id (the server's uuid4 hex) is in no file, only its hash.
    raw = b"".join((tmp_path / "out" / n).read_bytes() for n in ("audit.jsonl", "events.jsonl"))
    hashed = {hashlib.sha256(t).hexdigest()[:16] for t in re.findall(rb"[0-9a-f]{32}", raw)}
    assert not hashed & sessions

    capture = Capture.load(tmp_path / "out")
    assert len(capture.mcp_records) == len(records) and not capture.load_errors
    assert sum(len(s.mcp_events) for s in capture.sessions.values()) == sum(
        1 for e in lines(tmp_path, "events.jsonl") if e["kind"].startswith("mcp_")
    )


def test_http_sse_transport_through_the_mount(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []

    ids: list[str] = []

    async def scenario() -> list[dict[str, str]]:
        async with proxied(tmp_path, "sse", seen=seen) as (_, url):
            transport = sse_client(url + "/sse", on_session_created=ids.append)
            async with mcp_shapes.client(transport, "legacy") as c:
                return await mcp_shapes.run_steps(c, mcp_shapes.steps(full=False, resumable=False))

    done = asyncio.run(scenario())
    assert all(s["outcome"].startswith("ok") for s in done if s["step"] != "wait for notifications")
    # The endpoint event was put on the mount: every POST came through the proxy.
    assert {p for p in seen} == {("GET", "/sse"), ("POST", "/messages/")}
    expected = [*HANDSHAKE, *CORE, ("result", "sampling/createMessage", 1, None, None)]
    expected.append(request(8, "tools/call", "grow_catalogue"))
    assert audited(tmp_path) == expected
    records = lines(tmp_path, "audit.jsonl")
    (key,) = {r["mcp_session"] for r in records}
    assert key is not None and {r["path"] for r in records} == {"/messages/?session_id=REDACTED"}
    assert records[0]["protocol_version"] == "2025-11-25"  # only initialize says it
    assert {r["protocol_version"] for r in records[1:]} == {None}
    by_seq = results(tmp_path)
    assert all(by_seq[r["seq"]]["status"] == 200 for r in records if r["message_type"] == "request")
    (stream,) = [e for e in lines(tmp_path, "events.jsonl") if e["kind"] == "mcp_exchange"]
    assert (stream["method"], stream["endpoint"], stream["mcp_session"]) == (
        "GET",
        "rewritten",
        key,
    )
    (session_id,) = ids
    assert key == hashlib.sha256(session_id.encode()).hexdigest()[:16]
    for name in ("audit.jsonl", "events.jsonl", "sessions.jsonl"):
        assert session_id.encode() not in (tmp_path / "out" / name).read_bytes(), name


def test_bad_input_is_refused_by_name_and_never_reaches_the_server(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "add", "arguments": {}},
    }
    json = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    cases: list[tuple[bytes, dict[str, str], int, str]] = [
        (b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}', {}, 400, "mcp_not_jsonrpc"),
        (b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}', {}, 400, "duplicate_key"),
        (b"\x1f\x8b", {"content-encoding": "gzip"}, 400, "undecodable_content_encoding"),
        (b"x", {"content-encoding": "quoted-printable"}, 400, "undecodable_content_encoding"),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"t":"' + b"x" * 2048 + b'"}}',
            {},
            413,
            "body_too_large",
        ),
        (
            orjson.dumps(call),
            {"mcp-method": "tools/call", "mcp-name": "delete_file"},
            400,
            "mcp_header_mismatch",
        ),
        (orjson.dumps(call), {"mcp-method": "tools/list"}, 400, "mcp_header_mismatch"),
    ]

    async def scenario() -> list[httpx2.Response]:
        async with (
            proxied(tmp_path, seen=seen, max_body="1k") as (_, url),
            httpx2.AsyncClient() as client,
        ):
            return [
                await client.post(url, content=raw, headers={**json, **extra})
                for raw, extra, _, _ in cases
            ]

    answers = asyncio.run(scenario())
    for answer, (_, _, status, rule) in zip(answers, cases, strict=True):
        assert answer.status_code == status, rule
        error = answer.json()
        assert error["jsonrpc"] == "2.0" and error["error"]["data"] == {"rule": rule}
        assert error["error"]["message"].startswith(f"modeltap refused this message: {rule}")
    assert seen == []  # nothing was forwarded
    assert lines(tmp_path, "audit.jsonl") == []
    refused = [e for e in lines(tmp_path, "events.jsonl") if e["kind"] == "rejected"]
    assert [e["rule"] for e in refused] == [rule for *_, rule in cases]
    assert {e["api"] for e in refused} == {"mcp"}
    assert refused[-1]["mcp"]["messages"] == [
        {"message_type": "request", "mcp_method": "tools/call", "jsonrpc_id": 1, "tool_name": "add"}
    ]


def test_a_tools_call_past_the_budget_is_refused_before_the_server(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []

    async def scenario() -> tuple[Any, str]:
        proxy = proxied(tmp_path, seen=seen, max_tool_calls=1, session="agent")
        async with proxy as (_, url), mcp_shapes.client(url, "legacy") as c:
            first = await c.call_tool("add", {"a": 2, "b": 3})
            with pytest.raises(Exception) as caught:
                await c.call_tool("weather", {"city": "Oslo"})
            return first, str(caught.value)

    first, error = asyncio.run(scenario())
    assert isinstance(first, types.CallToolResult) and not first.is_error
    assert "tool_budget_exceeded" in error
    calls = [r for r in lines(tmp_path, "audit.jsonl") if r["tool_name"]]
    assert [r["tool_name"] for r in calls] == ["add"]
    (refused,) = [e for e in lines(tmp_path, "events.jsonl") if e["kind"] == "rejected"]
    assert refused["mcp"]["messages"][0]["tool_name"] == "weather"  # a denied call is named
    (status,) = lines(tmp_path, "sessions.jsonl")
    assert (status["session_id"], status["stop_reason"], status["mcp_tool_calls"]) == (
        "agent",
        "tool_budget_exceeded",
        1,
    )


def test_a_message_after_its_session_ended_is_refused(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []

    async def scenario() -> str:
        async with proxied(tmp_path, seen=seen) as (proxy, url):
            headers = {"x-modeltap-session": "s1"}
            http = create_mcp_http_client(headers=headers)
            async with (
                http,
                mcp_shapes.client(streamable_http_client(url, http_client=http), "legacy") as c,
            ):
                await c.call_tool("add", {"a": 1, "b": 1})
                proxy.core.end_session("s1")
                before = len(seen)
                with pytest.raises(Exception) as caught:
                    await c.call_tool("add", {"a": 1, "b": 2})
                assert len(seen) == before  # the server never saw it
                return str(caught.value)

    assert "session_ended" in asyncio.run(scenario())
    refused = [e for e in lines(tmp_path, "events.jsonl") if e["kind"] == "rejected"]
    assert [e["rule"] for e in refused][:1] == ["session_ended"]


def never_buffering_server(released: asyncio.Event) -> MCPServer:
    """A tool that reports progress, then waits until the client has seen it."""
    server = MCPServer("buffering")

    @server.tool(description="Report progress, then wait for the client to see it.")
    async def wait_for_client(ctx: Context) -> str:
        await ctx.report_progress(1, 2, "first")
        with anyio.fail_after(10):
            await released.wait()
        await ctx.report_progress(2, 2, "second")
        return "done"

    return server


def test_each_sse_event_reaches_the_client_before_the_server_sends_the_next(tmp_path: Path) -> None:
    """The tool's second event waits until the client has seen its first: a proxy
    that held the stream back would leave the tool waiting (and the call fails)."""

    async def scenario() -> tuple[types.CallToolResult, list[float]]:
        released = asyncio.Event()
        heard: list[float] = []

        async def progress(value: float, total: float | None, message: str | None) -> None:
            heard.append(value)
            released.set()

        proxy = proxied(tmp_path, server=never_buffering_server(released))
        async with proxy as (_, url), mcp_shapes.client(url, "legacy") as c:
            answer = await c.call_tool("wait_for_client", {}, progress_callback=progress)
        return answer, heard

    answer, heard = asyncio.run(scenario())
    assert not answer.is_error and heard == [1, 2]
    (call,) = [r for r in lines(tmp_path, "audit.jsonl") if r["tool_name"]]
    assert kinds(tmp_path, "mcp_notification") == [(call["seq"], "notifications/progress")] * 2
