"""The replay upstream alone: HTTP/1.1 on h11, spoken to it byte for byte.

The round trips through the proxy and the SDKs are in test_record_replay.py;
these check what only a raw client sees: keep-alive, the framing of each
answer, a cut stream, and what it refuses.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import h11
import orjson
import pytest
from websockets.asyncio.client import connect as ws_connect

from modeltap.replay.matching import UNRECORDED, Played
from modeltap.replay.recording import BLOBS_DIR, BlobStore, Entry, Recording
from modeltap.replay.upstream import (
    BAD_REQUEST,
    CONNECTION_HEADER,
    ENTRY_HEADER,
    MAX_HEAD,
    ReplayServer,
)

pytestmark = pytest.mark.anyio

SSE = b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"


def recording(tmp_path: Path, *responses: dict[str, Any]) -> Recording:
    """A recording whose entries answer with ``responses`` (bodies given as bytes)."""
    root = tmp_path / "rec"
    blobs = BlobStore(root / BLOBS_DIR)
    blobs.root.mkdir(parents=True)
    entries = []
    for index, response in enumerate(responses):
        response = dict(response)
        if isinstance(response.get("body"), bytes):
            response["body"] = blobs.put(response["body"])
        line = {"v": 1, "kind": "unaudited", "method": "POST", "response": response}
        entries.append(Entry(index, line, None, None, None, "http", None))
    return Recording(root, entries)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[ReplayServer]:
    json_body = b'{"id": "chatcmpl-1"}'
    server = ReplayServer(
        recording(
            tmp_path,
            {"status": 200, "headers": {"content-type": "application/json"}, "body": json_body},
            {
                "status": 200,
                "headers": {"content-type": "text/event-stream", "x-request-id": "a\r\nb: c"},
                "body": b"".join(SSE),
                "chunks": [[0, len(c)] for c in SSE],
            },
            {
                "status": 200,
                "headers": {"content-type": "text/event-stream"},
                "body": SSE[0],
                "chunks": [[0, len(SSE[0])]],
                "error": "the stream was cut",
            },
            {"status": None, "headers": {}},
        ),
        fast=True,
        max_body=1024,
        stall_timeout_s=0.2,
    )
    await server.start()
    yield server
    server.close()


class Client:
    """One connection to the server, read with h11's client side."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = h11.Connection(h11.CLIENT)

    def send(self, *events: h11.Event) -> None:
        for event in events:
            self.writer.write(self.conn.send(event) or b"")

    def post(self, entry: str | None, body: bytes = b"{}") -> None:
        tag = [] if entry is None else [(ENTRY_HEADER, entry)]
        headers = [("host", "upstream"), ("content-length", str(len(body))), *tag]
        self.send(h11.Request(method="POST", target="/v1/x", headers=headers))
        self.send(h11.Data(data=body), h11.EndOfMessage())

    async def next_event(self) -> h11.Event:
        while (event := self.conn.next_event()) is h11.NEED_DATA:
            self.conn.receive_data(await asyncio.wait_for(self.reader.read(65536), 10))
        assert not isinstance(event, type)  # PAUSED cannot come mid-response
        return event

    async def events(self) -> list[h11.Event]:
        """The events of the next response, up to its end (or the connection's)."""
        got = [await self.next_event()]
        while not isinstance(got[-1], h11.EndOfMessage | h11.ConnectionClosed):
            got.append(await self.next_event())
        return got

    async def response(self) -> tuple[h11.Response, bytes]:
        events = await self.events()
        (head,) = [e for e in events if isinstance(e, h11.Response)]
        return head, b"".join(e.data for e in events if isinstance(e, h11.Data))

    async def closed(self) -> bool:
        """True when the server closes the connection with nothing more said."""
        return await asyncio.wait_for(self.reader.read(65536), 10) == b""


Connect = Callable[[], Awaitable[Client]]


@pytest.fixture
async def connect(served: ReplayServer) -> AsyncIterator[Connect]:
    """Open connections to the served recording; all closed after the test."""
    clients: list[Client] = []

    async def opened() -> Client:
        clients.append(Client(*await asyncio.open_connection(served.host, served.port)))
        return clients[-1]

    yield opened
    for client in clients:
        client.writer.close()
        with contextlib.suppress(ConnectionError):
            await client.writer.wait_closed()


def header(head: h11.Response, name: bytes) -> bytes | None:
    return next((v for k, v in head.headers if k == name), None)


async def test_keep_alive_serves_each_request_on_one_connection(connect: Connect) -> None:
    client = await connect()
    client.post("0")
    head, body = await client.response()
    assert (head.status_code, body) == (200, b'{"id": "chatcmpl-1"}')
    assert header(head, b"content-length") == b"%d" % len(body)
    assert header(head, b"content-type") == b"application/json"
    client.conn.start_next_cycle()
    client.post("99")
    head, body = await client.response()
    assert head.status_code == 404
    assert orjson.loads(body)["error"]["code"] == UNRECORDED
    assert "not a recorded exchange" in orjson.loads(body)["error"]["message"]
    client.conn.start_next_cycle()
    client.post(None)  # untagged: not a recorded exchange either
    head, _ = await client.response()
    assert head.status_code == 404
    client.conn.start_next_cycle()
    client.post("0")
    head, _ = await client.response()
    assert head.status_code == 200


async def test_a_stream_is_chunked_chunk_by_chunk(connect: Connect) -> None:
    client = await connect()
    client.post("1")
    events = await client.events()
    head = events[0]
    assert isinstance(head, h11.Response) and header(head, b"transfer-encoding") == b"chunked"
    assert header(head, b"content-length") is None
    # A recorded value with a line break is left out, never sent as two headers.
    assert header(head, b"x-request-id") is None and header(head, b"b") is None
    chunks = [e for e in events if isinstance(e, h11.Data)]
    assert [bytes(c.data) for c in chunks] == list(SSE)
    assert all(c.chunk_start and c.chunk_end for c in chunks)  # one HTTP chunk each
    assert isinstance(events[-1], h11.EndOfMessage)


