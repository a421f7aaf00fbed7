"""Tests of modeltap.apis.openai_chat: request audit, refusals, response observers."""

from __future__ import annotations

import copy
import json
import pathlib
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from modeltap.apis import openai_chat
from modeltap.evidence.records import RequestFacts, ToolCall, Usage
from modeltap.rules.errors import Rejected
from modeltap.wire.sse import SSEEvent

SAMPLES = sorted((pathlib.Path(__file__).parent / "data" / "openai_chat").glob("*.json"))


# --------------------------------------------------------------------------
# Wire samples (checked at the core: tests/test_samples.py)


def test_samples_exist() -> None:
    assert {p.stem for p in SAMPLES} >= {"copilot_chat", "aider_chat", "tools_and_images"}


# --------------------------------------------------------------------------
# Request details beyond the samples


def minimal(**extra: Any) -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "secret-greeting"}],
        **extra,
    }


@pytest.mark.parametrize("tools", [None, []])
def test_no_tools_is_sent_and_empty(tools: list[Any] | None) -> None:
    body = minimal() if tools is None else minimal(tools=tools)
    facts = openai_chat.audit_request(body)
    assert facts.tool_names == ()
    assert facts.hosted_tools == ()


def test_image_inside_a_tool_message_counts() -> None:
    body = minimal(
        messages=[
            {
                "role": "tool",
                "tool_call_id": "call_9",
                "content": [
                    {"type": "text", "text": "shot"},
                    {"type": "image_url", "image_url": {"url": "data:,", "detail": "low"}},
                ],
            }
        ]
    )
    facts = openai_chat.audit_request(body)
    assert facts.image_details == ("low",)
    assert facts.tool_results[0].call_id == "call_9"


def test_no_instructions_hash_the_empty_string() -> None:
    facts = openai_chat.audit_request(minimal())
    assert facts.instructions_sha256 == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


def test_stream_must_be_true_itself() -> None:
    assert openai_chat.audit_request(minimal(stream="true")).stream is False


# --------------------------------------------------------------------------
# Refusals (one sample per rule: tests/data/openai_chat/refused/, tests/test_samples.py)


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        (minimal(tools="x"), "malformed_tools"),
        (minimal(tools=[{"type": 3}]), "malformed_tools"),
        (minimal(tools=[{"type": "custom", "custom": {}}]), "tool_without_name"),
        (minimal(messages=[1]), "malformed_messages"),
        (minimal(messages=[{"role": "user", "content": ["x"]}]), "malformed_messages"),
        ({"model": "m"}, "malformed_messages"),
        (minimal(messages=[{"role": "system", "content": None}]), "instructions_not_text"),
        (
            minimal(messages=[{"role": "system", "content": [{"type": "text"}]}]),
            "instructions_not_text",
        ),
        (
            minimal(
                messages=[
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": 1}}]}
                ]
            ),
            "malformed_image",
        ),
        (
            minimal(
                messages=[
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "u", "detail": 1}}],
                    }
                ]
            ),
            "malformed_image",
        ),
    ],
)
def test_more_refusal_shapes(body: dict[str, Any], rule: str) -> None:
    with pytest.raises(Rejected) as caught:
        openai_chat.audit_request(body)
    assert caught.value.rule == rule


# --------------------------------------------------------------------------
# JSON responses

TEXT_ANSWER: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello."},
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 20,
        "completion_tokens": 5,
        "total_tokens": 25,
        "prompt_tokens_details": {"cached_tokens": 8},
        "completion_tokens_details": {"reasoning_tokens": 2},
    },
}


def test_observe_json_text_answer() -> None:
    facts = openai_chat.observe_json(TEXT_ANSWER, None)
    assert facts.response_id == "chatcmpl-1"
    assert facts.model == "gpt-4o-2024-08-06"
    assert facts.usage == Usage(20, 5, 25, 8, None, 2)
    assert facts.finish_reasons == ("stop",)
    assert facts.tool_calls == ()
    assert facts.status is None
    assert facts.evidence_complete is True
    assert facts.capture_errors == ()


