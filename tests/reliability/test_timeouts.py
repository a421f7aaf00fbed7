"""Timeouts and blame, through the real proxy: an upstream that stalls in each phase
is ended by ``--upstream-timeout`` and named ``upstream_timeout``; clients that
leave or break HTTP are named for it; nothing waits on mitmproxy's 600 s watchdog.

Limits are one second here; assertions are on outcomes (what the agent got, what
the events say), never on how long it took.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx2 as httpx
import openai
import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.conftest import Running, read_jsonl
from tests.reliability.faults import (
    RawUpstream,
    closed_port,
    figure,
    never_answers,
    read_response,
    read_until_closed,
    reset_before_answer,
    slow_first_byte,
    stalls_mid_stream,
    trickles,
    wait_for_close,
    wait_until,
    ws_goes_silent,
)
from tests.reliability.test_upstream_faults import CHAT, post, response_event, still_serving
from tests.test_addons_script import MITMDUMP, ROOT, free_port, wait_listening

FAST = {"upstream_timeout": "connect=1,first-byte=1,idle=1", "client_timeout": "1"}
SESSION = {"x-modeltap-session": "t"}


def start(start_proxy: Callable[..., Running], url: str, **kwargs: Any) -> Running:
    return start_proxy(routes=[f"raw={url}"], **{**FAST, **kwargs})


def one_error(running: Running) -> dict[str, Any]:
    (error,) = wait_until(lambda: running.events("error"))
    return error


def stop_reason(running: Running, session: str = "t") -> str:
    running.proxy.stop()  # ends every session: sessions.jsonl gets its lines
    (status,) = [
        s for s in read_jsonl(running.out / "sessions.jsonl") if s["session_id"] == session
    ]
    reason: str = status["stop_reason"]
    return reason


def test_upstream_that_never_answers_openai_sdk(
    start_proxy: Callable[..., Running], capfd: pytest.CaptureFixture[str]
) -> None:
    with RawUpstream(never_answers) as raw:
        running = start(start_proxy, raw.url, quiet=False)
        client = openai.OpenAI(
            base_url=running.base("raw") + "/v1", api_key="k", max_retries=0, timeout=30
        )
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as exc:
            client.chat.completions.create(model="gpt-5", messages=[], extra_headers=SESSION)
        waited = time.monotonic() - started
        assert exc.value.status_code == 504
        assert exc.value.code == "modeltap_upstream_timeout"  # the OpenAI error shape
        assert "first-byte" in exc.value.message
        (record,) = running.audit()
        error = one_error(running)
        assert (error["seq"], error["error"]) == (record["seq"], "upstream_timeout")
        event = response_event(running, record["seq"])
        assert event["evidence_complete"] is False and event["status"] is None
        assert any("first-byte" in e for e in event["capture_errors"])
        # The per-exchange stderr line says what went wrong.
        lines = capfd.readouterr().err.splitlines()
        assert any(
            " t openai.chat_completions gpt-5 - - " in line and line.endswith("timeout: first byte")
            for line in lines
        ), lines
        still_serving(running)
    assert stop_reason(running) == "upstream_error"
    figure("upstream_never_answers", limit_s=1.0, agent_waited_s=round(waited, 2))


def test_upstream_that_never_answers_anthropic_sdk(start_proxy: Callable[..., Running]) -> None:
    with RawUpstream(never_answers) as raw:
        running = start(start_proxy, raw.url)
        client = anthropic.Anthropic(
            base_url=running.base("raw"), api_key="k", max_retries=0, timeout=30
        )
        with pytest.raises(anthropic.APIStatusError) as exc:
            client.messages.create(
                model="claude-x", max_tokens=5, messages=[{"role": "user", "content": "x"}]
            )
        assert exc.value.status_code == 504
        body = exc.value.body
        assert isinstance(body, dict) and body["type"] == "error"  # the Anthropic error shape
        assert body["error"]["type"] == "api_error"
        assert one_error(running)["error"] == "upstream_timeout"


def test_connect_phase_tls_handshake_never_answered(start_proxy: Callable[..., Running]) -> None:
    """The TCP connection opens but the TLS handshake never completes: a connect timeout."""
    with RawUpstream(wait_for_close) as raw:
        running = start(start_proxy, raw.url.replace("http://", "https://"))
        started = time.monotonic()
        resp = post(running.base("raw") + "/v1/chat/completions", CHAT, timeout=30)
        figure(
            "tls_connect_stall", limit_s=1.0, answered_after_s=round(time.monotonic() - started, 2)
        )
        assert resp.status_code == 504
        assert resp.json()["error"]["code"] == "modeltap_upstream_timeout"
        (record,) = running.audit()
        error = one_error(running)
        assert (error["seq"], error["error"]) == (record["seq"], "upstream_timeout")
        assert "connect" in error["message"]
        assert response_event(running, record["seq"])["evidence_complete"] is False
        still_serving(running)


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "close-delimited"])
def test_stream_that_stalls_is_cut_and_named(
    start_proxy: Callable[..., Running], chunked: bool
) -> None:
    with RawUpstream(stalls_mid_stream(chunked=chunked)) as raw:
        running = start(start_proxy, raw.url)
        client = openai.OpenAI(
            base_url=running.base("raw") + "/v1", api_key="k", max_retries=0, timeout=30
        )
        seen: list[str] = []
        started = time.monotonic()
        stream = client.chat.completions.create(
            model="gpt-5", messages=[], stream=True, extra_headers=SESSION
        )
        if chunked:
            with pytest.raises((httpx.HTTPError, openai.APIError)) as exc:
                seen.extend(c.choices[0].delta.content or "" for c in stream)
            # The cut, not a clean end, and not the client giving up on its own.
            assert "Timeout" not in type(exc.value).__name__
        else:
            # A body that ends at the close reads as ended to the client (HTTP/1
            # has no other way); the event still says what happened.
            seen.extend(c.choices[0].delta.content or "" for c in stream)
        assert seen == ["Hel"]  # what came before the stall was passed on
        figure(f"stream_stall_{'chunked' if chunked else 'close'}", limit_s=1.0,
               ended_after_s=round(time.monotonic() - started, 2))  # fmt: skip
        (record,) = running.audit()
        error = one_error(running)
        assert (error["seq"], error["error"]) == (record["seq"], "upstream_timeout")
        event = response_event(running, record["seq"])
        assert event["status"] == 200 and event["evidence_complete"] is False
        assert "stream ended before data: [DONE]" in event["capture_errors"]
        assert any("idle" in e for e in event["capture_errors"])
        still_serving(running)
    assert stop_reason(running) == "upstream_error"


def test_slow_but_steady_stream_is_not_cut(start_proxy: Callable[..., Running]) -> None:
    """Progress moves the idle deadline: events 0.4 s apart under a 1 s idle limit,
    2 s in all, arrive whole."""
    with RawUpstream(trickles(events=5, gap=0.4)) as raw:
        running = start(start_proxy, raw.url)
        client = openai.OpenAI(
            base_url=running.base("raw") + "/v1", api_key="k", max_retries=0, timeout=30
        )
        stream = client.chat.completions.create(model="gpt-5", messages=[], stream=True)
        assert [c.choices[0].delta.content for c in stream] == ["0", "1", "2", "3", "4"]
        event = response_event(running, 1)
        assert event["evidence_complete"] is True
        assert running.events("error") == []


def test_slow_first_byte_within_the_limit(start_proxy: Callable[..., Running]) -> None:
    with RawUpstream(slow_first_byte(0.3)) as raw:
        running = start(start_proxy, raw.url)
        resp = post(running.base("raw") + "/v1/chat/completions", CHAT)
        assert resp.status_code == 200
        assert response_event(running, 1)["evidence_complete"] is True
        assert running.events("error") == []


def test_client_that_leaves_a_stalled_upstream_is_client_gone(
    start_proxy: Callable[..., Running],
) -> None:
    """The upstream is silent, but the client leaves before any limit: its fault."""
    with RawUpstream(never_answers) as raw:
        running = start(start_proxy, raw.url, upstream_timeout="first-byte=60")
        with socket.create_connection(("127.0.0.1", running.proxy.port), timeout=10) as sock:
            body = orjson.dumps(CHAT)
            sock.sendall(
                b"POST /raw/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            wait_until(lambda: running.audit())
        assert one_error(running)["error"] == "client_gone"


def test_reset_and_refused_are_told_apart(start_proxy: Callable[..., Running]) -> None:
    with RawUpstream(reset_before_answer) as raw:
        running = start_proxy(routes=[f"raw={raw.url}", f"dead=http://127.0.0.1:{closed_port()}"])
        assert post(running.base("raw") + "/v1/chat/completions", CHAT).status_code == 502
        assert post(running.base("dead") + "/v1/chat/completions", CHAT).status_code == 502
        errors = wait_until(lambda: len(running.events("error")) == 2 and running.events("error"))
    assert [e["error"] for e in errors] == ["upstream_reset", "upstream_unreachable"]


HEAD = b"POST /stub/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
SMUGGLING = {
    "cl-and-te": HEAD + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "te-twice": HEAD + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "te-list": HEAD + b"Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
    "te-unknown": HEAD + b"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
    "cl-twice": HEAD + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    "cl-signed": HEAD + b"Content-Length: +5\r\n\r\nhello",
    "space-before-colon": HEAD + b"Content-Length : 5\r\n\r\nhello",
    "te-on-http10": b"POST /stub/v1/chat/completions HTTP/1.0\r\nHost: x\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "bad-chunk-size": HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
    "chunk-without-crlf": HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\nhiXX0\r\n\r\n",
}


@pytest.mark.parametrize("raw", SMUGGLING.values(), ids=SMUGGLING.keys())
def test_broken_http_from_the_client_is_bad_request(
    start_proxy: Callable[..., Running], raw: bytes
) -> None:
    running = start_proxy(**FAST)
    with socket.create_connection(("127.0.0.1", running.proxy.port), timeout=10) as sock:
        sock.sendall(raw)
        status, body = read_response(sock)
    assert status == 400 and orjson.loads(body)["error"]["type"] == "invalid_request_error"
    error = one_error(running)
    assert error["error"] == "bad_request"
    assert running.audit() == [] and running.upstream.received == []
    assert running.events("unaudited") == []  # it was not passed through either
    assert stop_reason(running, running.proxy.run_id) == "request_audit_error"


def test_stalled_upload_is_client_timeout(start_proxy: Callable[..., Running]) -> None:
    """Headers promise 100 bytes, 1 arrives, the client holds the connection open."""
    running = start_proxy(**FAST)
    with socket.create_connection(("127.0.0.1", running.proxy.port), timeout=30) as sock:
        sock.sendall(HEAD + b"Content-Length: 100\r\nx-modeltap-session: t\r\n\r\n{")
        started = time.monotonic()
        assert read_until_closed(sock) == b""  # closed, not left hanging
        ended_in = time.monotonic() - started
    assert one_error(running)["error"] == "client_timeout"
    assert running.audit() == [] and running.upstream.received == []
    still_serving(running)
    assert stop_reason(running) == "request_audit_error"
    figure("stalled_upload", limit_s=1.0, closed_after_s=round(ended_in, 2))


def mitmdump_reverse(
    upstream_url: str, out: Path, port: int, *sets: str
) -> subprocess.Popen[bytes]:
    args = [
        str(MITMDUMP), "-q", "-s", str(ROOT / "addons" / "modeltap.py"),
        "--mode", "reverse:http://127.0.0.1:9", "--listen-host", "127.0.0.1", "-p", str(port),
        "--set", "connection_strategy=lazy", "--set", f"modeltap_upstream={upstream_url}",
        "--set", f"modeltap_out={out}",
    ]  # fmt: skip
    for s in sets:
        args += ["--set", s]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_mitmdump_takes_the_upstream_timeout(tmp_path: Path) -> None:
    port = free_port()
    with RawUpstream(never_answers) as raw:
        proc = mitmdump_reverse(raw.url, tmp_path, port, "modeltap_upstream_timeout=first-byte=1")
        try:
            wait_listening(proc, port)
            resp = post(f"http://127.0.0.1:{port}/v1/chat/completions", CHAT, timeout=30)
            assert resp.status_code == 504
        finally:
            proc.terminate()
            proc.wait(10)
    (error,) = [e for e in read_jsonl(tmp_path / "events.jsonl") if e["kind"] == "error"]
    assert error["error"] == "upstream_timeout"


def test_mitmdump_refuses_a_limit_beyond_its_watchdog(tmp_path: Path) -> None:
    """mitmproxy's tcp_timeout (600 s) would close a client that waits longer,
    and the failure would read as the client's: refused, with the fix."""
    proc = mitmdump_reverse(
        "http://127.0.0.1:9", tmp_path, free_port(), "modeltap_upstream_timeout=first-byte=900"
    )
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert b"tcp_timeout (600 s) must be longer than the longest modeltap timeout (900 s)" in out
    assert b"set tcp_timeout=960" in out


