"""The evidence addon: the run's files and sessions.

It owns ``--out`` (the :class:`~modeltap.evidence.sink.Sink`), ``--session``,
``--fail-closed`` and ``--max-tool-calls``, and ends the run: at ``done``
every exchange still in flight ends (``proxy_stopped``), then every session
gets its ``sessions.jsonl`` line, then the listeners hear ``stopped`` and the
files are closed (:meth:`modeltap.core.run.Run.stop`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from mitmproxy import exceptions

from modeltap.addons.base import Addon
from modeltap.app.options import tool_budget
from modeltap.evidence.sink import Sink
from modeltap.rules.errors import SinkError


class Evidence(Addon):
    """Write the run's lines into ``--out``; end every session at the end."""

    #: Its name among mitmproxy's addons (``master.addons.get``).
    name = "modeltap_evidence"

    OPTIONS = ("out", "session", "fail_closed", "max_tool_calls")

    def configure(self, updated: set[str]) -> None:
        opts, run = self.options, self.run
        if {"modeltap_session", "modeltap_fail_closed"} & updated:
            session, fail_closed = opts.modeltap_session, opts.modeltap_fail_closed
            run.settings = replace(run.settings, session=session, fail_closed=fail_closed)
        if "modeltap_max_tool_calls" in updated:
            try:
                budget = tool_budget(opts.modeltap_max_tool_calls)
            except ValueError as e:
                raise exceptions.OptionsError(f"modeltap_max_tool_calls: {e}") from None
            run.sessions.max_tool_calls = budget
        if "modeltap_out" in updated:
            sink = Sink(Path(opts.modeltap_out))
            try:
                sink.prepare()
            except SinkError as e:
                raise exceptions.OptionsError(str(e)) from None
            run.use_sink(sink)
        if "modeltap_session" in updated and opts.modeltap_session:
            # SPEC 6: a session named at start is reported at stop even if no request
            # ever came (the agent bypassed the proxy): "audit unsupported".
            run.session(opts.modeltap_session)

    def done(self) -> None:
        self.run.stop(time.perf_counter_ns())
