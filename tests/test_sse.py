"""Tests for modeltap.wire.sse: the incremental SSE decoder."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from modeltap.rules.errors import UpstreamProtocolError
from modeltap.wire.sse import MAX_PENDING_BYTES, SSEDecoder, SSEEvent

# A stream touching every rule at once: BOM, all three line endings, comments,
# multi-line data, event/id/retry, fields without colon, unknown fields,
# multi-byte characters, an event with no data, and an unterminated tail.
SAMPLE = (
    b"\xef\xbb\xbf"
    b": keep-alive comment\n"
    b"event: response.created\r\n"
    b"id: 1\r\n"
    b'data: {"type":"response.created"}\r\n'
    b"\r\n"
    b"data: first line\r"
    b"data:second line\r"
    b"data:  two spaces\r"
    b"\r"
    b"retry: 3000\n"
    b"event: delta\n"
    b": a comment inside an event\n"
    b"data: caf\xc3\xa9 \xf0\x9f\x98\x80\n"
    b"unknown: field\n"
    b"\n"
    b"event: only-a-type\n"
    b"\n"
    b"data\n"
    b"\n"
    b"id\n"
    b"data: after id reset\n"
    b"\n"
    b"data: unterminated"
)

EXPECTED = [
    SSEEvent(event="response.created", data='{"type":"response.created"}', id="1"),
    SSEEvent(event=None, data="first line\nsecond line\n two spaces", id="1"),
    SSEEvent(event="delta", data="café \U0001f600", id="1"),
    SSEEvent(event=None, data="", id="1"),
    SSEEvent(event=None, data="after id reset", id=""),
]


def decode_chunks(chunks: list[bytes], **kwargs: int) -> tuple[list[SSEEvent], int]:
    """Feed ``chunks`` in order, close, and return the events and pending bytes."""
    decoder = SSEDecoder(**kwargs)
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.close())
    return events, decoder.pending_bytes


def decode(stream: bytes) -> list[SSEEvent]:
    """Decode a whole stream fed at once."""
    return decode_chunks([stream])[0]


def reference_decode(stream: bytes) -> list[SSEEvent]:
    """The WHATWG algorithm written the obvious way, on the whole stream at once."""
    text = stream.decode("utf-8", "replace").removeprefix("\ufeff")
    lines = re.split(r"\r\n|\r|\n", text)
    lines.pop()  # the unterminated tail (possibly empty) is discarded
    events: list[SSEEvent] = []
    data: list[str] = []
    event_type = ""
    last_id: str | None = None
    for line in lines:
        if not line:
            if data:
                events.append(SSEEvent(event_type or None, "\n".join(data), last_id))
            data, event_type = [], ""
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event_type = value
        elif name == "id" and "\x00" not in value:
            last_id = value
    return events


def test_sample_at_once() -> None:
    events, pending = decode_chunks([SAMPLE])
    assert events == EXPECTED
    assert pending == len(b"data: unterminated")


def test_sample_matches_reference() -> None:
    assert reference_decode(SAMPLE) == EXPECTED


@pytest.mark.parametrize("split", range(len(SAMPLE) + 1))
def test_every_split_point(split: int) -> None:
    events, pending = decode_chunks([SAMPLE[:split], SAMPLE[split:]])
    assert events == EXPECTED
    assert pending == len(b"data: unterminated")


def test_every_pair_of_split_points() -> None:
    for i in range(len(SAMPLE) + 1):
        for j in range(i, len(SAMPLE) + 1, 7):
            events, _ = decode_chunks([SAMPLE[:i], SAMPLE[i:j], SAMPLE[j:]])
            assert events == EXPECTED, (i, j)


def test_one_byte_at_a_time() -> None:
    chunks = [SAMPLE[i : i + 1] for i in range(len(SAMPLE))]
    assert decode_chunks(chunks)[0] == EXPECTED


def test_events_come_out_as_soon_as_complete() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n") == []
    assert decoder.feed(b"\ndata: b") == [SSEEvent(None, "a")]
    assert decoder.feed(b"\n\n") == [SSEEvent(None, "b")]


@st.composite
def chunked(draw: st.DrawFn, stream: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    bounds = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


@given(st.data())
def test_random_chunking_of_sample(data: st.DataObject) -> None:
    assert decode_chunks(data.draw(chunked(SAMPLE)))[0] == EXPECTED


# Streams built from the pieces where the rules live, plus raw bytes.
_TOKENS = st.sampled_from(
    [
        b"\r",
        b"\n",
        b"\r\n",
        b":",
        b" ",
        b"data",
        b"event",
        b"id",
        b"retry",
        b"x",
        b"\x00",
        b"\xef\xbb\xbf",
        b"\xc3\xa9",
        b"\xf0\x9f",
        b"\xff",
    ]
)
_STREAMS = st.one_of(
    st.lists(_TOKENS, max_size=40).map(b"".join),
    st.binary(max_size=200),
)


@given(st.data(), _STREAMS)
def test_any_stream_any_chunking_matches_reference(data: st.DataObject, stream: bytes) -> None:
    assert decode_chunks(data.draw(chunked(stream)))[0] == reference_decode(stream)


# --- line endings


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"])
def test_each_line_ending(eol: bytes) -> None:
    stream = b"event: e" + eol + b"data: a" + eol + b"data: b" + eol + eol
    assert decode(stream) == [SSEEvent("e", "a\nb")]


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    events, pending = decode_chunks([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"])
    assert events == [SSEEvent(None, "a\nb")]
    assert pending == 0


def test_cr_at_chunk_end_then_cr_is_a_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\r") == [SSEEvent(None, "a")]


def test_lone_lf_chunk_after_cr_is_swallowed_once() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n") == []  # second half of "\r\n", not a blank line
    assert decoder.feed(b"\n") == [SSEEvent(None, "a")]


def test_empty_chunks_change_nothing() -> None:
    events, _ = decode_chunks([b"", b"data: a\r", b"", b"\n", b"", b"\n", b""])
    assert events == [SSEEvent(None, "a")]


# --- fields


def test_comments_are_ignored() -> None:
    assert decode(b": ping\n\n:\n\n") == []
    assert decode(b"data: a\n: between\ndata: b\n\n") == [SSEEvent(None, "a\nb")]


def test_only_one_leading_space_is_stripped() -> None:
    assert decode(b"data:a\n\n") == [SSEEvent(None, "a")]
    assert decode(b"data:  a \n\n") == [SSEEvent(None, " a ")]
    assert decode(b"data:\ta\n\n") == [SSEEvent(None, "\ta")]


def test_value_may_contain_colons() -> None:
    assert decode(b'data: {"a": "b:c"}\n\n') == [SSEEvent(None, '{"a": "b:c"}')]


def test_field_without_colon_has_empty_value() -> None:
    assert decode(b"data\ndata\n\n") == [SSEEvent(None, "\n")]
    assert decode(b"event: e\nevent\ndata: x\n\n") == [SSEEvent(None, "x")]


def test_event_without_data_is_not_dispatched_and_type_resets() -> None:
    assert decode(b"event: lonely\n\ndata: x\n\n") == [SSEEvent(None, "x")]


def test_empty_data_field_dispatches_empty_data() -> None:
    assert decode(b"event: done\ndata:\n\n") == [SSEEvent("done", "")]


def test_id_persists_until_changed() -> None:
    stream = b"id: 7\ndata: a\n\ndata: b\n\nid: 8\ndata: c\n\nid:\ndata: d\n\n"
    assert [e.id for e in decode(stream)] == ["7", "7", "8", ""]


def test_id_with_nul_is_ignored() -> None:
    assert decode(b"id: 1\n\nid: a\x00b\ndata: x\n\n") == [SSEEvent(None, "x", "1")]


def test_id_alone_sets_last_event_id_without_dispatch() -> None:
    assert decode(b"id: 5\n\ndata: x\n\n") == [SSEEvent(None, "x", "5")]


def test_retry_and_unknown_fields_are_ignored() -> None:
    assert decode(b"retry: 10\nfoo: bar\nDATA: no\ndata: yes\n\n") == [SSEEvent(None, "yes")]


def test_field_names_are_case_sensitive_and_exact() -> None:
    assert decode(b"Data: a\ndata : b\n data: c\n\n") == []


# --- bytes and text


def test_bom_is_stripped_once() -> None:
    assert decode(b"\xef\xbb\xbfdata: a\n\n") == [SSEEvent(None, "a")]
    # A second BOM belongs to the field name, which is then unknown.
    assert decode(b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\n") == []


@pytest.mark.parametrize("split", [1, 2, 3])
def test_bom_split_across_chunks(split: int) -> None:
    stream = b"\xef\xbb\xbfdata: a\n\n"
    events, _ = decode_chunks([stream[:split], stream[split:]])
    assert events == [SSEEvent(None, "a")]


def test_bom_only_at_stream_start() -> None:
    assert decode(b"data: \xef\xbb\xbfa\n\n") == [SSEEvent(None, "\ufeffa")]


def test_short_first_chunks_that_are_not_a_bom() -> None:
    events, _ = decode_chunks([b"d", b"a", b"ta: x\n\n"])
    assert events == [SSEEvent(None, "x")]
    events, _ = decode_chunks([b"\xef", b"\xbb", b"Xdata: x\n\n"])
    assert events == []  # the bytes were not a BOM, so they spoil the field name


def test_multibyte_character_split_in_every_place() -> None:
    stream = "data: é€😀\n\n".encode()
    for i in range(len(stream) + 1):
        events, _ = decode_chunks([stream[:i], stream[i:]])
        assert events == [SSEEvent(None, "é€😀")]


def test_invalid_utf8_is_replaced_not_raised() -> None:
    stream = b"event: \xff\ndata: \xc3(\xed\xa0\x80ok\ndata: \xe2\x82\n\n"
    (event,) = decode(stream)
    assert event.event == "\ufffd"
    assert event.data == "\ufffd(\ufffd\ufffd\ufffdok\n\ufffd"


def test_nul_and_control_bytes_pass_through_data() -> None:
    assert decode(b"data: a\x00\x01b\n\n") == [SSEEvent(None, "a\x00\x01b")]


# --- end of stream


def test_clean_end_has_no_pending_bytes() -> None:
    events, pending = decode_chunks([b"data: a\n\n: trailing comment\n\n"])
    assert events == [SSEEvent(None, "a")]
    assert pending == 0


def test_unterminated_event_is_discarded_and_reported() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: b\n") == [SSEEvent(None, "a")]
    assert decoder.close() == []
    assert decoder.pending_bytes == len(b"data: b")
    assert decoder.closed


def test_unterminated_line_is_reported() -> None:
    events, pending = decode_chunks([b"data: a\n\ndata: par"])
    assert events == [SSEEvent(None, "a")]
    assert pending == len(b"data: par")


def test_close_is_idempotent_and_feed_after_close_fails() -> None:
    decoder = SSEDecoder()
    assert decoder.close() == []
    assert decoder.close() == []
    with pytest.raises(RuntimeError):
        decoder.feed(b"data: a\n\n")


def test_only_the_unfinished_line_is_kept() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: a\n\n" * 1000 + b"data: tai")
    assert decoder.pending_bytes == len(b"data: tai")
    assert len(decoder._line) == len(b"data: tai")


# --- memory bound


def test_default_bound_is_16_mib() -> None:
    assert MAX_PENDING_BYTES == 16 * 1024 * 1024


def test_over_long_line_raises_at_default_bound() -> None:
    decoder = SSEDecoder()
    piece = b"x" * (1024 * 1024)
    decoder.feed(b"data: ")
    with pytest.raises(UpstreamProtocolError) as caught:
        for _ in range(17):
            decoder.feed(piece)
    assert "x" * 10 not in str(caught.value)  # never the data
    assert decoder.closed
    assert decoder.pending_bytes > MAX_PENDING_BYTES
    with pytest.raises(RuntimeError):
        decoder.feed(b"\n\n")


def test_bound_is_inclusive() -> None:
    decoder = SSEDecoder(max_pending_bytes=10)
    assert decoder.feed(b"data: 1234") == []  # exactly 10 bytes held
    with pytest.raises(UpstreamProtocolError):
        decoder.feed(b"5")


def test_bound_covers_many_lines_of_one_event() -> None:
    decoder = SSEDecoder(max_pending_bytes=100)
    with pytest.raises(UpstreamProtocolError):
        decoder.feed(b"data: xxxxxxxx\n" * 20)


def test_bound_resets_after_each_event() -> None:
    decoder = SSEDecoder(max_pending_bytes=100)
    events = decoder.feed(b"data: xxxxxxxx\n\n" * 1000)
    assert len(events) == 1000
    assert decoder.pending_bytes == 0


def test_comments_do_not_count_towards_the_bound() -> None:
    decoder = SSEDecoder(max_pending_bytes=100)
    assert decoder.feed(b": padding padding padding\n" * 100) == []
    assert decoder.pending_bytes == 0
