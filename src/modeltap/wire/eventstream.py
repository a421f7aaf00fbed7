"""Incremental AWS event stream decoder (sans-I/O): feed bytes, get messages.

Bedrock's streaming answers (ConverseStream, InvokeModelWithResponseStream)
use the binary ``application/vnd.amazon.eventstream`` framing. Each message
is, all integers big-endian::

    total length u32 | headers length u32 | prelude CRC32 (of the 8 bytes before it)
    headers          (headers length bytes)
    payload          (total length - headers length - 16 bytes)
    message CRC32    (of every byte of the message before it)

and each header is ``name length u8 | name (UTF-8) | type u8 | value``, the
value's shape set by the type (:class:`HeaderType`).

:class:`EventStreamDecoder` is fed bytes as they arrive, split anywhere, and
hands back whole, checksum-checked :class:`EventStreamMessage` objects, in the
style of websockets' protocol objects and :class:`~modeltap.wire.sse.SSEDecoder`.
This is the framing only: what Bedrock means by a message (an event, a
chunk wrapping an Anthropic event, an exception) is
:mod:`modeltap.apis.bedrock_converse.stream`'s.

We write the decoder ourselves because the libraries do not fit a byte-fed,
bounded, fail-closed object. botocore's ``EventStreamBuffer`` comes closest
(``add_data`` then iterate), but it re-copies its whole buffer on every
``add_data`` (a 16 MiB message in 4 KiB pieces takes seconds), holds whatever
it is given, has no end-of-stream check, accepts some malformed frames (a
12-byte message; a string header running past its block) and lets
``KeyError``, ``struct.error`` and ``UnicodeDecodeError`` escape, with values
from the wire in its messages; and botocore is a large dependency the core
does not otherwise need. smithy-aws-event-stream pulls from a reader
(``read(n)``) instead of being fed. Both serve as cross-checks in the tests.
"""

from __future__ import annotations

import enum
import struct
import uuid
import zlib
from dataclasses import dataclass
from typing import Final

from modeltap.rules.errors import UpstreamProtocolError

#: Default bound on one message's total length. It is the limit of AWS's own
#: C implementation (aws-c-event-stream); Bedrock's messages are a few hundred
#: bytes, so a bigger one means a broken or hostile upstream, and the decoder
#: holds at most one unfinished message of at most this size.
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024

#: Bound on a message's headers block, as in every AWS implementation.
MAX_HEADERS_BYTES: Final = 128 * 1024

#: The prelude (two lengths and their CRC).
PRELUDE_BYTES: Final = 12

#: The smallest possible message: a prelude and the message CRC, nothing else.
MIN_MESSAGE_BYTES: Final = PRELUDE_BYTES + 4

_PRELUDE = struct.Struct(">III")
_U32 = struct.Struct(">I")


class HeaderType(enum.IntEnum):
    """A header value's wire type: the byte after the header's name."""

    BOOL_TRUE = 0  #: no value bytes; the value is ``True``
    BOOL_FALSE = 1  #: no value bytes; the value is ``False``
    BYTE = 2  #: signed 8-bit ``int``
    SHORT = 3  #: signed 16-bit ``int``
    INTEGER = 4  #: signed 32-bit ``int``
    LONG = 5  #: signed 64-bit ``int``
    BYTE_ARRAY = 6  #: u16 length, then that many ``bytes``
    STRING = 7  #: u16 length, then that many bytes of UTF-8, as ``str``
    TIMESTAMP = 8  #: signed 64-bit ``int``: milliseconds since the Unix epoch
    UUID = 9  #: 16 bytes, as :class:`uuid.UUID`


#: A header's value, by type: ``bool`` (BOOL_TRUE/BOOL_FALSE), ``int`` (BYTE,
#: SHORT, INTEGER, LONG, TIMESTAMP), ``bytes``, ``str``, :class:`uuid.UUID`.
type HeaderValue = bool | int | bytes | str | uuid.UUID

