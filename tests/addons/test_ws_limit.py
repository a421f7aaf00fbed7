"""WebSocket messages bounded as their frames arrive (``ws_limit``), on wsproto alone.

Each test feeds client frames to a wsproto server connection carrying the
bounded extension and reads the events it gives back, as mitmproxy's
WebSocket layer does.
"""

from __future__ import annotations

import tracemalloc
import zlib
from typing import Any

import pytest
import wsproto
from wsproto.connection import Connection
from wsproto.events import CloseConnection, Message, Ping

from modeltap.addons.patches.ws_limit import (
    BoundedPerMessageDeflate,
    MessageLimit,
    max_message_bytes,
)
from tests.reliability.faults import ws_frame as frame

LIMIT = 64 * 1024


def deflate_message(data: bytes, compressor: Any | None = None) -> bytes:
    """permessage-deflate payload: sync-flushed, without the 00 00 ff ff tail."""
    c = compressor or zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    out: bytes = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    return out[:-4]


class Side:
    """One direction: a wsproto connection parsing a client's frames."""

    def __init__(self, deflate: bool, limit: int = LIMIT) -> None:
        self.exceeded = 0
        ext: wsproto.extensions.Extension
        if deflate:
            ext = BoundedPerMessageDeflate(limit, self._exceeded)
            ext.finalize("permessage-deflate")
        else:
            ext = MessageLimit(limit, self._exceeded)
        self.conn = Connection(wsproto.ConnectionType.SERVER, [ext])

    def _exceeded(self) -> None:
        self.exceeded += 1

    def feed(self, data: bytes, step: int = 65536) -> list[Any]:
        """Feed bytes in pieces, as they come off a socket; the events they give."""
        events: list[Any] = []
        for i in range(0, len(data), step):
            self.conn.receive_data(data[i : i + step])
            events += list(self.conn.events())
        return events

    def messages(self, events: list[Any]) -> list[bytes]:
        out, current = [], b""
        for e in events:
            if isinstance(e, Message):
                current += e.data.encode() if isinstance(e.data, str) else e.data
                if e.message_finished:
                    out.append(current)
                    current = b""
        return out


def closes(events: list[Any]) -> list[int]:
    return [e.code for e in events if isinstance(e, CloseConnection)]


@pytest.mark.parametrize("deflate", [True, False], ids=["deflate", "plain"])
@pytest.mark.parametrize("size", [LIMIT, LIMIT + 1])
def test_limit_is_exact(deflate: bool, size: int) -> None:
    side = Side(deflate)
    body = b"x" * size
    payload = deflate_message(body) if deflate else body
    events = side.feed(frame(payload, rsv1=deflate))
    if size <= LIMIT:
        assert side.messages(events) == [body] and closes(events) == []
    else:
        assert side.messages(events) == [] and closes(events) == [1009]
        assert side.exceeded == 1


@pytest.mark.parametrize("deflate", [True, False], ids=["deflate", "plain"])
def test_each_message_counts_alone_and_fragments_add_up(deflate: bool) -> None:
    """Many messages each under the limit pass; one of fragments adding past it stops."""
    side = Side(deflate)
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)  # context takeover
    part = b"y" * (LIMIT // 4)
    data = b""
    for _ in range(10):
        data += frame(deflate_message(part, c) if deflate else part, rsv1=deflate)
    events = side.feed(data)
    assert side.messages(events) == [part] * 10 and closes(events) == []
    fragments = b""
    for i in range(5):  # 5 x LIMIT/4 > LIMIT
        payload = c.compress(part) + c.flush(zlib.Z_SYNC_FLUSH) if deflate else part
        if deflate and i == 4:
            payload = payload[:-4]
        fragments += frame(payload, opcode=1 if i == 0 else 0, fin=i == 4, rsv1=deflate and i == 0)
    events = side.feed(fragments)
    assert side.messages(events) == [] and closes(events) == [1009]


@pytest.mark.parametrize("deflate", [True, False], ids=["deflate", "plain"])
def test_control_frames_between_fragments_neither_count_nor_reset(deflate: bool) -> None:
    side = Side(deflate)
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    part = b"z" * (LIMIT // 2)
    first = c.compress(part) + c.flush(zlib.Z_SYNC_FLUSH) if deflate else part
    second = (c.compress(part) + c.flush(zlib.Z_SYNC_FLUSH))[:-4] if deflate else part
    data = (
        frame(first, fin=False, rsv1=deflate)
        + frame(b"ping", opcode=9)
        + frame(second, opcode=0, fin=True)
    )
    events = side.feed(data)
    assert any(isinstance(e, Ping) for e in events)
    assert side.messages(events) == [part + part] and closes(events) == []
    # Past the limit with a ping in between: the ping did not reset the count.
    third = c.compress(part + b"!") + c.flush(zlib.Z_SYNC_FLUSH) if deflate else part + b"!"
    fourth = (c.compress(part) + c.flush(zlib.Z_SYNC_FLUSH))[:-4] if deflate else part
    data = (
        frame(third, fin=False, rsv1=deflate)
        + frame(b"ping", opcode=9)
        + frame(fourth, opcode=0, fin=True)
    )
    assert closes(side.feed(data)) == [1009]


def test_a_deflate_bomb_is_stopped_without_holding_the_limit() -> None:
    """1 MB of deflate that inflates to 1 GiB, limit 64 MiB: 1009, and Python never
    holds the limit in memory (the bomb is measured on a copy of the inflater)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    segment = c.compress(b"\0" * (64 * 1024 * 1024)) + c.flush(zlib.Z_FULL_FLUSH)
    payload = (segment * 16)[:-4]
    side = Side(True, limit=64 * 1024 * 1024)
    tracemalloc.start()
    try:
        events = side.feed(frame(payload, rsv1=True))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert closes(events) == [1009] and side.exceeded == 1
    assert peak < 16 * 1024 * 1024


def test_corrupt_deflate_is_a_protocol_error_not_a_crash() -> None:
    side = Side(True)
    events = side.feed(frame(b"\xff\xff\xff\xff garbage", rsv1=True))
    assert closes(events) == [1007]


@pytest.mark.parametrize(
    ("value", "limit"),
    [("64m", 64 * 1024 * 1024), ("1k", 1024), ("", None), (None, None), ("junk", None)],
)
def test_max_message_bytes_reads_the_option(value: str | None, limit: int | None) -> None:
    class Options:
        modeltap_max_body = value

    assert max_message_bytes(Options()) == limit
    assert max_message_bytes(object()) is None
