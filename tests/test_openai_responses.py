"""Tests of modeltap.apis.openai_responses: request audit, image rewrite, observers."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson
import pytest

from modeltap.apis import openai_responses
from modeltap.apis.openai_responses import (
    StreamObserver,
    audit_request,
    observe_json,
    set_image_detail,
    unstated_settings,
)
from modeltap.evidence.records import (
    HostedTool,
    InstructionPart,
    RequestFacts,
    ToolCall,
    ToolResult,
    Usage,
)
from modeltap.rules.errors import Rejected
from modeltap.wire.sse import SSEEvent

DATA = Path(__file__).parent / "data" / "openai_responses"
SAMPLES = sorted(DATA.glob("*.json"))
CANARY = "CANARY-7f3a9"
EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def facts_from_expected(expected: dict[str, Any]) -> RequestFacts:
    """Build RequestFacts from a sample's ``expected`` (JSON lists become tuples)."""

    def tup(value: list[Any] | None) -> tuple[Any, ...] | None:
        return None if value is None else tuple(value)

    return RequestFacts(
        model=expected["model"],
        tool_names=tup(expected["tool_names"]),
        reasoning_effort=expected["reasoning_effort"],
        thinking=expected["thinking"],
        image_details=tuple(expected["image_details"]),
        instructions_sha256=expected["instructions_sha256"],
        instructions_parts=(
            None
            if expected["instructions_parts"] is None
            else tuple(InstructionPart(**part) for part in expected["instructions_parts"])
        ),
        stream=expected["stream"],
        hosted_tools=tuple(HostedTool(**tool) for tool in expected["hosted_tools"]),
        tool_results=tuple(ToolResult(**result) for result in expected["tool_results"]),
        previous_response_id=expected["previous_response_id"],
        generate=expected["generate"],
        omitted_settings=tuple(expected["omitted_settings"]),
    )


def assert_facts(actual: RequestFacts, expected: dict[str, Any]) -> None:
    """Assert every field, one by one, so a failure names the field."""
    wanted = facts_from_expected(expected)
    for field in dataclasses.fields(RequestFacts):
        if field.compare:
            assert getattr(actual, field.name) == getattr(wanted, field.name), field.name
    assert set(expected) == {f.name for f in dataclasses.fields(RequestFacts) if f.compare}


# --------------------------------------------------------------------------
# Wire samples


def test_there_are_wire_samples() -> None:
    assert len(SAMPLES) >= 6


@pytest.mark.parametrize(
    "state",
    [
        {"previous_response_id": "resp_1"},
        {"conversation": "conv_1"},
        {"conversation": {"id": "conv_1"}},
        {"prompt": {"id": "pmpt_1", "version": "2"}},
    ],
    ids=["previous_response_id", "conversation", "conversation_object", "prompt"],
)
def test_server_state_without_settings_records_them_omitted(state: dict[str, Any]) -> None:
    facts = audit_request({"model": "m", "input": [], **state})
    assert facts.tool_names is None
    assert facts.instructions_sha256 is None
    assert facts.omitted_settings == ("instructions", "tools")


def test_server_state_with_settings_records_them() -> None:
    body = {
        "model": "m",
        "previous_response_id": "resp_1",
        "input": [{"role": "developer", "content": "be brief"}],
        "tools": [],
    }
    facts = audit_request(body)
    assert facts.tool_names == ()
    assert facts.instructions_sha256 is not None and facts.instructions_sha256 != EMPTY_SHA
    assert facts.omitted_settings == ()


def test_null_continuation_fields_are_no_continuation() -> None:
    facts = audit_request({"model": "m", "input": [], "previous_response_id": None})
    assert facts.omitted_settings == ()
    assert facts.instructions_sha256 == EMPTY_SHA


def test_absent_tools_are_empty_and_absent_instructions_hash_empty() -> None:
    facts = audit_request({"model": "m", "input": "hi"})
    assert facts.tool_names == ()
    assert facts.hosted_tools == ()
    assert facts.instructions_sha256 == EMPTY_SHA
    assert facts.image_details == ()
    assert facts.stream is False
    assert facts.previous_response_id is None
    assert facts.generate is None


