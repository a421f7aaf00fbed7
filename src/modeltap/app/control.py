"""The control API: the harness's own listener, apart from the proxied traffic.

Ending a session writes evidence (its ``sessions.jsonl`` line) and closes it
for good, so only the harness may do it, never the agent whose traffic is
being audited. modeltap therefore serves its control API on a listener of its
own (127.0.0.1, a free port, unless ``--control HOST:PORT`` says otherwise),
never on the proxy port, and every request must carry the run's token::

    POST /sessions/{id}/end     Authorization: Bearer <token>

The address and the token are written to ``control-<run_id>.json`` in the out
dir, readable by its owner only (0600), and removed when the proxy stops.
``modeltap session end ID --out DIR`` and the pytest fixture read it. Why both
a listener and a token: the agent talks to the proxy port, which answers
``/__modeltap/`` itself with a refusal and (in regular mode) refuses to
forward to this listener; the token keeps out every other local process and
web page (a browser can reach 127.0.0.1). Who can read the out dir can
control the run.

Ending is idempotent: a second end of a session answers the status of the
first and writes nothing (``Modeltap-Ended: earlier``). A session the proxy
never saw is a 404 that writes nothing, unless the end says
``?unseen=write``: then its line is written, saying no traffic carried it
(the agent bypassed the proxy), so that ``modeltap check`` fails it by name.
The client asks every proxy of the out dir first, and only when none knew
the session asks one of them to write that line.

The server is a few lines of asyncio around h11 (mitmproxy's own HTTP/1.1
parser, sans-I/O like our core): bounded header and body sizes, and the
harness always gets through. Any local process can connect (only the token
keeps it out), so a connection that holds a place without being answered is
what starves the listener: each must present a whole request within
:data:`REQUEST_DEADLINE_S` (a slow drip is cut there), a request without
the token is answered 401 and its connection closed, and when
:data:`MAX_CONNECTIONS` are held a new connection closes the one that has
waited longest for its request, never itself: the harness's connection,
which sends its request at once, is answered while a crowd of idle ones
take turns being closed. More routes can be added to a running server
(:attr:`ControlServer.routes`, asked first): ``modeltap run --ui`` serves the
live page of :mod:`modeltap.report.view.live` there, with its own authorisation.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import os
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol
from urllib.parse import quote, unquote_to_bytes, urlsplit

import h11
import orjson

from modeltap.core.sessions import Ended
from modeltap.evidence.records import to_json_line

#: The control API never takes a body larger than this.
MAX_BODY: Final = 64 * 1024
#: Request line plus headers.
MAX_HEAD: Final = 16 * 1024
#: A connection has this long to present a whole request (head and body), from
#: when it connected or was last answered; then it is closed.
REQUEST_DEADLINE_S: Final = 5.0
#: Connections held at once. When a new one comes and all are held, the one
#: that has waited longest for its request is closed to make room.
MAX_CONNECTIONS: Final = 64
#: ``Modeltap-Ended``: ``now`` (this request wrote the line) or ``earlier``.
ENDED_HEADER: Final = "Modeltap-Ended"
#: The query of an end that writes the line of a session this proxy never saw.
UNSEEN_QUERY: Final = "unseen=write"


def control_file_name(run_id: str) -> str:
    """The name of a run's control file in its out dir: ``control-<run_id>.json``."""
    return f"control-{run_id}.json"


class ControlApi(Protocol):
    """What the control listener asks of the proxy."""

    def end_session(self, session_id: str, *, unseen: bool = False) -> Ended | None:
        """End a session; ``None`` when the proxy does not know it, unless
        ``unseen`` (then its line says no traffic carried it)."""
        ...


