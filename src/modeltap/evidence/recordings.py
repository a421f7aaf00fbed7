"""What a recording is: its format, turn keys, the blob store, and reading it back.

The recorder addon (:mod:`modeltap.addons.recorder`) writes (the parts of a
line only the proxy knows are :mod:`modeltap.replay.recording`'s), the
replayer addon (:mod:`modeltap.addons.replayer`), the replay upstream
(:mod:`modeltap.replay.upstream`), ``modeltap view --record`` and
``Capture.load(DIR, record=RDIR)`` read; ``modeltap replay`` is in
:mod:`modeltap.app.cli`. It sits beside the other evidence files' readers
so that a capture can read its recording (:func:`find_exchange`) without
reaching up into the replay layer.

A ``--record DIR`` holds:

``DIR/recording.jsonl``
    One line per exchange, written with one append (see :mod:`modeltap.evidence.sink`):
    an audited HTTP request (``kind: "http"``), one ``response.create`` of a
    WebSocket with the messages that followed it (``kind: "websocket"``), or a
    request passed through unaudited (``kind: "unaudited"``, e.g. ``GET
    .../models``), or an exchange with a remote MCP server (``kind: "mcp"``:
    a POST of JSON-RPC messages, or a ``DELETE``; see below). Fields: ``v``
    (1), ``kind``, ``session_id``, ``order`` (the turn's 1-based position in
    its session, audit order; null when unaudited), ``seq`` (the audit
    record's, HTTP only), ``run_id`` (the audit record's; absent in
    recordings made before it was written), ``transport``,
    ``api``, ``method``, ``path`` (secret query values redacted), ``route``,
    ``provider`` (the route's), ``upstream``, ``key`` (see
    :class:`TurnKey`), ``request`` (``headers``, ``body``), ``response``
    (``status``, ``headers``, ``wait_ms`` from the request leaving to the
    response head, ``body``, ``chunks``, ``error``: a fixed text when the
    exchange broke, never the upstream's words) and, for a WebSocket,
    ``messages``.

``DIR/blobs/<sha256>``
    Bodies, content-addressed, so identical bodies are kept once. A request
    body is kept decoded (as audited); a response body exactly as the
    upstream sent it, with its ``content-encoding``. A streamed (SSE, or
    Bedrock's binary event stream) response is one blob written as it
    arrives (never held in memory) and ``chunks`` lists ``[offset_ms,
    nbytes]`` per chunk, the offset counted from the response head.
    WebSocket ``messages`` are ``{"ms", "from": "client"|"server", "text"}``
    (or ``"blob"`` for binary or large ones), ``ms`` counted from the
    ``response.create`` they follow.

An MCP line (``api: "mcp"``) has ``key`` an :class:`McpKey` (server, HTTP
method, and per message its type, method, tool and arguments hash, as the
audit lines say, and the SHA-256 of its ``params`` but ``_meta`` and
the few fields that name another message: :func:`comparable_params`),
``order`` its place among its session's exchanges with
that server, ``seq`` its first audit line's, ``jsonrpc_ids`` the ids its
messages carried (a replay answers with the live request's ids instead),
``mcp_server``, and ``mcp_session`` / ``response.mcp_session``: the MCP
session the request named and the one its answer's ``Mcp-Session-Id``
gave, as the audit names them (16 hex digits of a SHA-256: an id is a
capability and is never stored). A Streamable HTTP GET stream is not
recorded (it answers no request).

An HTTP+SSE session's stream (``GET /sse``: every answer comes on it) is
recorded as ``kind: "mcp_stream"`` lines, one when its ``endpoint`` event
named the session and one per message event after it: ``v``, ``kind``,
``api`` (``mcp``), ``mcp_server``, ``mcp_session`` (hashed, as above: the
endpoint's path is not kept, its query holds the id), ``after`` (the
``order`` of the session's latest POST forwarded when the event came, 0
before any) and ``message`` (the blob of the event's data, a JSON-RPC
message; null on the first line). These lines have no ``session_id``: they
are no model session's turns.

Headers are kept from :data:`KEPT_HEADERS` only, so ``authorization``,
``x-api-key``, ``api-key`` and cookies never reach the recording; paths keep
query values only for ``api-version``, ``beta`` and ``alt``
(:func:`~modeltap.evidence.redaction.redact_path`).

A replayed run is matched against a recording by :mod:`modeltap.replay.matching`.

The format above is the module's documentation; the blob store and
reading a recording back stay beside it so they cannot drift.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO, Final
from urllib.parse import urlsplit

import orjson

from modeltap import apis
from modeltap.evidence.records import AuditRecord, Json, McpAuditRecord
from modeltap.evidence.sink import AUDIT_FILE
from modeltap.rules.routing import PROVIDER_NAME, UPSTREAM_ROUTE

RECORDING_FILE: Final = "recording.jsonl"
BLOBS_DIR: Final = "blobs"
FORMAT_VERSION: Final = 1

#: Top-level request fields left out of the input hash: they change from run to
#: run without the agent doing anything different (per-session cache keys,
#: end-user ids, free-form metadata such as Claude Code's ``metadata.user_id``).
VOLATILE_FIELDS: Final = frozenset(
    {"metadata", "user", "prompt_cache_key", "safety_identifier", "client_metadata"}
)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


# --------------------------------------------------------------------------
# Turn keys, headers, blobs


def input_sha256(body: object, api: str | None = None) -> str:
    """The input hash of a request body.

    SHA-256 (hex) of the canonical JSON of ``body`` (orjson, keys sorted, no
    whitespace) without the :data:`VOLATILE_FIELDS` at its top level. It
    covers everything else the request says (messages, tools, settings), so
    any change of model, tools or instructions changes it too.

    A wire's requests also leave out what its client makes up on every run
    (:meth:`~modeltap.apis.contract.Wire.comparable_body`): Gemini CLI
    gives each call the server sent without an id one of its own
    (``read_file_<epoch ms>_<n>``), so Gemini's call ids count by their order
    of first appearance (:mod:`modeltap.apis.gemini.replay`).

    Args:
        body: the parsed request body (a WebSocket ``response.create``
            message, ``type`` included).
        api: the request's API (``None``: compared as sent).

    Returns:
        64 hex digits.
    """
    body = comparable_body(body, api)
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def comparable_body(body: Any, api: str | None = None) -> Any:
    """What of a request body a replay compares: the body without the
    :data:`VOLATILE_FIELDS`, and without what its wire's client makes up per run
    (:meth:`~modeltap.apis.contract.Wire.comparable_body`: Gemini's made-up
    ids).

    Args:
        body: the parsed request body.
        api: the request's API (``None``: as sent).

    Returns:
        The body :func:`input_sha256` hashes (and the replay diff walks).
    """
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in VOLATILE_FIELDS}
        module = apis.find(api)
        if module is not None:
            body = module.comparable_body(body)
    return body


@dataclass(frozen=True, slots=True)
class TurnKey:
    """What a replayed request is compared on: audit fields plus the input hash."""

    model: str
    tool_names: tuple[str, ...] | None
    instructions_sha256: str | None
    image_count: int
    stream: bool
    input_sha256: str

    @classmethod
    def of(cls, record: AuditRecord, body: object) -> TurnKey:
        """The key of an audited request.

        Args:
            record: its audit record.
            body: its parsed body, as forwarded.
        """
        return cls(
            model=record.model,
            tool_names=record.tool_names,
            instructions_sha256=record.instructions_sha256,
            image_count=record.image_count,
            stream=record.stream,
            input_sha256=input_sha256(body, record.api),
        )

    def to_json(self) -> Json:
        return {
            "model": self.model,
            "tool_names": None if self.tool_names is None else list(self.tool_names),
            "instructions_sha256": self.instructions_sha256,
            "image_count": self.image_count,
            "stream": self.stream,
            "input_sha256": self.input_sha256,
        }

    @classmethod
    def from_json(cls, data: Json) -> TurnKey:
        """Read a key back from a recording line.

        Raises:
            ValueError: if a field is missing or has the wrong type.
        """
        try:
            tools = data["tool_names"]
            key = cls(
                model=str(data["model"]),
                tool_names=None if tools is None else tuple(str(t) for t in tools),
                instructions_sha256=data["instructions_sha256"],
                image_count=int(data["image_count"]),
                stream=bool(data["stream"]),
                input_sha256=str(data["input_sha256"]),
            )
        except (KeyError, TypeError) as e:
            raise ValueError(f"bad turn key: {e}") from None
        return key


#: What of a message's ``params`` a replay does not compare (:func:`comparable_params`).
#: ``_meta`` is MCP's reserved place for protocol metadata, not the request:
#: the client's ``progressToken`` (the SDK makes it from the request id, which
#: a replay does not compare either) and its tracing keys change from run to run.
PARAMS_VOLATILE: Final = ("_meta",)
#: Per method, the params that name another message of the run, not what is asked:
#: a cancellation's ``requestId`` is a JSON-RPC id (ids are not compared: a
#: replay answers with the live ones) and a progress note's ``progressToken``
#: is the one the client made up for its request.
PARAMS_VOLATILE_BY_METHOD: Final[dict[str, tuple[str, ...]]] = {
    "notifications/cancelled": ("requestId",),
    "notifications/progress": ("progressToken",),
}


def comparable_params(method: str | None, params: object) -> object:
    """What of a JSON-RPC message's ``params`` a replay compares: all of them
    but :data:`PARAMS_VOLATILE` and the method's :data:`PARAMS_VOLATILE_BY_METHOD`.

    Args:
        method: the message's method (None for an answer).
        params: its ``params`` as parsed (anything: a list is compared whole).

    Returns:
        The params without the volatile fields; ``params`` itself when it is not an object.
    """
    if not isinstance(params, dict):
        return params
    skip = PARAMS_VOLATILE + PARAMS_VOLATILE_BY_METHOD.get(method or "", ())
    return {k: v for k, v in params.items() if k not in skip}


def params_sha256(method: str | None, params: object) -> str | None:
    """SHA-256 of a message's :func:`comparable_params`, keys sorted (the same
    params in another key order hash the same); None when it has no params."""
    if params is None:
        return None
    data = orjson.dumps(comparable_params(method, params), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).hexdigest()


def _message_params(body: Any, index: int) -> object:
    """The ``params`` of message ``index`` of a parsed POST body (None when absent)."""
    members = body if isinstance(body, list) else [body]
    if index >= len(members) or not isinstance(members[index], dict):
        return None
    return members[index].get("params")


@dataclass(frozen=True, slots=True)
class McpMessageKey:
    """What a replay compares of one JSON-RPC message: its audit line's fields
    and the hash of its params (:func:`params_sha256`; None when it has none,
    or in a recording made before params were compared)."""

    message_type: str
    mcp_method: str | None
    tool_name: str | None
    arguments_sha256: str | None
    params_sha256: str | None = None

    def to_json(self) -> Json:
        return {
            "message_type": self.message_type,
            "mcp_method": self.mcp_method,
            "tool_name": self.tool_name,
            "arguments_sha256": self.arguments_sha256,
            "params_sha256": self.params_sha256,
        }


@dataclass(frozen=True, slots=True)
class McpKey:
    """What a replayed MCP exchange is compared on: its server, its HTTP method
    and its messages as audited, with their params' hashes. JSON-RPC ids are
    not compared (a replay answers with the live ones), nor the MCP session (a
    replay hands out its own).

    ``params_compared`` is False for a key read from a recording made before
    the params were hashed: it then matches a live key whatever its params
    (:meth:`matches`), and the replay says so."""

    server: str
    method: str
    messages: tuple[McpMessageKey, ...]
    batch: bool = False
    params_compared: bool = True

    @classmethod
    def of(
        cls, server: str, method: str, records: Sequence[McpAuditRecord], body: Any = None
    ) -> McpKey:
        """The key of an MCP exchange.

        Args:
            server: its server (``--mcp NAME``).
            method: its HTTP method.
            records: its audit lines (none for a ``DELETE``).
            body: its body, parsed (a message's params hash is None without it).
        """
        return cls(
            server=server,
            method=method,
            messages=tuple(
                McpMessageKey(
                    r.message_type,
                    r.mcp_method,
                    r.tool_name,
                    r.arguments_sha256,
                    params_sha256(
                        r.mcp_method,
                        _message_params(body, r.batch_index if r.batch_index is not None else 0),
                    ),
                )
                for r in records
            ),
            batch=any(r.batch_index is not None for r in records),
        )

    def without_params(self) -> McpKey:
        """The key as a recording made before params were hashed has it."""
        messages = tuple(replace(m, params_sha256=None) for m in self.messages)
        return replace(self, messages=messages, params_compared=False)

    def matches(self, live: McpKey) -> bool:
        """Whether ``live`` (a replayed exchange's key) is this recorded one."""
        return self == (live if self.params_compared else live.without_params())

    def to_json(self) -> Json:
        return {
            "server": self.server,
            "method": self.method,
            "messages": [self._message_json(m) for m in self.messages],
            "batch": self.batch,
        }

    def _message_json(self, message: McpMessageKey) -> Json:
        out = message.to_json()
        if not self.params_compared:  # read back as it was written: without them
            del out["params_sha256"]
        return out

    @classmethod
    def from_json(cls, data: Json) -> McpKey:
        """Read a key back from a recording line (one without params hashes,
        written before they were, reads with ``params_compared`` False).

        Raises:
            ValueError: if a field is missing or has the wrong type.
        """
        try:
            messages = tuple(
                McpMessageKey(
                    str(m["message_type"]),
                    _optional_str(m["mcp_method"]),
                    _optional_str(m["tool_name"]),
                    _optional_str(m["arguments_sha256"]),
                    _optional_str(m.get("params_sha256")),
                )
                for m in data["messages"]
            )
            compared = all("params_sha256" in m for m in data["messages"])
            return cls(
                str(data["server"]), str(data["method"]), messages, bool(data["batch"]), compared
            )
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"bad MCP key: {e}") from None


def _optional_str(value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError("expected a string or null")
    return value


class BlobStore:
    """``DIR/blobs``: bodies stored under their SHA-256."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, sha: str) -> Path:
        """Where blob ``sha`` lives.

        Raises:
            ValueError: if ``sha`` is not 64 lower-case hex digits (a
                recording line must not name a file outside the store).
        """
        if not _SHA256.match(sha):
            raise ValueError("a blob name must be 64 hex digits")
        return self.root / sha

    def put(self, data: bytes) -> str:
        """Store ``data`` (once) and return its SHA-256.

        Raises:
            OSError: if it cannot be written.
        """
        sha = hashlib.sha256(data).hexdigest()
        target = self.root / sha
        if not target.exists():
            tmp = self.root / f".{sha}.{uuid.uuid4().hex}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, target)
        return sha

    def writer(self) -> BlobWriter:
        """A blob written piece by piece (a stream), named when finished."""
        return BlobWriter(self.root)


class BlobWriter:
    """One blob being written as a stream arrives; memory stays flat."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._tmp = root / f".stream.{uuid.uuid4().hex}.tmp"
        self._file: BinaryIO | None = None
        self._hash = hashlib.sha256()
        self.failed = False

    def write(self, data: bytes) -> None:
        if self.failed:
            return
        try:
            if self._file is None:
                self._file = self._tmp.open("wb")
            self._file.write(data)
        except OSError:
            # The agent's stream goes on; the recording of it is lost.
            self.failed = True
            return
        self._hash.update(data)

    def finish(self) -> str | None:
        """Close and name the blob; None if writing failed."""
        try:
            if self._file is None:
                self._tmp.write_bytes(b"")
            else:
                self._file.close()
            if self.failed:
                self._tmp.unlink(missing_ok=True)
                return None
            sha = self._hash.hexdigest()
            os.replace(self._tmp, self.root / sha)
        except OSError:
            self.failed = True
            return None
        return sha


# --------------------------------------------------------------------------
# Reading a recording back


#: The ``kind`` of an HTTP+SSE stream's lines.
MCP_STREAM_KIND: Final = "mcp_stream"


class RecordingError(ValueError):
    """A recording directory cannot be read (missing, or a line is malformed)."""


def _not_a_recording(root: Path) -> str:
    """Why ``root`` holds no recording, and what to give instead (a new user
    often passes the run's ``--out`` dir, or a ``--record`` dir nothing went through)."""
    record = "a recording is the DIR of `modeltap run --record DIR`"
    if not root.is_dir():
        return f"no such directory: {root} ({record})"
    if (root / AUDIT_FILE).exists():
        return (
            f"{root} is a capture (a run's --out), not a recording: no {RECORDING_FILE} ({record})"
        )
    return (
        f"{root} holds no {RECORDING_FILE}: nothing was recorded there (no exchange "
        f"went through `modeltap run --record {root}`)"
    )


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
    #: An MCP exchange's key (``kind: "mcp"``); its ``key`` is then None.
    mcp: McpKey | None = None

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
        #: MCP exchanges by server, then session, each list in order.
        self.mcp: dict[str, dict[str, list[Entry]]] = {}
        #: HTTP+SSE streams by server, then recorded MCP session (hashed), in
        #: the order they were opened: their ``mcp_stream`` lines, in order.
        self.mcp_streams: dict[str, dict[str, list[Entry]]] = {}
        for entry in entries:
            if entry.kind == "unaudited":
                self.unaudited.append(entry)
            elif entry.kind == MCP_STREAM_KIND:
                server_name, session = entry.line.get("mcp_server"), entry.line.get("mcp_session")
                if isinstance(server_name, str) and isinstance(session, str):
                    streams = self.mcp_streams.setdefault(server_name, {})
                    streams.setdefault(session, []).append(entry)
            elif entry.mcp is not None:
                if entry.session_id is not None:
                    server = self.mcp.setdefault(entry.mcp.server, {})
                    server.setdefault(entry.session_id, []).append(entry)
            elif entry.session_id is not None:
                self.sessions.setdefault(entry.session_id, []).append(entry)
        for turns in self.sessions.values():
            turns.sort(key=lambda e: e.order or 0)
        for by_session in self.mcp.values():
            for turns in by_session.values():
                turns.sort(key=lambda e: e.order or 0)
        #: The audited exchanges by ``(session, "http", seq)`` and ``(session,
        #: "websocket", order)``: a turn finds its own in one look-up.
        self.turn_index: dict[tuple[str, str, object], list[Entry]] = {}
        for session_id, turns in self.sessions.items():
            for entry in turns:
                if entry.kind == "http":
                    where: object = entry.line.get("seq")
                elif entry.kind == "websocket":
                    where = entry.order
                else:
                    continue
                self.turn_index.setdefault((session_id, entry.kind, where), []).append(entry)

    @classmethod
    def load(cls, directory: str | Path) -> Recording:
        """Read ``DIR/recording.jsonl``.

        Raises:
            RecordingError: the file is missing or a line is not a recording line.
        """
        root = Path(directory)
        try:
            raw = (root / RECORDING_FILE).read_bytes()
        except FileNotFoundError:
            raise RecordingError(_not_a_recording(root)) from None
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
                mcp = line.get("kind") == "mcp"
                entries.append(
                    Entry(
                        index=len(entries),
                        line=line,
                        key=TurnKey.from_json(key) if isinstance(key, dict) and not mcp else None,
                        mcp=McpKey.from_json(key) if isinstance(key, dict) and mcp else None,
                        session_id=line.get("session_id"),
                        order=line.get("order"),
                        transport=str(line.get("transport") or "http"),
                        api=line.get("api"),
                    )
                )
            except (orjson.JSONDecodeError, ValueError) as e:
                raise RecordingError(f"{RECORDING_FILE} line {number}: {e}") from None
        return cls(root, entries)

    def request_body(self, entry: Entry) -> Any:
        """The recorded request body of ``entry``, parsed; ``None`` when it is
        not there (no blob, unreadable, not JSON)."""
        request = entry.line.get("request")
        sha = request.get("body") if isinstance(request, dict) else None
        if not isinstance(sha, str):
            return None
        try:
            return orjson.loads(self.blobs.path(sha).read_bytes())
        except (OSError, ValueError):
            return None

    def recorded_routes(self) -> tuple[list[str], str | None, dict[str, int]]:
        """The routes as they were when recording: ``NAME=URL`` of each recorded
        route's upstream, the ``--upstream`` URL if one was recorded, and how many
        turns each route recorded (what the replay start-up screen shows)."""
        upstreams: dict[str, str] = {}
        turns: dict[str, int] = {}
        for entry in self.entries:
            name, upstream = entry.line.get("route"), entry.line.get("upstream")
            if entry.mcp is not None:
                continue  # a server's (:meth:`recorded_mcp`)
            if isinstance(name, str) and isinstance(upstream, str):
                upstreams[name] = upstream
                if entry.kind != "unaudited":
                    turns[name] = turns.get(name, 0) + 1
        upstream_url = upstreams.pop(UPSTREAM_ROUTE, None)
        return [f"{n}={u}" for n, u in upstreams.items()], upstream_url, turns

    def routes_to(self, url: str) -> tuple[list[str], str | None]:
        """Routes (``NAME=URL[,provider=P]``) and ``--upstream`` that send every
        recorded route, and the default ones, to the replay upstream at ``url``,
        each keeping its recorded base path so replayed paths equal recorded
        ones, and its recorded provider (a replayed Bedrock route still answers
        and is recorded as Bedrock)."""
        bases: dict[str, str] = {"openai": "", "anthropic": ""}
        options: dict[str, str] = {}
        for entry in self.entries:
            name, upstream = entry.line.get("route"), entry.line.get("upstream")
            if entry.mcp is not None:
                continue  # a server's (:meth:`mcp_routes_to`)
            if isinstance(name, str) and isinstance(upstream, str):
                bases[name] = urlsplit(upstream).path.rstrip("/")
                provider = entry.line.get("provider")
                if isinstance(provider, str) and PROVIDER_NAME.fullmatch(provider):
                    options[name] = f",provider={provider}"
        upstream_base = bases.pop(UPSTREAM_ROUTE, None)
        routes = [f"{name}={url}{base}{options.get(name, '')}" for name, base in bases.items()]
        return routes, (None if upstream_base is None else url + upstream_base)

    def recorded_mcp(self) -> tuple[list[str], dict[str, int]]:
        """The MCP servers as they were when recording (``NAME=URL``, as ``--mcp``
        takes them) and how many exchanges each recorded."""
        urls: dict[str, str] = {}
        counts: dict[str, int] = {}
        for entry in self.entries:
            upstream = entry.line.get("upstream")
            if entry.mcp is not None and isinstance(upstream, str):
                urls[entry.mcp.server] = upstream
                counts[entry.mcp.server] = counts.get(entry.mcp.server, 0) + 1
        return [f"{name}={url}" for name, url in urls.items()], counts

    def mcp_routes_to(self, url: str) -> list[str]:
        """``--mcp NAME=URL`` specs mounting each recorded MCP server on the
        replay upstream at ``url``, at its recorded base path (a server of
        ``--mcp-host`` is mounted at ``/mcp/HOST``)."""
        bases: dict[str, str] = {}
        for entry in self.entries:
            upstream = entry.line.get("upstream")
            if entry.mcp is not None and isinstance(upstream, str):
                bases[entry.mcp.server] = urlsplit(upstream).path.rstrip("/")
        return [f"{name}={url}{base}" for name, base in bases.items()]


def _key_matches(entry: Entry, record: AuditRecord) -> bool:
    key = entry.key
    if key is None:
        return False
    return (
        key.model == record.model
        and key.tool_names == record.tool_names
        and key.instructions_sha256 == record.instructions_sha256
        and key.image_count == record.image_count
        and key.stream == record.stream
    )


def request_blob(entry: Entry) -> str | None:
    """The blob name of an entry's recorded request body, if it has one."""
    request = entry.line.get("request")
    body = request.get("body") if isinstance(request, dict) else None
    return body if isinstance(body, str) else None


def find_exchange(
    recording: Recording, session_id: str, record: AuditRecord, position: int
) -> Entry | None:
    """The recorded exchange of one audited turn, or ``None``.

    Args:
        recording: the loaded recording.
        session_id: the turn's session.
        record: the turn's audit record.
        position: 1-based position of the turn among its session's turns of its run.

    Returns:
        The entry whose session, run (when the line names it), ``seq``
        (HTTP) or position (WebSocket) and turn key agree with the record
        (a body is never matched to a turn it does not belong to); one
        whose request body hash equals the record's ``body_sha256`` (the
        very bytes that were audited) first.
    """
    found: list[Entry] = []
    kind = "http" if record.transport == "http" else "websocket"
    where = record.seq if kind == "http" else position
    for entry in recording.turn_index.get((session_id, kind, where), ()):
        run = entry.line.get("run_id")
        if isinstance(run, str) and run != record.run_id:
            continue  # another run's turn with the same session and seq
        if _key_matches(entry, record):
            found.append(entry)
    found.sort(key=lambda e: request_blob(e) != record.body_sha256)
    return found[0] if found else None
