"""The recorder addon: ``modeltap run --record DIR`` keeps what a replay needs.

It listens to the run (never to mitmproxy's hooks): what the run forwards is
recorded, what it refused is not. The format is :mod:`modeltap.replay.recording`'s.
Recording is a copy for later replays: when a line or blob cannot be written
the traffic and the audit go on, and the loss is counted and reported.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from mitmproxy import exceptions

from modeltap.addons.base import Addon
from modeltap.apis.mcp.transport import SESSION_HEADER, query_session_id, session_key
from modeltap.core.notices import ExchangeView, Forward, Listener, Outcome, Reply
from modeltap.core.run import Run
from modeltap.evidence.records import Json, McpAuditRecord, WsCloseEvent
from modeltap.evidence.sink import JsonlFile
from modeltap.replay.recording import (
    BLOBS_DIR,
    INLINE_LIMIT,
    RECORDING_FILE,
    BlobStore,
    BlobWriter,
    TurnKey,
    index_line,
    kept_headers,
    mcp_index_line,
    mcp_stream_line,
)
from modeltap.rules.errors import SinkError, UpstreamProtocolError, error_message
from modeltap.wire.sse import SSEDecoder

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Exchange:
    """One HTTP exchange being recorded."""

    line: Json
    t_forward_ns: int
    t_head_ns: int | None = None
    headers: Json = field(default_factory=dict)
    chunks: list[list[float]] = field(default_factory=list)
    stream: BlobWriter | None = None
    #: An MCP exchange: the session its answer's ``Mcp-Session-Id`` named, hashed.
    mcp_session: str | None = None


@dataclass(slots=True)
class _Stream:
    """An HTTP+SSE session's stream (``GET /sse``) being recorded event by event."""

    server: str
    decoder: SSEDecoder = field(default_factory=SSEDecoder)
    #: The session its endpoint event named, hashed; None until that event.
    session: str | None = None


@dataclass(slots=True)
class _Turn:
    """One ``response.create`` and the messages after it."""

    line: Json
    t0_ns: int
    messages: list[Json] = field(default_factory=list)


