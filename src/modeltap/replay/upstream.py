"""The replay upstream: a stand-in provider that serves a recording.

``modeltap replay`` runs the normal addons, so a replayed run is audited like
a live one, and points every route at this small server (127.0.0.1, a free
port, on mitmproxy's own event loop): nothing can reach the network. The
replayer addon (:mod:`modeltap.addons.replayer`) matches each audited request
with the recording and tags it with the recorded exchange to serve
(:data:`ENTRY_HEADER`). Going through a real socket is what lets SSE be
replayed as a stream (mitmproxy cannot stream a response an addon makes up),
at the recorded pace (``--fast``: no delays), and lets a WebSocket be
replayed by the same code that audits a live one: after each client
``response.create`` this server sends the recorded server messages of that
turn, or the error event the replayer decided on. An MCP exchange is served
the same way, with what the replayer planned for it (:class:`McpPlan`): the
live request's JSON-RPC ids put into the recorded answer as it passes
(:class:`~modeltap.replay.mcp.IdRewriter`), and the ``Mcp-Session-Id`` the
replay hands out; an MCP GET stream is held open, silent, until the client
leaves (a server with nothing to say; GET streams are not recorded).

No mitmproxy here. HTTP/1.1 is h11 (sans-I/O, as in
:mod:`modeltap.app.control`): it parses the requests, keeps the connection
alive between them, frames each answer (``Content-Length``, or chunked for a
stream, each chunk written when its recorded time comes) and refuses what is
not HTTP. A WebSocket upgrade is accepted through h11's protocol switch and
then spoken by the ``websockets`` sans-I/O protocol, which also checks the
handshake. The only client is the proxy, so the bounds are those of a server
that must not be held by a stuck peer: the request head is bounded
(:data:`MAX_HEAD`), the body is read and dropped, never held, and bounded
(:data:`MAX_BODY`), and a request that stops arriving halfway is dropped
after :data:`STALL_TIMEOUT_S`. Between requests a connection stays open as
long as the proxy keeps it (it closes it with the agent's), as a provider's
keep-alive would; there is no cap on connections, since the proxy has its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import h11
import orjson
from websockets.datastructures import Headers
from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol

from modeltap.replay.matching import UNRECORDED, Played
from modeltap.replay.mcp import IdRewriter, JsonRpcId
from modeltap.replay.recording import Entry, Recording, is_ws_create
from modeltap.rules.errors import UpstreamProtocolError, neutral_error_body
from modeltap.wire.decoding import StreamDecompressor, decode_body

#: Header on a forwarded request naming the recorded exchange to serve.
ENTRY_HEADER: Final = "x-modeltap-replay-entry"
#: Header on a forwarded WebSocket handshake naming its connection.
CONNECTION_HEADER: Final = "x-modeltap-replay-connection"
#: Header on a forwarded MCP request naming its :class:`McpPlan`.
MCP_PLAN_HEADER: Final = "x-modeltap-replay-mcp"
#: Header on a forwarded MCP GET: answer it with a silent stream, held open.
MCP_STREAM_HEADER: Final = "x-modeltap-replay-mcp-stream"
#: Header on a forwarded HTTP+SSE ``GET``: the :class:`SseStream` to serve on it.
MCP_SSE_HEADER: Final = "x-modeltap-replay-mcp-sse"
#: The header an MCP server names its session in (sent as the plan says).
_MCP_SESSION: Final = b"mcp-session-id"
#: Request line plus headers (what the proxy forwards of the agent's, plus our tag).
MAX_HEAD: Final = 64 * 1024
#: A request body is read and dropped; one longer than this is refused (413).
#: Far above any provider's request limit, and above ``--max-body``'s default:
#: the proxy refuses larger requests before they get here.
MAX_BODY: Final = 1024**3
#: A request that has begun and then sends nothing for this long is dropped.
STALL_TIMEOUT_S: Final = 30.0
#: The error code of a request this server cannot read (malformed, too large).
BAD_REQUEST: Final = "modeltap_replay_bad_request"

_READ_SIZE: Final = 65536
#: Framing is h11's: a recorded framing header would contradict it.
_FRAMING: Final = frozenset({b"content-length", b"transfer-encoding", b"connection"})


class _TooLarge(Exception):
    """The request body is longer than the server's ``max_body``."""


