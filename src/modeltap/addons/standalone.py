"""The addons as ``mitmdump -s addons/modeltap.py`` loads them: a set-up
modeltap refuses ends the process at once, in one line.

Under ``modeltap run`` (and the pytest plugin) a refused option is an
exception the command says in one line. Loaded as a script, mitmproxy logs
it with a traceback, brings its listeners up all the same (it loads scripts
after its own start-up check) and only then exits, saying "Error logged
during startup": a proxy announced as listening that is not. So before the
proxy runs, a refusal is printed as one line that says what to set, and the
process exits with status 2 before any listener starts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from mitmproxy import exceptions

from modeltap.addons import default_addons
from modeltap.report.terminal import print_lines

#: The exit status of a set-up modeltap refuses (as ``modeltap run``'s usage errors).
REFUSED_EXIT: int = 2


def standalone_addons() -> list[object]:
    """:func:`~modeltap.addons.default_addons`, each one's ``configure``
    ending the process on a refused option until the proxy runs."""
    addons = default_addons()
    started: list[bool] = []
    for addon in addons:
        configure = getattr(addon, "configure", None)
        if configure is not None:
            addon.configure = _fail_fast(configure, started)  # type: ignore[attr-defined]
        running = getattr(addon, "running", None)
        addon.running = _mark_running(running, started)  # type: ignore[attr-defined]
    return addons


def _fail_fast(configure: Callable[[set[str]], Any], started: list[bool]) -> Callable[..., Any]:
    @functools.wraps(configure)
    def checked(updated: set[str]) -> Any:
        try:
            return configure(updated)
        except exceptions.OptionsError as e:
            if started:
                raise  # a later --set on a running proxy: mitmproxy refuses the change
            print_lines(f"modeltap: {e}", stderr=True, flush=True)
            raise SystemExit(REFUSED_EXIT) from None

    return checked


def _mark_running(running: Callable[[], Any] | None, started: list[bool]) -> Callable[[], Any]:
    def mark() -> Any:
        started.append(True)
        return running() if running is not None else None

    return mark
