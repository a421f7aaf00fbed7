"""A fix to mitmproxy's HTTP/1 body reader that modeltap depends on.

mitmproxy 12's HTTP/1 reader raises ``NotImplementedError`` when a chunked
body ends with a trailer section. The exception is caught far up the stack
("mitmproxy has crashed!") and the connection is left as it was: the client
waits, with no answer and no event, until the 600 s inactivity timeout. Its
body reader also answers a client whose chunked framing is broken with a bare
close, and copies the offending bytes into the flow's error message.

:func:`install` replaces ``Http1Connection.read_body`` with the same reader,
changed in two places only:

- trailers become ``RequestTrailers`` / ``ResponseTrailers`` events (what
  mitmproxy's HTTP/2 layer emits), so the addon sees them on the flow and
  decides: a request with trailers is refused by name (``request_trailers``),
  response trailers are dropped for HTTP/1 clients (which mitmproxy cannot
  send them to);
- a body whose framing is invalid gets a fixed error message, and a client
  that sent one gets a 400 before the close, as mitmproxy already does for
  broken request heads.
"""

from __future__ import annotations

from typing import Any, Final

import h11
from mitmproxy import http
from mitmproxy.proxy import commands, events, layer
from mitmproxy.proxy.layers.http import _http1
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import RequestTrailers, ResponseTrailers

from modeltap.addons.patches import capture, replace

#: The flow error of a request whose body broke HTTP/1 framing (the client's fault).
REQUEST_FRAMING_ERROR: Final = "modeltap: the request body's HTTP/1 framing is invalid"
#: The flow error of a response whose body broke HTTP/1 framing (the upstream's fault).
RESPONSE_FRAMING_ERROR: Final = "modeltap: the response body's HTTP/1 framing is invalid"


#: mitmproxy's own reader, kept before :func:`install` replaces it.
capture(_http1.Http1Connection, "read_body")


def read_body(self: Any, event: events.Event) -> layer.CommandGenerator[None]:
    """mitmproxy's ``Http1Connection.read_body``, with trailers and fixed framing errors."""
    assert self.stream_id is not None
    is_request = isinstance(self, _http1.Http1Server)
    while True:
        try:
            if isinstance(event, events.DataReceived):
                h11_event = self.body_reader(self.buf)
            elif isinstance(event, events.ConnectionClosed):
                h11_event = self.body_reader.read_eof()
            else:
                raise AssertionError(f"Unexpected event: {event}")
        except h11.ProtocolError as e:
            if isinstance(event, events.DataReceived):
                # Bad framing (not an early EOF). h11's message quotes the bytes.
                message = REQUEST_FRAMING_ERROR if is_request else RESPONSE_FRAMING_ERROR
                if is_request:
                    yield commands.SendData(self.conn, _http1.make_error_response(400, message))
            else:
                message = f"HTTP/1 protocol error: {e}"
            yield commands.CloseConnection(self.conn)
            yield ReceiveHttp(
                self.ReceiveProtocolError(
                    self.stream_id, message, code=self.ReceiveProtocolError.code
                )
            )
            return

        if h11_event is None:
            return
        elif isinstance(h11_event, h11.Data):
            data: bytes = bytes(h11_event.data)
            if data:
                yield ReceiveHttp(self.ReceiveData(self.stream_id, data))
        elif isinstance(h11_event, h11.EndOfMessage):
            assert self.request
            if h11_event.headers:
                trailers = http.Headers([(bytes(k), bytes(v)) for k, v in h11_event.headers])
                kind = RequestTrailers if is_request else ResponseTrailers
                yield ReceiveHttp(kind(self.stream_id, trailers))
            if self.request.data.method.upper() != b"CONNECT":
                yield ReceiveHttp(self.ReceiveEndOfMessage(self.stream_id))
            yield from self.mark_done(request=is_request, response=not is_request)
            return


def install() -> None:
    """Put :func:`read_body` in place (idempotent; affects every mitmproxy in the process)."""
    replace(_http1.Http1Connection, "read_body", read_body)
