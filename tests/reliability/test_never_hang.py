"""Never a silent hang: requests that never end the ordinary way (trailers, stalled
or short uploads, ``Expect: 100-continue``, HTTP/2 trailers, a WebSocket handshake
that is never answered) each get an answer or a timeout, and an event.

Raw sockets send what SDKs would not. Every wait is bounded by the socket's own
timeout, far above the one-second limits used here: a hang fails the test.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import openai
import orjson
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from modeltap.app.proxy import Proxy
from tests.conftest import Running, intercepting_proxy, proxy_ca, read_jsonl
from tests.reliability.faults import (
    RawUpstream,
    answers_with_trailers,
    h2_tunnel,
    never_answers,
    read_response,
    read_until_closed,
    wait_until,
)
from tests.reliability.test_upstream_faults import still_serving
from tests.upstream import Upstream, self_signed_tls

FAST = {"upstream_timeout": "connect=1,first-byte=1,idle=1", "client_timeout": "1"}
BODY = orjson.dumps({"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]})


def proxy_socket(running: Running, timeout: float = 30) -> socket.socket:
    return socket.create_connection(("127.0.0.1", running.proxy.port), timeout=timeout)


def chunked(body: bytes, trailer: bytes = b"") -> bytes:
    return b"%x\r\n%s\r\n0\r\n%s\r\n" % (len(body), body, trailer)


TRAILERS = {
    "model-request": (b"/stub/v1/chat/completions", b"", b"X-Checksum: abc\r\n"),
    "announced": (b"/stub/v1/chat/completions", b"Trailer: X-Checksum\r\n", b"X-Checksum: abc\r\n"),
    "several-fields": (b"/stub/v1/responses", b"", b"A: 1\r\nB: 2\r\n"),
    "pass-through-path": (b"/stub/v1/embeddings", b"", b"X-Checksum: abc\r\n"),
}


@pytest.mark.parametrize(("path", "head", "trailer"), TRAILERS.values(), ids=TRAILERS.keys())
def test_chunked_request_with_trailers_is_refused_by_name(
    start_proxy: Callable[..., Running], path: bytes, head: bytes, trailer: bytes
) -> None:
    running = start_proxy(**FAST)
    with proxy_socket(running) as sock:
        sock.sendall(
            b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n" + head + b"\r\n" + chunked(BODY, trailer)
        )
        status, body = read_response(sock)
    assert status == 400
    assert "[rule request_trailers]" in orjson.loads(body)["error"]["message"]
    (rejected,) = running.events("rejected")
    assert (rejected["rule"], rejected["status"]) == ("request_trailers", 400)
    assert running.audit() == [] and running.upstream.received == []
    still_serving(running)


def test_the_same_body_without_trailers_is_audited(start_proxy: Callable[..., Running]) -> None:
    """The control: chunked framing itself is fine."""
    running = start_proxy(**FAST)
    with proxy_socket(running) as sock:
        sock.sendall(
            b"POST /stub/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + chunked(BODY)
        )
        status, _ = read_response(sock)
    assert status == 200 and len(running.audit()) == 1


def test_upstream_response_with_trailers_reaches_the_client(
    start_proxy: Callable[..., Running],
) -> None:
    """mitmproxy's HTTP/1 reader used to crash on the trailer section, leaving the
    agent waiting; the trailers are dropped (an HTTP/1 client cannot get them from
    mitmproxy), the answer arrives whole."""
    with RawUpstream(answers_with_trailers) as raw:
        running = start_proxy(routes=[f"raw={raw.url}"], **FAST)
        client = openai.OpenAI(
            base_url=running.base("raw") + "/v1", api_key="k", max_retries=0, timeout=30
        )
        out = client.chat.completions.create(model="gpt-5", messages=[])
        assert out.choices[0].message.content == "with trailers"
        (event,) = wait_until(lambda: running.events("response"))
        assert event["evidence_complete"] is True and event["usage"]["total_tokens"] == 3
        assert running.events("error") == []


STALLS = {
    "content-length-short": b"Content-Length: 500\r\n\r\n" + BODY[:10],
    "mid-chunk": b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(BODY) + BODY[:10],
    "between-chunks": b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(BODY), BODY),
    "expect-100-then-nothing": b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(BODY),
}


@pytest.mark.parametrize("rest", STALLS.values(), ids=STALLS.keys())
def test_stalled_upload_ends_with_client_timeout(
    start_proxy: Callable[..., Running], rest: bytes
) -> None:
    running = start_proxy(**FAST)
    with proxy_socket(running) as sock:
        sock.sendall(
            b"POST /stub/v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-modeltap-session: s\r\n"
            + rest
        )
        answer = read_until_closed(sock)  # a TimeoutError here would be the hang
    assert answer in (b"", b"HTTP/1.1 100 Continue\r\n\r\n")
    (error,) = wait_until(lambda: running.events("error"))
    assert error["error"] == "client_timeout"
    assert running.audit() == [] and running.upstream.received == []
    still_serving(running)


def test_short_upload_then_half_close_is_client_gone(start_proxy: Callable[..., Running]) -> None:
    """Content-Length longer than the body, and the client says it is done."""
    running = start_proxy(**FAST)
    with proxy_socket(running) as sock:
        sock.sendall(
            b"POST /stub/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n"
            + BODY
        )
        sock.shutdown(socket.SHUT_WR)
        read_until_closed(sock)
    (error,) = wait_until(lambda: running.events("error"))
    assert error["error"] == "client_gone"
    assert running.audit() == [] and running.upstream.received == []


def test_expect_100_continue_is_answered_and_audited(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy(**FAST)
    with proxy_socket(running) as sock:
        sock.sendall(
            b"POST /stub/v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\n\r\n" % len(BODY)
        )
        assert sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"  # the client may now send
        sock.sendall(BODY)
        status, _ = read_response(sock)
    assert status == 200 and len(running.audit()) == 1


def test_websocket_handshake_never_answered(start_proxy: Callable[..., Running]) -> None:
    with RawUpstream(never_answers) as raw:
        running = start_proxy(routes=[f"raw={raw.url}"], **FAST)
        url = running.base("raw").replace("http://", "ws://") + "/v1/responses"
        with pytest.raises(InvalidStatus) as exc:
            connect(url, open_timeout=30)
        assert exc.value.response.status_code == 504
        (error,) = wait_until(lambda: running.events("error"))
        assert error["error"] == "upstream_timeout"
        assert running.events("ws_open") == []


# ------------------------------------------------------------------ HTTP/2


def h2_exchange(
    proxy: Proxy,
    ca: Path,
    host: str,
    port: int,
    body: bytes,
    trailers: bool,
    path: str = "/v1/chat/completions",
) -> tuple[int, bytes]:
    """One HTTP/2 POST through the proxy's CONNECT tunnel (TLS with mitmproxy's CA,
    ALPN h2), with or without a trailer section, and without a content-length
    (HTTP/2 frames the body itself); returns ``(status, body)``."""
    with h2_tunnel(proxy.port, ca, host, port) as sock:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        conn.send_headers(1, [(":method", "POST"), (":path", path),
                              (":scheme", "https"), (":authority", f"{host}:{port}"),
                              ("content-type", "application/json")])  # fmt: skip
        conn.send_data(1, body, end_stream=not trailers)
        if trailers:
            conn.send_headers(1, [("x-checksum", "abc")], end_stream=True)
        sock.sendall(conn.data_to_send())
        status, data = 0, b""
        while True:
            chunk = sock.recv(65536)
            assert chunk, "the proxy closed the HTTP/2 connection without an answer"
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.ResponseReceived):
                    status = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.DataReceived):
                    data += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, 1)
                elif isinstance(event, h2.events.StreamEnded):
                    return status, data
            sock.sendall(conn.data_to_send())


@pytest.mark.parametrize("trailers", [False, True], ids=["plain", "trailers"])
def test_http2_client_with_trailers(tmp_path: Path, trailers: bool) -> None:
    """An HTTP/2 client (regular mode, TLS) may end its body with trailers. Forwarded
    to an HTTP/1 upstream they crashed mitmproxy mid-exchange; they are refused."""
    with Upstream(tls=self_signed_tls()) as upstream:
        host, port = "127.0.0.1", int(upstream.url.rsplit(":", 1)[1])
        with intercepting_proxy(tmp_path, [f"secure={upstream.url}"], **FAST) as proxy:
            ca = proxy_ca(tmp_path)
            status, body = h2_exchange(proxy, ca, host, port, BODY, trailers)
        received = len(upstream.received)
    audit = read_jsonl(tmp_path / "out" / "audit.jsonl")
    if trailers:
        assert status == 400 and b"request_trailers" in body
        assert audit == [] and received == 0
    else:
        assert status == 200 and orjson.loads(body)["choices"], body
        assert len(audit) == 1 and received == 1


def test_http2_body_without_length_cannot_smuggle_a_request(tmp_path: Path) -> None:
    """An HTTP/2 body needs no content-length; mitmproxy forwarded one to an HTTP/1
    upstream with no framing, so a pass-through body holding a whole HTTP/1 model
    request reached the upstream as a second, unaudited request."""
    smuggled = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
    )
    with Upstream(tls=self_signed_tls()) as upstream:
        host, port = "127.0.0.1", int(upstream.url.rsplit(":", 1)[1])
        with intercepting_proxy(tmp_path, [f"secure={upstream.url}"], **FAST) as proxy:
            ca = proxy_ca(tmp_path)
            status, _ = h2_exchange(proxy, ca, host, port, smuggled, False, "/v1/embeddings")
        assert status == 200
        received = [(r.method, r.path, r.raw) for r in upstream.received]
    assert received == [("POST", "/v1/embeddings", smuggled)]  # one request, body intact
    assert read_jsonl(tmp_path / "out" / "audit.jsonl") == []
    (unaudited,) = [e for e in read_jsonl(tmp_path / "out" / "events.jsonl")]
    assert unaudited["kind"] == "unaudited" and unaudited["path"] == "/v1/embeddings"
