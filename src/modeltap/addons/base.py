"""What every modeltap addon shares: the run it works for, and its own rows
of the options table (:mod:`modeltap.app.options`)."""

from __future__ import annotations

from typing import Any

from mitmproxy import exceptions

from modeltap.app import options
from modeltap.core.run import Run


class Addon:
    """A modeltap addon: it declares its options in ``load`` and checks them
    in ``configure`` (:meth:`check`)."""

    #: The options it owns: names of rows of :data:`modeltap.app.options.OPTIONS`.
    OPTIONS: tuple[str, ...] = ()

    def __init__(self, run: Run) -> None:
        self.run = run
        self.options: Any = None

    def load(self, loader: Any) -> None:
        # Our master's options, not the process-global ``ctx``: tests and
        # benchmarks may run more than one proxy in one process.
        self.options = loader.master.options
        options.declare(loader, self.OPTIONS)

    def check(self, updated: set[str]) -> None:
        """Refuse a value outside its option's choices (mitmproxy enforces
        ``choices`` only on its own command line).

        Raises:
            OptionsError: naming the option and its choices.
        """
        try:
            options.check(self.options, self.OPTIONS, updated)
        except ValueError as e:
            raise exceptions.OptionsError(str(e)) from None