def test_absent_input_is_no_items() -> None:
    facts = audit_request({"model": "m", "previous_response_id": "resp_1"})
    assert facts.tool_results == ()
    assert facts.previous_response_id == "resp_1"


def test_stream_is_true_only_for_true() -> None:
    assert audit_request({"model": "m", "input": [], "stream": "yes"}).stream is False
    assert audit_request({"model": "m", "input": [], "stream": True}).stream is True


def test_tool_output_without_output_has_zero_bytes_and_non_string_call_id_is_null() -> None:
    body = {"model": "m", "input": [{"type": "function_call_output", "call_id": 7}]}
    assert audit_request(body).tool_results == (ToolResult(call_id=None, bytes=0),)


def test_unstated_settings() -> None:
    assert unstated_settings({"input": []}) == ("instructions", "tools")
    assert unstated_settings({"input": [], "instructions": "x", "tools": []}) == ()
    stated_in_input = {
        "input": [
            {"type": "message", "role": "system", "content": "x"},
            {"type": "additional_tools", "role": "developer", "tools": []},
        ]
    }
    assert unstated_settings(stated_in_input) == ()
    # additional_tools has a role but is not a message: it states no instructions.
    tools_only = {"input": [{"type": "additional_tools", "role": "developer", "tools": []}]}
    assert unstated_settings(tools_only) == ("instructions",)
    assert unstated_settings({"input": "a string", "instructions": None}) == (
        "instructions",
        "tools",
    )


# --------------------------------------------------------------------------
# Image detail rewrite


def test_set_image_detail_rewrites_every_counted_image() -> None:
    body = orjson.loads((DATA / "images_everywhere.json").read_bytes())["request"]
    assert set_image_detail(body, "low") == 4
    assert audit_request(body).image_details == ("low", "low", "low", "low")


def test_set_image_detail_without_images() -> None:
    body = {"model": "m", "input": "no images"}
    assert set_image_detail(body, "high") == 0
    assert body == {"model": "m", "input": "no images"}


def test_set_image_detail_tolerates_malformed_bodies() -> None:
    body = {"input": [3, {"role": "user", "content": "x"}, {"role": "user", "content": [4]}]}
    assert set_image_detail(body, "auto") == 0
    assert set_image_detail({"input": {"x": 1}}, "auto") == 0


# Refusals: one sample per rule in tests/data/openai_responses/refused/ (tests/test_samples.py).


# --------------------------------------------------------------------------
# Non-streamed responses

USAGE = {
    "input_tokens": 1200,
    "input_tokens_details": {"cached_tokens": 1024},
    "output_tokens": 80,
    "output_tokens_details": {"reasoning_tokens": 64},
    "total_tokens": 1280,
}
FULL_USAGE = Usage(
    input_tokens=1200,
    output_tokens=80,
    total_tokens=1280,
    cache_read_tokens=1024,
    cache_write_tokens=None,
    reasoning_tokens=64,
)


def response_object(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "resp_123",
        "object": "response",
        "created_at": 1760000000,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "model": "gpt-5.1-2025-11-13",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": CANARY, "annotations": []}],
            },
        ],
        "usage": USAGE,
    }
    body.update(overrides)
    return body


def test_observe_json_text_answer() -> None:
    facts = observe_json(response_object(), None)
    assert facts.response_id == "resp_123"
    assert facts.model == "gpt-5.1-2025-11-13"
    assert facts.status == "completed"
    assert facts.usage == FULL_USAGE
    assert facts.finish_reasons == ("completed",)
    assert facts.tool_calls == ()
    assert facts.evidence_complete is True
    assert facts.capture_errors == ()


