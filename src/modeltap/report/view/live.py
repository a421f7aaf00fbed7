"""``modeltap run --ui``: the same page, served live on the control listener.

The page is served by the control API's own listener (127.0.0.1, never the
proxied port, which the agent talks to), next to ``POST /sessions/ID/end``:

``GET /ui?code=CODE``
    A one-time link, printed at start: the code is spent, the browser gets an
    ``HttpOnly; SameSite=Strict`` cookie for ``/ui`` and is sent on to ``/ui``
    (so the code leaves the address bar and the history).
``GET /ui``
    The page with the capture as it is now, which then asks ``/ui/data``
    every second for what changed (``ETag`` / ``If-None-Match``: an
    unchanged capture costs three ``stat`` calls and a 304).
``GET /ui/data``
    The page data (:func:`~modeltap.report.view.data.build_view_data`), built from
    the files through :class:`~modeltap.evidence.capture.Capture` in a worker thread,
    never on the proxy's event loop, and built once per change of the files.
``POST /ui/links``
    A new one-time link, for holders of the run's token (``Authorization:
    Bearer``, as every other control request): a second browser, or the
    first link lost.

Why a cookie and a one-time code: a browser cannot send the bearer token on
a page load, and a token in a URL stays in history and logs. The code is
good once; the cookie is ``HttpOnly`` (no script reads it), ``SameSite=Strict``
(no other site's page sends it), scoped to ``/ui``, lives as long as the run,
and grants reading the page and its data only: never ending a session. A
request whose ``Host`` is not the listener's own address (a DNS-rebinding
page) is refused. Every answer says ``Cache-Control: no-store``, the page
carries its Content-Security-Policy as a header too (its own inline script
and style, requests to its own origin only, no framing).

The live page holds no content: bodies are in the ``--record`` directory,
for ``modeltap view DIR --record RECDIR`` after the run.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import parse_qs, quote, urlsplit

import orjson

from modeltap.evidence.capture import Capture
from modeltap.evidence.capture.lines import AUDIT_FILE, EVENTS_FILE, SESSIONS_FILE
from modeltap.report.view.data import build_view_data
from modeltap.report.view.page import content_security_policy, render_page

#: How often the page asks for news, in milliseconds.
POLL_MS: Final = 1000
COOKIE: Final = "modeltap_ui"
#: Live links and browser cookies a run keeps at once (older ones are forgotten).
MAX_GRANTS: Final = 32

Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP answer of the UI routes."""

    status: int
    body: bytes
    headers: Headers = ()


def _hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _text(status: int, message: str, *extra: tuple[str, str]) -> Answer:
    return Answer(
        status,
        message.encode() + b"\n",
        (("Content-Type", "text/plain; charset=utf-8"), *_COMMON, *extra),
    )


_COMMON: Final[Headers] = (
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
)


@dataclass(slots=True)
class _Built:
    etag: str
    data: bytes


