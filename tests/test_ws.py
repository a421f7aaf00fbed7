"""Tests of modeltap.apis.openai_responses.websocket: client message validation
and server event routing."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson
import pytest

from modeltap.apis.openai_responses import audit_request
from modeltap.apis.openai_responses.websocket import (
    ServerEventObserver,
    classify_client_message,
    rejection_event,
)
from modeltap.apis.websocket_mode import Control, Create, Finished, Observed, WsPolicy
from modeltap.evidence.records import (
    HostedTool,
    InstructionPart,
    RequestFacts,
    ToolCall,
    ToolResult,
)
from modeltap.rules.errors import Rejected

DATA = Path(__file__).parent / "data" / "ws"
SAMPLES = sorted(DATA.glob("*.json"))
CANARY = "CANARY-51c2e"
EXPLICIT = WsPolicy()
AS_SENT = WsPolicy(continuation="as-sent")
USAGE = {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}


def assert_facts(actual: RequestFacts, expected: dict[str, Any]) -> None:
    """Assert every recorded field of RequestFacts against a sample's ``expected``."""
    compared = [field.name for field in dataclasses.fields(RequestFacts) if field.compare]
    assert set(expected) == set(compared)
    converters: dict[str, Any] = {
        "hosted_tools": lambda tools: tuple(HostedTool(**tool) for tool in tools),
        "tool_results": lambda results: tuple(ToolResult(**result) for result in results),
        "instructions_parts": lambda parts: (
            None if parts is None else tuple(InstructionPart(**part) for part in parts)
        ),
    }
    for name in compared:
        value = expected[name]
        if name in converters:
            value = converters[name](value)
        elif isinstance(value, list):
            value = tuple(value)
        assert getattr(actual, name) == value, name


def policy_of(sample: dict[str, Any]) -> WsPolicy:
    spec = sample.get("policy", {})
    return WsPolicy(
        continuation=spec.get("continuation", "explicit"),
        allow=frozenset(spec.get("allow", ["response.processed"])),
    )


def classify(message: dict[str, Any], policy: WsPolicy = EXPLICIT) -> Create | Control:
    return classify_client_message(orjson.dumps(message).decode(), True, policy)


# --------------------------------------------------------------------------
# Wire samples


@pytest.mark.parametrize("path", SAMPLES, ids=[p.stem for p in SAMPLES])
def test_wire_sample(path: Path) -> None:
    sample = orjson.loads(path.read_bytes())
    raw = orjson.dumps(sample["message"])
    policy = policy_of(sample)
    if "rejected_rule" in sample:
        with pytest.raises(Rejected) as caught:
            classify_client_message(raw, True, policy)
        assert caught.value.rule == sample["rejected_rule"]
    elif "control" in sample:
        assert classify_client_message(raw, True, policy) == Control(type=sample["control"])
    else:
        result = classify_client_message(raw, True, policy)
        assert isinstance(result, Create)
        assert result.body == sample["message"]
        assert_facts(result.facts, sample["expected"])


def test_sample_kinds_are_covered() -> None:
    kinds = {
        next(key for key in ("rejected_rule", "control", "expected") if key in sample)
        for sample in (orjson.loads(path.read_bytes()) for path in SAMPLES)
    }
    assert kinds == {"rejected_rule", "control", "expected"}


# --------------------------------------------------------------------------
# Client messages


def test_binary_frame_is_refused() -> None:
    with pytest.raises(Rejected) as caught:
        classify_client_message(b'{"type":"response.create"}', False, EXPLICIT)
    assert caught.value.rule == "ws_binary_frame"


@pytest.mark.parametrize(
    "data",
    [b"{not json", "[1, 2]", '"response.create"', "null", b"\xff\xfe", ""],
)
def test_invalid_json_or_not_an_object(data: bytes | str) -> None:
    with pytest.raises(Rejected) as caught:
        classify_client_message(data, True, EXPLICIT)
    assert caught.value.rule == "ws_invalid_json"


@pytest.mark.parametrize(
    "message",
    [
        {"model": "m", "input": []},
        {"type": 5, "model": "m", "input": []},
        {"type": "response.create.v2", "model": "m", "input": []},
        {"type": "conversation.item.create", "item": {"type": "message"}},
    ],
)
def test_unsupported_types(message: dict[str, Any]) -> None:
    with pytest.raises(Rejected) as caught:
        classify(message)
    assert caught.value.rule == "ws_unsupported_type"


