"""Header bytes an intermediary must not pass on (RFC 9112 5.2, RFC 9110 5.5; issue 27.1).

mitmproxy's HTTP/1 reader keeps an obs-fold (a line starting with a space or
tab) as ``CR LF SP`` inside the value before it, and a bare CR, NUL or any
other control byte in a value, and its writer sends them on as they came:
an upstream that reads the fold or the CR as a line break sees a
``Transfer-Encoding`` modeltap never saw, and the body after the head as a
request nobody audited. Each member of the class is sent on a raw socket,
on every kind of request modeltap forwards (audited, pass-through, a
WebSocket handshake, regular mode's absolute form, a CONNECT, HTTP/2); the
oracle is a raw-socket upstream that records every byte it received.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import orjson
import pytest

from tests.conftest import Running, intercepting_proxy, proxy_ca, read_jsonl
from tests.reliability.faults import RawUpstream, figure, h2_tunnel, read_request, wait_until
from tests.upstream import Upstream, self_signed_tls

CHAT = orjson.dumps({"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]})
ANSWER = (
    b'{"id":"chatcmpl-raw","object":"chat.completion","model":"gpt-5","choices":'
    b'[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'
)

#: A header line each, as it goes on the wire after ``Host`` (the first header).
#: The smuggling ones carry a Transfer-Encoding an upstream could read.
FORBIDDEN = {
    "obs-fold SP": b"X-A: a\r\n Transfer-Encoding: chunked",
    "obs-fold HTAB": b"X-A: a\r\n\tTransfer-Encoding: chunked",
    "obs-fold of two lines": b"X-A: a\r\n  b\r\n\tc",
    "bare CR": b"X-A: a\rTransfer-Encoding: chunked",
    "bare CR then LF-less header": b"X-A: a\r\rX-B: b",
    "NUL": b"X-A: a\x00Transfer-Encoding: chunked",
    "SOH": b"X-A: a\x01b",
    "ESC (a terminal's)": b"X-A: \x1b]0;x\x07",
    "VT": b"X-A: a\x0bb",
    "FF": b"X-A: a\x0cb",
    "US": b"X-A: a\x1fb",
    "DEL": b"X-A: a\x7fb",
    "NUL in the session header": b"x-modeltap-session: s\x00t",
    "name with a space": b"Transfer-Encoding : chunked",
    "name with a control byte": b"X\x01A: a",
    "name with a separator": b"X(A): a",
    "name in UTF-8": b"X-\xc3\xa4: a",
}
#: What stays allowed: HTAB inside a value, UTF-8 (obs-text), a bare-LF head.
ALLOWED = {
    "HTAB inside a value": b"X-A: a\tb",
    "UTF-8 in a value": b"X-A: caf\xc3\xa9",
    "empty value": b"X-A: ",
}


class Recorder:
    """A raw upstream script: every request's bytes, exactly as they arrived."""

    def __init__(self) -> None:
        self.requests: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, conn: socket.socket) -> None:
        conn.settimeout(2)
        try:
            data = read_request(conn)
        except OSError:
            data = b""
        if not data:
            return
        with self.lock:
            self.requests.append(data)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(ANSWER)
            + ANSWER
        )


@pytest.fixture
def recorded(
    start_proxy: Callable[..., Running],
) -> Iterator[tuple[Callable[..., Running], Recorder, RawUpstream]]:
    recorder = Recorder()
    with RawUpstream(recorder) as raw:
        yield start_proxy, recorder, raw


def exchange(port: int, head: bytes, body: bytes = b"") -> bytes:
    """Send ``head`` (and ``body``) on a fresh socket; the first line of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head + body)
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n", 1)[0]


def request(
    method: bytes, target: bytes, line: bytes, body: bytes = b"", extra: bytes = b""
) -> bytes:
    length = b"Content-Length: %d\r\n" % len(body) if body else b""
    return (
        method + b" " + target + b" HTTP/1.1\r\nHost: x\r\n" + line + b"\r\n"
        + extra + length + b"Connection: close\r\n\r\n"
    )  # fmt: skip


WEBSOCKET = (
    b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
)


def kinds(raw_url: str) -> dict[str, Callable[[bytes], tuple[bytes, bytes]]]:
    """Each kind of request modeltap forwards in reverse mode: ``(head, body)`` for a line."""
    return {
        "pass-through": lambda line: (request(b"GET", b"/raw/v1/models", line), b""),
        "audited": lambda line: (
            request(
                b"POST",
                b"/raw/v1/chat/completions",
                line,
                CHAT,
                b"Content-Type: application/json\r\n",
            ),
            CHAT,
        ),
        "websocket handshake": lambda line: (
            request(b"GET", b"/raw/v1/responses", line, b"", WEBSOCKET).replace(
                b"Connection: close\r\n", b""
            ),
            b"",
        ),
    }


@pytest.mark.parametrize("name", list(FORBIDDEN))
def test_forbidden_bytes_are_refused_on_every_kind_of_request(
    recorded: tuple[Callable[..., Running], Recorder, RawUpstream], name: str
) -> None:
    start, recorder, raw = recorded
    running = start(routes=[f"raw={raw.url}"])
    for kind, build in kinds(raw.url).items():
        head, body = build(FORBIDDEN[name])
        status = exchange(running.proxy.port, head, body)
        assert status.startswith(b"HTTP/1.1 400"), (kind, status)
    assert recorder.requests == []  # the oracle: not one byte of it went upstream
    assert running.audit() == []
    rules = [e["rule"] for e in running.events("rejected")]
    errors = [e["error"] for e in running.events("error")]
    if name.startswith("name"):
        # mitmproxy refuses a name that is not a token itself (validate_inbound_headers,
        # on by default): broken HTTP, the client's fault, as the smuggling trial says.
        assert (rules, errors) == ([], ["bad_request"] * 3)
    else:
        assert (rules, errors) == (["invalid_header_bytes"] * 3, [])


@pytest.mark.parametrize("name", [n for n in FORBIDDEN if n.startswith("name")])
def test_names_are_refused_without_mitmproxys_own_check(
    recorded: tuple[Callable[..., Running], Recorder, RawUpstream], name: str
) -> None:
    """mitmproxy checks header names only while validate_inbound_headers is on
    (a mitmdump user may turn it off): modeltap's own check holds either way."""
    start, recorder, raw = recorded
    running = start(routes=[f"raw={raw.url}"], extra={"validate_inbound_headers": False})
    head, body = kinds(raw.url)["pass-through"](FORBIDDEN[name])
    assert exchange(running.proxy.port, head, body).startswith(b"HTTP/1.1 400")
    assert recorder.requests == []
    (event,) = wait_until(lambda: running.events("rejected"))
    assert event["rule"] == "invalid_header_bytes"


