"""Listening: whether a set-up makes modeltap an open proxy, and what to say
when a listener cannot start (pure; no mitmproxy).

In regular mode (and mitmproxy's other forwarding modes) the proxy forwards
requests to whatever host the client names. Listening on anything but
loopback without proxy authentication lets anyone who can reach the port use
it to reach any host, with the operator's network position. modeltap refuses
to start that way unless told so explicitly.

A listener that cannot start (a port in use, an address of no interface, a
host name that does not resolve) stops the start with one line naming the
address and the OS's reason (:func:`listen_failure`). Under ``mitmdump -s``,
modeltap follows mitmproxy's own ``--mode`` (:func:`modeltap_mode`).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from collections.abc import Iterable, Sequence
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


#: An address of either family.
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def host_addresses(host: str) -> tuple[IPAddress, ...] | None:
    """The addresses a host names without asking DNS, read as the OS reads it.

    A name is not spelt one way: ``getaddrinfo`` (and so mitmproxy's connect)
    reads IPv4 with ``inet_aton``'s rules, so ``127.1``, ``127.0.1``,
    ``2130706433``, ``0x7f000001``, ``0177.0.0.1`` and ``0`` are addresses too;
    IPv6 comes in brackets and in many spellings (``[::ffff:127.0.0.1]``,
    ``[0:0:0:0:0:0:0:1]``); ``localhost`` and every name under it, with or
    without the root's trailing dot, are this machine's loopback (RFC 6761
    6.3), whatever a resolver says.

    Args:
        host: a host as a request names it (a target, a ``CONNECT`` authority).

    Returns:
        Its addresses; ``None`` for a name only DNS can answer.
    """
    name = host.strip().strip("[]").lower()
    bare = name.rstrip(".")
    if bare == "localhost" or bare.endswith(".localhost"):
        return (ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1"))
    for spelling in dict.fromkeys((name, bare)):
        try:
            return (ipaddress.ip_address(spelling),)
        except ValueError:
            pass
        try:
            return (ipaddress.IPv4Address(socket.inet_aton(spelling)),)
        except (OSError, ValueError):
            pass
    return None


def is_this_machine(address: IPAddress) -> bool:
    """Whether a connection to ``address`` lands on this machine.

    Loopback (all of ``127.0.0.0/8``, ``::1``), the unspecified address
    (``0.0.0.0`` and ``::`` connect to this host), any of them mapped into
    IPv6 (``::ffff:127.0.0.1``), and any address of this machine's own
    interfaces (a listener on ``0.0.0.0`` answers on each; ``--control``
    may name one). An interface address is told by binding to it: the
    system that routes the connection is the judge.
    """
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback or address.is_unspecified:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(address), 0))
        except OSError:
            return False
    return True


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


#: A hint per OS error that a start-up commonly meets, in the user's terms.
_LISTEN_HINTS: Final[dict[int, str]] = {
    errno.EADDRINUSE: "another process listens there; pick another port, or 0 for a free one",
    errno.EACCES: "ports below 1024 need privileges; pick a port above 1023",
    errno.EADDRNOTAVAIL: "no interface of this machine has that address",
}


def listen_failure(what: str, host: str, port: int | None, error: OSError) -> str:
    """One line saying why ``what`` could not listen on ``host:port``.

    Args:
        what: the listener, e.g. ``"the proxy"`` or ``"the control API"``.
        host: the address it was to listen on (``""``: every interface).
        port: the port (``None`` when unknown).
        error: the OS error the bind (or the host name's resolution) raised.

    Returns:
        ``cannot listen for the proxy on 127.0.0.1:8787: Address already in
        use (another process listens there; ...)``: the address, the OS's
        own reason and, for the common ones, what to do.
    """
    where = f"[{host}]" if ":" in host else (host or "*")
    if isinstance(error, socket.gaierror):
        reason = f"the host name does not resolve ({error.strerror})"
    elif error.errno:
        reason = os.strerror(error.errno)
    else:
        reason = error.strerror or type(error).__name__
    hint = _LISTEN_HINTS.get(error.errno or 0)
    port_text = "?" if port is None else str(port)
    return f"cannot listen for {what} on {where}:{port_text}: {reason}" + (
        f" ({hint})" if hint else ""
    )


#: mitmproxy modes in which the client names the host it wants: modeltap audits
#: them as ``regular`` (provider hosts audited, others passed as unaudited).
CLIENT_NAMES_HOST: Final = frozenset(
    {"regular", "upstream", "socks5", "transparent", "wireguard", "local", "tun"}
)


def modeltap_mode(
    chosen: str | None, listeners: Sequence[tuple[str, str]]
) -> tuple[str, str | None]:
    """modeltap's mode under mitmproxy's listeners, and the upstream they imply.

    Args:
        chosen: ``modeltap_mode`` as set (``reverse``, ``regular``), or None
            to follow mitmproxy's own ``--mode``.
        listeners: ``(type, data)`` of each of mitmproxy's modes, e.g.
            ``("reverse", "https://api.openai.com")`` or ``("regular", "")``.

    Returns:
        ``(mode, upstream)``: ``upstream`` is the reverse target to mount at
        ``/`` when the mode was followed, else None.

    Raises:
        ValueError: the listeners mix reverse and forwarding modes (modeltap
            routes one way), or contradict ``chosen``.
    """
    kinds = {kind for kind, _ in listeners if kind == "reverse" or kind in CLIENT_NAMES_HOST}
    followed = "regular" if kinds - {"reverse"} else "reverse"
    if "reverse" in kinds and followed == "regular":
        raise ValueError(
            "mitmproxy's --mode mixes reverse and forwarding listeners; modeltap routes one way "
            "for all of them: run one mode per mitmdump"
        )
    if chosen is not None:
        if kinds and chosen != followed:
            raise ValueError(
                f"modeltap_mode={chosen} contradicts mitmproxy's --mode ({followed}); drop "
                "modeltap_mode: modeltap follows mitmproxy's mode"
            )
        return chosen, None
    targets = [data for kind, data in listeners if kind == "reverse"]
    return followed, (targets[0] if targets else None)
