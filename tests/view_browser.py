"""Debian's Chromium, driven by Playwright, for the page's tests.

Why Playwright (the ``playwright`` package from PyPI) and not Selenium: it
reports console messages, uncaught errors and every network request as events
(so a test can fail on any of them, and prove the page asks for nothing),
waits for selectors without sleeps, and runs JavaScript in the page to read
the DOM; and it drives the browser over the DevTools protocol, so no
version-matched driver binary is needed. It never downloads a browser here:
it launches ``/usr/bin/chromium`` from Debian's ``chromium`` package, which
``.ci/run`` installs (``playwright install`` is never run).

Each launch gets a fresh, empty profile (Playwright creates a new temporary
``--user-data-dir`` per launch and removes it at close). The flags keep
Chromium off the network it would otherwise reach for by itself (component
updates, sync, field trials), so the only requests are the page's own.

When the browser is missing, browser tests are skipped, unless
``MODELTAP_REQUIRE_BROWSER=1`` (``.ci/run`` sets it): then they fail, so CI
cannot pass without having looked at the page.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("MODELTAP_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Where screenshots go (CI keeps the folder as an artifact).
ARTIFACTS = Path(os.environ.get("MODELTAP_TEST_ARTIFACTS", "test-artifacts")) / "view"


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does it)"
    return None


def require_browser() -> None:
    """Skip (or, under MODELTAP_REQUIRE_BROWSER=1, fail) when the browser is missing."""
    reason = browser_missing()
    if reason is None:
        return
    if os.environ.get("MODELTAP_REQUIRE_BROWSER") == "1":
        pytest.fail(f"MODELTAP_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


class PageWatch:
    """What a page did that a test must see: console errors, uncaught errors, requests."""

    def __init__(self, page: Any, allowed_origin: str | None = None) -> None:
        self.page = page
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        page.on("request", self._request)
        page.on("dialog", self._dialog)
        self.allowed_origin = allowed_origin

    def _console(self, message: Any) -> None:
        if message.type in ("error", "warning"):
            self.errors.append(f"console {message.type}: {message.text}")

    def _request(self, request: Any) -> None:
        url = request.url
        if url.startswith(("file:", "data:", "about:")):
            return
        if self.allowed_origin is not None and url.startswith(self.allowed_origin):
            return
        self.requests.append(url)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def assert_clean(self) -> None:
        assert self.errors == [], self.errors
        assert self.requests == [], f"the page reached for the network: {self.requests}"
        assert self.dialogs == [], f"the page opened dialogs: {self.dialogs}"
        assert self.page.evaluate("() => window.__pwned === undefined"), "injected script ran"


def screenshot(page: Any, name: str) -> Path:
    """Save a screenshot of the page under :data:`ARTIFACTS`."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path
