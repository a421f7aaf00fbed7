"""``modeltap replay DIR`` and ``modeltap demo``: answer an agent from a recording.

How a replay is served
    The normal :class:`~modeltap.addon.ModelTap` addon runs, so a replayed run
    is audited like a live one (``audit.jsonl``, ``events.jsonl``, spans).
    Every route points at a small in-process *replay upstream*
    (:class:`ReplayServer`, 127.0.0.1, a free port, on mitmproxy's own event
    loop): the recording stands in for the provider, and nothing can reach
    the network. The :class:`Replay` addon runs after ModelTap: in its
    ``request`` hook it compares the audited request with the next recorded
    turn of its session (:class:`Player`). A match is forwarded to the replay
    upstream, tagged with the recorded exchange to serve; a mismatch or an
    exhausted recording is answered right there with a provider-shaped error
    and a diff line. Going through a real socket is what lets SSE be replayed
    as a stream (mitmproxy cannot stream a response an addon makes up), at
    the recorded pace (``--fast``: no delays), and lets a WebSocket be
    replayed by the same code that audits a live one: after each client
    ``response.create`` the replay upstream sends the recorded server
    messages of that turn.

Matching
    Requests are matched in order within a session on their
    :class:`~modeltap.record.TurnKey` (model, tool names, instructions hash,
    image count, stream, input hash). Sessions pair up by name when the name
    was recorded (``x-modeltap-session``, ``--session``), else by order of
    first appearance among the recorded sessions of the same transport (a
    live run's default session is its run id, new each run, and each
    WebSocket connection is a session of its own). A mismatched turn is used
    up, so the turns after it still line up. Concurrent requests of one
    session replay in the order they were audited.

The diff
    One line per difference, appended to ``OUT/replay-diff.jsonl``
    (``kind``: ``mismatch``, ``exhausted`` or ``unplayed``; ``message`` such
    as ``"session s1 turn 2: tool 'lookup' no longer advertised"``) and
    printed. ``--check`` exits 1 when there is any.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import http as http_status
import socket
import sys
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
from mitmproxy import http
from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol

from modeltap import options
from modeltap.addon import METADATA_KEY, Exchange
from modeltap.errors import provider_error_body
from modeltap.record import (
    BLOBS_DIR,
    RECORDING_FILE,
    BlobStore,
    TurnKey,
    is_ws_create,
    ws_create,
)
from modeltap.records import API_RESPONSES, Json, redact_path, utc_now
from modeltap.routing import UPSTREAM_ROUTE, error_shape_for
from modeltap.sink import JsonlFile

DIFF_FILE = "replay-diff.jsonl"
#: Header on a forwarded request naming the recorded exchange to serve.
ENTRY_HEADER = "x-modeltap-replay-entry"
#: Header on a forwarded WebSocket handshake naming its connection.
CONNECTION_HEADER = "x-modeltap-replay-connection"
REPLAY_WS_KEY = "modeltap_replay_ws"

MISMATCH = "modeltap_replay_mismatch"
EXHAUSTED = "modeltap_replay_exhausted"
UNRECORDED = "modeltap_replay_unrecorded"


class RecordingError(ValueError):
    """A recording directory cannot be read (missing, or a line is malformed)."""


# --------------------------------------------------------------------------
# The recording


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of ``recording.jsonl``."""

    index: int
    line: Json
    key: TurnKey | None
    session_id: str | None
    order: int | None
    transport: str
    api: str | None

    @property
    def kind(self) -> str:
        return str(self.line.get("kind"))

    @property
    def method(self) -> str | None:
        method = self.line.get("method")
        return method if isinstance(method, str) else None

    @property
    def path(self) -> str | None:
        path = self.line.get("path")
        return path if isinstance(path, str) else None


