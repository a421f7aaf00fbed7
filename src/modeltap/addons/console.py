"""The console addon: one line per exchange on stderr (SPEC section 1), like
mitmproxy's ``dumper``, unless ``--quiet``.

It listens to the run's ``finished`` notices, so it prints what the core
decided and wrote, whichever addon drove the exchange::

    14:02:11 s1 openai.chat_completions gpt-5 200 in=21 out=5 312ms
    14:02:12 s1 - - 200 - - unaudited GET /v1/models
    14:02:13 s1 openai.responses - 400 - - refused: missing_model
    14:02:14 s1 openai.chat_completions gpt-5 - - 3ms upstream unreachable
    14:02:15 s1 openai.chat_completions gpt-5 200 in=? out=? 95ms stream cut
    14:02:16 s1 openai.responses gpt-5 - - 540000ms timeout: first byte
    14:02:17 s1 mcp files 200 - 12ms tools/call add
    14:02:18 s1 mcp files 200 - 60034ms GET stream, 3 messages

A failed exchange says what happened (:func:`~modeltap.rules.failures.describe_failure`),
HTTP and WebSocket turns alike; tokens read ``-`` when no answer came at all.
"""

from __future__ import annotations

import time

from modeltap.addons.base import Addon
from modeltap.core.notices import Listener, Outcome
from modeltap.evidence.records import Usage
from modeltap.report.terminal import print_lines, printable
from modeltap.rules.failures import describe_failure


class Console(Addon, Listener):
    """Print one line per exchange (and per WebSocket turn)."""

    #: Its name among mitmproxy's addons (``master.addons.get``).
    name = "modeltap_console"

    OPTIONS = ("quiet",)

    def configure(self, updated: set[str]) -> None:
        if "modeltap_quiet" in updated:
            if self.options.modeltap_quiet:
                self.run.listeners.unsubscribe(self)
            else:
                self.run.listeners.subscribe(self)

    def finished(self, outcome: Outcome) -> None:
        print_lines(*lines(outcome), stderr=True, flush=True)


def lines(outcome: Outcome, clock: str | None = None) -> list[str]:
    """The stderr line for an outcome (none for an outcome that says nothing).

    Args:
        outcome: how the exchange ended.
        clock: the time shown (default: now, ``HH:MM:SS``).
    """
    view = outcome.view
    now = clock or time.strftime("%H:%M:%S")

    def line(
        model: str | None, status: int | None, usage: Usage | None, ms: float | None, note: str
    ) -> str:
        tokens = (
            "-" if usage is None else f"in={_n(usage.input_tokens)} out={_n(usage.output_tokens)}"
        )
        dur = f"{ms:.0f}ms" if ms is not None else "-"
        text = (
            f"{now} {view.session_id} {view.api or '-'} {model or '-'} "
            f"{status if status is not None else '-'} {tokens} {dur}"
        )
        # Session, model and path come from the wire: no escape sequence reaches the terminal.
        return printable(f"{text} {note}" if note else text)

    error = outcome.error
    if outcome.mcp is not None and outcome.rejected is None:
        mcp = outcome.mcp
        kind = error.error if error is not None else outcome.failure
        note = (
            describe_failure(kind, outcome.expired, answered=bool(outcome.status)) if kind else ""
        )
        return [line(mcp.server, outcome.status, None, mcp.duration_ms, _mcp_note(outcome, note))]
    if outcome.rejected is not None:
        return [
            line(None, outcome.rejected.status, None, None, f"refused: {outcome.rejected.rule}")
        ]
    if outcome.response is not None:
        response = outcome.response
        model = response.model or (view.record.model if view.record else None)
        if error is None:
            return [line(model, outcome.status, response.usage, response.duration_ms, "")]
        # An answer had started when it has a status (HTTP) or a first event (WebSocket).
        answered = outcome.status is not None or response.ttfb_ms is not None
        note = describe_failure(error.error, outcome.expired, answered=answered)
        usage = response.usage if answered else None
        return [line(model, outcome.status, usage, response.duration_ms, note)]
    notes = []
    if outcome.unaudited is not None:
        notes.append(f"unaudited {outcome.unaudited.method} {outcome.unaudited.path}")
    if error is not None:
        notes.append(describe_failure(error.error, outcome.expired, answered=bool(outcome.status)))
    if not notes:
        return []
    status = outcome.unaudited.status if outcome.unaudited is not None else outcome.status
    return [line(None, status, None, None, ": ".join(notes))]


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)


def _mcp_note(outcome: Outcome, failure: str) -> str:
    """What an MCP exchange carried: its messages (method and tool; an answer to
    a server's request says so), or its stream."""
    assert outcome.mcp is not None
    mcp = outcome.mcp
    if mcp.records:
        said = [
            " ".join(p for p in (r.mcp_method, r.tool_name) if p)
            if r.message_type in ("request", "notification")
            else f"{r.message_type} to {r.mcp_method or '?'}"
            for r in mcp.records
        ]
        note = ", ".join(said[:3]) + (f" (+{len(said) - 3})" if len(said) > 3 else "")
    else:
        method = outcome.view.method or "-"
        note = (
            f"{method} stream, {mcp.messages_from_server} messages" if method == "GET" else method
        )
    return f"{note}: {failure}" if failure else note