@dataclass(frozen=True, slots=True)
class McpPlan:
    """How to serve one recorded MCP answer to the live request."""

    #: Recorded answer id -> the live request's (:func:`~modeltap.replay.mcp.id_map`).
    ids: dict[bytes, JsonRpcId] = field(default_factory=dict)
    #: The ``Mcp-Session-Id`` to answer with (the recorded answer named one).
    session_id: str | None = None
    #: HTTP+SSE: the stream (:attr:`ReplayServer.sse_streams`) the messages
    #: recorded after this POST go on once its answer is sent, and those messages.
    stream: str | None = None
    then: tuple[bytes, ...] = ()


@dataclass(slots=True)
class SseStream:
    """A replayed HTTP+SSE session's stream: its endpoint event, then each
    message put on :attr:`queue` (one JSON-RPC message's bytes), sent as it
    comes, never held; None ends it."""

    #: The ``endpoint`` event's data: a path on this server naming a fresh session.
    endpoint: str
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    #: Recorded answer id -> live id, for the whole session (an answer can
    #: come after a later POST than its request's).
    ids: dict[bytes, JsonRpcId] = field(default_factory=dict)


def _ws_error(code: str, message: str) -> bytes:
    """The error event a replayed WebSocket gets instead of a recorded answer
    (the shape of :func:`modeltap.apis.openai_responses.websocket.rejection_event`)."""
    return orjson.dumps(
        {
            "type": "error",
            "error": {"type": "invalid_request_error", "code": code, "message": message},
        }
    )


def _error_response(status: int, message: str, code: str) -> tuple[h11.Response, bytes]:
    """A JSON error both SDK families read, and its framed head."""
    body = neutral_error_body(message, status=status, code=code)
    headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
    return h11.Response(status_code=status, headers=headers), body


def _recorded_headers(stored: Mapping[str, object]) -> list[tuple[bytes, bytes]]:
    """The recorded response headers h11 can send, in order, framing left to h11.

    A value that is not a valid header value (a line break, a character
    outside latin-1) is left out rather than sent broken.
    """
    kept: list[tuple[bytes, bytes]] = []
    for name, value in stored.items():
        try:
            header = (str(name).lower().encode("ascii"), str(value).encode("latin-1"))
            h11.Response(status_code=200, headers=[header])  # h11 validates on construction
        except (UnicodeEncodeError, h11.LocalProtocolError):
            continue
        if header[0] not in _FRAMING:
            kept.append(header)
    return kept


def _is_websocket(request: h11.Request) -> bool:
    return any(
        name == b"upgrade" and value.strip().lower() == b"websocket"
        for name, value in request.headers
    )


def _header(request: h11.Request, name: bytes) -> str:
    """A request header's value (latin-1), or ``""``."""
    for key, value in request.headers:
        if key == name:
            return value.decode("latin-1")
    return ""