#: Bit width of each signed integer type.
_INT_BITS: Final[dict[int, int]] = {
    HeaderType.BYTE: 8,
    HeaderType.SHORT: 16,
    HeaderType.INTEGER: 32,
    HeaderType.LONG: 64,
    HeaderType.TIMESTAMP: 64,
}

#: Value bytes of each fixed-size type (booleans have none).
_FIXED_SIZE: Final[dict[int, int]] = {
    HeaderType.BYTE: 1,
    HeaderType.SHORT: 2,
    HeaderType.INTEGER: 4,
    HeaderType.LONG: 8,
    HeaderType.TIMESTAMP: 8,
    HeaderType.UUID: 16,
}


def _utf8_length(text: str) -> int:
    """Bytes of ``text`` in UTF-8; ``ValueError`` for a lone surrogate."""
    # isascii() reads a flag of the string: Bedrock's names and values never
    # pay for an encode.
    return len(text) if text.isascii() else len(text.encode("utf-8"))


#: The header types by wire code, for the parser (an enum call costs more),
#: and the codes it tests as plain ints (comparing with enum members costs more).
_TYPES: Final = tuple(HeaderType)
_BOOL_TRUE: Final = int(HeaderType.BOOL_TRUE)
_BOOL_FALSE: Final = int(HeaderType.BOOL_FALSE)
_BYTE_ARRAY: Final = int(HeaderType.BYTE_ARRAY)
_STRING: Final = int(HeaderType.STRING)
_UUID: Final = int(HeaderType.UUID)


@dataclass(frozen=True, slots=True)
class Header:
    """One typed header of a message.

    Valid on construction: a header that could not be written on the wire
    cannot exist.

    Args:
        name: at most 255 bytes of UTF-8 (empty is accepted, as every AWS
            decoder does).
        type: the wire type.
        value: a value of the Python type :data:`HeaderValue` gives for
            ``type``, within its range (``True`` exactly for BOOL_TRUE, at most
            65535 bytes for BYTE_ARRAY and STRING, ...).

    Raises:
        ValueError: if the name or value does not fit the wire (a lone
            surrogate in a ``str``, a too long name or value, an integer out
            of range).
        TypeError: if the value's Python type does not match ``type``.
    """

    name: str
    type: HeaderType
    value: HeaderValue

    def __post_init__(self) -> None:
        if _utf8_length(self.name) > 255:
            raise ValueError("an event stream header name is longer than 255 bytes")
        kind, value = HeaderType(self.type), self.value
        if kind is not self.type:  # a plain int given for the type
            object.__setattr__(self, "type", kind)
        if kind <= HeaderType.BOOL_FALSE:
            if value is not (kind == HeaderType.BOOL_TRUE):
                raise TypeError("a boolean header's value must match its type")
        elif kind in _INT_BITS:
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError("an integer header's value must be an int")
            bound = 1 << (_INT_BITS[kind] - 1)
            if not -bound <= value < bound:
                raise ValueError("an integer header's value is out of range for its type")
        elif kind == HeaderType.BYTE_ARRAY:
            if not isinstance(value, bytes):
                raise TypeError("a byte array header's value must be bytes")
            if len(value) > 0xFFFF:
                raise ValueError("a byte array header's value is longer than 65535 bytes")
        elif kind == HeaderType.STRING:
            if not isinstance(value, str):
                raise TypeError("a string header's value must be a str")
            if _utf8_length(value) > 0xFFFF:
                raise ValueError("a string header's value is longer than 65535 bytes")
        elif not isinstance(value, uuid.UUID):
            raise TypeError("a UUID header's value must be a uuid.UUID")


