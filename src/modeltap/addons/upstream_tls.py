"""The upstream TLS addon: ``--upstream-ca FILE`` and ``--upstream-insecure``.

``--upstream-ca`` is checked at start (:func:`modeltap.app.upstream_tls.read_ca_file`)
and added to the roots mitmproxy verifies upstreams with: a bundle of the
public roots and the file, written to a private temporary file that
mitmproxy's ``ssl_verify_upstream_trusted_ca`` points at, removed at ``done``.
``--upstream-insecure`` is mitmproxy's own ``ssl_insecure``; the run keeps it
so that every ``sessions.jsonl`` line says so. Both apply in reverse and
regular mode alike: mitmproxy verifies every upstream with these settings.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import replace
from pathlib import Path

import certifi
from mitmproxy import exceptions

from modeltap.addons.base import Addon
from modeltap.app.upstream_tls import read_ca_file, trust_bundle
from modeltap.core.run import Run


class UpstreamTls(Addon):
    """Trust a private CA for upstream TLS, or say loudly that nothing is verified."""

    #: Its name among mitmproxy's addons (``master.addons.get``).
    name = "modeltap_upstream_tls"

    OPTIONS = ("upstream_ca", "upstream_insecure")

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        #: The bundle written for mitmproxy (None: none).
        self.bundle: Path | None = None

    def configure(self, updated: set[str]) -> None:
        opts = self.options
        if "ssl_insecure" in updated:
            insecure = bool(opts.ssl_insecure)
            self.run.settings = replace(self.run.settings, upstream_insecure=insecure)
        if "modeltap_upstream_ca" in updated:
            self._trust(opts.modeltap_upstream_ca)
        if {"ssl_insecure", "modeltap_upstream_ca"} & updated and (
            opts.ssl_insecure and opts.modeltap_upstream_ca
        ):
            raise exceptions.OptionsError(
                "--upstream-ca and --upstream-insecure contradict each other: the first "
                "verifies upstreams against a CA, the second verifies nothing; keep one"
            )

    def done(self) -> None:
        self._remove()

    def _trust(self, path: str | None) -> None:
        previous = self.bundle
        if not path:
            ours = previous is not None
            if ours and self.options.ssl_verify_upstream_trusted_ca == str(previous):
                self.options.update(ssl_verify_upstream_trusted_ca=None)
            self._remove()
            return
        try:
            extra = read_ca_file(path)
        except ValueError as e:
            raise exceptions.OptionsError(str(e)) from None
        # The roots in force so far: what mitmproxy was told (mitmdump users may set
        # ssl_verify_upstream_trusted_ca), else the public ones it uses by default.
        current = self.options.ssl_verify_upstream_trusted_ca
        base = current if current and current != str(previous) else certifi.where()
        fd, name = tempfile.mkstemp(prefix="modeltap-upstream-ca-", suffix=".pem")
        with os.fdopen(fd, "wb") as out:
            out.write(trust_bundle(Path(base).read_bytes(), extra))
        self._remove()
        self.bundle = Path(name)
        self.options.update(ssl_verify_upstream_trusted_ca=name)

    def _remove(self) -> None:
        if self.bundle is not None:
            with contextlib.suppress(OSError):
                self.bundle.unlink()
            self.bundle = None
