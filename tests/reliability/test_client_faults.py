"""Client faults: uploads cut short, readers that leave mid-stream, and slow
senders holding connections open. Other clients are served all along."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx2 as httpx
import orjson

from tests.conftest import Running
from tests.reliability.faults import figure, wait_until
from tests.upstream import Reply, chat_text_sse

CHAT = orjson.dumps({"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]})


#: One client for the normal requests: building an httpx client (its TLS
#: context) costs more than a request through the proxy.
CLIENT = httpx.Client(timeout=10)


def ok(running: Running, n: int = 1) -> None:
    for _ in range(n):
        resp = CLIENT.post(running.base() + "/v1/chat/completions", content=CHAT)
        assert resp.status_code == 200


def proxy_socket(running: Running) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", running.proxy.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def test_disconnect_mid_upload(running: Running) -> None:
    """Headers promise 10 MiB, 64 KiB arrive, the client closes: nothing is
    audited or forwarded, and the proxy keeps serving."""
    for _ in range(20):
        with proxy_socket(running) as sock:
            sock.sendall(
                b"POST /stub/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 10485760\r\n\r\n"
                + b'{"model":"gpt-5","messages":['
                + b" " * 65536
            )
    ok(running)
    assert len(running.audit()) == 1
    assert len(running.upstream.received) == 1
    assert wait_until(lambda: running.events("response"))


def test_disconnect_mid_stream(running: Running) -> None:
    """Readers leave after the first SSE event; each exchange is recorded as
    incomplete with client_gone, and the proxy keeps serving."""
    gates = [threading.Event() for _ in range(5)]
    sse = chat_text_sse("gpt-5").sse
    running.upstream.replies.extend(Reply(sse=sse, gate_after={0: g}) for g in gates)
    body = orjson.dumps({"model": "gpt-5", "messages": [], "stream": True})
    try:
        for _ in gates:
            with httpx.stream("POST", running.base() + "/v1/chat/completions", content=body,
                              timeout=10) as resp:  # fmt: skip
                assert next(resp.iter_raw()).startswith(b"data: ")
        errors = wait_until(lambda: len(running.events("error")) >= 5 and running.events("error"))
    finally:
        for g in gates:
            g.set()
    assert [e["error"] for e in errors] == ["client_gone"] * 5
    responses = wait_until(
        lambda: len(running.events("response")) >= 5 and running.events("response")
    )
    assert all(e["evidence_complete"] is False for e in responses)
    ok(running)


def test_slow_uploads_do_not_starve_other_clients(running: Running) -> None:
    """Slowloris, bounded: 30 connections trickle a request body a few bytes at a
    time for 3 seconds while 60 normal requests (4 in flight) are served."""
    slow = [proxy_socket(running) for _ in range(30)]
    head = (b"POST /stub/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n" % len(CHAT))  # fmt: skip
    for sock in slow:
        sock.sendall(head)
    stop = threading.Event()
    sent = [0]

    def trickle() -> None:
        while not stop.is_set() and sent[0] < len(CHAT) - 1:
            for sock in slow:
                sock.sendall(CHAT[sent[0] : sent[0] + 1])
            sent[0] += 1
            stop.wait(0.1)

    t = threading.Thread(target=trickle)
    t.start()
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: ok(running), range(60)))
        served_in = time.monotonic() - started
        # Served while every slow body was still short of its last byte (the
        # trickle never sends it): audited are the 60, none of the 30.
        audited_meanwhile = len(running.audit())
        stop.wait(max(0.0, 3.0 - served_in))
    finally:
        stop.set()
        t.join(5)
    # Normal requests that waited on the slow senders would never have been
    # served (their bodies stay short until after this) and failed on the
    # client's timeout. How long they took (about 0.4 s unloaded) is a figure,
    # not a check: on a loaded machine it is noise.
    assert audited_meanwhile == 60, "normal requests waited on the slow ones"
    # The slow senders finish their bodies and are answered too.
    assert 0 < sent[0] < len(CHAT)
    for sock in slow:
        sock.sendall(CHAT[sent[0] :])
    for sock in slow:
        assert sock.recv(12).startswith(b"HTTP/1.1 200")
        sock.close()
    records = running.audit()
    assert len(records) == 90 and len({r["seq"] for r in records}) == 90
    figure("slowloris", slow_connections=len(slow), normal_requests=60, served_in_s=served_in)
