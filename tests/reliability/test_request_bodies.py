"""Request bodies are bounded by ``--max-body`` while they arrive (SPEC 2, 8).

mitmproxy buffers a request body whole before the ``request`` hook. Before
``request_limit``, a 300 MB upload with ``--max-body 1m`` grew a ``modeltap run``
process by 300 MB whether it was refused by its ``Content-Length`` (the answer
came only once everything was uploaded) or sent chunked (buffered, then
refused). Here a client uploads 300 MiB on a raw socket, writing until the
proxy stops it and reading the answer meanwhile, against a real ``modeltap
run`` process (RSS is its own: ``VmHWM`` after ``clear_refs``), over HTTP/1;
HTTP/2 through a CONNECT tunnel with TLS, in-process; and the SDKs.
"""

from __future__ import annotations

import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import openai
import orjson
import pytest

from tests.conftest import Running, intercepting_proxy, proxy_ca, read_jsonl
from tests.reliability.faults import figure, read_response, wait_until
from tests.reliability.test_processes import ProxyProcess
from tests.reliability.test_request_gate import proc_status, reset_peak
from tests.upstream import Upstream, self_signed_tls

MB = 1024 * 1024
LIMIT = 1 * MB
UPLOAD = 300 * MB
PIECE = 256 * 1024
CHAT = {"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]}
#: What the proxy may grow by while refusing: the limit and a little. Unbounded,
#: it was the upload (300 MB).
GROWTH_BOUND = LIMIT + 32 * MB


@pytest.fixture(scope="module")
def bounded(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ProxyProcess, Upstream, Path]]:
    """One ``modeltap run --max-body 1m`` process for the HTTP/1 uploads."""
    out = tmp_path_factory.mktemp("bodies")
    with Upstream() as stub:
        proc = ProxyProcess(
            "--out", str(out), "--route", f"stub={stub.url}", "-q", "--max-body", "1m"
        )  # fmt: skip
        try:
            yield proc, stub, out
        finally:
            proc.kill()