def test_observe_json_tool_calls() -> None:
    output = [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "shell_command",
            "namespace": "codex",
            "arguments": '{"command":"ls"}',
            "status": "completed",
        },
        {
            "type": "custom_tool_call",
            "id": "ctc_1",
            "call_id": "call_2",
            "name": "apply_patch",
            "input": "*** Begin Patch\n*** End Patch\n",
        },
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    ]
    facts = observe_json(response_object(output=output), None)
    assert facts.tool_calls == (
        ToolCall("call_1", "shell_command", '{"command":"ls"}', "codex"),
        ToolCall("call_2", "apply_patch", "*** Begin Patch\n*** End Patch\n", None),
    )
    assert facts.evidence_complete is True


def test_observe_json_incomplete_reports_the_reason() -> None:
    body = response_object(status="incomplete", incomplete_details={"reason": "max_output_tokens"})
    facts = observe_json(body, None)
    assert facts.status == "incomplete"
    assert facts.finish_reasons == ("max_output_tokens",)
    assert facts.evidence_complete is True


def test_observe_json_failed_response() -> None:
    body = response_object(
        status="failed", error={"code": "server_error", "message": CANARY}, output=[], usage=None
    )
    facts = observe_json(body, None)
    assert facts.status == "failed"
    assert facts.finish_reasons == ("failed",)
    assert facts.usage == Usage()
    assert facts.evidence_complete is True


def test_observe_json_error_body() -> None:
    body = {"error": {"message": CANARY, "type": "invalid_request_error", "code": None}}
    facts = observe_json(body, None)
    assert facts.status == "error"
    assert facts.response_id is None
    assert facts.finish_reasons is None
    assert facts.evidence_complete is True


@pytest.mark.parametrize("body", [None, [1, 2], "text", 3])
def test_observe_json_non_object(body: object) -> None:
    facts = observe_json(body, None)
    assert facts.evidence_complete is False
    assert facts.capture_errors == ("response body is not a JSON object",)


def test_observe_json_object_without_output() -> None:
    facts = observe_json({"id": "resp_9", "status": "completed"}, None)
    assert facts.response_id == "resp_9"
    assert facts.evidence_complete is False
    assert facts.capture_errors == ("response has no output list",)


def test_observe_json_ignores_wrongly_typed_counts() -> None:
    usage = {"input_tokens": "12", "output_tokens": True, "input_tokens_details": None}
    facts = observe_json(response_object(usage=usage, id=5, model=None), None)
    assert facts.usage == Usage()
    assert facts.response_id is None
    assert facts.model is None


# --------------------------------------------------------------------------
# Streams


def sse(event: dict[str, Any]) -> SSEEvent:
    return SSEEvent(event=event["type"], data=orjson.dumps(event).decode())


def response_event(kind: str, seq: int, **response: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "resp_s1",
        "object": "response",
        "model": "gpt-5.1",
        "status": "in_progress",
        "output": [],
        "usage": None,
    }
    body.update(response)
    return {"type": kind, "sequence_number": seq, "response": body}


def feed_all(observer: StreamObserver, events: list[dict[str, Any]]) -> list[bool]:
    return [observer.feed(sse(event)) for event in events]


def text_stream() -> list[dict[str, Any]]:
    message = {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress"}
    return [
        response_event("response.created", 0),
        response_event("response.in_progress", 1),
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": message | {"content": []},
        },
        {
            "type": "response.content_part.added",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": ""},
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 0,
            "delta": "CANARY",
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 0,
            "delta": "-7f3a9",
        },
        {
            "type": "response.output_text.done",
            "item_id": "msg_1",
            "output_index": 0,
            "text": CANARY,
        },
        {"type": "response.output_item.done", "output_index": 0, "item": message},
    ]


def test_stream_text_answer() -> None:
    observer = StreamObserver(None)
    completed = response_event(
        "response.completed", 8, status="completed", usage=USAGE, output=[{"type": "message"}]
    )
    outputs = feed_all(observer, [*text_stream(), completed])
    assert outputs == [False, False, False, False, True, True, False, False, False]
    assert observer.done is True
    facts = observer.finish()
    assert facts.response_id == "resp_s1"
    assert facts.model == "gpt-5.1"
    assert facts.status == "completed"
    assert facts.usage == FULL_USAGE
    assert facts.finish_reasons == ("completed",)
    assert facts.tool_calls == ()
    assert facts.evidence_complete is True
    assert facts.capture_errors == ()
    # Facts only: no model text is held.
    assert CANARY not in repr(vars(observer))