class Recording:
    """A ``--record`` directory, read back."""

    def __init__(self, root: Path, entries: list[Entry]) -> None:
        self.root = root
        self.entries = entries
        self.blobs = BlobStore(root / BLOBS_DIR)
        #: Recorded sessions in order of first appearance, each turn list in order.
        self.sessions: dict[str, list[Entry]] = {}
        self.unaudited: list[Entry] = []
        for entry in entries:
            if entry.kind == "unaudited":
                self.unaudited.append(entry)
            elif entry.session_id is not None:
                self.sessions.setdefault(entry.session_id, []).append(entry)
        for turns in self.sessions.values():
            turns.sort(key=lambda e: e.order or 0)

    @classmethod
    def load(cls, directory: str | Path) -> Recording:
        """Read ``DIR/recording.jsonl``.

        Raises:
            RecordingError: the file is missing or a line is not a recording line.
        """
        root = Path(directory)
        try:
            raw = (root / RECORDING_FILE).read_bytes()
        except OSError as e:
            raise RecordingError(f"cannot read {root / RECORDING_FILE}: {e.strerror}") from None
        entries: list[Entry] = []
        for number, text in enumerate(raw.splitlines(), 1):
            if not text.strip():
                continue
            try:
                line = orjson.loads(text)
                if not isinstance(line, dict) or line.get("v") != 1:
                    raise ValueError("not a version 1 recording line")
                key = line.get("key")
                entries.append(
                    Entry(
                        index=len(entries),
                        line=line,
                        key=TurnKey.from_json(key) if isinstance(key, dict) else None,
                        session_id=line.get("session_id"),
                        order=line.get("order"),
                        transport=str(line.get("transport") or "http"),
                        api=line.get("api"),
                    )
                )
            except (orjson.JSONDecodeError, ValueError) as e:
                raise RecordingError(f"{RECORDING_FILE} line {number}: {e}") from None
        return cls(root, entries)

    def routes_to(self, url: str) -> tuple[list[str], str | None]:
        """Routes (``NAME=URL``) and ``--upstream`` that send every recorded route,
        and the default ones, to the replay upstream at ``url``, each keeping its
        recorded base path so replayed paths equal recorded ones."""
        bases: dict[str, str] = {"openai": "", "anthropic": ""}
        for entry in self.entries:
            name, upstream = entry.line.get("route"), entry.line.get("upstream")
            if isinstance(name, str) and isinstance(upstream, str):
                bases[name] = urlsplit(upstream).path.rstrip("/")
        upstream_base = bases.pop(UPSTREAM_ROUTE, None)
        routes = [f"{name}={url}{base}" for name, base in bases.items()]
        return routes, (None if upstream_base is None else url + upstream_base)


# --------------------------------------------------------------------------
# Matching (pure)


@dataclass(frozen=True, slots=True)
class Problem:
    """One line of the diff."""

    kind: str  # mismatch | exhausted | unplayed
    message: str
    session_id: str | None = None
    recorded_session: str | None = None
    turn: int | None = None

    def to_json(self) -> Json:
        return {"ts": utc_now(), **dataclasses.asdict(self)}


@dataclass(frozen=True, slots=True)
class Played:
    """What to answer one request with: a recorded entry, or an error."""

    entry: Entry | None
    problems: tuple[Problem, ...] = ()
    code: str | None = None

    @property
    def error_message(self) -> str:
        details = "; ".join(p.message for p in self.problems)
        return f"modeltap replay: the request does not match the recording ({details})"


def _short(sha: str | None) -> str:
    return "none" if sha is None else sha[:8] + "…"


def _tool_changes(old: tuple[str, ...] | None, new: tuple[str, ...] | None) -> list[str]:
    if old == new:
        return []
    if old is None or new is None:
        return [f"tool catalogue changed ({_tools(old)} -> {_tools(new)})"]
    lines = [f"tool {name!r} no longer advertised" for name in old if name not in new]
    lines += [f"tool {name!r} newly advertised" for name in new if name not in old]
    return lines or [f"tools reordered ({_tools(old)} -> {_tools(new)})"]


def _tools(names: tuple[str, ...] | None) -> str:
    return "not stated" if names is None else "[" + ", ".join(names) + "]"


