"""``--max-body`` for request bodies, enforced while they arrive.

mitmproxy reads a request body whole into memory before the ``request`` hook
(modeltap never streams requests: every decision is made on a whole request
before a byte of it reaches the upstream). Its only bound is the global
``body_size_limit``, which would cut legitimate large responses too. So a
client could make the proxy hold whatever it sent: a chunked upload with no
``Content-Length`` was buffered whole and only then refused, and a request
refused by its ``Content-Length`` (or by its head: no route, a noncanonical
path) got no answer until the client had uploaded everything, which
mitmproxy buffered too (300 MB sent with ``--max-body 1m``: 300 MB of RSS).

:func:`install` replaces two states of mitmproxy's ``HttpStream`` (the layer
between the HTTP/1 and HTTP/2 connections and the hooks), so the bound holds
for both protocols, for model requests and pass-through requests alike:

- **While the body arrives.** A body about to pass ``modeltap_max_body`` is
  not read further: :class:`RequestTooLargeHook` lets the addon refuse it
  (413 ``body_too_large``, a ``rejected`` event), the answer is sent at once
  and the request stopped: the HTTP/1 connection is closed (the answer says
  ``connection: close``), an HTTP/2 stream is reset. Nothing is forwarded.
- **A request answered by its head** (the addon set a response in
  ``requestheaders``): its body is never kept. When it declared a
  ``Content-Length`` over the limit, or asked for ``100-continue``, it is
  answered at once (without the ``100 Continue`` mitmproxy would send) and
  stopped; otherwise its body is read and dropped and the answer sent at its
  end, keeping the connection, unless the body passes the limit first.

Memory per request is thus bounded by the limit plus what one read brings.
The limit comes from the master's own options, so a master without modeltap
keeps mitmproxy's behaviour.

A large model request is also hashed while it arrives (:class:`BodyHash`,
when the HTTP addon asks for it in ``flow.metadata``): the SHA-256 of its
audit line is then ready, or nearly, when the whole body is in, instead of
starting only then.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from mitmproxy import http
from mitmproxy.connection import Connection, ConnectionState
from mitmproxy.proxy import commands, layer, server
from mitmproxy.proxy.layers.http import DropStream, HttpStream, SendHttp
from mitmproxy.proxy.layers.http._events import (
    ErrorCode,
    RequestData,
    RequestEndOfMessage,
    RequestHeaders,
    RequestTrailers,
    ResponseEndOfMessage,
    ResponseHeaders,
    ResponseProtocolError,
)
from mitmproxy.proxy.utils import expect
from mitmproxy.utils import human

from modeltap.addons.patches import capture, replace

#: Why the rest of a request was not read (mitmproxy's log; never sent as a body).
STOPPED_MESSAGE: Final = "modeltap: the request was answered before its body ended"


@dataclass
class RequestTooLargeHook(commands.StartHook):
    """A request body is about to pass ``modeltap_max_body``: the addon's
    ``modeltap_request_too_large(flow)`` answers it (sets ``flow.response``).
    Nothing of the body is kept; the request is stopped after the answer."""

    name = "modeltap_request_too_large"
    flow: http.HTTPFlow


#: ``flow.metadata`` key of the :class:`BodyHash` of a request hashed as it arrives.
HASH_KEY: Final = "modeltap_body_hash"

#: One thread, so each body's pieces are hashed in the order they came.
_HASHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="modeltap-sha256")


#: Pieces are handed to the hashing thread in batches of this many bytes:
#: mitmproxy reads 64 KiB at a time, and a hand-over per read cost more than
#: the hashing it saved.
_BATCH = 1024 * 1024


def _hash_pieces(sha: Any, pieces: list[bytes]) -> None:
    for piece in pieces:
        sha.update(piece)


def _hash_last(sha: Any, pieces: list[bytes]) -> str:
    _hash_pieces(sha, pieces)
    return str(sha.hexdigest())


class BodyHash:
    """The SHA-256 of a request body, computed on a worker thread as it arrives.

    hashlib lets go of the GIL on large pieces, so the event loop goes on
    reading while a batch is hashed.
    """

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        #: Bytes handed in so far.
        self.size = 0
        #: The body as mitmproxy assembled it, before any hook ran: the digest is
        #: the body's only while the flow still holds this very object.
        self.content: bytes | None = None
        self._batch: list[bytes] = []
        self._batch_size = 0

    def update(self, data: bytes) -> None:
        """Hash the next piece of the body (queued; returns at once)."""
        self.size += len(data)
        self._batch.append(data)
        self._batch_size += len(data)
        if self._batch_size >= _BATCH:
            self._submit()

    def _submit(self) -> None:
        if self._batch:
            _HASHER.submit(_hash_pieces, self._sha, self._batch)
            self._batch, self._batch_size = [], 0

    def hexdigest(self) -> asyncio.Future[str]:
        """The digest of everything handed in: the last pieces go to the hashing
        thread now (while the caller parses the body), the digest when they are
        hashed. Call it once, on the event loop."""
        batch, self._batch, self._batch_size = self._batch, [], 0
        return asyncio.wrap_future(_HASHER.submit(_hash_last, self._sha, batch))


_original_headers = capture(HttpStream, "state_wait_for_request_headers")
_original_consume = capture(HttpStream, "state_consume_request_body")


def _limit(stream: Any) -> int | None:
    """The master's ``modeltap_max_body`` in bytes, once per stream; None without modeltap."""
    try:
        return stream._modeltap_limit  # type: ignore[no-any-return]
    except AttributeError:
        pass
    value = getattr(stream.context.options, "modeltap_max_body", None)
    try:
        limit = human.parse_size(value) if value else None
    except ValueError:
        limit = None
    stream._modeltap_limit = limit
    return limit


