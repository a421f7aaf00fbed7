"""Incremental decoder for a streamed JSON array (sans-I/O): feed bytes, get elements.

Gemini's ``:streamGenerateContent`` without ``?alt=sse`` answers one JSON
array whose elements (whole ``GenerateContentResponse`` objects) arrive one
by one: ``[{…}\\r\\n,{…}\\r\\n]``. A client reads each element as soon as its
closing brace is in; so does :class:`JsonArrayDecoder`, in the style of
:class:`~modeltap.wire.sse.SSEDecoder`: no sockets, no clock, bytes in, whole
elements out. Each element is handed over as an :class:`~modeltap.wire.sse.SSEEvent`
whose ``data`` is the element's JSON text (``event`` is ``None``), so one
stream observer reads both of Gemini's stream framings.

Only the element being received is held, never the array: memory is bounded
by the largest element (and by ``max_pending_bytes``). Scanning finds the next
bracket, brace or whole string with a regular expression (C speed), never
byte by byte in Python.
"""

from __future__ import annotations

import re
from typing import Final

from modeltap.rules.errors import UpstreamProtocolError
from modeltap.wire.sse import MAX_PENDING_BYTES, SSEEvent

_BOM: Final = b"\xef\xbb\xbf"
_WHITESPACE: Final = b" \t\r\n"
#: What changes the state inside an element, outside a string: a bracket, or a
#: whole string (its closing quote in group 1; absent when the chunk ends first).
_TOKEN: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(")?|[\[\]{}]', re.DOTALL)
#: What ends a string, or escapes the next byte, inside one.
_STRING_END: Final = re.compile(rb'["\\]')
#: What ends a scalar element (a number, ``true``, ``null``) at depth 0.
_SCALAR_END: Final = re.compile(rb"[,\]\s]")

# States between elements.
_START, _OPEN, _AFTER, _END = range(4)


class JsonArrayDecoder:
    """Sans-I/O reader of one streamed JSON array: :meth:`feed` bytes, get elements.

    The text must be one array (whitespace and one UTF-8 byte order mark
    allowed before it, whitespace after it). Elements are not parsed here:
    each is returned whole, as text, for the observer to parse; an element
    that is not valid JSON is the observer's capture error, not this
    decoder's. A broken frame (no ``[`` first, a missing comma, data after
    the closing ``]``, an element larger than the bound) raises
    :class:`~modeltap.rules.errors.UpstreamProtocolError` and ends decoding.

    Args:
        max_pending_bytes: the most bytes held for one unfinished element.
    """

    def __init__(self, max_pending_bytes: int = MAX_PENDING_BYTES) -> None:
        self._max_pending = max_pending_bytes
        self._state = _START
        self._element = bytearray()
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._scalar = False
        self._in_element = False
        self._head = b""  # a byte order mark's first bytes, split across chunks
        self._closed = False

    @property
    def finished(self) -> bool:
        """True once the array's closing ``]`` was read."""
        return self._state == _END

    @property
    def pending_bytes(self) -> int:
        """Bytes of an element begun but not yet complete (non-zero after a cut)."""
        return len(self._element)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called or a protocol error ended decoding."""
        return self._closed

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Consume the next chunk of the stream.

        Args:
            data: the bytes that just arrived, split anywhere.

        Returns:
            The elements completed by this chunk, in order (often empty).

        Raises:
            UpstreamProtocolError: the bytes are not a JSON array's framing,
                or an element passed ``max_pending_bytes``.
            RuntimeError: if called after :meth:`close` or after an error.
        """
        if self._closed:
            raise RuntimeError("JsonArrayDecoder.feed() called after the stream ended")
        if self._state == _START and (self._head or data[:1] == _BOM[:1]):
            head = self._head + data
            if len(head) < len(_BOM) and _BOM.startswith(head):
                self._head = head
                return []
            self._head = b""
            data = head.removeprefix(_BOM)
        out: list[SSEEvent] = []
        pos, end = 0, len(data)
        try:
            while pos < end:
                if self._in_element:
                    pos = self._scan_element(data, pos, out)
                    continue
                byte = data[pos]
                if byte in _WHITESPACE:
                    pos += 1
                elif self._state == _START:
                    if byte != 0x5B:  # "["
                        self._fail("the streamed JSON array does not start with '['")
                    self._state, pos = _OPEN, pos + 1
                elif self._state == _END:
                    self._fail("the streamed JSON array has data after its closing ']'")
                elif byte == 0x5D:  # "]"
                    self._state, pos = _END, pos + 1
                elif self._state == _AFTER:
                    if byte != 0x2C:  # ","
                        self._fail("the streamed JSON array has no ',' between two elements")
                    self._state, pos = _OPEN, pos + 1
                else:  # an element starts: its first byte is read as part of it
                    self._in_element = True
                    self._scalar = byte not in (0x7B, 0x5B, 0x22)  # not "{", "[" or '"'
        finally:
            self._check_bound()
        return out

    def close(self) -> list[SSEEvent]:
        """Signal the end of the stream; an element cut off is dropped (see
        :attr:`pending_bytes` and :attr:`finished`). Returns no element."""
        self._closed = True
        return []

    def _scan_element(self, data: bytes, pos: int, out: list[SSEEvent]) -> int:
        """Read element bytes from ``pos``; return where reading stopped."""
        end = len(data)
        if self._scalar:
            found = _SCALAR_END.search(data, pos)
            stop = end if found is None else found.start()
            self._element += data[pos:stop]
            if found is not None:
                self._emit(out)
            return stop
        while pos < end:
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                    self._element.append(data[pos])
                    pos += 1
                    continue
                found = _STRING_END.search(data, pos)
                if found is None:
                    self._element += data[pos:]
                    return end
                stop = found.end()
                self._element += data[pos:stop]
                pos = stop
                if data[stop - 1] == 0x5C:  # "\\": the next byte is escaped
                    if pos < end:
                        self._element.append(data[pos])
                        pos += 1
                    else:
                        self._escaped = True
                    continue
                self._in_string = False
                if self._depth == 0:  # a string element ends with its quote
                    self._emit(out)
                    return pos
                continue
            for found in _TOKEN.finditer(data, pos):
                byte = data[found.start()]
                if byte == 0x22:  # a string, read whole by the regular expression
                    if found.group(1) is None:  # the chunk ends inside it
                        self._element += data[pos:]
                        self._in_string = True
                        self._escaped = found.end() < end  # it stopped before a last "\\"
                        return end
                    if self._depth > 0:
                        continue
                elif byte in (0x7B, 0x5B):  # "{", "["
                    self._depth += 1
                    continue
                else:
                    self._depth -= 1
                    if self._depth > 0:
                        continue
                stop = found.end()  # the element is complete
                self._element += data[pos:stop]
                self._emit(out)
                return stop
            self._element += data[pos:]
            return end
        return pos

    def _emit(self, out: list[SSEEvent]) -> None:
        out.append(SSEEvent(None, self._element.decode("utf-8", "replace")))
        self._element = bytearray()
        self._depth, self._scalar, self._in_element, self._state = 0, False, False, _AFTER

    def _fail(self, message: str) -> None:
        self._closed = True
        self._element = bytearray()
        raise UpstreamProtocolError(message)

    def _check_bound(self) -> None:
        if len(self._element) > self._max_pending:
            self._fail(
                f"a streamed JSON array element passed {self._max_pending} bytes "
                "without being complete"
            )
