"""Shutdown tells the truth: Ctrl-C on `modeltap run` in the middle of exchanges.

In-flight exchanges end first (an `error` event `proxy_stopped`, then their
`response` event with `evidence_complete: false`), then the session lines; nothing
is written after them, and no file contradicts another.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from websockets.sync.client import connect

from modeltap.evidence.capture import Capture
from modeltap.evidence.coverage import PROXY_REPORTED
from tests.conftest import read_jsonl
from tests.reliability.faults import figure
from tests.reliability.test_processes import ProxyProcess
from tests.upstream import Reply, Upstream, chat_chunk


def lines_with_order(out: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every line of events.jsonl and sessions.jsonl, ordered by ``ts``.

    ``ts`` has millisecond resolution and the proxy writes the last lines within
    one, so a tie keeps events first: the order that proves the point is the
    session line's content (computed after the response was taken in), checked
    by each test; this only shows that nothing came later.
    """
    found = [("event", e) for e in read_jsonl(out / "events.jsonl")]
    found += [("session", s) for s in read_jsonl(out / "sessions.jsonl")]
    return sorted(found, key=lambda item: item[1]["ts"])


def assert_no_contradiction(out: Path, session_id: str) -> None:
    """Capture, computing coverage from the files, finds every reason the session line
    gives (nothing only the proxy knew), and the counts match: one story."""
    capture = Capture.load(out)
    assert capture.load_errors == ()
    session = capture.sessions[session_id]
    (line,) = session.ends
    assert set(line.capture_errors) <= set(session.capture_errors)
    assert not any(e.startswith(PROXY_REPORTED) for e in session.capture_errors)
    assert session.coverage.data.status == "complete", session.coverage.data.reasons
    assert session.evidence_complete is line.evidence_complete is False


def test_ctrl_c_mid_stream_ends_the_exchange_before_the_session(
    upstream: Upstream, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    gate = threading.Event()
    upstream.replies.append(
        Reply(
            sse=[(None, chat_chunk("a")), (None, chat_chunk("b", "stop")), (None, "[DONE]")],
            gate_after={0: gate},
        )
    )
    p = ProxyProcess("--out", str(out), "--route", f"stub={upstream.url}", "-q")
    got: list[str] = []
    failure: list[BaseException] = []
    first_chunk = threading.Event()

    def agent() -> None:
        client = openai.OpenAI(base_url=f"{p.url}/stub/v1", api_key="k", max_retries=0)
        try:
            stream = client.chat.completions.create(
                model="gpt-5",
                messages=[{"role": "user", "content": "x"}],
                stream=True,
                extra_headers={"x-modeltap-session": "cut-by-stop"},
            )
            for part in stream:
                got.append(part.choices[0].delta.content or "")
                first_chunk.set()
        except Exception as e:
            failure.append(e)
        finally:
            first_chunk.set()

    thread = threading.Thread(target=agent, daemon=True)
    thread.start()
    try:
        assert first_chunk.wait(20), "the first chunk never arrived"
        started = time.perf_counter()
        assert p.stop(signal.SIGINT) == 0
        stop_ms = (time.perf_counter() - started) * 1000
    finally:
        gate.set()
        p.kill()
        thread.join(20)
    assert got == ["a"]  # the agent had the first chunk when the proxy stopped
    assert failure, "the agent's stream should have been cut, not completed"

    (record,) = read_jsonl(out / "audit.jsonl")
    ordered = lines_with_order(out)
    kinds = [(src, line.get("kind", "session")) for src, line in ordered]
    assert kinds == [("event", "error"), ("event", "response"), ("session", "session")]
    error, response, session = (line for _, line in ordered)
    assert (error["error"], error["seq"]) == ("proxy_stopped", record["seq"])
    assert response["seq"] == record["seq"]
    assert response["evidence_complete"] is False
    assert any(e.startswith("proxy_stopped:") for e in response["capture_errors"])
    assert session["session_id"] == "cut-by-stop"
    assert session["stop_reason"] == "proxy_stopped"  # not "completed", not the client
    assert session["evidence_complete"] is False
    assert not any("no response" in e for e in session["capture_errors"])
    assert_no_contradiction(out, "cut-by-stop")
    # Nothing was written after the session lines, even once the stream could go on.
    time.sleep(0.2)
    assert [src for src, _ in lines_with_order(out)] == ["event", "event", "session"]
    assert not list(out.glob("control-*.json"))  # the control file went with the proxy
    figure("ctrl_c_mid_stream", stop_ms=round(stop_ms), lines_after_session_lines=0)


def test_ctrl_c_with_a_websocket_response_pending(upstream: Upstream, tmp_path: Path) -> None:
    out = tmp_path / "out"

    def stalls(message: dict[str, Any], n: int) -> list[dict[str, Any]]:
        created = {"id": f"resp_{n}", "object": "response", "status": "in_progress"}
        return [{"type": "response.created", "response": created | {"model": "gpt-5"}}]

    upstream.ws_script = stalls
    p = ProxyProcess("--out", str(out), "--route", f"stub={upstream.url}", "-q")
    url = p.url.replace("http://", "ws://") + "/stub/v1/responses"
    try:
        with connect(url, additional_headers={"x-client-request-id": "ws-stop"}) as ws:
            create = {"type": "response.create", "model": "gpt-5", "instructions": "i"}
            ws.send(orjson.dumps(create | {"tools": [], "input": []}).decode())
            assert orjson.loads(ws.recv(timeout=10))["type"] == "response.created"
            started = time.perf_counter()
            assert p.stop(signal.SIGINT) == 0
            stop_ms = (time.perf_counter() - started) * 1000
            with pytest.raises(Exception):  # noqa: B017 - any way the socket dies is fine
                ws.recv(timeout=10)
    finally:
        p.kill()
    ordered = lines_with_order(out)
    kinds = [line.get("kind", "session") for _, line in ordered]
    assert kinds == ["ws_open", "error", "response", "ws_close", "session"]
    error, response, close, session = (line for _, line in ordered[1:])
    assert (error["error"], error["transport"]) == ("proxy_stopped", "websocket")
    assert response["evidence_complete"] is False and response["response_id"] == "resp_1"
    assert close["closed_by"] == "proxy"
    assert (session["stop_reason"], session["evidence_complete"]) == ("proxy_stopped", False)
    assert not any("no response" in e for e in session["capture_errors"])
    assert_no_contradiction(out, "ws-stop")
    figure("ctrl_c_ws_pending", stop_ms=round(stop_ms), lines_after_session_lines=0)
