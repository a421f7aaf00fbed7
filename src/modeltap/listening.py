"""Whether a listening setup makes modeltap an open proxy (pure; no mitmproxy).

In regular mode (and mitmproxy's other forwarding modes) the proxy forwards
requests to whatever host the client names. Listening on anything but
loopback without proxy authentication lets anyone who can reach the port use
it to reach any host, with the operator's network position. modeltap refuses
to start that way unless told so explicitly.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Final

#: mitmproxy modes in which the client chooses the destination host.
FORWARDING_MODES: Final = frozenset({"regular", "upstream", "socks5"})

#: proxyauth values that let anyone in (mitmproxy's ``any`` accepts every user).
_NO_AUTH: Final = frozenset({"", "any"})


def is_loopback(host: str) -> bool:
    """True if ``host`` is a loopback address or ``localhost``.

    The empty string means "every interface" to mitmproxy, so it is not
    loopback; neither is any other host name (it may resolve anywhere).
    """
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def open_proxy_listeners(
    listeners: Iterable[tuple[str, str, int | None]], proxyauth: str | None
) -> list[str]:
    """The listeners that would forward anyone's traffic to any host.

    Args:
        listeners: ``(mode, host, port)`` per listening proxy mode; ``mode`` is
            mitmproxy's mode name (``regular``, ``reverse``, ``socks5`` ...),
            ``host`` its listen address (``""`` for every interface).
        proxyauth: mitmproxy's ``proxyauth`` value, or None.

    Returns:
        ``MODE mode on HOST:PORT`` for each open one (``*`` for every
        interface), in order; empty when proxy authentication is required or
        all are safe.
    """
    if proxyauth is not None and proxyauth.strip().lower() not in _NO_AUTH:
        return []
    return [
        f"{mode} mode on {host or '*'}:{port if port is not None else '?'}"
        for mode, host, port in listeners
        if mode in FORWARDING_MODES and not is_loopback(host)
    ]


def open_proxy_message(addresses: list[str], fix: str) -> str:
    """The one-line refusal: what would be open, and how to fix it.

    Args:
        addresses: from :func:`open_proxy_listeners` (not empty).
        fix: the ways out, in the caller's option spelling.
    """
    where = ", ".join(addresses)
    return (
        f"refusing to start an open proxy: {where} would relay anyone's traffic to any host; {fix}"
    )
