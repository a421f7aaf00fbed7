"""The MCP server the wire samples were captured against: the official SDK's
``MCPServer`` (FastMCP until mcp 2) with one of each thing a proxy must see.

Tools with arguments (``add``, ``weather`` with an output schema and
``structuredContent``, ``forecast`` with an ``x-mcp-header`` argument), a
tool error result (``lookup_order``: ``isError: true``), a tool that raises
(``explode``), progress and log notifications (``count_slowly``), a
catalogue change (``grow_catalogue``: a new tool, then
``notifications/tools/list_changed``), server-to-client requests
(``summarise``: ``sampling/createMessage``; ``delete_file``:
``elicitation/create``), a stream the server cuts so the client resumes
with ``Last-Event-ID`` (``pause``), a resource, a resource template and a
prompt.

:func:`serve` runs it with uvicorn on 127.0.0.1 in Streamable HTTP (JSON or
SSE answers, stateful or stateless, with an event store so SSE events carry
ids) or the older HTTP+SSE transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import mcp_types as types
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve, Sample
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from pydantic import BaseModel, Field

Transport = Literal["streamable", "sse"]


class Weather(BaseModel):
    city: str
    celsius: float
    sky: str


class Confirmation(BaseModel):
    confirm: bool = Field(description="Really delete it?")


class CountingEventStore(EventStore):
    """Keeps every event in memory with ids ``1``, ``2``, ... (stable across
    captures, unlike uuids), so the server can resume a stream after
    ``Last-Event-ID``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, types.JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: str, message: types.JSONRPCMessage | None) -> str:
        event_id = str(len(self.events) + 1)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        found = next((i for i, e in enumerate(self.events) if e[0] == last_event_id), None)
        if found is None:
            return None
        stream_id = self.events[found][1]
        for event_id, stream, message in self.events[found + 1 :]:
            if stream == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


def _ask_to_summarise(text: str) -> Sample:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=text))
    return Sample([message], max_tokens=50, system_prompt="Summarise in five words.")


def _ask_to_confirm(path: str) -> Elicit[Confirmation]:
    return Elicit(f"Delete {path}?", Confirmation)


def build_server() -> MCPServer:
    """A fresh server (its catalogue grows during a capture, so one per run)."""
    server = MCPServer("shapes", version="1.0.0", instructions="A server for wire samples.")

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Today's weather in a city.")
    def weather(city: str) -> Weather:
        return Weather(city=city, celsius=21.5, sky="clear")

    @server.tool(description="A forecast; the region also travels as a header (2026-07-28).")
    def forecast(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})], days: int = 3
    ) -> str:
        return f"{days} days of sun in {region}"

    @server.tool(description="Look an order up.")
    def lookup_order(order_id: str) -> types.CallToolResult:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"no order {order_id}")], is_error=True
        )

    @server.tool(description="Always fails.")
    def explode() -> str:
        raise ValueError("the tool broke")

    @server.tool(description="Count to n, reporting progress.")
    async def count_slowly(n: int, ctx: Context) -> str:
        for i in range(1, n + 1):
            await ctx.report_progress(i, n, f"step {i}")
        with contextlib.suppress(Exception):  # logging is deprecated at 2026-07-28
            await ctx.info("counted")
        return f"counted to {n}"

    @server.tool(description="Add a tool to the catalogue.")
    async def grow_catalogue(ctx: Context) -> str:
        def shout(text: str) -> str:
            return text.upper()

        server.add_tool(shout, description="Upper-case a text.")
        with contextlib.suppress(Exception):
            await ctx.session.send_tool_list_changed()
        with contextlib.suppress(Exception):
            await ctx.notify_tools_changed()
        return "added shout"

    @server.tool(description="Summarise a text with the client's model (sampling).")
    def summarise(
        text: str, sampled: Annotated[types.CreateMessageResult, Resolve(_ask_to_summarise)]
    ) -> str:
        content = sampled.content
        return content.text if isinstance(content, types.TextContent) else "?"

    @server.tool(description="Delete a file after asking the user (elicitation).")
    def delete_file(path: str, answer: Annotated[Confirmation, Resolve(_ask_to_confirm)]) -> str:
        return f"deleted {path}" if answer.confirm else "kept"

    @server.tool(description="Cut the SSE stream mid-call; the client resumes it.")
    async def pause(ctx: Context) -> str:
        await ctx.report_progress(1, 2, "before the cut")
        await ctx.close_sse_stream()
        await asyncio.sleep(0.3)
        await ctx.report_progress(2, 2, "after the cut")
        return "resumed"

    @server.resource("notes://today", description="Today's notes.", mime_type="text/plain")
    def notes() -> str:
        return "ship the release on friday"

    @server.resource("orders://{order_id}", description="An order.")
    def order(order_id: str) -> str:
        return f'{{"order": "{order_id}", "state": "shipped"}}'

    @server.prompt(description="Ask for a code review.")
    def review(code: str) -> str:
        return f"Please review this code:\n{code}"

    return server


def _noting(app: Any, seen: list[tuple[str, str]]) -> Any:
    """An ASGI app that notes each HTTP request, then hands it to ``app``."""

    async def noted(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append((scope["method"], scope["path"]))
        await app(scope, receive, send)

    return noted


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def serve(
    transport: Transport = "streamable",
    *,
    json_response: bool = False,
    stateless: bool = False,
    event_store: bool = True,
    server: MCPServer | None = None,
    seen: list[tuple[str, str]] | None = None,
) -> AsyncIterator[str]:
    """Run a fresh server (or ``server``) on 127.0.0.1 until the block ends.

    Args:
        seen: if given, every HTTP request the server receives is appended as
            ``(method, path)``: what reached it, and so what did not.

    Yields:
        Its base URL (``http://127.0.0.1:PORT``); the endpoint is ``/mcp``
        (Streamable HTTP) or ``/sse`` (HTTP+SSE).
    """
    server = server or build_server()
    if transport == "sse":
        app = server.sse_app()
    else:
        app = server.streamable_http_app(
            json_response=json_response,
            stateless_http=stateless,
            event_store=CountingEventStore() if event_store and not stateless else None,
            retry_interval=100,
        )
    if seen is not None:
        app = _noting(app, seen)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    runner = uvicorn.Server(config)
    task = asyncio.create_task(runner.serve())
    while not runner.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        runner.should_exit = True
        await task
