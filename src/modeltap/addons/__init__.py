"""modeltap's mitmproxy addons: small classes over the pure core.

Each addon owns its options (declared from :mod:`modeltap.app.options`) and keeps
its hooks short; the decisions and the lines are the core's
(:mod:`modeltap.core.run`, :mod:`modeltap.core.exchange`, :mod:`modeltap.core.ws_connection`).
They share one :class:`~modeltap.core.run.Run`, handed to each on construction:

- :class:`~modeltap.addons.evidence.Evidence`: ``--out`` and the sessions; ends the run.
- :class:`~modeltap.addons.deadlines.Deadlines`: the timeouts, watched by the next two.
- :class:`~modeltap.addons.http.Http`: HTTP hooks -> :class:`~modeltap.core.exchange.Exchange`.
- :class:`~modeltap.addons.websocket.WebSocket`: WebSocket hooks -> a
  :class:`~modeltap.core.ws_connection.Connection`.
- :class:`~modeltap.addons.control.Control`: the harness's control API listener.
- :class:`~modeltap.addons.console.Console`: one stderr line per exchange (a listener).
- :class:`~modeltap.addons.spans.Spans`: OpenTelemetry spans (a listener).
- :class:`~modeltap.addons.recorder.Recorder`: ``--record DIR`` (a listener).
- :class:`~modeltap.addons.upstream_tls.UpstreamTls`: ``--upstream-ca``, ``--upstream-insecure``.

The replayer (:class:`~modeltap.addons.replayer.Replayer`) is added by
``modeltap replay``; :class:`ModelTap` loads them into mitmproxy as one.
Listeners hear the run's notices (:class:`~modeltap.core.notices.Listener`), never
another addon's state, so the order of this list is not a contract.
"""

from __future__ import annotations

from modeltap.addons.console import Console
from modeltap.addons.control import Control
from modeltap.addons.deadlines import Deadlines
from modeltap.addons.evidence import Evidence
from modeltap.addons.http import Http
from modeltap.addons.recorder import Recorder
from modeltap.addons.spans import Spans
from modeltap.addons.upstream_tls import UpstreamTls
from modeltap.addons.websocket import WebSocket
from modeltap.core.run import Run


class ModelTap:
    """Every modeltap addon, loaded into mitmproxy as one.

    mitmproxy calls each top-level addon once per event, each call a coroutine
    behind an error guard (the dispatch that made trimming mitmproxy's own
    addon set worth a third of the proxy's CPU, see ``bench/README.md``), and
    walks an addon's ``addons`` cheaply. As sub-addons of one, the small addons
    cost what one addon did. ``mitmdump -s addons/modeltap.py`` loads them the
    same way: a script's ``addons`` are its sub-addons.
    """

    name = "modeltap"

    def __init__(self, addons: list[object]) -> None:
        self.addons = addons


def default_addons(run: Run | None = None) -> list[object]:
    """Every addon of a modeltap proxy, sharing ``run`` (a new one by default)."""
    run = run or Run()
    deadlines = Deadlines()
    return [
        Evidence(run),
        deadlines,
        Http(run, deadlines),
        WebSocket(run, deadlines),
        Control(run),
        Console(run),
        Spans(run),
        Recorder(run),
        UpstreamTls(run),
    ]


__all__ = [
    "Console",
    "Control",
    "Deadlines",
    "Evidence",
    "Http",
    "ModelTap",
    "Recorder",
    "Spans",
    "UpstreamTls",
    "WebSocket",
    "default_addons",
]
