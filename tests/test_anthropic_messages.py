"""Tests of modeltap.apis.anthropic_messages: request audit, refusals, observers."""

from __future__ import annotations

import copy
import json
import pathlib
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from modeltap.apis import anthropic_messages
from modeltap.evidence.records import ToolCall, Usage
from modeltap.rules.errors import Rejected
from modeltap.wire.sse import SSEEvent

SAMPLES = sorted((pathlib.Path(__file__).parent / "data" / "anthropic_messages").glob("*.json"))


# --------------------------------------------------------------------------
# Wire samples (checked at the core: tests/test_samples.py)


def test_samples_exist() -> None:
    assert {p.stem for p in SAMPLES} >= {
        "claude_code",
        "copilot_anthropic",
        "copilot_anthropic_after_tool",
        "server_tools",
        "tool_runner_thread_create",
        "tool_runner_thread_continue",
        "tool_runner_node_thread_continue",
    }


# --------------------------------------------------------------------------
# Request details beyond the samples


def minimal(**extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "secret-greeting"}],
        **extra,
    }


@pytest.mark.parametrize("tools", [None, []])
def test_no_tools_is_sent_and_empty(tools: list[Any] | None) -> None:
    body = minimal() if tools is None else minimal(tools=tools)
    facts = anthropic_messages.audit_request(body)
    assert facts.tool_names == ()
    assert facts.hosted_tools == ()
    assert facts.thinking is None
    assert facts.reasoning_effort is None
    assert facts.include_usage is None


def test_images_in_order_including_tool_results() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://example.test/a.png"}}
    body = minimal(
        messages=[
            {"role": "user", "content": [image]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [image, image]},
                    image,
                ],
            },
        ]
    )
    assert anthropic_messages.audit_request(body).image_details == (None, None, None, None)


def test_thinking_keeps_unknown_keys_by_name_only() -> None:
    huge = "secret-prompt " * 100_000
    sent = {"type": "enabled", "budget_tokens": 2048, "display": "summarized", "notes": huge}
    sent["nested"] = {"deep": [huge]}
    facts = anthropic_messages.audit_request(minimal(thinking=sent))
    assert facts.thinking == {
        "type": "enabled",
        "budget_tokens": 2048,
        "display": "summarized",
        "notes": "REDACTED",
        "nested": "REDACTED",
    }
    assert anthropic_messages.audit_request(minimal(thinking={"type": "adaptive", "display": None}))
    assert sent["notes"] == huge  # the body forwarded is untouched


@pytest.mark.parametrize(
    ("thread", "system", "tools", "omitted"),
    [
        (None, None, None, ()),
        ({"type": "create"}, "be brief", [], ()),
        (
            {"type": "continue", "previous_message_id": "msg_1"},
            None,
            None,
            ("instructions", "tools"),
        ),
        ({"type": "continue", "previous_message_id": "msg_1"}, "be brief", None, ("tools",)),
        ({"type": "continue", "previous_message_id": "msg_1"}, None, [], ("instructions",)),
        ({"type": "fork", "from": "msg_1"}, None, None, ("instructions", "tools")),
        ({}, None, None, ("instructions", "tools")),
    ],
    ids=["none", "create", "continue", "continue_system", "continue_tools", "unknown", "no_type"],
)
def test_thread_continuations_record_what_they_state(
    thread: Any, system: Any, tools: Any, omitted: tuple[str, ...]
) -> None:
    extra = {
        k: v
        for k, v in {"thread": thread, "system": system, "tools": tools}.items()
        if v is not None
    }
    body = minimal(**extra)
    # A system message inside a continuation adds to the thread's system; it does not state it.
    body["messages"].append({"role": "system", "content": "extra rule"})
    facts = anthropic_messages.audit_request(body)
    assert facts.omitted_settings == omitted
    assert (facts.instructions_sha256 is None) == ("instructions" in omitted)
    assert (facts.tool_names is None) == ("tools" in omitted)
    assert facts.hosted_tools == ()


# --------------------------------------------------------------------------
# Refusals (one sample per rule: tests/data/anthropic_messages/refused/, tests/test_samples.py)


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        ({"model": "m"}, "malformed_messages"),
        (minimal(messages=[{"role": "user", "content": [3]}]), "malformed_messages"),
        (minimal(tools=[{"type": 1, "name": "x"}]), "malformed_tools"),
        (minimal(tools=[3]), "malformed_tools"),
        (minimal(mcp_servers={"name": "x"}), "malformed_tools"),
        (minimal(mcp_servers=["x"]), "malformed_tools"),
        (minimal(tools=[{"type": "custom", "name": ""}]), "tool_without_name"),
        (minimal(system=5), "instructions_not_text"),
        (
            minimal(messages=[{"role": "system", "content": [{"type": "text", "text": 1}]}]),
            "instructions_not_text",
        ),
        (
            minimal(
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [{"type": "image"}],
                            }
                        ],
                    }
                ]
            ),
            "malformed_image",
        ),
        (minimal(output_config="high"), "malformed_setting"),
        (minimal(output_config={"effort": 2}), "malformed_setting"),
    ],
)
def test_more_refusal_shapes(body: dict[str, Any], rule: str) -> None:
    with pytest.raises(Rejected) as caught:
        anthropic_messages.audit_request(body)
    assert caught.value.rule == rule


