"""Tests for modeltap.wire.eventstream: the AWS event stream decoder and Bedrock's meaning.

Frames come from three writers: our test encoder (``tests/eventstream_frames``),
AWS's own smithy-aws-event-stream encoder, and the binary wire samples in
``tests/data/bedrock/``. botocore's ``EventStreamBuffer`` is the reference
decoder: whatever both accept, they must decode alike.
"""

from __future__ import annotations

import datetime
import itertools
import struct
import tracemalloc
import uuid
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import given
from hypothesis import strategies as st
from smithy_aws_event_stream.events import Byte, EventMessage, Long, Short

from modeltap.rules.errors import UpstreamProtocolError
from modeltap.wire.eventstream import (
    MAX_HEADERS_BYTES,
    MAX_MESSAGE_BYTES,
    EventStreamDecoder,
    EventStreamMessage,
    Header,
    HeaderType,
)
from tests.eventstream_frames import (
    SAMPLES,
    chunk,
    damage,
    decode_frames,
    encode_message,
    encode_raw,
    event,
    exception,
    sample_bytes,
)

# ---------------------------------------------------------------- helpers


def decode_chunks(chunks: list[bytes], **kwargs: int) -> list[EventStreamMessage]:
    """Feed ``chunks`` in order, close, and return every message."""
    decoder = EventStreamDecoder(**kwargs)
    messages = [m for c in chunks for m in decoder.feed(c)]
    return messages + decoder.close()


def decode(stream: bytes) -> list[EventStreamMessage]:
    return decode_chunks([stream])