def describe_changes(recorded: Entry, transport: str, api: str | None, key: TurnKey) -> list[str]:
    """What differs between a recorded turn and a replayed request, most specific first.

    The input hash covers the whole body, so it changes with every other
    field; it is named only when nothing more specific changed.

    Args:
        recorded: the recorded turn.
        transport: ``http`` or ``websocket``.
        api: the replayed request's API.
        key: the replayed request's key.

    Returns:
        One phrase per difference; empty when the request matches.
    """
    out: list[str] = []
    if recorded.transport != transport:
        out.append(f"transport changed ({recorded.transport} -> {transport})")
    if recorded.api != api:
        out.append(f"api changed ({recorded.api} -> {api})")
    old = recorded.key
    if old is None:
        return [*out, "the recorded turn has no key"]
    if old.model != key.model:
        out.append(f"model changed ({old.model!r} -> {key.model!r})")
    out += _tool_changes(old.tool_names, key.tool_names)
    if old.instructions_sha256 != key.instructions_sha256:
        out.append(
            f"instructions changed (sha256 {_short(old.instructions_sha256)} -> "
            f"{_short(key.instructions_sha256)})"
        )
    if old.image_count != key.image_count:
        out.append(f"image count changed ({old.image_count} -> {key.image_count})")
    if old.stream != key.stream:
        out.append(f"stream changed ({str(old.stream).lower()} -> {str(key.stream).lower()})")
    if not out and old.input_sha256 != key.input_sha256:
        out.append(
            f"input changed (sha256 {_short(old.input_sha256)} -> {_short(key.input_sha256)})"
        )
    return out