# --------------------------------------------------------------------------
# JSON responses

USAGE: dict[str, Any] = {
    "input_tokens": 30,
    "output_tokens": 12,
    "cache_read_input_tokens": 1000,
    "cache_creation_input_tokens": 200,
}
TEXT_ANSWER: dict[str, Any] = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-20250514",
    "content": [
        {"type": "thinking", "thinking": "short", "signature": "c2ln"},
        {"type": "text", "text": "Hello."},
    ],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": USAGE,
}


def test_observe_json_text_answer() -> None:
    facts = anthropic_messages.observe_json(TEXT_ANSWER, None)
    assert facts.response_id == "msg_01"
    assert facts.model == "claude-sonnet-4-20250514"
    assert facts.usage == Usage(30, 12, None, 1000, 200, None)
    assert facts.finish_reasons == ("end_turn",)
    assert facts.tool_calls == ()
    assert facts.status is None
    assert facts.evidence_complete is True
    assert facts.capture_errors == ()


def test_observe_json_tool_use() -> None:
    body = copy.deepcopy(TEXT_ANSWER)
    body["stop_reason"] = "tool_use"
    body["content"].append(
        {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.py"}}
    )
    body["content"].append({"type": "tool_use", "id": "toolu_2", "name": "LS", "input": {}})
    facts = anthropic_messages.observe_json(body, None)
    assert facts.finish_reasons == ("tool_use",)
    assert facts.tool_calls == (
        ToolCall("toolu_1", "Read", '{"path":"a.py"}'),
        ToolCall("toolu_2", "LS", "{}"),
    )


def test_observe_json_without_usage_keeps_usage_unknown() -> None:
    """Seen whole (SPEC 4), so complete; the counts are unknown, not zero."""
    body = {k: v for k, v in TEXT_ANSWER.items() if k != "usage"}
    facts = anthropic_messages.observe_json(body, None)
    assert facts.usage == Usage()
    assert facts.evidence_complete is True
    assert facts.capture_errors == ()
    assert facts.finish_reasons == (TEXT_ANSWER["stop_reason"],)


def test_observe_json_error_body() -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    facts = anthropic_messages.observe_json(body, None)
    assert facts.status == "error"
    assert facts.evidence_complete is True
    assert facts.usage == Usage()


@pytest.mark.parametrize(
    "body",
    [None, "text", 1.5, [], {"type": "message"}, {"content": [1], "usage": {}}],
)
def test_observe_json_garbage(body: object) -> None:
    facts = anthropic_messages.observe_json(body, None)
    assert facts.evidence_complete is False
    assert facts.capture_errors


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=8,
)
EVENTISH = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "message_delta",
                "message_stop",
                "error",
            ]
        )
    },
    optional={
        "index": JSON_VALUES,
        "message": JSON_VALUES,
        "content_block": JSON_VALUES,
        "delta": JSON_VALUES,
        "usage": JSON_VALUES,
        "error": JSON_VALUES,
    },
)


@given(EVENTISH | JSON_VALUES)
def test_observe_json_never_raises(body: object) -> None:
    anthropic_messages.observe_json(body, None)


# --------------------------------------------------------------------------
# Streams


def event(kind: str, **data: Any) -> SSEEvent:
    return SSEEvent(event=kind, data=orjson.dumps({"type": kind, **data}).decode())


MESSAGE_START = event(
    "message_start",
    message={
        "id": "msg_s1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [],
        "stop_reason": None,
        "usage": {
            "input_tokens": 40,
            "cache_read_input_tokens": 900,
            "cache_creation_input_tokens": 0,
            "output_tokens": 1,
        },
    },
)
MESSAGE_STOP = event("message_stop")


def delta(index: int, **fields: Any) -> SSEEvent:
    return event("content_block_delta", index=index, delta=fields)


