"""The replayer addon: ``modeltap replay DIR`` answers an agent from a recording.

It listens to the run. Each request about to go upstream is matched with the
next recorded turn of its session (:class:`~modeltap.replay.matching.Player`): a
match is forwarded to the replay upstream (:mod:`modeltap.replay.upstream`)
tagged with the recorded exchange to serve; a mismatch or an exhausted
recording is answered right there with a provider-shaped error, and noted in
``OUT/replay-diff.jsonl`` and on stderr. A WebSocket turn's decision is
queued for the replay upstream, which answers each ``response.create`` it
receives in order.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import orjson

from modeltap.core import answers
from modeltap.core.notices import ExchangeView, Forward, Listener, Reply
from modeltap.core.run import Run
from modeltap.evidence.records import WsCloseEvent
from modeltap.evidence.redaction import redact_path
from modeltap.evidence.sink import JsonlFile
from modeltap.replay.matching import MISMATCH, UNRECORDED, Player, Problem
from modeltap.replay.recording import DIFF_FILE, TurnKey
from modeltap.replay.upstream import CONNECTION_HEADER, ENTRY_HEADER, ReplayServer
from modeltap.report.terminal import print_lines


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
        # The recording answers, not a provider: a SigV4-signed request (boto3 with
        # IAM keys, recorded in regular mode) is served like any other.
        run.settings = replace(run.settings, upstreams_check_signatures=False)
        run.listeners.subscribe(self)

    async def running(self) -> None:
        await self.server.start()

    # ------------------------------------------------------------------ notices

    def forwarding(
        self, view: ExchangeView, body: bytes, headers: Mapping[str, str]
    ) -> Forward | Reply | None:
        if view.parent is not None:
            self._play_turn(view, body)
            return None
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

    def closed(self, view: ExchangeView, event: WsCloseEvent, t_ns: int) -> None:
        self.server.connections.pop(view.id, None)

    def stopped(self) -> None:
        self.server.close()
        self._note(self.player.unplayed())
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
        return (
            f"replayed {self.turns_played} of {recorded} recorded "
            f"turn{'' if recorded == 1 else 's'}; "
            f"{differing} difference{'' if differing == 1 else 's'}, "
            f"{unplayed} not replayed"
        )


def _reply(view: ExchangeView, status: int, message: str, code: str) -> Reply:
    """The provider-shaped error a replayed request gets instead of an answer."""
    text = message if message.startswith("modeltap") else f"modeltap replay: {message}"
    return answers.error(status, text, code, view.api, view.route)
