"""One self-contained HTML page: the template, the styles, the script and the data.

The page needs nothing but itself: the styles and the script are inline, the
fonts are the system's, and the data is a JSON block in the page (a second
block holds recorded bodies, parsed only when one is opened). It opens from a
file, from a CI artifact, offline.

Safety. A capture holds strings an agent or a model chose: tool names,
arguments, session ids, model names. They reach the page only as JSON inside
``<script type="application/json">`` blocks, where every ``<``, ``>`` and
``&`` is written as a ``\\u00XX`` escape (so no string can close the block or
open a comment), and the script puts them into the document only as text
(``textContent``, attribute values), never as HTML. A Content-Security-Policy
allows exactly the page's own inline script and style (by their SHA-256) and
no network at all (``connect-src 'none'``; the live page served by ``modeltap
run --ui`` may fetch its own origin), so even a string that got past the
escaping could neither run nor send anything anywhere.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from functools import cache
from importlib import resources
from typing import Any, Final

import orjson

Json = dict[str, Any]

_PLACEHOLDER: Final = re.compile(r"\{\{(\w+)\}\}")
_SCRIPT_ESCAPES: Final = {
    b"<": b"\\u003c",
    b">": b"\\u003e",
    b"&": b"\\u0026",
    "\u2028".encode(): b"\\u2028",
    "\u2029".encode(): b"\\u2029",
}
_SCRIPT_UNSAFE: Final = re.compile(b"[<>&]|\xe2\x80[\xa8\xa9]")


@cache
def asset(name: str) -> str:
    """The text of one file of ``modeltap/report/view/assets`` (package data)."""
    return resources.files("modeltap.report.view").joinpath("assets", name).read_text("utf-8")


def json_for_script(value: Any) -> str:
    """``value`` as JSON that is safe inside ``<script type="application/json">``.

    Args:
        value: JSON types (and dataclasses, which orjson writes as objects).

    Returns:
        JSON in which ``<``, ``>``, ``&``, U+2028 and U+2029 appear only as
        ``\\uXXXX`` escapes, so nothing in it can end the script element or
        start an HTML comment; ``JSON.parse`` reads it back unchanged.
    """
    raw = orjson.dumps(value)
    return _SCRIPT_UNSAFE.sub(lambda m: _SCRIPT_ESCAPES[m.group(0)], raw).decode("utf-8")


def _csp_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def content_security_policy(*, live: bool) -> str:
    """The page's policy: its own inline script and style only; no network unless live.

    Args:
        live: the page is served by ``modeltap run --ui`` and polls its own origin.

    Returns:
        The policy text (for the ``<meta>`` element and the live server's header).
    """
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src {_csp_hash(asset('page.js'))}",
            f"style-src {_csp_hash(asset('page.css'))}",
            "img-src data:",
            "connect-src 'self'" if live else "connect-src 'none'",
            "base-uri 'none'",
            "form-action 'none'",
        ]
    )


def render_page(data: Json, *, blobs: Json | None = None, live: bool = False) -> str:
    """The whole page as one HTML string.

    Args:
        data: from :func:`modeltap.report.view.data.build_view_data` (with
            ``data["live"]`` set when served live).
        blobs: recorded bodies by key (see :mod:`modeltap.report.view.bodies`), or
            ``None`` when no recording was given (the page shows no content).
        live: whether the page is served by ``modeltap run --ui``.

    Returns:
        The HTML document.
    """
    values = {
        "csp": html.escape(content_security_policy(live=live), quote=True),
        "title": html.escape(f"modeltap view: {data.get('title', '')}", quote=True),
        "style": asset("page.css"),
        "script": asset("page.js"),
        "data": json_for_script(data),
        "bodies": json_for_script(blobs if blobs is not None else {}),
    }
    # One pass over the template: text put in is never searched for placeholders.
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], asset("page.html"))
