"""What came back, end to end: real SDKs -> modeltap -> the upstream stub.

Each test scripts the stub's reply (``tests/upstream.py``) and writes the
``response`` event it expects by hand from that reply, never from the code
under test. Every streamed ``response`` event of every test here is also
checked for ``ttfb_ms <= ttft_ms <= duration_ms`` (see :func:`start_proxy`).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from hashlib import sha256
from typing import Any

import anthropic
import brotli
import httpx2 as httpx
import openai
import pytest

from tests.conftest import Running
from tests.factories import NO_USAGE, usage_json
from tests.upstream import (
    Reply,
    anthropic_text_json,
    anthropic_text_sse,
    anthropic_tool_json,
    anthropic_tool_sse,
    chat_text_json,
    chat_text_sse,
    chat_tool_json,
    chat_tool_sse,
    responses_text_json,
    responses_text_sse,
    responses_tool_json,
    responses_tool_sse,
    sse_bytes,
)

KEY = "sk-test-0123456789"
USER = [{"role": "user", "content": "What is the weather?"}]
CHAT_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
    }
]
RESP_TOOLS: list[Any] = [
    {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
]
ANTH_TOOLS: list[Any] = [{"name": "lookup", "input_schema": {"type": "object", "properties": {}}}]


def lookup(call_id: str, arguments: str = '{"q": "weather", "n": 3}') -> dict[str, Any]:
    """An event's ``lookup`` tool call, its arguments as the model sent them."""
    return {"call_id": call_id, "name": "lookup", "arguments": arguments, "namespace": None}


# ---------------------------------------------------------------- fixtures and helpers


def check_timings(event: dict[str, Any]) -> None:
    """A streamed answer's first byte comes before its first content chunk,
    which comes before its end."""
    if not event["stream"]:
        return
    ttfb, ttft, duration = event["ttfb_ms"], event["ttft_ms"], event["duration_ms"]
    assert ttfb is not None and duration is not None, event
    if ttft is None:  # no content arrived (e.g. the client left first)
        assert ttfb <= duration, event
    else:
        assert ttfb <= ttft <= duration, event


@pytest.fixture
def start_proxy(start_proxy: Callable[..., Running]) -> Iterator[Callable[..., Running]]:
    """The shared fixture, plus: after the test, every streamed ``response``
    event of every proxy it started passes :func:`check_timings`."""
    started: list[Running] = []

    def start(**kwargs: Any) -> Running:
        running = start_proxy(**kwargs)
        started.append(running)
        return running

    yield start
    for running in started:
        for event in running.events("response"):
            check_timings(event)


def wait_events(running: Running, kind: str, count: int) -> list[dict[str, Any]]:
    """The events of ``kind`` once there are ``count`` of them (the ``response``
    line is written when the proxy sees the end, which may be just after the
    client does); never more than ``count``."""
    deadline = time.monotonic() + 10
    while len(events := running.events(kind)) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(events) == count, events
    return events


class _Drained(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream) -> None:
        self.inner = inner
        # One iterator for reading and draining; a loop (not ``yield from``),
        # so a reader that stops early leaves it open for close() to finish.
        self.chunks = iter(inner)

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:  # noqa: UP028
            yield chunk

    def close(self) -> None:
        for _ in self.chunks:
            pass
        self.inner.close()


