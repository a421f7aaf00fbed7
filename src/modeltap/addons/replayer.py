"""The replayer addon: ``modeltap replay DIR`` answers an agent from a recording.

It listens to the run. Each request about to go upstream is matched with the
next recorded turn of its session (:class:`~modeltap.replay.matching.Player`): a
match is forwarded to the replay upstream (:mod:`modeltap.replay.upstream`)
tagged with the recorded exchange to serve; a mismatch or an exhausted
recording is answered right there with a provider-shaped error, and noted in
``OUT/replay-diff.jsonl`` and on stderr. A WebSocket turn's decision is
queued for the replay upstream, which answers each ``response.create`` it
receives in order.

An MCP POST or DELETE is matched the same way, with its session's recorded
exchanges with that server (one :class:`~modeltap.replay.matching.Player`
per server): a match is served with the live request's JSON-RPC ids and,
where the recorded answer gave an ``Mcp-Session-Id``, one this replay hands
out (its session is then replayed from the recorded one it stands for); a
miss is answered with a JSON-RPC error naming the rule
(:func:`~modeltap.replay.mcp.replay_error_body`). An MCP GET stream of a
session is held open, silent. One outside a session opens an HTTP+SSE
session: it stands for the server's next recorded HTTP+SSE session, gets an
endpoint naming a fresh session, and each POST to it is answered as
recorded (202) while the messages recorded on the stream after that POST
(the answers, with the live ids, and the server's own requests) are pushed
onto the stream; a miss's JSON-RPC error goes on the stream too. With no
recorded HTTP+SSE session left, such a GET is refused.
"""

from __future__ import annotations

import contextlib
import secrets
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import orjson

from modeltap.apis.mcp.transport import SESSION_HEADER, SESSION_QUERY, session_key
from modeltap.core import answers
from modeltap.core.mcp_exchange import mcp_session_id
from modeltap.core.notices import ExchangeView, Forward, Listener, Outcome, Reply
from modeltap.core.run import Run
from modeltap.evidence.records import McpAuditRecord, WsCloseEvent
from modeltap.evidence.redaction import redact_path
from modeltap.evidence.sink import JsonlFile
from modeltap.replay.matching import MISMATCH, UNRECORDED, Player, Problem
from modeltap.replay.mcp import id_map, replay_error_body, rewrite_message
from modeltap.replay.recording import DIFF_FILE, Entry, McpKey, TurnKey
from modeltap.replay.upstream import (
    CONNECTION_HEADER,
    ENTRY_HEADER,
    MCP_PLAN_HEADER,
    MCP_SSE_HEADER,
    MCP_STREAM_HEADER,
    McpPlan,
    ReplayServer,
    SseStream,
)
from modeltap.report.terminal import print_lines

#: What a GET that would open an HTTP+SSE session is answered with when the
#: recording has no (more) such session of that server (405: MCP's "no stream here").
HTTP_SSE_NOT_REPLAYED = (
    "modeltap replay: an MCP stream outside a session (HTTP+SSE) is not replayed: "
    "the recording has no more HTTP+SSE sessions of this server"
)
#: What a POST to a replayed HTTP+SSE session is answered with (its answer is on the stream).
_ACCEPTED = b"Accepted"
#: The SDK's POST path, when the recording has none of a session to tell.
_SSE_POST_PATH = "/messages/"


#: Said at start-up when the recording's MCP exchanges have no params hashes.
PARAMS_NOT_COMPARED_NOTE = (
    "modeltap replay: this recording's MCP requests were recorded before their params "
    "were hashed: only their method, tool and arguments are compared"
)