async def test_a_cut_stream_is_cut_again(connect: Connect) -> None:
    client = await connect()
    client.post("2")
    with pytest.raises(h11.RemoteProtocolError):  # the body ends without its last chunk
        await client.events()
    assert client.conn.their_state is h11.ERROR


async def test_an_upstream_that_never_answered_is_not_answered(connect: Connect) -> None:
    client = await connect()
    client.post("3")
    assert await client.closed()


async def test_a_chunked_request_body_is_read_and_dropped(connect: Connect) -> None:
    client = await connect()
    headers = [("host", "upstream"), ("transfer-encoding", "chunked"), (ENTRY_HEADER, "0")]
    client.send(h11.Request(method="POST", target="/v1/x", headers=headers))
    client.send(h11.Data(data=b'{"a":'), h11.Data(data=b"1}"), h11.EndOfMessage())
    head, _ = await client.response()
    assert head.status_code == 200


async def test_expect_100_continue_is_answered_before_the_body(connect: Connect) -> None:
    client = await connect()
    headers = [("host", "u"), ("content-length", "2"), ("expect", "100-continue")]
    client.send(h11.Request(method="POST", target="/v1/x", headers=[*headers, (ENTRY_HEADER, "0")]))
    informational = await client.next_event()  # before any of the body was sent
    assert isinstance(informational, h11.InformationalResponse)
    assert informational.status_code == 100
    client.send(h11.Data(data=b"{}"), h11.EndOfMessage())
    head, _ = await client.response()
    assert head.status_code == 200


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", 400),
        (b"POST /v1/x HTTP/1.1\r\nhost: u\r\ncontent-length: nope\r\n\r\n", 400),
        # Each one byte past its bound, and no more: what the server leaves
        # unread when it closes would reset the connection before the answer is read.
        ((b"POST /v1/x HTTP/1.1\r\nhost: u\r\nx-big: " + b"a" * MAX_HEAD)[: MAX_HEAD + 1], 431),
        (b"POST /v1/x HTTP/1.1\r\nhost: u\r\ncontent-length: 2048\r\n\r\n" + b"x" * 1025, 413),
    ],
    ids=["not-http", "bad-length", "head-too-large", "body-too-large"],
)
async def test_what_it_cannot_read_is_refused_and_the_connection_closed(
    connect: Connect, raw: bytes, status: int
) -> None:
    client = await connect()
    client.writer.write(raw)
    # Only so that h11's client side expects an answer; what it frames is not sent.
    client.conn.send(h11.Request(method="POST", target="/", headers=[("host", "u")]))
    head, body = await client.response()
    assert head.status_code == status
    assert orjson.loads(body)["error"]["code"] == BAD_REQUEST
    assert await client.closed()


async def test_a_request_that_stops_halfway_is_dropped(connect: Connect) -> None:
    client = await connect()
    client.writer.write(b"POST /v1/x HTTP/1.1\r\nhost: u\r\ncontent-length: 10\r\n\r\n{")
    assert await client.closed()


async def test_an_idle_connection_stays_open_between_requests(
    served: ReplayServer, connect: Connect
) -> None:
    client = await connect()
    await asyncio.sleep(4 * served.stall_timeout_s)  # longer than a stalled request may take
    client.post("0")
    head, _ = await client.response()
    assert head.status_code == 200


async def test_a_websocket_it_was_not_told_about_is_refused(connect: Connect) -> None:
    client = await connect()
    client.send(h11.Request(method="GET", target="/v1/responses", headers=_upgrade("nobody")))
    head, body = await client.response()
    assert head.status_code == 404 and body == b"modeltap replay: not a replayed connection\n"
    assert await client.closed()


async def test_a_websocket_handshake_is_checked_by_websockets(
    served: ReplayServer, connect: Connect
) -> None:
    served.connections["c1"] = deque()
    client = await connect()
    headers = [h for h in _upgrade("c1") if h[0] != "sec-websocket-key"]
    client.send(h11.Request(method="GET", target="/v1/responses", headers=headers))
    head, body = await client.response()
    assert head.status_code == 400 and b"Sec-WebSocket-Key" in body


async def test_each_websocket_create_gets_its_decision_in_order(served: ReplayServer) -> None:
    recorded = [
        {"ms": 0, "from": "client", "text": "{}"},
        {"ms": 0, "from": "server", "text": "hi"},
    ]
    entry = Entry(9, {"messages": recorded}, None, None, None, "websocket", None)
    served.connections["c1"] = deque([Played(entry), Played(None, code="changed", detail="d")])
    async with ws_connect(
        f"ws://{served.host}:{served.port}/v1/responses",
        additional_headers={CONNECTION_HEADER: "c1"},
    ) as ws:
        create = orjson.dumps({"type": "response.create"}).decode()
        await ws.send(create)
        assert await asyncio.wait_for(ws.recv(), 10) == "hi"  # the server's only
        await ws.send(create)
        changed = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
        await ws.send(create)  # past the decisions queued
        unrecorded = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
    assert changed["type"] == "error" and changed["error"]["code"] == "changed"
    assert "(d)" in changed["error"]["message"]
    assert unrecorded["error"]["code"] == UNRECORDED


def _upgrade(connection: str) -> list[tuple[str, str]]:
    return [
        ("host", "upstream"),
        ("connection", "Upgrade"),
        ("upgrade", "websocket"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        (CONNECTION_HEADER, connection),
    ]
