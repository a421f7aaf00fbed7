"""Bedrock's answers as the observers read them: event streams in their binary
framing (``tests/data/bedrock/``) through
:class:`~modeltap.apis.bedrock_stream.BedrockStreamDecoder` into the API's stream
observer, and the facts Bedrock puts in headers."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest

from modeltap import apis
from modeltap.apis.bedrock_stream import BedrockStreamDecoder, is_eventstream, with_response_headers
from modeltap.evidence.records import InvocationMetrics, ResponseFacts
from modeltap.rules.errors import UpstreamProtocolError
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
def test_is_eventstream(value: str, expected: bool) -> None:
    assert is_eventstream(value) is expected


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