@dataclass(slots=True)
class LivePage:
    """The ``/ui`` routes of one run's control listener.

    Args:
        out_dir: the run's ``--out``.
        token: the run's control token (for ``POST /ui/links``).
        base_url: ``http://host:port`` of the control listener.
    """

    out_dir: Path
    token: str
    base_url: str
    title: str | None = None
    _codes: list[bytes] = field(default_factory=list)
    _cookies: list[bytes] = field(default_factory=list)
    _built: _Built | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    # ------------------------------------------------------------------ links

    def new_link(self) -> str:
        """A new one-time link to the page (good for one browser)."""
        code = secrets.token_urlsafe(24)
        self._codes.append(_hash(code))
        del self._codes[:-MAX_GRANTS]
        return f"{self.base_url}/ui?code={quote(code)}"

    def _spend(self, code: str) -> bool:
        digest = _hash(code)
        for i, known in enumerate(self._codes):
            if hmac.compare_digest(known, digest):
                del self._codes[i]
                return True
        return False

    def _cookie_ok(self, cookie_header: str | None) -> bool:
        for part in (cookie_header or "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and value:
                digest = _hash(value)
                if any(hmac.compare_digest(known, digest) for known in self._cookies):
                    return True
        return False

    def _grant_cookie(self) -> str:
        value = secrets.token_urlsafe(32)
        self._cookies.append(_hash(value))
        del self._cookies[:-MAX_GRANTS]
        return f"{COOKIE}={value}; Path=/ui; HttpOnly; SameSite=Strict"

    # ------------------------------------------------------------------ data

    def etag(self) -> str:
        """A tag that changes whenever one of the capture's files changes."""
        parts = []
        for name in (AUDIT_FILE, EVENTS_FILE, SESSIONS_FILE):
            try:
                st = (self.out_dir / name).stat()
                parts.append(f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}")
            except OSError:
                parts.append("-")
        return '"' + hashlib.sha256("|".join(parts).encode()).hexdigest()[:32] + '"'

    def _build(self, etag: str) -> _Built:
        try:
            capture = Capture.load(self.out_dir)
        except FileNotFoundError:
            # Nothing written yet: an empty capture, not an error.
            capture = Capture(
                directory=self.out_dir, records=(), events=(), session_ends=(), sessions={}
            )
        data = build_view_data(capture, title=self.title)
        data["live"] = {"data_url": "/ui/data", "poll_ms": POLL_MS}
        return _Built(etag, orjson.dumps(data))

    async def data(self) -> _Built:
        """The page data now, rebuilt (off the event loop) only when the files changed."""
        async with self._lock:
            etag = self.etag()
            if self._built is None or self._built.etag != etag:
                self._built = await asyncio.to_thread(self._build, etag)
            return self._built

    # ------------------------------------------------------------------ routes

    def _host_ok(self, host: str | None) -> bool:
        ours = urlsplit(self.base_url)
        port = ours.port
        allowed = {ours.netloc, f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"}
        return host is not None and host.lower() in allowed

    async def answer(self, method: str, target: str, headers: dict[str, str]) -> Answer | None:
        """Answer a request for ``/ui`` or below; ``None`` for any other path.

        Args:
            method: the HTTP method.
            target: the request target (path and query).
            headers: request headers, names lower-cased.

        Returns:
            The answer, or ``None`` when the path is not the page's.
        """
        path, _, query = target.partition("?")
        if path != "/ui" and not path.startswith("/ui/"):
            return None
        if not self._host_ok(headers.get("host")):
            return _text(421, "wrong host: open the link modeltap printed (127.0.0.1)")
        if path == "/ui/links":
            return self._links(method, headers.get("authorization"))
        if method != "GET":
            return _text(405, "use GET", ("Allow", "GET"))
        if path == "/ui" and "code" in parse_qs(query):
            return self._open(parse_qs(query)["code"][0])
        if not self._cookie_ok(headers.get("cookie")):
            return _text(
                401,
                "this page needs the one-time link modeltap run --ui printed "
                "(or a new one: POST /ui/links with the run's token)",
            )
        if path == "/ui":
            built = await self.data()
            page = render_page(orjson.loads(built.data), live=True)
            return Answer(
                200,
                page.encode(),
                (
                    ("Content-Type", "text/html; charset=utf-8"),
                    (
                        "Content-Security-Policy",
                        content_security_policy(live=True) + "; frame-ancestors 'none'",
                    ),
                    *_COMMON,
                ),
            )
        if path == "/ui/data":
            built = await self.data()
            if headers.get("if-none-match") == built.etag:
                return Answer(304, b"", (("ETag", built.etag), *_COMMON))
            return Answer(
                200,
                built.data,
                (("Content-Type", "application/json"), ("ETag", built.etag), *_COMMON),
            )
        return _text(404, "no such page (/ui, /ui/data)")

    def _open(self, code: str) -> Answer:
        if not self._spend(code):
            return _text(
                403,
                "this link was used already or is not this run's: ask for a new one "
                "(POST /ui/links with the run's token)",
            )
        return Answer(
            303,
            b"",
            (("Location", "/ui"), ("Set-Cookie", self._grant_cookie()), *_COMMON),
        )

    def _links(self, method: str, authorization: str | None) -> Answer:
        given = (authorization or "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return _text(401, "a new link needs the run's token", ("WWW-Authenticate", "Bearer"))
        if method != "POST":
            return _text(405, "use POST", ("Allow", "POST"))
        return Answer(
            201,
            orjson.dumps({"url": self.new_link()}),
            (("Content-Type", "application/json"), *_COMMON),
        )
