"""The glue behind ``--upstream-timeout`` and ``--client-timeout``: an addon
that owns both options and the timers, watched by the HTTP and WebSocket
addons through :meth:`Deadlines.watch` and :meth:`Deadlines.stop`.

One timer per live exchange. :func:`modeltap.rules.failures.check_deadline`
decides; this module measures and acts, through the two handles mitmproxy's
connection handler offers for exactly this:

- progress: ``timeout_watchdog.last_activity``, when bytes last arrived on
  the client's connection (its own or its upstream's), the clock mitmproxy's
  ``tcp_timeout`` uses;
- ending: ``close_connection``, what mitmproxy's own ``CloseConnection``
  command runs. Closing the stalled side lets mitmproxy finish the exchange
  its usual way (the client gets its error answer, the ``error`` hook runs),
  and modeltap names the failure from the phase recorded here.

Closing is per connection: an HTTP/2 connection multiplexes exchanges, so
when one of them overruns a limit the others on the same client or upstream
connection end with it (as ``client_gone`` / ``upstream_reset``). An HTTP/2
client also gets mitmproxy's own 502 page rather than modeltap's 504 (its
error page is built by a different function). Agents speak HTTP/1.1 to a
reverse proxy; HTTP/2 arrives only through TLS in regular mode.

A phase change only sets a new timer when its first possible deadline is
sooner than the one already set (the later look re-checks), and progress
moves the next look, not the timer: a typical exchange costs two ``call_at``
and a busy stream nothing per chunk.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import Any, Literal

from mitmproxy import connection, exceptions, http

from modeltap.app import options
from modeltap.rules.failures import (
    Expired,
    Phase,
    Timeouts,
    check_deadline,
    parse_seconds,
    parse_upstream_timeout,
)

DEADLINE_KEY = "modeltap_deadline"

Watch = Literal["request", "waiting", "response"]


@dataclass(slots=True)
class Deadline:
    """The timer of one exchange: which phase it watches, since when, and what expired."""

    watch: Watch
    since: float
    handle: asyncio.TimerHandle | None = None
    #: When ``handle`` fires (``time.time()`` clock).
    when: float = 0.0
    expired: Phase | None = None


def upstream_ready(server: connection.Server) -> bool:
    """True if the connection is open and, if it wants TLS, TLS is set up."""
    return server.connected and (not server.tls or server.tls_established)


class Deadlines:
    """Start, move and stop the timers of live exchanges."""

    #: Its name among mitmproxy's addons (``master.addons.get``).
    name = "modeltap_deadlines"

    OPTIONS = ("upstream_timeout", "client_timeout")

    def __init__(self) -> None:
        self.master: Any = None
        self.timeouts = Timeouts()
        self._proxyserver: Any = None

    def load(self, loader: Any) -> None:
        self.master = loader.master
        options.declare(loader, self.OPTIONS)

    def configure(self, updated: set[str]) -> None:
        if not {"modeltap_upstream_timeout", "modeltap_client_timeout", "tcp_timeout"} & updated:
            return
        opts = self.master.options
        try:
            timeouts = parse_upstream_timeout(opts.modeltap_upstream_timeout)
            request = parse_seconds(opts.modeltap_client_timeout, "client")
        except ValueError as e:
            raise exceptions.OptionsError(str(e)) from None
        timeouts = replace(timeouts, request=request)
        if opts.tcp_timeout <= timeouts.longest:
            # mitmproxy's inactivity watchdog would close the client's connection
            # first, and the failure would read as the client's.
            raise exceptions.OptionsError(
                f"tcp_timeout ({opts.tcp_timeout} s) must be longer than the longest modeltap "
                f"timeout ({timeouts.longest:g} s); set tcp_timeout={timeouts.watchdog}"
            )
        self.timeouts = timeouts

    def watch(self, flow: http.HTTPFlow, watch: Watch) -> None:
        """Start watching ``flow`` in a new phase (replacing the previous one)."""
        now = time.time()
        first = now + self.timeouts.earliest(watch)
        dl: Deadline | None = flow.metadata.get(DEADLINE_KEY)
        if dl is None:
            dl = flow.metadata[DEADLINE_KEY] = Deadline(watch, now)
        elif dl.expired is not None:
            return  # already being ended
        else:
            dl.watch, dl.since = watch, now
            if dl.handle is not None:
                if dl.when <= first:
                    return  # the timer set fires first and looks at the new phase then
                dl.handle.cancel()
        self._arm(flow, dl, first, now)

    def _arm(self, flow: http.HTTPFlow, dl: Deadline, when: float, now: float) -> None:
        loop = asyncio.get_running_loop()
        dl.handle = loop.call_at(loop.time() + (when - now), self._check, flow, dl)
        dl.when = when

    def stop(self, flow: http.HTTPFlow) -> Phase | None:
        """Stop watching ``flow``.

        Returns:
            The phase whose limit modeltap enforced on it, if one did.
        """
        dl: Deadline | None = flow.metadata.get(DEADLINE_KEY)
        if dl is None:
            return None
        if dl.handle is not None:
            dl.handle.cancel()
            dl.handle = None
        return dl.expired

    def _check(self, flow: http.HTTPFlow, dl: Deadline) -> None:
        dl.handle = None
        handler = self._handler(flow)
        if handler is None or not flow.live:
            return  # the connection is gone; mitmproxy ends the flow itself
        now = time.time()
        verdict = check_deadline(
            self.timeouts,
            dl.watch,
            now=now,
            since=dl.since,
            last_progress=handler.timeout_watchdog.last_activity,
            connected=upstream_ready(flow.server_conn),
        )
        if isinstance(verdict, Expired):
            dl.expired = verdict.phase
            self._end(flow, handler, verdict.phase)
            return
        self._arm(flow, dl, verdict.when, now)

    def _handler(self, flow: http.HTTPFlow) -> Any:
        """mitmproxy's handler of the flow's client connection, if it is still live."""
        if self._proxyserver is None:
            self._proxyserver = self.master.addons.get("proxyserver")
            if self._proxyserver is None:
                return None
        return self._proxyserver.connections.get(flow.client_conn.id)

    @staticmethod
    def _end(flow: http.HTTPFlow, handler: Any, phase: Phase) -> None:
        """Close the side that stalled; mitmproxy then ends the exchange."""
        stalled: list[connection.Connection]
        if phase == "request":
            stalled = [flow.client_conn]
        elif phase == "connect":
            # The connection being set up is not the flow's yet: it is whichever
            # of this client's upstream connections is not ready.
            stalled = [
                c
                for c in handler.transports
                if isinstance(c, connection.Server) and not upstream_ready(c)
            ]
        else:
            stalled = [flow.server_conn]
        for conn in stalled:
            if conn in handler.transports and handler.transports[conn].handler is not None:
                handler.close_connection(conn)
