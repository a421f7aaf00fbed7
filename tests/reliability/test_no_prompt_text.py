"""No prompt text, ever (SPEC 8): neither a client nor an upstream can make
modeltap copy wire text at length into its files or its stderr lines.

A real ``modeltap run`` process (per-exchange stderr lines on), the real
``openai`` and ``anthropic`` SDKs, the stub upstream and a raw-socket upstream.
Every request carries a prompt marker; then every written place is scanned
for it:

- an Anthropic ``thinking`` with an extra 5 MB text field (kept by name only);
- request identifiers made of prompt text (model, effort, tool name, hosted
  tool type, tool result id, the request id and session headers): refused by
  name, ``value_too_long``;
- an upstream answering with a malformed status line that echoes the request
  (mitmproxy's error message quotes it): the error event says what broke in
  modeltap's own words;
- an upstream echoing the prompt into the response's model, id, finish reason
  and tool call name: not kept, a capture error says so.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx2 as httpx
import openai
import orjson
import pytest

from tests.reliability.faults import RawUpstream, figure, read_request
from tests.reliability.test_processes import ProxyProcess
from tests.upstream import Reply, Upstream

MARKER = "PROMPT-TEXT-d41d8cd9"
PROMPT = f"{MARKER} Summarise the quarterly report for the board. " * 20  # ~1.2 KB
HUGE = MARKER + "x" * (5 * 1024 * 1024)
MESSAGES: list[Any] = [{"role": "user", "content": PROMPT}]


def echo_in_status_line(conn: socket.socket) -> None:
    """Answer with a status line that is not HTTP and quotes the request body."""
    request = read_request(conn)
    body = request.partition(b"\r\n\r\n")[2]
    conn.sendall(b"HTTP/1.1 2OO " + body[:4000] + b"\r\nContent-Length: 0\r\n\r\n")


def test_no_prompt_text_in_files_or_stderr(tmp_path: Path, upstream: Upstream) -> None:
    out = tmp_path / "out"
    started = time.perf_counter()
    with RawUpstream(echo_in_status_line) as echo:
        p = ProxyProcess(
            "--out", str(out), "--route", f"stub={upstream.url}", "--route", f"echo={echo.url}"
        )
        try:
            counts = exercise(p, upstream)
            assert p.stop() == 0
        finally:
            p.kill()
        assert echo.connections >= 1
    # The marker went out for real: the upstream received it.
    assert any(MARKER.encode() in r.raw for r in upstream.received)
    places = {f.name: f.read_bytes() for f in out.iterdir()}
    places["stderr"] = p.stderr
    assert {"audit.jsonl", "events.jsonl", "sessions.jsonl"} <= set(places)
    leaks = {name: data.count(MARKER.encode()) for name, data in places.items()}
    assert {name: n for name, n in leaks.items() if n} == {}
    biggest = max(
        len(line) for name in ("audit.jsonl", "events.jsonl") for line in places[name].splitlines()
    )
    assert biggest < 8 * 1024

    audit = [orjson.loads(line) for line in places["audit.jsonl"].splitlines()]
    assert {"type": "enabled", "budget_tokens": 1024, "notes": "REDACTED"} in [
        r["thinking"] for r in audit
    ]
    events = [orjson.loads(line) for line in places["events.jsonl"].splitlines()]
    rules = [e["rule"] for e in events if e["kind"] == "rejected"]
    assert rules == ["value_too_long"] * counts["refused"]
    errors = [e for e in events if e["kind"] == "error"]
    assert errors and all(e["message"].startswith("the upstream") for e in errors)
    echoed = [
        e
        for e in events
        if e["kind"] == "response" and any("not recorded" in c for c in e["capture_errors"])
    ]
    assert [(e["response_id"], e["model"], e["finish_reasons"]) for e in echoed] == [
        (None, None, [])
    ]
    assert echoed[0]["tool_calls"] == [
        {"call_id": None, "name": None, "arguments": "{}", "namespace": None}
    ]
    figure(
        "no_prompt_text",
        requests=counts["sent"],
        refused=counts["refused"],
        biggest_line=biggest,
        leaks=0,
        seconds=round(time.perf_counter() - started, 1),
    )


def exercise(p: ProxyProcess, upstream: Upstream) -> dict[str, int]:
    sent = refused = 0
    claude = anthropic.Anthropic(base_url=p.url + "/stub", api_key="k", max_retries=0)
    gpt = openai.OpenAI(base_url=p.url + "/stub/v1", api_key="k", max_retries=0)

    # 1. An extra field of thinking, 5 MB of text: kept by name only.
    claude.messages.create(
        model="claude-x",
        max_tokens=2048,
        messages=MESSAGES,
        thinking={"type": "enabled", "budget_tokens": 1024, "notes": HUGE},  # type: ignore[typeddict-unknown-key]
    )
    sent += 1

    # 2. Request identifiers made of prompt text: refused by name.
    long = PROMPT[:300]
    bad_chat: list[dict[str, Any]] = [
        {"model": long},
        {"model": "gpt-5", "reasoning_effort": long},
        {"model": "gpt-5", "tools": [{"type": "function", "function": {"name": long}}]},
        {"model": "gpt-5", "tools": [{"type": long}]},
        {
            "model": "gpt-5",
            "messages": [*MESSAGES, {"role": "tool", "tool_call_id": long, "content": "ok"}],
        },
    ]
    for extra in bad_chat:
        with pytest.raises(openai.BadRequestError) as caught:
            gpt.chat.completions.create(**{"messages": MESSAGES, **extra})
        assert "value_too_long" in str(caught.value)
        assert MARKER not in str(caught.value)
        sent, refused = sent + 1, refused + 1
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(
            model="claude-x",
            max_tokens=5,
            messages=MESSAGES,
            thinking={"type": long},  # type: ignore[typeddict-item]
        )
    sent, refused = sent + 1, refused + 1

    # Ids go into every line: headers made of prompt text are refused too.
    with httpx.Client(timeout=10) as client:
        for header in ("x-client-request-id", "x-request-id", "x-modeltap-session"):
            resp = client.post(
                p.url + "/stub/v1/chat/completions",
                json={"model": "gpt-5", "messages": MESSAGES},
                headers={header: PROMPT.strip().replace(" ", "-")[:2000]},
            )
            assert resp.status_code == 400 and "value_too_long" in resp.text
            sent, refused = sent + 1, refused + 1

    # 3. A malformed status line that quotes the request.
    echo = openai.OpenAI(base_url=p.url + "/echo/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.APIStatusError):
        echo.chat.completions.create(model="gpt-5", messages=MESSAGES)
    sent += 1

    # 4. A response whose identifiers echo the prompt: not kept.
    upstream.replies.append(
        Reply(
            json={
                "id": long,
                "object": "chat.completion",
                "model": long,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": long,
                        "message": {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {
                                    "id": long,
                                    "type": "function",
                                    "function": {"name": long, "arguments": "{}"},
                                }
                            ],
                        },
                    }
                ],
            }
        )
    )
    with httpx.Client(timeout=10) as client:
        resp = client.post(
            p.url + "/stub/v1/chat/completions", json={"model": "gpt-5", "messages": MESSAGES}
        )
    assert resp.status_code == 200 and MARKER in resp.text  # the agent gets it all
    sent += 1
    return {"sent": sent, "refused": refused}
