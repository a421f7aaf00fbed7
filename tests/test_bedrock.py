"""Bedrock's answers as the observers read them: what Bedrock means by each
message of an event stream (:func:`~modeltap.apis.bedrock_converse.stream.read_bedrock_message`),
the streams of ``tests/data/bedrock/`` through
:class:`~modeltap.apis.bedrock_converse.stream.BedrockStreamDecoder` into the
API's stream observer, and the facts Bedrock puts in headers."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest

from modeltap import apis
from modeltap.apis.bedrock_converse.runtime import with_response_headers
from modeltap.apis.bedrock_converse.stream import (
    EVENT_STREAM,
    MAX_JSON_BYTES,
    BedrockChunk,
    BedrockError,
    BedrockEvent,
    BedrockException,
    BedrockStreamDecoder,
    read_bedrock_message,
)
from modeltap.evidence.records import InvocationMetrics, ResponseFacts
from modeltap.rules.errors import UpstreamProtocolError
from modeltap.wire.eventstream import EventStreamDecoder, EventStreamMessage, Header, HeaderType
from modeltap.wire.sse import SSEEvent
from tests.eventstream_frames import SAMPLES, chunk, encode_message, event, exception, strings
from tests.test_samples import facts_json


def stream_samples() -> list[Any]:
    """Every framing sample that says what its stream shows (``expected``)."""
    out = []
    for path in sorted(SAMPLES.glob("*.json")):
        if "expected" in orjson.loads(path.read_bytes()):
            out.append(pytest.param(path, id=path.stem))
    return out


def decode_all(wire: bytes, step: int) -> list[SSEEvent]:
    decoder = BedrockStreamDecoder()
    events = [e for i in range(0, len(wire), step) for e in decoder.feed(wire[i : i + step])]
    return events + decoder.close()


def test_samples_of_both_apis_say_what_they_show() -> None:
    named = {p.values[0].stem for p in stream_samples()}
    assert {
        "converse_stream_tool_use",
        "invoke_stream_tool_use",
        "invoke_stream_thinking_text",
    } <= named


@pytest.mark.parametrize("path", stream_samples())
@pytest.mark.parametrize("step", [1, 7, 4096])
def test_stream_observed_exactly_through_its_framing(path: Path, step: int) -> None:
    sample = orjson.loads(path.read_bytes())
    found = apis.match_endpoint(sample["path"])
    assert found is not None and found.stream
    api = apis.module_for(found.api)
    facts = api.audit_request(sample["request"], found)
    observer = api.StreamObserver(facts)
    for item in decode_all(path.with_suffix(".eventstream").read_bytes(), step):
        observer.feed(item)
    assert facts_json(observer.finish(None)) == sample["expected"]


def test_a_chunk_is_the_anthropic_event_it_wraps() -> None:
    inner = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "ok"},
    }
    (got,) = decode_all(chunk(inner, pad=9), 3)
    assert got.event is None
    assert orjson.loads(got.data) == inner


def test_an_event_keeps_its_type_and_payload() -> None:
    (got,) = decode_all(event("messageStop", b'{"stopReason":"end_turn","p":"ab"}'), 5)
    assert got.event == "messageStop"
    assert orjson.loads(got.data) == {"stopReason": "end_turn", "p": "ab"}


def test_exceptions_and_errors_name_their_type_never_the_providers_text() -> None:
    secret = b'{"message":"prompt text the model echoed"}'
    error = strings([(":message-type", "error"), (":error-code", "InternalFailure")])
    error += strings([(":error-message", "prompt text the model echoed")])
    wire = exception("validationException", secret) + encode_message(error)
    events = decode_all(wire, 11)
    assert [(e.event, orjson.loads(e.data)) for e in events] == [
        ("error", {"type": "error", "error": {"type": "validationException"}}),
        ("error", {"type": "error", "error": {"type": "InternalFailure"}}),
    ]
    assert all("echoed" not in e.data for e in events)


def test_a_broken_frame_ends_decoding_with_fixed_text() -> None:
    wire = bytearray(event("messageStart", b'{"role":"assistant"}'))
    wire[-1] ^= 0xFF  # the message checksum
    decoder = BedrockStreamDecoder()
    with pytest.raises(UpstreamProtocolError) as caught:
        decoder.feed(bytes(wire))
    assert "assistant" not in str(caught.value)


def test_a_stream_cut_inside_a_message_is_an_error_at_close() -> None:
    wire = event("messageStart", b'{"role":"assistant"}')
    decoder = BedrockStreamDecoder()
    assert decoder.feed(wire[:-3]) == []
    with pytest.raises(UpstreamProtocolError):
        decoder.close()


def test_a_chunk_whose_bytes_are_not_base64_json_is_a_protocol_error() -> None:
    bad = orjson.dumps({"bytes": base64.b64encode(b"not json").decode()})
    with pytest.raises(UpstreamProtocolError):
        BedrockStreamDecoder().feed(event("chunk", bad))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("application/vnd.amazon.eventstream", True),
        ("Application/VND.Amazon.EventStream; charset=binary", True),
        ("text/event-stream", False),
        ("application/json", False),
        ("", False),
    ],
)
def test_the_event_stream_framing_is_known_by_its_media_type(value: str, expected: bool) -> None:
    assert (apis.stream_framing(value, None, None, 200) is EVENT_STREAM) is expected


# --------------------------------------------------------------------------
# What Bedrock means by a message


def decode(stream: bytes) -> list[EventStreamMessage]:
    decoder = EventStreamDecoder()
    return decoder.feed(stream) + decoder.close()


@pytest.fixture(params=sorted(SAMPLES.glob("*.json")), ids=lambda p: p.stem)
def sample(request: pytest.FixtureRequest) -> tuple[dict[str, Any], bytes]:
    path: Path = request.param
    return orjson.loads(path.read_bytes()), path.with_suffix(".eventstream").read_bytes()


def test_sample_means_what_bedrock_means(sample: tuple[dict[str, Any], bytes]) -> None:
    description, wire = sample
    for message, expected in zip(decode(wire), description["messages"], strict=True):
        meaning = read_bedrock_message(message)
        headers, payload = expected["headers"], expected["payload"]
        if "anthropic_event" in expected:
            assert isinstance(meaning, BedrockChunk)
            assert meaning.event == expected["anthropic_event"]
            assert orjson.loads(meaning.data) == expected["anthropic_event"]
        elif headers[":message-type"] == "event":
            assert meaning == BedrockEvent(headers[":event-type"], payload)
        else:
            assert meaning == BedrockException(headers[":exception-type"], payload)


def only(wire: bytes) -> EventStreamMessage:
    [message] = decode(wire)
    return message


def test_bedrock_event() -> None:
    wire = event("messageStop", b'{"stopReason":"end_turn","p":"abc"}')
    assert read_bedrock_message(only(wire)) == BedrockEvent(
        "messageStop", {"stopReason": "end_turn", "p": "abc"}
    )


def test_bedrock_chunk_unwraps_the_anthropic_event() -> None:
    inner = {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 3}}
    meaning = read_bedrock_message(only(chunk(inner, pad=10)))
    assert meaning == BedrockChunk(orjson.dumps(inner).decode(), inner)


def test_bedrock_exception_and_error() -> None:
    wire = exception("throttlingException", b'{"message":"slow"}')
    assert read_bedrock_message(only(wire)) == BedrockException(
        "throttlingException", {"message": "slow"}
    )
    assert read_bedrock_message(only(exception("internalServerException", b""))) == (
        BedrockException("internalServerException", None)
    )
    error = strings([(":message-type", "error"), (":error-code", "InternalFailure")])
    assert read_bedrock_message(only(encode_message(error))) == BedrockError(
        "InternalFailure", None
    )
    error.append(Header(":error-message", HeaderType.STRING, "try later"))
    assert read_bedrock_message(only(encode_message(error))) == BedrockError(
        "InternalFailure", "try later"
    )


def test_bedrock_payload_bound() -> None:
    body = b'{"t":"' + b"x" * (100 - 8) + b'"}'
    assert len(body) == 100
    assert read_bedrock_message(only(event("e", body)), max_json_bytes=100) == BedrockEvent(
        "e", {"t": "x" * 92}
    )
    with pytest.raises(UpstreamProtocolError) as caught:
        read_bedrock_message(only(event("e", body)), max_json_bytes=99)
    assert str(caught.value) == "the Bedrock event stream has a payload longer than 99 bytes"
    big = b'{"t":"' + b"x" * MAX_JSON_BYTES + b'"}'
    with pytest.raises(UpstreamProtocolError):
        read_bedrock_message(only(event("e", big)))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


BAD_BEDROCK = [
    pytest.param(
        encode_message(strings([(":event-type", "chunk")]), b"{}"),
        "the Bedrock event stream has a message without a type",
        id="no-message-type",
    ),
    pytest.param(
        encode_message([Header(":message-type", HeaderType.INTEGER, 1)], b"{}"),
        "the Bedrock event stream has a :message-type header that is not text",
        id="message-type-not-text",
    ),
    pytest.param(
        encode_message(strings([(":message-type", "SECRET-CANARY")]), b"{}"),
        "the Bedrock event stream has a message of an unknown type",
        id="unknown-message-type",
    ),
    pytest.param(
        encode_message(strings([(":message-type", "event")]), b"{}"),
        "the Bedrock event stream has a message without :event-type",
        id="no-event-type",
    ),
    pytest.param(
        encode_message(strings([(":message-type", "event"), (":event-type", "")]), b"{}"),
        "the Bedrock event stream has a message without :event-type",
        id="empty-event-type",
    ),
    pytest.param(
        encode_message(
            [*strings([(":message-type", "event")]), Header(":event-type", HeaderType.BYTE, 1)]
        ),
        "the Bedrock event stream has a :event-type header that is not text",
        id="event-type-not-text",
    ),
    pytest.param(
        encode_message(strings([(":message-type", "exception")]), b"{}"),
        "the Bedrock event stream has a message without :exception-type",
        id="no-exception-type",
    ),
    pytest.param(
        encode_message(strings([(":message-type", "error")])),
        "the Bedrock event stream has a message without :error-code",
        id="no-error-code",
    ),
    pytest.param(
        event("messageStart", b'{"SECRET-CANARY": '),
        "the Bedrock event stream has a payload that is not a JSON object",
        id="payload-not-json",
    ),
    pytest.param(
        event("messageStart", b'["SECRET-CANARY"]'),
        "the Bedrock event stream has a payload that is not a JSON object",
        id="payload-array",
    ),
    pytest.param(
        event("messageStart", b""),
        "the Bedrock event stream has a payload that is not a JSON object",
        id="event-payload-empty",
    ),
    pytest.param(
        exception("throttlingException", b"SECRET-CANARY"),
        "the Bedrock event stream has a payload that is not a JSON object",
        id="exception-payload-not-json",
    ),
    pytest.param(
        event("chunk", b'{"p":"abc"}'),
        "the Bedrock event stream has a chunk without a 'bytes' text",
        id="chunk-without-bytes",
    ),
    pytest.param(
        event("chunk", b'{"bytes":["SECRET-CANARY"]}'),
        "the Bedrock event stream has a chunk without a 'bytes' text",
        id="chunk-bytes-not-text",
    ),
    pytest.param(
        event("chunk", b'{"bytes":"SECRET-CANARY!"}'),
        "the Bedrock event stream has a chunk whose 'bytes' is not base64 of UTF-8 text",
        id="chunk-not-base64",
    ),
    pytest.param(
        event("chunk", b'{"bytes":"eyJ9"}'[:-3] + b'"}'),
        "the Bedrock event stream has a chunk whose 'bytes' is not base64 of UTF-8 text",
        id="chunk-bad-padding",
    ),
    pytest.param(
        event("chunk", orjson.dumps({"bytes": "!" + b64(b'{"t":1}')})),
        "the Bedrock event stream has a chunk whose 'bytes' is not base64 of UTF-8 text",
        id="chunk-stray-character",  # a lenient decoder would skip it and accept the rest
    ),
    pytest.param(
        event("chunk", orjson.dumps({"bytes": "\u00e9\u00e9\u00e9\u00e9"})),
        "the Bedrock event stream has a chunk whose 'bytes' is not base64 of UTF-8 text",
        id="chunk-not-ascii",
    ),
    pytest.param(
        event("chunk", orjson.dumps({"bytes": b64(b'{"t":"\xff"}')})),
        "the Bedrock event stream has a chunk whose 'bytes' is not base64 of UTF-8 text",
        id="chunk-not-utf8",
    ),
    pytest.param(
        event("chunk", orjson.dumps({"bytes": b64(b'"SECRET-CANARY"')})),
        "the Bedrock event stream has a payload that is not a JSON object",
        id="chunk-not-object",
    ),
]


@pytest.mark.parametrize(("wire", "text"), BAD_BEDROCK)
def test_bedrock_refusals_have_fixed_text(wire: bytes, text: str) -> None:
    with pytest.raises(UpstreamProtocolError) as caught:
        read_bedrock_message(only(wire))
    assert str(caught.value) == text
    assert "CANARY" not in str(caught.value)


def test_unknown_event_types_pass_through() -> None:
    # New Bedrock event types (a future citation delta, say) are the observer's call.
    assert read_bedrock_message(only(event("citationDelta", b"{}"))) == BedrockEvent(
        "citationDelta", {}
    )


# --------------------------------------------------------------------------
# Headers


def headers(**values: str) -> Any:
    table = {name.replace("_", "-"): value for name, value in values.items()}
    return lambda name: table.get(name)


def test_the_request_id_header_is_the_id_of_a_body_that_names_none() -> None:
    facts = with_response_headers(ResponseFacts(), headers(x_amzn_requestid="7a1b-4c"))
    assert facts.response_id == "7a1b-4c"
    named = with_response_headers(
        ResponseFacts(response_id="msg_bdrk_1"), headers(x_amzn_requestid="x")
    )
    assert named.response_id == "msg_bdrk_1"
    too_long = with_response_headers(ResponseFacts(), headers(x_amzn_requestid="r" * 300))
    assert too_long.response_id is None


def test_invoke_model_metrics_come_from_its_headers() -> None:
    facts = with_response_headers(
        ResponseFacts(),
        headers(
            x_amzn_bedrock_invocation_latency="412",
            x_amzn_bedrock_input_token_count="91",
            x_amzn_bedrock_output_token_count="9",
        ),
    )
    assert facts.invocation_metrics == InvocationMetrics(91, 9, 412, None)


def test_bad_metric_headers_are_unknown_and_the_bodys_metrics_are_kept() -> None:
    facts = with_response_headers(
        ResponseFacts(),
        headers(x_amzn_bedrock_invocation_latency="-1", x_amzn_bedrock_input_token_count="9" * 40),
    )
    assert facts.invocation_metrics is None
    body = ResponseFacts(invocation_metrics=InvocationMetrics(latency_ms=5))
    kept = with_response_headers(body, headers(x_amzn_bedrock_invocation_latency="412"))
    assert kept.invocation_metrics == InvocationMetrics(latency_ms=5)


def test_other_providers_headers_change_nothing() -> None:
    facts = ResponseFacts(model="gpt-5")
    assert with_response_headers(facts, headers(x_request_id="req_1")) is facts


@pytest.mark.parametrize(
    ("status", "flag"),
    [(None, False), ("success", False), ("error", True), ("failed", None), (1, None)],
)
def test_converse_tool_result_status_is_its_error_flag(status: object, flag: bool | None) -> None:
    from modeltap.apis import bedrock_converse

    result: dict[str, object] = {"toolUseId": "t1", "content": [{"text": "done"}]}
    if status is not None:
        result["status"] = status
    body = {
        "messages": [
            {"role": "user", "content": [{"text": "go"}]},
            {
                "role": "assistant",
                "content": [{"toolUse": {"toolUseId": "t1", "name": "x", "input": {}}}],
            },
            {"role": "user", "content": [{"toolResult": result}]},
        ]
    }
    facts = bedrock_converse.audit_request(
        body, bedrock_converse.match_endpoint("/model/m/converse")
    )
    assert [(r.call_id, r.is_error) for r in facts.tool_results] == [("t1", flag)]
