"""A recording reverse proxy for MCP traffic, for capturing wire samples only.

It sits on 127.0.0.1 between an MCP client and an MCP server and writes down
every HTTP exchange as it passes: method, path, request headers and body,
response status and headers, and the response body as it came (JSON, or for
``text/event-stream`` each SSE event with its fields and the milliseconds since
the request started). It forwards bytes as they arrive (an SSE stream is
never held back) so the client behaves exactly as it would talking to the
server directly.

What it writes is meant to be committed (``tests/data/mcp/``), so
:meth:`Recorder.scenario` replaces what must not be kept: session ids
(``Mcp-Session-Id`` and the older transport's ``session_id`` query) become
``<session-N>``, credentials ``<redacted>``, ports ``<recorder>`` and
``<server>``, dates ``<date>``.

This is not modeltap and shares no code with it on purpose: the samples must
show what the SDKs and CLIs do, not what modeltap's own parsers make of it.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp import web

Json = dict[str, Any]

#: Hop-by-hop headers (RFC 9110 7.6.1) and those aiohttp sets itself on each leg.
_NOT_FORWARDED = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "upgrade", "te", "trailer", "host"}
)
_NOT_FORWARDED_BACK = _NOT_FORWARDED | {"content-length"}
#: Header values that are credentials, whatever a client calls them.
_SECRET_HEADERS = frozenset(
    {"authorization", "x-api-key", "cookie", "set-cookie", "proxy-authorization"}
)
_SESSION_QUERY = re.compile(r"session_id=([0-9A-Za-z_-]+)")


@dataclass
class Exchange:
    """One HTTP request and its response, as they crossed the recorder."""

    started: float
    method: str
    path: str
    request_headers: dict[str, str]
    request_body: bytes
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: bytearray = field(default_factory=bytearray)
    #: For an SSE response: each event block as it arrived (fields, ``t_ms``).
    events: list[Json] = field(default_factory=list)
    #: Who ended a stream early: "client" (it went away), or None.
    closed_by: str | None = None
    finished_ms: float | None = None


class SSEBlocks:
    """Splits an SSE byte stream into its blank-line separated blocks, keeping
    every field (``id``, ``event``, ``data``, ``retry``) and comments as sent;
    unlike a browser it also keeps blocks with no data (priming events)."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[Json]:
        self._pending += chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        blocks = []
        while b"\n\n" in self._pending:
            raw, self._pending = self._pending.split(b"\n\n", 1)
            blocks.append(self._block(raw.decode("utf-8", "replace")))
        return blocks

    @staticmethod
    def _block(text: str) -> Json:
        block: Json = {}
        data: list[str] = []
        for line in text.split("\n"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "":
                block.setdefault("comments", []).append(value)
            elif name == "data":
                data.append(value)
            else:
                block[name] = value
        if data:
            joined = "\n".join(data)
            try:
                block["data"] = orjson.loads(joined)
            except orjson.JSONDecodeError:
                block["data"] = joined  # the older transport's endpoint, or a priming ""
        return block


class Recorder:
    """The recording reverse proxy: ``async with Recorder(upstream) as rec``,
    point the client at :attr:`url` (plus the server's own path)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.exchanges: list[Exchange] = []
        self.port = 0
        self._t0 = time.monotonic()
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Recorder:
        # No timeout: an SSE stream stays open as long as the two ends want.
        self._client = aiohttp.ClientSession(
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None)
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, shutdown_timeout=1)
        await site.start()
        assert site._server is not None
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._client is not None:
            await self._client.close()

    def reset(self) -> None:
        """Start a new scenario: forget what was recorded, restart the clock."""
        self.exchanges = []
        self._t0 = time.monotonic()

    def _ms(self, since: float) -> float:
        return round((time.monotonic() - since) * 1000, 1)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        exchange = Exchange(
            started=time.monotonic(),
            method=request.method,
            path=request.path_qs,
            request_headers=dict(request.headers),
            request_body=body,
        )
        self.exchanges.append(exchange)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED}
        assert self._client is not None
        response: web.StreamResponse | None = None
        try:
            async with self._client.request(
                request.method, self.upstream + request.path_qs, headers=headers, data=body
            ) as upstream:
                exchange.status = upstream.status
                exchange.response_headers = dict(upstream.headers)
                back = {
                    k: v
                    for k, v in upstream.headers.items()
                    if k.lower() not in _NOT_FORWARDED_BACK
                }
                response = web.StreamResponse(status=upstream.status, headers=back)
                await response.prepare(request)
                sse = "text/event-stream" in upstream.headers.get("content-type", "")
                blocks = SSEBlocks()
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                    if sse:
                        for block in blocks.feed(chunk):
                            exchange.events.append({"t_ms": self._ms(exchange.started), **block})
                    else:
                        exchange.response_body += chunk
                await response.write_eof()
        except asyncio.CancelledError:
            exchange.closed_by = "client"
            raise
        except ConnectionResetError:  # the client went away while we wrote to it
            exchange.closed_by = "client"
            if response is None:
                raise
        except aiohttp.ClientError:
            # The server ended the stream without finishing it (a resumable
            # stream it closed on purpose, say): pass the cut on to the client.
            exchange.closed_by = "server"
            if response is None:
                raise
            assert request.transport is not None
            request.transport.close()
        finally:
            exchange.finished_ms = self._ms(exchange.started)
        return response

    # ------------------------------------------------------------ writing

    def scenario(self, **about: Any) -> Json:
        """The exchanges so far as one sample: ``about`` (client, versions,
        what was done) first, then ``exchanges`` in the order they started,
        with every session id, credential, port and date replaced."""
        ordered = sorted(self.exchanges, key=lambda e: e.started)
        sample: Json = {**about, "exchanges": [self._as_json(e) for e in ordered]}
        text = orjson.dumps(sample).decode()
        for secret, placeholder in self._placeholders(ordered).items():
            text = text.replace(secret, placeholder)
        result: Json = orjson.loads(text)
        return result

    def _as_json(self, e: Exchange) -> Json:
        out: Json = {
            "t_ms": round((e.started - self._t0) * 1000, 1),
            "method": e.method,
            "path": e.path,
            "request_headers": _headers(e.request_headers),
        }
        if e.request_body:
            out.update(_body("request", bytes(e.request_body)))
        out["status"] = e.status
        out["response_headers"] = _headers(e.response_headers)
        if e.events or "text/event-stream" in _header(e.response_headers, "content-type"):
            out["sse_events"] = e.events
        elif e.response_body:
            out.update(_body("response", bytes(e.response_body)))
        if e.closed_by is not None:
            out["closed_by"] = e.closed_by
        elif e.finished_ms is None:
            out["closed_by"] = "nobody: still open when the sample was written"
        out["duration_ms"] = e.finished_ms
        return out

    def _placeholders(self, exchanges: list[Exchange]) -> dict[str, str]:
        found: dict[str, str] = {}

        def add(value: str, kind: str) -> None:
            if value and value not in found:
                n = sum(1 for p in found.values() if p.startswith(f"<{kind}-")) + 1
                found[value] = f"<{kind}-{n}>"

        for e in exchanges:
            for headers in (e.request_headers, e.response_headers):
                for name, value in headers.items():
                    if name.lower() == "mcp-session-id":
                        add(value, "session")
            for match in _SESSION_QUERY.finditer(e.path):
                add(match.group(1), "session")
            for event in e.events:
                if isinstance(event.get("data"), str):
                    for match in _SESSION_QUERY.finditer(event["data"]):
                        add(match.group(1), "session")
        upstream_port = self.upstream.rsplit(":", 1)[1].split("/", 1)[0]
        found[f"127.0.0.1:{self.port}"] = "127.0.0.1:<recorder>"
        found[f"localhost:{self.port}"] = "localhost:<recorder>"
        found[f"127.0.0.1:{upstream_port}"] = "127.0.0.1:<server>"
        return found


def _headers(headers: dict[str, str]) -> dict[str, str]:
    out = {}
    for name, value in headers.items():
        low = name.lower()
        if low in _SECRET_HEADERS:
            value = "<redacted>" if not value.lower().startswith("bearer ") else "Bearer <redacted>"
        elif low == "date":
            value = "<date>"
        out[str(name)] = value  # as the sender spelled it: case is part of the shape
    return out


def _header(headers: dict[str, str], name: str) -> str:
    return next((v for k, v in headers.items() if k.lower() == name), "")


def _body(which: str, raw: bytes) -> Json:
    """``{which}_body`` (the JSON) or, for a body that is not JSON (the older
    transport's ``Accepted``), ``{which}_text``."""
    try:
        return {f"{which}_body": orjson.loads(raw)}
    except orjson.JSONDecodeError:
        return {f"{which}_text": raw.decode("utf-8", "replace")}