class ReplayServer:
    """The stand-in upstream: serves recorded exchanges over HTTP/1.1 and WebSocket.

    The listening socket is bound on construction (so routes can name its
    port before the proxy starts); :meth:`start` serves on the running loop.

    Args:
        recording: what to serve.
        fast: serve without the recorded delays.
        host: the address to listen on.
        max_body: the longest request body read (and dropped); longer is a 413.
        stall_timeout_s: how long a request that has begun may send nothing.
    """

    def __init__(
        self,
        recording: Recording,
        *,
        fast: bool,
        host: str = "127.0.0.1",
        max_body: int = MAX_BODY,
        stall_timeout_s: float = STALL_TIMEOUT_S,
    ) -> None:
        self.recording = recording
        self.fast = fast
        self.max_body = max_body
        self.stall_timeout_s = stall_timeout_s
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind((host, 0))
        self._sock.listen(64)
        self._sock.setblocking(False)
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        self._server: asyncio.Server | None = None
        #: Per replayed WebSocket connection: the decisions for its creates, in order.
        self.connections: dict[str, deque[Played]] = {}
        #: Per forwarded MCP request (:data:`MCP_PLAN_HEADER`): how to serve it.
        self.mcp_plans: dict[str, McpPlan] = {}
        #: Per replayed HTTP+SSE session (:data:`MCP_SSE_HEADER`, its id hashed): its stream.
        self.sse_streams: dict[str, SseStream] = {}

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, sock=self._sock)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        else:
            self._sock.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        try:
            while True:
                try:
                    request = await self._read(conn, reader, writer)
                except h11.RemoteProtocolError as e:
                    status = e.error_status_hint
                    what = "the request head is too large" if status == 431 else "malformed HTTP"
                    await _send_error(conn, writer, status, what)
                    return
                except _TooLarge:
                    await _send_error(conn, writer, 413, "the request body is too large")
                    return
                if request is None:
                    return
                if _is_websocket(request):
                    await self._websocket(conn, request, reader, writer)
                    return
                stream = self.sse_streams.get(_header(request, MCP_SSE_HEADER.encode()))
                if stream is not None:
                    await _sse_stream(conn, reader, writer, stream)
                    return
                if _header(request, MCP_STREAM_HEADER.encode()):
                    await _hold_stream(conn, reader, writer)
                    return
                if not await self._answer(conn, request, writer):
                    return
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (ConnectionError, TimeoutError):
            pass  # the proxy left, or stopped sending halfway through a request
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _read(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> h11.Request | None:
        """The next whole request (its body read and dropped), or None at end of stream.

        Raises:
            h11.RemoteProtocolError: it is not HTTP/1.1, or its head is too large.
            _TooLarge: its body is longer than ``max_body``.
            TimeoutError: it stopped arriving halfway.
        """
        request: h11.Request | None = None
        size = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                begun = request is not None or bool(conn.trailing_data[0])
                async with asyncio.timeout(self.stall_timeout_s if begun else None):
                    conn.receive_data(await reader.read(_READ_SIZE))
            elif isinstance(event, h11.Request):
                request = event
                if conn.they_are_waiting_for_100_continue:
                    writer.write(
                        _sent(conn, h11.InformationalResponse(status_code=100, headers=[]))
                    )
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > self.max_body:
                    raise _TooLarge
            elif isinstance(event, h11.EndOfMessage):
                return request
            else:  # ConnectionClosed; PAUSED cannot come before EndOfMessage
                return None

    async def _answer(
        self, conn: h11.Connection, request: h11.Request, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one HTTP request; False when the connection must end."""
        index = _header(request, ENTRY_HEADER.encode())
        entries = self.recording.entries
        if not index.isdigit() or int(index) >= len(entries):
            response, body = _error_response(
                404, "modeltap replay: not a recorded exchange", UNRECORDED
            )
            writer.write(_sent(conn, response, h11.Data(data=body), h11.EndOfMessage()))
            await writer.drain()
            return True
        plan = self.mcp_plans.pop(_header(request, MCP_PLAN_HEADER.encode()), None)
        served = await self._serve(conn, entries[int(index)], writer, plan)
        stream = self.sse_streams.get(plan.stream or "") if plan is not None else None
        if plan is not None and stream is not None:
            for message in plan.then:  # after the POST's own answer, as they came
                stream.queue.put_nowait(message)
        return served

    async def _pause_until(self, deadline: float) -> None:
        if not self.fast:
            delay = deadline - asyncio.get_running_loop().time()
            if delay > 0:
                await asyncio.sleep(delay)

    async def _serve(
        self,
        conn: h11.Connection,
        entry: Entry,
        writer: asyncio.StreamWriter,
        plan: McpPlan | None = None,
    ) -> bool:
        """Write one recorded response (an MCP one as ``plan`` says); False when
        the connection must end."""
        resp = entry.line.get("response") or {}
        loop = asyncio.get_running_loop()
        wait_ms = resp.get("wait_ms")
        if isinstance(wait_ms, int | float):
            await self._pause_until(loop.time() + wait_ms / 1000)
        status = resp.get("status")
        if not isinstance(status, int) or not 200 <= status <= 999:
            writer.transport.abort()  # the upstream never answered: neither do we
            return False
        headers = _recorded_headers(resp.get("headers") or {})
        sha = resp.get("body")
        blob = self.recording.blobs.path(sha) if isinstance(sha, str) else None
        chunks = resp.get("chunks")
        rewrite = _McpAnswer(plan, headers, streamed=isinstance(chunks, list))
        headers = rewrite.headers
        if not isinstance(chunks, list):
            body = rewrite.body(blob.read_bytes() if blob is not None else b"")
            head = h11.Response(
                status_code=status, headers=[*headers, (b"content-length", b"%d" % len(body))]
            )
            writer.write(_sent(conn, head, h11.Data(data=body), h11.EndOfMessage()))
            await writer.drain()
        else:
            head = h11.Response(
                status_code=status, headers=[*headers, (b"transfer-encoding", b"chunked")]
            )
            writer.write(_sent(conn, head))
            await writer.drain()
            start = loop.time()
            with contextlib.ExitStack() as stack:
                source = stack.enter_context(blob.open("rb")) if blob is not None else None
                for offset_ms, size in chunks:
                    data = source.read(int(size)) if source is not None else b""
                    await self._pause_until(start + float(offset_ms) / 1000)
                    data = rewrite.chunk(data)
                    if data:
                        writer.write(_sent(conn, h11.Data(data=data)))
                        await writer.drain()
            rest = rewrite.end()
            if rest:
                writer.write(_sent(conn, h11.Data(data=rest)))
                await writer.drain()
            if not resp.get("error"):
                writer.write(_sent(conn, h11.EndOfMessage()))
                await writer.drain()
        if resp.get("error"):
            writer.transport.abort()  # the recorded stream was cut: cut this one too
            return False
        return True

    # ------------------------------------------------------------------ WebSocket

    async def _websocket(
        self,
        conn: h11.Connection,
        request: h11.Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Serve a replayed WebSocket: h11 switches protocols, ``websockets`` takes over."""
        # The frames are spoken once h11 has sent the 101, so the protocol
        # starts OPEN; it still checks the handshake and words the answer.
        proto = ServerProtocol(max_size=None, state=State.OPEN)
        decisions = self.connections.get(_header(request, CONNECTION_HEADER.encode()))
        if decisions is None:
            handshake = proto.reject(404, "modeltap replay: not a replayed connection\n")
        else:
            handshake = proto.accept(Request(request.target.decode("latin-1"), Headers(
                (k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw_items()
            )))  # fmt: skip
        headers = [
            (k.encode("latin-1"), v.encode("latin-1")) for k, v in handshake.headers.raw_items()
        ]
        if decisions is None or handshake.status_code != 101:
            refusal = h11.Response(status_code=handshake.status_code, headers=headers)
            writer.write(
                _sent(conn, refusal, h11.Data(data=bytes(handshake.body)), h11.EndOfMessage())
            )
            await writer.drain()
            return
        writer.write(_sent(conn, h11.InformationalResponse(status_code=101, headers=headers)))
        await writer.drain()
        pending, closed = conn.trailing_data  # frames the client sent behind its handshake
        outbox: asyncio.Queue[Played | None] = asyncio.Queue()
        sender = asyncio.create_task(self._ws_sender(proto, writer, outbox))
        parts: list[bytes] = []
        text = True
        try:
            while True:
                if pending:
                    proto.receive_data(pending)
                if closed:
                    proto.receive_eof()
                for event in proto.events_received():
                    if not isinstance(event, Frame):
                        continue
                    if event.opcode in (Opcode.TEXT, Opcode.BINARY):
                        parts, text = [bytes(event.data)], event.opcode is Opcode.TEXT
                    elif event.opcode is Opcode.CONT:
                        parts.append(bytes(event.data))
                    else:
                        continue
                    if event.fin and text and is_ws_create(b"".join(parts)):
                        outbox.put_nowait(decisions.popleft() if decisions else None)
                if not await _flush(proto, writer) or closed:
                    return
                pending = await reader.read(_READ_SIZE)
                closed = not pending
        finally:
            sender.cancel()

    async def _ws_sender(
        self,
        proto: ServerProtocol,
        writer: asyncio.StreamWriter,
        outbox: asyncio.Queue[Played | None],
    ) -> None:
        """Send each create's recorded server messages, in order, at their pace."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                played = await outbox.get()
                if played is None or played.entry is None:
                    code = played.code if played is not None and played.code else UNRECORDED
                    message = (
                        played.error_message
                        if played is not None
                        else "modeltap replay: this message was not matched"
                    )
                    proto.send_text(_ws_error(code, message))
                    if not await _flush(proto, writer):
                        return
                    continue
                start = loop.time()
                for item in played.entry.line.get("messages") or []:
                    if item.get("from") != "server":
                        continue
                    await self._pause_until(start + float(item.get("ms") or 0) / 1000)
                    if "text" in item:
                        proto.send_text(str(item["text"]).encode())
                    elif isinstance(item.get("blob"), str):
                        data = self.recording.blobs.path(item["blob"]).read_bytes()
                        if item.get("binary"):
                            proto.send_binary(data)
                        else:
                            proto.send_text(data)
                    if not await _flush(proto, writer):
                        return
        except Exception:  # the connection went away under us (InvalidState, reset)
            return


class _McpAnswer:
    """A recorded answer as an MCP plan changes it: the session header the
    replay hands out, the live ids put in (decoded first when the recording
    kept it compressed). Without a plan, or with nothing to change, the
    recorded bytes pass as they are."""

    def __init__(
        self, plan: McpPlan | None, headers: list[tuple[bytes, bytes]], *, streamed: bool
    ) -> None:
        self.rewriter: IdRewriter | None = None
        self.decompressor: StreamDecompressor | None = None
        self.broken = False
        self.encoding: str | None = None
        if plan is None:
            self.headers = headers
            return
        kept = [(k, v) for k, v in headers if k != _MCP_SESSION]
        if plan.session_id is not None:
            kept.append((_MCP_SESSION, plan.session_id.encode("latin-1")))
        if plan.ids:
            media = next((v for k, v in kept if k == b"content-type"), b"")
            sse = media.split(b";", 1)[0].strip().lower() == b"text/event-stream"
            self.rewriter = IdRewriter(plan.ids, sse=sse and streamed)
            encoding = next((v for k, v in kept if k == b"content-encoding"), b"")
            if encoding.strip() and encoding.strip().lower() != b"identity":
                # The ids are rewritten in the decoded text, served uncompressed.
                self.encoding = encoding.decode("latin-1")
                kept = [(k, v) for k, v in kept if k != b"content-encoding"]
                if streamed:
                    try:
                        self.decompressor = StreamDecompressor(self.encoding)
                    except UpstreamProtocolError:
                        self.rewriter, self.encoding, kept = None, None, headers
        self.headers = kept

    def body(self, data: bytes) -> bytes:
        if self.rewriter is None:
            return data
        if self.encoding is not None:
            try:
                data = decode_body(data, self.encoding)
            except UpstreamProtocolError:
                return data  # served as recorded (its header was dropped: as the upstream's)
        self.rewriter.feed(data)
        return self.rewriter.flush()

    def chunk(self, data: bytes) -> bytes:
        if self.broken:
            return b""
        if self.rewriter is None:
            return data
        if self.decompressor is not None:
            try:
                data = self.decompressor.feed(data)
            except UpstreamProtocolError:
                self.decompressor, self.rewriter = None, None  # a broken recording: stop there
                self.broken = True
                return b""
        return self.rewriter.feed(data)

    def end(self) -> bytes:
        if self.rewriter is None:
            return b""
        rest = b""
        if self.decompressor is not None:
            try:
                rest = self.decompressor.flush()
            except UpstreamProtocolError:
                rest = b""
        return self.rewriter.feed(rest) + self.rewriter.flush()


async def _hold_stream(
    conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """An MCP GET stream: an event stream that says nothing, open until the client
    (through the proxy) leaves, as a server with nothing to send keeps it."""
    head = h11.Response(
        status_code=200,
        headers=[(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
    )
    writer.write(_sent(conn, head))
    await writer.drain()
    while await reader.read(_READ_SIZE):
        pass


async def _sse_stream(
    conn: h11.Connection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    stream: SseStream,
) -> None:
    """An HTTP+SSE session's stream: its endpoint event, then each message as it
    is queued (the answers to the session's POSTs), until the client leaves."""
    head = h11.Response(
        status_code=200,
        headers=[(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
    )
    endpoint = b"event: endpoint\r\ndata: " + stream.endpoint.encode() + b"\r\n\r\n"
    writer.write(_sent(conn, head, h11.Data(data=endpoint)))
    await writer.drain()

    async def send() -> None:
        with contextlib.suppress(ConnectionError):
            while (message := await stream.queue.get()) is not None:
                lines = b"".join(b"data: " + line + b"\r\n" for line in message.split(b"\n"))
                writer.write(_sent(conn, h11.Data(data=b"event: message\r\n" + lines + b"\r\n")))
                await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while await reader.read(_READ_SIZE):
            pass
    finally:
        sender.cancel()


def _sent(conn: h11.Connection, *events: h11.Event) -> bytes:
    """The bytes h11 frames for ``events`` (the caller writes them)."""
    return b"".join(conn.send(event) or b"" for event in events)


async def _send_error(
    conn: h11.Connection, writer: asyncio.StreamWriter, status: int, what: str
) -> None:
    """Answer a request this server cannot read, if h11 still lets us answer."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    response, body = _error_response(status, f"modeltap replay: {what}", BAD_REQUEST)
    writer.write(_sent(conn, response, h11.Data(data=body), h11.EndOfMessage()))
    await writer.drain()


async def _flush(proto: ServerProtocol, writer: asyncio.StreamWriter) -> bool:
    """Write what the protocol wants sent; False once it asks to close the TCP stream."""
    try:
        for data in proto.data_to_send():
            if not data:
                with contextlib.suppress(OSError, RuntimeError):
                    writer.write_eof()
                return False
            writer.write(data)
        await writer.drain()
    except ConnectionError:
        return False
    return True
