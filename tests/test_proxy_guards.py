"""Guards and run status end to end: --max-tool-calls, sessions.jsonl, modeltap check."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx
import openai
import orjson
import pytest

from modeltap.app import control
from modeltap.core.sessions import SessionTracker
from modeltap.evidence.records import NO_REQUESTS_MESSAGE, to_json_line
from modeltap.report import check
from tests.conftest import Running, read_jsonl
from tests.upstream import (
    Reply,
    chat_chunk,
    chat_text_json,
    chat_tool_json,
    ws_completed,
    ws_lookup_call,
)


def tool_call_reply(n: int) -> Reply:
    """A chat completion asking for one `lookup` call (call id `call_n`)."""
    return chat_tool_json(
        "gpt-5",
        arguments=f'{{"n":{n}}}',
        call_id=f"call_{n}",
        response_id=f"chatcmpl-{n}",
        usage={"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    )


TOOLS: Any = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]


def tool_loop(running: Running, rounds: int, session: str) -> tuple[int, Exception | None]:
    """Run an agent loop answering every tool call; return (requests sent, error)."""
    for n in range(1, rounds + 1):
        running.upstream.replies.append(tool_call_reply(n))
    running.upstream.replies.append(chat_text_json("gpt-5", "done"))
    client = openai.OpenAI(base_url=running.base() + "/v1", api_key="k", max_retries=0)
    messages: Any = [{"role": "user", "content": "go"}]
    sent = 0
    while True:
        try:
            sent += 1
            out = client.chat.completions.create(
                model="gpt-5",
                messages=messages,
                tools=TOOLS,
                extra_headers={"x-modeltap-session": session},
            )
        except openai.BadRequestError as e:
            return sent, e
        message = out.choices[0].message
        if not message.tool_calls:
            return sent, None
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "42"})


def end_session(running: Running, session: str) -> dict[str, Any]:
    """End a session through the control API, as `modeltap session end` does."""
    (ended,) = control.end_session(running.out, session)
    assert ended.now
    status: dict[str, Any] = orjson.loads(to_json_line(ended.status))
    return status


def sessions(running: Running) -> dict[str, dict[str, Any]]:
    return {s["session_id"]: s for s in read_jsonl(running.out / "sessions.jsonl")}


def test_tool_budget_refuses_third_round(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy(max_tool_calls=2)
    sent, error = tool_loop(running, rounds=5, session="agent-1")
    assert sent == 4  # turns 1-3 forwarded, the third tool round (turn 4) refused
    assert isinstance(error, openai.BadRequestError)
    assert "rule tool_budget_exceeded" in error.message
    assert len(running.upstream.received) == 3
    status = end_session(running, "agent-1")
    assert status["stop_reason"] == "tool_budget_exceeded"
    assert status["tool_calls_admitted"] == 2
    assert status["requests_audited"] == 3
    assert status["refusals"] == 1
    assert sessions(running)["agent-1"] == status


def test_tool_loop_within_budget_completes(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy(max_tool_calls=2)
    sent, error = tool_loop(running, rounds=2, session="agent-2")
    assert (sent, error) == (3, None)
    status = end_session(running, "agent-2")
    assert status["stop_reason"] == "completed"
    assert status["tool_calls_admitted"] == 2
    assert status["evidence_complete"] is True
    assert status["capture_errors"] == []
    assert check.main([str(running.out)]) == 0


def test_refused_request_reads_request_audit_error(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy()
    client = openai.OpenAI(base_url=running.base() + "/v1", api_key="k", max_retries=0)
    client.chat.completions.create(
        model="gpt-5", messages=[], extra_headers={"x-modeltap-session": "s"}
    )
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="", messages=[], extra_headers={"x-modeltap-session": "s"}
        )
    status = end_session(running, "s")
    assert status["stop_reason"] == "request_audit_error"
    assert status["refusals"] == 1


def test_cut_stream_reads_evidence_incomplete(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy()
    running.upstream.replies.append(
        Reply(
            sse=[(None, chat_chunk("a", model="m")), (None, chat_chunk("b", model="m"))],
            cut_after=1,
        )
    )
    client = openai.OpenAI(base_url=running.base() + "/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.APIError):
        list(
            client.chat.completions.create(
                model="m", messages=[], stream=True, extra_headers={"x-modeltap-session": "cut"}
            )
        )
    running.proxy.stop()  # ends every open session
    status = sessions(running)["cut"]
    assert status["evidence_complete"] is False
    assert status["stop_reason"] == "upstream_error"
    assert any("[DONE]" in e for e in status["capture_errors"]), status["capture_errors"]


def test_session_without_model_requests_is_flagged(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy()
    httpx.get(running.base() + "/v1/models", headers={"x-modeltap-session": "idle"})
    # A session no traffic carried, ended by the harness: the agent bypassed the
    # proxy. Its line is written, and says so (SPEC 6, "Run status and guards").
    (ended,) = control.end_session(running.out, "never-seen")
    assert ended.now and ended.status.message == NO_REQUESTS_MESSAGE
    assert (ended.status.requests_audited, ended.status.evidence_complete) == (0, False)
    running.proxy.stop()
    never = sessions(running)["never-seen"]
    assert never["message"] == NO_REQUESTS_MESSAGE and never["requests_audited"] == 0
    idle = sessions(running)["idle"]
    assert idle["message"] == NO_REQUESTS_MESSAGE
    assert idle["requests_audited"] == 0


def test_websocket_budget_and_session_end(start_proxy: Callable[..., Running]) -> None:
    from websockets.sync.client import connect

    def script(message: dict[str, Any], n: int) -> list[dict[str, Any]]:
        call = ws_lookup_call(n)
        return [
            {"type": "response.output_item.done", "output_index": 0, "item": call},
            ws_completed(n, [call]),
        ]

    running = start_proxy(max_tool_calls=2)
    running.upstream.ws_script = script
    url = running.base().replace("http://", "ws://") + "/v1/responses"
    errors = []
    with connect(url, additional_headers={"x-client-request-id": "ws-conn-1"}) as ws:
        previous = None
        for n in range(1, 5):
            msg: dict[str, Any] = {
                "type": "response.create",
                "model": "gpt-5",
                "instructions": "i",
                "tools": [],
                "input": [],
            }
            if previous:
                msg["previous_response_id"] = previous
                msg["input"] = [
                    {"type": "function_call_output", "call_id": f"call_{n - 1}", "output": "42"}
                ]
            ws.send(orjson.dumps(msg).decode())
            event = orjson.loads(ws.recv(timeout=10))
            if event["type"] == "error":
                errors.append(event["error"]["message"])
                break
            while event["type"] != "response.completed":
                event = orjson.loads(ws.recv(timeout=10))
            previous = event["response"]["id"]
    assert len(errors) == 1 and "tool_budget_exceeded" in errors[0]
    running.proxy.stop()
    status = sessions(running)["ws-conn-1"]  # the connection was the session
    assert status["stop_reason"] == "tool_budget_exceeded"
    assert status["tool_calls_admitted"] == 2


def test_check_exit_codes_and_reasons(
    start_proxy: Callable[..., Running], capsys: pytest.CaptureFixture[str]
) -> None:
    running = start_proxy()
    client = openai.OpenAI(base_url=running.base() + "/v1", api_key="k", max_retries=0)
    client.chat.completions.create(
        model="gpt-5", messages=[], extra_headers={"x-modeltap-session": "good"}
    )
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="", messages=[], extra_headers={"x-modeltap-session": "bad"}
        )
    running.proxy.stop()
    out = str(running.out)
    assert check.main([out, "--session", "good"]) == 0
    assert check.main([out, "--session", "bad"]) == 1
    text = capsys.readouterr().out
    assert "FAIL session bad" in text
    assert "stop_reason is request_audit_error" in text
    assert check.main([out]) == 1
    assert check.main([str(Path(out) / "missing")]) == 2


def test_tracker_counts_unique_calls_across_resent_history() -> None:
    """Chat agents resend the whole history: a result counts once."""
    from modeltap.evidence.records import ToolCall, ToolResult
    from tests.test_capture import audit, response

    def results(*ids: str) -> tuple[ToolResult, ...]:
        return tuple(ToolResult(i, 2) for i in ids)

    t = SessionTracker("run", "s", max_tool_calls=2)
    t.audited(audit(1, 0.0))
    t.responded(response(1, 0.5, tool_calls=(ToolCall("a", "f", "{}"),)))
    t.admit(results("a"))
    t.audited(audit(2, 1.0, tool_results=results("a")))
    t.responded(response(2, 1.5, tool_calls=(ToolCall("b", "f", "{}"),)))
    t.admit(results("a", "b"))
    t.audited(audit(3, 2.0, tool_results=results("a", "b")))
    assert t.tool_calls_admitted == 2
    assert t.budget_spent
    with pytest.raises(Exception, match="tool_budget_exceeded"):
        t.admit(results("a", "b"))


def test_run_session_with_only_pass_through_traffic_is_not_reported(
    start_proxy: Callable[..., Running],
) -> None:
    """A WebSocket agent whose SDK also lists models: check passes, no noise line."""
    from websockets.sync.client import connect

    running = start_proxy()
    httpx.get(running.base() + "/v1/models")  # no session header: the run's session
    url = running.base().replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers={"x-client-request-id": "ws-7"}) as ws:
        ws.send(
            orjson.dumps(
                {
                    "type": "response.create",
                    "model": "gpt-5",
                    "input": [],
                    "instructions": "i",
                    "tools": [],
                }
            ).decode()
        )
        while orjson.loads(ws.recv(timeout=10))["type"] != "response.completed":
            pass
    running.proxy.stop()
    assert list(sessions(running)) == ["ws-7"]
    assert check.main([str(running.out)]) == 0


def test_check_fails_when_only_pass_through_traffic_was_seen(
    start_proxy: Callable[..., Running], capsys: pytest.CaptureFixture[str]
) -> None:
    running = start_proxy()
    httpx.get(running.base() + "/v1/models")
    running.proxy.stop()
    assert check.main([str(running.out)]) == 1
    assert "no model traffic" in capsys.readouterr().out
