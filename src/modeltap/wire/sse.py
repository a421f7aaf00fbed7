"""Incremental Server-Sent Events decoder (sans-I/O): feed bytes, get events.

:class:`SSEDecoder` implements the WHATWG "event stream interpretation" rules
(https://html.spec.whatwg.org/multipage/server-sent-events.html) on raw bytes,
in the style of websockets' protocol objects: no sockets, no clock, no
mitmproxy; the caller feeds bytes as they arrive and receives whole events.

We write it ourselves because the PyPI parsers do not fit a byte-fed sans-I/O
object: httpx-sse's ``SSEDecoder`` takes already-split text lines (the line
splitting lives in httpx), sseclient-py and aiohttp-sse-client wrap a
transport's iterator, and sse-starlette only encodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from modeltap.rules.errors import UpstreamProtocolError


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched SSE event. ``event`` is None when no ``event:`` field was sent."""

    event: str | None
    data: str
    id: str | None = None


#: Default bound on bytes held for one unfinished line plus the undispatched
#: event it belongs to. Real model streams send events of a few KiB; 16 MiB
#: leaves room for large tool arguments or inline images while keeping a broken
#: upstream (no newline, ever) from growing the proxy's memory without limit.
MAX_PENDING_BYTES: Final = 16 * 1024 * 1024

_BOM: Final = b"\xef\xbb\xbf"


