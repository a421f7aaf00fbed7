"""The WebSocket addon: mitmproxy's WebSocket hooks, turned into calls on the
connection core (:class:`~modeltap.core.ws_connection.Connection`).

A connection opens from the frozen view the HTTP addon leaves on a forwarded
handshake (``flow.metadata[VIEW_KEY]``). Each client message is audited,
logged as a control message, or dropped and answered with an error event in
the client's own shape; server messages are observed. It owns the WebSocket
options and installs the bound on message sizes (:mod:`modeltap.addons.patches.ws_limit`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Final

from mitmproxy import http
from mitmproxy.websocket import WebSocketMessage

from modeltap.addons.base import Addon
from modeltap.addons.deadlines import Deadlines
from modeltap.addons.http import VIEW_KEY
from modeltap.addons.patches import ws_limit
from modeltap.apis.websocket_mode import WsPolicy
from modeltap.core.notices import ExchangeView
from modeltap.core.run import Run
from modeltap.core.ws_connection import Connection

#: ``flow.metadata`` key of this addon's own :class:`Connection`.
_CONNECTION: Final = "modeltap_connection"


class WebSocket(Addon):
    """Audit each ``response.create`` of a WebSocket Responses connection."""

    #: Its name among mitmproxy's addons (``master.addons.get``).
    name = "modeltap_websocket"

    OPTIONS = ("continuation", "ws_allow")

    def __init__(self, run: Run, deadlines: Deadlines) -> None:
        super().__init__(run)
        self.deadlines = deadlines
        self.master: Any = None

    def load(self, loader: Any) -> None:
        super().load(loader)
        self.master = loader.master  # to inject a refusal into the connection

    def configure(self, updated: set[str]) -> None:
        opts = self.options
        self.check(updated)
        if {"modeltap_continuation", "modeltap_ws_allow"} & updated:
            policy = WsPolicy(
                continuation=opts.modeltap_continuation,
                allow=frozenset({"response.processed", *opts.modeltap_ws_allow}),
            )
            self.run.settings = replace(self.run.settings, ws_policy=policy)
        # WebSocket messages are bounded by --max-body as their frames arrive,
        # after permessage-deflate inflation (see ws_limit).
        ws_limit.install()

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        view: ExchangeView | None = flow.metadata.get(VIEW_KEY)
        if view is not None:
            conn = Connection.open(self.run, view, time.perf_counter_ns())
            if conn is not None:
                flow.metadata[_CONNECTION] = conn

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        assert flow.websocket is not None
        message = flow.websocket.messages[-1]
        # mitmproxy keeps every message of a flow; we keep none of the past ones,
        # so a long session's memory stays flat.
        del flow.websocket.messages[:-1]
        conn: Connection | None = flow.metadata.get(_CONNECTION)
        if conn is None or message.injected:
            return
        if self.run.stopped:
            if message.from_client:
                message.drop()  # the files are final: nothing more goes out unaudited
            return
        now = time.perf_counter_ns()
        if message.from_client:
            self._client_message(flow, conn, message, now)
        else:
            conn.server_message(message.content, message.is_text, now)
        self._watch(flow, conn)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        conn: Connection | None = flow.metadata.pop(_CONNECTION, None)
        if conn is None:
            return
        ws = flow.websocket
        assert ws is not None
        conn.close(
            ws.close_code,
            ws.close_reason or None,
            None if ws.closed_by_client is None else "client" if ws.closed_by_client else "server",
            too_big_from_client=flow.metadata.get(ws_limit.TOO_BIG_KEY) == "client",
            expired=self.deadlines.stop(flow),
            now=time.perf_counter_ns(),
        )

    def _client_message(
        self, flow: http.HTTPFlow, conn: Connection, message: WebSocketMessage, now: int
    ) -> None:
        """Forward the message as judged (rewritten, maybe), or drop it and tell
        the client in its own event shape; the connection stays usable."""
        verdict = conn.client_message(message.content, message.is_text, now)
        if verdict.refusal is not None:
            message.drop()
            self.master.commands.call("inject.websocket", flow, True, verdict.refusal, True)
        elif verdict.content is not message.content:
            message.content = verdict.content

    def _watch(self, flow: http.HTTPFlow, conn: Connection) -> None:
        """Watch the phase the connection's turns in flight are in (or none)."""
        want = conn.watch()
        if want == conn.watching:
            return
        conn.watching = want
        if want is None:
            self.deadlines.stop(flow)
        else:
            self.deadlines.watch(flow, want)
