"""The exchange core on the clouds' wires, alone: signed requests, Bedrock's
event streams and header facts. No proxy, no mitmproxy (the end-to-end tests
with the real clients are in test_proxy_clouds.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from modeltap import apis
from modeltap.apis.anthropic_messages import NAME as API_ANTHROPIC
from modeltap.apis.bedrock_converse import NAME as API_BEDROCK_CONVERSE
from modeltap.apis.bedrock_converse.stream import BedrockStreamDecoder
from modeltap.apis.openai_chat import NAME as API_CHAT
from modeltap.core.body_audit import RequestBody, audit_body
from modeltap.core.exchange import Exchange
from modeltap.core.gate import SESSION_HEADER, RequestHead, take_session
from modeltap.core.notices import Forward
from modeltap.core.observe import StreamTap, stream_framing, with_header_facts
from modeltap.evidence.records import ResponseFacts
from modeltap.rules.errors import Rejected
from modeltap.rules.routing import RouteTable
from modeltap.wire.sse import SSEDecoder
from tests.conftest import Core
from tests.eventstream_frames import chunk, event

MS = 1_000_000
SONNET = "us.anthropic.claude-sonnet-4-5-20250929-v1%3A0"
SIGV4 = (
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/bedrock/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date;x-modeltap-session, Signature=" + "0" * 64
)
CONVERSE = orjson.dumps({"messages": [{"role": "user", "content": [{"text": "Platform?"}]}]})
INVOKE = orjson.dumps(
    {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Platform?"}],
    }
)
CONVERSE_STREAM = f"/bedrock/model/{SONNET}/converse-stream"
REQUEST_ID = "4c1e2b3a-5d6f-4a7b-8c9d-0e1f2a3b4c5d"


@pytest.fixture
def bedrock(core: Core) -> Core:
    """The core with a Bedrock route (reverse mode)."""
    routes = RouteTable.build(["bedrock=https://bedrock-runtime.us-east-1.amazonaws.com"], None)
    core.run.settings = replace(core.run.settings, routes=routes)
    return core


def head(
    target: str, method: str = "POST", *, signed: bool = False, host: str = "127.0.0.1"
) -> RequestHead:
    headers = {"authorization": SIGV4} if signed else {"authorization": "Bearer ABSK-key"}
    return RequestHead(
        id="flow-1",
        method=method,
        target=target,
        scheme="https",
        host=host,
        port=443 if host != "127.0.0.1" else 8787,
        headers=headers,
        fields=tuple((k.encode(), v.encode()) for k, v in headers.items()),
        session="s1",
        signed=signed,
    )


def forwarded(core: Core, target: str, api: str, body: bytes) -> Exchange:
    ex = Exchange.open(core.run, head(target), 0)
    assert ex.reply is None and ex.api == api
    assert isinstance(ex.receive_body(RequestBody(body, {}), 0), Forward)
    return ex


# ---------------------------------------------------------------- signed requests


def test_the_session_header_stays_on_a_signed_request_only() -> None:
    plain = {"authorization": "Bearer k", SESSION_HEADER: "s1"}
    assert take_session(plain, "/model/m/converse") == ("s1", False)
    assert SESSION_HEADER not in plain  # it never goes upstream
    signed = {"authorization": SIGV4, SESSION_HEADER: "s1"}
    assert take_session(signed, "/model/m/converse") == ("s1", True)
    assert signed[SESSION_HEADER] == "s1"  # removing it would break the signature
    presigned = {SESSION_HEADER: "s2"}
    query = "/model/m/invoke?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=00"
    assert take_session(presigned, query) == ("s2", True)
    assert presigned == {SESSION_HEADER: "s2"}


@pytest.mark.parametrize(
    ("target", "method", "api"),
    [
        (f"/bedrock/model/{SONNET}/converse", "POST", API_BEDROCK_CONVERSE),
        (f"/bedrock/model/{SONNET}/invoke-with-response-stream", "POST", API_ANTHROPIC),
        ("/bedrock/inference-profiles", "GET", None),  # it would fail upstream all the same
    ],
)
def test_reverse_mode_refuses_a_signed_request_by_name(
    bedrock: Core, target: str, method: str, api: str | None
) -> None:
    ex = Exchange.open(bedrock.run, head(target, method, signed=True), 3)
    assert ex.reply is not None and ex.reply.status == 400
    assert ("x-amzn-ErrorType", "ValidationException") in ex.reply.headers  # boto3's ClientError
    message = orjson.loads(ex.reply.body)["message"]
    assert "[rule signed_request]" in message and "regular mode" in message
    assert "AWS_BEARER_TOKEN_BEDROCK" in message
    (rejected,) = bedrock.events("rejected")
    assert (rejected["rule"], rejected["api"], rejected["method"]) == (
        "signed_request",
        api,
        method,
    )
    assert bedrock.audit() == [] and "started" not in bedrock.heard.names()


def test_regular_mode_and_a_replay_let_a_signed_request_go(bedrock: Core) -> None:
    run = bedrock.run
    run.settings = replace(run.settings, mode="regular")
    host = "bedrock-runtime.us-east-1.amazonaws.com"
    ex = Exchange.open(run, head(f"/model/{SONNET}/converse", signed=True, host=host), 0)
    assert (ex.reply, ex.api, ex.signed, ex.rerouted) == (None, API_BEDROCK_CONVERSE, True, False)
    assert ex.route is not None and ex.route.provider == "aws.bedrock"
    # A replay's upstream is the recording, which checks no signature.
    run.settings = replace(run.settings, mode="reverse", upstreams_check_signatures=False)
    ex = Exchange.open(run, head(f"/bedrock/model/{SONNET}/converse", signed=True), 0)
    assert (ex.reply, ex.api, ex.signed, ex.rerouted) == (None, API_BEDROCK_CONVERSE, True, True)
    assert bedrock.events("rejected") == []


CHAT_IMAGE = orjson.dumps(
    {
        "model": "openai.gpt-oss-120b-1:0",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "https://x/b.png"}}],
            }
        ],
    }
)


def test_image_detail_never_rewrites_a_signed_body() -> None:
    chat = apis.match_endpoint("/openai/v1/chat/completions")
    facts, rewritten = audit_body(API_CHAT, CHAT_IMAGE, "low", chat)
    assert rewritten is not None and facts.image_details == ("low",)
    with pytest.raises(Rejected) as refused:
        audit_body(API_CHAT, CHAT_IMAGE, "low", chat, signed=True)
    assert refused.value.rule == "signed_request_rewrite"
    # Nothing to rewrite: a signed body goes as it is.
    converse = apis.match_endpoint(f"/model/{SONNET}/converse")
    facts, rewritten = audit_body(API_BEDROCK_CONVERSE, CONVERSE, "low", converse, signed=True)
    assert rewritten is None and facts.model == "us.anthropic.claude-sonnet-4-5-20250929-v1:0"


# ---------------------------------------------------------------- answers


@pytest.mark.parametrize(
    ("content_type", "framing"),
    [
        ("text/event-stream", "sse"),
        ("text/event-stream; charset=utf-8", "sse"),
        ("application/vnd.amazon.eventstream", "eventstream"),
        ("Application/VND.Amazon.EventStream; x=1", "eventstream"),
        ("application/json", None),
        ("", None),
    ],
)
def test_a_responses_content_type_says_how_it_streams(
    content_type: str, framing: str | None
) -> None:
    assert stream_framing(content_type) == framing


def converse_stream_frames() -> list[bytes]:
    def frame(name: str, data: dict[str, Any]) -> bytes:
        return event(name, orjson.dumps(data))

    return [
        frame("messageStart", {"role": "assistant"}),
        frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Platform 2"}}),
        frame("contentBlockStop", {"contentBlockIndex": 0}),
        frame("messageStop", {"stopReason": "end_turn"}),
        frame(
            "metadata",
            {
                "usage": {"inputTokens": 25, "outputTokens": 3, "totalTokens": 28},
                "metrics": {"latencyMs": 280},
            },
        ),
    ]


def test_a_converse_event_stream_is_observed_as_it_passes(bedrock: Core) -> None:
    ex = forwarded(
        bedrock, f"/bedrock/model/{SONNET}/converse-stream", API_BEDROCK_CONVERSE, CONVERSE
    )
    headers = {"content-type": "application/vnd.amazon.eventstream", "x-amzn-requestid": REQUEST_ID}
    tap = ex.started(200, headers, 1 * MS)
    assert isinstance(tap, StreamTap) and isinstance(tap.sse, BedrockStreamDecoder)
    wire = b"".join(converse_stream_frames())
    for piece in (wire[:5], wire[5:77], wire[77:]):  # split anywhere, mid-prelude too
        assert tap(piece) is piece  # every byte goes on unchanged
    assert tap(b"") == b""
    ex.ended(200, None, None, None, 9 * MS)
    (response,) = bedrock.events("response")
    assert response["stream"] and response["evidence_complete"], response["capture_errors"]
    assert (response["usage"]["output_tokens"], response["finish_reasons"]) == (3, ["end_turn"])
    assert response["response_id"] == REQUEST_ID  # Converse bodies name none
    assert response["invocation_metrics"]["latency_ms"] == 280
    assert response["ttft_ms"] is not None


def test_a_broken_event_stream_is_passed_on_and_noted(bedrock: Core) -> None:
    ex = forwarded(
        bedrock, f"/bedrock/model/{SONNET}/converse-stream", API_BEDROCK_CONVERSE, CONVERSE
    )
    tap = ex.started(200, {"content-type": "application/vnd.amazon.eventstream"}, 1)
    assert isinstance(tap, StreamTap)
    first, *_ = converse_stream_frames()
    broken = first[:-1] + bytes([first[-1] ^ 1])  # its message checksum fails
    assert tap(broken) == broken
    ex.ended(200, None, None, None, 2)
    (response,) = bedrock.events("response")
    assert not response["evidence_complete"] and response["capture_errors"]


def test_invoke_models_metrics_come_from_its_headers(bedrock: Core) -> None:
    ex = forwarded(bedrock, f"/bedrock/model/{SONNET}/invoke", API_ANTHROPIC, INVOKE)
    headers = {
        "content-type": "application/json",
        "x-amzn-requestid": REQUEST_ID,
        "x-amzn-bedrock-invocation-latency": "412",
        "x-amzn-bedrock-input-token-count": "25",
        "x-amzn-bedrock-output-token-count": "7",
    }
    assert ex.started(200, headers, 1) is None  # read whole
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "Platform 2"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 25, "output_tokens": 7},
    }
    ex.ended(200, orjson.dumps(body), None, None, 2)
    (response,) = bedrock.events("response")
    assert response["response_id"] == "msg_1"  # the body's id comes first
    assert response["invocation_metrics"] == {
        "input_tokens": 25,
        "output_tokens": 7,
        "latency_ms": 412,
        "first_byte_latency_ms": None,
    }


def test_an_invoke_stream_chunk_is_its_anthropic_event(bedrock: Core) -> None:
    ex = forwarded(
        bedrock, f"/bedrock/model/{SONNET}/invoke-with-response-stream", API_ANTHROPIC, INVOKE
    )
    tap = ex.started(200, {"content-type": "application/vnd.amazon.eventstream"}, 1)
    assert isinstance(tap, StreamTap)
    message = {"id": "msg_2", "model": "claude-x", "usage": {"input_tokens": 25}}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "2"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
         "usage": {"output_tokens": 1}},
        {
            "type": "message_stop",
            "amazon-bedrock-invocationMetrics": {
                "inputTokenCount": 25,
                "outputTokenCount": 1,
                "invocationLatency": 300,
                "firstByteLatency": 120,
            },
        },
    ]  # fmt: skip
    for data in events:
        tap(chunk(data, pad=3))
    tap(b"")
    ex.ended(200, None, None, None, 2)
    (response,) = bedrock.events("response")
    assert response["evidence_complete"], response["capture_errors"]
    assert (response["response_id"], response["finish_reasons"]) == ("msg_2", ["end_turn"])
    assert response["invocation_metrics"]["first_byte_latency_ms"] == 120


def test_headers_say_more_only_on_bedrock() -> None:
    routes = RouteTable.build(["bedrock=https://bedrock-runtime.us-west-2.amazonaws.com"], None)
    bedrock, openai = routes.match("/bedrock/x"), routes.match("/openai/x")
    headers = {"x-amzn-requestid": REQUEST_ID, "x-amzn-bedrock-invocation-latency": "9"}
    facts = ResponseFacts()
    assert with_header_facts(facts, API_ANTHROPIC, bedrock, headers).response_id == REQUEST_ID
    assert with_header_facts(facts, API_BEDROCK_CONVERSE, None, headers).response_id == REQUEST_ID
    assert with_header_facts(facts, API_ANTHROPIC, openai, headers) is facts
    assert with_header_facts(facts, API_ANTHROPIC, bedrock, None) is facts


def test_a_plain_sse_tap_still_reads_sse() -> None:
    tap = StreamTap.observing(API_CHAT, audit_body(API_CHAT, CHAT_IMAGE, None)[0], "")
    assert isinstance(tap.sse, SSEDecoder)
