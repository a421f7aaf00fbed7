"""Switching protocols around the audit (SPEC 2, "No way around the audit").

After a ``101 Switching Protocols`` mitmproxy opens a WebSocket only for a
handshake that said ``Sec-WebSocket-Version: 13`` and was answered ``Upgrade:
websocket``; any other switch becomes a raw TCP tunnel no hook sees, and a
WebSocket modeltap did not judge to be one passes its messages unread. Servers
read upgrades more loosely than either (a token list, the last of two
headers, version 8), so each shape below, sent to a real ``modeltap run``
process on a raw socket, must be refused before it reaches the upstream; and
an upstream that switches on its own must not get a tunnel either. The check
is what the upstream received: the bytes the client sends after the answer
are a whole model request, which must never arrive.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import read_jsonl
from tests.reliability.faults import (
    RawUpstream,
    figure,
    read_request,
    read_response,
    read_until_closed,
    wait_until,
    ws_frame,
)
from tests.reliability.test_processes import ProxyProcess

#: What the client sends once it has its answer: a model request for the tunnel.
SMUGGLED = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b'Content-Length: 58\r\n\r\n{"model":"gpt-5","messages":[{"role":"user","content":"x"}]}'
)
KEY = "dGhlIHNhbXBsZSBub25jZQ=="
HANDSHAKE = f"Connection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\n"


class Switcher:
    """A raw upstream that answers every request ``101``, with the ``Upgrade``
    its path asks for (``/up-NAME/...``, else the request's own), and keeps what
    arrives after it."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.after: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, conn: socket.socket) -> None:
        data = read_request(conn)
        if not data:
            return
        head = data.partition(b"\r\n\r\n")[0]
        with self.lock:
            self.heads.append(head)
        path = head.split(b" ")[1]
        upgrade = b"websocket"
        if path.startswith(b"/up-"):
            upgrade = path[4:].split(b"/")[0]
        accept = base64.b64encode(
            hashlib.sha1(KEY.encode() + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()
        )
        conn.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + upgrade
            + b"\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )  # fmt: skip
        rest = read_until_closed(conn)
        with self.lock:
            self.after.append(rest)


@pytest.fixture
def switching(
    tmp_path: Path, processes: list[ProxyProcess]
) -> Iterator[tuple[ProxyProcess, Switcher, Path]]:
    switcher = Switcher()
    with RawUpstream(switcher) as raw:
        proc = ProxyProcess("--out", str(tmp_path), "--route", f"raw={raw.url}", "-q")
        processes.append(proc)
        yield proc, switcher, tmp_path


def exchange(port: int, request: bytes) -> bytes:
    """Send ``request``; once its answer is in, send :data:`SMUGGLED` (through a
    tunnel, if one opened); return everything the proxy sent until it closed
    the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(request)
        answer = read_request(sock)  # an answer's head (and body) reads like a request's
        with contextlib.suppress(OSError):
            sock.sendall(SMUGGLED)
        return answer + read_until_closed(sock)


def refused_at_once(port: int, request: bytes) -> tuple[int | None, bytes]:
    """Send ``request`` and read its answer (the connection stays open)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(request)
        return read_response(sock)


REFUSED_REQUESTS = [
    ("version 8 (Node's ws accepts it)", "GET",
     "Upgrade: websocket\r\nSec-WebSocket-Version: 8\r\n"),
    ("no version", "GET", "Upgrade: websocket\r\n"),
    ("a token list (Go's gorilla accepts it)", "GET",
     "Upgrade: foo, websocket\r\nSec-WebSocket-Version: 13\r\n"),
    ("two Upgrade headers (uvicorn reads the last)", "GET",
     "Upgrade: foo\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"),
    ("a handshake by POST", "POST", "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"),
    ("h2c in capitals (mitmproxy removes only 'h2c')", "GET",
     "Upgrade: H2C\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n"),
    ("h2c in a list", "GET", "Upgrade: h2c, foo\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n"),
    ("another protocol", "GET", "Upgrade: TLS/1.2\r\n"),
]  # fmt: skip


def test_switches_modeltap_cannot_follow_are_refused_before_the_upstream(
    switching: tuple[ProxyProcess, Switcher, Path],
) -> None:
    """Before: 4 of the 8 were forwarded and answered 101; version 8 and no version
    became raw tunnels (the smuggled model request reached the upstream, unaudited),
    the token list and the two headers became WebSockets whose messages nobody read."""
    proc, switcher, out = switching
    t0 = time.perf_counter()
    for name, method, headers in REFUSED_REQUESTS:
        body = b'{"model":"gpt-5","messages":[]}' if method == "POST" else b""
        request = (
            f"{method} /raw/v1/responses HTTP/1.1\r\nHost: x\r\n{HANDSHAKE}{headers}"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        status, answer = refused_at_once(proc.port, request)
        assert status == 400, name
        assert b"unsupported_upgrade" in answer, name
    elapsed = time.perf_counter() - t0
    assert switcher.heads == [] and switcher.after == []
    assert not (out / "audit.jsonl").exists()
    rejected = [e["rule"] for e in read_jsonl(out / "events.jsonl") if e["kind"] == "rejected"]
    assert rejected == ["unsupported_upgrade"] * len(REFUSED_REQUESTS)
    figure("protocol switch: refused requests", cases=len(REFUSED_REQUESTS), seconds=elapsed)


UPSTREAM_SWITCHES = [
    ("a plain GET answered 101 h2c", "GET /raw/up-h2c/v1/models HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("a WebSocket handshake answered 101 foo",
     f"GET /raw/up-foo/v1/responses HTTP/1.1\r\nHost: x\r\n{HANDSHAKE}Upgrade: websocket\r\n"
     "Sec-WebSocket-Version: 13\r\n\r\n"),
    ("a plain GET with a WebSocket version, answered 101 websocket",
     "GET /raw/v1/models HTTP/1.1\r\nHost: x\r\nSec-WebSocket-Version: 13\r\n\r\n"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "request_text"), UPSTREAM_SWITCHES)
def test_an_upstream_that_switches_on_its_own_gets_no_tunnel(
    switching: tuple[ProxyProcess, Switcher, Path], name: str, request_text: str
) -> None:
    """Before: the 101 reached the client and what it sent next went to the
    upstream as a raw tunnel (or a WebSocket nobody read)."""
    proc, switcher, out = switching
    answer = exchange(proc.port, request_text.encode())
    assert answer.startswith(b"HTTP/1.1 400 "), name
    assert b"unsupported_upgrade" in answer
    wait_until(lambda: switcher.after)  # the upstream's connection was closed
    assert switcher.after == [b""]
    assert len(switcher.heads) == 1
    assert not (out / "audit.jsonl").exists()
    (event,) = [e for e in read_jsonl(out / "events.jsonl") if e["kind"] == "rejected"]
    assert event["rule"] == "unsupported_upgrade"


def test_an_audited_request_answered_by_a_switch_is_an_upstream_error(
    switching: tuple[ProxyProcess, Switcher, Path],
) -> None:
    """A model request (audited, forwarded) answered ``101 websocket``: before,
    mitmproxy opened a WebSocket that modeltap never read; now the client gets
    no switch, and the record's response says the evidence is incomplete."""
    proc, switcher, out = switching
    body = b'{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}'
    request = (
        b"POST /raw/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Sec-WebSocket-Version: 13\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    )
    answer = exchange(proc.port, request)
    assert answer.startswith(b"HTTP/1.1 400 ")
    wait_until(lambda: switcher.after)
    assert switcher.after == [b""]
    (record,) = read_jsonl(out / "audit.jsonl")
    events = read_jsonl(out / "events.jsonl")
    kinds = [(e["kind"], e.get("error") or e.get("evidence_complete")) for e in events]
    assert ("response", False) in kinds
    assert any(e["kind"] == "error" and e["seq"] == record["seq"] for e in events)


def test_a_handshake_carrying_a_body_is_refused(
    switching: tuple[ProxyProcess, Switcher, Path],
) -> None:
    """WebSocket servers (Python's websockets, Node's ws) read the bytes after a
    handshake's head as its first frames: a body is a message smuggled past the
    audit. Before: forwarded with its body (a ``response.create`` frame) whole."""
    proc, switcher, out = switching
    frame = ws_frame(b'{"type":"response.create","model":"smuggled","input":"x"}')
    head = (
        f"GET /raw/v1/responses HTTP/1.1\r\nHost: x\r\n{HANDSHAKE}Upgrade: websocket\r\n"
        "Sec-WebSocket-Version: 13\r\n"
    ).encode()
    for framing in (
        b"Content-Length: %d\r\n\r\n" % len(frame) + frame,
        b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(frame) + frame + b"\r\n0\r\n\r\n",
    ):
        status, answer = refused_at_once(proc.port, head + framing)
        assert status == 400 and b"unsupported_upgrade" in answer
    assert switcher.heads == []
    assert rules_of(out) == ["unsupported_upgrade"] * 2


def rules_of(out: Path) -> list[str]:
    return [e["rule"] for e in read_jsonl(out / "events.jsonl") if e["kind"] == "rejected"]
