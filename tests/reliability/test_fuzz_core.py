"""Fuzzing the pure core: no input makes it raise anything but its designated errors.

Every parser and validator the proxy runs on bytes it did not write is fed
arbitrary and adversarial input (API-shaped JSON, deep nesting, huge strings,
invalid UTF-8, lone surrogates). The contract checked everywhere:

- request side: a result, or :class:`Rejected` with a rule of ``RULES`` and a
  message built from fixed text only;
- response side: never raises (bad input becomes ``capture_errors``), except
  :class:`UpstreamProtocolError` where documented (SSE bound, decompression,
  AWS event stream framing and Bedrock's messages in it);
- whatever is accepted can be written: its JSONL line serialises and reads back.

The number of examples is the hypothesis profile's (tests/conftest.py: ``dev``
while working, ``ci`` in CI); docs/RELIABILITY.md says how many that is.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import itertools
import zlib
from pathlib import Path
from typing import Any

import brotli
import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from modeltap.apis import anthropic_messages, json_body, openai_chat, openai_responses
from modeltap.apis.bedrock_converse.stream import (
    BedrockChunk,
    BedrockError,
    BedrockEvent,
    BedrockException,
    read_bedrock_message,
)
from modeltap.apis.openai_responses.websocket import ServerEventObserver, classify_client_message
from modeltap.apis.websocket_mode import Control, Create, WsPolicy
from modeltap.evidence.capture import Capture, decode_event, decode_record, decode_session_end
from modeltap.evidence.records import AuditRecord, ResponseEvent, ResponseFacts, to_json_line
from modeltap.evidence.redaction import redact_path
from modeltap.report import report
from modeltap.rules.errors import RULES, Rejected, UpstreamProtocolError
from modeltap.rules.routing import Route, RouteError, parse_route_spec
from modeltap.wire.decoding import StreamDecompressor, decode_body
from modeltap.wire.eventstream import EventStreamDecoder, EventStreamMessage, Header, HeaderType
from modeltap.wire.sse import SSEDecoder, SSEEvent
from tests.eventstream_frames import damage, decode_frames, encode_message, encode_raw
from tests.reliability.strategies import (
    KEYS,
    WORDS,
    any_text,
    bodies,
    dumps_or_none,
    json_values,
    nested,
    wire_text,
)

try:
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:
    from backports import zstd

MODULES = [openai_chat, openai_responses, anthropic_messages]
MODULE_IDS = ["chat", "responses", "anthropic"]
#: The profile's budget (tests/conftest.py); the API-shaped values are slow to draw.
FUZZ = settings(suppress_health_check=[HealthCheck.too_slow])


def check_rejected(exc: Rejected) -> None:
    """A refusal names a known rule and says nothing it read off the request."""
    assert exc.rule in RULES
    assert exc.message.startswith(f"modeltap refused the request [rule {exc.rule}]: ")
    assert RULES[exc.rule][1] in exc.message


def record_line(facts: Any, raw: bytes, api: str = "x") -> dict[str, Any]:
    """Serialise an accepted request's audit line exactly as the proxy would."""
    record = AuditRecord.build(
        facts,
        request_id="r",
        seq=1,
        run_id="run",
        session_id="s",
        transport="http",
        api=api,
        provider="openai",
        route="stub",
        upstream="http://127.0.0.1:1",
        path="/v1/x",
        body_bytes=len(raw),
        body_sha256="0" * 64,
    )
    line = to_json_line(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    parsed: dict[str, Any] = orjson.loads(line)
    assert decode_record(parsed) == record
    return parsed


def response_line(facts: ResponseFacts) -> dict[str, Any]:
    """Serialise an observed response's events line exactly as the proxy would."""
    event = ResponseEvent(
        ts="t",
        run_id="run",
        session_id="s",
        seq=1,
        api="x",
        transport="http",
        status=200,
        stream=True,
        response_id=facts.response_id,
        model=facts.model,
        usage=facts.usage,
        finish_reasons=facts.finish_reasons,
        tool_calls=facts.tool_calls,
        response_status=facts.status,
        ttfb_ms=None,
        ttft_ms=None,
        duration_ms=None,
        evidence_complete=facts.evidence_complete,
        capture_errors=facts.capture_errors,
    )
    line = to_json_line(event)
    assert line.count(b"\n") == 1
    parsed: dict[str, Any] = orjson.loads(line)
    assert decode_event(parsed) == event
    return parsed


def audit_bytes(module: Any, raw: bytes) -> dict[str, Any] | None:
    """The proxy's request path on raw bytes: parse, rewrite detail, audit, serialise."""
    try:
        body = json_body.parse_json_object(raw)
        module.set_image_detail(body, "low")
        facts = module.audit_request(body)
    except Rejected as exc:
        check_rejected(exc)
        return None
    return record_line(facts, raw)


# ---------------------------------------------------------------- request side


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
@FUZZ
@given(body=bodies(leaf=st.one_of(st.none(), st.booleans(), st.integers(), any_text)))
def test_audit_request_only_rejects(module: Any, body: dict[str, Any]) -> None:
    """Any Python object (lone surrogates included): facts, or Rejected."""
    try:
        facts = module.audit_request(body)
    except Rejected as exc:
        check_rejected(exc)
        return
    assert facts.model == body["model"]


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
@FUZZ
@given(body=bodies())
def test_accepted_wire_bodies_always_give_a_writable_record(
    module: Any, body: dict[str, Any]
) -> None:
    """From bytes on the wire to the audit line: nothing accepted is unwritable."""
    raw = dumps_or_none(body)
    assume(raw is not None)
    assert raw is not None
    audit_bytes(module, raw)


@FUZZ
@given(raw=st.one_of(st.binary(max_size=200), wire_text.map(str.encode)))
def test_parse_json_object_on_arbitrary_bytes(raw: bytes) -> None:
    try:
        value = json_body.parse_json_object(raw)
    except Rejected as exc:
        assert exc.rule in ("invalid_json", "body_not_object", "duplicate_key")
        return
    assert isinstance(value, dict)


BAD_TEXT = [
    b'{"model": "\\ud800", "messages": []}',  # a lone high surrogate escape
    b'{"model": "\\udc00x", "messages": []}',  # a lone low surrogate escape
    b'{"model": "m", "messages": [{"role": "system", "content": "\\ud83d"}]}',
    b'{"model": "\xed\xa0\x80", "messages": []}',  # a surrogate as raw (invalid) UTF-8
    b'{"model": "\xff\xfe", "messages": []}',  # invalid UTF-8
    b'{"model": "m", "messages": [], "x": "\xc3"}',  # a truncated sequence
    b"\xef\xbb\xbf{}",  # a BOM
    b'{"model": "m"}\x00',
    b"",
    b"\x00",
]


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
@pytest.mark.parametrize("raw", BAD_TEXT)
def test_invalid_utf8_and_lone_surrogates_are_refused_as_json(module: Any, raw: bytes) -> None:
    with pytest.raises(Rejected) as exc:
        module.audit_request(json_body.parse_json_object(raw))
    assert exc.value.rule == "invalid_json"


def test_ten_thousand_levels_are_invalid_json_not_a_crash() -> None:
    """orjson stops at 1024 levels with JSONDecodeError: refused as invalid_json."""
    for deep in (nested(10_000), nested(10_000, b'{"a":', b"}", b"1"), nested(1025)):
        with pytest.raises(Rejected) as exc:
            json_body.parse_json_object(b'{"model":"m","messages":' + deep + b"}")
        assert exc.value.rule == "invalid_json"
        with pytest.raises(Rejected) as exc:
            classify_client_message(
                b'{"type":"response.create","input":' + deep + b"}", True, WsPolicy()
            )
        assert exc.value.rule == "ws_invalid_json"


#: Where deep values can sit in each API's body (DEEP is replaced by the nesting).
DEEP_PLACES: dict[str, list[bytes]] = {
    "chat": [
        b'{"model":"m","messages":[{"role":"user","content":DEEP}]}',
        b'{"model":"m","messages":[{"role":"tool","tool_call_id":"c","content":DEEP}]}',
        b'{"model":"m","messages":[],"tools":[{"type":"function","function":{"name":"f","parameters":DEEP}}]}',
        b'{"model":"m","messages":[],"response_format":DEEP}',
    ],
    "responses": [
        b'{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":DEEP}]}',
        b'{"model":"m","input":[{"role":"user","content":DEEP}]}',
        b'{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":DEEP}]}',
        b'{"model":"m","input":"x","metadata":DEEP}',
    ],
    "anthropic": [
        b'{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":DEEP}]}]}',
        b'{"model":"m","messages":[],"thinking":{"type":"enabled","x":DEEP}}',
        b'{"model":"m","messages":[],"tools":[{"name":"f","input_schema":DEEP}]}',
        b'{"model":"m","messages":[],"metadata":DEEP}',
    ],
}  # fmt: skip


@pytest.mark.parametrize("depth", [254, 300, 1000])
@pytest.mark.parametrize("api", list(DEEP_PLACES))
def test_deep_but_parseable_nesting_everywhere(api: str, depth: int) -> None:
    """Between orjson's read limit (1024) and its write limit (254) a value parses
    but cannot be written back: an accepted body must still give a writable record."""
    module = MODULES[MODULE_IDS.index(api)]
    for template in DEEP_PLACES[api]:
        for deep in (nested(depth), nested(depth, b'{"a":', b"}", b"1")):
            audit_bytes(module, template.replace(b"DEEP", deep))


def test_anthropic_tool_results_nested_in_tool_results() -> None:
    """The block reader recurses into tool results; 510 levels is the most 1024 JSON
    levels can hold, and each size stays what was sent (never a silent 0)."""
    raw = (
        b'{"model":"m","messages":[{"role":"user","content":'
        + nested(509, b'[{"type":"tool_result","tool_use_id":"t","content":', b"}]", b'"x"')
        + b"}]}"
    )
    line = audit_bytes(anthropic_messages, raw)
    assert line is not None
    sizes = [r["bytes"] for r in line["tool_results"]]
    assert len(sizes) == 509 and sizes[-1] == 1
    assert all(a > b for a, b in itertools.pairwise(sizes))


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
def test_huge_strings(module: Any) -> None:
    big = "x" * (8 * 1024 * 1024)
    messages = [{"role": "system", "content": big}, {"role": "user", "content": big}]
    body: dict[str, Any] = {"model": "m", "instructions": big, "system": big}
    body["input" if module is openai_responses else "messages"] = messages
    line = audit_bytes(module, orjson.dumps(body))
    assert line is not None and line["model"] == "m"
    # Instructions are hashed, never copied; a model that long is refused by name.
    body["model"] = big
    with pytest.raises(Rejected) as caught:
        module.audit_request(json_body.parse_json_object(orjson.dumps(body)))
    assert caught.value.rule == "value_too_long"


# ---------------------------------------------------------------- response side


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
@FUZZ
@given(body=json_values(), with_facts=st.booleans())
def test_observe_json_never_raises(module: Any, body: Any, with_facts: bool) -> None:
    facts = None
    if with_facts:
        req = {"model": "m", "stream": True, "stream_options": {"include_usage": True}}
        req["input" if module is openai_responses else "messages"] = []
        facts = module.audit_request(req)
    response_line(module.observe_json(body, facts))


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
def test_observe_json_on_deep_bodies(module: Any) -> None:
    for depth in (254, 1000):
        for inner in (
            b'{"content":[{"type":"tool_use","id":"t","name":"f","input":DEEP}],"usage":DEEP}',
            b'{"output":[{"type":"function_call","call_id":"c","name":"f","arguments":DEEP}]}',
            b'{"choices":[{"message":{"tool_calls":[{"id":"c","function":DEEP}]}}]}',
        ):
            body = orjson.loads(inner.replace(b"DEEP", nested(depth, b'{"a":', b"}", b"1")))
            response_line(module.observe_json(body, None))


EVENT_TYPES = [w for w in WORDS if "." in w or "_" in w]
sse_events = st.builds(
    SSEEvent,
    event=st.one_of(st.none(), st.sampled_from(EVENT_TYPES)),
    data=st.one_of(
        json_values().map(lambda v: (dumps_or_none(v) or b"null").decode()),
        st.fixed_dictionaries(
            {"type": st.sampled_from(EVENT_TYPES)},
            optional={k: json_values(max_leaves=8) for k in KEYS[:50:3] if k != "type"},
        ).map(lambda v: (dumps_or_none(v) or b"{}").decode()),
        any_text,
        st.just("[DONE]"),
    ),
)


@pytest.mark.parametrize("module", MODULES, ids=MODULE_IDS)
@FUZZ
@given(
    events=st.lists(sse_events, max_size=25),
    error=st.one_of(st.none(), any_text),
    include_usage=st.booleans(),
)
def test_stream_observer_never_raises(
    module: Any, events: list[SSEEvent], error: str | None, include_usage: bool
) -> None:
    req: dict[str, Any] = {"model": "m", "stream": True}
    req["input" if module is openai_responses else "messages"] = []
    if include_usage:
        req["stream_options"] = {"include_usage": True}
    observer = module.StreamObserver(module.audit_request(req))
    for event in events:
        assert observer.feed(event) in (True, False)
    facts = observer.finish(error)
    if error is not None and not any("\ud800" <= c <= "\udfff" for c in error):
        # The caller's reason is kept, but only the caller's text, never event data.
        response_line(facts)
    if facts.evidence_complete:
        assert facts.capture_errors == ()


# ---------------------------------------------------------------- SSE and decoding


chunks = st.lists(st.binary(max_size=40), max_size=20)
sse_like = st.lists(
    st.sampled_from(
        [b"data: x", b"data:", b"event: e", b"id: 1", b": c", b"\n", b"\r", b"\r\n", b"retry: 5",
         b"\xef\xbb\xbf", b"\xff", b"\xe2\x82", b"data: {\"a\":1}", b"\x00", b"id: \x00"]
    ),
    max_size=40,
).map(b"".join)  # fmt: skip


def decode_all(parts: list[bytes], bound: int = 1 << 20) -> list[SSEEvent]:
    decoder = SSEDecoder(max_pending_bytes=bound)
    events = [e for part in parts for e in decoder.feed(part)]
    return events + decoder.close()


@FUZZ
@given(data=st.one_of(st.binary(max_size=300), sse_like), cuts=st.lists(st.integers(0, 300)))
def test_sse_split_anywhere_gives_the_same_events(data: bytes, cuts: list[int]) -> None:
    """Chunking never changes the events: a \\r\\n or a UTF-8 character split
    between reads is one line end, one character."""
    whole = decode_all([data])
    points = sorted({min(c, len(data)) for c in cuts})
    parts = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert decode_all(parts) == whole
    assert decode_all([data[i : i + 1] for i in range(len(data))]) == whole


@FUZZ
@given(data=st.one_of(st.binary(max_size=400), sse_like), bound=st.integers(1, 64))
def test_sse_bound_raises_only_upstream_protocol_error(data: bytes, bound: int) -> None:
    decoder = SSEDecoder(max_pending_bytes=bound)
    try:
        for i in range(0, len(data), 7):
            decoder.feed(data[i : i + 7])
    except UpstreamProtocolError:
        assert decoder.closed
        with pytest.raises(RuntimeError):
            decoder.feed(b"data: more\n\n")
    assert decoder.pending_bytes >= 0


def test_sse_line_that_never_ends_is_bounded() -> None:
    decoder = SSEDecoder(max_pending_bytes=1 << 20)
    with pytest.raises(UpstreamProtocolError):
        for _ in range(100):
            decoder.feed(b"data: " + b"x" * 65536)
    assert decoder.closed


CODINGS = ["gzip", "x-gzip", "deflate", "br", "zstd", "identity", ""]


def encode(data: bytes, coding: str) -> bytes:
    if coding in ("gzip", "x-gzip"):
        return gzip.compress(data)
    if coding == "deflate":
        return zlib.compress(data)
    if coding == "br":
        return bytes(brotli.compress(data))
    if coding == "zstd":
        return bytes(zstd.compress(data))
    return data


@FUZZ
@given(
    coding=st.lists(st.sampled_from(CODINGS), min_size=1, max_size=3),
    data=st.binary(max_size=400),
    cut=st.integers(0, 50),
    step=st.integers(1, 64),
)
def test_stream_decompressor_round_trip_and_truncation(
    coding: list[str], data: bytes, cut: int, step: int
) -> None:
    encoded = data
    for c in coding:
        encoded = encode(encoded, c)
    header = ", ".join(coding)
    decoder = StreamDecompressor(header)
    out = b"".join(decoder.feed(encoded[i : i + step]) for i in range(0, len(encoded), step))
    assert out + decoder.flush() == data
    # Cut short: an error or a prefix of the data, never anything else.
    short = encoded[: max(0, len(encoded) - cut)]
    try:
        got = decode_body(short, header)
    except UpstreamProtocolError:
        return
    assert data.startswith(got)


@FUZZ
@given(
    coding=st.one_of(st.sampled_from(CODINGS), any_text.filter(lambda s: "\x00" not in s)),
    data=st.binary(max_size=300),
    step=st.integers(1, 64),
)
def test_stream_decompressor_on_garbage(coding: str, data: bytes, step: int) -> None:
    try:
        decoder = StreamDecompressor(coding)
        for i in range(0, len(data), step):
            decoder.feed(data[i : i + step])
        decoder.flush()
    except UpstreamProtocolError as exc:
        assert len(str(exc)) < 200  # names the coding (shortened), never the data


# ---------------------------------------------------------------- AWS event streams

#: Every text the event stream decoder raises: fixed, so no byte of the stream
#: can reach a record through one (the size bound is the decoder's own number).
EVENTSTREAM_ERRORS = {
    "the event stream is corrupt: a message's prelude fails its checksum",
    "the event stream is corrupt: a message fails its checksum",
    "the event stream is corrupt: a message is shorter than its prelude and checksum",
    "the event stream is corrupt: a message's headers are longer than the message",
    "the event stream has a message whose headers are longer than 131072 bytes",
    "the event stream has a malformed message header",
    "the event stream has a message header of an unknown type",
    "the event stream has a message header that is not valid UTF-8",
    "the event stream has a message that repeats a header name",
    "the event stream ended in the middle of a message",
    "the event stream has a message longer than 2048 bytes",
}
BEDROCK_ERRORS = {
    "the Bedrock event stream has a message without a type",
    "the Bedrock event stream has a message of an unknown type",
    "the Bedrock event stream has a payload that is not a JSON object",
    "the Bedrock event stream has a payload longer than 1048576 bytes",
    "the Bedrock event stream has a chunk without a 'bytes' text",
    "the Bedrock event stream has a chunk whose 'bytes' is not base64 of UTF-8 text",
    *(
        f"the Bedrock event stream has a {name} header that is not text"
        for name in (":message-type", ":event-type", ":exception-type", ":error-code",
                     ":error-message")
    ),
    *(
        f"the Bedrock event stream has a message without {name}"
        for name in (":event-type", ":exception-type", ":error-code")
    ),
}  # fmt: skip

BEDROCK_EXTRA_HEADERS = [":error-message", ":content-type", "x-amzn-requestid"]
BEDROCK_WORDS = ["event", "exception", "error", "chunk", "messageStart", "contentBlockDelta",
                 "metadata", "throttlingException", "application/json", ""]  # fmt: skip


#: The header each message type requires.
BEDROCK_REQUIRED = {"event": ":event-type", "exception": ":exception-type", "error": ":error-code"}


@st.composite
def bedrock_headers(draw: st.DrawFn) -> tuple[Header, ...]:
    """Bedrock's string headers, mostly as it sends them; now and then missing, of
    another type, or with values from elsewhere."""

    def usually(common: list[str]) -> str:
        return draw(st.sampled_from(common) if draw(st.integers(0, 7)) else wire_text)

    kind = usually(["event", "event", "event", "exception", "error"])
    pairs = [(":message-type", kind)] if draw(st.integers(0, 9)) else []
    if draw(st.integers(0, 9)):
        name = BEDROCK_REQUIRED.get(kind, ":event-type")
        pairs.append((name, usually(["chunk", "chunk", *BEDROCK_WORDS])))
    for name in draw(st.lists(st.sampled_from(BEDROCK_EXTRA_HEADERS), max_size=2)):
        pairs.append((name, draw(st.sampled_from(BEDROCK_WORDS))))
    headers: dict[str, Header] = {}
    for name, value in pairs:
        headers[name] = draw(
            st.sampled_from(
                [
                    *[Header(name, HeaderType.STRING, value)] * 12,
                    Header(name, HeaderType.BOOL_TRUE, True),
                    Header(name, HeaderType.INTEGER, 7),
                    Header(name, HeaderType.BYTE_ARRAY, value.encode("utf-8", "replace")),
                ]
            )
        )
    return tuple(headers.values())


def json_bytes(value: Any) -> bytes:
    return dumps_or_none(value) or b"{}"


bedrock_payloads = st.one_of(
    json_values(max_leaves=8).map(json_bytes),
    st.fixed_dictionaries(
        {
            "bytes": json_values(max_leaves=8).map(
                lambda v: base64.b64encode(json_bytes(v)).decode()
            )
        },
        optional={"p": st.just("abcdef")},
    ).map(json_bytes),
    st.fixed_dictionaries({"bytes": st.one_of(wire_text, st.integers())}).map(json_bytes),
    st.binary(max_size=60),
)
bedrock_messages = st.builds(
    EventStreamMessage, headers=bedrock_headers(), payload=bedrock_payloads
)


HEADER_PIECES = st.sampled_from(
    [b"\x01a\x00", b"\x01a\x01", b"\x01b\x04\x00\x00\x00\x07", b"\x01c\x07\x00\x02ok",
     b"\x01d\x06\x00\x01\xff", b"\x01e\x09" + b"\x00" * 16, b"\x01f\x05" + b"\x00" * 8,
     b"\x01g\x07\x00\x02\xc3\x28", b"\x01h\x0a", b"\x00\x00", b"\x01\xff\x00"]
)  # fmt: skip


@st.composite
def eventstream_bytes(draw: st.DrawFn) -> bytes:
    """Bedrock-shaped frames, then damaged (a bit, a cut, bytes in or out), or raw bytes."""
    choice = draw(st.integers(0, 5))
    if choice == 0:
        return draw(st.binary(max_size=200))
    frames = draw(st.lists(bedrock_messages, max_size=4))
    encoded = [encode_message(m.headers, m.payload) for m in frames]
    if choice == 1:
        # A headers block of valid headers and stray bytes, under correct CRCs:
        # only the header parser can catch it.
        block = draw(st.lists(st.one_of(HEADER_PIECES, st.binary(min_size=1, max_size=4))))
        encoded.insert(draw(st.integers(0, len(encoded))), encode_raw(b"".join(block), b"{}"))
    return damage(draw, b"".join(encoded), rounds=2, most=12)


def eventstream_outcome(parts: list[bytes]) -> tuple[list[EventStreamMessage], str | None]:
    """The messages, then the error text (if any), and the decoder refuses more after it."""
    decoder = EventStreamDecoder(max_message_bytes=2048)
    got, error = decode_frames(decoder, parts)
    if error is not None:
        assert decoder.closed
        with pytest.raises(RuntimeError):
            decoder.feed(b"\x00")
    return got, error


@FUZZ
@given(data=eventstream_bytes(), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_eventstream_decoder_fixed_errors_and_same_outcome_however_split(
    data: bytes, cuts: list[int]
) -> None:
    whole = eventstream_outcome([data])
    assert whole[1] is None or whole[1] in EVENTSTREAM_ERRORS
    points = sorted({min(c, len(data)) for c in cuts})
    parts = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert eventstream_outcome(parts) == whole
    assert eventstream_outcome([data[i : i + 1] for i in range(len(data))]) == whole


@FUZZ
@given(message=bedrock_messages)
def test_read_bedrock_message_only_raises_fixed_upstream_errors(
    message: EventStreamMessage,
) -> None:
    try:
        meaning = read_bedrock_message(message)
    except UpstreamProtocolError as exc:
        assert str(exc) in BEDROCK_ERRORS
        return
    kind = message.get(":message-type")
    if isinstance(meaning, BedrockChunk):
        assert message.get(":event-type") == "chunk" and isinstance(meaning.event, dict)
        assert orjson.loads(meaning.data) == meaning.event
    elif isinstance(meaning, BedrockEvent):
        assert kind == "event" and isinstance(meaning.body, dict)
    elif isinstance(meaning, BedrockException):
        assert kind == "exception" and meaning.exception_type
    else:
        assert isinstance(meaning, BedrockError) and kind == "error" and meaning.error_code


# ---------------------------------------------------------------- WebSocket


policies = st.builds(
    WsPolicy,
    continuation=st.sampled_from(["explicit", "as-sent"]),
    allow=st.frozensets(st.sampled_from(["response.processed", "response.cancel", "x"])),
)


@st.composite
def ws_frames(draw: st.DrawFn) -> bytes | str:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.binary(max_size=120))
    if kind == 1:
        return draw(any_text)
    body = draw(bodies())
    body["type"] = draw(st.sampled_from(["response.create", "response.processed", "x", 1]))
    if draw(st.booleans()):
        body["previous_response_id"] = draw(st.one_of(st.none(), st.just("resp_1")))
    raw = dumps_or_none(body) or b"{}"
    return raw.decode() if kind == 3 else raw


@FUZZ
@given(data=ws_frames(), is_text=st.booleans(), policy=policies)
def test_classify_client_message_only_rejects(
    data: bytes | str, is_text: bool, policy: WsPolicy
) -> None:
    try:
        seen = classify_client_message(data, is_text, policy)
    except Rejected as exc:
        check_rejected(exc)
        return
    except UnicodeEncodeError:
        # A str frame holding a lone surrogate: mitmproxy hands us bytes, so only
        # direct callers can pass one. It must not be accepted either.
        assert isinstance(data, str)
        pytest.fail("a str frame with a lone surrogate raised UnicodeEncodeError")
    if isinstance(seen, Control):
        assert seen.type in policy.allow
    else:
        assert isinstance(seen, Create) and seen.facts.stream is True
        raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
        record_line(seen.facts, raw)


ws_server = st.one_of(
    st.binary(max_size=80),
    any_text,
    sse_events.map(lambda e: e.data),
)


@FUZZ
@given(
    script=st.lists(
        st.one_of(st.tuples(st.just("expect"), st.integers(1, 9)), ws_server), max_size=30
    ),
    reason=any_text,
)
def test_server_event_observer_never_raises(script: list[Any], reason: str) -> None:
    observer = ServerEventObserver()
    facts = openai_responses.audit_request({"model": "m", "input": []})
    finished = 0
    expected = 0
    for step in script:
        if isinstance(step, tuple):
            observer.expect(step[1], facts)
            expected += 1
        else:
            seen = observer.feed(step)
            finished += seen.finished is not None
            if seen.finished is not None:
                response_line(seen.finished)
    closed = observer.close(reason)
    # Every forwarded response.create is answered exactly once.
    assert finished + len(closed) == expected
    assert observer.pending == 0
    assert all(not done.facts.evidence_complete for done in closed)


# ---------------------------------------------------------------- routing, redaction


@FUZZ
@given(
    spec=st.one_of(
        any_text,
        st.tuples(
            st.sampled_from(["a", "x.y", "", "a b", "é"]),
            st.sampled_from(["http://", "https://", "ftp://", "", "http://[", "http://u:p@"]),
            st.sampled_from(["127.0.0.1", "[::1]", "[::1", "h", "", "exa mple"]),
            st.sampled_from(["", ":0", ":80", ":99999", ":x", ":-1", ":٣"]),
            st.sampled_from(["", "/", "/base/", "?q=1", "#f", "/%00"]),
        ).map(lambda t: f"{t[0]}={t[1]}{t[2]}{t[3]}{t[4]}"),
    )
)
def test_parse_route_spec_only_raises_route_error(spec: str) -> None:
    try:
        route = parse_route_spec(spec)
    except RouteError:
        return
    assert isinstance(route, Route)
    assert route.url
    assert route.upstream_path(route.prefix + "/v1/x").endswith("/v1/x")


SECRET_NAMES = ["key", "api_key", "api-key", "apikey", "KEY", "Api_Key", "access_token", "token"]
secret_values = st.text(
    alphabet=st.characters(codec="ascii", exclude_characters="&#"), min_size=6, max_size=30
).map(lambda s: "SECRET" + s)


@FUZZ
@given(
    path=st.text(max_size=30).filter(lambda p: "SECRET" not in p),
    params=st.lists(
        st.tuples(st.one_of(st.sampled_from(SECRET_NAMES), st.just("q")), secret_values),
        min_size=1,
        max_size=4,
    ),
)
def test_redact_path_removes_every_secret_value(path: str, params: list[tuple[str, str]]) -> None:
    params = [(n, f"{v}{i}") for i, (n, v) in enumerate(params)]  # distinct values
    query = "&".join(f"{name}={value}" for name, value in params)
    redacted = redact_path(f"/{path.replace('?', '').replace('#', '')}?{query}")
    for name, value in params:
        if name != "q":
            assert value not in redacted


@FUZZ
@given(value=json_values())
def test_tool_result_size_matches_what_orjson_writes(value: Any) -> None:
    encoded = dumps_or_none(value)
    assume(encoded is not None and not isinstance(value, str))
    assert json_body._compact_json_size(value) == len(encoded or b"")


@FUZZ
@given(path=any_text)
def test_redact_path_never_raises(path: str) -> None:
    assert isinstance(redact_path(path), str)


# ---------------------------------------------------------------- reading captures


_GOOD_RECORD = {
    "request_id": "r", "model": "m", "tool_names": ["f"], "reasoning_effort": None,
    "thinking": None, "image_details": [], "image_count": 0, "instructions_sha256": "0",
    "seq": 1, "run_id": "run", "session_id": "s", "ts": "2025-06-01T12:00:00.000Z",
    "transport": "http", "api": "openai.responses", "route": "r", "upstream": "u",
    "path": "/v1/responses", "stream": False, "hosted_tools": [], "tool_results": [],
    "previous_response_id": None, "generate": None, "omitted_settings": [],
    "body_bytes": 1, "body_sha256": "0",
}  # fmt: skip
_GOOD_EVENT = {
    "kind": "response", "ts": "2025-06-01T12:00:01.000Z", "run_id": "run",
    "session_id": "s", "seq": 1, "request_id": "r", "api": "openai.responses",
    "transport": "http", "status": 200, "stream": False, "response_id": "x", "model": "m",
    "usage": {"input_tokens": 1}, "finish_reasons": None,
    "tool_calls": [{"call_id": "c", "name": "f", "arguments": "{}"}],
    "response_status": None, "ttfb_ms": 1.0, "ttft_ms": None, "duration_ms": 2.0,
    "evidence_complete": True, "capture_errors": [],
}  # fmt: skip
_KINDS = ["response", "error", "rejected", "unaudited", "ws_open", "ws_close", "ws_control", "new"]


@st.composite
def capture_lines(draw: st.DrawFn, good: dict[str, Any]) -> bytes:
    """A line that is mostly a real record, with fields changed, removed or garbled."""
    line = dict(good)
    for key in draw(st.lists(st.sampled_from(sorted(good)), max_size=4)):
        if draw(st.booleans()):
            line.pop(key, None)
        else:
            line[key] = draw(json_values(max_leaves=6))
    if "kind" in good and draw(st.booleans()):
        line["kind"] = draw(st.sampled_from(_KINDS))
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=60)).replace(b"\n", b"")
    return dumps_or_none(line) or b"{}"


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    audit=st.lists(capture_lines(_GOOD_RECORD), max_size=6),
    events=st.lists(capture_lines(_GOOD_EVENT), max_size=6),
    torn=st.booleans(),
)
def test_capture_load_and_report_never_raise(
    tmp_path_factory: pytest.TempPathFactory, audit: list[bytes], events: list[bytes], torn: bool
) -> None:
    root = tmp_path_factory.mktemp("cap")
    (root / "audit.jsonl").write_bytes(b"".join(line + b"\n" for line in audit))
    tail = b'{"kind":"resp' if torn else b""
    (root / "events.jsonl").write_bytes(b"".join(line + b"\n" for line in events) + tail)
    capture = Capture.load(root)
    if torn:
        assert any("torn" in e.message for e in capture.load_errors)
    capture.coverage, capture.capture_errors, capture.tool_calls, capture.usage  # noqa: B018
    capture.tools_advertised(), capture.tool_was_called("f")
    text = report.render_text(report.build_report(capture))
    assert isinstance(text, str)
    orjson.dumps(report.build_report(capture))


@FUZZ
@given(value=json_values())
def test_decoders_raise_only_value_error(value: Any) -> None:
    for decode in (decode_record, decode_event, decode_session_end):
        with contextlib.suppress(ValueError):
            decode(value)


def test_capture_load_on_a_binary_file(tmp_path: Path) -> None:
    (tmp_path / "audit.jsonl").write_bytes(bytes(range(256)) * 4)
    capture = Capture.load(tmp_path)
    assert capture.records == () and capture.load_errors