@dataclass(frozen=True, slots=True)
class EventStreamMessage:
    """One whole message of an event stream, checksums already checked.

    Args:
        headers: the headers in wire order; names are unique.
        payload: the payload bytes, as sent.

    Raises:
        ValueError: if two headers share a name (decoders disagree on which
            one wins, so none is accepted).
    """

    headers: tuple[Header, ...]
    payload: bytes

    def __post_init__(self) -> None:
        if len({header.name for header in self.headers}) != len(self.headers):
            raise ValueError("an event stream message repeats a header name")

    def get(self, name: str) -> HeaderValue | None:
        """The value of the header called ``name``.

        Args:
            name: the header's name, e.g. ``":event-type"``.

        Returns:
            Its value, or None if the message has no such header.
        """
        for header in self.headers:
            if header.name == name:
                return header.value
        return None


# The decoder's errors: fixed texts, never anything read from the stream.
_CORRUPT_PRELUDE: Final = "the event stream is corrupt: a message's prelude fails its checksum"
_CORRUPT_MESSAGE: Final = "the event stream is corrupt: a message fails its checksum"
_TOO_SHORT: Final = (
    "the event stream is corrupt: a message is shorter than its prelude and checksum"
)
_HEADERS_OVERRUN: Final = (
    "the event stream is corrupt: a message's headers are longer than the message"
)
_HEADERS_TOO_LONG: Final = (
    f"the event stream has a message whose headers are longer than {MAX_HEADERS_BYTES} bytes"
)
_MALFORMED_HEADER: Final = "the event stream has a malformed message header"
_UNKNOWN_TYPE: Final = "the event stream has a message header of an unknown type"
_NOT_UTF8: Final = "the event stream has a message header that is not valid UTF-8"
_DUPLICATE: Final = "the event stream has a message that repeats a header name"
_TRUNCATED: Final = "the event stream ended in the middle of a message"


