"""Upstream faults end to end: the client gets a clear answer, the events say what
broke, and the proxy serves the next request as if nothing happened."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2 as httpx
import orjson
import pytest
from websockets.sync.client import connect

from tests.conftest import Running
from tests.reliability.faults import (
    RawUpstream,
    closed_port,
    reset_before_answer,
    reset_mid_json,
    slow_first_byte,
    wait_until,
    ws_abort_after_created,
)
from tests.upstream import Reply, chat_text_sse

CHAT = {"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]}
STREAM = {**CHAT, "stream": True}


def post(url: str, body: dict[str, Any], timeout: float = 10.0) -> httpx.Response:
    return httpx.post(url, content=orjson.dumps(body), timeout=timeout,
                      headers={"content-type": "application/json"})  # fmt: skip


def response_event(running: Running, seq: int) -> dict[str, Any]:
    found = wait_until(lambda: [e for e in running.events("response") if e["seq"] == seq])
    assert len(found) == 1, running.events()
    return found[0]


def still_serving(running: Running) -> None:
    """A normal request right after the fault: audited, forwarded, answered."""
    before = len(running.audit())
    resp = post(running.base() + "/v1/chat/completions", CHAT)
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"]
    assert len(running.audit()) == before + 1
    event = response_event(running, running.audit()[-1]["seq"])
    assert event["evidence_complete"] is True


def test_refused_connection(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy(routes=[f"dead=http://127.0.0.1:{closed_port()}"])
    resp = post(running.base("dead") + "/v1/chat/completions", CHAT)
    assert resp.status_code == 502
    assert resp.json()["error"]["code"] == "modeltap_upstream_error"
    (record,) = running.audit()
    (error,) = wait_until(lambda: running.events("error"))
    assert (error["seq"], error["error"]) == (record["seq"], "upstream_unreachable")
    assert response_event(running, record["seq"])["evidence_complete"] is False
    still_serving(running)


@pytest.mark.parametrize(
    "script", [reset_mid_json, reset_before_answer], ids=["mid-body", "before"]
)
def test_reset_mid_json_body(start_proxy: Callable[..., Running], script: Any) -> None:
    with RawUpstream(script) as raw:
        running = start_proxy(routes=[f"raw={raw.url}"])
        resp = post(running.base("raw") + "/v1/chat/completions", CHAT)
        assert resp.status_code == 502  # a clear failure, not a truncated 200
        (record,) = running.audit()
        (error,) = wait_until(lambda: running.events("error"))
        assert error["seq"] == record["seq"]
        assert error["error"] in ("upstream_reset", "upstream_unreachable")
        event = response_event(running, record["seq"])
        assert event["evidence_complete"] is False and event["capture_errors"]
        still_serving(running)


def test_reset_mid_sse_stream(running: Running) -> None:
    reply = chat_text_sse("gpt-5")
    running.upstream.replies.append(Reply(sse=reply.sse, cut_after=1))
    with httpx.stream("POST", running.base() + "/v1/chat/completions", json=STREAM,
                      timeout=10) as resp:  # fmt: skip
        assert resp.status_code == 200
        with pytest.raises(httpx.HTTPError):  # the client sees the cut, not a clean end
            b"".join(resp.iter_raw())
    event = response_event(running, 1)
    assert event["evidence_complete"] is False
    assert "stream ended before data: [DONE]" in event["capture_errors"]
    assert wait_until(lambda: running.events("error"))[0]["error"] == "upstream_reset"
    still_serving(running)


@pytest.mark.parametrize("status", [500, 502, 503, 529])
def test_5xx_is_passed_through_and_recorded(running: Running, status: int) -> None:
    body = {"error": {"message": "overloaded", "type": "server_error"}}
    running.upstream.replies.append(Reply(status=status, json=body))
    resp = post(running.base() + "/v1/chat/completions", CHAT)
    assert resp.status_code == status and resp.json() == body  # the provider's own answer
    event = response_event(running, 1)
    assert event["status"] == status
    assert running.events("error") == []
    still_serving(running)


def test_slow_first_byte_does_not_block_others(start_proxy: Callable[..., Running]) -> None:
    import threading

    with RawUpstream(slow_first_byte(2.0)) as raw:
        running = start_proxy(routes=[f"raw={raw.url}"])
        slow: list[httpx.Response] = []
        t = threading.Thread(
            target=lambda: slow.append(post(running.base("raw") + "/v1/chat/completions", CHAT))
        )
        t.start()
        wait_until(lambda: raw.connections)
        still_serving(running)  # answered while the slow one waits
        assert not slow
        t.join(10)
    assert (
        slow[0].status_code == 200 and slow[0].json()["choices"][0]["message"]["content"] == "late"
    )
    slow_seq = next(r["seq"] for r in running.audit() if r["route"] == "raw")
    event = response_event(running, slow_seq)
    assert event["evidence_complete"] is True and event["ttfb_ms"] >= 1900


@pytest.mark.parametrize(
    "raw",
    [
        b"data: {not json\n\ndata: [DONE]\n\n",
        b"event: x\ndata: \xff\xfe\n\n",
        b": only a comment\n\n",
        b'data: {"choices": 5}\n\n',
        b"data: [DONE]",  # no final blank line
        b"\x00\x01\x02garbage",
    ],
)
def test_malformed_sse(running: Running, raw: bytes) -> None:
    running.upstream.replies.append(Reply(raw=raw, headers={"Content-Type": "text/event-stream"}))
    resp = post(running.base() + "/v1/chat/completions", STREAM)
    assert resp.status_code == 200 and resp.content == raw  # passed through unchanged
    event = response_event(running, 1)
    assert event["evidence_complete"] is False and event["capture_errors"]
    still_serving(running)


@pytest.mark.parametrize(
    "raw", [b"{not json", b"", b"\xff\xfe\x00", b"[1, 2", b"null", b'"\\ud800"', b"[" * 5000]
)
def test_invalid_json_response(running: Running, raw: bytes) -> None:
    running.upstream.replies.append(Reply(raw=raw, headers={"Content-Type": "application/json"}))
    resp = post(running.base() + "/v1/chat/completions", CHAT)
    assert resp.status_code == 200 and resp.content == raw
    event = response_event(running, 1)
    assert event["evidence_complete"] is False and event["capture_errors"]
    still_serving(running)


def test_websocket_upstream_closed_abnormally(start_proxy: Callable[..., Running]) -> None:
    with RawUpstream(ws_abort_after_created) as raw:
        running = start_proxy(routes=[f"raw={raw.url}"])
        url = running.base("raw").replace("http://", "ws://") + "/v1/responses"
        with connect(url, open_timeout=10, close_timeout=2) as ws:
            ws.send(
                orjson.dumps({"type": "response.create", "model": "gpt-5", "input": "x"}).decode()
            )
            first = orjson.loads(ws.recv(timeout=10))
            assert first["type"] == "response.created"
            with pytest.raises(Exception) as exc:  # the client learns the socket died
                ws.recv(timeout=10)
            assert "Timeout" not in type(exc.value).__name__
        (record,) = running.audit()
        event = response_event(running, record["seq"])
        assert event["evidence_complete"] is False
        assert event["response_id"] == "resp_ab"
        assert any("closed" in e for e in event["capture_errors"])
        (close,) = wait_until(lambda: running.events("ws_close"))
        assert close["code"] != 1000
        still_serving(running)
