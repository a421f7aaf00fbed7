"""``--max-body`` for WebSocket messages, enforced while frames arrive.

mitmproxy hands a WebSocket message to addons only once it is complete, and
wsproto (which parses the frames for it) inflates permessage-deflate frames
without any bound: a 1 MB frame of compressed zeros became a 1 GiB message
before modeltap could look at it (SPEC 2, "No way around the audit"). So the
bound sits where the bytes are produced, in wsproto's extension hooks, which
see every frame's payload as it arrives, after inflation:

- :class:`BoundedPerMessageDeflate` replaces wsproto's ``PerMessageDeflate``
  on connections that negotiated compression: it inflates in pieces and stops
  as soon as the message passes the limit;
- :class:`MessageLimit` counts the payload on connections that did not.

A message past the limit ends the connection with close code 1009 (message
too big, RFC 6455 7.4.1) towards both peers. Keeping the connection open would
mean inflating the rest of the message only to throw it away; closing stops
the work at the limit. The partial message is never forwarded: mitmproxy
relays a message only when it is complete. The direction that broke the limit
is left in ``flow.metadata[TOO_BIG_KEY]`` (``"client"`` or ``"server"``) for
the addon to record.

:func:`install` puts :class:`BoundedWebsocketLayer` in place of mitmproxy's
``WebsocketLayer``. It reads the limit from its own master's options
(``modeltap_max_body``), so a master without modeltap keeps mitmproxy's own
behaviour.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any, Final

import wsproto
import wsproto.extensions
import wsproto.utilities
from mitmproxy.proxy import commands, events, layer
from mitmproxy.proxy.layers import websocket
from mitmproxy.proxy.utils import expect
from mitmproxy.utils import human
from wsproto.frame_protocol import CloseReason, Opcode, RsvBits

from modeltap.addons.patches import capture, replace

#: ``flow.metadata`` key: which side sent a message past ``--max-body``.
TOO_BIG_KEY: Final = "modeltap_ws_too_big"
#: Inflated output per zlib call, so a hostile frame never sits in memory twice
#: at full size (zlib joins its output blocks at the end of each call).
_PIECE: Final = 1024 * 1024
#: Deflate's largest expansion (a 258-byte match in about two bits). A chunk
#: that could inflate past what is left of the limit is measured first.
_DEFLATE_MAX_RATIO: Final = 1032

_OriginalLayer = websocket.WebsocketLayer
capture(websocket, "WebsocketLayer")  # mitmproxy's, kept before install() replaces it


class MessageLimit(wsproto.extensions.Extension):
    """Counts each data message's payload and stops it past ``limit`` bytes.

    Never negotiated: it claims no reserved bit and changes no frame.

    Args:
        limit: the largest message accepted, in bytes.
        exceeded: called once when a message passes the limit.
    """

    name = "modeltap-message-limit"

    def __init__(self, limit: int, exceeded: Callable[[], None]) -> None:
        self._limit = limit
        self._exceeded = exceeded
        self._size = 0
        self._data_frame = False

    def enabled(self) -> bool:
        return True

    def offer(self) -> bool:
        return False  # never offered in a handshake: it only watches frames

    def frame_inbound_header(
        self, proto: Any, opcode: Opcode, rsv: RsvBits, payload_length: int
    ) -> CloseReason | RsvBits:
        # Control frames (ping, pong, close: 125 bytes at most) may come between
        # the fragments of a message; they neither count nor end it.
        self._data_frame = not opcode.iscontrol()
        return RsvBits(False, False, False)

    def frame_inbound_payload_data(self, proto: Any, data: bytes) -> bytes | CloseReason:
        if self._data_frame:
            self._size += len(data)
            if self._size > self._limit:
                self._exceeded()
                return CloseReason.MESSAGE_TOO_BIG
        return data

    def frame_inbound_complete(self, proto: Any, fin: bool) -> bytes | CloseReason | None:
        if fin and self._data_frame:
            self._size = 0
        return None


class BoundedPerMessageDeflate(wsproto.extensions.PerMessageDeflate):
    """wsproto's permessage-deflate, inflating at most ``limit`` bytes per message.

    Args:
        limit: the largest inflated message accepted, in bytes.
        exceeded: called once when a message passes the limit.
    """

    def __init__(self, limit: int, exceeded: Callable[[], None]) -> None:
        super().__init__()
        self._limit = limit
        self._exceeded = exceeded
        self._size = 0
        self._data_frame = False

    def frame_inbound_header(
        self, proto: Any, opcode: Opcode, rsv: RsvBits, payload_length: int
    ) -> CloseReason | RsvBits:
        self._data_frame = not opcode.iscontrol()
        result: CloseReason | RsvBits = super().frame_inbound_header(
            proto, opcode, rsv, payload_length
        )
        return result

    def frame_inbound_payload_data(self, proto: Any, data: bytes) -> bytes | CloseReason:
        if not self._data_frame:
            return data
        if not self._inbound_compressed or not self._inbound_is_compressible:
            return self._count(data)
        assert self._decompressor is not None
        tail = bytes(data)
        room = self._limit - self._size
        try:
            if len(tail) * _DEFLATE_MAX_RATIO > room and self._inflated_size(tail, room) > room:
                # A bomb, found on a copy of the inflater without keeping its
                # output: the loop below would hold up to the limit in memory.
                self._exceeded()
                return CloseReason.MESSAGE_TOO_BIG
        except zlib.error:
            return CloseReason.INVALID_FRAME_PAYLOAD_DATA
        pieces: list[bytes] = []
        more = True
        try:
            while tail or more:
                # One byte past what is left tells "too big" from "exactly full".
                room = self._limit - self._size + 1
                piece = self._decompressor.decompress(tail, min(room, _PIECE))
                tail = self._decompressor.unconsumed_tail
                more = len(piece) == _PIECE  # zlib may hold more output
                self._size += len(piece)
                if self._size > self._limit:
                    self._exceeded()
                    return CloseReason.MESSAGE_TOO_BIG
                pieces.append(piece)
        except zlib.error:
            return CloseReason.INVALID_FRAME_PAYLOAD_DATA
        return b"".join(pieces)

    def _inflated_size(self, data: bytes, room: int) -> int:
        """How much ``data`` inflates to, up to ``room + 1``, on a copy of the state."""
        assert self._decompressor is not None
        probe = self._decompressor.copy()
        size = 0
        more = True
        while (data or more) and size <= room:
            piece = probe.decompress(data, _PIECE)
            data = probe.unconsumed_tail
            more = len(piece) == _PIECE
            size += len(piece)
        return size

    def frame_inbound_complete(self, proto: Any, fin: bool) -> bytes | CloseReason | None:
        if not self._data_frame:
            return None
        # The inherited step adds the 4-byte sync tail: after the bounded calls
        # above zlib holds no output, so what it returns is a few bytes at most.
        result: bytes | CloseReason | None = super().frame_inbound_complete(proto, fin)
        if isinstance(result, bytes):
            result = self._count(result)
        if fin:
            self._size = 0
        return result

    def _count(self, data: bytes) -> bytes | CloseReason:
        self._size += len(data)
        if self._size > self._limit:
            self._exceeded()
            return CloseReason.MESSAGE_TOO_BIG
        return data


def max_message_bytes(options: Any) -> int | None:
    """The message limit a master's options set: ``modeltap_max_body``, or None."""
    value = getattr(options, "modeltap_max_body", None)
    if not value:
        return None
    try:
        size = human.parse_size(value)
    except ValueError:
        return None
    return size if size and size > 0 else None


