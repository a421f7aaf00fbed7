"""A misbehaving upstream on a raw socket, for faults aiohttp will not commit.

:class:`RawUpstream` binds 127.0.0.1 on a free port and runs ``script(conn)``
for each accepted connection in its own thread; scripts below reset, stall or
half-answer on purpose. Everything stops when the ``with`` block ends.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import orjson

Script = Callable[[socket.socket], None]


class RawUpstream:
    """A TCP server running one script per connection (threads, bounded by the test)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, daemon=True, name="raw-upstream")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.settimeout(10)
            t = threading.Thread(target=self._run, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _run(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            self.script(conn)

    def __enter__(self) -> RawUpstream:
        self._accept.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._sock.close()
        self._accept.join(5)
        for t in self._threads:
            t.join(5)


def read_request(conn: socket.socket) -> bytes:
    """Read one HTTP/1.1 request (headers and a Content-Length or chunked body).

    The whole body is read before the caller answers: closing a socket with
    request bytes still unread sends a reset, which the proxy rightly reports
    as the upstream breaking (a chunked body used to race this way).
    """
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    chunked = False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
        elif name.strip().lower() == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
    while (b"\r\n0\r\n\r\n" not in b"\r\n" + body) if chunked else len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def reset(conn: socket.socket) -> None:
    """Abort the connection with a TCP RST (SO_LINGER 0), not a clean FIN."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def reset_mid_json(conn: socket.socket) -> None:
    """Promise a 1000-byte JSON body, send 40 bytes of it, reset."""
    read_request(conn)
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        b'{"id":"chatcmpl-x","object":"chat.compl'
    )
    time.sleep(0.05)
    reset(conn)


def reset_before_answer(conn: socket.socket) -> None:
    """Read the request, then reset without a byte of answer."""
    read_request(conn)
    reset(conn)


def slow_first_byte(delay: float) -> Script:
    """Answer a valid chat completion after ``delay`` seconds of silence."""

    def script(conn: socket.socket) -> None:
        read_request(conn)
        time.sleep(delay)
        body = (
            b'{"id":"chatcmpl-slow","object":"chat.completion","model":"gpt-5","choices":'
            b'[{"index":0,"message":{"role":"assistant","content":"late"},"finish_reason":"stop"}],'
            b'"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'
        )
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    return script


#: How long a stalled upstream holds on: longer than any client in the tests
#: waits, so a stall that modeltap fails to end shows as the client's timeout.
STALL_S = 90


def wait_for_close(conn: socket.socket) -> None:
    """Hold the connection open, saying nothing, until the peer closes it."""
    conn.settimeout(STALL_S)
    with contextlib.suppress(OSError):
        while conn.recv(65536):
            pass


def never_answers(conn: socket.socket) -> None:
    """Accept and read the request, then never answer."""
    read_request(conn)
    wait_for_close(conn)


def _chat_chunk(content: str) -> bytes:
    chunk = {
        "id": "chatcmpl-stall", "object": "chat.completion.chunk", "created": 1, "model": "gpt-5",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }  # fmt: skip
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def stalls_mid_stream(*, chunked: bool) -> Script:
    """Start an SSE answer, send one event, then go silent (chunked, or a body that
    would end when the connection closes)."""

    def script(conn: socket.socket) -> None:
        read_request(conn)
        event = _chat_chunk("Hel")
        if chunked:
            head = b"Transfer-Encoding: chunked\r\n"
            event = b"%x\r\n%s\r\n" % (len(event), event)
        else:
            head = b"Connection: close\r\n"
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + head + b"\r\n")
        conn.sendall(event)
        wait_for_close(conn)

    return script


def trickles(events: int, gap: float) -> Script:
    """An SSE answer whose events come ``gap`` seconds apart, then a clean end."""

    def script(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        for i in range(events):
            time.sleep(gap)
            conn.sendall(_chat_chunk(str(i)))
        conn.sendall(b"data: [DONE]\n\n")

    return script


def answers_with_trailers(conn: socket.socket) -> None:
    """A complete chat completion in a chunked body that ends with a trailer section."""
    read_request(conn)
    body = (
        b'{"id":"chatcmpl-tr","object":"chat.completion","model":"gpt-5","choices":[{"index":0,'
        b'"message":{"role":"assistant","content":"with trailers"},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}'
    )
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
        b"Trailer: X-Checksum\r\n\r\n"
        + b"%x\r\n%s\r\n0\r\nX-Checksum: abc\r\n\r\n"
        % (len(body), body)
    )


def read_response(sock: socket.socket) -> tuple[int | None, bytes]:
    """Read one HTTP/1 response off a raw socket: ``(status, body)``; ``(None, b"")``
    if the proxy closed without answering. Reads until the body's Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, body


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the peer sends until it closes (EOF or reset). Raises
    ``TimeoutError`` (the socket's timeout) if it never does: a hang."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def _ws_accept(key: bytes) -> bytes:
    magic = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
    return base64.b64encode(hashlib.sha1(key + magic).digest())


def _ws_text(payload: bytes) -> bytes:
    """One unmasked server text frame."""
    n = len(payload)
    if n < 126:
        return bytes([0x81, n]) + payload
    return bytes([0x81, 126]) + struct.pack("!H", n) + payload


def ws_frame(payload: bytes, *, opcode: int = 1, fin: bool = True, rsv1: bool = False) -> bytes:
    """A client frame, masked with the all-zero key (legal; the payload stays as is)."""
    first = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
    n = len(payload)
    if n < 126:
        length = bytes([0x80 | n])
    elif n < 65536:
        length = bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        length = bytes([0x80 | 127]) + struct.pack("!Q", n)
    return bytes([first]) + length + b"\0\0\0\0" + payload


def ws_abort_after_created(conn: socket.socket) -> None:
    """Accept a WebSocket, answer the first message with ``response.created``,
    then reset the TCP connection (no close frame: an abnormal closure)."""
    _ws_accept_handshake(conn)
    conn.recv(65536)  # the client's response.create (masked; not needed)
    conn.sendall(_ws_text(_CREATED))
    time.sleep(0.1)
    reset(conn)


def ws_goes_silent(*, after_created: bool) -> Script:
    """Accept a WebSocket and the client's response.create, then say nothing (or
    only ``response.created``) and hold the connection open."""

    def script(conn: socket.socket) -> None:
        _ws_accept_handshake(conn)
        conn.recv(65536)  # the client's response.create
        if after_created:
            conn.sendall(_ws_text(_CREATED))
        wait_for_close(conn)

    return script


_CREATED = (
    b'{"type":"response.created","response":{"id":"resp_ab","object":"response",'
    b'"status":"in_progress","model":"gpt-5","output":[]}}'
)


def _ws_accept_handshake(conn: socket.socket) -> None:
    head = read_request(conn)
    key = b""
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"sec-websocket-key":
            key = value.strip()
    conn.sendall(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + _ws_accept(key) + b"\r\n\r\n"
    )


def closed_port() -> int:
    """A port nothing listens on (bound, then closed): connections are refused."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


def wait_until[T](probe: Callable[[], T], timeout: float = 10.0) -> T:
    """Poll ``probe`` until it returns something truthy (events are written after
    the client already has its answer); return the last value either way."""
    deadline = time.monotonic() + timeout
    value = probe()
    while not value and time.monotonic() < deadline:
        time.sleep(0.02)
        value = probe()
    return value


def figure(name: str, **values: object) -> None:
    """Append a measured figure to ``$MODELTAP_RELIABILITY_FIGURES`` (a JSONL file)
    when set; docs/RELIABILITY.md is written from these. A no-op otherwise."""
    target = os.environ.get("MODELTAP_RELIABILITY_FIGURES")
    if target:
        with open(target, "ab") as f:
            f.write(orjson.dumps({"test": name, **values}, option=orjson.OPT_APPEND_NEWLINE))


def h2_tunnel(proxy_port: int, ca: Path, host: str, port: int) -> ssl.SSLSocket:
    """A TLS connection to ``host:port`` through the proxy's CONNECT tunnel, with
    mitmproxy's CA and ALPN h2 (asserted); the caller speaks HTTP/2 on it."""
    raw = socket.create_connection(("127.0.0.1", proxy_port), timeout=30)
    target = f"{host}:{port}".encode()
    raw.sendall(b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target + b"\r\n\r\n")
    assert raw.recv(4096).startswith(b"HTTP/1.1 200")
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.set_alpn_protocols(["h2"])
    sock = ctx.wrap_socket(raw, server_hostname=host)
    assert sock.selected_alpn_protocol() == "h2"
    return sock