class DrainOnClose(httpx.HTTPTransport):
    """Read a response to its end before closing it, as the async openai SDK
    does. The sync SDK closes right after ``data: [DONE]``, racing the
    proxy's view of the upstream's end: a bug this file pins down once, in
    ``test_client_leaving_after_done_keeps_evidence_complete``, and keeps
    out of every other test."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        assert isinstance(response.stream, httpx.SyncByteStream)
        response.stream = _Drained(response.stream)
        return response


def oai(running: Running, route: str = "stub", drain: bool = True) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=running.base(route) + "/v1",
        api_key=KEY,
        max_retries=0,
        http_client=httpx.Client(transport=DrainOnClose()) if drain else None,
    )


def anth(running: Running, route: str = "stub") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=running.base(route), api_key=KEY, max_retries=0)


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# What the SDK handed the caller: the answer's text and its tool calls
# as (call id, name, arguments).
Seen = tuple[str, list[tuple[str, str, str]]]


def call_chat(running: Running, stream: bool, request_id: str) -> Seen:
    client = oai(running)
    kwargs: dict[str, Any] = dict(
        model="gpt-5",
        messages=USER,
        tools=CHAT_TOOLS,
        extra_headers={"x-client-request-id": request_id},
    )
    if not stream:
        message = client.chat.completions.create(**kwargs).choices[0].message
        calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []]
        return message.content or "", calls
    text, parts = "", {}
    for chunk in client.chat.completions.create(
        stream=True, stream_options={"include_usage": True}, **kwargs
    ):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for d in choice.delta.tool_calls or []:
                call = parts.setdefault(d.index, ["", "", ""])
                call[0] += d.id or ""
                call[1] += (d.function and d.function.name) or ""
                call[2] += (d.function and d.function.arguments) or ""
    return text, [(c[0], c[1], c[2]) for c in parts.values()]


def call_responses(running: Running, stream: bool, request_id: str) -> Seen:
    client = oai(running)
    kwargs: dict[str, Any] = dict(
        model="gpt-5.1",
        input="What is the weather?",
        tools=RESP_TOOLS,
        extra_headers={"x-client-request-id": request_id},
    )
    if stream:
        events = list(client.responses.create(stream=True, **kwargs))
        assert events[-1].type == "response.completed"
        out = events[-1].response
    else:
        out = client.responses.create(**kwargs)
    calls = [(i.call_id, i.name, i.arguments) for i in out.output if i.type == "function_call"]
    return out.output_text, calls


def call_anthropic(running: Running, stream: bool, request_id: str) -> Seen:
    client = anth(running)
    kwargs: dict[str, Any] = dict(
        model="claude-stub-1",
        max_tokens=1024,
        messages=USER,
        tools=ANTH_TOOLS,
        extra_headers={"x-client-request-id": request_id},
    )
    if stream:
        with client.messages.stream(**kwargs) as s:
            message = s.get_final_message()
    else:
        message = client.messages.create(**kwargs)
    text = "".join(b.text for b in message.content if b.type == "text")
    # The SDK hands tool input over parsed; json.dumps writes it back.
    calls = [(b.id, b.name, json.dumps(b.input)) for b in message.content if b.type == "tool_use"]
    return text, calls


# ---------------------------------------------------------------- API x JSON/stream x text/tool


@dataclass(frozen=True)
class Case:
    id: str
    api: str
    stream: bool
    reply: Reply
    call: Callable[[Running, bool, str], Seen]
    seen: Seen
    event: dict[str, Any]


CASES = [
    Case(
        "chat-json-text",
        "openai.chat_completions",
        False,
        chat_text_json("gpt-5-2025-08-07"),
        call_chat,
        ("Hello from the stub.", []),
        {
            "response_id": "chatcmpl-stub1",
            "model": "gpt-5-2025-08-07",
            "usage": usage_json(input=21, output=5, total=26, cache_read=3, reasoning=0),
            "finish_reasons": ["stop"],
            "tool_calls": [],
            "response_status": None,
        },
    ),
    Case(
        "chat-json-tool",
        "openai.chat_completions",
        False,
        chat_tool_json("gpt-5-2025-08-07"),
        call_chat,
        ("", [("call_lookup1", "lookup", '{"q": "weather", "n": 3}')]),
        {
            "response_id": "chatcmpl-tool1",
            "model": "gpt-5-2025-08-07",
            "usage": usage_json(input=40, output=12, total=52, cache_read=8, reasoning=4),
            "finish_reasons": ["tool_calls"],
            "tool_calls": [lookup("call_lookup1")],
            "response_status": None,
        },
    ),
    Case(
        "chat-stream-text",
        "openai.chat_completions",
        True,
        chat_text_sse("gpt-5-2025-08-07", include_usage=True),
        call_chat,
        ("Hello there", []),
        {
            "response_id": "chatcmpl-stub2",
            "model": "gpt-5-2025-08-07",
            # The usage chunk reports no details: those stay unknown, not 0.
            "usage": usage_json(input=9, output=2, total=11),
            "finish_reasons": ["stop"],
            "tool_calls": [],
            "response_status": None,
        },
    ),
    Case(
        "chat-stream-tool",
        "openai.chat_completions",
        True,
        chat_tool_sse("gpt-5-2025-08-07", include_usage=True),
        call_chat,
        ("", [("call_lookup2", "lookup", '{"q": "weather", "n": 3}')]),
        {
            "response_id": "chatcmpl-tool2",
            "model": "gpt-5-2025-08-07",
            "usage": usage_json(input=40, output=12, total=52, cache_read=8, reasoning=4),
            "finish_reasons": ["tool_calls"],
            # Assembled from four argument deltas.
            "tool_calls": [lookup("call_lookup2")],
            "response_status": None,
        },
    ),
    Case(
        "responses-json-text",
        "openai.responses",
        False,
        responses_text_json("gpt-5.1-2025-11-13"),
        call_responses,
        ("Hello from the stub.", []),
        {
            "response_id": "resp_stub1",
            "model": "gpt-5.1-2025-11-13",
            "usage": usage_json(input=30, output=6, total=36, cache_read=4, reasoning=2),
            "finish_reasons": ["completed"],
            "tool_calls": [],
            "response_status": "completed",
        },
    ),
    Case(
        "responses-json-tool",
        "openai.responses",
        False,
        responses_tool_json("gpt-5.1-2025-11-13"),
        call_responses,
        ("", [("call_lookup3", "lookup", '{"q": "weather", "n": 3}')]),
        {
            "response_id": "resp_stub1",
            "model": "gpt-5.1-2025-11-13",
            "usage": usage_json(input=30, output=6, total=36, cache_read=4, reasoning=2),
            "finish_reasons": ["completed"],
            "tool_calls": [lookup("call_lookup3")],
            "response_status": "completed",
        },
    ),
    Case(
        "responses-stream-text",
        "openai.responses",
        True,
        responses_text_sse("gpt-5.1-2025-11-13"),
        call_responses,
        ("Hello", []),
        {
            "response_id": "resp_stub1",
            "model": "gpt-5.1-2025-11-13",
            "usage": usage_json(input=30, output=6, total=36, cache_read=4, reasoning=2),
            "finish_reasons": ["completed"],
            "tool_calls": [],
            "response_status": "completed",
        },
    ),
    Case(
        "responses-stream-tool",
        "openai.responses",
        True,
        responses_tool_sse("gpt-5.1-2025-11-13"),
        call_responses,
        ("", [("call_lookup3", "lookup", '{"q": "weather", "n": 3}')]),
        {
            "response_id": "resp_stub1",
            "model": "gpt-5.1-2025-11-13",
            "usage": usage_json(input=30, output=6, total=36, cache_read=4, reasoning=2),
            "finish_reasons": ["completed"],
            "tool_calls": [lookup("call_lookup3")],
            "response_status": "completed",
        },
    ),
    Case(
        "anthropic-json-text",
        "anthropic.messages",
        False,
        anthropic_text_json("claude-stub-1-20251001"),
        call_anthropic,
        ("Hello from the stub.", []),
        {
            "response_id": "msg_stub1",
            "model": "claude-stub-1-20251001",
            # Anthropic reports no total and no reasoning count.
            "usage": usage_json(input=25, output=7, cache_read=10, cache_write=5),
            "finish_reasons": ["end_turn"],
            "tool_calls": [],
            "response_status": None,
        },
    ),
    Case(
        "anthropic-json-tool",
        "anthropic.messages",
        False,
        anthropic_tool_json("claude-stub-1-20251001"),
        call_anthropic,
        ("Looking it up.", [("toolu_lookup1", "lookup", '{"q": "weather", "n": 3}')]),
        {
            "response_id": "msg_tool1",
            "model": "claude-stub-1-20251001",
            "usage": usage_json(input=50, output=20, cache_read=30, cache_write=6),
            "finish_reasons": ["tool_use"],
            # The JSON answer carries the input as an object: kept as compact JSON.
            "tool_calls": [lookup("toolu_lookup1", '{"q":"weather","n":3}')],
            "response_status": None,
        },
    ),
    Case(
        "anthropic-stream-text",
        "anthropic.messages",
        True,
        anthropic_text_sse("claude-stub-1-20251001"),
        call_anthropic,
        ("Hello", []),
        {
            "response_id": "msg_stub2",
            "model": "claude-stub-1-20251001",
            # message_start's counts, then message_delta's output_tokens.
            "usage": usage_json(input=25, output=12, cache_read=10, cache_write=0),
            "finish_reasons": ["end_turn"],
            "tool_calls": [],
            "response_status": None,
        },
    ),
    Case(
        "anthropic-stream-tool",
        "anthropic.messages",
        True,
        anthropic_tool_sse("claude-stub-1-20251001"),
        call_anthropic,
        ("", [("toolu_lookup2", "lookup", '{"q": "weather", "n": 3}')]),
        {
            "response_id": "msg_tool2",
            "model": "claude-stub-1-20251001",
            "usage": usage_json(input=50, output=20, cache_read=30, cache_write=6),
            "finish_reasons": ["tool_use"],
            # The input_json_delta fragments joined, exactly as the model sent them.
            "tool_calls": [lookup("toolu_lookup2")],
            "response_status": None,
        },
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_response_event(running: Running, case: Case) -> None:
    running.upstream.replies.append(case.reply)
    seen = case.call(running, case.stream, f"req-{case.id}")
    assert seen == case.seen  # the SDK got the whole answer
    (record,) = running.audit()
    (event,) = wait_events(running, "response", 1)
    expected = {
        "kind": "response",
        "run_id": record["run_id"],
        "session_id": record["session_id"],
        "seq": record["seq"],
        "request_id": f"req-{case.id}",
        "api": case.api,
        "transport": "http",
        "status": 200,
        "stream": case.stream,
        **case.event,
        "evidence_complete": True,
        "capture_errors": [],
    }
    assert {k: event[k] for k in expected} == expected
    assert record["request_id"] == f"req-{case.id}"
    assert event["duration_ms"] is not None
    assert event["ttfb_ms"] is not None
    if case.stream:
        assert event["ttft_ms"] is not None


# ---------------------------------------------------------------- usage in chat streams


def test_chat_stream_without_usage_reports_null_not_zero(running: Running) -> None:
    """No ``stream_options.include_usage``: the stream has no usage chunk, and
    nothing is missing, so evidence is complete with every count unknown."""
    running.upstream.replies.append(chat_text_sse("gpt-5-2025-08-07"))
    chunks = list(oai(running).chat.completions.create(model="gpt-5", messages=USER, stream=True))
    assert [c.usage for c in chunks] == [None] * 4
    (event,) = wait_events(running, "response", 1)
    assert event["usage"] == NO_USAGE
    assert (event["finish_reasons"], event["evidence_complete"], event["capture_errors"]) == (
        ["stop"],
        True,
        [],
    )


def test_chat_stream_with_include_usage_reports_usage(running: Running) -> None:
    running.upstream.replies.append(chat_text_sse("gpt-5-2025-08-07", include_usage=True))
    chunks = list(
        oai(running).chat.completions.create(
            model="gpt-5", messages=USER, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 11
    (event,) = wait_events(running, "response", 1)
    assert event["usage"] == usage_json(input=9, output=2, total=11)
    assert (event["evidence_complete"], event["capture_errors"]) == (True, [])


def test_chat_stream_include_usage_but_no_usage_chunk(running: Running) -> None:
    """Usage was asked for and never came: unknown, and the evidence says so."""
    running.upstream.replies.append(chat_text_sse("gpt-5-2025-08-07"))
    list(
        oai(running).chat.completions.create(
            model="gpt-5", messages=USER, stream=True, stream_options={"include_usage": True}
        )
    )
    (event,) = wait_events(running, "response", 1)
    assert event["usage"] == NO_USAGE
    assert event["evidence_complete"] is False
    assert event["capture_errors"] == [
        "stream_options.include_usage was sent but no usage chunk arrived"
    ]


# ---------------------------------------------------------------- a stream cut by the upstream


def _iterate_until_raise(stream: Any, error: type[Exception]) -> int:
    """How many events the SDK yielded before it raised ``error``."""
    count = 0
    with pytest.raises(error):
        for _ in stream:
            count += 1
    return count


def test_cut_chat_stream(running: Running) -> None:
    # role, tool call start, then 3 of the 4 argument deltas arrive; then a reset.
    reply = chat_tool_sse("gpt-5-2025-08-07", include_usage=True)
    running.upstream.replies.append(Reply(sse=reply.sse, cut_after=4))
    stream = oai(running).chat.completions.create(
        model="gpt-5",
        messages=USER,
        tools=CHAT_TOOLS,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"x-client-request-id": "req-cut-chat"},
    )
    assert _iterate_until_raise(stream, openai.APIConnectionError) == 5
    (error,) = wait_events(running, "error", 1)
    (event,) = wait_events(running, "response", 1)
    assert {k: error[k] for k in ("seq", "request_id", "error", "method", "path")} == {
        "seq": 1,
        "request_id": "req-cut-chat",
        "error": "upstream_reset",
        "method": "POST",
        "path": "/v1/chat/completions",
    }
    expected = {
        "seq": 1,
        "request_id": "req-cut-chat",
        "status": 200,
        "stream": True,
        "response_id": "chatcmpl-tool2",
        "model": "gpt-5-2025-08-07",
        "usage": NO_USAGE,
        "finish_reasons": None,
        # What had arrived of the arguments, as the model sent it.
        "tool_calls": [lookup("call_lookup2", '{"q": "weather", "n": ')],
        "response_status": None,
        "evidence_complete": False,
    }
    assert {k: event[k] for k in expected} == expected
    errors = event["capture_errors"]
    assert errors[:2] == [
        "stream ended before data: [DONE]",
        "stream_options.include_usage was sent but no usage chunk arrived",
    ]
    assert len(errors) == 3 and errors[2].startswith("upstream_reset: ")


def test_cut_responses_stream_assembles_argument_deltas(running: Running) -> None:
    # created, output_item.added, the 4 argument deltas; then a reset before
    # arguments.done / output_item.done / response.completed.
    running.upstream.replies.append(
        Reply(sse=responses_tool_sse("gpt-5.1-2025-11-13").sse, cut_after=5)
    )
    stream = oai(running).responses.create(
        model="gpt-5.1",
        input="What is the weather?",
        tools=RESP_TOOLS,
        stream=True,
        extra_headers={"x-client-request-id": "req-cut-resp"},
    )
    assert _iterate_until_raise(stream, openai.APIConnectionError) == 6
    (error,) = wait_events(running, "error", 1)
    assert (error["seq"], error["error"]) == (1, "upstream_reset")
    (event,) = wait_events(running, "response", 1)
    expected = {
        "seq": 1,
        "request_id": "req-cut-resp",
        "status": 200,
        "stream": True,
        "response_id": "resp_stub1",
        "model": "gpt-5.1-2025-11-13",
        "usage": NO_USAGE,
        "finish_reasons": None,
        "tool_calls": [lookup("call_lookup3")],
        # The last status the stream stated (response.created).
        "response_status": "in_progress",
        "evidence_complete": False,
    }
    assert {k: event[k] for k in expected} == expected
    errors = event["capture_errors"]
    assert errors[0] == "stream ended before response.completed"
    assert len(errors) == 2 and errors[1].startswith("upstream_reset: ")


def test_cut_anthropic_stream(running: Running) -> None:
    # message_start, tool_use start, the 5 input deltas; then a reset before
    # content_block_stop / message_delta / message_stop.
    running.upstream.replies.append(
        Reply(sse=anthropic_tool_sse("claude-stub-1-20251001").sse, cut_after=6)
    )
    stream = anth(running).messages.create(
        model="claude-stub-1",
        max_tokens=1024,
        messages=USER,
        tools=ANTH_TOOLS,
        stream=True,
        extra_headers={"x-client-request-id": "req-cut-anth"},
    )
    # This SDK lets the transport's error through while iterating a stream.
    assert _iterate_until_raise(stream, httpx.RemoteProtocolError) == 7
    (error,) = wait_events(running, "error", 1)
    assert (error["seq"], error["error"]) == (1, "upstream_reset")
    (event,) = wait_events(running, "response", 1)
    expected = {
        "seq": 1,
        "request_id": "req-cut-anth",
        "status": 200,
        "stream": True,
        "response_id": "msg_tool2",
        "model": "claude-stub-1-20251001",
        # message_start's counts; the final output count never came.
        "usage": usage_json(input=50, output=1, cache_read=30, cache_write=6),
        "finish_reasons": None,
        "tool_calls": [lookup("toolu_lookup2")],
        "response_status": None,
        "evidence_complete": False,
    }
    assert {k: event[k] for k in expected} == expected
    errors = event["capture_errors"]
    assert errors[0] == "stream ended before message_stop"
    assert len(errors) == 2 and errors[1].startswith("upstream_reset: ")


# ---------------------------------------------------------------- compressed streams

TOOL_CASES = [c for c in CASES if c.id.endswith("-tool")]


@pytest.mark.parametrize("encoding", ["gzip", "br"])
@pytest.mark.parametrize("case", TOOL_CASES, ids=[c.id for c in TOOL_CASES])
def test_compressed_answer_observed(running: Running, case: Case, encoding: str) -> None:
    """The SDK decodes the compressed answer itself; modeltap observes a copy
    (a stream chunk by chunk, a JSON body whole)."""
    reply = case.reply
    running.upstream.replies.append(Reply(sse=reply.sse, json=reply.json, encoding=encoding))
    assert case.call(running, case.stream, f"req-{encoding}") == case.seen
    (event,) = wait_events(running, "response", 1)
    expected = {
        "request_id": f"req-{encoding}",
        "status": 200,
        "stream": case.stream,
        **case.event,
        "evidence_complete": True,
        "capture_errors": [],
    }
    assert {k: event[k] for k in expected} == expected


def _compressed(sse: list[tuple[str | None, Any]], encoding: str) -> bytes:
    """The stream as the stub compresses it: one flush per event."""
    events = [sse_bytes(name, data) for name, data in sse]
    if encoding == "gzip":
        z = zlib.compressobj(wbits=31)
        return b"".join(z.compress(e) + z.flush(zlib.Z_SYNC_FLUSH) for e in events) + z.flush()
    c = brotli.Compressor()
    return b"".join(c.process(e) + c.flush() for e in events) + c.finish()


@pytest.mark.parametrize("encoding", ["gzip", "br"])
def test_compressed_stream_passed_through_unchanged(running: Running, encoding: str) -> None:
    sse = responses_tool_sse("gpt-5.1-2025-11-13").sse
    assert sse is not None
    running.upstream.replies.append(Reply(sse=sse, encoding=encoding))
    body = {"model": "gpt-5.1", "input": "hi", "stream": True}
    with (
        httpx.Client() as client,
        client.stream(
            "POST",
            running.base() + "/v1/responses",
            json=body,
            headers={"accept-encoding": "gzip, br"},
        ) as resp,
    ):
        assert resp.headers["content-encoding"] == encoding
        raw = b"".join(resp.iter_raw())
    assert raw == _compressed(sse, encoding)
    (event,) = wait_events(running, "response", 1)
    assert (event["response_id"], event["evidence_complete"], event["capture_errors"]) == (
        "resp_stub1",
        True,
        [],
    )


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_unreachable_upstream_gives_502_and_error_event(
    start_proxy: Callable[..., Running], sdk: str
) -> None:
    running = start_proxy(routes=[f"dead=http://127.0.0.1:{closed_port()}"])
    headers = {"x-client-request-id": "req-dead"}
    error_type: type[Exception]
    if sdk == "openai":
        error_type, api, path = (
            openai.APIStatusError,
            "openai.chat_completions",
            "/v1/chat/completions",
        )
        call: Callable[[], object] = lambda: oai(running, "dead").chat.completions.create(  # noqa: E731
            model="gpt-5", messages=USER, extra_headers=headers
        )
    else:
        error_type, api, path = anthropic.APIStatusError, "anthropic.messages", "/v1/messages"
        call = lambda: anth(running, "dead").messages.create(  # noqa: E731
            model="claude-stub-1", max_tokens=10, messages=USER, extra_headers=headers
        )
    with pytest.raises(error_type) as exc:
        call()
    err: Any = exc.value
    assert err.status_code == 502
    body = err.response.json()  # provider-shaped JSON, not mitmproxy's HTML page
    assert body["type"] == "error"
    assert body["error"]["type"] == "api_error"
    assert body["error"]["code"] == "modeltap_upstream_error"
    assert body["error"]["message"].startswith("modeltap: the upstream could not be reached")
    (record,) = running.audit()  # audited before it was forwarded
    (error,) = wait_events(running, "error", 1)
    assert {k: error[k] for k in ("seq", "request_id", "error", "transport", "method", "path")} == {
        "seq": record["seq"],
        "request_id": "req-dead",
        "error": "upstream_unreachable",
        "transport": "http",
        "method": "POST",
        "path": path,
    }
    (event,) = wait_events(running, "response", 1)
    expected = {
        "seq": record["seq"],
        "request_id": "req-dead",
        "api": api,
        "status": None,  # the upstream never answered; the 502 is modeltap's
        "stream": False,
        "response_id": None,
        "model": None,
        "usage": NO_USAGE,
        "finish_reasons": None,
        "tool_calls": [],
        "response_status": None,
        "ttfb_ms": None,
        "ttft_ms": None,
        "evidence_complete": False,
    }
    assert {k: event[k] for k in expected} == expected
    (reason,) = event["capture_errors"]
    assert reason.startswith("upstream_unreachable: ")


def test_client_gone_mid_stream(running: Running) -> None:
    """The client reads the first event and leaves while the upstream waits."""
    gate = threading.Event()
    reply = chat_text_sse("gpt-5-2025-08-07")
    running.upstream.replies.append(Reply(sse=reply.sse, gate_after={0: gate}))
    body = {"model": "gpt-5", "messages": USER, "stream": True}
    try:
        with (
            httpx.Client() as client,
            client.stream(
                "POST",
                running.base() + "/v1/chat/completions",
                json=body,
                headers={"x-client-request-id": "req-gone"},
            ) as resp,
        ):
            first = next(resp.iter_raw())
            assert first.startswith(b'data: {"id":"chatcmpl-stub2"')
        (error,) = wait_events(running, "error", 1)
    finally:
        gate.set()
    assert (error["seq"], error["request_id"], error["error"]) == (1, "req-gone", "client_gone")
    (event,) = wait_events(running, "response", 1)
    assert (event["seq"], event["stream"], event["response_id"], event["evidence_complete"]) == (
        1,
        True,
        "chatcmpl-stub2",
        False,
    )
    cut, gone = event["capture_errors"]
    assert cut == "stream ended before data: [DONE]"
    assert gone.startswith("client_gone: ")
    # The proxy keeps serving.
    out = oai(running).chat.completions.create(model="gpt-5", messages=USER)
    assert out.choices[0].message.content == "Hello from the stub."
    _, second = wait_events(running, "response", 2)
    assert (second["seq"], second["evidence_complete"]) == (2, True)
    assert len(running.events("error")) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_error_answer(running: Running, stream: bool) -> None:
    """A provider error (429 JSON, even to a stream request) is a whole answer:
    its status, no usage, response_status error."""
    error = {"error": {"message": "slow down", "type": "rate_limit_error", "code": None}}
    running.upstream.replies.append(Reply(status=429, json=error))
    with pytest.raises(openai.RateLimitError):
        oai(running).chat.completions.create(
            model="gpt-5", messages=USER, stream=stream, extra_headers={"x-client-request-id": "r"}
        )
    (event,) = wait_events(running, "response", 1)
    expected = {
        "seq": 1,
        "request_id": "r",
        "status": 429,
        "response_id": None,
        "model": None,
        "usage": NO_USAGE,
        "finish_reasons": None,
        "tool_calls": [],
        "response_status": "error",
        "evidence_complete": True,
        "capture_errors": [],
    }
    assert {k: event[k] for k in expected} == expected


# ---------------------------------------------------------------- the line per exchange


def _three_exchanges(running: Running, session: str) -> None:
    headers = {"x-modeltap-session": session}
    running.upstream.replies.extend(
        [
            chat_text_json("gpt-5-2025-08-07"),
            responses_text_sse("gpt-5.1-2025-11-13"),
            anthropic_text_json("claude-stub-1-20251001"),
        ]
    )
    oai(running).chat.completions.create(model="gpt-5", messages=USER, extra_headers=headers)
    wait_events(running, "response", 1)
    list(
        oai(running).responses.create(
            model="gpt-5.1", input="x", stream=True, extra_headers=headers
        )
    )
    wait_events(running, "response", 2)
    anth(running).messages.create(
        model="claude-stub-1", max_tokens=10, messages=USER, extra_headers=headers
    )
    wait_events(running, "response", 3)


def test_one_line_per_exchange_on_stderr(
    start_proxy: Callable[..., Running], capfd: pytest.CaptureFixture[str]
) -> None:
    running = start_proxy(quiet=False)
    _three_exchanges(running, "sess-lines")
    _, err = capfd.readouterr()
    lines = [line for line in err.splitlines() if " sess-lines " in line]
    expected = [
        r"openai\.chat_completions gpt-5-2025-08-07 200 in=21 out=5",
        r"openai\.responses gpt-5\.1-2025-11-13 200 in=30 out=6",
        r"anthropic\.messages claude-stub-1-20251001 200 in=25 out=7",
    ]
    assert len(lines) == 3, err
    for line, middle in zip(lines, expected, strict=True):
        assert re.fullmatch(rf"\d\d:\d\d:\d\d sess-lines {middle} \d+ms", line), line


def test_quiet_prints_no_lines(
    start_proxy: Callable[..., Running], capfd: pytest.CaptureFixture[str]
) -> None:
    running = start_proxy(quiet=True)
    _three_exchanges(running, "sess-quiet")
    _, err = capfd.readouterr()
    assert "sess-quiet" not in err
    assert err == ""


# ---------------------------------------------------------------- memory


class KeepFlows:
    """A mitmproxy addon, loaded after modeltap, that keeps each finished flow
    so the test can look at what the proxy held for it."""

    def __init__(self) -> None:
        self.flows: list[Any] = []

    def response(self, flow: Any) -> None:
        self.flows.append(flow)


def _retained_bytes(obj: object, seen: set[int] | None = None) -> int:
    """The size of ``obj`` and of everything it refers to (objects, slots,
    containers), each counted once."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, type):
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        items: list[object] = [*obj.keys(), *obj.values()]
    elif isinstance(obj, list | tuple | set | frozenset):
        items = list(obj)
    else:
        items = list(getattr(obj, "__dict__", {}).values())
        for klass in type(obj).__mro__:
            for name in getattr(klass, "__slots__", ()):
                if hasattr(obj, name):
                    items.append(getattr(obj, name))
    return size + sum(_retained_bytes(item, seen) for item in items)


