"""What Bedrock's event streams mean, as the API observers read them (pure; sans-I/O).

Bedrock streams (ConverseStream, InvokeModelWithResponseStream) use the binary
``application/vnd.amazon.eventstream`` framing, not SSE; its frames (prelude,
headers, checksums) are :mod:`modeltap.wire.eventstream`'s.
:func:`read_bedrock_message` says what Bedrock means by one frame, and
:class:`BedrockStreamDecoder`, fed the response bytes as they arrive like
:class:`~modeltap.wire.sse.SSEDecoder`, hands back the same
:class:`~modeltap.wire.sse.SSEEvent` objects, so each API's stream observer
reads Bedrock streams unchanged:

- an InvokeModelWithResponseStream ``chunk`` is the Anthropic streaming event
  it wraps: ``SSEEvent(None, <the event's JSON>)``, exactly what the Messages
  SSE stream carries (the last one, ``message_stop``, also carries Bedrock's
  ``amazon-bedrock-invocationMetrics``, which the Anthropic observer reads:
  :mod:`modeltap.apis.anthropic_messages.observe`);
- any other event is ``SSEEvent(<event type>, <its JSON payload>)`` (Converse's
  ``messageStart`` … ``metadata``);
- an ``exception`` or ``error`` message, which ends a Bedrock stream, is
  ``SSEEvent("error", {"type": "error", "error": {"type": <its type or code>}})``:
  the shape of an Anthropic error event, read by both observers. The
  provider's message is never copied.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import orjson

from modeltap.apis.contract import Framing
from modeltap.apis.stream_templates import COMPILE_AFTER, Shape, Slots, json_shape
from modeltap.evidence.records import Json
from modeltap.rules.errors import UpstreamProtocolError
from modeltap.wire.eventstream import (
    MIN_MESSAGE_BYTES,
    PRELUDE_BYTES,
    EventStreamDecoder,
    EventStreamMessage,
)
from modeltap.wire.sse import SSEEvent

#: Bound on the JSON payload of one Bedrock message. Bedrock's events are a
#: few hundred bytes (a delta, a stop reason, usage), the largest real ones
#: tens of KiB; once parsed, JSON can take over twenty times its size in
#: Python objects (``[{},{},...]``), so one event is kept well below the
#: 16 MiB frame bound.
MAX_JSON_BYTES: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class BedrockEvent:
    """A ``:message-type: event`` message other than ``chunk``.

    ConverseStream sends ``messageStart``, ``contentBlockStart``,
    ``contentBlockDelta``, ``contentBlockStop``, ``messageStop`` and
    ``metadata`` (usage and metrics); other types are passed on as they come.
    """

    event_type: str  #: the ``:event-type`` header
    body: Json  #: the payload, a JSON object (Bedrock's ``p`` padding included)


@dataclass(frozen=True, slots=True)
class BedrockChunk:
    """An InvokeModelWithResponseStream ``chunk``: one Anthropic streaming event.

    The payload is ``{"bytes": <base64>, "p": <padding>}``; the base64 holds
    the JSON of the Anthropic event (``message_start`` ... ``message_stop``,
    whose ``amazon-bedrock-invocationMetrics`` Bedrock adds).
    """

    data: str  #: the Anthropic event's JSON text, as an SSE ``data:`` line would carry it
    event: Json  #: that JSON, parsed (always an object)


@dataclass(frozen=True, slots=True)
class BedrockException:
    """A ``:message-type: exception`` message: a modelled error ending the stream.

    ``throttlingException``, ``modelStreamErrorException``,
    ``internalServerException``, ``validationException``, ... Its ``body``
    (usually ``{"message": ...}``) is the provider's text: never copy it into
    a record or an error.
    """

    exception_type: str  #: the ``:exception-type`` header
    body: Json | None  #: the JSON object payload, or None when the payload is empty


@dataclass(frozen=True, slots=True)
class BedrockError:
    """A ``:message-type: error`` message: an unmodelled error ending the stream.

    ``error_message`` is the provider's text: never copy it into a record or
    an error.
    """

    error_code: str  #: the ``:error-code`` header
    error_message: str | None  #: the ``:error-message`` header, None when absent


type BedrockMessage = BedrockEvent | BedrockChunk | BedrockException | BedrockError


def read_bedrock_message(
    message: EventStreamMessage, *, max_json_bytes: int = MAX_JSON_BYTES
) -> BedrockMessage:
    """Say what Bedrock means by one decoded event stream message.

    Pure: the message's ``:message-type`` decides. An ``event`` needs an
    ``:event-type`` and a JSON object payload; a ``chunk`` event is unwrapped
    to the Anthropic event its ``bytes`` field carries. An ``exception`` needs
    an ``:exception-type`` (its payload, if any, a JSON object); an ``error``
    an ``:error-code``. ``:content-type`` is not consulted (Bedrock's is always
    ``application/json``).

    Args:
        message: a message from :class:`EventStreamDecoder`.
        max_json_bytes: the largest payload parsed as JSON (1 MiB by default).

    Returns:
        A :class:`BedrockEvent`, :class:`BedrockChunk`,
        :class:`BedrockException` or :class:`BedrockError`.

    Raises:
        UpstreamProtocolError: (fixed text, nothing from the message) if a
            header it needs is missing or not a string, the message type is
            unknown, the payload is longer than ``max_json_bytes`` or not a
            JSON object, or a chunk's ``bytes`` is missing, not base64, or
            does not hold a UTF-8 JSON object.
    """
    kind = _string_header(message, ":message-type")
    if kind == "event":
        event_type = _required(message, ":event-type")
        body = _json_object(message.payload, max_json_bytes)
        if event_type == "chunk":
            return _chunk(body, max_json_bytes)
        return BedrockEvent(event_type, body)
    if kind == "exception":
        exception_type = _required(message, ":exception-type")
        payload = message.payload
        return BedrockException(
            exception_type, _json_object(payload, max_json_bytes) if payload else None
        )
    if kind == "error":
        return BedrockError(
            _required(message, ":error-code"), _string_header(message, ":error-message")
        )
    if kind is None:
        raise UpstreamProtocolError("the Bedrock event stream has a message without a type")
    raise UpstreamProtocolError("the Bedrock event stream has a message of an unknown type")


def _string_header(message: EventStreamMessage, name: str) -> str | None:
    """A header that must be a string when present (``name`` is modeltap's own)."""
    value = message.get(name)
    if value is None or isinstance(value, str):
        return value
    raise UpstreamProtocolError(f"the Bedrock event stream has a {name} header that is not text")


def _required(message: EventStreamMessage, name: str) -> str:
    """A string header the message type requires (``name`` is modeltap's own)."""
    value = _string_header(message, name)
    if not value:
        raise UpstreamProtocolError(f"the Bedrock event stream has a message without {name}")
    return value


def _json_object(payload: bytes, limit: int) -> Json:
    """Parse a payload that must be a JSON object of at most ``limit`` bytes."""
    if len(payload) > limit:
        raise UpstreamProtocolError(
            f"the Bedrock event stream has a payload longer than {limit} bytes"
        )
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise UpstreamProtocolError(
            "the Bedrock event stream has a payload that is not a JSON object"
        )
    return value


def _chunk(body: Json, limit: int) -> BedrockChunk:
    """Unwrap an InvokeModelWithResponseStream chunk's base64 Anthropic event."""
    encoded = body.get("bytes")
    if not isinstance(encoded, str):
        raise UpstreamProtocolError("the Bedrock event stream has a chunk without a 'bytes' text")
    try:
        raw = base64.b64decode(encoded, validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        raise UpstreamProtocolError(
            "the Bedrock event stream has a chunk whose 'bytes' is not base64 of UTF-8 text"
        ) from None
    # The decoded text is shorter than its base64, so it is within the limit.
    event = _json_object(raw, limit)
    return BedrockChunk(text, event)


# --------------------------------------------------------------------------
# A Bedrock stream as the observers' events


#: The content type of Bedrock's streamed answers.
EVENTSTREAM_CONTENT_TYPE: Final = "application/vnd.amazon.eventstream"


def _error_event(kind: str) -> SSEEvent:
    """An Anthropic-shaped error event naming only the type (never the message)."""
    return SSEEvent("error", orjson.dumps({"type": "error", "error": {"type": kind}}).decode())


class BedrockStreamDecoder:
    """Decode a Bedrock event stream into the events its API's observer reads.

    Feed it the (decompressed) body as it arrives, split anywhere; each call
    returns the events completed so far (see the module docstring for their
    shape). Checksums are checked (:class:`~modeltap.wire.eventstream.EventStreamDecoder`);
    memory holds at most one unfinished message.

    Raises (from :meth:`feed` and :meth:`close`):
        UpstreamProtocolError: the stream broke its framing (a bad checksum,
            a message cut at the end, a chunk that is not base64 JSON); fixed
            text, nothing from the stream. Decoding ends.
    """

    __slots__ = ("_decoder",)

    def __init__(self) -> None:
        self._decoder = EventStreamDecoder()

    @property
    def at_event_boundary(self) -> bool:
        """Whether the next bytes start a message (nothing held, no error waiting)."""
        return self._decoder.at_message_boundary

    @property
    def max_pending_bytes(self) -> int:
        """The largest message accepted."""
        return self._decoder.max_message_bytes

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Take the next bytes; return the events they completed, in order."""
        return [_as_event(m) for m in self._decoder.feed(data)]

    def close(self) -> list[SSEEvent]:
        """The stream ended: raise if it ended inside a message."""
        return [_as_event(m) for m in self._decoder.close()]


def _as_event(message: EventStreamMessage) -> SSEEvent:
    meaning = read_bedrock_message(message)
    if isinstance(meaning, BedrockChunk):
        return SSEEvent(None, meaning.data)
    if isinstance(meaning, BedrockEvent):
        return SSEEvent(meaning.event_type, orjson.dumps(meaning.body).decode())
    if isinstance(meaning, BedrockException):
        return _error_event(meaning.exception_type)
    assert isinstance(meaning, BedrockError)
    return _error_event(meaning.error_code)


_PRELUDE: Final = struct.Struct(">III")
_CRC: Final = struct.Struct(">I")


class FrameTemplate:
    """One plain Bedrock event's frame with its payload's slots open
    (:mod:`modeltap.apis.stream_templates`).

    A frame matches when its headers are the exemplar's byte for byte, both
    checksums hold, its length is one the decoder accepts, and its payload
    matches the exemplar's JSON with other values in the slots and is UTF-8:
    exactly the frames the decoder would hand on as the exemplar's event type
    with such a payload.

    Args:
        headers: the exemplar's headers block.
        shape: a payload of this shape, byte for byte.
        output: what the observer returned for the exemplar.
    """

    __slots__ = ("_fullmatch", "_seen", "headers", "output", "shape")

    def __init__(self, headers: bytes, shape: Shape, output: bool) -> None:
        self.headers = headers
        self.shape = shape
        self.output = output
        self._seen = 0
        self._fullmatch: Callable[[bytes], re.Match[bytes] | None] | None = None

    def _payload(self, payload: bytes) -> bool:
        """Whether a payload has the shape (whole)."""
        if self._fullmatch is not None:
            return self._fullmatch(payload) is not None
        self._seen += 1
        if self._seen >= COMPILE_AFTER:
            self._fullmatch = self.shape.compiled().fullmatch
        return self.shape.end(payload, 0) == len(payload)

    def consumed(self, data: bytes) -> tuple[int, int]:
        """How many whole frames at the start of ``data`` match, and where they end."""
        pos, count, size = 0, 0, len(data)
        headers, shaped = self.headers, self._payload
        start = PRELUDE_BYTES + len(headers)
        while size - pos >= MIN_MESSAGE_BYTES:
            total, headers_length, prelude_crc = _PRELUDE.unpack_from(data, pos)
            end = pos + total
            if (
                headers_length != len(headers)
                or end > size
                or total < start + 4
                or total > MAX_JSON_BYTES
                or not data.startswith(headers, pos + PRELUDE_BYTES)
                or zlib.crc32(data[pos : pos + 8]) != prelude_crc
                or zlib.crc32(data[pos + 8 : end - 4], prelude_crc)
                != _CRC.unpack_from(data, end - 4)[0]
            ):
                break
            payload = data[pos + start : end - 4]
            if not shaped(payload) or not _utf8(payload):
                break
            pos = end
            count += 1
        return count, pos

    @classmethod
    def make(
        cls, raw: bytes, event: SSEEvent, parsed: Json, slots: Slots, output: bool
    ) -> FrameTemplate | None:
        """A template from one frame (exactly ``raw``), or None when it fits none."""
        if len(raw) < MIN_MESSAGE_BYTES or event.event in (None, "chunk", "error"):
            return None
        total, headers_length, _ = _PRELUDE.unpack_from(raw)
        if total != len(raw) or headers_length > total - MIN_MESSAGE_BYTES:
            return None
        # An event other than a chunk is its payload parsed (and written
        # again: ``_as_event``), so ``parsed`` is what the payload parses to.
        payload = raw[PRELUDE_BYTES + headers_length : -4]
        shape = json_shape(payload, parsed, slots)
        if shape is None:
            return None
        headers = raw[PRELUDE_BYTES : PRELUDE_BYTES + headers_length]
        return cls(headers, shape, output)


def _utf8(payload: bytes) -> bool:
    """Whether the payload is UTF-8 (the JSON parser refuses anything else)."""
    if payload.isascii():
        return True
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


#: Bedrock Runtime's streams (ConverseStream, InvokeModelWithResponseStream).
EVENT_STREAM: Final = Framing(
    "eventstream", EVENTSTREAM_CONTENT_TYPE, BedrockStreamDecoder, template=FrameTemplate.make
)
