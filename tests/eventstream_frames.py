"""A test encoder for AWS event streams, and Bedrock's frames built with it.

The core only decodes; tests (and the stub upstream) need to write frames.
Adapted from the research capture server's encoder, whose frames boto3,
AnthropicBedrock and Claude Code accepted. Headers are the core's own
:class:`~modeltap.wire.eventstream.Header` objects, so only valid headers can be
written; corrupt frames are made by changing bytes afterwards.

Bedrock's conventions: an event carries ``:event-type``, ``:content-type:
application/json``, ``:message-type: event`` in that order; an exception
``:exception-type`` in place of the first; JSON payloads carry a ``p`` field of
padding letters (Bedrock hides lengths that way); InvokeModelWithResponseStream
wraps each Anthropic event as ``chunk`` ``{"bytes": base64(json), "p": ...}``.

``python -m tests.eventstream_frames`` rewrites the binary wire samples under
``tests/data/bedrock/`` from their JSON descriptions. For the decoder's tests
(unit and fuzz): :func:`damage` breaks a wire the ways a network does, and
:func:`decode_frames` is everything a caller gets from a stream.
"""

from __future__ import annotations

import base64
import struct
import sys
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from modeltap.rules.errors import UpstreamProtocolError
from modeltap.wire.eventstream import EventStreamDecoder, EventStreamMessage, Header, HeaderType

if TYPE_CHECKING:
    from hypothesis.strategies import DrawFn

SAMPLES = Path(__file__).parent / "data" / "bedrock"

_INT_FORMATS = {
    HeaderType.BYTE: ">b",
    HeaderType.SHORT: ">h",
    HeaderType.INTEGER: ">i",
    HeaderType.LONG: ">q",
    HeaderType.TIMESTAMP: ">q",
}

#: The letters Bedrock pads its JSON payloads with (a prefix of this).
PADDING = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def encode_header(header: Header) -> bytes:
    """The wire bytes of one header."""
    name = header.name.encode()
    out = bytes([len(name)]) + name + bytes([header.type])
    value = header.value
    if header.type in _INT_FORMATS:
        assert isinstance(value, int)
        out += struct.pack(_INT_FORMATS[header.type], value)
    elif header.type in (HeaderType.STRING, HeaderType.BYTE_ARRAY):
        raw = value.encode() if isinstance(value, str) else value
        assert isinstance(raw, bytes)
        out += struct.pack(">H", len(raw)) + raw
    elif header.type == HeaderType.UUID:
        out += value.bytes  # type: ignore[union-attr]
    return out


def encode_raw(headers: bytes, payload: bytes) -> bytes:
    """A frame around already-encoded header bytes (which may be malformed)."""
    total = 16 + len(headers) + len(payload)
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + headers + payload
    return body + struct.pack(">I", zlib.crc32(body))


def encode_message(headers: Iterable[Header], payload: bytes = b"") -> bytes:
    """One whole message: prelude, headers, payload, both CRCs."""
    return encode_raw(b"".join(encode_header(h) for h in headers), payload)


def strings(pairs: Iterable[tuple[str, str]]) -> list[Header]:
    """String headers from ``(name, value)`` pairs, in order."""
    return [Header(name, HeaderType.STRING, value) for name, value in pairs]


def padded(body: dict[str, Any], pad: int) -> bytes:
    """A Bedrock JSON payload: ``body`` and a ``p`` field of ``pad`` letters."""
    return orjson.dumps({**body, "p": PADDING[:pad]}) if pad else orjson.dumps(body)


def _bedrock_message(message_type: str, type_name: str, payload: bytes) -> bytes:
    """A Bedrock ``event`` or ``exception``: its type header, then content and message type."""
    headers = [
        (f":{message_type}-type", type_name),
        (":content-type", "application/json"),
        (":message-type", message_type),
    ]
    return encode_message(strings(headers), payload)


def event(event_type: str, payload: bytes) -> bytes:
    """A Bedrock ``event`` message."""
    return _bedrock_message("event", event_type, payload)


def chunk(anthropic_event: dict[str, Any], pad: int = 0) -> bytes:
    """An InvokeModelWithResponseStream ``chunk`` carrying one Anthropic event."""
    inner = base64.b64encode(orjson.dumps(anthropic_event)).decode()
    return event("chunk", padded({"bytes": inner}, pad))


def exception(exception_type: str, payload: bytes) -> bytes:
    """A Bedrock ``exception`` message."""
    return _bedrock_message("exception", exception_type, payload)


def damage(draw: DrawFn, wire: bytes, rounds: int, most: int) -> bytes:
    """``wire`` damaged up to ``rounds`` times, each a flipped bit, a cut, or
    1 to ``most`` bytes inserted or dropped (drawn inside a hypothesis strategy)."""
    from hypothesis import strategies as st  # the stub upstream imports this module too

    damaged = bytearray(wire)
    for _ in range(draw(st.integers(0, rounds))):
        at = draw(st.integers(0, len(damaged)))
        how = draw(st.integers(0, 3))
        if how == 0 and at < len(damaged):
            damaged[at] ^= 1 << draw(st.integers(0, 7))
        elif how == 1:
            del damaged[at:]
        elif how == 2:
            damaged[at:at] = draw(st.binary(min_size=1, max_size=most))
        else:
            del damaged[at : at + draw(st.integers(1, most))]
    return bytes(damaged)


def decode_frames(
    decoder: EventStreamDecoder, chunks: Iterable[bytes]
) -> tuple[list[EventStreamMessage], str | None]:
    """Everything a caller gets from a stream: its messages, then the error text if any."""
    got: list[EventStreamMessage] = []
    try:
        for piece in chunks:
            got += decoder.feed(piece)
        got += decoder.close()
    except UpstreamProtocolError as error:
        return got, str(error)
    return got, None


def sample_bytes(sample: dict[str, Any]) -> bytes:
    """The wire bytes a sample's JSON describes: each message's string headers and payload.

    A message's ``payload`` is written as compact JSON in the key order given;
    ``payload_text`` (a string) is written as it is.
    """
    out = bytearray()
    for message in sample["messages"]:
        if "payload_text" in message:
            payload = message["payload_text"].encode()
        else:
            payload = orjson.dumps(message["payload"])
        out += encode_message(strings(message["headers"].items()), payload)
    return bytes(out)


def write_samples() -> None:
    """Rewrite every ``tests/data/bedrock/*.eventstream`` from its ``.json``."""
    for path in sorted(SAMPLES.glob("*.json")):
        sample = orjson.loads(path.read_bytes())
        path.with_suffix(".eventstream").write_bytes(sample_bytes(sample))
        print(path.with_suffix(".eventstream").name, file=sys.stderr)


if __name__ == "__main__":
    write_samples()
