"""The control addon: serves the control API (:mod:`modeltap.app.control`) on its
own listener, for the harness only (``modeltap session end ID --out DIR``).

The listener is bound in ``configure`` (a port in use fails at start-up),
served once mitmproxy runs, and its address and token are written to the out
dir; at ``done`` it stops and the file goes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from mitmproxy import exceptions

from modeltap.addons.base import Addon
from modeltap.app import control
from modeltap.app.options import parse_address
from modeltap.core.run import Run
from modeltap.rules.listening import listen_failure

logger = logging.getLogger(__name__)


class Control(Addon):
    """The harness's control API, apart from the proxied traffic."""

    #: Its name among mitmproxy's addons (``master.addons.get``).
    name = "modeltap_control"

    OPTIONS = ("control",)

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.server: control.ControlServer | None = None
        self.file: Path | None = None
        self._sock: Any = None
        #: ``http://host:port`` of the listener (None before it is bound).
        self.url: str | None = None

    def configure(self, updated: set[str]) -> None:
        if "modeltap_control" in updated and self.server is None:
            self._bind(self.options.modeltap_control)

    async def running(self) -> None:
        sink = self.run.sink
        if self._sock is None or sink is None or self.run.stopped:
            return
        server = control.ControlServer(self.run, control.new_token(), self._sock)
        await server.start()
        self.server = server
        try:
            self.file = control.write_control_file(
                sink.out_dir, self.run.run_id, server.url, server.token
            )
        except OSError as e:
            # A warning, not an error: the out dir was writable a moment ago (the
            # evidence addon checked it at start), so this is a full disk or the like,
            # which model requests meet with 503 until it is mended.
            logger.warning(
                "modeltap: cannot write the control file in the out dir (%s); "
                "modeltap session end will not find this proxy",
                os.strerror(e.errno or 0),
            )

    def done(self) -> None:
        if self.server is not None:
            self.server.close()
        elif self._sock is not None:
            self._sock.close()
        if self.file is not None:
            self.file.unlink(missing_ok=True)
            self.file = None

    def _bind(self, address: str) -> None:
        try:
            host, port = parse_address(address)
        except ValueError as e:
            raise exceptions.OptionsError(f"modeltap_control: {e}") from None
        try:
            sock = control.bind(host, port)
        except OSError as e:
            failure = listen_failure("the control API", host, port, e)
            raise exceptions.OptionsError(failure) from None
        if self._sock is not None:
            self._sock.close()
        self._sock = sock
        self.run.control_address = sock.getsockname()[:2]
        self.url = control.url_of(sock)