def byte_by_byte(stream: bytes) -> list[bytes]:
    return [stream[i : i + 1] for i in range(len(stream))]


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(stream)) for c in cuts})
    bounds = [0, *points, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def as_botocore(message: EventStreamMessage) -> tuple[dict[str, Any], bytes]:
    """A message as botocore reports it: UUIDs as their 16 bytes, the rest as is."""
    headers = {
        h.name: h.value.bytes if isinstance(h.value, uuid.UUID) else h.value
        for h in message.headers
    }
    return headers, message.payload


def botocore_decode(stream: bytes, step: int = 7) -> list[tuple[dict[str, Any], bytes]]:
    buffer = EventStreamBuffer()
    out = []
    for i in range(0, len(stream), step):
        buffer.add_data(stream[i : i + step])
        out += [(dict(m.headers), bytes(m.payload)) for m in buffer]
    return out


def raises_text(chunks: list[bytes], text: str) -> EventStreamDecoder:
    """Feed ``chunks`` then close, expecting an UpstreamProtocolError saying ``text``."""
    decoder = EventStreamDecoder()
    with pytest.raises(UpstreamProtocolError) as caught:
        for c in chunks:
            decoder.feed(c)
        decoder.close()
    assert str(caught.value) == text
    assert decoder.closed
    return decoder


def prelude(total: int, headers_length: int) -> bytes:
    """A prelude with a correct CRC, whatever the lengths say."""
    head = struct.pack(">II", total, headers_length)
    return head + struct.pack(">I", zlib.crc32(head))


# ---------------------------------------------------------------- strategies

_INT_RANGES = {
    HeaderType.BYTE: 8,
    HeaderType.SHORT: 16,
    HeaderType.INTEGER: 32,
    HeaderType.LONG: 64,
    HeaderType.TIMESTAMP: 64,
}


def header_values(kind: HeaderType) -> st.SearchStrategy[Any]:
    if kind == HeaderType.BOOL_TRUE:
        return st.just(True)
    if kind == HeaderType.BOOL_FALSE:
        return st.just(False)
    if kind in _INT_RANGES:
        bound = 1 << (_INT_RANGES[kind] - 1)
        return st.integers(-bound, bound - 1)
    if kind == HeaderType.BYTE_ARRAY:
        return st.binary(max_size=40)
    if kind == HeaderType.STRING:
        return st.text(max_size=40)
    return st.uuids()


header_names = st.one_of(
    st.sampled_from([":event-type", ":message-type", ":content-type", ":exception-type", "x"]),
    st.text(max_size=20),
)
one_header = st.tuples(header_names, st.sampled_from(list(HeaderType))).flatmap(
    lambda nk: header_values(nk[1]).map(lambda v: Header(nk[0], nk[1], v))
)
messages = st.builds(
    EventStreamMessage,
    headers=st.lists(one_header, max_size=6, unique_by=lambda h: h.name).map(tuple),
    payload=st.binary(max_size=200),
)


def encode(message: EventStreamMessage) -> bytes:
    return encode_message(message.headers, message.payload)


# ---------------------------------------------------------------- wire samples


def sample_paths() -> list[Path]:
    return sorted(SAMPLES.glob("*.json"))


@pytest.fixture(params=sample_paths(), ids=lambda p: p.stem)
def sample(request: pytest.FixtureRequest) -> tuple[dict[str, Any], bytes]:
    path: Path = request.param
    return orjson.loads(path.read_bytes()), path.with_suffix(".eventstream").read_bytes()


def test_there_are_samples_of_both_bedrock_streams() -> None:
    names = {p.stem for p in sample_paths()}
    assert {"converse_stream_tool_use", "invoke_stream_thinking_text"} <= names
    assert all(p.with_suffix(".eventstream").exists() for p in sample_paths())


def test_sample_bytes_are_what_their_json_says(sample: tuple[dict[str, Any], bytes]) -> None:
    description, wire = sample
    assert wire == sample_bytes(description)  # `python -m tests.eventstream_frames` rewrites


def test_sample_decodes_to_its_messages(sample: tuple[dict[str, Any], bytes]) -> None:
    description, wire = sample
    got = decode(wire)
    assert len(got) == len(description["messages"])
    for message, expected in zip(got, description["messages"], strict=True):
        assert {h.name: h.value for h in message.headers} == expected["headers"]
        assert [h.type for h in message.headers] == [HeaderType.STRING] * len(message.headers)
        assert orjson.loads(message.payload) == expected["payload"]


def test_sample_in_every_split_and_byte_by_byte(sample: tuple[dict[str, Any], bytes]) -> None:
    _, wire = sample
    whole = decode(wire)
    for cut in range(len(wire) + 1):
        assert decode_chunks([wire[:cut], wire[cut:]]) == whole, cut
    assert decode_chunks(byte_by_byte(wire)) == whole


def test_sample_agrees_with_botocore(sample: tuple[dict[str, Any], bytes]) -> None:
    _, wire = sample
    assert [as_botocore(m) for m in decode(wire)] == botocore_decode(wire)


def test_messages_come_out_as_soon_as_complete() -> None:
    first, second = event("messageStart", b'{"role":"assistant"}'), event("messageStop", b"{}")
    decoder = EventStreamDecoder()
    assert decoder.feed(first[:-1]) == []
    assert decoder.pending_bytes == len(first) - 1
    assert len(decoder.feed(first[-1:] + second[:5])) == 1
    assert decoder.pending_bytes == 5
    assert len(decoder.feed(second[5:])) == 1
    assert decoder.pending_bytes == 0
    assert decoder.close() == []


def test_bytes_like_input() -> None:
    wire = chunk({"type": "ping"})
    expected = decode(wire)
    assert decode_chunks([bytearray(wire)]) == expected
    assert decode_chunks([memoryview(wire)[:20], memoryview(wire)[20:]]) == expected


# ---------------------------------------------------------------- every header type


EVERY_TYPE = (
    Header("t", HeaderType.BOOL_TRUE, True),
    Header("f", HeaderType.BOOL_FALSE, False),
    Header("byte", HeaderType.BYTE, -128),
    Header("short", HeaderType.SHORT, 32767),
    Header("int", HeaderType.INTEGER, -(2**31)),
    Header("long", HeaderType.LONG, 2**63 - 1),
    Header("bytes", HeaderType.BYTE_ARRAY, b"\x00\xff" * 10),
    Header("string", HeaderType.STRING, "caf\u00e9 \U0001f600"),
    Header("empty", HeaderType.STRING, ""),
    Header("ts", HeaderType.TIMESTAMP, 1_735_776_000_123),
    Header("uuid", HeaderType.UUID, uuid.UUID("12345678-1234-5678-1234-567812345678")),
    Header("", HeaderType.INTEGER, 0),  # an empty name, which every AWS decoder takes
    Header("n" * 255, HeaderType.STRING, "x" * 0xFFFF),  # the longest name and value
)


def test_every_header_type_round_trips_and_matches_botocore() -> None:
    message = EventStreamMessage(EVERY_TYPE, b"payload")
    wire = encode(message)
    assert decode(wire) == [message]
    assert [as_botocore(message)] == botocore_decode(wire)
    assert message.get("uuid") == uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert message.get("f") is False
    assert message.get("missing") is None


def smithy_headers(headers: tuple[Header, ...]) -> tuple[dict[str, Any], tuple[Header, ...]]:
    """The same headers for smithy's encoder, and what they decode to.

    Smithy takes timestamps as datetimes (written as ``int(seconds * 1000)``).
    """
    sized = {HeaderType.BYTE: Byte, HeaderType.SHORT: Short, HeaderType.LONG: Long}
    values: dict[str, Any] = {}
    expected: list[Header] = []
    for h in headers:
        value: Any = h.value
        if h.type in sized:
            value = sized[h.type](h.value)
        elif h.type == HeaderType.TIMESTAMP:
            assert isinstance(h.value, int)
            value = datetime.datetime.fromtimestamp(h.value / 1000, datetime.UTC)
            h = Header(h.name, h.type, int(value.timestamp() * 1000))
        values[h.name] = value
        expected.append(h)
    return values, tuple(expected)


def test_every_header_type_from_smithys_encoder() -> None:
    headers = tuple(h for h in EVERY_TYPE if h.name not in ("string", "n" * 255))
    values, expected = smithy_headers(headers)
    wire = EventMessage(headers=values, payload=b"p").encode()
    assert decode(wire) == [EventStreamMessage(expected, b"p")]


# ---------------------------------------------------------------- properties


@given(batch=st.lists(messages, max_size=5), cuts=st.lists(st.integers(0, 2000), max_size=30))
def test_any_split_gives_the_same_messages(
    batch: list[EventStreamMessage], cuts: list[int]
) -> None:
    wire = b"".join(encode(m) for m in batch)
    assert decode_chunks(split(wire, cuts)) == batch
    assert decode_chunks(byte_by_byte(wire)) == batch


@given(batch=st.lists(messages, max_size=5), step=st.integers(1, 64))
def test_botocore_decodes_the_same(batch: list[EventStreamMessage], step: int) -> None:
    wire = b"".join(encode(m) for m in batch)
    assert [as_botocore(m) for m in decode(wire)] == botocore_decode(wire, step)


timestamps = st.integers(-(10**12), 10**13)  # 1938 to 2286, in ms: datetimes can hold them


@given(
    batch=st.lists(messages, max_size=4),
    cuts=st.lists(st.integers(0, 1500), max_size=10),
    ts=timestamps,
)
def test_smithys_encoder_decodes_the_same(
    batch: list[EventStreamMessage], cuts: list[int], ts: int
) -> None:
    wire, expected = b"", []
    for message in batch:
        # A timestamp in a range datetimes hold, as smithy needs one.
        headers = tuple(
            Header(h.name, h.type, ts) if h.type == HeaderType.TIMESTAMP else h
            for h in message.headers
        )
        values, decoded = smithy_headers(headers)
        wire += EventMessage(headers=values, payload=message.payload).encode()
        expected.append(EventStreamMessage(decoded, message.payload))
    assert decode_chunks(split(wire, cuts)) == expected


def test_every_single_bit_flip_is_refused() -> None:
    """CRC32 catches every one-bit error: in the lengths, headers, payload or a CRC."""
    wire = exception("throttlingException", b'{"message":"slow down"}') + event("x", b"{}")
    for bit in range(len(wire) * 8):
        damaged = bytearray(wire)
        damaged[bit // 8] ^= 1 << (bit % 8)
        decoder = EventStreamDecoder()
        with pytest.raises(UpstreamProtocolError):
            decoder.feed(bytes(damaged))
            decoder.close()


# ---------------------------------------------------------------- corruption, one by one

MESSAGE = event("contentBlockDelta", b'{"contentBlockIndex":0,"delta":{"text":"SECRET-CANARY"}}')


def test_corrupt_prelude_crc() -> None:
    damaged = bytearray(MESSAGE)
    damaged[9] ^= 0x40
    # Refused as soon as the 12 prelude bytes are in, before the "length" is believed.
    raises_text(
        [bytes(damaged[:12])], "the event stream is corrupt: a message's prelude fails its checksum"
    )


def test_corrupt_message_crc_and_payload() -> None:
    for index in (len(MESSAGE) - 1, 40, len(MESSAGE) - 8):
        damaged = bytearray(MESSAGE)
        damaged[index] ^= 0x01
        raises_text([bytes(damaged)], "the event stream is corrupt: a message fails its checksum")


def test_cut_mid_message_is_refused_at_close() -> None:
    for cut in (1, 11, 12, 13, len(MESSAGE) - 1):
        decoder = EventStreamDecoder()
        assert decoder.feed(MESSAGE + MESSAGE[:cut]) != []
        assert decoder.pending_bytes == cut
        with pytest.raises(UpstreamProtocolError) as caught:
            decoder.close()
        assert str(caught.value) == "the event stream ended in the middle of a message"
        assert decoder.pending_bytes == cut  # still reported; the buffer itself is freed
        assert decoder.close() == []  # a second close is quiet


def test_empty_stream_and_clean_end() -> None:
    assert decode(b"") == []
    assert decode(MESSAGE * 3) == decode(MESSAGE) * 3


def test_too_long_message_is_refused_at_its_prelude() -> None:
    decoder = EventStreamDecoder(max_message_bytes=1000)
    assert decoder.feed(prelude(1001, 0)[:11]) == []
    with pytest.raises(UpstreamProtocolError) as caught:
        decoder.feed(prelude(1001, 0)[11:])
    assert str(caught.value) == "the event stream has a message longer than 1000 bytes"
    # The bound is the total length: exactly the bound is fine.
    exact = encode_raw(b"", b"x" * (1000 - 16))
    assert len(decode_chunks([exact], max_message_bytes=1000)) == 1
    # The default bound is AWS's own, 16 MiB.
    raises_text(
        [prelude(MAX_MESSAGE_BYTES + 1, 0)],
        f"the event stream has a message longer than {MAX_MESSAGE_BYTES} bytes",
    )


def test_too_short_message_is_refused() -> None:
    # botocore takes a 12-byte "message" (a prelude alone) and carries on.
    for total in (0, 12, 15):
        raises_text(
            [prelude(total, 0) + b"\x00" * 8],
            "the event stream is corrupt: a message is shorter than its prelude and checksum",
        )


def test_headers_longer_than_the_message() -> None:
    text = "the event stream is corrupt: a message's headers are longer than the message"
    raises_text([prelude(16, 1)], text)
    raises_text([prelude(20, 5)], text)
    raises_text([prelude(2**32 - 1, 2**32 - 1)], "the event stream has a message longer than "
                f"{MAX_MESSAGE_BYTES} bytes")  # fmt: skip


def test_headers_block_over_128_kib() -> None:
    raises_text(
        [prelude(MAX_HEADERS_BYTES + 17, MAX_HEADERS_BYTES + 1)],
        "the event stream has a message whose headers are longer than 131072 bytes",
    )
    # Exactly 128 KiB is legal: two byte arrays filling the block to the byte.
    first = Header("a", HeaderType.BYTE_ARRAY, b"x" * 0xFFFF)
    second = Header("b", HeaderType.BYTE_ARRAY, b"y" * (MAX_HEADERS_BYTES - 0x10004 - 5))
    [message] = decode(encode_message([first, second], b"p"))
    assert message.headers == (first, second)


@pytest.mark.parametrize("code", [10, 11, 127, 255])
def test_unknown_header_type(code: int) -> None:
    raises_text(
        [encode_raw(b"\x01a" + bytes([code]), b"")],
        "the event stream has a message header of an unknown type",
    )


@pytest.mark.parametrize(
    "block",
    [
        b"\x05ab",  # name runs past the block
        b"\x01a",  # no type byte
        b"\x01a\x07",  # string without its length
        b"\x01a\x07\x00",  # half a length
        b"\x01a\x07\x00\x05abc",  # string runs past the block (botocore keeps "abc")
        b"\x01a\x06\x00\x02x",  # byte array too
        b"\x01a\x04\x00\x00",  # int truncated
        b"\x01a\x05" + b"\x00" * 7,  # long truncated
        b"\x01a\x08" + b"\x00" * 4,  # timestamp truncated
        b"\x01a\x09" + b"\x00" * 15,  # uuid truncated
        b"\x01a\x00\x01",  # a valid header, then a stray byte
    ],
)
def test_malformed_header(block: bytes) -> None:
    raises_text([encode_raw(block, b"payload")], "the event stream has a malformed message header")


@pytest.mark.parametrize("block", [b"\x01\xff\x00", b"\x01a\x07\x00\x02\xc3\x28"])
def test_header_not_utf8(block: bytes) -> None:
    raises_text(
        [encode_raw(block, b"")], "the event stream has a message header that is not valid UTF-8"
    )


def test_repeated_header_name() -> None:
    block = b"\x01a\x00\x01a\x01"
    raises_text(
        [encode_raw(block, b"")], "the event stream has a message that repeats a header name"
    )


@pytest.mark.parametrize(
    "garbage",
    [
        b'{"message": "too many requests"}',  # a JSON error body where frames were expected
        b"event: ping\ndata: {}\n\n",  # SSE where frames were expected
        b"\x00" * 12,  # zero lengths, zero CRC: the CRC of eight zero bytes is not zero
        b"\xff" * 64,
    ],
)
def test_garbage_is_refused(garbage: bytes) -> None:
    raises_text([garbage], "the event stream is corrupt: a message's prelude fails its checksum")


def test_errors_end_decoding() -> None:
    damaged = bytearray(MESSAGE)
    damaged[-1] ^= 1
    decoder = EventStreamDecoder()
    with pytest.raises(UpstreamProtocolError):
        decoder.feed(MESSAGE[:30])
        decoder.feed(bytes(damaged[30:]))
    assert decoder.closed
    assert decoder.pending_bytes == len(MESSAGE)  # what was held, counted; the bytes are freed
    with pytest.raises(RuntimeError):
        decoder.feed(MESSAGE)
    assert decoder.close() == []
    closed = EventStreamDecoder()
    closed.close()
    with pytest.raises(RuntimeError):
        closed.feed(b"")


def test_error_after_messages_of_the_same_chunk_comes_next() -> None:
    damaged = bytearray(MESSAGE)
    damaged[20] ^= 1
    good = event("metadata", b'{"usage":{"inputTokens":1}}')
    decoder = EventStreamDecoder()
    # The usage before the damage is not lost because both came in one read.
    assert decode(good) == decoder.feed(good + bytes(damaged))
    assert decoder.closed
    with pytest.raises(UpstreamProtocolError) as caught:
        decoder.feed(MESSAGE)
    assert str(caught.value) == "the event stream is corrupt: a message fails its checksum"
    with pytest.raises(RuntimeError):
        decoder.feed(MESSAGE)
    # close() raises it too, when it comes first.
    decoder = EventStreamDecoder()
    assert len(decoder.feed(good + bytes(damaged))) == 1
    with pytest.raises(UpstreamProtocolError):
        decoder.close()
    assert decoder.close() == []


def outcome(chunks: list[bytes]) -> tuple[list[EventStreamMessage], str | None]:
    """Everything a caller gets from a stream: its messages, then the error if any."""
    return decode_frames(EventStreamDecoder(max_message_bytes=4096), chunks)


@st.composite
def damaged_streams(draw: st.DrawFn) -> bytes:
    """Valid frames, then a flipped bit, a cut, inserted or dropped bytes, or garbage."""
    wire = b"".join(encode(m) for m in draw(st.lists(messages, max_size=4)))
    return damage(draw, wire, rounds=3, most=16)


@given(wire=damaged_streams(), cuts=st.lists(st.integers(0, 2000), max_size=30))
def test_any_split_gives_the_same_outcome_even_when_damaged(wire: bytes, cuts: list[int]) -> None:
    whole = outcome([wire])
    assert outcome(split(wire, cuts)) == whole
    assert outcome(byte_by_byte(wire)) == whole


def test_error_texts_carry_nothing_from_the_stream() -> None:
    damaged = bytearray(MESSAGE)
    damaged[-1] ^= 1
    with pytest.raises(UpstreamProtocolError) as caught:
        decode(bytes(damaged))
    assert "CANARY" not in str(caught.value) and "contentBlockDelta" not in str(caught.value)


def test_max_message_bytes_must_allow_a_message() -> None:
    with pytest.raises(ValueError):
        EventStreamDecoder(max_message_bytes=15)
    assert decode_chunks([encode_raw(b"", b"")], max_message_bytes=16) == [
        EventStreamMessage((), b"")
    ]


# ---------------------------------------------------------------- memory


def test_holds_at_most_one_partial_message() -> None:
    frames = [encode_raw(b"", bytes([i]) * (i * 37 % 500)) for i in range(60)]
    wire = b"".join(frames)
    decoder = EventStreamDecoder()
    got = 0
    for piece in split(wire, list(range(0, len(wire), 97))):
        got += len(decoder.feed(piece))
        # Everything held is one unfinished message: less than the largest frame.
        assert decoder.pending_bytes < max(len(f) for f in frames)
    assert got == len(frames) and decoder.pending_bytes == 0


def test_memory_does_not_grow_with_the_stream() -> None:
    frame = encode_raw(b"", b"x" * 65536)
    wire = frame * 200  # 12.8 MiB
    pieces = [wire[i : i + 4096] for i in range(0, len(wire), 4096)]
    decoder = EventStreamDecoder()
    tracemalloc.start()
    try:
        count = 0
        for piece in pieces:
            count += len(decoder.feed(piece))  # messages dropped as they come
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 200
    # One message buffered, one payload copied out: a few times 64 KiB, not 12.8 MiB.
    assert peak < 6 * 65536


def test_a_message_at_the_default_limit() -> None:
    frame = encode_raw(b"", b"\x00" * (MAX_MESSAGE_BYTES - 16))
    pieces = [frame[i : i + 65536] for i in range(0, len(frame), 65536)]
    [message] = decode_chunks(pieces)
    assert len(message.payload) == MAX_MESSAGE_BYTES - 16


# ---------------------------------------------------------------- construction


@pytest.mark.parametrize(
    ("kind", "value", "error"),
    [
        (HeaderType.BOOL_TRUE, False, TypeError),
        (HeaderType.BOOL_FALSE, 0, TypeError),
        (HeaderType.BYTE, 128, ValueError),
        (HeaderType.SHORT, -(2**15) - 1, ValueError),
        (HeaderType.INTEGER, True, TypeError),
        (HeaderType.LONG, 2**63, ValueError),
        (HeaderType.TIMESTAMP, 1.5, TypeError),
        (HeaderType.BYTE_ARRAY, "text", TypeError),
        (HeaderType.BYTE_ARRAY, b"x" * 65536, ValueError),
        (HeaderType.STRING, b"bytes", TypeError),
        (HeaderType.STRING, "\u00e9" * 32768, ValueError),
        (HeaderType.STRING, "\ud800", ValueError),
        (HeaderType.UUID, b"x" * 16, TypeError),
    ],
)
def test_header_validates_on_construction(kind: HeaderType, value: Any, error: type) -> None:
    with pytest.raises(error):
        Header("name", kind, value)


def test_header_name_and_type_validated() -> None:
    with pytest.raises(ValueError):
        Header("\u00e9" * 128, HeaderType.BOOL_TRUE, True)
    with pytest.raises(ValueError):
        Header("n", 10, True)  # type: ignore[arg-type]
    Header("\u00e9" * 127, HeaderType.BOOL_TRUE, True)  # 254 bytes
    assert Header("n", 7, "v").type is HeaderType.STRING  # type: ignore[arg-type]


def test_message_refuses_repeated_names() -> None:
    with pytest.raises(ValueError):
        EventStreamMessage(
            (Header("a", HeaderType.BOOL_TRUE, True), Header("a", HeaderType.BOOL_FALSE, False)),
            b"",
        )