def test_stream_tool_calls_from_done_items_and_deltas() -> None:
    added = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "shell_command",
        "namespace": "codex",
        "arguments": "",
        "status": "in_progress",
    }
    custom_added = {
        "type": "custom_tool_call",
        "id": "ctc_1",
        "call_id": "call_2",
        "name": "apply_patch",
        "input": "",
    }
    events = [
        response_event("response.created", 0),
        {"type": "response.output_item.added", "output_index": 0, "item": added},
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 0,
            "delta": '{"comm',
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 0,
            "delta": 'and":"ls"}',
        },
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "output_index": 0,
            "arguments": '{"command":"ls"}',
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": added | {"arguments": '{"command":"ls"}', "status": "completed"},
        },
        # The second call's done item never comes: its input is assembled from deltas.
        {"type": "response.output_item.added", "output_index": 1, "item": custom_added},
        {
            "type": "response.custom_tool_call_input.delta",
            "item_id": "ctc_1",
            "output_index": 1,
            "delta": "*** Begin",
        },
        {
            "type": "response.custom_tool_call_input.delta",
            "item_id": "ctc_1",
            "output_index": 1,
            "delta": " Patch\n",
        },
        response_event("response.completed", 9, status="completed", usage=USAGE),
    ]
    observer = StreamObserver(None)
    outputs = feed_all(observer, events)
    assert outputs == [False, True, True, True, False, False, True, True, True, False]
    facts = observer.finish()
    assert facts.tool_calls == (
        ToolCall("call_1", "shell_command", '{"command":"ls"}', "codex"),
        ToolCall("call_2", "apply_patch", "*** Begin Patch\n", None),
    )
    assert facts.evidence_complete is True