class SSEDecoder:
    """Sans-I/O SSE parser: :meth:`feed` it bytes, it returns complete events.

    Follows the WHATWG rules: lines end in ``\\r\\n``, ``\\r`` or ``\\n`` (a
    ``\\r\\n`` pair may be split between chunks); lines starting with ``:`` are
    comments; ``data`` lines of one event are joined with ``\\n``; a blank line
    dispatches the event if it has data; ``retry`` and unknown fields are
    ignored; a field without a colon has an empty value; one space after the
    colon is dropped; one leading UTF-8 byte order mark is ignored. Text is
    decoded as UTF-8 with ``errors="replace"``, so bad bytes never raise.

    The ``id`` of an event is the *last event ID*: as in browsers it persists
    across events until another ``id`` field changes it. An empty ``event``
    field means the default type, reported as ``None`` like a missing one.

    Each :meth:`feed` costs time proportional to its chunk: only the
    unfinished last line is kept between calls, never the whole stream.

    Memory is bounded: when the unfinished line plus the undispatched event
    exceed ``max_pending_bytes`` (16 MiB by default), :meth:`feed` raises
    :class:`~modeltap.rules.errors.UpstreamProtocolError`, drops its buffers and
    refuses further input; an upstream that never ends a line would otherwise
    grow the proxy's memory forever.

    Args:
        max_pending_bytes: the bound described above.
    """

    def __init__(self, max_pending_bytes: int = MAX_PENDING_BYTES) -> None:
        self._max_pending = max_pending_bytes
        # Bytes of the line not yet terminated (or of a possible BOM at start).
        self._line = bytearray()
        # The previous chunk ended in "\r": a "\n" opening the next one is the
        # second half of that "\r\n", not an empty line.
        self._skip_lf = False
        self._bom_checked = False
        self._data: list[str] = []
        self._event_type = ""
        self._last_event_id: str | None = None
        # Raw bytes of the field lines of the event being built, so a cut
        # stream can be told apart from one that ended between events.
        self._event_bytes = 0
        self._closed = False

    @property
    def pending_bytes(self) -> int:
        """Bytes received that belong to no dispatched event yet.

        Non-zero after :meth:`close` means the stream was cut mid-event (or
        mid-line): the upstream sent part of an event that was then discarded.
        Comment and blank lines do not count.
        """
        return len(self._line) + self._event_bytes

    @property
    def at_event_boundary(self) -> bool:
        """Whether the decoder holds nothing between events: the next bytes start
        an event, as if the stream began there (its byte order mark was read,
        no line, field or ``\\r\\n`` half is pending, the stream is open)."""
        return (
            self._bom_checked
            and not self._skip_lf
            and not self._line
            and not self._event_bytes
            and not self._data
            and not self._event_type
            and not self._closed
        )

    @property
    def max_pending_bytes(self) -> int:
        """The bound on bytes held for one unfinished event (see the class)."""
        return self._max_pending

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called or a protocol error ended decoding."""
        return self._closed

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Consume the next chunk of the stream.

        Args:
            data: the bytes that just arrived, split anywhere (even inside a
                multi-byte character or a ``\\r\\n`` pair).

        Returns:
            The events completed by this chunk, in order (often empty).

        Raises:
            UpstreamProtocolError: if more than ``max_pending_bytes`` are held
                for one unfinished line and its event.
            RuntimeError: if called after :meth:`close` or after an error.
        """
        if self._closed:
            raise RuntimeError("SSEDecoder.feed() called after the stream ended")
        if not data:
            return []
        if not self._bom_checked:
            # The BOM may itself be split across the first chunks: wait until
            # three bytes are in, or until they can no longer be a BOM.
            head = bytes(self._line) + data
            if len(head) < len(_BOM) and _BOM.startswith(head):
                self._line[:] = head
                return []
            self._bom_checked = True
            self._line.clear()
            data = head.removeprefix(_BOM)
            if not data:
                return []
        if self._skip_lf:
            self._skip_lf = False
            if data[0] == 0x0A:
                data = data[1:]
                if not data:
                    return []

        if b"\r" in data:
            # A chunk ending exactly on "\r" has finished its line, but a "\n"
            # opening the next chunk must not end another one.
            self._skip_lf = data[-1] == 0x0D
            # Inside one chunk every pair and lone "\r" is a plain line end;
            # bytes.replace/split run in C, several times faster than a regex.
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.split(b"\n")
        tail = lines.pop()  # the unfinished last line, often b""
        events: list[SSEEvent] = []
        for line in lines:
            if self._line:
                # Joined once per completed line, so the cost stays
                # proportional to the bytes that made up that line.
                self._line += line
                line = bytes(self._line)
                self._line.clear()
            event = self._process_line(line)
            if event is not None:
                events.append(event)
        self._line += tail
        self._check_bound()
        return events

    def close(self) -> list[SSEEvent]:
        """Signal the end of the stream.

        Per the WHATWG rules an event without its terminating blank line is
        discarded, so this never produces an event; check
        :attr:`pending_bytes` afterwards to learn whether one was cut off.
        Calling it again does nothing.

        Returns:
            The events completed by the end of the stream: always empty under
            the WHATWG rules, returned for symmetry with :meth:`feed`.
        """
        self._closed = True
        return []

    def _process_line(self, line: bytes) -> SSEEvent | None:
        """Apply one complete line (terminator removed); return an event it dispatched."""
        if not line:
            return self._dispatch()
        if line[0] == 0x3A:  # ":" starts a comment (keep-alives, padding)
            return None
        self._event_bytes += len(line)
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value.decode("utf-8", "replace"))
        elif name == b"event":
            self._event_type = value.decode("utf-8", "replace")
        elif name == b"id" and b"\x00" not in value:
            # The spec ignores ids containing NUL, which could not be sent
            # back in a Last-Event-ID header.
            self._last_event_id = value.decode("utf-8", "replace")
        # "retry" and unknown fields are ignored: we never reconnect.
        self._check_bound()
        return None

    def _dispatch(self) -> SSEEvent | None:
        """End the current event at a blank line; return it if it carried data."""
        event = None
        if self._data:
            event = SSEEvent(
                event=self._event_type or None,
                data="\n".join(self._data),
                id=self._last_event_id,
            )
        self._data = []
        self._event_type = ""
        self._event_bytes = 0
        return event

    def _check_bound(self) -> None:
        """Raise, dropping the buffers, if too many bytes wait for an event to end."""
        if self.pending_bytes > self._max_pending:
            # Keep the count (the stream was cut mid-event) but free the bytes.
            self._event_bytes = self.pending_bytes
            self._line = bytearray()
            self._data = []
            self._closed = True
            raise UpstreamProtocolError(
                f"SSE stream held more than {self._max_pending} bytes without completing an event"
            )