@dataclass(frozen=True, slots=True)
class Reply:
    """One HTTP answer of the control API."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


class Answering(Protocol):
    """An HTTP answer: :class:`Reply`, or one of another set of routes."""

    @property
    def status(self) -> int: ...
    @property
    def body(self) -> bytes: ...
    @property
    def headers(self) -> tuple[tuple[str, str], ...]: ...


class Routes(Protocol):
    """More routes on the control listener, asked first (the live page of ``run --ui``)."""

    async def answer(self, method: str, target: str, headers: dict[str, str]) -> Answering | None:
        """The answer, or ``None`` when the path is not one of these routes."""
        ...


def _error(status: int, code: str, message: str) -> Reply:
    return Reply(status, orjson.dumps({"error": {"code": code, "message": message}}))


def answer(
    api: ControlApi, token: str, method: str, target: str, authorization: str | None
) -> Reply:
    """Answer one control request (pure routing and authorisation).

    Args:
        api: the proxy.
        token: the run's token.
        method: the HTTP method.
        target: the request target (path and query).
        authorization: the ``Authorization`` header, if any.

    Returns:
        The reply; nothing is written unless it is a first end of a known session.
    """
    given = (authorization or "").removeprefix("Bearer ").strip()
    if not hmac.compare_digest(given.encode(), token.encode()):
        reply = _error(
            401,
            "unauthorized",
            "the control API needs the run's token (Authorization: Bearer ...); "
            "modeltap session end reads it from the out dir",
        )
        return Reply(reply.status, reply.body, (("WWW-Authenticate", "Bearer"),))
    path, _, query = target.partition("?")
    parts = path.split("/")
    if len(parts) != 4 or parts[:2] != ["", "sessions"] or parts[3] != "end" or not parts[2]:
        return _error(404, "not_found", "no such control endpoint (POST /sessions/ID/end)")
    if method != "POST":
        reply = _error(405, "method_not_allowed", "use POST")
        return Reply(reply.status, reply.body, (("Allow", "POST"),))
    try:
        session_id = unquote_to_bytes(parts[2]).decode("utf-8")
    except UnicodeDecodeError:
        return _error(400, "bad_session_id", "the session id is not UTF-8")
    ended = api.end_session(session_id, unseen=UNSEEN_QUERY in query.split("&"))
    if ended is None:
        return _error(
            404,
            "unknown_session",
            "this proxy has not seen that session (nothing was written)",
        )
    return Reply(
        200,
        to_json_line(ended.status),
        ((ENDED_HEADER, "now" if ended.now else "earlier"),),
    )


# --------------------------------------------------------------------------
# The listener


def bind(host: str, port: int) -> socket.socket:
    """Bind and listen on ``host:port`` now, so a port in use fails at start-up.

    Raises:
        OSError: the address cannot be listened on.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(64)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://host:port`` of a listening socket."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _TooLarge(Exception):
    """The request body is larger than :data:`MAX_BODY`."""