def test_stream_arguments_done_wins_over_deltas_when_no_done_item() -> None:
    observer = StreamObserver(None)
    item = {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": ""}
    feed_all(
        observer,
        [
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{"},
            {"type": "response.function_call_arguments.done", "output_index": 0, "arguments": "{}"},
        ],
    )
    assert observer.finish().tool_calls == (ToolCall("c", "f", "{}", None),)


def test_stream_tool_calls_from_terminal_output_when_no_item_events() -> None:
    output = [{"type": "function_call", "call_id": "call_9", "name": "view", "arguments": "{}"}]
    observer = StreamObserver(None)
    feed_all(observer, [response_event("response.completed", 0, status="completed", output=output)])
    assert observer.finish().tool_calls == (ToolCall("call_9", "view", "{}", None),)


def test_stream_cut_before_completed() -> None:
    observer = StreamObserver(None)
    feed_all(observer, text_stream()[:5])
    assert observer.done is False
    facts = observer.finish()
    assert facts.response_id == "resp_s1"
    assert facts.status == "in_progress"
    assert facts.usage == Usage()
    assert facts.finish_reasons is None
    assert facts.evidence_complete is False
    assert facts.capture_errors == ("stream ended before response.completed",)


def test_stream_cut_with_a_known_reason() -> None:
    observer = StreamObserver(None)
    facts = observer.finish("upstream connection reset")
    assert facts.capture_errors == (
        "stream ended before response.completed",
        "upstream connection reset",
    )
    assert facts.evidence_complete is False


def test_stream_cut_keeps_a_partial_tool_call() -> None:
    observer = StreamObserver(None)
    item = {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": ""}
    feed_all(
        observer,
        [
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {
                "type": "response.function_call_arguments.delta",
                "item_id": "fc_1",
                "output_index": 0,
                "delta": '{"a"',
            },
        ],
    )
    facts = observer.finish()
    assert facts.tool_calls == (ToolCall("c", "f", '{"a"', None),)
    assert facts.evidence_complete is False


def test_stream_incomplete() -> None:
    observer = StreamObserver(None)
    incomplete = response_event(
        "response.incomplete",
        6,
        status="incomplete",
        incomplete_details={"reason": "max_output_tokens"},
        usage=USAGE,
    )
    feed_all(observer, [*text_stream()[:5], incomplete])
    facts = observer.finish()
    assert observer.done is True
    assert facts.status == "incomplete"
    assert facts.finish_reasons == ("max_output_tokens",)
    assert facts.usage == FULL_USAGE
    assert facts.evidence_complete is True


def test_stream_failed() -> None:
    observer = StreamObserver(None)
    failed = response_event(
        "response.failed", 2, status="failed", error={"code": "server_error", "message": CANARY}
    )
    feed_all(observer, [response_event("response.created", 0), failed])
    facts = observer.finish()
    assert facts.status == "failed"
    assert facts.finish_reasons == ("failed",)
    assert facts.evidence_complete is True


def test_stream_error_event() -> None:
    observer = StreamObserver(None)
    error = {
        "type": "error",
        "code": "rate_limit_exceeded",
        "message": CANARY,
        "param": None,
        "sequence_number": 1,
    }
    outputs = feed_all(observer, [response_event("response.created", 0), error])
    assert outputs == [False, False]
    assert observer.done is True
    facts = observer.finish()
    assert facts.status == "error"
    assert facts.response_id == "resp_s1"
    assert facts.finish_reasons is None
    assert facts.evidence_complete is True
    assert facts.capture_errors == ()


def test_stream_ignores_events_after_the_terminal_one() -> None:
    observer = StreamObserver(None)
    feed_all(observer, [response_event("response.completed", 0, status="completed")])
    assert observer.feed(SSEEvent(event=None, data="[DONE]")) is False
    assert observer.feed(sse({"type": "response.output_text.delta", "delta": "x"})) is False
    assert observer.finish().evidence_complete is True


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ("{not json", "a stream event is not valid JSON"),
        ("[1, 2]", "a stream event is not a JSON object"),
        ('{"delta": "x"}', "a stream event has no type"),
    ],
)
def test_stream_broken_event_makes_evidence_incomplete(data: str, error: str) -> None:
    observer = StreamObserver(None)
    assert observer.feed(SSEEvent(event=None, data=data)) is False
    assert observer.feed(SSEEvent(event=None, data=data)) is False
    feed_all(observer, [response_event("response.completed", 1, status="completed")])
    facts = observer.finish()
    assert facts.capture_errors == (error,)
    assert facts.evidence_complete is False


def test_stream_terminal_event_without_response_object() -> None:
    observer = StreamObserver(None)
    observer.feed_json({"type": "response.completed"})
    assert observer.done is True
    facts = observer.finish()
    assert facts.capture_errors == ("response.completed without a response object",)
    assert facts.evidence_complete is False


@pytest.mark.parametrize(
    "kind",
    [
        "response.output_text.delta",
        "response.refusal.delta",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
    ],
)
def test_feed_json_output_events(kind: str) -> None:
    assert StreamObserver(None).feed_json({"type": kind, "output_index": 0, "delta": "x"}) is True


def test_feed_json_message_item_added_is_not_output() -> None:
    event = {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message"}}
    assert StreamObserver(None).feed_json(event) is False


def test_module_offers_the_shared_interface() -> None:
    for name in ("audit_request", "set_image_detail", "observe_json", "StreamObserver"):
        assert hasattr(openai_responses, name)


@pytest.mark.parametrize("key", ["type", "role"])
def test_non_string_item_type_or_role_is_refused(key: str) -> None:
    """A list where a type or role belongs once crashed a set lookup (found by fuzzing)."""
    item: dict[str, object] = {"role": "user", "content": "x", key: ["function_call_output"]}
    with pytest.raises(Rejected) as exc:
        openai_responses.audit_request({"model": "m", "input": [item]})
    assert (exc.value.rule, exc.value.detail) == ("malformed_messages", f"input[0].{key}")