class Recorder(Addon, Listener):
    """Record full exchanges for ``modeltap replay`` (``--record DIR``)."""

    #: Its name among mitmproxy's addons (``master.addons.get``).
    name = "modeltap_recorder"

    OPTIONS = ("record",)

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.index: JsonlFile | None = None
        self.blobs: BlobStore | None = None
        self._exchanges: dict[str, _Exchange] = {}
        #: The turn being recorded on each WebSocket connection.
        self._turns: dict[str, _Turn] = {}
        #: Exchanges that could not be recorded (reported at exit).
        self.lost = 0
        #: An MCP POST's audit lines, from its ``mcp_audited`` to its ``forwarding``.
        self._mcp_records: dict[str, tuple[McpAuditRecord, ...]] = {}
        #: MCP exchanges recorded per (session, server), for their ``order``.
        self._mcp_counts: dict[tuple[str, str], int] = {}
        #: HTTP+SSE streams being recorded, by exchange.
        self._streams: dict[str, _Stream] = {}
        #: Per (server, MCP session hashed): the ``order`` of its latest POST.
        self._latest_post: dict[tuple[str, str], int] = {}

    def configure(self, updated: set[str]) -> None:
        if "modeltap_record" not in updated:
            return
        target = self.options.modeltap_record
        if self.index is not None:
            self.index.close()
        self.index = self.blobs = None
        self.run.listeners.unsubscribe(self)
        if not target:
            return
        root = Path(target)
        if root.exists() and not root.is_dir():
            raise exceptions.OptionsError(
                f"cannot use {root} as the recording dir (--record): it is not a directory"
            )
        try:
            (root / BLOBS_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise exceptions.OptionsError(
                f"cannot create the recording dir {root} (--record): {os.strerror(e.errno or 0)}"
            ) from None
        self.index = JsonlFile(root / RECORDING_FILE)
        self.blobs = BlobStore(root / BLOBS_DIR)
        self.run.listeners.subscribe(self)

    # ------------------------------------------------------------------ notices

    def mcp_audited(
        self, view: ExchangeView, records: tuple[McpAuditRecord, ...], t_ns: int
    ) -> None:
        self._mcp_records[view.id] = records

    def forwarding(
        self, view: ExchangeView, body: bytes, headers: Mapping[str, str]
    ) -> Forward | Reply | None:
        if view.parent is not None:
            self._start_turn(view, body)
        elif view.mcp_server is not None:
            self._start_mcp(view, body, headers)
        elif view.record is not None:
            key = TurnKey.of(view.record, view.parsed_body(body))
            self._start_exchange(view, index_line("http", view, key), body, headers)
        elif view.route is not None and not view.websocket:
            self._start_exchange(view, index_line("unaudited", view, None), body, headers)
        return None

    def first_byte(
        self, view: ExchangeView, status: int | None, headers: Mapping[str, str], t_ns: int
    ) -> None:
        stream = self._streams.get(view.id)
        if stream is not None:
            media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media != "text/event-stream" or headers.get("content-encoding", "").strip():
                del self._streams[view.id]  # not an event stream read as sent: not recorded
        exchange = self._exchanges.get(view.id)
        if exchange is not None:
            exchange.t_head_ns, exchange.headers = t_ns, kept_headers(headers)
            if view.mcp_server is not None:
                sid = headers.get(SESSION_HEADER)
                exchange.mcp_session = session_key(sid) if sid else None

    def chunk(self, view: ExchangeView, data: bytes, t_ns: int) -> None:
        stream = self._streams.get(view.id)
        if stream is not None:
            self._stream_chunk(view.id, stream, data)
        exchange = self._exchanges.get(view.id)
        if exchange is None or self.blobs is None:
            return
        if exchange.stream is None:
            exchange.stream = self.blobs.writer()
        exchange.stream.write(data)
        exchange.chunks.append([_ms(exchange.t_head_ns, t_ns) or 0.0, len(data)])

    def finished(self, outcome: Outcome) -> None:
        self._mcp_records.pop(outcome.view.id, None)  # answered before it was forwarded
        self._streams.pop(outcome.view.id, None)
        exchange = self._exchanges.pop(outcome.view.id, None)
        if exchange is not None:
            self._finish(exchange, outcome)

    def message(
        self, view: ExchangeView, content: bytes, is_text: bool, from_client: bool, t_ns: int
    ) -> None:
        turn = self._turns.get(view.id)
        if turn is not None:
            item = self._message(content, is_text, from_client)
            turn.messages.append({"ms": _ms(turn.t0_ns, t_ns), **item})

    def closed(self, view: ExchangeView, event: WsCloseEvent, t_ns: int) -> None:
        self._flush(self._turns.pop(view.id, None))

    def stopped(self) -> None:
        if self.index is not None:
            self.index.close()
        if self.lost:
            logger.error("modeltap: %d exchanges could not be recorded", self.lost)

    # ------------------------------------------------------------------ HTTP

    def _start_exchange(
        self, view: ExchangeView, line: Json, body: bytes, headers: Mapping[str, str]
    ) -> None:
        assert self.blobs is not None
        try:
            line["request"] = {"headers": kept_headers(headers), "body": self.blobs.put(body)}
        except OSError:
            self.lost += 1
            return
        self._exchanges[view.id] = _Exchange(line, time.perf_counter_ns())

    def _finish(self, exchange: _Exchange, outcome: Outcome) -> None:
        assert self.blobs is not None
        body: str | None = None
        chunks: list[list[float]] | None = None
        if outcome.streamed:
            stream = exchange.stream or self.blobs.writer()
            body, chunks = stream.finish(), exchange.chunks
            if body is None:
                self.lost += 1
                return
        elif outcome.body is not None:
            try:
                body = self.blobs.put(outcome.body)
            except OSError:
                self.lost += 1
                return
        exchange.line["response"] = {
            "status": outcome.status,
            "headers": exchange.headers,
            "wait_ms": _ms(exchange.t_forward_ns, exchange.t_head_ns),
            "body": body,
            "chunks": chunks,
            # The break is part of what happened; a replay reproduces it. Said in our
            # own words: mitmproxy's message can quote what the upstream sent.
            "error": error_message("") if outcome.failure else None,
        }
        if exchange.line["kind"] == "mcp":
            exchange.line["response"]["mcp_session"] = exchange.mcp_session
        self._append(exchange.line)

    def _start_mcp(self, view: ExchangeView, body: bytes, headers: Mapping[str, str]) -> None:
        """An MCP POST or DELETE, or HTTP+SSE's stream. A Streamable HTTP GET
        stream is not recorded: it answers no request (a replay holds it open,
        silent)."""
        records = self._mcp_records.pop(view.id, ())
        if view.mcp_server is None:
            return
        if view.method == "GET":
            if view.mcp_session is None:  # outside a session: HTTP+SSE's, answers come on it
                self._streams[view.id] = _Stream(view.mcp_server)
            return
        where = (view.session_id, view.mcp_server)
        order = self._mcp_counts[where] = self._mcp_counts.get(where, 0) + 1
        if view.mcp_session is not None:
            self._latest_post[(view.mcp_server, view.mcp_session)] = order
        line = mcp_index_line(view, records, order, self.run.run_id, body)
        self._start_exchange(view, line, body, headers)

    def _stream_chunk(self, exchange_id: str, stream: _Stream, data: bytes) -> None:
        """Each whole event of an HTTP+SSE stream: the endpoint names the
        session (kept hashed: the path and its id are not), every message after
        it is filed after the session's latest POST."""
        assert self.blobs is not None
        try:
            events = stream.decoder.feed(data)
        except UpstreamProtocolError:
            del self._streams[exchange_id]
            return
        for event in events:
            if stream.session is None:
                sid = query_session_id(event.data) if event.event == "endpoint" else None
                if sid is None:
                    continue  # no session yet: nothing a replay could file it under
                stream.session = session_key(sid)
                self._append(mcp_stream_line(stream.server, stream.session, 0, None))
                continue
            if event.event not in (None, "message"):
                continue
            after = self._latest_post.get((stream.server, stream.session), 0)
            try:
                message = self.blobs.put(event.data.encode())
            except OSError:
                self.lost += 1
                continue
            self._append(mcp_stream_line(stream.server, stream.session, after, message))

    # ------------------------------------------------------------------ WebSocket

    def _start_turn(self, view: ExchangeView, body: bytes) -> None:
        assert self.blobs is not None and view.parent is not None and view.record is not None
        self._flush(self._turns.pop(view.parent, None))
        line = index_line("websocket", view, TurnKey.of(view.record, view.parsed_body(body)))
        try:
            line["request"] = {"headers": {}, "body": self.blobs.put(body)}
        except OSError:
            self.lost += 1
            return
        self._turns[view.parent] = _Turn(line, time.perf_counter_ns())

    def _message(self, content: bytes, is_text: bool, from_client: bool) -> Json:
        assert self.blobs is not None
        item: Json = {"from": "client" if from_client else "server"}
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

    def _flush(self, turn: _Turn | None) -> None:
        if turn is not None:
            turn.line["messages"] = turn.messages
            self._append(turn.line)

    def _append(self, line: Json) -> None:
        assert self.index is not None
        try:
            self.index.append(orjson.dumps(line) + b"\n")
        except SinkError:
            # Recording is a copy for later replays: traffic and the audit go on.
            self.lost += 1
            logger.error("modeltap: an exchange could not be written to %s", RECORDING_FILE)


def _ms(start_ns: int | None, end_ns: int | None) -> float | None:
    if start_ns is None or end_ns is None:
        return None
    return round(max(0, end_ns - start_ns) / 1e6, 3)