def upload(port: int, head: bytes, chunked: bool) -> dict[str, Any]:
    """Send ``head`` and up to 300 MiB of body on one connection, writing until the
    proxy stops the upload, reading meanwhile. Returns the answer, when its first
    byte came (seconds), how much of the body got out, and how the writing ended."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(head)
    state: dict[str, Any] = {"sent": 0, "write_error": None}
    data = b"x" * PIECE
    frame = b"%x\r\n%s\r\n" % (PIECE, data) if chunked else data

    def write() -> None:
        try:
            while state["sent"] < UPLOAD:
                sock.sendall(frame)
                state["sent"] += PIECE
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError as e:
            state["write_error"] = type(e).__name__

    writer = threading.Thread(target=write)
    started = time.perf_counter()
    writer.start()
    answer, first = b"", None
    try:
        while chunk := sock.recv(65536):
            first = first if first is not None else time.perf_counter() - started
            answer += chunk
    except OSError as e:
        answer += f"<{type(e).__name__}>".encode()
    writer.join(60)
    sock.close()
    return {
        **state,
        "answer": answer,
        "answered_in_s": first,
        "closed_in_s": time.perf_counter() - started,
    }


def head(path: str, *, chunked: bool, extra: str = "") -> bytes:
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {UPLOAD}"
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"{framing}\r\n{extra}\r\n"
    ).encode()


CASES = {
    # name: (path, chunked, extra header, expected status, expected rule)
    "model-content-length": ("/stub/v1/chat/completions", False, "", 413, "body_too_large"),
    "model-chunked": ("/stub/v1/chat/completions", True, "", 413, "body_too_large"),
    "pass-through-chunked": ("/stub/v1/files", True, "", 413, "body_too_large"),
    "pass-through-content-length": ("/stub/v1/files", False, "", 413, "body_too_large"),
    "model-expect-100-continue": (
        "/stub/v1/responses",
        False,
        "Expect: 100-continue\r\n",
        413,
        "body_too_large",
    ),
    "answered-by-its-head-chunked": ("/nowhere/v1/chat/completions", True, "", 404, None),
}


@pytest.mark.parametrize(
    ("path", "chunked", "extra", "status", "rule"), CASES.values(), ids=CASES.keys()
)
def test_an_upload_past_max_body_is_answered_and_stopped_at_the_limit(
    bounded: tuple[ProxyProcess, Upstream, Path],
    path: str,
    chunked: bool,
    extra: str,
    status: int,
    rule: str | None,
) -> None:
    proc, stub, out = bounded
    pid = proc.proc.pid
    received_before = len(stub.received)
    rejected_before = len([e for e in read_jsonl(out / "events.jsonl") if e["kind"] == "rejected"])
    reset_peak(pid)
    before = proc_status(pid)["VmRSS"]
    result = upload(proc.port, head(path, chunked=chunked, extra=extra), chunked)
    growth = proc_status(pid)["VmHWM"] - before

    answer = result["answer"]
    assert answer.startswith(b"HTTP/1.1 %d " % status), answer[:200]
    assert b"100 Continue" not in answer
    assert b"connection: close" in answer.lower()
    # The proxy stopped the upload: the client could not get it all out.
    assert result["sent"] < UPLOAD and result["write_error"] is not None, result
    assert growth < GROWTH_BOUND, f"RSS grew by {growth / MB:.1f} MiB"
    assert len(stub.received) == received_before  # nothing forwarded
    if rule is not None:
        assert rule.encode() in answer
        rejected = wait_until(
            lambda: [e for e in read_jsonl(out / "events.jsonl") if e["kind"] == "rejected"][
                rejected_before:
            ]
        )
        assert [(e["rule"], e["path"]) for e in rejected] == [(rule, path.removeprefix("/stub"))]
    # The proxy goes on serving.
    assert exchange(proc.port, chat_request(orjson.dumps(CHAT)))[0] == 200
    figure(
        "request_body_bound", case=f"http1 {path} {'chunked' if chunked else 'content-length'}"
        f"{' expect' if extra else ''}", upload_mib=UPLOAD // MB, max_body_mib=LIMIT // MB,
        answered_in_s=round(result["answered_in_s"] or -1, 3),
        closed_in_s=round(result["closed_in_s"], 3), sent_mib=round(result["sent"] / MB, 1),
        rss_growth_mb=round(growth / MB, 1),
    )  # fmt: skip


def exchange(port: int, raw: bytes, sock: socket.socket | None = None) -> tuple[int | None, bytes]:
    """One request on ``sock`` (kept open) or on a new connection: ``(status, body)``."""
    if sock is not None:
        sock.sendall(raw)
        return read_response(sock)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as own:
        own.sendall(raw)
        return read_response(own)


def chat_request(body: bytes, path: bytes = b"/stub/v1/chat/completions") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (path, len(body), body)


def padded_chat(size: int) -> bytes:
    """A chat request body of exactly ``size`` bytes."""
    empty = orjson.dumps({**CHAT, "messages": [{"role": "user", "content": ""}]})
    return orjson.dumps(
        {**CHAT, "messages": [{"role": "user", "content": "x" * (size - len(empty))}]}
    )


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_the_bound_is_exact(bounded: tuple[ProxyProcess, Upstream, Path], chunked: bool) -> None:
    """A body of exactly --max-body is audited and forwarded; one byte more is 413."""
    proc, _stub, _out = bounded

    def request(body: bytes) -> bytes:
        framing = (
            b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
            if chunked
            else b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        return b"POST /stub/v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + framing

    assert exchange(proc.port, request(padded_chat(LIMIT)))[0] == 200
    status, body = exchange(proc.port, request(padded_chat(LIMIT + 1)))
    assert status == 413 and b"body_too_large" in body


def test_a_body_refused_by_its_head_is_read_not_kept_and_the_connection_stays(
    bounded: tuple[ProxyProcess, Upstream, Path],
) -> None:
    """No route: answered once its (small) body has been read, on a connection that
    stays open for the next request, as before."""
    proc, _stub, _out = bounded
    with socket.create_connection(("127.0.0.1", proc.port), timeout=10) as sock:
        body = orjson.dumps(CHAT)
        assert exchange(proc.port, chat_request(body, b"/nowhere/x"), sock)[0] == 404
        assert exchange(proc.port, chat_request(body), sock)[0] == 200


# ------------------------------------------------------------------ HTTP/2


def h2_upload(sock: ssl.SSLSocket, conn: h2.connection.H2Connection, stream: int, path: str,
              authority: str, total: int, content_length: bool) -> dict[str, Any]:  # fmt: skip
    """Upload ``total`` bytes on an HTTP/2 stream, as flow control allows, until the
    proxy answers and resets the stream (or the body is sent and answered)."""
    headers = [(":method", "POST"), (":path", path), (":scheme", "https"),
               (":authority", authority), ("content-type", "application/json")]  # fmt: skip
    if content_length:
        headers.append(("content-length", str(total)))
    conn.send_headers(stream, headers, end_stream=total == 0)
    sent, status, body, reset, ended, answered = 0, 0, b"", None, False, None
    started = time.perf_counter()
    while reset is None and not (ended and sent == total):
        if sent < total and conn.local_flow_control_window(stream) > 0:
            n = min(
                conn.local_flow_control_window(stream), conn.max_outbound_frame_size, total - sent
            )
            try:
                conn.send_data(stream, b"x" * n, end_stream=sent + n == total)
                sent += n
            except h2.exceptions.StreamClosedError:
                pass
        sock.sendall(conn.data_to_send())
        if not select.select([sock], [], [], 0 if sent < total else 10)[0] and sent == total:
            raise AssertionError("no answer")
        if select.select([sock], [], [], 0)[0] or sent == total:
            chunk = sock.recv(65536)
            assert chunk, "the proxy closed the HTTP/2 connection"
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream:
                    status = int(dict(event.headers)[b":status"])
                    answered = time.perf_counter() - started
                elif isinstance(event, h2.events.DataReceived) and event.stream_id == stream:
                    body += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, stream)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
                    ended = True
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream:
                    reset = event.error_code
            sock.sendall(conn.data_to_send())
    return {"status": status, "body": body, "sent": sent, "reset": reset, "answered_in_s": answered}


@pytest.mark.parametrize(
    ("path", "content_length"),
    [("/v1/chat/completions", False), ("/v1/chat/completions", True), ("/v1/files", False)],
    ids=["model", "model-content-length", "pass-through"],
)
def test_http2_upload_past_max_body_is_answered_and_its_stream_reset(
    tmp_path: Path, path: str, content_length: bool
) -> None:
    """HTTP/2 frames bodies itself (no content-length needed): the stream gets its
    413 and is reset, and the connection carries on with the next stream."""
    with Upstream(tls=self_signed_tls()) as upstream:
        host, port = "127.0.0.1", int(upstream.url.rsplit(":", 1)[1])
        with intercepting_proxy(tmp_path, [f"secure={upstream.url}"], max_body="1m") as proxy:
            raw = socket.create_connection(("127.0.0.1", proxy.port), timeout=30)
            target = f"{host}:{port}".encode()
            raw.sendall(b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target + b"\r\n\r\n")
            assert raw.recv(4096).startswith(b"HTTP/1.1 200")
            ctx = ssl.create_default_context(cafile=str(proxy_ca(tmp_path)))
            ctx.set_alpn_protocols(["h2"])
            with ctx.wrap_socket(raw, server_hostname=host) as sock:
                conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
                conn.initiate_connection()
                pid = os.getpid()
                reset_peak(pid)
                before = proc_status(pid)["VmRSS"]
                big = h2_upload(sock, conn, 1, path, f"{host}:{port}", UPLOAD, content_length)
                growth = proc_status(pid)["VmHWM"] - before
                small = orjson.dumps(CHAT)
                conn.send_headers(3, [(":method", "POST"), (":path", "/v1/chat/completions"),
                                      (":scheme", "https"), (":authority", f"{host}:{port}"),
                                      ("content-length", str(len(small)))])  # fmt: skip
                conn.send_data(3, small, end_stream=True)
                sock.sendall(conn.data_to_send())
                status3 = 0
                while not status3:
                    for event in conn.receive_data(sock.recv(65536)):
                        if isinstance(event, h2.events.ResponseReceived) and event.stream_id == 3:
                            status3 = int(dict(event.headers)[b":status"])
                    sock.sendall(conn.data_to_send())
        received = [r.path for r in upstream.received]
    assert big["status"] == 413 and b"body_too_large" in big["body"], big
    assert big["reset"] is not None and big["sent"] < UPLOAD, big
    assert growth < LIMIT + 64 * MB, f"RSS grew by {growth / MB:.1f} MiB"  # client and proxy
    assert status3 == 200  # the connection carries on
    assert received == ["/v1/chat/completions"]  # only the small one
    rejected = [e for e in read_jsonl(tmp_path / "out" / "events.jsonl") if e["kind"] == "rejected"]
    assert [(e["rule"], e["path"]) for e in rejected] == [("body_too_large", path)]
    figure(
        "request_body_bound", case=f"http2 {path}{' content-length' if content_length else ''}",
        upload_mib=UPLOAD // MB, max_body_mib=LIMIT // MB,
        answered_in_s=round(big["answered_in_s"] or -1, 3), sent_mib=round(big["sent"] / MB, 1),
        rss_growth_mb_test_process=round(growth / MB, 1),
    )  # fmt: skip


# ------------------------------------------------------------------ SDKs


def test_sdks_get_a_413_they_can_read(start_proxy: Callable[..., Running]) -> None:
    """A 5 MB message at --max-body 1m: the SDK sends it whole, with a content-length;
    it is answered at once and the SDK raises the provider-shaped 413."""
    running = start_proxy(max_body="1m")
    huge = "x" * (5 * MB)
    oai = openai.OpenAI(base_url=running.base() + "/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.APIStatusError) as raised:
        oai.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": huge}])
    assert raised.value.status_code == 413 and "body_too_large" in str(raised.value)
    anth = anthropic.Anthropic(base_url=running.base(), api_key="k", max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as raised_a:
        anth.messages.create(
            model="claude", max_tokens=1, messages=[{"role": "user", "content": huge}]
        )
    assert raised_a.value.status_code == 413 and "body_too_large" in str(raised_a.value)
    assert running.upstream.received == []
    assert [e["rule"] for e in running.events("rejected")] == ["body_too_large"] * 2