def test_observe_json_tool_calls() -> None:
    body = copy.deepcopy(TEXT_ANSWER)
    body["choices"][0]["finish_reason"] = "tool_calls"
    body["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"cmd": "ls"}'},
            },
            {"id": "call_2", "type": "custom", "custom": {"name": "apply_patch", "input": "*"}},
        ],
    }
    facts = openai_chat.observe_json(body, None)
    assert facts.finish_reasons == ("tool_calls",)
    assert facts.tool_calls == (
        ToolCall("call_1", "bash", '{"cmd": "ls"}'),
        ToolCall("call_2", "apply_patch", "*"),
    )
    assert facts.evidence_complete is True


def test_observe_json_error_body() -> None:
    body = {"error": {"message": "Rate limit", "type": "rate_limit_error", "code": None}}
    facts = openai_chat.observe_json(body, None)
    assert facts.status == "error"
    assert facts.evidence_complete is True
    assert facts.usage == Usage()
    assert facts.finish_reasons is None


def test_observe_json_without_usage_keeps_usage_unknown() -> None:
    """Seen whole (SPEC 4), so complete; the counts are unknown, not zero."""
    body = {k: v for k, v in TEXT_ANSWER.items() if k != "usage"}
    facts = openai_chat.observe_json(body, None)
    assert facts.usage == Usage()
    assert facts.evidence_complete is True
    assert facts.capture_errors == ()


@pytest.mark.parametrize(
    "body",
    [None, b"raw", "text", 3, [], {"choices": "x"}, {"choices": [1, {"message": 2}]}],
)
def test_observe_json_garbage(body: object) -> None:
    facts = openai_chat.observe_json(body, None)
    assert facts.evidence_complete is False
    assert facts.capture_errors


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=8,
)
CHUNKISH = st.fixed_dictionaries(
    {},
    optional={
        "id": JSON_VALUES,
        "model": JSON_VALUES,
        "usage": JSON_VALUES,
        "choices": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "index": JSON_VALUES,
                    "finish_reason": JSON_VALUES,
                    "delta": JSON_VALUES,
                    "message": JSON_VALUES,
                },
            )
            | JSON_VALUES
        ),
    },
)


@given(CHUNKISH | JSON_VALUES)
def test_observe_json_never_raises(body: object) -> None:
    openai_chat.observe_json(body, None)


# --------------------------------------------------------------------------
# Streams


def chunk(choices: list[Any], **extra: Any) -> SSEEvent:
    body = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "model": "gpt-4o", **extra}
    return SSEEvent(event=None, data=orjson.dumps({**body, "choices": choices}).decode())


DONE = SSEEvent(event=None, data="[DONE]")
USAGE: dict[str, Any] = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


def facts_for(include_usage: bool) -> RequestFacts:
    body = minimal(stream=True)
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    return openai_chat.audit_request(body)


def text_stream(include_usage: bool) -> list[SSEEvent]:
    events = [
        chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}}]),
        chunk([{"index": 0, "delta": {"content": "Hel"}}]),
        chunk([{"index": 0, "delta": {"content": "lo"}}]),
        chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
    ]
    if include_usage:
        events.append(chunk([], usage=USAGE))
    return [*events, DONE]


def test_stream_text_answer_with_usage() -> None:
    observer = openai_chat.StreamObserver(facts_for(include_usage=True))
    outputs = [observer.feed(e) for e in text_stream(include_usage=True)]
    assert outputs == [False, True, True, False, False, False]
    facts = observer.finish()
    assert facts.response_id == "chatcmpl-9"
    assert facts.model == "gpt-4o"
    assert facts.usage == Usage(11, 7, 18)
    assert facts.finish_reasons == ("stop",)
    assert facts.evidence_complete is True
    assert facts.capture_errors == ()


def test_stream_without_usage_keeps_usage_unknown() -> None:
    observer = openai_chat.StreamObserver(facts_for(include_usage=False))
    for event in text_stream(include_usage=False):
        observer.feed(event)
    facts = observer.finish()
    assert facts.usage == Usage()
    assert facts.evidence_complete is True


def test_stream_missing_requested_usage_is_named() -> None:
    observer = openai_chat.StreamObserver(facts_for(include_usage=True))
    for event in text_stream(include_usage=False):
        observer.feed(event)
    facts = observer.finish()
    assert facts.evidence_complete is False
    assert facts.capture_errors == (
        "stream_options.include_usage was sent but no usage chunk arrived",
    )