class ControlServer:
    """Serve :func:`answer` over HTTP/1.1 on an already bound socket.

    Args:
        api: the proxy.
        token: the run's token.
        sock: from :func:`bind`.
    """

    def __init__(self, api: ControlApi, token: str, sock: socket.socket) -> None:
        self.api = api
        self.token = token
        self.sock = sock
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: The connections waiting for their next request, longest-waiting first.
        self._waiting: dict[asyncio.Task[None], None] = {}
        #: Asked before the control API; each answers its own paths only.
        self.routes: list[Routes] = []

    @property
    def url(self) -> str:
        """``http://host:port``."""
        return url_of(self.sock)

    async def start(self) -> None:
        """Start accepting connections."""
        self._server = await asyncio.start_server(self._serve, sock=self.sock)

    def close(self) -> None:
        """Stop listening and drop the connections being served."""
        if self._server is not None:
            self._server.close()
            self._server = None
        else:
            self.sock.close()
        for task in list(self._tasks):
            task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            if len(self._tasks) >= MAX_CONNECTIONS and not self._evict():
                return  # every place is taken by a request being answered
            self._tasks.add(task)
            await self._connection(reader, writer, task)
        except (OSError, TimeoutError, asyncio.CancelledError):
            pass  # the client left, stalled, was evicted, or the proxy is stopping
        finally:
            self._tasks.discard(task)
            self._waiting.pop(task, None)
            writer.close()

    def _evict(self) -> bool:
        """Close the connection that has waited longest for its request, to make
        room; False when none waits (all are being answered)."""
        victim = next(iter(self._waiting), None)
        if victim is None:
            return False
        del self._waiting[victim]
        self._tasks.discard(victim)  # its place is free now, whenever its task ends
        victim.cancel()
        return True

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, task: asyncio.Task[None]
    ) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        while True:
            self._waiting[task] = None  # evictable until its request is whole
            try:
                async with asyncio.timeout(REQUEST_DEADLINE_S):
                    request = await self._read(conn, reader)
            except h11.RemoteProtocolError as e:
                await self._send(
                    conn, writer, _error(e.error_status_hint, "bad_request", "malformed HTTP")
                )
                return
            except _TooLarge:
                await self._send(conn, writer, _error(413, "too_large", "the body is too large"))
                return
            finally:
                self._waiting.pop(task, None)
            if request is None:
                return
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.headers}
            method = request.method.decode("ascii", "replace")
            target = request.target.decode("ascii", "replace")
            reply: Answering | None = None
            for routes in self.routes:
                reply = await routes.answer(method, target, headers)
                if reply is not None:
                    break
            if reply is None:
                reply = answer(self.api, self.token, method, target, headers.get("authorization"))
            await self._send(conn, writer, reply)
            if reply.status == 401 or conn.our_state is not h11.DONE:
                return  # no second try on a connection that could not authenticate
            if conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()

    @staticmethod
    async def _read(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Request | None:
        """The next whole request (its body read and dropped), or None at end of stream."""
        request: h11.Request | None = None
        size = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > MAX_BODY:
                    raise _TooLarge
            elif isinstance(event, h11.EndOfMessage):
                return request
            elif isinstance(event, h11.ConnectionClosed):
                return None
            else:  # PAUSED: the previous cycle was not finished; cannot happen here
                return None

    @staticmethod
    async def _send(conn: h11.Connection, writer: asyncio.StreamWriter, reply: Answering) -> None:
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        named = {name.lower() for name, _ in reply.headers}
        headers = [
            *([] if "content-type" in named else [("Content-Type", "application/json")]),
            *([] if reply.status == 304 else [("Content-Length", str(len(reply.body)))]),
            *([] if "cache-control" in named else [("Cache-Control", "no-store")]),
            *reply.headers,
        ]
        if conn.their_state is not h11.DONE or reply.status == 401:
            headers.append(("Connection", "close"))
        data = conn.send(h11.Response(status_code=reply.status, headers=headers)) or b""
        if reply.body:
            data += conn.send(h11.Data(data=reply.body)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
        writer.write(data)
        await writer.drain()


# --------------------------------------------------------------------------
# The control file


def write_control_file(out_dir: Path, run_id: str, url: str, token: str) -> Path:
    """Write ``control-<run_id>.json`` (0600: the token is in it).

    It appears whole: written under a private name first, then linked to its
    own (a reader that sees the file can read it; ``modeltap session end``
    and the pytest fixture look as soon as it exists).

    Raises:
        OSError: it cannot be created (or already exists: never write through
            a file someone else put there).
    """
    path = out_dir / control_file_name(run_id)
    body = orjson.dumps(
        {"run_id": run_id, "url": url, "token": token, "pid": os.getpid()},
        option=orjson.OPT_APPEND_NEWLINE,
    )
    draft = out_dir / f".{path.name}.{secrets.token_hex(8)}"
    _write_new(draft, body)
    try:
        os.link(draft, path)  # fails if the name is taken, like O_EXCL
    except FileExistsError:
        raise
    except OSError:
        _write_new(path, body)  # a file system without hard links: written in place
    finally:
        draft.unlink(missing_ok=True)
    return path


def _write_new(path: Path, body: bytes) -> None:
    """Create ``path`` (never an existing file, never through a link), mode 0600."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    try:
        os.write(fd, body)
    finally:
        os.close(fd)


def new_token() -> str:
    """A fresh random token for a run."""
    return secrets.token_urlsafe(32)


# --------------------------------------------------------------------------
# The client: ``modeltap session end`` and the pytest fixture


class ControlError(Exception):
    """The control API could not be used (no proxy, unknown session, refused)."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One running proxy's control API, as its control file gives it."""

    run_id: str
    url: str
    token: str
    file: Path


def endpoints(out_dir: Path) -> list[Endpoint]:
    """The control files in an out dir (one per proxy writing to it).

    Raises:
        ControlError: there is none.
    """
    found: list[Endpoint] = []
    for path in sorted(out_dir.glob(control_file_name("*"))):
        try:
            data = orjson.loads(path.read_bytes())
            found.append(Endpoint(str(data["run_id"]), str(data["url"]), str(data["token"]), path))
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
            continue  # unreadable (not ours to read, or half written): skip it
    if not found:
        raise ControlError(
            f"no running modeltap proxy writes to {out_dir} (no readable control-*.json there)"
        )
    return found


def _post(endpoint: Endpoint, path: str, timeout: float) -> tuple[int, bytes, str | None]:
    """POST to the control listener; a connection it closed unanswered is tried again.

    The listener closes its longest-waiting connection to make room for a
    new one (:data:`MAX_CONNECTIONS`), so under a crowd of connections this
    one may be the one closed before its answer: ending a session is
    idempotent, so it is simply sent again, until ``timeout`` is spent.

    Raises:
        OSError: the listener refused the connection (no proxy runs there),
            or kept closing it until ``timeout``.
    """
    import http.client  # the client side only; the proxy need not load it at start-up

    parts = urlsplit(endpoint.url)
    deadline = time.monotonic() + timeout
    for attempt in itertools.count(1):
        left = deadline - time.monotonic()
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=left)
        try:
            conn.request("POST", path, headers={"Authorization": f"Bearer {endpoint.token}"})
            response = conn.getresponse()
            return response.status, response.read(), response.getheader(ENDED_HEADER)
        except ConnectionRefusedError:
            raise
        except (OSError, http.client.HTTPException) as e:
            if time.monotonic() + 0.01 * attempt >= deadline:
                raise OSError(f"the control listener kept closing the connection ({e})") from e
            time.sleep(0.01 * attempt)
        finally:
            conn.close()
    raise AssertionError("unreachable")  # pragma: no cover


def _error_code(body: bytes) -> tuple[str, str]:
    try:
        error = orjson.loads(body)["error"]
        return str(error["code"]), str(error["message"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return "", "an answer that is not the control API's"


def end_session(out_dir: Path, session_id: str, *, timeout: float = 10.0) -> list[Ended]:
    """End a session on the proxies writing to ``out_dir``.

    Every running proxy of the out dir is asked (usually there is one); those
    that do not know the session write nothing. When none of them knows it,
    the first is asked to end it all the same (``?unseen=write``): the
    harness ran the agent in it and no request came through, and its line
    says so ("No outbound model requests captured; audit unsupported").

    Args:
        out_dir: the proxy's ``--out``.
        session_id: the session to end.
        timeout: seconds per proxy.

    Returns:
        One :class:`Ended` per proxy that knew the session, or the one that
        wrote the line of a session none had seen.

    Raises:
        ControlError: no proxy is running there, or one refused.
    """
    path = f"/sessions/{quote(session_id, safe='')}/end"
    ended: list[Ended] = []
    reachable: list[Endpoint] = []
    for endpoint in endpoints(out_dir):
        try:
            found = _end(endpoint, path, timeout)
        except OSError:
            continue  # a stale file of a proxy that was killed
        reachable.append(endpoint)
        if found is not None:
            ended.append(found)
    if not reachable:
        raise ControlError(
            f"no running modeltap proxy writes to {out_dir}: its control files were left by "
            "a proxy that stopped without removing them (killed, or its machine stopped). "
            "A session it left open cannot be ended now; `modeltap check` reports it as "
            f"not ended. Delete {out_dir / control_file_name('*')} to clear them."
        )
    if not ended:
        try:
            found = _end(reachable[0], f"{path}?{UNSEEN_QUERY}", timeout)
        except OSError as e:
            raise ControlError(f"the proxy could not be asked again: {e}") from None
        if found is None:
            raise ControlError(f"the proxy would not end session {session_id!r}")
        ended.append(found)
    return ended


def _end(endpoint: Endpoint, path: str, timeout: float) -> Ended | None:
    """One proxy's answer to an end: the session's end, or ``None`` when it does
    not know the session.

    Raises:
        OSError: it could not be reached.
        ControlError: it refused.
    """
    status, body, how = _post(endpoint, path, timeout)
    if status == 200:
        from modeltap.evidence.capture import decode_session_end  # reading side, not the proxy's

        return Ended(decode_session_end(orjson.loads(body)), how != "earlier")
    code, message = _error_code(body)
    if code != "unknown_session":
        raise ControlError(f"the proxy answered HTTP {status}: {message}")
    return None