@pytest.mark.parametrize("after_created", [False, True], ids=["no-first-byte", "idle"])
def test_websocket_response_that_stalls(
    start_proxy: Callable[..., Running], after_created: bool
) -> None:
    """A response.create the upstream never answers, or answers with
    response.created and then nothing: upstream_timeout, not a 600 s hang."""
    with RawUpstream(ws_goes_silent(after_created=after_created)) as raw:
        running = start(start_proxy, raw.url)
        url = running.base("raw").replace("http://", "ws://") + "/v1/responses"
        with connect(url, open_timeout=30, close_timeout=5) as ws:
            ws.send(
                orjson.dumps({"type": "response.create", "model": "gpt-5", "input": "x"}).decode()
            )
            if after_created:
                assert orjson.loads(ws.recv(timeout=30))["type"] == "response.created"
            with pytest.raises(ConnectionClosed):  # closed by modeltap, not left waiting
                ws.recv(timeout=30)
        (record,) = running.audit()
        error = one_error(running)
        assert (error["seq"], error["error"], error["transport"]) == (
            record["seq"], "upstream_timeout", "websocket"
        )  # fmt: skip
        assert ("idle" if after_created else "first-byte") in error["message"]
        event = response_event(running, record["seq"])
        assert event["evidence_complete"] is False
        assert event["response_id"] == ("resp_ab" if after_created else None)
        (close,) = wait_until(lambda: running.events("ws_close"))
        assert close["code"] != 1000
        still_serving(running)
