"""``modeltap run --record DIR``: keep what a replay needs, beside the audit.

A separate addon, loaded after :class:`~modeltap.addon.ModelTap`: it reads the
exchange ModelTap keeps in ``flow.metadata`` (so only what ModelTap audited or
passed through is recorded, never what it refused) and writes:

``DIR/recording.jsonl``
    One line per exchange, written with one append (see :mod:`modeltap.sink`):
    an audited HTTP request (``kind: "http"``), one ``response.create`` of a
    WebSocket with the messages that followed it (``kind: "websocket"``), or a
    request passed through unaudited (``kind: "unaudited"``, e.g. ``GET
    .../models``). Fields: ``v`` (1), ``kind``, ``session_id``, ``order`` (the
    turn's 1-based position in its session, audit order; null when
    unaudited), ``seq`` (the audit record's, HTTP only), ``transport``,
    ``api``, ``method``, ``path`` (secret query values redacted), ``route``,
    ``upstream``, ``key`` (see :class:`TurnKey`), ``request`` (``headers``,
    ``body``), ``response`` (``status``, ``headers``, ``wait_ms`` from the
    request leaving to the response head, ``body``, ``chunks``, ``error``: a
    fixed text when the exchange broke, never the upstream's words)
    and, for a WebSocket, ``messages``.

``DIR/blobs/<sha256>``
    Bodies, content-addressed, so identical bodies are kept once. A request
    body is kept decoded (as audited); a response body exactly as the
    upstream sent it, with its ``content-encoding``. A streamed (SSE)
    response is one blob written as it arrives (never held in memory) and
    ``chunks`` lists ``[offset_ms, nbytes]`` per chunk, the offset counted
    from the response head. WebSocket ``messages`` are ``{"ms", "from":
    "client"|"server", "text"}`` (or ``"blob"`` for binary or large ones),
    ``ms`` counted from the ``response.create`` they follow.

Headers are kept from :data:`KEPT_HEADERS` only, so ``authorization``,
``x-api-key``, ``api-key`` and cookies never reach the recording; paths keep
query values only for ``api-version``, ``beta`` and ``alt``
(:func:`~modeltap.records.redact_path`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson
from mitmproxy import exceptions, http

from modeltap import options
from modeltap.addon import METADATA_KEY, Exchange
from modeltap.errors import Rejected, SinkError, error_message
from modeltap.records import API_RESPONSES, Json, RequestFacts, redact_path
from modeltap.sink import JsonlFile
from modeltap.ws import Create, WsPolicy, classify_client_message

logger = logging.getLogger(__name__)

RECORDING_FILE = "recording.jsonl"
BLOBS_DIR = "blobs"
FORMAT_VERSION = 1
RECORD_KEY = "modeltap_record"
RECORD_WS_KEY = "modeltap_record_ws"

#: The only headers a recording keeps (request and response). Everything else,
#: credentials included, is dropped: an allow-list cannot leak a header that a
#: new SDK invents.
KEPT_HEADERS = ("content-type", "content-encoding", "x-request-id", "request-id")

#: Top-level request fields left out of the input hash: they change from run to
#: run without the agent doing anything different (per-session cache keys,
#: end-user ids, free-form metadata such as Claude Code's ``metadata.user_id``).
VOLATILE_FIELDS = frozenset(
    {"metadata", "user", "prompt_cache_key", "safety_identifier", "client_metadata"}
)

#: WebSocket messages longer than this go to a blob instead of the index line.
INLINE_LIMIT = 64 * 1024

_SHA256 = re.compile(r"^[0-9a-f]{64}$")

# Facts of a validated ``response.create`` do not depend on the continuation
# policy (only acceptance does, and ModelTap already accepted the message).
_AS_SENT = WsPolicy(continuation="as-sent")


# --------------------------------------------------------------------------
# Pure helpers: the turn key, headers, blobs


def input_sha256(body: object) -> str:
    """The input hash of a request body.

    SHA-256 (hex) of the canonical JSON of ``body`` (orjson, keys sorted, no
    whitespace) without the :data:`VOLATILE_FIELDS` at its top level. It
    covers everything else the request says (messages, tools, settings), so
    any change of model, tools or instructions changes it too.

    Args:
        body: the parsed request body (a WebSocket ``response.create``
            message, ``type`` included).

    Returns:
        64 hex digits.
    """
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in VOLATILE_FIELDS}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


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
    def of(cls, facts: RequestFacts, body: object) -> TurnKey:
        """The key of an audited request.

        Args:
            facts: its audit facts.
            body: its parsed body, as forwarded.
        """
        return cls(
            model=facts.model,
            tool_names=facts.tool_names,
            instructions_sha256=facts.instructions_sha256,
            image_count=len(facts.image_details),
            stream=facts.stream,
            input_sha256=input_sha256(body),
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


def kept_headers(headers: Any) -> Json:
    """The allow-listed headers of a mitmproxy ``Headers`` (or any mapping), lower-cased."""
    return {name: headers[name] for name in KEPT_HEADERS if name in headers}


def ws_create(content: bytes, is_text: bool) -> Create | None:
    """The validated ``response.create`` a client frame carries, else None
    (control messages, and anything ModelTap would have refused)."""
    try:
        seen = classify_client_message(content, is_text, _AS_SENT)
    except Rejected:
        return None
    return seen if isinstance(seen, Create) else None


def is_ws_create(content: bytes | str) -> bool:
    """True when a client frame names itself ``response.create`` (valid or not)."""
    try:
        message = orjson.loads(content)
    except orjson.JSONDecodeError:
        return False
    return isinstance(message, dict) and message.get("type") == "response.create"


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
# What is kept per exchange while it runs


@dataclass(slots=True)
class _Pending:
    """One HTTP exchange being recorded."""

    line: Json
    t_head: float = 0.0
    chunks: list[list[float]] = field(default_factory=list)
    stream: BlobWriter | None = None


@dataclass(slots=True)
class _WsTurn:
    """One ``response.create`` and the messages after it."""

    line: Json
    t0: float
    messages: list[Json] = field(default_factory=list)


@dataclass(slots=True)
class _WsRecording:
    ex: Exchange
    turn: _WsTurn | None = None


class _StreamRecorder:
    """The ``response.stream`` callable: keeps each chunk and its offset, then
    hands it to whatever callable was there before (ModelTap's tap)."""

    __slots__ = ("inner", "pending")

    def __init__(self, pending: _Pending, inner: Any) -> None:
        self.pending = pending
        self.inner = inner

    def __call__(self, chunk: bytes) -> Any:
        pending = self.pending
        if chunk and pending.stream is not None:
            offset = round((time.perf_counter() - pending.t_head) * 1000, 3)
            pending.stream.write(chunk)
            pending.chunks.append([offset, len(chunk)])
        return self.inner(chunk) if callable(self.inner) else chunk


def _ms_between(start: float | None, end: float | None) -> float | None:
    if start is None or end is None:
        return None
    return round(max(0.0, end - start) * 1000, 3)


# --------------------------------------------------------------------------
# The addon


class Recorder:
    """Record full exchanges for ``modeltap replay`` (``--record DIR``)."""

    def __init__(self) -> None:
        self.options: Any = None
        self.index: JsonlFile | None = None
        self.blobs: BlobStore | None = None
        self._order: dict[str, int] = {}
        #: Exchanges that could not be recorded (reported at exit).
        self.lost = 0

    def load(self, loader: Any) -> None:
        self.options = loader.master.options
        options.declare(loader, ["record"])

    def configure(self, updated: set[str]) -> None:
        if "modeltap_record" not in updated:
            return
        target = self.options.modeltap_record
        if self.index is not None:
            self.index.close()
        self.index = self.blobs = None
        if not target:
            return
        root = Path(target)
        try:
            (root / BLOBS_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise exceptions.OptionsError(
                f"cannot create the recording dir: {os.strerror(e.errno or 0)}"
            ) from None
        self.index = JsonlFile(root / RECORDING_FILE)
        self.blobs = BlobStore(root / BLOBS_DIR)

    def done(self) -> None:
        if self.index is not None:
            self.index.close()
        if self.lost:
            logger.error("modeltap: %d exchanges could not be recorded", self.lost)

    # ------------------------------------------------------------------ HTTP

    def request(self, flow: http.HTTPFlow) -> None:
        ex: Exchange | None = flow.metadata.get(METADATA_KEY)
        if self.blobs is None or ex is None or ex.websocket or flow.response is not None:
            return  # refused or answered by modeltap: nothing went upstream
        if ex.audited and ex.facts is not None:
            body = flow.request.get_content(strict=False) or b""
            try:
                key = TurnKey.of(ex.facts, orjson.loads(body))
            except orjson.JSONDecodeError:  # audited bodies parse; be safe anyway
                return
            line = self._line("http", ex, flow, key=key, order=self._next_order(ex.session_id))
            line["seq"] = ex.seq
        elif ex.api is None and ex.route is not None:
            body = flow.request.get_content(strict=False) or b""
            line = self._line("unaudited", ex, flow, key=None, order=None)
        else:
            return
        try:
            body_sha = self.blobs.put(body)
        except OSError:
            self.lost += 1
            return
        line["request"] = {"headers": kept_headers(flow.request.headers), "body": body_sha}
        flow.metadata[RECORD_KEY] = _Pending(line)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        pending: _Pending | None = flow.metadata.get(RECORD_KEY)
        resp = flow.response
        if pending is None or resp is None or self.blobs is None:
            return
        pending.t_head = time.perf_counter()
        if resp.stream:
            # Runs after ModelTap's responseheaders (addon order): wrap its tap so
            # the agent still gets every chunk as it arrives.
            pending.stream = self.blobs.writer()
            resp.stream = _StreamRecorder(pending, resp.stream)

    def response(self, flow: http.HTTPFlow) -> None:
        pending: _Pending | None = flow.metadata.pop(RECORD_KEY, None)
        if pending is None or flow.response is None:
            return
        self._finish(flow, pending, None)

    def error(self, flow: http.HTTPFlow) -> None:
        pending: _Pending | None = flow.metadata.pop(RECORD_KEY, None)
        if pending is None:
            return
        # The reset is part of what happened; a replay reproduces it. Said in our
        # own words: mitmproxy's message can quote what the upstream sent.
        self._finish(flow, pending, error_message(""))

    def _finish(self, flow: http.HTTPFlow, pending: _Pending, error: str | None) -> None:
        assert self.blobs is not None
        resp = flow.response
        body: str | None = None
        chunks: list[list[float]] | None = None
        if pending.stream is not None:
            body, chunks = pending.stream.finish(), pending.chunks
            if body is None:
                self.lost += 1
                return
        elif resp is not None and resp.raw_content is not None:
            try:
                body = self.blobs.put(resp.raw_content)
            except OSError:
                self.lost += 1
                return
        pending.line["response"] = {
            "status": resp.status_code if resp is not None else None,
            "headers": kept_headers(resp.headers) if resp is not None else {},
            "wait_ms": _ms_between(
                flow.request.timestamp_end, resp.timestamp_start if resp else None
            ),
            "body": body,
            "chunks": chunks,
            "error": error,
        }
        self._append(pending.line)

    # ------------------------------------------------------------------ WebSocket

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        ex: Exchange | None = flow.metadata.get(METADATA_KEY)
        if self.blobs is not None and ex is not None and ex.websocket:
            flow.metadata[RECORD_WS_KEY] = _WsRecording(ex)

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        rec: _WsRecording | None = flow.metadata.get(RECORD_WS_KEY)
        if rec is None or flow.websocket is None or not flow.websocket.messages:
            return
        message = flow.websocket.messages[-1]
        if message.injected or message.dropped:
            return  # modeltap's own refusals: a replay produces them again
        now = time.perf_counter()
        if message.from_client:
            create = ws_create(message.content, message.is_text)
            if create is not None:
                self._ws_flush(rec)
                rec.turn = self._ws_turn(rec.ex, flow, create, message.content, now)
                return
        if rec.turn is not None:
            rec.turn.messages.append(
                self._ws_message(
                    message.content, message.is_text, message.from_client, now - rec.turn.t0
                )
            )

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        rec: _WsRecording | None = flow.metadata.pop(RECORD_WS_KEY, None)
        if rec is not None:
            self._ws_flush(rec)

    def _ws_turn(
        self, ex: Exchange, flow: http.HTTPFlow, create: Create, content: bytes, now: float
    ) -> _WsTurn | None:
        assert self.blobs is not None
        key = TurnKey.of(create.facts, create.body)
        line = self._line("websocket", ex, flow, key=key, order=self._next_order(ex.session_id))
        line["api"] = API_RESPONSES
        try:
            line["request"] = {"headers": {}, "body": self.blobs.put(content)}
        except OSError:
            self.lost += 1
            return None
        return _WsTurn(line, now)

    def _ws_message(self, content: bytes, is_text: bool, from_client: bool, dt: float) -> Json:
        assert self.blobs is not None
        item: Json = {"ms": round(dt * 1000, 3), "from": "client" if from_client else "server"}
        if is_text and len(content) <= INLINE_LIMIT:
            try:
                item["text"] = content.decode()
                return item
            except UnicodeDecodeError:
                pass
        try:
            item["blob"] = self.blobs.put(content)
        except OSError:
            item["lost"] = True
        item["binary"] = not is_text
        return item

    def _ws_flush(self, rec: _WsRecording) -> None:
        turn, rec.turn = rec.turn, None
        if turn is not None:
            turn.line["messages"] = turn.messages
            self._append(turn.line)

    # ------------------------------------------------------------------ lines

    def _next_order(self, session_id: str) -> int:
        self._order[session_id] = order = self._order.get(session_id, 0) + 1
        return order

    def _line(
        self,
        kind: str,
        ex: Exchange,
        flow: http.HTTPFlow,
        *,
        key: TurnKey | None,
        order: int | None,
    ) -> Json:
        return {
            "v": FORMAT_VERSION,
            "kind": kind,
            "session_id": ex.session_id,
            "order": order,
            "seq": None,
            "transport": "websocket" if kind == "websocket" else "http",
            "api": ex.api,
            "method": flow.request.method,
            "path": redact_path(ex.path),
            "route": ex.route.name if ex.route else None,
            "upstream": ex.upstream,
            "key": key.to_json() if key is not None else None,
        }

    def _append(self, line: Json) -> None:
        assert self.index is not None
        try:
            self.index.append(orjson.dumps(line) + b"\n")
        except SinkError:
            # Recording is a copy for later replays: traffic and the audit go on.
            self.lost += 1
            logger.error("modeltap: an exchange could not be written to %s", RECORDING_FILE)