class BoundedWebsocketLayer(_OriginalLayer):
    """mitmproxy's WebSocket layer with every message bounded by ``--max-body``.

    Only :meth:`start` differs: it builds the two wsproto connections with the
    bounded extensions (the rest of mitmproxy's start is the same).
    """

    @expect(events.Start)  # type: ignore[untyped-decorator]
    def start(self, event: events.Event) -> layer.CommandGenerator[None]:
        limit = max_message_bytes(self.context.options)
        if limit is None:
            yield from _OriginalLayer.start(self, event)
            return
        client_ext: list[wsproto.extensions.Extension] = []
        server_ext: list[wsproto.extensions.Extension] = []
        assert self.flow.response is not None
        header = self.flow.response.headers.get("Sec-WebSocket-Extensions", "")
        for ext in wsproto.utilities.split_comma_header(header.encode("ascii", "replace")):
            ext_name = ext.split(";", 1)[0].strip()
            if ext_name == wsproto.extensions.PerMessageDeflate.name:
                for side, found in ((client_ext, "client"), (server_ext, "server")):
                    deflate = BoundedPerMessageDeflate(limit, self._too_big(found))
                    deflate.finalize(ext)
                    side.append(deflate)
            else:
                yield commands.Log(f"Ignoring unknown WebSocket extension {ext_name!r}.")
        if not client_ext:
            client_ext.append(MessageLimit(limit, self._too_big("client")))
            server_ext.append(MessageLimit(limit, self._too_big("server")))
        self.client_ws = websocket.WebsocketConnection(
            wsproto.ConnectionType.SERVER, client_ext, conn=self.context.client
        )
        self.server_ws = websocket.WebsocketConnection(
            wsproto.ConnectionType.CLIENT, server_ext, conn=self.context.server
        )
        yield websocket.WebsocketStartHook(self.flow)
        self._handle_event = self.relay_messages

    _handle_event = start

    def _too_big(self, side: str) -> Callable[[], None]:
        def exceeded() -> None:
            self.flow.metadata.setdefault(TOO_BIG_KEY, side)

        return exceeded


def install() -> None:
    """Make mitmproxy build WebSocket layers with the bound (idempotent)."""
    replace(websocket, "WebsocketLayer", BoundedWebsocketLayer)