class Player:
    """Hands out recorded turns in order, per session, and notes what differed."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self._free = list(recording.sessions)
        self._bound: dict[str, str | None] = {}
        self._next: dict[str, int] = dict.fromkeys(recording.sessions, 0)
        self._unbound_turns: dict[str, int] = {}

    def _bind(self, live: str, transport: str) -> str | None:
        if live in self._bound:
            return self._bound[live]
        chosen: str | None = None
        if live in self._free:
            chosen = live
        else:
            for name in self._free:
                if self.recording.sessions[name][0].transport == transport:
                    chosen = name
                    break
        if chosen is not None:
            self._free.remove(chosen)
        self._bound[live] = chosen
        return chosen

    def play(self, live: str, transport: str, api: str | None, key: TurnKey) -> Played:
        """The answer to the next request of session ``live``.

        Args:
            live: the replayed request's session id.
            transport: ``http`` or ``websocket``.
            api: its API.
            key: its key.

        Returns:
            The recorded entry, or (entry None) the problems and error code.
        """
        recorded = self._bind(live, transport)
        if recorded is None:
            n = self._unbound_turns[live] = self._unbound_turns.get(live, 0) + 1
            message = f"session {live} turn {n}: the recording has no session left to replay it"
            return Played(None, (Problem("exhausted", message, live, None, n),), EXHAUSTED)
        turns = self.recording.sessions[recorded]
        index = self._next[recorded]
        self._next[recorded] = index + 1
        label = f"session {recorded} turn {index + 1}"
        if index >= len(turns):
            message = f"{label}: the recording is exhausted ({len(turns)} turns recorded)"
            return Played(
                None, (Problem("exhausted", message, live, recorded, index + 1),), EXHAUSTED
            )
        entry = turns[index]
        changes = describe_changes(entry, transport, api, key)
        if changes:
            problems = tuple(
                Problem("mismatch", f"{label}: {change}", live, recorded, index + 1)
                for change in changes
            )
            return Played(None, problems, MISMATCH)
        return Played(entry)

    def unaudited(self, method: str, path: str) -> Entry | None:
        """A recorded unaudited exchange with this method and path (reusable)."""
        for entry in self.recording.unaudited:
            if entry.method == method and entry.path == path:
                return entry
        return None

    def unplayed(self) -> list[Problem]:
        """The recorded turns no request asked for."""
        out: list[Problem] = []
        for name, turns in self.recording.sessions.items():
            played = min(self._next[name], len(turns))
            if played == len(turns):
                continue
            if name in self._free:
                message = f"session {name}: not replayed ({len(turns)} turns recorded)"
            else:
                message = (
                    f"session {name}: turns {played + 1}-{len(turns)} of {len(turns)} "
                    "were not replayed"
                )
            out.append(Problem("unplayed", message, None, name, played + 1))
        return out

    @property
    def turns_recorded(self) -> int:
        return sum(len(t) for t in self.recording.sessions.values())


# --------------------------------------------------------------------------
# The replay upstream


def _parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    method = lines[0].split(" ", 1)[0]
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return method, headers


async def _skip_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> None:
    """Read and drop a request body (the entry to serve is named by a header)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size = int((await reader.readline()).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                return
            await reader.readexactly(size + 2)
    length = headers.get("content-length", "0")
    if length.isdigit() and int(length):
        await reader.readexactly(int(length))


_FRAMING = frozenset({"content-length", "transfer-encoding"})


def _head(status: int, headers: dict[str, str], framing: str) -> bytes:
    try:
        phrase = http_status.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    lines = [f"HTTP/1.1 {status} {phrase}"]
    for name, value in headers.items():
        if name in _FRAMING or "\r" in value or "\n" in value:
            continue  # we frame the body ourselves; a stored value never splits a header
        lines.append(f"{name}: {value}")
    lines.append(framing)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _ws_error(code: str, message: str) -> bytes:
    """The error event a replayed WebSocket gets instead of a recorded answer
    (the shape of :func:`modeltap.ws.rejection_event`)."""
    return orjson.dumps(
        {
            "type": "error",
            "error": {"type": "invalid_request_error", "code": code, "message": message},
        }
    )


class ReplayServer:
    """The stand-in upstream: serves recorded exchanges over HTTP/1.1 and WebSocket.

    The listening socket is bound on construction (so routes can name its
    port before the proxy starts); :meth:`start` serves on the running loop.
    """

    def __init__(self, recording: Recording, *, fast: bool, host: str = "127.0.0.1") -> None:
        self.recording = recording
        self.fast = fast
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind((host, 0))
        self._sock.listen(64)
        self._sock.setblocking(False)
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        self._server: asyncio.Server | None = None
        #: Per replayed WebSocket connection: the decisions for its creates, in order.
        self.connections: dict[str, deque[Played]] = {}

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, sock=self._sock, limit=2**20)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        else:
            self._sock.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        _method, headers = _parse_head(head)
        if headers.get("upgrade", "").lower() == "websocket":
            await self._websocket(head, headers, reader, writer)
            return False
        await _skip_body(reader, headers)
        index = headers.get(ENTRY_HEADER, "")
        entries = self.recording.entries
        if not index.isdigit() or int(index) >= len(entries):
            body = provider_error_body(
                "both",
                "modeltap replay: not a recorded exchange",
                status=404,
                code=UNRECORDED,
            )
            head_bytes = _head(
                404, {"content-type": "application/json"}, f"content-length: {len(body)}"
            )
            writer.write(head_bytes + body)
            await writer.drain()
            return True
        return await self._serve(entries[int(index)], writer)

    async def _pause_until(self, deadline: float) -> None:
        if not self.fast:
            delay = deadline - asyncio.get_running_loop().time()
            if delay > 0:
                await asyncio.sleep(delay)

    async def _serve(self, entry: Entry, writer: asyncio.StreamWriter) -> bool:
        """Write one recorded response; False when the connection must end."""
        resp = entry.line.get("response") or {}
        loop = asyncio.get_running_loop()
        wait_ms = resp.get("wait_ms")
        if isinstance(wait_ms, int | float):
            await self._pause_until(loop.time() + wait_ms / 1000)
        status = resp.get("status")
        if not isinstance(status, int):
            writer.transport.abort()  # the upstream never answered: neither do we
            return False
        headers = {str(k): str(v) for k, v in (resp.get("headers") or {}).items()}
        sha = resp.get("body")
        blob = self.recording.blobs.path(sha) if isinstance(sha, str) else None
        chunks = resp.get("chunks")
        if not isinstance(chunks, list):
            body = blob.read_bytes() if blob is not None else b""
            writer.write(_head(status, headers, f"content-length: {len(body)}") + body)
            await writer.drain()
        else:
            writer.write(_head(status, headers, "transfer-encoding: chunked"))
            await writer.drain()
            start = loop.time()
            with contextlib.ExitStack() as stack:
                source = stack.enter_context(blob.open("rb")) if blob is not None else None
                for offset_ms, size in chunks:
                    data = source.read(int(size)) if source is not None else b""
                    await self._pause_until(start + float(offset_ms) / 1000)
                    if data:
                        writer.write(b"%x\r\n%b\r\n" % (len(data), data))
                        await writer.drain()
            if not resp.get("error"):
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        if resp.get("error"):
            writer.transport.abort()  # the recorded stream was cut: cut this one too
            return False
        return True

    # ------------------------------------------------------------------ WebSocket

    async def _websocket(
        self,
        head: bytes,
        headers: dict[str, str],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        proto = ServerProtocol(max_size=None)
        proto.receive_data(head)
        events = proto.events_received()
        if not events or not isinstance(events[0], Request):
            return
        decisions = self.connections.get(headers.get(CONNECTION_HEADER, ""))
        if decisions is None:
            response = proto.reject(404, "modeltap replay: not a replayed connection\n")
        else:
            response = proto.accept(events[0])
        proto.send_response(response)
        if not await _flush(proto, writer) or decisions is None or proto.state is not State.OPEN:
            return
        outbox: asyncio.Queue[Played | None] = asyncio.Queue()
        sender = asyncio.create_task(self._ws_sender(proto, writer, outbox))
        parts: list[bytes] = []
        text = True
        try:
            while True:
                data = await reader.read(65536)
                if data:
                    proto.receive_data(data)
                else:
                    proto.receive_eof()
                for event in proto.events_received():
                    if not isinstance(event, Frame):
                        continue
                    if event.opcode in (Opcode.TEXT, Opcode.BINARY):
                        parts, text = [bytes(event.data)], event.opcode is Opcode.TEXT
                    elif event.opcode is Opcode.CONT:
                        parts.append(bytes(event.data))
                    else:
                        continue
                    if event.fin and text and is_ws_create(b"".join(parts)):
                        outbox.put_nowait(decisions.popleft() if decisions else None)
                if not await _flush(proto, writer) or not data:
                    return
        finally:
            sender.cancel()

    async def _ws_sender(
        self,
        proto: ServerProtocol,
        writer: asyncio.StreamWriter,
        outbox: asyncio.Queue[Played | None],
    ) -> None:
        """Send each create's recorded server messages, in order, at their pace."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                played = await outbox.get()
                if played is None or played.entry is None:
                    code = played.code if played is not None and played.code else UNRECORDED
                    message = (
                        played.error_message
                        if played is not None
                        else "modeltap replay: this message was not matched"
                    )
                    proto.send_text(_ws_error(code, message))
                    if not await _flush(proto, writer):
                        return
                    continue
                start = loop.time()
                for item in played.entry.line.get("messages") or []:
                    if item.get("from") != "server":
                        continue
                    await self._pause_until(start + float(item.get("ms") or 0) / 1000)
                    if "text" in item:
                        proto.send_text(str(item["text"]).encode())
                    elif isinstance(item.get("blob"), str):
                        data = self.recording.blobs.path(item["blob"]).read_bytes()
                        if item.get("binary"):
                            proto.send_binary(data)
                        else:
                            proto.send_text(data)
                    if not await _flush(proto, writer):
                        return
        except Exception:  # the connection went away under us (InvalidState, reset)
            return


async def _flush(proto: ServerProtocol, writer: asyncio.StreamWriter) -> bool:
    """Write what the protocol wants sent; False once it asks to close the TCP stream."""
    try:
        for data in proto.data_to_send():
            if not data:
                with contextlib.suppress(OSError, RuntimeError):
                    writer.write_eof()
                return False
            writer.write(data)
        await writer.drain()
    except ConnectionError:
        return False
    return True


# --------------------------------------------------------------------------
# The addon


class Replay:
    """Answer audited requests from a recording (runs after ModelTap)."""

    def __init__(
        self, player: Player, server: ReplayServer, out: Path, *, quiet: bool = False
    ) -> None:
        self.player = player
        self.server = server
        self.out = out
        self.quiet = quiet
        self.diff_file = JsonlFile(out / DIFF_FILE)
        #: Every difference noted so far (the unplayed turns are added at exit).
        self.problems: list[Problem] = []
        self.turns_played = 0

    async def running(self) -> None:
        await self.server.start()

    def done(self) -> None:
        self.server.close()
        self._note(self.player.unplayed())
        self.diff_file.close()

    def request(self, flow: http.HTTPFlow) -> None:
        ex: Exchange | None = flow.metadata.get(METADATA_KEY)
        if ex is None or flow.response is not None:
            return  # answered by modeltap (refused, no route)
        if ex.websocket:
            self.server.connections[flow.id] = deque()
            flow.metadata[REPLAY_WS_KEY] = flow.id
            flow.request.headers[CONNECTION_HEADER] = flow.id
            return
        if not ex.audited or ex.facts is None:
            entry = self.player.unaudited(flow.request.method, redact_path(ex.path))
            if entry is None:
                self._answer(flow, ex, 404, "this request is not in the recording", UNRECORDED)
            else:
                flow.request.headers[ENTRY_HEADER] = str(entry.index)
            return
        body = orjson.loads(flow.request.get_content(strict=False) or b"null")
        played = self.player.play(ex.session_id, "http", ex.api, TurnKey.of(ex.facts, body))
        if played.entry is None:
            self._note(played.problems)
            self._answer(flow, ex, 400, played.error_message, played.code or MISMATCH)
            return
        self.turns_played += 1
        flow.request.headers[ENTRY_HEADER] = str(played.entry.index)

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        token: str | None = flow.metadata.get(REPLAY_WS_KEY)
        decisions = self.server.connections.get(token) if token else None
        if decisions is None or flow.websocket is None or not flow.websocket.messages:
            return
        message = flow.websocket.messages[-1]
        if not message.from_client or message.dropped or message.injected:
            return
        if not message.is_text or not is_ws_create(message.content):
            return  # control messages get no answer upstream either
        ex: Exchange = flow.metadata[METADATA_KEY]
        create = ws_create(message.content, True)
        if create is None:  # forwarded, yet not valid: should not happen; answer, do not hang
            decisions.append(Played(None, (), UNRECORDED))
            return
        played = self.player.play(
            ex.session_id, "websocket", API_RESPONSES, TurnKey.of(create.facts, create.body)
        )
        if played.entry is None:
            self._note(played.problems)
        else:
            self.turns_played += 1
        # The replay upstream takes one decision per create it receives, in order.
        decisions.append(played)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        token: str | None = flow.metadata.pop(REPLAY_WS_KEY, None)
        if token is not None:
            self.server.connections.pop(token, None)

    def _answer(
        self, flow: http.HTTPFlow, ex: Exchange, status: int, message: str, code: str
    ) -> None:
        shape = error_shape_for(ex.api, ex.route)
        text = message if message.startswith("modeltap") else f"modeltap replay: {message}"
        flow.response = http.Response.make(
            status,
            provider_error_body(shape, text, status=status, code=code),
            {"Content-Type": "application/json"},
        )

    def _note(self, problems: Sequence[Problem]) -> None:
        for problem in problems:
            self.problems.append(problem)
            with contextlib.suppress(Exception):
                self.out.mkdir(parents=True, exist_ok=True)
                self.diff_file.append(orjson.dumps(problem.to_json()) + b"\n")
            if not self.quiet:
                print(f"modeltap replay: {problem.message}", file=sys.stderr, flush=True)

    def summary(self) -> str:
        """One line: how much of the recording was replayed and how much differed."""
        differing = sum(1 for p in self.problems if p.kind != "unplayed")
        return (
            f"replayed {self.turns_played} of {self.player.turns_recorded} recorded turns; "
            f"{differing} differences, {len(self.problems) - differing} not replayed"
        )


# --------------------------------------------------------------------------
# Building a replaying proxy


def replay_proxy(
    recording: Recording | str | Path, config: Any, *, fast: bool = False
) -> tuple[Any, Replay]:
    """A :class:`~modeltap.proxy.Proxy` that replays ``recording`` (not started).

    Args:
        recording: a loaded recording or its directory.
        config: a :class:`~modeltap.proxy.ProxyConfig`; its routes and upstream
            are replaced by routes to the replay upstream, and it runs in
            reverse mode without recording.
        fast: replay without the recorded delays.

    Returns:
        ``(proxy, replay)``: start the proxy; read ``replay.problems`` after it stopped.

    Raises:
        RecordingError: if the recording cannot be read.
    """
    from modeltap.proxy import Proxy

    if not isinstance(recording, Recording):
        recording = Recording.load(recording)
    server = ReplayServer(recording, fast=fast)
    routes, upstream = recording.routes_to(server.url)
    config = dataclasses.replace(
        config, mode="reverse", routes=routes, upstream=upstream, record=None
    )
    replay = Replay(Player(recording), server, Path(config.out), quiet=config.quiet)
    return Proxy(config, addons=[replay]), replay


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="modeltap replay",
        description="Answer an agent from a recording made with `modeltap run --record DIR`: "
        "no upstream, no network. Requests are matched in order within each session on "
        "their audit record (model, tools, instructions hash, image count, input hash); a "
        "changed request gets a provider-shaped error and a line in OUT/replay-diff.jsonl. "
        "Runs until Ctrl-C.",
    )
    parser.add_argument("recording", metavar="DIR", help="the --record directory")
    parser.add_argument(
        "--fast",
        action="store_true",
        help="send SSE chunks and WebSocket messages without the recorded delays",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if any request differed from the recording or a recorded turn was not "
        "replayed (the diff is printed at exit)",
    )
    options.add_arguments(parser, options.REPLAY)
    return parser


def replay_main(argv: Sequence[str]) -> int:
    """``modeltap replay DIR [--fast] [--check] [--listen HOST:PORT] [--out DIR]``.

    Returns:
        0; 1 with ``--check`` when anything differed or was not replayed; 2
        when the recording cannot be read or the proxy cannot start.
    """
    from modeltap.cli import startup_screen
    from modeltap.proxy import ProxyConfig

    args = build_parser().parse_args(list(argv))
    try:
        recording = Recording.load(args.recording)
    except RecordingError as e:
        print(f"modeltap replay: {e}", file=sys.stderr)
        return 2
    config = ProxyConfig.from_options(
        {o.name: getattr(args, o.cli_name) for o in options.OPTIONS if options.REPLAY in o.commands}
    )
    proxy, replay = replay_proxy(recording, config, fast=args.fast)

    def ready(p: Any) -> None:
        pace = "without delays (--fast)" if args.fast else "at the recorded pace"
        print(startup_screen(p), file=sys.stderr)
        print(
            f"  replaying  {recording.root}  ({replay.player.turns_recorded} turns in "
            f"{len(recording.sessions)} sessions) {pace}; diff -> "
            f"{Path(config.out) / DIFF_FILE}",
            file=sys.stderr,
            flush=True,
        )

    try:
        proxy.run_foreground(on_ready=ready)
    except Exception as e:  # bad options or a port in use: say it plainly
        print(f"modeltap replay: {e}", file=sys.stderr)
        return 2
    for problem in replay.problems:
        print(problem.message)
    print(f"modeltap replay: {replay.summary()}", file=sys.stderr)
    return 1 if args.check and replay.problems else 0


# --------------------------------------------------------------------------
# modeltap demo


def demo_main(argv: Sequence[str]) -> int:
    """``modeltap demo``: a scripted agent through modeltap, answered by the
    recording shipped in the package; prints the audit records and the report.

    Returns:
        0; 1 if the replay differed; 2 if the openai package is missing.
    """
    parser = argparse.ArgumentParser(
        prog="modeltap demo",
        description="Run a small openai-SDK tool loop through modeltap, answered by a "
        "recording shipped with modeltap (no API key, no network), then print the audit "
        "records and `modeltap report`.",
    )
    parser.add_argument("--fast", action="store_true", help="replay without recorded delays")
    parser.add_argument(
        "--out", metavar="DIR", help="where the run's files go (default: a new temp dir)"
    )
    args = parser.parse_args(list(argv))
    try:
        import openai

        from modeltap.demo import agent
    except ImportError:
        print("modeltap demo needs the openai package: pip install openai", file=sys.stderr)
        return 2
    from modeltap.capture import Capture
    from modeltap.proxy import ProxyConfig
    from modeltap.report import build_report, render_text

    out = Path(args.out or tempfile.mkdtemp(prefix="modeltap-demo-"))
    config = ProxyConfig(listen_port=0, out=str(out), session=agent.SESSION, quiet=True)
    with resources.as_file(resources.files("modeltap") / "demo" / "recording") as directory:
        proxy, replay = replay_proxy(Recording.load(directory), config, fast=args.fast)
        started = time.monotonic()
        proxy.start()
        try:
            client = openai.OpenAI(
                base_url=f"{proxy.url}/openai/v1",
                api_key="no-key-needed-for-a-replay",
                max_retries=0,
                # The agent talks to modeltap on loopback; never via an HTTP(S)_PROXY.
                http_client=openai.DefaultHttpxClient(trust_env=False),
            )
            answer = agent.run_agent(client)
        finally:
            proxy.stop()
        elapsed = time.monotonic() - started
    print(f"== the agent (openai SDK tool loop, {elapsed:.2f}s) answered:\n{answer}\n")
    print(f"== {out / 'audit.jsonl'}: one record per model request, written before forwarding")
    for line in (out / "audit.jsonl").read_text().splitlines():
        print(line)
    print(f"\n== modeltap report {out}")
    print(render_text(build_report(Capture.load(out))))
    print(f"== replay: {replay.summary()}")
    for problem in replay.problems:
        print(f"   {problem.message}")
    return 1 if replay.problems else 0