class Replayer(Listener):
    """Answer audited requests from a recording."""

    #: Its name among mitmproxy's addons (``master.addons.get``).
    name = "modeltap_replayer"

    def __init__(
        self, run: Run, player: Player, server: ReplayServer, out: Path, *, quiet: bool = False
    ) -> None:
        self.player = player
        self.server = server
        self.out = out
        self.quiet = quiet
        self.diff_file = JsonlFile(out / DIFF_FILE)
        #: Every difference noted so far (the unplayed turns are added at the end).
        self.problems: list[Problem] = []
        self.turns_played = 0
        #: One player per recorded MCP server (its exchanges, by session).
        self.mcp_players = {
            server: _mcp_player(player, server, sessions)
            for server, sessions in player.recording.mcp.items()
        }
        self.mcp_played = 0
        #: An MCP POST's audit lines, from its ``mcp_audited`` to its ``forwarding``.
        self._mcp_records: dict[str, tuple[McpAuditRecord, ...]] = {}
        #: The MCP sessions this replay handed out (hashed, as the files name them):
        #: the recorded session each stands for.
        self._handed_out: dict[str, str] = {}
        #: Per server: its recorded HTTP+SSE sessions (hashed) not yet stood for, in order.
        self._sse_left = {
            server: deque(sessions) for server, sessions in player.recording.mcp_streams.items()
        }
        # The recording answers, not a provider: a SigV4-signed request (boto3 with
        # IAM keys, recorded in regular mode) is served like any other.
        run.settings = replace(run.settings, upstreams_check_signatures=False)
        run.listeners.subscribe(self)

    async def running(self) -> None:
        await self.server.start()
        if not self.quiet and self.mcp_params_not_compared:
            print_lines(PARAMS_NOT_COMPARED_NOTE, stderr=True, flush=True)

    @property
    def mcp_params_not_compared(self) -> int:
        """How many recorded MCP exchanges were recorded before params were hashed."""
        entries = self.player.recording.entries
        return sum(1 for e in entries if e.mcp is not None and not e.mcp.params_compared)

    # ------------------------------------------------------------------ notices

    def mcp_audited(
        self, view: ExchangeView, records: tuple[McpAuditRecord, ...], t_ns: int
    ) -> None:
        self._mcp_records[view.id] = records

    def forwarding(
        self, view: ExchangeView, body: bytes, headers: Mapping[str, str]
    ) -> Forward | Reply | None:
        if view.parent is not None:
            self._play_turn(view, body)
            return None
        if view.mcp_server is not None:
            return self._play_mcp(view, view.mcp_server, body, headers)
        if view.websocket:
            self.server.connections[view.id] = deque()
            return Forward(((CONNECTION_HEADER, view.id),))
        if view.record is None:
            entry = self.player.unaudited(view.method or "", redact_path(view.path))
            if entry is None:
                return _reply(view, 404, "this request is not in the recording", UNRECORDED)
            return Forward(((ENTRY_HEADER, str(entry.index)),))
        parsed = view.parsed_body(body)
        key = TurnKey.of(view.record, parsed)
        played = self.player.play(view.session_id, "http", view.api, key, parsed)
        self._note(played.problems)
        if played.entry is None:
            return _reply(view, 400, played.error_message, played.code or MISMATCH)
        self.turns_played += 1
        return Forward(((ENTRY_HEADER, str(played.entry.index)),))

    def finished(self, outcome: Outcome) -> None:
        self._mcp_records.pop(outcome.view.id, None)  # answered before it was forwarded
        self.server.mcp_plans.pop(outcome.view.id, None)

    def closed(self, view: ExchangeView, event: WsCloseEvent, t_ns: int) -> None:
        self.server.connections.pop(view.id, None)

    def stopped(self) -> None:
        for stream in self.server.sse_streams.values():
            stream.queue.put_nowait(None)  # each replayed HTTP+SSE stream ends
        self.server.close()
        self._note(self.player.unplayed())
        for mcp in self.mcp_players.values():
            self._note(mcp.unplayed())
        self.diff_file.close()

    # ------------------------------------------------------------------ helpers

    def _play_turn(self, view: ExchangeView, body: bytes) -> None:
        decisions = self.server.connections.get(view.parent or "")
        if decisions is None or view.record is None:
            return
        parsed = view.parsed_body(body)
        key = TurnKey.of(view.record, parsed)
        played = self.player.play(view.session_id, "websocket", view.api, key, parsed)
        self._note(played.problems)
        if played.entry is not None:
            self.turns_played += 1
        # The replay upstream takes one decision per create it receives, in order.
        decisions.append(played)

    def _play_mcp(
        self, view: ExchangeView, server: str, body: bytes, headers: Mapping[str, str]
    ) -> Forward | Reply:
        """An MCP exchange: a GET stream is held open; a POST or DELETE is
        matched with the server's recorded exchanges of its session."""
        if view.method == "GET":
            if view.mcp_session is None:
                # Not a Streamable HTTP session's stream (a client asks for one once
                # it has a session): HTTP+SSE's, whose answers come on it.
                return self._open_sse(server)
            return Forward(((MCP_STREAM_HEADER, "1"),))
        records = self._mcp_records.pop(view.id, ())
        parsed = _json_or_none(body)
        key = McpKey.of(server, view.method or "", records, parsed)
        player = self.mcp_players.get(server)
        if player is None:  # a server the recording never saw: every request is a miss
            player = self.mcp_players[server] = _mcp_player(self.player, server, {})
        live_ids = [r.jsonrpc_id for r in records]
        if view.mcp_session is not None and view.mcp_session in self._handed_out:
            recorded = mcp_session_id(server, self._handed_out[view.mcp_session])
            if recorded in player.sessions:
                player.bind(view.session_id, recorded)
        played = player.play(view.session_id, "http", view.api, key, parsed)
        self._note(played.problems)
        stream = self.server.sse_streams.get(view.mcp_session or "")
        if played.entry is None or played.entry.mcp is None:
            requests = [r.jsonrpc_id for r in records if r.message_type == "request"]
            content = replay_error_body(
                requests, played.error_message, played.code or MISMATCH, batch=key.batch
            )
            if stream is not None:  # HTTP+SSE: the client reads its answers on the stream
                if requests:
                    stream.queue.put_nowait(content)
                return Reply(202, _ACCEPTED)
            return Reply(400, content)
        entry = played.entry
        self.mcp_played += 1
        recorded_ids = entry.line.get("jsonrpc_ids")
        ids = id_map(
            recorded_ids if isinstance(recorded_ids, list) else [],
            live_ids,
            [m.message_type for m in key.messages],
        )
        session = None
        response = entry.line.get("response")
        given = response.get("mcp_session") if isinstance(response, dict) else None
        if isinstance(given, str):
            # The recorded answer named a session: the client's own if it has one,
            # else one handed out here (a fresh capability, never the recorded one).
            session = headers.get(SESSION_HEADER)
            if not session:
                session = secrets.token_hex(16)
                self._handed_out[session_key(session)] = given
        if stream is not None and view.mcp_session is not None:
            stream.ids.update(ids)
            then = tuple(
                rewrite_message(message, stream.ids)
                for message in self._sse_messages(server, view.mcp_session, entry.order)
            )
            self.server.mcp_plans[view.id] = McpPlan(ids, session, view.mcp_session, then)
        else:
            self.server.mcp_plans[view.id] = McpPlan(ids, session)
        return Forward(((ENTRY_HEADER, str(entry.index)), (MCP_PLAN_HEADER, view.id)))

    def _open_sse(self, server: str) -> Forward | Reply:
        """An HTTP+SSE stream: it stands for the server's next recorded
        HTTP+SSE session, with a fresh session id (never the recorded one)."""
        left = self._sse_left.get(server)
        if not left:
            return Reply(405, replay_error_body([], HTTP_SSE_NOT_REPLAYED, UNRECORDED))
        recorded = left.popleft()
        fresh = secrets.token_hex(16)
        key = session_key(fresh)
        self._handed_out[key] = recorded
        path = self._sse_post_path(server, recorded)
        stream = self.server.sse_streams[key] = SseStream(f"{path}?{SESSION_QUERY}={fresh}")
        for message in self._sse_messages(server, key, 0):
            stream.queue.put_nowait(message)
        return Forward(((MCP_SSE_HEADER, key),))

    def _sse_post_path(self, server: str, recorded: str) -> str:
        """Where a recorded HTTP+SSE session's POSTs went (its endpoint's path)."""
        for entry in self.player.recording.mcp.get(server, {}).get(
            mcp_session_id(server, recorded), ()
        ):
            if entry.path is not None and entry.method == "POST":
                return entry.path.partition("?")[0]
        return _SSE_POST_PATH

    def _sse_messages(self, server: str, live: str, order: int | None) -> list[bytes]:
        """The messages recorded on a replayed HTTP+SSE session's stream after
        its POST ``order`` (0: before any)."""
        recorded = self._handed_out.get(live)
        lines = self.player.recording.mcp_streams.get(server, {}).get(recorded or "", ())
        out = []
        for entry in lines:
            sha = entry.line.get("message")
            if entry.line.get("after") != order or not isinstance(sha, str):
                continue
            with contextlib.suppress(OSError):
                out.append(self.player.recording.blobs.path(sha).read_bytes())
        return out

    def _note(self, problems: Sequence[Problem]) -> None:
        for problem in problems:
            self.problems.append(problem)
            with contextlib.suppress(Exception):
                self.out.mkdir(parents=True, exist_ok=True)
                self.diff_file.append(orjson.dumps(problem.to_json()) + b"\n")
            if not self.quiet:
                print_lines(
                    f"modeltap replay: {problem.message}",
                    *(f"    {line}" for line in problem.content),  # only with --show-content
                    stderr=True,
                    flush=True,
                )

    def summary(self) -> str:
        """One line: how much of the recording was replayed and how much differed."""
        differing = sum(1 for p in self.problems if p.kind != "unplayed")
        unplayed = len(self.problems) - differing
        recorded = self.player.turns_recorded
        mcp = sum(p.turns_recorded for p in self.mcp_players.values())
        also = f" and {self.mcp_played} of {mcp} recorded MCP requests" if mcp else ""
        return (
            f"replayed {self.turns_played} of {recorded} recorded "
            f"turn{'' if recorded == 1 else 's'}{also}; "
            f"{differing} difference{'' if differing == 1 else 's'}, "
            f"{unplayed} not replayed"
        )


def _mcp_player(models: Player, server: str, sessions: dict[str, list[Entry]]) -> Player:
    """The player of one MCP server's recorded exchanges."""
    return Player(
        models.recording,
        show_content=models.show_content,
        sessions=sessions,
        scope=f" mcp server {server}",
        noun="request",
    )


def _json_or_none(body: bytes) -> object:
    """A request body parsed, to say where it differs; None when it is not JSON."""
    try:
        return orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return None


def _reply(view: ExchangeView, status: int, message: str, code: str) -> Reply:
    """The provider-shaped error a replayed request gets instead of an answer."""
    text = message if message.startswith("modeltap") else f"modeltap replay: {message}"
    return answers.error(status, text, code, view.api, view.route)
