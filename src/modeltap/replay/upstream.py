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
turn, or the error event the replayer decided on.

No mitmproxy here: HTTP/1.1 by hand (it only ever talks to the proxy), the
WebSocket through the ``websockets`` sans-I/O protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import http as http_status
import socket
from collections import deque
from typing import Final

import orjson
from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol

from modeltap.replay.matching import UNRECORDED, Played
from modeltap.replay.recording import Entry, Recording, is_ws_create
from modeltap.rules.errors import neutral_error_body

#: Header on a forwarded request naming the recorded exchange to serve.
ENTRY_HEADER: Final = "x-modeltap-replay-entry"
#: Header on a forwarded WebSocket handshake naming its connection.
CONNECTION_HEADER: Final = "x-modeltap-replay-connection"


def _parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    method = lines[0].split(" ", 1)[0]
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return method, headers


async def _skip_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> None:
    """Read and drop a request body (the entry to serve is named by a header)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size = int((await reader.readline()).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                return
            await reader.readexactly(size + 2)
    length = headers.get("content-length", "0")
    if length.isdigit() and int(length):
        await reader.readexactly(int(length))


_FRAMING = frozenset({"content-length", "transfer-encoding"})


def _head(status: int, headers: dict[str, str], framing: str) -> bytes:
    try:
        phrase = http_status.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    lines = [f"HTTP/1.1 {status} {phrase}"]
    for name, value in headers.items():
        if name in _FRAMING or "\r" in value or "\n" in value:
            continue  # we frame the body ourselves; a stored value never splits a header
        lines.append(f"{name}: {value}")
    lines.append(framing)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _ws_error(code: str, message: str) -> bytes:
    """The error event a replayed WebSocket gets instead of a recorded answer
    (the shape of :func:`modeltap.apis.openai_responses.websocket.rejection_event`)."""
    return orjson.dumps(
        {
            "type": "error",
            "error": {"type": "invalid_request_error", "code": code, "message": message},
        }
    )


class ReplayServer:
    """The stand-in upstream: serves recorded exchanges over HTTP/1.1 and WebSocket.

    The listening socket is bound on construction (so routes can name its
    port before the proxy starts); :meth:`start` serves on the running loop.
    """

    def __init__(self, recording: Recording, *, fast: bool, host: str = "127.0.0.1") -> None:
        self.recording = recording
        self.fast = fast
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind((host, 0))
        self._sock.listen(64)
        self._sock.setblocking(False)
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        self._server: asyncio.Server | None = None
        #: Per replayed WebSocket connection: the decisions for its creates, in order.
        self.connections: dict[str, deque[Played]] = {}

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, sock=self._sock, limit=2**20)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        else:
            self._sock.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        _method, headers = _parse_head(head)
        if headers.get("upgrade", "").lower() == "websocket":
            await self._websocket(head, headers, reader, writer)
            return False
        await _skip_body(reader, headers)
        index = headers.get(ENTRY_HEADER, "")
        entries = self.recording.entries
        if not index.isdigit() or int(index) >= len(entries):
            body = neutral_error_body(
                "modeltap replay: not a recorded exchange", status=404, code=UNRECORDED
            )
            head_bytes = _head(
                404, {"content-type": "application/json"}, f"content-length: {len(body)}"
            )
            writer.write(head_bytes + body)
            await writer.drain()
            return True
        return await self._serve(entries[int(index)], writer)

    async def _pause_until(self, deadline: float) -> None:
        if not self.fast:
            delay = deadline - asyncio.get_running_loop().time()
            if delay > 0:
                await asyncio.sleep(delay)

    async def _serve(self, entry: Entry, writer: asyncio.StreamWriter) -> bool:
        """Write one recorded response; False when the connection must end."""
        resp = entry.line.get("response") or {}
        loop = asyncio.get_running_loop()
        wait_ms = resp.get("wait_ms")
        if isinstance(wait_ms, int | float):
            await self._pause_until(loop.time() + wait_ms / 1000)
        status = resp.get("status")
        if not isinstance(status, int):
            writer.transport.abort()  # the upstream never answered: neither do we
            return False
        headers = {str(k): str(v) for k, v in (resp.get("headers") or {}).items()}
        sha = resp.get("body")
        blob = self.recording.blobs.path(sha) if isinstance(sha, str) else None
        chunks = resp.get("chunks")
        if not isinstance(chunks, list):
            body = blob.read_bytes() if blob is not None else b""
            writer.write(_head(status, headers, f"content-length: {len(body)}") + body)
            await writer.drain()
        else:
            writer.write(_head(status, headers, "transfer-encoding: chunked"))
            await writer.drain()
            start = loop.time()
            with contextlib.ExitStack() as stack:
                source = stack.enter_context(blob.open("rb")) if blob is not None else None
                for offset_ms, size in chunks:
                    data = source.read(int(size)) if source is not None else b""
                    await self._pause_until(start + float(offset_ms) / 1000)
                    if data:
                        writer.write(b"%x\r\n%b\r\n" % (len(data), data))
                        await writer.drain()
            if not resp.get("error"):
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        if resp.get("error"):
            writer.transport.abort()  # the recorded stream was cut: cut this one too
            return False
        return True

    # ------------------------------------------------------------------ WebSocket

    async def _websocket(
        self,
        head: bytes,
        headers: dict[str, str],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        proto = ServerProtocol(max_size=None)
        proto.receive_data(head)
        events = proto.events_received()
        if not events or not isinstance(events[0], Request):
            return
        decisions = self.connections.get(headers.get(CONNECTION_HEADER, ""))
        if decisions is None:
            response = proto.reject(404, "modeltap replay: not a replayed connection\n")
        else:
            response = proto.accept(events[0])
        proto.send_response(response)
        if not await _flush(proto, writer) or decisions is None or proto.state is not State.OPEN:
            return
        outbox: asyncio.Queue[Played | None] = asyncio.Queue()
        sender = asyncio.create_task(self._ws_sender(proto, writer, outbox))
        parts: list[bytes] = []
        text = True
        try:
            while True:
                data = await reader.read(65536)
                if data:
                    proto.receive_data(data)
                else:
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
                if not await _flush(proto, writer) or not data:
                    return
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