def test_processed_is_refused_when_not_allow_listed() -> None:
    with pytest.raises(Rejected) as caught:
        classify({"type": "response.processed"}, WsPolicy(allow=frozenset()))
    assert caught.value.rule == "ws_unsupported_type"


def test_create_is_audited_even_if_allow_listed() -> None:
    policy = WsPolicy(allow=frozenset({"response.create", "response.processed"}))
    assert isinstance(
        classify({"type": "response.create", "model": "m", "input": []}, policy), Create
    )


def test_stream_is_true_on_a_websocket_whatever_the_body_says() -> None:
    result = classify({"type": "response.create", "model": "m", "input": [], "stream": False})
    assert isinstance(result, Create)
    assert result.facts.stream is True


def test_facts_equal_http_audit_of_the_message_minus_type() -> None:
    message = orjson.loads((DATA / "codex_continuation.json").read_bytes())["message"]
    result = classify(message)
    assert isinstance(result, Create)
    body = {key: value for key, value in message.items() if key != "type"}
    assert result.facts == audit_request(body)  # codex sends stream: true itself


def test_continuation_refusal_names_the_option() -> None:
    message = {"type": "response.create", "model": "m", "previous_response_id": "r", "input": []}
    with pytest.raises(Rejected) as caught:
        classify(message)
    assert caught.value.rule == "ws_implicit_continuation"
    assert "--continuation as-sent" in caught.value.message


@pytest.mark.parametrize(
    ("extra", "omitted"),
    [
        ({"instructions": "x", "tools": []}, ()),
        ({"tools": []}, ("instructions",)),
        ({"instructions": "x"}, ("tools",)),
        ({}, ("instructions", "tools")),
    ],
)
def test_as_sent_lists_what_the_continuation_omits(
    extra: dict[str, Any], omitted: tuple[str, ...]
) -> None:
    message = {"type": "response.create", "model": "m", "previous_response_id": "r", "input": []}
    result = classify(message | extra, AS_SENT)
    assert isinstance(result, Create)
    assert result.facts.omitted_settings == omitted
    assert (result.facts.tool_names is None) == ("tools" in omitted)
    assert (result.facts.instructions_sha256 is None) == ("instructions" in omitted)


def test_first_message_without_instructions_or_tools_omits_nothing() -> None:
    result = classify({"type": "response.create", "model": "m", "input": "hi"})
    assert isinstance(result, Create)
    assert result.facts.omitted_settings == ()
    assert result.facts.tool_names == ()


def test_audit_rules_apply_to_response_create() -> None:
    message = {
        "type": "response.create",
        "model": "m",
        "input": [],
        "tools": [{"type": "function"}],
    }
    with pytest.raises(Rejected) as caught:
        classify(message)
    assert caught.value.rule == "tool_without_name"


def test_image_detail_rewrite_goes_through_the_forwarded_body() -> None:
    from modeltap.apis.openai_responses import set_image_detail

    message = orjson.loads((DATA / "copilot_ws_turn1.json").read_bytes())["message"]
    result = classify(message)
    assert isinstance(result, Create)
    assert set_image_detail(result.body, "low") == 1
    forwarded = orjson.loads(orjson.dumps(result.body))
    assert forwarded["type"] == "response.create"
    assert forwarded["input"][0]["content"][2]["detail"] == "low"


def test_rejection_event_shape() -> None:
    message = {"type": "response.cancel", "response_id": CANARY}
    with pytest.raises(Rejected) as caught:
        classify(message)
    event = orjson.loads(rejection_event(caught.value))
    assert event == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "code": "modeltap_rejected",
            "message": caught.value.message,
        },
    }
    assert CANARY not in event["error"]["message"]


def test_policy_refuses_unknown_continuation() -> None:
    with pytest.raises(ValueError):
        WsPolicy(continuation="implicit")  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# Server events


def facts() -> RequestFacts:
    result = classify({"type": "response.create", "model": "gpt-5.1", "input": "hi"})
    assert isinstance(result, Create)
    return result.facts


def response_event(kind: str, response_id: str, **response: Any) -> bytes:
    body: dict[str, Any] = {"id": response_id, "model": "gpt-5.1", "status": "in_progress"}
    body.update(response)
    return orjson.dumps({"type": kind, "response": body})


def delta(text: str) -> bytes:
    return orjson.dumps({"type": "response.output_text.delta", "output_index": 0, "delta": text})


def completed(response_id: str, **response: Any) -> bytes:
    return response_event(
        "response.completed", response_id, status="completed", usage=USAGE, **response
    )


