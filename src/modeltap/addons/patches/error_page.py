"""modeltap's answer in place of mitmproxy's HTML error page.

mitmproxy's HTTP/1 layer builds the page it sends when it cannot forward a
request (an unreachable upstream, a broken request head) with
``_http1.make_error_response(status_code, message)``, looked up when the
page is sent. :func:`install` puts the HTTP addon's page builder there: agents'
SDKs want JSON they can parse, in their provider's shape, not HTML.
"""

from __future__ import annotations

from collections.abc import Callable

from mitmproxy.proxy.layers.http import _http1

from modeltap.addons.patches import capture, replace

#: mitmproxy's own page builder, kept before :func:`install` replaces it.
capture(_http1, "make_error_response")


def install(page: Callable[[int, str], bytes]) -> None:
    """Make ``page(status_code, message)`` mitmproxy's HTTP/1 error page
    (idempotent; affects every mitmproxy in the process).

    Args:
        page: builds the whole HTTP/1 response, head and body, as bytes.
    """
    replace(_http1, "make_error_response", page)