def test_stream_tool_calls_split_over_many_deltas() -> None:
    def call(index: int, **fields: Any) -> dict[str, Any]:
        return {"index": 0, "delta": {"tool_calls": [{"index": index, **fields}]}}

    events = [
        chunk([{"index": 0, "delta": {"role": "assistant", "content": None}}]),
        chunk([call(0, id="call_a", type="function", function={"name": "read", "arguments": ""})]),
        chunk([call(0, function={"arguments": '{"pa'})]),
        chunk([call(1, id="call_b", type="function", function={"name": "grep"})]),
        chunk([call(0, function={"arguments": 'th": "a.py"}'})]),
        chunk([call(1, function={"arguments": '{"q": "main"}'})]),
        chunk([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]),
        chunk([], usage=USAGE),
        DONE,
    ]
    observer = openai_chat.StreamObserver(facts_for(include_usage=True))
    outputs = [observer.feed(e) for e in events]
    assert outputs == [False, True, True, True, True, True, False, False, False]
    facts = observer.finish()
    assert facts.tool_calls == (
        ToolCall("call_a", "read", '{"path": "a.py"}'),
        ToolCall("call_b", "grep", '{"q": "main"}'),
    )
    assert facts.finish_reasons == ("tool_calls",)
    assert facts.evidence_complete is True


def test_stream_several_choices_keep_their_order() -> None:
    observer = openai_chat.StreamObserver()
    observer.feed(chunk([{"index": 1, "delta": {}, "finish_reason": "length"}]))
    observer.feed(chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    observer.feed(DONE)
    assert observer.finish().finish_reasons == ("stop", "length")


def test_stream_reasoning_and_refusal_are_output() -> None:
    observer = openai_chat.StreamObserver()
    assert observer.feed(chunk([{"index": 0, "delta": {"reasoning_content": "hmm"}}]))
    assert observer.feed(chunk([{"index": 0, "delta": {"refusal": "no"}}]))


def test_stream_cut_before_done() -> None:
    observer = openai_chat.StreamObserver(facts_for(include_usage=False))
    for event in text_stream(include_usage=False)[:2]:
        observer.feed(event)
    facts = observer.finish("upstream reset the connection")
    assert facts.evidence_complete is False
    assert facts.finish_reasons is None
    assert facts.capture_errors == (
        "stream ended before data: [DONE]",
        "upstream reset the connection",
    )


def test_stream_error_chunk() -> None:
    observer = openai_chat.StreamObserver()
    error = {"error": {"message": "secret detail", "type": "server_error"}}
    assert observer.feed(SSEEvent(event=None, data=orjson.dumps(error).decode())) is False
    observer.feed(DONE)
    facts = observer.finish()
    assert facts.status == "error"
    assert facts.evidence_complete is False
    assert facts.capture_errors == ("upstream sent an error chunk: server_error",)


def test_stream_bad_events_become_capture_errors() -> None:
    observer = openai_chat.StreamObserver()
    for data in ["{not json", "[1]", '{"choices": 5}', '{"choices": [7]}']:
        assert observer.feed(SSEEvent(event=None, data=data)) is False
    observer.feed(DONE)
    facts = observer.finish()
    assert facts.evidence_complete is False
    assert facts.capture_errors == (
        "stream chunk is not valid JSON",
        "stream chunk is not a JSON object",
        "stream chunk has a choices value that is not a list",
        "stream chunk has a choice that is not an object",
    )


@given(st.lists(CHUNKISH | JSON_VALUES, max_size=4))
def test_stream_never_raises(chunks: list[object]) -> None:
    observer = openai_chat.StreamObserver(facts_for(include_usage=True))
    for value in chunks:
        # json, not orjson: it also writes what orjson refuses (NaN, huge ints).
        observer.feed(SSEEvent(event=None, data=json.dumps(value)))
    observer.finish()


def test_non_string_role_is_refused_not_ignored() -> None:
    """A list where a role belongs once crashed a set lookup (found by fuzzing)."""
    with pytest.raises(Rejected) as exc:
        openai_chat.audit_request(
            {"model": "m", "messages": [{"role": ["system"], "content": "x"}]}
        )
    assert (exc.value.rule, exc.value.detail) == ("malformed_messages", "messages[0].role")