def test_two_responses_in_sequence_on_one_connection() -> None:
    observer = ServerEventObserver()
    observer.expect(1, facts())
    assert observer.feed(response_event("response.created", "resp_a")) == Observed(seq=1)
    assert observer.feed(delta("Hel")) == Observed(seq=1, first_output=True)
    assert observer.feed(delta("lo")) == Observed(seq=1)
    first = observer.feed(completed("resp_a"))
    assert first.seq == 1
    assert first.finished is not None
    assert first.finished.response_id == "resp_a"
    assert first.finished.evidence_complete is True
    assert observer.pending == 0

    call = {"type": "function_call", "call_id": "call_1", "name": "view", "arguments": "{}"}
    observer.expect(2, facts())
    assert observer.feed(response_event("response.created", "resp_b")) == Observed(seq=2)
    added = {"type": "response.output_item.added", "output_index": 0, "item": call}
    assert observer.feed(orjson.dumps(added)) == Observed(seq=2, first_output=True)
    second = observer.feed(completed("resp_b", output=[call]))
    assert second.seq == 2
    assert second.first_output is False
    assert second.finished is not None
    assert second.finished.response_id == "resp_b"
    assert second.finished.tool_calls == (ToolCall("call_1", "view", "{}", None),)


def test_pipelined_creates_are_answered_in_order() -> None:
    observer = ServerEventObserver()
    observer.expect(1, facts())
    observer.expect(2, facts())
    assert observer.pending == 2
    assert observer.feed(completed("resp_a")).seq == 1
    last = observer.feed(completed("resp_b"))
    assert last.seq == 2
    assert last.finished is not None
    assert last.finished.response_id == "resp_b"
    assert observer.pending == 0


def test_first_delta_is_the_first_output() -> None:
    observer = ServerEventObserver()
    observer.expect(1, facts())
    seen = observer.feed(delta("x"))
    assert seen.first_output is True
    assert seen.finished is None


def test_warm_up_response_without_output() -> None:
    observer = ServerEventObserver()
    observer.expect(1, facts())
    observer.feed(response_event("response.created", "resp_w"))
    seen = observer.feed(completed("resp_w", output=[]))
    assert seen.first_output is False
    assert seen.finished is not None
    assert seen.finished.evidence_complete is True


def test_error_event_ends_the_response() -> None:
    observer = ServerEventObserver()
    observer.expect(7, facts())
    error = {
        "type": "error",
        "status": 400,
        "error": {"type": "invalid_request_error", "code": "previous_response_not_found"},
    }
    seen = observer.feed(orjson.dumps(error))
    assert seen.seq == 7
    assert seen.finished is not None
    assert seen.finished.status == "error"
    assert observer.pending == 0


def test_events_with_nothing_pending_belong_to_no_response() -> None:
    observer = ServerEventObserver()
    assert observer.feed(b'{"type":"codex.rate_limits"}') == Observed(seq=None)
    assert observer.feed(b"not json") == Observed(seq=None)
    assert observer.close("connection closed (1000)") == []


def test_unknown_events_are_ignored() -> None:
    observer = ServerEventObserver()
    observer.expect(1, facts())
    assert observer.feed(b'{"type":"codex.rate_limits","primary":{}}') == Observed(seq=1)
    finished = observer.feed(completed("resp_a")).finished
    assert finished is not None
    assert finished.evidence_complete is True


def test_invalid_server_message_is_a_capture_error_of_the_current_response() -> None:
    observer = ServerEventObserver()
    observer.expect(1, facts())
    assert observer.feed(b"\x00\x01binary") == Observed(seq=1)
    finished = observer.feed(completed("resp_a")).finished
    assert finished is not None
    assert finished.evidence_complete is False
    assert finished.capture_errors == ("a stream event is not valid JSON",)


def test_connection_closed_mid_response() -> None:
    observer = ServerEventObserver()
    observer.expect(1, facts())
    observer.feed(response_event("response.created", "resp_a"))
    observer.feed(delta("partial"))
    observer.expect(2, facts())
    closed = observer.close("connection closed (1006)")
    assert [done.seq for done in closed] == [1, 2]
    first = closed[0]
    assert isinstance(first, Finished)
    assert first.facts.response_id == "resp_a"
    assert first.facts.evidence_complete is False
    assert first.facts.capture_errors == (
        "stream ended before response.completed",
        "connection closed (1006)",
    )
    assert closed[1].facts.response_id is None
    assert closed[1].facts.evidence_complete is False
    assert observer.pending == 0
