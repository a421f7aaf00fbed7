"""The request gate: what is judged before anything is forwarded (SPEC 2, 5, 8).

Pure functions over plain values: the ids a request carries, whether it asks
for the control API, whether it is a WebSocket handshake, and its request
line (its body's audit is :mod:`modeltap.core.body_audit`). Each either
returns what the exchange goes on with or raises
:class:`~modeltap.rules.errors.Rejected` naming the rule; :func:`fail_closed` turns
any other exception into a refusal, so a bug here never lets a request
through unaudited.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote

from modeltap import apis
from modeltap.apis.contract import EndpointMatch
from modeltap.evidence.records import (
    MAX_ID_CHARS,
    OPERATION_CREATE,
)
from modeltap.rules.errors import Rejected, Rule
from modeltap.rules.listening import IPAddress, host_addresses, is_this_machine
from modeltap.rules.routing import (
    Route,
    RouteTable,
    check_path,
    overrides_method,
    overrides_path,
    split_target,
)
from modeltap.wire.sigv4 import find_signature

logger = logging.getLogger("modeltap")

#: The header naming a request's session (SPEC 5); removed before forwarding.
SESSION_HEADER: Final = "x-modeltap-session"
#: Where the control API used to be served: refused on the proxy port, never forwarded.
CONTROL_PREFIX: Final = "/__modeltap/"


@dataclass(frozen=True, slots=True)
class RequestHead:
    """What the core reads off a request's head.

    ``headers`` is looked up case-insensitively by the glue's mapping
    (mitmproxy's ``Headers``; a test passes lower-case keys); ``fields`` are
    the raw header lines, read for their names only when the request is routed.
    """

    id: str
    method: str
    target: str
    scheme: str
    host: str
    port: int
    headers: Mapping[str, str]
    fields: tuple[tuple[bytes, bytes], ...] = ()
    #: ``x-modeltap-session``, already taken off the request (it never goes
    #: upstream), or left on a signed one (:func:`take_session`).
    session: str | None = None
    #: Signed with AWS SigV4 (:func:`take_session`): forwarded byte-for-byte or refused.
    signed: bool = False
    #: The other names the request goes by: its ``Host`` header (or
    #: ``:authority``) and the TLS server name its client sent. In regular
    #: mode the upstream routes on these, not on the address modeltap
    #: connects to (:func:`provider_route`).
    host_header: str | None = None
    sni: str | None = None
    #: The addresses the target host resolved to, when the glue looked it up
    #: (:func:`needs_resolving`: only a name on the control listener's port).
    resolved: tuple[str, ...] = ()
    #: The proxy engine refuses this head itself as broken HTTP (mitmproxy's
    #: header validation): it answers 400, and the failure is reported as the
    #: client's (``bad_request``) when it ends the exchange.
    broken: bool = False

    @property
    def aliases(self) -> tuple[tuple[str, int], ...]:
        """``(host, port)`` of each ``Host`` header and of the server name, when sent."""
        found = []
        if self.host_header:
            # Repeated Host fields arrive joined with commas; servers differ on which wins.
            for value in self.host_header.split(","):
                if value.strip():
                    found.append(split_authority(value.strip(), self.port))
        if self.sni:
            found.append((self.sni, self.port))
        return tuple(found)


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a request goes (:func:`destination`)."""

    #: Its route; None for a regular-mode target that is no provider's.
    route: Route | None
    #: The target as it goes upstream.
    path: str
    #: ``scheme://host[:port]`` of the upstream.
    upstream: str
    host: str


def destination(mode: str, routes: RouteTable, head: RequestHead) -> Destination | None:
    """Where a request goes.

    Args:
        mode: ``regular`` (the client names its target) or ``reverse``.
        routes: the proxy's routes.
        head: the request's head.

    Returns:
        In regular mode its target, on a provider's route if any name it goes
        by has one (:func:`provider_route`); in reverse mode the route its
        path names, re-pointed there; None when no route does (a 404).
    """
    if mode == "regular":
        route = provider_route(routes, head)
        return Destination(
            route, head.target, f"{head.scheme}://{head.host}:{head.port}", head.host
        )
    route = routes.match(head.target)
    if route is None:
        return None
    return Destination(route, route.upstream_path(head.target), route.url, route.host)


def provider_route(routes: RouteTable, head: RequestHead) -> Route | None:
    """The route of a regular-mode request: a provider's, if any name it goes by has one.

    A provider's front end routes on the ``Host`` header and the TLS server
    name, not on the address the client connected to: a ``CONNECT`` to an IP
    address (or to an alias of the provider's host) with ``Host:
    bedrock-runtime.us-east-1.amazonaws.com`` reaches Bedrock all the same,
    so it is audited like a request to that host.

    Args:
        routes: the proxy's routes.
        head: the request's head (its target host and :attr:`RequestHead.aliases`).

    Returns:
        The first route found for the target, then for each alias; ``None``
        when none of them is a provider's (the request passes unaudited).
    """
    for host, port in ((head.host, head.port), *head.aliases):
        route = routes.for_host(host, port, head.scheme)
        if route is not None:
            return route
    return None


def split_authority(authority: str, port: int) -> tuple[str, int]:
    """Split a ``Host`` header's value into its host and port.

    Args:
        authority: ``host``, ``host:port`` or ``[v6]:port``.
        port: the port when it names none (the connection's).

    Returns:
        ``(host, port)``; a port that is not a number leaves ``port``.
    """
    host, sep, tail = authority.rpartition(":")
    if not sep or "]" in tail or not tail.isdigit():
        return authority.strip("[]"), port
    return host.strip("[]"), int(tail)


def take_session(headers: MutableMapping[str, str], target: str) -> tuple[str | None, bool]:
    """The request's session header, and whether the request is SigV4-signed.

    The header is taken off an unsigned request (it never goes upstream). A
    signed request goes out byte-for-byte (SPEC 2, "Signatures"): the header
    stays on, since the signature may cover it and upstreams ignore it.

    Args:
        headers: the request's headers, looked up case-insensitively; the
            session header is removed from them unless the request is signed.
        target: the request target as sent (a presigned query signs too).

    Returns:
        ``(session header or None, signed)``.
    """
    signed = find_signature(headers.get("authorization"), split_target(target)[1]) is not None
    if signed:
        return headers.get(SESSION_HEADER), True
    return headers.pop(SESSION_HEADER, None), False


#: A token (RFC 9110 5.6.2): what a field name and a method are made of.
_TOKEN: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Bytes no field value carries on (RFC 9110 5.5): every control byte but HTAB, and DEL.
_VALUE_CONTROL: Final = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
#: What no request target holds: control bytes, DEL, and the space that ends it.
_TARGET_CONTROL: Final = re.compile(r"[\x00-\x20\x7f]")


def judge_head_bytes(
    method: str, target: str, fields: Sequence[tuple[bytes, bytes]], session: str | None = None
) -> None:
    """Refuse a request head carrying bytes an intermediary must not pass on.

    mitmproxy's HTTP/1 reader keeps an obs-fold (a header line that starts
    with a space or tab) as ``CR LF SP`` inside the value before it, keeps a
    bare CR, NUL and other control bytes in a value, and forwards them all
    as they came; its HTTP/2 reader stops NUL, CR and LF but not the other
    control bytes. An upstream that reads the fold or the CR as a line
    break sees a header (a ``Transfer-Encoding``) modeltap never saw, and
    the body after it as a request nobody audited. RFC 9112 5.2 lets a
    server reject a fold or replace it with spaces; like Envoy and HAProxy,
    modeltap rejects, and does the same for every control byte (HTAB
    aside) and DEL in a value (RFC 9110 5.5), for a header name that is not
    a token (mitmproxy checks names only while ``validate_inbound_headers``
    is on), and for a method or target that could be read as more than one.

    Args:
        method: the method as sent.
        target: the request target as sent.
        fields: the raw header fields, ``(name, value)`` (HTTP/2's pseudo
            fields are not among them: they are the method and target).
        session: ``x-modeltap-session``, already taken off the fields.

    Raises:
        Rejected: ``invalid_header_bytes``, naming which of the above (a fixed text).
    """
    names = [name for name, _ in fields]
    values = b"\t".join(value for _, value in fields)  # HTAB is allowed in a value
    if session is not None:
        values += b"\t" + session.encode("utf-8", "surrogateescape")
    if _VALUE_CONTROL.search(values):
        folded = b"\r\n " in values or b"\r\n\t" in values
        detail = "a folded header line (obs-fold)" if folded else "a control byte in a header value"
        raise Rejected(Rule.INVALID_HEADER_BYTES, detail)
    if names and (not all(names) or not _TOKEN.fullmatch(b"-".join(names))):
        raise Rejected(Rule.INVALID_HEADER_BYTES, "a header name that is not a token")
    if not _TOKEN.fullmatch(method.encode("utf-8", "surrogateescape")):
        raise Rejected(Rule.INVALID_HEADER_BYTES, "a method that is not a token")
    if _TARGET_CONTROL.search(target):
        raise Rejected(Rule.INVALID_HEADER_BYTES, "a control byte or space in the target")


def fail_closed[**P, R](audit: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run an audit step; any exception other than a refusal becomes one.

    mitmproxy logs an exception raised in a hook and then forwards the request,
    so a bug in the core would let a request through unaudited. Only the
    exception's type is logged: its message could quote the request.

    Raises:
        Rejected: the step's own refusal, or ``audit_internal_error``.
    """
    try:
        return audit(*args, **kwargs)
    except Rejected:
        raise
    except Exception as e:
        logger.error("modeltap: internal error while auditing (%s); refused", type(e).__name__)
        raise Rejected(Rule.AUDIT_INTERNAL_ERROR) from None


def identify(
    *,
    session_header: str | None,
    client_request_id: str | None,
    request_id: str | None,
    websocket: bool,
    fallback_id: str,
    default_session: str,
) -> tuple[str, str]:
    """The session and request ids of a request (SPEC 2 and 5).

    HTTP takes ``x-client-request-id``, else ``x-request-id``; a WebSocket
    handshake only ``x-client-request-id``; else the proxy's own id. The
    session is the header's, else the WebSocket connection's own id, else the
    default (``--session``, else the run).

    Args:
        session_header: ``x-modeltap-session``, if sent.
        client_request_id: ``x-client-request-id``, if sent.
        request_id: ``x-request-id``, if sent.
        websocket: whether it is a WebSocket handshake.
        fallback_id: the proxy's own id for the exchange.
        default_session: ``--session``, else the run id.

    Returns:
        ``(session_id, request_id)``.
    """
    rid = client_request_id or (None if websocket else request_id) or fallback_id
    return session_header or (rid if websocket else None) or default_session, rid


def overlong_id_header(request_id: str, session_header: str | None) -> str | None:
    """The id header too long to copy into every line, if one is (a fixed name)."""
    if session_header is not None and len(session_header) > MAX_ID_CHARS:
        return SESSION_HEADER
    if len(request_id) > MAX_ID_CHARS:
        return "x-client-request-id or x-request-id"
    return None


def is_control_path(path: str) -> bool:
    """Whether a request path asks for the control API (however it is spelled)."""
    path = path.split("?", 1)[0]
    return any(
        p == CONTROL_PREFIX.rstrip("/") or p.startswith(CONTROL_PREFIX)
        for p in (path, unquote(path))
    )


def is_control_address(
    host: str, port: int, control: tuple[str, int] | None, resolved: Iterable[str] = ()
) -> bool:
    """Whether ``host:port`` reaches the control listener (regular mode's targets).

    Decided by the address the host names once the OS has read it
    (:func:`~modeltap.rules.listening.host_addresses`: ``127.1``,
    ``0x7f000001``, ``[::ffff:127.0.0.1]``, ``0``, ``foo.localhost.`` ...),
    never by its spelling, and for a name DNS answers, by what it resolved
    to (``resolved``, the glue's lookup: :func:`needs_resolving` says when
    one is needed). Any address of this machine counts on the listener's
    port (:func:`~modeltap.rules.listening.is_this_machine`): the listener
    may be bound to any of them (``--control HOST:PORT``).

    Args:
        host: the target host.
        port: the target port.
        control: the control listener's address, if it is bound.
        resolved: the addresses a DNS name resolved to (ignored for a host
            that is an address, or ``localhost``).
    """
    if control is None or port != control[1]:
        return False
    control_host = control[0].strip("[]").lower()
    if host.strip().strip("[]").lower().rstrip(".") == control_host.rstrip("."):
        return True
    named = host_addresses(host)
    addresses = list(named) if named is not None else [a for a in map(_address, resolved) if a]
    return any(is_this_machine(address) for address in addresses)


def needs_resolving(host: str, port: int, control: tuple[str, int] | None) -> bool:
    """Whether :func:`is_control_address` needs ``host``'s DNS answer: a name
    (not an address, not ``localhost``) on the control listener's port."""
    return control is not None and port == control[1] and host_addresses(host) is None


def _address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


#: The one WebSocket version mitmproxy opens as a WebSocket (RFC 6455).
WEBSOCKET_VERSION: Final = "13"


def websocket_handshake(
    method: str, upgrades: Iterable[str], version: str | None, body_declared: bool = False
) -> bool | None:
    """Whether a request is the WebSocket handshake modeltap follows (SPEC 2, 3).

    After a ``101 Switching Protocols``, mitmproxy opens a WebSocket only when
    the request said ``Sec-WebSocket-Version: 13`` (and the answer ``Upgrade:
    websocket``); any other switch becomes a raw TCP tunnel that no hook sees.
    Servers read an upgrade more loosely than that (a token list such as
    ``foo, websocket``, the last of two ``Upgrade`` headers, version 8, a
    handshake by POST), so anything but the one shape modeltap follows is a
    switch it cannot follow: on a route it is refused (``unsupported_upgrade``,
    :class:`~modeltap.core.exchange.Exchange`), since an upstream could turn it into
    a tunnel of model requests nobody audits. ``Upgrade: h2c`` alone asks for
    nothing: mitmproxy removes it before forwarding. A handshake carries no
    body: WebSocket servers (Python's websockets, Node's ws) read the bytes
    after its head as the first frames, so a body would smuggle messages in
    that modeltap never sees as such.

    Args:
        method: the request method.
        upgrades: the value of each ``Upgrade`` header field, as sent.
        version: ``Sec-WebSocket-Version`` (repeated fields joined), if sent.
        body_declared: its head announces a body (``Content-Length`` other
            than 0, or ``Transfer-Encoding``).

    Returns:
        True for the WebSocket handshake audited message by message, False for
        a request that asks for no switch, None for any other switch.
    """
    values = [value.strip() for value in upgrades]
    if not values or values == ["h2c"]:
        return False
    if (
        method == "GET"
        and len(values) == 1
        and values[0].lower() == "websocket"
        and version == WEBSOCKET_VERSION
        and not body_declared
    ):
        return True
    return None


def switch_asked(head: RequestHead) -> bool | None:
    """What a request's head asks to switch to (:func:`websocket_handshake`): its
    ``Upgrade`` fields read one by one, its body as its framing headers declare it."""
    headers = head.headers
    upgrades = (
        [value.decode("latin-1") for name, value in head.fields if name.lower() == b"upgrade"]
        if head.fields
        else [value for value in (headers.get("upgrade"),) if value is not None]
    )
    declared = headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
    return websocket_handshake(
        head.method, upgrades, headers.get("sec-websocket-version"), declared
    )


def judge_request_line(
    method: str,
    sent_path: str,
    path: str,
    header_names: Iterable[str],
    websocket: bool,
    content_type: str | None = None,
) -> EndpointMatch | None:
    """Judge a routed request's line before anything is forwarded (SPEC 2).

    Args:
        method: the request method.
        sent_path: the target as the client sent it.
        path: the target as it goes upstream.
        header_names: the request's header names.
        websocket: whether it is a WebSocket handshake.
        content_type: its ``Content-Type``, if any (a ``multipart/mixed``
            body bundles whole HTTP requests: Google's batch envelope).

    Returns:
        The endpoint the decoded path names (its API, and what the path says:
        :func:`modeltap.apis.match_endpoint`, the one match of a request), or None.

    Raises:
        Rejected: ``noncanonical_path`` (also for an ``X-Original-URL`` or
            ``X-Rewrite-URL`` header), ``ws_unsupported_endpoint`` (a
            WebSocket to a model endpoint whose messages cannot be audited),
            ``unsupported_endpoint`` (a POST to an endpoint that runs a model
            on input modeltap cannot audit: a batch, a raw prediction, gRPC,
            :func:`modeltap.apis.unsupported_endpoint`), or ``method_override``
            (another method that could become a POST).
    """
    check_path(sent_path)
    names = list(header_names)
    if overrides_path(names):
        raise Rejected(Rule.NONCANONICAL_PATH, "path override header")
    found = apis.match_endpoint(path)
    posted = method.upper() == "POST" or overrides_method(names, path)
    if found is None:
        unsupported = apis.unsupported_endpoint(path)
        if unsupported is None and _bundles_requests(content_type):
            unsupported = "a batch of HTTP requests (multipart/mixed)"
        if unsupported is not None and websocket:
            raise Rejected(Rule.WS_UNSUPPORTED_ENDPOINT, unsupported)
        if unsupported is not None and posted:
            raise Rejected(Rule.UNSUPPORTED_ENDPOINT, unsupported)
        return None
    if websocket:
        if apis.websocket_mode(found.api) is None:
            raise Rejected(Rule.WS_UNSUPPORTED_ENDPOINT)
        if found.operation != OPERATION_CREATE:
            # The socket speaks response.create; a compaction has no WebSocket mode.
            raise Rejected(Rule.WS_UNSUPPORTED_ENDPOINT, "Responses compaction")
    elif method == "POST" and not utf8_content_type(content_type):
        raise Rejected(Rule.UNSUPPORTED_CHARSET)
    elif method != "POST" and posted:
        # Another method that could be read as POST (an override, or "post": some
        # servers fold a method's case, others refuse it) is not forwarded.
        raise Rejected(Rule.METHOD_OVERRIDE)
    return found


#: A ``charset`` parameter of a ``Content-Type`` (repeated fields are joined with commas).
_CHARSET = re.compile(r'charset\s*=\s*"?\s*([^";,\s]*)', re.IGNORECASE)


def utf8_content_type(content_type: str | None) -> bool:
    """Whether a model request's ``Content-Type`` leaves its body UTF-8.

    JSON is UTF-8 (RFC 8259) and the audit reads it so, but some servers
    decode a body by the ``charset`` it declares (aiohttp's ``request.json()``):
    with ``charset=latin-1`` the same bytes are other text there (a tool
    named ``café`` is ``cafÃ©``, instructions hash to another value), and with
    ``charset=utf-16`` nothing the audit read. A charset other than UTF-8 is
    refused (``unsupported_charset``); none at all is UTF-8.
    """
    if content_type is None or "charset" not in content_type.lower():
        return True
    found = _CHARSET.findall(content_type)
    return bool(found) and all(name.lower() in ("utf-8", "utf8") for name in found)


def _bundles_requests(content_type: str | None) -> bool:
    """Whether a body of this type carries whole HTTP requests (a batch envelope).

    Google's APIs take ``multipart/mixed`` bodies whose parts are
    ``application/http`` requests, each run as if sent alone: a model request
    inside one would never meet the audit. Looked for in every value (a
    repeated header is joined with commas, and servers differ on which wins).
    """
    return content_type is not None and "multipart/mixed" in content_type.lower()
