"""Record and replay end to end: real SDKs -> modeltap --record -> the stub;
then the stub is stopped and modeltap replay answers the same SDK calls.

Each round trip asserts that the SDK hands the agent identical objects
(``model_dump()`` of each response or of each stream event) from the
recording as it did from the stub, and that the replayed run is audited
with the same key fields as the recorded one.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx2 as httpx
import openai
import orjson
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from modeltap.addons.replayer import Replayer as Replay
from modeltap.app.cli import demo_main
from modeltap.app.proxy import Proxy, ProxyConfig, replay_proxy
from tests.conftest import read_jsonl
from tests.upstream import (
    TOOL_ARGUMENTS,
    Reply,
    Upstream,
    anthropic_text_json,
    anthropic_text_sse,
    anthropic_tool_json,
    anthropic_tool_sse,
    bedrock_event_stream,
    bedrock_invoke_json,
    chat_text_json,
    chat_text_sse,
    chat_tool_json,
    chat_tool_sse,
    gemini_function_call_chunks,
    gemini_reply,
    gemini_text_chunks,
    responses_text_json,
    responses_text_sse,
    responses_tool_json,
    responses_tool_sse,
)

# The openai SDK's own WebSocket wrapper trips this inside `with connect()`.
pytestmark = pytest.mark.filterwarnings(
    "ignore:connect\\(\\) must be used as a context manager:DeprecationWarning"
)

KEY = "sk-test-PLANTED-SECRET-0123456789"
SYSTEM = "Be brief."
SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}

Turns = Callable[[str], list[Any]]


def oai(base: str, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0, timeout=10, **kw)


def anth(base: str, **kw: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0, timeout=10, **kw)


def dump(result: Any, stream: bool) -> Any:
    return [event.model_dump() for event in result] if stream else result.model_dump()


# ---------------------------------------------------------------- the agents' turns
# Turn 1 advertises tools and gets a tool call; turn 2 sends the result back.


def chat_turns(
    stream: bool, tools: tuple[str, ...] = ("lookup",), system: str = SYSTEM, n: int = 2, **kw: Any
) -> Turns:
    def run(base: str) -> list[Any]:
        c = oai(base, **kw)
        fns: Any = [
            {"type": "function", "function": {"name": t, "parameters": SCHEMA}} for t in tools
        ]
        messages: list[Any] = [
            {"role": "system", "content": system},
            {"role": "user", "content": "weather?"},
        ]
        out = []
        for i in range(n):
            r = c.chat.completions.create(
                model="gpt-5", messages=messages, tools=fns, stream=stream
            )
            out.append(dump(r, stream))
            messages = [
                *messages,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": TOOL_ARGUMENTS},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": f"call_{i}", "content": "sunny"},
            ]
        return out

    return run


def responses_turns(stream: bool) -> Turns:
    def run(base: str) -> list[Any]:
        c = oai(base)
        tools: Any = [{"type": "function", "name": "lookup", "parameters": SCHEMA}]
        r1 = c.responses.create(
            model="gpt-5", instructions=SYSTEM, input="weather?", tools=tools, stream=stream
        )
        history: Any = [
            {"role": "user", "content": "weather?"},
            {
                "type": "function_call",
                "call_id": "call_lookup3",
                "name": "lookup",
                "arguments": TOOL_ARGUMENTS,
            },
            {"type": "function_call_output", "call_id": "call_lookup3", "output": "sunny"},
        ]
        r2 = c.responses.create(
            model="gpt-5", instructions=SYSTEM, input=history, tools=tools, stream=stream
        )
        return [dump(r1, stream), dump(r2, stream)]

    return run


def anthropic_turns(stream: bool, system: str = SYSTEM) -> Turns:
    def run(base: str) -> list[Any]:
        c = anth(base)
        tools: Any = [{"name": "lookup", "input_schema": SCHEMA}]
        messages: Any = [{"role": "user", "content": "weather?"}]
        r1 = c.messages.create(
            model="claude-x", max_tokens=64, system=system, messages=messages, tools=tools,
            stream=stream,
        )  # fmt: skip
        messages = [
            *messages,
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_lookup1", "name": "lookup", "input": {}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_lookup1", "content": "sunny"}
                ],
            },
        ]
        r2 = c.messages.create(
            model="claude-x", max_tokens=64, system=system, messages=messages, tools=tools,
            stream=stream,
        )  # fmt: skip
        return [dump(r1, stream), dump(r2, stream)]

    return run


def bedrock_turns(stream: bool) -> Turns:
    """AnthropicBedrock with a Bedrock API key: InvokeModel, and its binary event stream."""

    def run(base: str) -> list[Any]:
        c = anthropic.AnthropicBedrock(
            api_key=KEY, aws_region="us-east-1", base_url=base, max_retries=0, timeout=10
        )
        tools: Any = [{"name": "lookup", "input_schema": SCHEMA}]
        model = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
        out = []
        for question in ("weather?", "and tomorrow?"):
            r = c.messages.create(
                model=model, max_tokens=64, system=SYSTEM, tools=tools, stream=stream,
                messages=[{"role": "user", "content": question}],
            )  # fmt: skip
            out.append(dump(r, stream))
        return out

    return run


def ws_create(i: int, tools: tuple[str, ...] = ("lookup",)) -> dict[str, Any]:
    message: dict[str, Any] = {
        "type": "response.create",
        "model": "gpt-5",
        "instructions": SYSTEM,
        "tools": [{"type": "function", "name": t, "parameters": SCHEMA} for t in tools],
        "input": [{"role": "user", "content": f"question {i}"}],
    }
    if i > 1:
        message["previous_response_id"] = f"resp_ws{i - 1}"
    return message


def ws_turns(n: int = 2, tools2: tuple[str, ...] = ("lookup",)) -> Turns:
    def run(base: str) -> list[Any]:
        out = []
        with oai(base).responses.connect() as conn:
            for i in range(1, n + 1):
                conn.send(ws_create(i, tools2 if i == 2 else ("lookup",)))  # type: ignore[arg-type]
                events = []
                for event in conn:
                    events.append(event.model_dump())
                    if event.type in ("response.completed", "error"):
                        break
                out.append(events)
        return out

    return run


# ---------------------------------------------------------------- record, then replay


@dataclass
class Recorded:
    dir: Path
    out: Path
    results: list[Any]


def record(tmp_path: Path, stub: Upstream, turns: Turns, replies: list[Reply]) -> Recorded:
    """Run ``turns`` through modeltap --record against the stub, then stop the stub."""
    stub.replies.extend(replies)
    rec, out = tmp_path / "recording", tmp_path / "out-record"
    cfg = ProxyConfig(
        listen_port=0, out=str(out), routes=[f"stub={stub.url}"], record=str(rec), quiet=True
    )
    with Proxy(cfg) as proxy:
        results = turns(proxy.url + "/stub")
    stub.stop()  # from here on, only the recording can answer
    return Recorded(rec, out, results)


def replay(
    rec: Path, out: Path, turns: Turns, *, fast: bool = True
) -> tuple[list[Any] | BaseException, Replay]:
    proxy, addon = replay_proxy(
        rec, ProxyConfig(listen_port=0, out=str(out), quiet=True), fast=fast
    )
    with proxy:
        try:
            results: list[Any] | BaseException = turns(proxy.url + "/stub")
        except Exception as e:
            results = e
    return results, addon


AUDIT_KEYS = ("model", "tool_names", "instructions_sha256", "image_count", "api", "transport")


def gemini_turns(stream: bool, model: str = "gemini-2.5-flash") -> Turns:
    """Two turns with the google-genai SDK: a call (no id), then its result."""

    def run(base: str) -> list[Any]:
        client = genai.Client(api_key=KEY, http_options=genai_types.HttpOptions(base_url=base))
        config = genai_types.GenerateContentConfig(
            system_instruction=SYSTEM,
            tools=[genai_types.Tool(function_declarations=[{"name": "lookup"}])],
            automatic_function_calling=genai_types.AutomaticFunctionCallingConfig(disable=True),
        )
        history: list[Any] = [genai_types.Content(role="user", parts=[{"text": "weather?"}])]
        out = []
        for _ in range(2):
            if stream:
                chunks = client.models.generate_content_stream(
                    model=model, contents=history, config=config
                )
                out.append(
                    [
                        c.model_dump(mode="json", exclude_none=True, exclude={"sdk_http_response"})
                        for c in chunks
                    ]
                )
            else:
                r = client.models.generate_content(model=model, contents=history, config=config)
                out.append(
                    r.model_dump(mode="json", exclude_none=True, exclude={"sdk_http_response"})
                )
            history = [
                *history,
                genai_types.Content(
                    role="model", parts=[{"function_call": {"name": "lookup", "args": {}}}]
                ),
                genai_types.Content(
                    role="user",
                    parts=[{"function_response": {"name": "lookup", "response": {"r": "sunny"}}}],
                ),
            ]
        return out

    return run


def gemini_array_turns(base: str) -> list[Any]:
    """Two streamed JSON-array answers, read raw (no SDK asks for that form)."""
    url = f"{base}/v1beta/models/gemini-2.5-pro:streamGenerateContent"
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    return [orjson.loads(httpx.post(url, json=body, timeout=10).content) for _ in range(2)]


def gemini_replies(model: str, method: str, alt: str | None) -> list[Reply]:
    call = gemini_function_call_chunks(model, [{"name": "lookup", "args": {}}])
    return [
        gemini_reply(call, method, alt, False),
        gemini_reply(gemini_text_chunks(model), method, alt, False),
    ]


@dataclass
class Case:
    name: str
    turns: Turns
    replies: list[Reply]


CASES = [
    Case("chat-json", chat_turns(False), [chat_tool_json("gpt-5"), chat_text_json("gpt-5")]),
    Case("chat-sse", chat_turns(True), [chat_tool_sse("gpt-5"), chat_text_sse("gpt-5")]),
    Case(
        "responses-json",
        responses_turns(False),
        [responses_tool_json("gpt-5"), responses_text_json("gpt-5")],
    ),
    Case(
        "responses-sse",
        responses_turns(True),
        [responses_tool_sse("gpt-5"), responses_text_sse("gpt-5")],
    ),
    Case(
        "anthropic-json",
        anthropic_turns(False),
        [anthropic_tool_json("claude-x"), anthropic_text_json("claude-x")],
    ),
    Case(
        "anthropic-sse",
        anthropic_turns(True),
        [anthropic_tool_sse("claude-x"), anthropic_text_sse("claude-x")],
    ),
    Case("responses-websocket", ws_turns(), []),
    Case(
        "bedrock-invoke-json",
        bedrock_turns(False),
        [bedrock_invoke_json("claude-x"), bedrock_invoke_json("claude-x")],
    ),
    Case(
        "bedrock-invoke-eventstream",
        bedrock_turns(True),
        [
            bedrock_event_stream(anthropic_tool_sse("claude-x")),
            bedrock_event_stream(anthropic_text_sse("claude-x")),
        ],
    ),
    Case(
        "gemini-json",
        gemini_turns(False),
        gemini_replies("gemini-2.5-flash", "generateContent", None),
    ),
    Case(
        "gemini-sse",
        gemini_turns(True),
        gemini_replies("gemini-2.5-flash", "streamGenerateContent", "sse"),
    ),
    Case(
        "gemini-json-array",
        gemini_array_turns,
        gemini_replies("gemini-2.5-pro", "streamGenerateContent", None),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_round_trip(tmp_path: Path, upstream: Upstream, case: Case) -> None:
    recorded = record(tmp_path, upstream, case.turns, case.replies)
    assert len(recorded.results) == 2
    replayed, addon = replay(recorded.dir, tmp_path / "out-replay", case.turns)
    assert replayed == recorded.results
    assert addon.problems == []
    # The replay was audited like a live run, with the same key fields.
    before, after = (
        read_jsonl(recorded.out / "audit.jsonl"),
        read_jsonl(tmp_path / "out-replay" / "audit.jsonl"),
    )
    assert len(after) == 2
    assert [{k: r[k] for k in AUDIT_KEYS} for r in after] == [
        {k: r[k] for k in AUDIT_KEYS} for r in before
    ]
    responses = read_jsonl(tmp_path / "out-replay" / "events.jsonl")
    assert [e["evidence_complete"] for e in responses if e["kind"] == "response"] == [True, True]


def test_recording_layout(tmp_path: Path, upstream: Upstream) -> None:
    recorded = record(
        tmp_path, upstream, chat_turns(True), [chat_tool_sse("gpt-5"), chat_text_sse("gpt-5")]
    )
    lines = read_jsonl(recorded.dir / "recording.jsonl")
    assert [(x["kind"], x["order"], x["transport"]) for x in lines] == [
        ("http", 1, "http"),
        ("http", 2, "http"),
    ]
    first = lines[0]
    assert first["key"]["tool_names"] == ["lookup"]
    assert first["key"]["instructions_sha256"] == hashlib.sha256(SYSTEM.encode()).hexdigest()
    assert first["key"]["stream"] is True
    assert first["response"]["headers"] == {"content-type": "text/event-stream"}
    chunks = first["response"]["chunks"]
    body = (recorded.dir / "blobs" / first["response"]["body"]).read_bytes()
    assert sum(n for _, n in chunks) == len(body)
    assert body.startswith(b"data: ") and body.rstrip().endswith(b"data: [DONE]")
    request = (recorded.dir / "blobs" / first["request"]["body"]).read_bytes()
    assert (
        hashlib.sha256(request).hexdigest()
        == read_jsonl(recorded.out / "audit.jsonl")[0]["body_sha256"]
    )


# ---------------------------------------------------------------- a changed agent


def test_tool_dropped_on_turn_two(tmp_path: Path, upstream: Upstream) -> None:
    session = {"x-modeltap-session": "s1"}
    recorded = record(
        tmp_path,
        upstream,
        chat_turns(False, tools=("lookup", "search"), default_headers=session),
        [chat_tool_json("gpt-5"), chat_text_json("gpt-5")],
    )
    assert len(recorded.results) == 2

    def changed(base: str) -> list[Any]:
        first = chat_turns(False, tools=("lookup", "search"), n=1, default_headers=session)(base)
        second = chat_turns(False, tools=("search",), n=1, default_headers=session)
        return [*first, *second(base)]

    out = tmp_path / "out-replay"
    result, _ = replay(recorded.dir, out, changed)
    assert isinstance(result, openai.BadRequestError)
    body: Any = result.body
    assert body["code"] == "modeltap_replay_mismatch"
    assert "session s1 turn 2: tool 'lookup' no longer advertised" in body["message"]
    (diff,) = read_jsonl(out / "replay-diff.jsonl")  # one change, one line
    # The second part of this agent starts a new conversation: the history is
    # gone, and the diff says where, by path and size.
    assert diff["message"] == (
        "session s1 turn 2: tool 'lookup' no longer advertised; "
        "messages[2]: removed (158 bytes); messages[3]: removed (57 bytes)"
    )
    assert diff["kind"] == "mismatch" and "content" not in diff
    # The refused turn still has its audit record; modeltap saw the 400.
    assert len(read_jsonl(out / "audit.jsonl")) == 2


def test_gemini_model_changed_in_the_path(tmp_path: Path, upstream: Upstream) -> None:
    recorded = record(
        tmp_path,
        upstream,
        gemini_turns(False),
        gemini_replies("gemini-2.5-flash", "generateContent", None),
    )
    replayed, addon = replay(
        recorded.dir, tmp_path / "out-replay", gemini_turns(False, model="gemini-2.5-pro")
    )
    assert isinstance(replayed, genai_errors.APIError)
    assert any(
        "model changed ('gemini-2.5-flash' -> 'gemini-2.5-pro')" in p.message
        for p in addon.problems
    )


def test_instructions_changed(tmp_path: Path, upstream: Upstream) -> None:
    recorded = record(
        tmp_path,
        upstream,
        anthropic_turns(False),
        [anthropic_tool_json("claude-x"), anthropic_text_json("claude-x")],
    )
    out = tmp_path / "out-replay"
    result, addon = replay(recorded.dir, out, anthropic_turns(False, system="Be verbose."))
    assert isinstance(result, anthropic.BadRequestError)
    body: Any = result.body
    # Anthropic's own error shape, so the SDK raises a clear error.
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    # Where it changed, by size: no hash, and never the text itself.
    expected = "turn 1: instructions changed; system: 9 -> 11 bytes"
    assert expected in body["error"]["message"]
    assert "verbose" not in body["error"]["message"]
    assert [p.message.split(" ", 2)[2] for p in addon.problems if p.kind == "mismatch"] == [
        expected
    ]
    assert any(p.kind == "unplayed" for p in addon.problems)  # turn 2 was never asked for
    assert expected in (out / "replay-diff.jsonl").read_text()


def test_websocket_mismatch_is_an_error_event(tmp_path: Path, upstream: Upstream) -> None:
    recorded = record(tmp_path, upstream, ws_turns(), [])
    result, addon = replay(recorded.dir, tmp_path / "out-replay", ws_turns(tools2=()))
    assert isinstance(result, list)
    assert result[0] == recorded.results[0]
    (error,) = result[1]
    assert error["type"] == "error"
    assert "turn 2: tool 'lookup' no longer advertised" in str(error)
    assert [p.kind for p in addon.problems] == ["mismatch"]


def test_exhausted_recording_is_an_error_not_a_hang(tmp_path: Path, upstream: Upstream) -> None:
    recorded = record(
        tmp_path, upstream, chat_turns(True), [chat_tool_sse("gpt-5"), chat_text_sse("gpt-5")]
    )
    started = time.monotonic()
    result, addon = replay(recorded.dir, tmp_path / "out-replay", chat_turns(True, n=3))
    assert time.monotonic() - started < 8
    assert isinstance(result, openai.BadRequestError)
    body: Any = result.body
    assert body["code"] == "modeltap_replay_exhausted"
    assert [p.kind for p in addon.problems] == ["exhausted"]
    assert "turn 3: the recording is exhausted (2 turns recorded)" in addon.problems[0].message


def test_exhausted_websocket(tmp_path: Path, upstream: Upstream) -> None:
    recorded = record(tmp_path, upstream, ws_turns(n=1), [])
    result, _ = replay(recorded.dir, tmp_path / "out-replay", ws_turns(n=2))
    assert isinstance(result, list)
    assert result[0] == recorded.results[0]
    assert [e["type"] for e in result[1]] == ["error"]
    assert "modeltap_replay_exhausted" in str(result[1])


def test_unaudited_requests_replay_and_unrecorded_ones_get_404(
    tmp_path: Path, upstream: Upstream
) -> None:
    def listing(base: str) -> list[Any]:
        return [oai(base).models.list().model_dump()]

    recorded = record(tmp_path, upstream, listing, [])
    result, _ = replay(recorded.dir, tmp_path / "out-replay", listing)
    assert result == recorded.results

    def other(base: str) -> list[Any]:
        return [oai(base).models.retrieve("nope").model_dump()]

    result, _ = replay(recorded.dir, tmp_path / "out-2", other)
    assert isinstance(result, openai.NotFoundError)


# ---------------------------------------------------------------- pace and secrets


def test_sse_replays_at_the_recorded_pace_unbuffered(tmp_path: Path, upstream: Upstream) -> None:
    slow = chat_text_sse("gpt-5")
    slow.pause_after = {1: 0.5}

    def timed(base: str) -> list[Any]:
        stream = oai(base).chat.completions.create(
            model="gpt-5", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        start, arrivals = time.monotonic(), []
        for _ in stream:
            arrivals.append(time.monotonic() - start)
        return arrivals

    recorded = record(tmp_path, upstream, timed, [slow])
    paced, _ = replay(recorded.dir, tmp_path / "out-paced", timed, fast=False)
    assert isinstance(paced, list)
    gaps = [b - a for a, b in itertools.pairwise(paced)]
    assert max(gaps) >= 0.4  # the recorded pause is kept...
    assert paced[0] < 0.3  # ...and the chunks before it arrived before it, not at the end
    fast, _ = replay(recorded.dir, tmp_path / "out-fast", timed, fast=True)
    assert isinstance(fast, list) and fast[-1] < 0.3


SECRETS = ("PLANTED-SECRET", "QUERY-SECRET-1", "COOKIE-SECRET-2", "AZURE-SECRET-3")


def test_no_credentials_in_the_recording(tmp_path: Path, upstream: Upstream) -> None:
    headers = {"cookie": "sid=COOKIE-SECRET-2", "api-key": "AZURE-SECRET-3"}

    def agent(base: str) -> list[Any]:
        c = oai(base, default_headers=headers, default_query={"key": "QUERY-SECRET-1"})
        r = c.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "x"}])
        a = anth(base, default_headers=headers).messages.create(
            model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
        with c.responses.connect() as conn:
            conn.send(ws_create(1))  # type: ignore[arg-type]
            events = []
            for event in conn:
                events.append(event.type)
                if event.type == "response.completed":
                    break
        return [r.model_dump(), a.model_dump(), events]

    recorded = record(tmp_path, upstream, agent, [])
    assert upstream.received[0].headers["Authorization"] == f"Bearer {KEY}"  # it was sent
    files = [p for p in recorded.dir.rglob("*") if p.is_file()]
    assert len(files) > 4
    for path in files:
        data = path.read_bytes()
        for secret in SECRETS:
            assert secret.encode() not in data, (path.name, secret)
    lines = read_jsonl(recorded.dir / "recording.jsonl")
    assert any("key=REDACTED" in line["path"] for line in lines)
    result, addon = replay(recorded.dir, tmp_path / "out-replay", agent)
    assert result == recorded.results
    assert addon.problems == []


# ---------------------------------------------------------------- the commands


def _start_cli(rec: Path, out: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "modeltap.app.cli", "replay", str(rec)),
            *("--listen", "127.0.0.1:0", "--out", str(out), "--fast", "-q", *extra),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        found = re.search(r"listening\s+(http://127\.0\.0\.1:\d+)", line)
        if found:
            return proc, found.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("modeltap replay did not start")


@pytest.mark.parametrize("turns_asked, code", [(2, 0), (1, 1)])
def test_replay_check_command(
    tmp_path: Path, upstream: Upstream, turns_asked: int, code: int
) -> None:
    recorded = record(
        tmp_path, upstream, chat_turns(False), [chat_tool_json("gpt-5"), chat_text_json("gpt-5")]
    )
    proc, url = _start_cli(recorded.dir, tmp_path / "out-cli", "--check")
    try:
        results = chat_turns(False, n=turns_asked)(url + "/stub")
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
    assert results == recorded.results[:turns_asked]
    assert proc.returncode == code, stderr
    if code:
        assert "turn 2 of 2 was not replayed" in stdout
    assert f"replayed {turns_asked} of 2 recorded turns" in stderr


def test_demo_runs_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert demo_main(["--fast", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "Enjoy the walk!" in printed
    assert "gpt-demo  get_weather, get_time  call_weather1 48 B" in printed  # the audit records
    assert "modeltap report" in printed and "get_weather  call_weather1" in printed
    assert "replayed 3 of 3 recorded turns; 0 differences" in printed
    assert len(read_jsonl(tmp_path / "audit.jsonl")) == 3