def _long_chat_stream(events: int) -> Reply:
    """A chat stream of ``events`` content chunks, written 100 events at a time
    (the proxy's cost is per network chunk; what it observes is per event)."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return json.dumps(
            {
                "id": "chatcmpl-long",
                "object": "chat.completion.chunk",
                "created": 1760000000,
                "model": "gpt-5-2025-08-07",
                "choices": [
                    {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
                ],
            }
        )

    words = [chunk({"content": f"word{i} "}) for i in range(events)]
    # A str payload goes out verbatim: "data: <a>\n\ndata: <b>\n\n" is two events.
    batches = ["\n\ndata: ".join(words[i : i + 100]) for i in range(0, events, 100)]
    sse: list[tuple[str | None, Any]] = [(None, chunk({"role": "assistant", "content": ""}))]
    sse += [(None, batch) for batch in batches]
    sse += [(None, chunk({}, "stop")), (None, "[DONE]")]
    return Reply(sse=sse)


def test_long_stream_keeps_facts_only(running: Running) -> None:
    """A 20,000-event stream: the client gets every event, the proxy keeps no
    body, and modeltap's state for the exchange (observer, SSE decoder,
    decompressor) is no bigger than for a 3-event stream."""
    keep = KeepFlows()
    master = running.proxy.master
    assert master is not None

    async def add() -> None:
        master.addons.add(keep)

    asyncio.run_coroutine_threadsafe(add(), master.event_loop).result(10)
    sizes = []
    for n in (3, 20_000):
        running.upstream.replies.append(_long_chat_stream(n))
        body = {"model": "gpt-5", "messages": USER, "stream": True}
        with (
            httpx.Client() as client,
            client.stream("POST", running.base() + "/v1/chat/completions", json=body) as resp,
        ):
            received = b"".join(resp.iter_bytes())
        assert received.count(b'{"content": "word') == n
        assert received.endswith(b"data: [DONE]\n\n")
        *_, event = wait_events(running, "response", len(sizes) + 1)
        assert (event["response_id"], event["finish_reasons"], event["evidence_complete"]) == (
            "chatcmpl-long",
            ["stop"],
            True,
        )
        flow = keep.flows[-1]
        assert not flow.response.raw_content  # mitmproxy streamed it, kept nothing
        tap = flow.response.stream
        sizes.append(_retained_bytes((tap.observer, tap.sse, tap.decompressor)))
    # Nothing grows with the stream (4 MB here); the SSE decoder's line buffer
    # may keep a few bytes of capacity from the last network chunk.
    short, long = sizes
    assert long < short + 1024, sizes


# ---------------------------------------------------------------- known bugs


def test_client_leaving_after_done_keeps_evidence_complete(running: Running) -> None:
    """The sync openai SDK stops reading at ``data: [DONE]`` and closes the
    connection without reading the rest of the body (the chunked terminator,
    or a compressor's last bytes). The upstream here holds those back, so the
    client always leaves first: the whole answer was still seen and parsed."""
    gate = threading.Event()
    reply = chat_text_sse("gpt-5-2025-08-07", include_usage=True)
    assert reply.sse is not None
    running.upstream.replies.append(Reply(sse=reply.sse, gate_after={len(reply.sse) - 1: gate}))
    try:
        chunks = list(
            oai(running, drain=False).chat.completions.create(
                model="gpt-5", messages=USER, stream=True, stream_options={"include_usage": True}
            )
        )
        assert len(chunks) == 5
        (event,) = wait_events(running, "response", 1)
    finally:
        gate.set()
    assert (event["finish_reasons"], event["usage"]["total_tokens"]) == (["stop"], 11)
    assert (event["evidence_complete"], event["capture_errors"]) == (True, [])


# ---------------------------------------------------------------- Responses compaction


def test_compaction_is_audited_as_a_responses_request(running: Running) -> None:
    """``client.responses.compact`` (Codex compacts its context so) runs the
    model: it is audited before it goes, marked ``operation: compact``, and
    its ``response.compaction`` answer observed; the stub's default answer."""
    client = openai.OpenAI(base_url=f"{running.base()}/v1", api_key=KEY, max_retries=0)
    compacted = client.responses.compact(
        model="gpt-5.1-codex",
        instructions="You are a coding agent.",
        input=[
            {"role": "user", "content": "Fix the failing test."},
            {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "1 failed"},
        ],
        previous_response_id="resp_prev1",
        extra_headers={"x-client-request-id": "req-compact"},
    )
    assert compacted.object == "response.compaction"
    assert [item.type for item in compacted.output] == ["message", "compaction"]
    (record,) = running.audit()
    assert {k: record[k] for k in ("api", "operation", "model", "path", "stream")} == {
        "api": "openai.responses",
        "operation": "compact",
        "model": "gpt-5.1-codex",
        "path": "/v1/responses/compact",
        "stream": False,
    }
    assert record["tool_results"] == [{"call_id": "call_1", "bytes": 8, "is_error": None}]
    assert record["previous_response_id"] == "resp_prev1"
    # Instructions stated, tools not: a continuation records what it left out.
    assert record["tool_names"] is None and record["omitted_settings"] == ["tools"]
    assert record["instructions_sha256"] == sha256(b"You are a coding agent.").hexdigest()
    (received,) = running.upstream.received
    assert received.path == "/v1/responses/compact"
    assert sha256(received.raw).hexdigest() == record["body_sha256"]  # forwarded as audited
    (event,) = wait_events(running, "response", 1)
    expected = {
        "api": "openai.responses",
        "request_id": "req-compact",
        "seq": record["seq"],
        "status": 200,
        "stream": False,
        "response_id": "resp_cmp_stub1",
        "model": None,  # a compaction names no model
        "usage": usage_json(input=900, output=120, total=1020, cache_read=512, reasoning=0),
        "finish_reasons": None,  # nor a status
        "tool_calls": [],
        "response_status": None,
        "evidence_complete": True,
        "capture_errors": [],
    }
    assert {k: event[k] for k in expected} == expected
    assert running.events("unaudited") == []


def test_create_is_still_the_operation_of_a_plain_response(running: Running) -> None:
    client = openai.OpenAI(base_url=f"{running.base()}/v1", api_key=KEY, max_retries=0)
    client.responses.create(model="gpt-5", input="hi")
    (record,) = running.audit()
    assert (record["api"], record["operation"]) == ("openai.responses", "create")