def text_stream() -> list[SSEEvent]:
    return [
        MESSAGE_START,
        event("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""}),
        delta(0, type="thinking_delta", thinking="Let me"),
        delta(0, type="signature_delta", signature="c2ln"),
        event("content_block_stop", index=0),
        event("ping"),
        event("content_block_start", index=1, content_block={"type": "text", "text": ""}),
        delta(1, type="text_delta", text="Hi"),
        event("content_block_stop", index=1),
        event(
            "message_delta",
            delta={"stop_reason": "end_turn", "stop_sequence": None},
            usage={"output_tokens": 15},
        ),
        MESSAGE_STOP,
    ]


def test_stream_text_answer() -> None:
    observer = anthropic_messages.StreamObserver()
    outputs = [observer.feed(e) for e in text_stream()]
    assert outputs == [False, False, True, False, False, False, False, True, False, False, False]
    facts = observer.finish()
    assert facts.response_id == "msg_s1"
    assert facts.model == "claude-sonnet-4-5-20250929"
    assert facts.usage == Usage(40, 15, None, 900, 0, None)
    assert facts.finish_reasons == ("end_turn",)
    assert facts.status is None
    assert facts.evidence_complete is True
    assert facts.capture_errors == ()


def test_stream_tool_use_split_over_many_deltas() -> None:
    start = {"type": "tool_use", "id": "toolu_9", "name": "Grep", "input": {}}
    bare = {"type": "tool_use", "id": "toolu_10", "name": "LS", "input": {}}
    events = [
        MESSAGE_START,
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        delta(0, type="text_delta", text="Searching."),
        event("content_block_stop", index=0),
        event("content_block_start", index=1, content_block=start),
        delta(1, type="input_json_delta", partial_json=""),
        delta(1, type="input_json_delta", partial_json='{"pattern": '),
        delta(1, type="input_json_delta", partial_json='"def main"'),
        delta(1, type="input_json_delta", partial_json="}"),
        event("content_block_stop", index=1),
        event("content_block_start", index=2, content_block=bare),
        event("content_block_stop", index=2),
        event("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 60}),
        MESSAGE_STOP,
    ]
    observer = anthropic_messages.StreamObserver()
    outputs = [observer.feed(e) for e in events]
    assert outputs == [
        *(False, False, True, False),
        *(True, True, True, True, True, False),
        *(True, False),
        *(False, False),
    ]
    facts = observer.finish()
    assert facts.tool_calls == (
        ToolCall("toolu_9", "Grep", '{"pattern": "def main"}'),
        ToolCall("toolu_10", "LS", "{}"),
    )
    assert facts.finish_reasons == ("tool_use",)
    assert facts.usage.output_tokens == 60
    assert facts.evidence_complete is True


def test_stream_message_delta_usage_overrides_non_null_values() -> None:
    observer = anthropic_messages.StreamObserver()
    observer.feed(MESSAGE_START)
    observer.feed(
        event(
            "message_delta",
            delta={"stop_reason": "end_turn"},
            usage={
                "input_tokens": 45,
                "cache_read_input_tokens": None,
                "cache_creation_input_tokens": 12,
                "output_tokens": 9,
            },
        )
    )
    observer.feed(MESSAGE_STOP)
    assert observer.finish().usage == Usage(45, 9, None, 900, 12, None)


def test_stream_cut_before_message_stop() -> None:
    observer = anthropic_messages.StreamObserver()
    for e in text_stream()[:8]:
        observer.feed(e)
    facts = observer.finish("client went away")
    assert facts.evidence_complete is False
    assert facts.finish_reasons is None
    assert facts.usage.output_tokens == 1
    assert facts.capture_errors == ("stream ended before message_stop", "client went away")


def test_stream_error_event() -> None:
    observer = anthropic_messages.StreamObserver()
    observer.feed(MESSAGE_START)
    error = {"type": "overloaded_error", "message": "secret provider text"}
    assert observer.feed(event("error", error=error)) is False
    facts = observer.finish()
    assert facts.status == "error"
    assert facts.evidence_complete is False
    assert facts.capture_errors == (
        "upstream sent an error event: overloaded_error",
        "stream ended before message_stop",
    )


def test_stream_bad_events_become_capture_errors() -> None:
    observer = anthropic_messages.StreamObserver()
    bad = [
        SSEEvent(event="message_start", data="{oops"),
        SSEEvent(event="ping", data='"ping"'),
        event("content_block_delta", index=0, delta="x"),
        delta(5, type="input_json_delta", partial_json="{}"),
        event("error", error={"type": "not an identifier!"}),
    ]
    # A stray input delta is still model output, even if it cannot be placed.
    assert [observer.feed(e) for e in bad] == [False, False, False, True, False]
    observer.feed(MESSAGE_STOP)
    facts = observer.finish()
    assert facts.capture_errors == (
        "stream event is not valid JSON",
        "stream event is not a JSON object",
        "stream has a content_block_delta without a delta object",
        "stream has an input_json_delta that matches no tool_use block",
        "upstream sent an error event: unknown",
    )


@given(st.lists(EVENTISH | JSON_VALUES, max_size=4))
def test_stream_never_raises(events: list[object]) -> None:
    observer = anthropic_messages.StreamObserver()
    for value in events:
        # json, not orjson: it also writes what orjson refuses (NaN, huge ints).
        observer.feed(SSEEvent(event=None, data=json.dumps(value)))
    observer.finish()


@pytest.mark.parametrize(
    ("sent", "flag"), [(None, False), (False, False), (True, True), ("yes", None)]
)
def test_anthropic_tool_result_is_error(sent: object, flag: bool | None) -> None:
    block: dict[str, object] = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}
    if sent is not None:
        block["is_error"] = sent
    body = {
        "model": "claude-x",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": [block]}],
    }
    facts = anthropic_messages.audit_request(body)
    assert [(r.call_id, r.is_error) for r in facts.tool_results] == [("toolu_1", flag)]
