"""Tests for modeltap.wire.json_array: the incremental decoder of a streamed JSON array."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from modeltap.rules.errors import UpstreamProtocolError
from modeltap.wire.json_array import JsonArrayDecoder

#: Elements that test every way a scanner can lose its place: brackets and
#: braces inside strings, escaped quotes and backslashes, a multi-byte
#: character, nested arrays, and scalars.
ELEMENTS: list[Any] = [
    {"candidates": [{"content": {"parts": [{"text": 'a ] } [ { " quote'}]}}]},
    {"text": "back\\slash\\", "nested": [[1, [2, {"x": "é😀"}]], []], "empty": {}},
    'a string element with ] and \\"',
    42,
    -1.5e3,
    True,
    None,
    [1, 2, {"y": "]"}],
]


def gemini_wire(items: list[Any]) -> bytes:
    """As Gemini writes it: pretty-printed elements, ``\\r\\n`` before each comma."""
    return b"[" + b"\r\n,".join(orjson.dumps(i, option=orjson.OPT_INDENT_2) for i in items) + b"]"


def decode(wire: bytes, step: int) -> tuple[list[Any], JsonArrayDecoder]:
    decoder = JsonArrayDecoder()
    got = []
    for i in range(0, len(wire), step):
        got += [orjson.loads(event.data) for event in decoder.feed(wire[i : i + step])]
    return got, decoder


@pytest.mark.parametrize("step", [1, 2, 3, 5, 7, 64, 1 << 20])
def test_elements_come_whole_however_the_bytes_are_cut(step: int) -> None:
    got, decoder = decode(b"\xef\xbb\xbf \r\n" + gemini_wire(ELEMENTS) + b"\n", step)
    assert got == ELEMENTS
    assert decoder.finished and decoder.pending_bytes == 0


def test_each_element_is_handed_over_as_soon_as_it_is_complete() -> None:
    decoder = JsonArrayDecoder()
    assert decoder.feed(b'[{"a": 1') == []
    events = decoder.feed(b'}\r\n,{"b"')
    assert [e.data for e in events] == ['{"a": 1}'] and events[0].event is None
    assert [e.data for e in decoder.feed(b": 2}")] == ['{"b": 2}']
    assert not decoder.finished
    assert decoder.feed(b"]") == [] and decoder.finished


def test_an_empty_array() -> None:
    assert decode(b"[]", 1)[0] == [] and decode(b" [ ] ", 1)[1].finished


def test_a_cut_stream_leaves_its_element_pending() -> None:
    decoder = JsonArrayDecoder()
    assert [e.data for e in decoder.feed(b'[{"a":1},{"b":"unfinish')] == ['{"a":1}']
    assert decoder.close() == []
    assert decoder.pending_bytes > 0 and not decoder.finished and decoder.closed
    with pytest.raises(RuntimeError):
        decoder.feed(b"x")


@pytest.mark.parametrize(
    ("wire", "fault"),
    [
        (b'{"not": "an array"}', "does not start with '['"),
        (b'data: {"sse": true}\n\n', "does not start with '['"),
        (b'[{"a":1} {"b":2}]', "no ','"),
        (b'[{"a":1}] {"b":2}', "after its closing ']'"),
    ],
)
def test_a_broken_frame_is_a_protocol_error(wire: bytes, fault: str) -> None:
    decoder = JsonArrayDecoder()
    with pytest.raises(UpstreamProtocolError, match=re.escape(fault)):
        decoder.feed(wire)
    assert decoder.closed


def test_memory_is_bounded_by_one_element() -> None:
    decoder = JsonArrayDecoder(max_pending_bytes=100)
    assert len(decoder.feed(b'[{"a":"' + b"x" * 60 + b'"},')) == 1  # under the bound
    with pytest.raises(UpstreamProtocolError, match="100 bytes"):
        for _ in range(10):
            decoder.feed(b'{"b":"' + b"y" * 30)  # one element that never ends
    assert decoder.pending_bytes == 0  # the bytes were let go


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(items=st.lists(json_values, max_size=6), cuts=st.lists(st.integers(1, 9), min_size=1))
def test_any_array_cut_anywhere_decodes_to_its_elements(items: list[Any], cuts: list[int]) -> None:
    wire = gemini_wire(items)
    decoder = JsonArrayDecoder()
    got: list[Any] = []
    pos, i = 0, 0
    while pos < len(wire):
        size = cuts[i % len(cuts)]
        got += [orjson.loads(event.data) for event in decoder.feed(wire[pos : pos + size])]
        pos, i = pos + size, i + 1
    assert got == items and decoder.finished