@pytest.mark.parametrize(
    ("name", "head"),
    [
        ("a control byte in the method", b"GE\x01T /raw/v1/models HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("NUL in the target", b"GET /raw/v1/models\x00x HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("SOH in the target", b"GET /raw/v1/mo\x01dels HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("DEL in the target", b"GET /raw/v1/models\x7f HTTP/1.1\r\nHost: x\r\n\r\n"),
    ],
)
def test_the_request_line_holds_no_control_byte(
    recorded: tuple[Callable[..., Running], Recorder, RawUpstream], name: str, head: bytes
) -> None:
    start, recorder, raw = recorded
    running = start(routes=[f"raw={raw.url}"])
    assert exchange(running.proxy.port, head).startswith(b"HTTP/1.1 400"), name
    assert recorder.requests == []


@pytest.mark.parametrize("name", list(ALLOWED))
def test_what_a_server_reads_one_way_still_passes(
    recorded: tuple[Callable[..., Running], Recorder, RawUpstream], name: str
) -> None:
    start, recorder, raw = recorded
    running = start(routes=[f"raw={raw.url}"])
    head, _ = kinds(raw.url)["pass-through"](ALLOWED[name])
    assert exchange(running.proxy.port, head).startswith(b"HTTP/1.1 200")
    head, body = kinds(raw.url)["audited"](ALLOWED[name])
    assert exchange(running.proxy.port, head, body).startswith(b"HTTP/1.1 200")
    assert len(recorder.requests) == 2 and len(running.audit()) == 1
    assert all(ALLOWED[name] + b"\r\n" in sent for sent in recorder.requests)


def test_bare_lf_line_ends_are_forwarded_as_crlf(
    recorded: tuple[Callable[..., Running], Recorder, RawUpstream],
) -> None:
    """A head ended by bare LFs is read one way by everyone (RFC 9112 2.2 lets a
    recipient accept them) and goes upstream with CR LF: it passes."""
    start, recorder, raw = recorded
    running = start(routes=[f"raw={raw.url}"])
    head = b"GET /raw/v1/models HTTP/1.1\nHost: x\nX-A: a\nConnection: close\n\n"
    assert exchange(running.proxy.port, head).startswith(b"HTTP/1.1 200")
    (sent,) = recorder.requests
    assert b"\r\nX-A: a\r\n" in sent and b"\n\n" not in sent.replace(b"\r\n", b"")


def test_before_the_fix_a_fold_smuggled_a_request_past_the_audit(
    recorded: tuple[Callable[..., Running], Recorder, RawUpstream],
) -> None:
    """The attack end to end: a pass-through request whose folded line an upstream
    reads as `Transfer-Encoding: chunked`, its body a whole chat request. Refused:
    the upstream gets nothing, and no model request went by without its line."""
    start, recorder, raw = recorded
    running = start(routes=[f"raw={raw.url}"])
    smuggled = (
        b"0\r\n\r\nPOST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(CHAT), CHAT)
    )
    head = (
        b"POST /raw/v1/embeddings HTTP/1.1\r\nHost: x\r\nX-A: a\r\n Transfer-Encoding: chunked\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(smuggled)
    )
    assert exchange(running.proxy.port, head, smuggled).startswith(b"HTTP/1.1 400")
    assert recorder.requests == [] and running.audit() == []
    figure("header_bytes_smuggling", forwarded=len(recorder.requests), audited=0)


# ---------------------------------------------------------------- regular mode


@pytest.mark.parametrize("name", ["obs-fold SP", "bare CR", "NUL", "SOH", "DEL"])
def test_regular_mode_absolute_form_and_connect(
    recorded: tuple[Callable[..., Running], Recorder, RawUpstream], name: str
) -> None:
    start, recorder, raw = recorded
    running = start(mode="regular")
    authority = raw.url.removeprefix("http://").encode()
    line = FORBIDDEN[name]
    absolute = request(b"GET", b"http://" + authority + b"/v1/models", line)
    assert exchange(running.proxy.port, absolute).startswith(b"HTTP/1.1 400")
    connect = b"CONNECT " + authority + b" HTTP/1.1\r\nHost: " + authority + b"\r\n" + line
    assert exchange(running.proxy.port, connect + b"\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert recorder.requests == []
    rules = wait_until(lambda: [e["rule"] for e in running.events("rejected")])
    assert rules == ["invalid_header_bytes"] * 2


def test_regular_mode_inside_a_tunnel(
    recorded: tuple[Callable[..., Running], Recorder, RawUpstream],
) -> None:
    """A clean CONNECT, then a plain request inside it carrying a fold."""
    start, recorder, raw = recorded
    running = start(mode="regular")
    authority = raw.url.removeprefix("http://").encode()
    with socket.create_connection(("127.0.0.1", running.proxy.port), timeout=30) as sock:
        sock.sendall(b"CONNECT " + authority + b" HTTP/1.1\r\nHost: " + authority + b"\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        sock.sendall(request(b"GET", b"/v1/models", FORBIDDEN["obs-fold SP"]))
        assert sock.recv(4096).startswith(b"HTTP/1.1 400")
    assert recorder.requests == []


# ---------------------------------------------------------------- HTTP/2


def h2_get(
    proxy_port: int, ca: Path, host: str, port: int, headers: list[tuple[bytes, bytes]]
) -> int | str:
    """One HTTP/2 GET through a CONNECT tunnel (TLS with mitmproxy's CA, ALPN h2),
    the extra headers sent unvalidated; its status, or ``"reset"``."""
    target = f"{host}:{port}".encode()
    with h2_tunnel(proxy_port, ca, host, port) as sock:
        config = h2.config.H2Configuration(client_side=True, validate_outbound_headers=False)
        conn = h2.connection.H2Connection(config)
        conn.initiate_connection()
        conn.send_headers(1, [(b":method", b"GET"), (b":path", b"/v1/models"),
                              (b":scheme", b"https"), (b":authority", target), *headers],
                          end_stream=True)  # fmt: skip
        sock.sendall(conn.data_to_send())
        status: int | str = "reset"
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return status
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.ResponseReceived):
                    status = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                    return status
                elif isinstance(event, h2.events.ConnectionTerminated):
                    return "reset"
            sock.sendall(conn.data_to_send())


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SOH", b"a\x01b"),
        ("ESC", b"\x1b[2J"),
        ("DEL", b"a\x7f"),
        ("US", b"a\x1fb"),
        ("NUL (h2 refuses it itself)", b"a\x00b"),
        ("bare CR (h2 refuses it itself)", b"a\rb"),
    ],
)
def test_http2_carries_no_control_byte_upstream(tmp_path: Path, name: str, value: bytes) -> None:
    with Upstream(tls=self_signed_tls()) as upstream:
        host, port = "127.0.0.1", int(upstream.url.rsplit(":", 1)[1])
        with intercepting_proxy(tmp_path, [f"secure={upstream.url}"]) as proxy:
            ca = proxy_ca(tmp_path)
            status = h2_get(proxy.port, ca, host, port, [(b"x-a", value)])
            clean = h2_get(proxy.port, ca, host, port, [(b"x-a", b"a\tb")])
        received = [r.headers.get("x-a") for r in upstream.received]
    assert status in (400, "reset"), (name, status)
    assert (clean, received) == (200, ["a\tb"])  # the clean one, only
    if status == 400:
        events = read_jsonl(tmp_path / "out" / "events.jsonl")
        assert [e["rule"] for e in events if e["kind"] == "rejected"] == ["invalid_header_bytes"]


def test_the_refusal_is_in_the_routes_error_shape(
    recorded: tuple[Callable[..., Running], Recorder, RawUpstream],
) -> None:
    """The agent's SDK raises a clear error: the refusal comes in its provider's shape."""
    start, recorder, raw = recorded
    running = start(routes=[f"openai={raw.url}", f"anthropic={raw.url}"])
    shapes = {}
    for route in ("openai", "anthropic"):
        head = request(b"GET", f"/{route}/v1/models".encode(), FORBIDDEN["bare CR"])
        with socket.create_connection(("127.0.0.1", running.proxy.port), timeout=30) as sock:
            sock.sendall(head)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        assert data.startswith(b"HTTP/1.1 400")
        shapes[route] = orjson.loads(data.partition(b"\r\n\r\n")[2])
    assert shapes["openai"]["error"]["code"] == "modeltap_rejected"
    assert shapes["anthropic"]["type"] == "error"
    assert "invalid_header_bytes" in shapes["anthropic"]["error"]["message"]
    assert recorder.requests == []