class EventStreamDecoder:
    """Sans-I/O event stream parser: :meth:`feed` it bytes, it returns whole messages.

    Both checksums are checked: the prelude's as soon as its 12 bytes are in
    (so garbage is refused at once, before its "length" is believed), the
    message's when the message is complete. Every message is then parsed in
    full: header types, lengths and UTF-8 are checked, and a message whose
    headers do not exactly fill their block is refused.

    Memory is bounded: between calls only the one unfinished message is kept,
    and a prelude announcing more than ``max_message_bytes`` is refused when
    it arrives. Each :meth:`feed` costs time proportional to its chunk plus
    the messages it completes.

    Any :class:`~modeltap.rules.errors.UpstreamProtocolError` ends decoding: the
    buffer is dropped and further :meth:`feed` calls raise ``RuntimeError``,
    as after :meth:`close`. An error found after whole messages of the same
    chunk is raised by the next call (:meth:`feed` or :meth:`close`), so
    those messages are handed out first: what the caller gets, messages then
    error, never depends on how the stream was split. Error texts are fixed;
    no byte of the stream ever appears in one.

    Args:
        max_message_bytes: the largest total length accepted (16 MiB by
            default, AWS's own limit).

    Raises:
        ValueError: if ``max_message_bytes`` is below the 16-byte minimum.
    """

    def __init__(self, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        if max_message_bytes < MIN_MESSAGE_BYTES:
            raise ValueError("max_message_bytes is below the 16-byte minimum message")
        self._max = max_message_bytes
        # The unfinished message: its prelude, then the rest as it arrives.
        self._buffer = bytearray()
        # Its total length once the prelude is in and checked; 0 before.
        self._total = 0
        self._closed = False
        # What was held when decoding ended, kept as a count once freed.
        self._dropped = 0
        # An error found after messages of the same chunk, raised by the next call.
        self._deferred: UpstreamProtocolError | None = None

    @property
    def pending_bytes(self) -> int:
        """Bytes received that belong to no complete message yet.

        Non-zero at the end of a stream means it was cut mid-message (which
        :meth:`close` reports by raising). After an error or :meth:`close`
        the buffer is freed but its size is still reported here.
        """
        return len(self._buffer) or self._dropped

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called or a protocol error ended decoding."""
        return self._closed

    @property
    def at_message_boundary(self) -> bool:
        """Whether nothing is held between messages: the next bytes start one
        (the stream is open and no error waits for the next call)."""
        return not self._buffer and self._deferred is None and not self._closed

    @property
    def max_message_bytes(self) -> int:
        """The largest total length accepted."""
        return self._max

    def feed(self, data: bytes) -> list[EventStreamMessage]:
        """Consume the next chunk of the stream.

        Args:
            data: the bytes that just arrived (any bytes-like object), split
                anywhere, down to one byte at a time.

        Returns:
            The messages completed by this chunk, in order (often empty).

        Raises:
            UpstreamProtocolError: on a checksum mismatch, a length out of
                bounds, a malformed header, an unknown header type, a header
                that is not UTF-8 or a repeated header name, in this chunk or
                (after messages) in the previous one. Decoding ends.
            RuntimeError: if called after :meth:`close` or after an error.
        """
        self._raise_deferred()
        if self._closed:
            raise RuntimeError("EventStreamDecoder.feed() called after the stream ended")
        messages: list[EventStreamMessage] = []
        try:
            self._feed(memoryview(data).cast("B"), messages)
        except UpstreamProtocolError as error:
            self._fail()
            if not messages:
                raise
            self._deferred = error
        return messages

    def close(self) -> list[EventStreamMessage]:
        """Signal the end of the stream.

        A stream may only end between messages. Calling this again, or after
        an error, does nothing.

        Returns:
            The messages completed by the end of the stream: always empty
            (every message is handed out by the :meth:`feed` that completes
            it), returned for symmetry with :meth:`feed`.

        Raises:
            UpstreamProtocolError: if the stream ended inside a message (the
                partial message is dropped; :attr:`pending_bytes` still counts
                it), or the last :meth:`feed` found an error after its
                messages.
        """
        self._raise_deferred()
        if self._closed:
            return []
        self._closed = True
        if self._buffer:
            self._fail()
            raise UpstreamProtocolError(_TRUNCATED)
        return []

    def _raise_deferred(self) -> None:
        """Raise the error the previous :meth:`feed` found after its messages, once."""
        if self._deferred is not None:
            error, self._deferred = self._deferred, None
            raise error

    def _fail(self) -> None:
        """End decoding after an error: free the buffer, refuse further input."""
        self._closed = True
        self._dropped = len(self._buffer)
        self._buffer = bytearray()
        self._total = 0

    def _feed(self, view: memoryview, messages: list[EventStreamMessage]) -> None:
        """Decode ``view`` into ``messages``; whole messages in it are parsed in place."""
        pos, end = 0, len(view)
        while pos < end:
            if self._buffer:
                # Finish the unfinished message first: its prelude, then the rest.
                want = (self._total or PRELUDE_BYTES) - len(self._buffer)
                take = min(want, end - pos)
                self._buffer += view[pos : pos + take]
                pos += take
                if take < want:
                    break
                if not self._total:
                    with memoryview(self._buffer) as prelude:
                        self._total = self._check_prelude(prelude)
                    continue
                with memoryview(self._buffer) as whole:
                    messages.append(_parse_message(whole))
                # A fresh buffer, so a large message's memory goes with it.
                self._buffer = bytearray()
                self._total = 0
            elif end - pos < PRELUDE_BYTES:
                self._buffer += view[pos:]
                break
            else:
                total = self._check_prelude(view[pos : pos + PRELUDE_BYTES])
                if end - pos < total:
                    self._buffer += view[pos:]
                    self._total = total
                    break
                messages.append(_parse_message(view[pos : pos + total]))
                pos += total

    def _check_prelude(self, prelude: memoryview) -> int:
        """Check a 12-byte prelude; return the message's total length."""
        total, headers_length, crc = _PRELUDE.unpack_from(prelude)
        if zlib.crc32(prelude[:8]) != crc:
            raise UpstreamProtocolError(_CORRUPT_PRELUDE)
        if total < MIN_MESSAGE_BYTES:
            raise UpstreamProtocolError(_TOO_SHORT)
        if total > self._max:
            raise UpstreamProtocolError(
                f"the event stream has a message longer than {self._max} bytes"
            )
        if headers_length > total - MIN_MESSAGE_BYTES:
            raise UpstreamProtocolError(_HEADERS_OVERRUN)
        if headers_length > MAX_HEADERS_BYTES:
            raise UpstreamProtocolError(_HEADERS_TOO_LONG)
        return int(total)


def _wire_header(name: str, kind: HeaderType, value: HeaderValue) -> Header:
    """A :class:`Header` read off the wire, built without its checks: the format
    bounds a name by its one-byte length, a string or byte array by its
    two-byte length and an integer by its fixed size, so they hold by
    construction (and cost more than the parse: about 2 us a header)."""
    header: Header = _NEW(Header)
    _SET(header, "name", name)
    _SET(header, "type", kind)
    _SET(header, "value", value)
    return header


def _wire_message(headers: tuple[Header, ...], payload: bytes) -> EventStreamMessage:
    """An :class:`EventStreamMessage` whose header names :func:`_parse_headers`
    already found unique, built without checking them again."""
    message: EventStreamMessage = _NEW(EventStreamMessage)
    _SET(message, "headers", headers)
    _SET(message, "payload", payload)
    return message


_NEW = object.__new__
_SET = object.__setattr__


def _parse_message(message: memoryview) -> EventStreamMessage:
    """Check the CRC of one whole message (prelude already checked) and parse it."""
    _, headers_length, prelude_crc = _PRELUDE.unpack_from(message)
    end = len(message) - 4
    (crc,) = _U32.unpack_from(message, end)
    # The CRC covers the whole message before it; the prelude's part of that
    # is already known (it is the prelude CRC), so only the rest is read.
    if zlib.crc32(message[8:end], prelude_crc) != crc:
        raise UpstreamProtocolError(_CORRUPT_MESSAGE)
    headers_end = PRELUDE_BYTES + headers_length
    return _wire_message(
        _parse_headers(bytes(message[PRELUDE_BYTES:headers_end])),
        bytes(message[headers_end:end]),
    )


def _parse_headers(block: bytes) -> tuple[Header, ...]:
    """Parse a headers block; every header must end inside it, and it must end on one."""
    headers: list[Header] = []
    names: set[str] = set()
    pos, end = 0, len(block)
    try:
        while pos < end:
            name_end = pos + 1 + block[pos]
            if name_end >= end:  # the name and the type byte must fit
                raise UpstreamProtocolError(_MALFORMED_HEADER)
            name = block[pos + 1 : name_end].decode("utf-8")
            code = block[name_end]
            pos = name_end + 1
            value: HeaderValue
            if code in (_STRING, _BYTE_ARRAY):  # Bedrock sends only strings
                value_end = pos + 2 + int.from_bytes(block[pos : pos + 2])
                if pos + 2 > end or value_end > end:
                    raise UpstreamProtocolError(_MALFORMED_HEADER)
                raw = block[pos + 2 : value_end]
                value = raw.decode("utf-8") if code == _STRING else raw
                pos = value_end
            elif code <= _BOOL_FALSE:
                value = code == _BOOL_TRUE
            elif code in _FIXED_SIZE:
                value_end = pos + _FIXED_SIZE[code]
                if value_end > end:
                    raise UpstreamProtocolError(_MALFORMED_HEADER)
                raw = block[pos:value_end]
                value = uuid.UUID(bytes=raw) if code == _UUID else int.from_bytes(raw, signed=True)
                pos = value_end
            else:
                raise UpstreamProtocolError(_UNKNOWN_TYPE)
            if name in names:
                raise UpstreamProtocolError(_DUPLICATE)
            names.add(name)
            headers.append(_wire_header(name, _TYPES[code], value))
    except UnicodeDecodeError:
        raise UpstreamProtocolError(_NOT_UTF8) from None
    return tuple(headers)
