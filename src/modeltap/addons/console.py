"""The console addon: one line per exchange on stderr (SPEC section 1), like
mitmproxy's ``dumper``, unless ``--quiet``.

It listens to the run's ``finished`` notices, so it prints what the core
decided and wrote, whichever addon drove the exchange::

    14:02:11 s1 openai.chat_completions gpt-5 200 in=21 out=5 312ms
    14:02:12 s1 - - 200 - - unaudited GET /v1/models
    14:02:13 s1 openai.responses - 400 - - refused: missing_model
"""

from __future__ import annotations

import sys
import time

from modeltap.addons.base import Addon
from modeltap.notices import Listener, Outcome
from modeltap.records import Usage


class Console(Addon, Listener):
    """Print one line per exchange (and per WebSocket turn)."""

    #: Its name among mitmproxy's addons (``master.addons.get``).
    name = "modeltap_console"

    OPTIONS = ("quiet",)

    def configure(self, updated: set[str]) -> None:
        if "modeltap_quiet" in updated:
            if self.options.modeltap_quiet:
                self.run.unsubscribe(self)
            else:
                self.run.subscribe(self)

    def finished(self, outcome: Outcome) -> None:
        for line in lines(outcome):
            print(line, file=sys.stderr, flush=True)


def lines(outcome: Outcome, clock: str | None = None) -> list[str]:
    """The stderr lines for an outcome (two for a pass-through that then broke).

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
        return f"{text} {note}" if note else text

    error = outcome.error
    if outcome.rejected is not None:
        return [
            line(None, outcome.rejected.status, None, None, f"refused: {outcome.rejected.rule}")
        ]
    if outcome.response is not None:
        response = outcome.response
        model = response.model or (view.record.model if view.record else None)
        note = f"error: {error.error}" if error is not None else ""
        return [line(model, outcome.status, response.usage, response.duration_ms, note)]
    out = []
    if outcome.unaudited is not None:
        event = outcome.unaudited
        out.append(line(None, event.status, None, None, f"unaudited {event.method} {event.path}"))
    if error is not None:
        out.append(line(None, None, None, None, f"error: {error.error}"))
    return out


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)
