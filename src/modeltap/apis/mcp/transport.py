"""What MCP's HTTP transports add around the messages: sessions and the HTTP+SSE endpoint.

- **Sessions.** Streamable HTTP names a session in the ``Mcp-Session-Id``
  header (the server gives it in its answer to ``initialize``); the older
  HTTP+SSE transport in the ``session_id`` query value of the path its
  ``endpoint`` event announced. An id can be a capability (whoever holds it
  speaks in the session), so it is never stored as is: the files name a
  session by :func:`session_key`, the first 16 hex digits of its SHA-256.
- **The HTTP+SSE endpoint.** ``GET /sse`` opens a stream whose first event,
  ``event: endpoint``, says where to POST (``data: /messages/?session_id=…``,
  a path on the server). Through a reverse-proxy mount (``/mcp/NAME``) that
  path is off the mount: the client would POST to ``/messages/`` on the
  proxy, which routes it nowhere. The URL the client resolves is the event's
  data, so nothing but the event can tell it the mount:
  :class:`EndpointRewriter` puts the path onto the mount
  (:func:`endpoint_on_mount`), changing that one event's data line and
  passing every other byte as it came.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Final
from urllib.parse import parse_qsl, urlsplit

from modeltap.rules.routing import Route, split_target

SESSION_HEADER: Final = "mcp-session-id"
#: HTTP+SSE: the query parameter of the endpoint path that names the session.
SESSION_QUERY: Final = "session_id"
#: A client resuming a stream sends the id of the last event it saw.
LAST_EVENT_HEADER: Final = "last-event-id"

#: What became of an endpoint event (the records' MCP_ENDPOINTS).
REWRITTEN, KEPT, ELSEWHERE = "rewritten", "kept", "elsewhere"

#: Bytes held at most while waiting for a stream's first event to end.
MAX_FIRST_EVENT: Final = 64 * 1024


def session_key(value: str) -> str:
    """How the files name an MCP session: 16 hex digits of the SHA-256 of its id."""
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def query_session_id(target: str) -> str | None:
    """HTTP+SSE's session id: the ``session_id`` query value of a request target."""
    _, query = split_target(target)
    if SESSION_QUERY not in query:
        return None
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name == SESSION_QUERY and value:
            return value
    return None


def endpoint_on_mount(data: str, route: Route) -> tuple[str, str]:
    """An HTTP+SSE endpoint as the client must see it through a reverse-proxy mount.

    Args:
        data: the ``endpoint`` event's data: a path on the server, a URL, or
            a path relative to the stream's.
        route: the MCP route the stream came through (``/mcp/NAME`` mounted
            on the server's URL).

    Returns:
        ``(data, what became of it)``: the path under the route's mount
        (``rewritten``), the data as it was when it already reaches the
        server through the mount (``kept``: relative to the stream), or as
        it was when it points elsewhere (another origin, or off the server's
        base path: ``elsewhere``).
    """
    parts = urlsplit(data)
    if parts.scheme or parts.netloc:
        default = 443 if parts.scheme == "https" else 80
        try:
            port = parts.port or default
        except ValueError:
            return data, ELSEWHERE
        origin = (parts.scheme, (parts.hostname or "").lower(), port)
        if origin != (route.scheme, route.host.lower(), route.port):
            return data, ELSEWHERE
        path = parts.path or "/"
    elif data.startswith("/"):
        path = parts.path
    else:
        relative = parts.path
        if relative.startswith(".") or "/../" in f"/{relative}/" or "/./" in f"/{relative}/":
            return data, ELSEWHERE
        return data, KEPT
    base = route.base_path
    if base and path != base and not path.startswith(base + "/"):
        return data, ELSEWHERE
    rest = path[len(base) :] or "/"
    if not rest.startswith("/"):
        rest = "/" + rest
    query = f"?{parts.query}" if parts.query else ""
    return route.prefix.rstrip("/") + rest + query, REWRITTEN


_LINE: Final = re.compile(rb"\r\n|\r|\n")


class EndpointRewriter:
    """Sans-I/O: a stream's bytes in, the same bytes out, but for the data of an
    ``endpoint`` first event (:func:`endpoint_on_mount`).

    It holds bytes only until the stream's first event ends (at most
    :data:`MAX_FIRST_EVENT`), so no event reaches the client later than the
    server sent it; after that first event every chunk passes as it came.

    Args:
        rewrite: the new data of an endpoint event, and what became of it.
    """

    def __init__(self, rewrite: Callable[[str], tuple[str, str]]) -> None:
        self._rewrite = rewrite
        self._held = bytearray()
        self._passing = False
        #: What became of the endpoint event; ``None`` until one was seen.
        self.outcome: str | None = None

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to pass on for ``chunk`` (none while the first event is unfinished)."""
        if self._passing:
            return chunk
        self._held += chunk
        end = _first_event_end(self._held)
        if end is None and len(self._held) < MAX_FIRST_EVENT:
            return b""
        self._passing = True
        held, self._held = bytes(self._held), bytearray()
        if end is None:
            return held
        return self._rewritten(held[:end]) + held[end:]

    def flush(self) -> bytes:
        """The stream ended: whatever is still held, unchanged."""
        self._passing = True
        held, self._held = bytes(self._held), bytearray()
        return held

    def _rewritten(self, event: bytes) -> bytes:
        lines = _LINE.split(event)
        ends = _LINE.findall(event)
        fields = [line.partition(b":") for line in lines]
        kinds = [name for name, _, _ in fields]
        if b"event" not in kinds or kinds.count(b"data") != 1:
            return event
        values = {name: value.removeprefix(b" ") for name, _, value in fields}
        if values[b"event"] != b"endpoint":
            return event
        try:
            data = values[b"data"].decode("utf-8")
        except UnicodeDecodeError:
            self.outcome = ELSEWHERE
            return event
        new, self.outcome = self._rewrite(data)
        out = []
        for (name, _, _), line, end in zip(fields, lines, [*ends, b""], strict=True):
            out.append((b"data: " + new.encode() if name == b"data" else line) + end)
        return b"".join(out)


def _first_event_end(held: bytes | bytearray) -> int | None:
    """Where the first event of a stream's bytes ends (after its blank line), or
    ``None`` when it has not ended yet. A ``\\r`` at the very end may be half of
    ``\\r\\n``: wait for the next byte."""
    previous_end = 0
    for found in _LINE.finditer(held):
        if found.start() == previous_end and found.start() > 0:
            if found.group() == b"\r" and found.end() == len(held):
                return None
            return found.end()
        previous_end = found.end()
    return None