def _is_continue(command: commands.Command) -> bool:
    return (
        isinstance(command, SendHttp)
        and isinstance(command.event, ResponseHeaders)
        and command.event.response.status_code == 100
    )


@expect(RequestHeaders)  # type: ignore[untyped-decorator]
def state_wait_for_request_headers(
    self: Any, event: RequestHeaders
) -> layer.CommandGenerator[None]:
    """mitmproxy's state, then: a request answered by its head is answered at
    once when waiting for its body would be pointless (see the module docstring)."""
    expects_continue = event.request.headers.get("expect", "").lower() == "100-continue"
    original = _original_headers(self, event)
    try:
        command = next(original)
        while True:
            if _is_continue(command) and self.flow.response is not None:
                command = original.send(None)  # no 100 Continue for a request already answered
                continue
            command = original.send((yield command))
    except StopIteration:
        pass
    if (
        event.end_stream
        or self.flow.response is None
        or self.client_state != self.state_consume_request_body
    ):
        return
    limit = _limit(self)
    try:
        declared = int(event.request.headers.get("content-length", ""))
    except ValueError:
        declared = None
    if expects_continue or (limit is not None and declared is not None and declared > limit):
        yield from _answer_and_stop(self)


@expect(RequestData, RequestTrailers, RequestEndOfMessage)  # type: ignore[untyped-decorator]
def state_consume_request_body(self: Any, event: Any) -> layer.CommandGenerator[None]:
    """mitmproxy's state, with the body bounded by ``modeltap_max_body``."""
    if isinstance(event, RequestData):
        limit = _limit(self)
        received = getattr(self, "_modeltap_received", 0) + len(event.data)
        self._modeltap_received = received
        if limit is not None and received > limit:
            self.request_body_buf.clear()
            if self.flow.response is None:
                yield RequestTooLargeHook(self.flow)
            if self.flow.response is None:
                # No modeltap addon answered: mitmproxy's own 413 page.
                self.client_state = self.server_state = self.state_errored
                self.flow.live = False
                yield SendHttp(
                    ResponseProtocolError(
                        self.stream_id, STOPPED_MESSAGE, ErrorCode.REQUEST_TOO_LARGE
                    ),
                    self.context.client,
                )
                yield DropStream(self.stream_id)
                return
            yield from _answer_and_stop(self)
            return
        if self.flow.response is not None:
            return  # answered by its head: the body is read, never kept
        hashing = self.flow.metadata.get(HASH_KEY)
        if hashing is not None:
            hashing.update(event.data)
    hashing = self.flow.metadata.get(HASH_KEY)
    if hashing is None or not isinstance(event, RequestEndOfMessage):
        yield from _original_consume(self, event)
        return
    # mitmproxy assembles the body, then yields the request hook: note the body
    # it assembled before any addon could replace it.
    original = _original_consume(self, event)
    try:
        command = next(original)
        hashing.content = self.flow.request.data.content
        while True:
            command = original.send((yield command))
    except StopIteration:
        pass


def _answer_and_stop(self: Any) -> Generator[commands.Command, Any, None]:
    """Send ``flow.response`` now and read nothing more of the request."""
    self.request_body_buf.clear()
    http1 = not (self.flow.request.is_http2 or self.flow.request.is_http3)
    self.client_state = self.state_modeltap_closing if http1 else self.state_errored
    if http1:
        self.flow.response.headers["connection"] = "close"
    yield from self.send_response()
    yield SendHttp(ResponseEndOfMessage(self.stream_id), self.context.client)
    self.flow.live = False
    if http1:
        # The answer, then FIN at once; the connection is closed outright when the
        # next bytes of the body arrive (state_modeltap_closing), so the answer is
        # on its way before a reset could overtake it.
        yield commands.CloseTcpConnection(self.context.client, half_close=True)
    else:
        # The answer is whole; resetting the stream stops the upload (RFC 9113 8.1).
        yield SendHttp(
            ResponseProtocolError(self.stream_id, STOPPED_MESSAGE, ErrorCode.REQUEST_TOO_LARGE),
            self.context.client,
        )
        yield DropStream(self.stream_id)


def state_modeltap_closing(self: Any, event: Any) -> layer.CommandGenerator[None]:
    """An HTTP/1 request answered before its body ended: close the connection
    on its next bytes (this runs in the connection's own task)."""
    if isinstance(event, RequestData):
        self.client_state = self.state_errored
        yield commands.CloseConnection(self.context.client)


_original_close = capture(server.ConnectionHandler, "close_connection")


def close_connection(self: Any, connection: Connection, half_close: bool = False) -> None:
    """mitmproxy's, and then the socket is closed at once.

    mitmproxy closes a connection by cancelling its task, which closes the
    socket on its way out, unless the cancellation lands while the task waits
    for the event lock (a client still sending, a close commanded from a hook's
    task): the task then ends without closing it, and the socket stays open,
    unread, until garbage collection. Closing the writer here does what that
    task would have done (asyncio still sends what was written first).
    """
    _original_close(self, connection, half_close)
    if connection.state is ConnectionState.CLOSED:
        io = self.transports.get(connection)
        if io is not None and io.writer is not None:
            io.writer.close()


def install() -> None:
    """Put the bounded states in place (idempotent; affects every mitmproxy in the process)."""
    replace(HttpStream, "state_wait_for_request_headers", state_wait_for_request_headers)
    replace(HttpStream, "state_consume_request_body", state_consume_request_body)
    # A state of modeltap's own, not mitmproxy's: nothing of mitmproxy's to keep.
    HttpStream.state_modeltap_closing = state_modeltap_closing  # type: ignore[attr-defined]
    replace(server.ConnectionHandler, "close_connection", close_connection)
