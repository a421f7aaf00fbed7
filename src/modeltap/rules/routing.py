"""Routes: which upstream a request goes to (pure; no mitmproxy).

In reverse mode a route is a path prefix (``/openai``) mounted on an upstream
URL (``https://api.openai.com``); the prefix is stripped and the upstream's own
base path is put in front. In regular (forward proxy) mode the request already
names its host; a route then only tells that the host is a model provider.

Each route has a provider, the ``gen_ai.provider.name`` records and spans
carry: said with ``--route NAME=URL,provider=P``, else found from the upstream
host (:data:`PROVIDER_HOSTS`, :func:`provider_of_host`), else unknown here
(``None``: the wire's own provider is used, :func:`modeltap.apis.provider_for`).

A remote MCP server is a route too (SPEC 3b): ``--mcp NAME=URL`` mounts it
at ``/mcp/NAME`` (:func:`parse_mcp_spec`), and in regular mode ``--mcp-host
HOST`` marks a host whose traffic is MCP (:meth:`RouteTable.for_host`). Its
:attr:`Route.mcp` is true: its requests are JSON-RPC, never model requests.

The path checks every route relies on (decoded, canonical, no override
headers) stay beside the routes, since a route is chosen on the very path
those checks approve. Which error shape an answer takes is the wire's
(:func:`modeltap.apis.error_shape_for`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Final
from urllib.parse import unquote_to_bytes, urlsplit

from modeltap.rules.errors import Rejected, Rule

DEFAULT_ROUTES: dict[str, str] = {
    "openai": "https://api.openai.com",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
}

#: The provider of each default route (what a route of that name speaks,
#: whatever upstream ``--route NAME=URL`` mounts it on).
DEFAULT_PROVIDERS: Final[dict[str, str]] = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
}

#: The route name used by ``--upstream URL`` (mounted at ``/``).
UPSTREAM_ROUTE = "upstream"
#: Where ``--mcp NAME=URL`` mounts a server: ``/mcp/NAME``.
MCP_PREFIX: Final = "/mcp/"

#: The providers' hosts, in one table: ``(host pattern, gen_ai.provider.name)``.
#: A ``*`` stands for any run of letters, digits and ``-`` inside one DNS label
#: (a resource, a region, a ``us-central1-`` prefix). Used to name a route's
#: provider, and the one place regular mode learns which hosts are providers.
PROVIDER_HOSTS: Final[tuple[tuple[str, str], ...]] = (
    ("api.openai.com", "openai"),
    ("*.api.openai.com", "openai"),  # data residency: us., eu., au., in., ae.
    ("api.anthropic.com", "anthropic"),
    ("*.openai.azure.com", "azure.ai.openai"),
    ("*.services.ai.azure.com", "azure.ai.openai"),
    ("*.cognitiveservices.azure.com", "azure.ai.openai"),  # AI Services resources
    ("*.openai.azure.us", "azure.ai.openai"),  # Azure Government
    # Bedrock Runtime in every AWS partition (commercial and GovCloud, China,
    # dual-stack, the ISO regions), plain or FIPS (bedrock-runtime-fips): the
    # hosts boto3 resolves. The domains are AWS's own.
    ("bedrock-runtime*.*.amazonaws.com", "aws.bedrock"),
    ("bedrock-runtime*.*.amazonaws.com.cn", "aws.bedrock"),
    ("bedrock-runtime*.*.api.aws", "aws.bedrock"),
    ("bedrock-runtime*.*.api.amazonwebservices.com.cn", "aws.bedrock"),
    ("bedrock-runtime*.*.c2s.ic.gov", "aws.bedrock"),
    ("bedrock-runtime*.*.sc2s.sgov.gov", "aws.bedrock"),
    ("bedrock-runtime*.*.cloud.adc-e.uk", "aws.bedrock"),
    ("bedrock-mantle*.*.api.aws", "aws.bedrock"),  # OpenAI-compatible, Messages ("Mantle")
    ("*aiplatform.googleapis.com", "gcp.vertex_ai"),
    ("generativelanguage.googleapis.com", "gcp.gemini"),
    ("cloudcode-pa.googleapis.com", "gcp.gemini"),
)

_HOST_PATTERNS: Final = tuple(
    (re.compile(r"[a-z0-9-]*".join(re.escape(part) for part in pattern.split("*"))), provider)
    for pattern, provider in PROVIDER_HOSTS
)

#: A provider name: lower-case dotted words, as the GenAI semantic conventions
#: write ``gen_ai.provider.name`` (``openai``, ``azure.ai.openai``,
#: ``gcp.vertex_ai``, ``mistral_ai``). The convention's list is open, so any
#: name of this shape is accepted; nothing else (it goes into records and spans).
PROVIDER_NAME: Final = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*")
MAX_PROVIDER_CHARS: Final = 64


def provider_of_host(host: str) -> str | None:
    """The provider serving a host, from :data:`PROVIDER_HOSTS`.

    Args:
        host: a host name, any case, with or without a trailing dot.

    Returns:
        Its ``gen_ai.provider.name``, or ``None`` for a host not in the table.
    """
    name = host.lower().removesuffix(".")
    for pattern, provider in _HOST_PATTERNS:
        if pattern.fullmatch(name):
            return provider
    return None


def parse_provider(value: str, route: str) -> str:
    """Check a provider name given on the command line (``provider=P``).

    Args:
        value: the name as given.
        route: the route's name, for the error.

    Returns:
        The name.

    Raises:
        RouteError: when it is not lower-case dotted words (:data:`PROVIDER_NAME`)
            of at most :data:`MAX_PROVIDER_CHARS` characters.
    """
    if len(value) > MAX_PROVIDER_CHARS or not PROVIDER_NAME.fullmatch(value):
        raise RouteError(
            f"route {route}: provider must be a gen_ai.provider.name, lower-case dotted "
            "words such as "
            "openai, anthropic, azure.ai.openai, gcp.gemini, gcp.vertex_ai, aws.bedrock"
        )
    return value


def _not_a_url(name: str, prefix: str | None) -> str:
    """The message for an upstream that is no http(s) URL, naming where it came
    from (the URL itself is not quoted: it may hold a key)."""
    where = "--upstream" if prefix == "/" else f"route {name}"
    return (
        f"{where}: the upstream must be an http:// or https:// URL, e.g. "
        "http://127.0.0.1:8000 or https://api.openai.com"
    )


class RouteError(ValueError):
    """A ``--route`` or ``--upstream`` value is not usable."""


@dataclass(frozen=True, slots=True)
class Route:
    """One upstream, mounted at ``/{name}`` (or at ``/`` for ``--upstream``)."""

    name: str
    prefix: str
    scheme: str
    host: str
    port: int
    base_path: str
    #: Its ``gen_ai.provider.name``: as said (``provider=P``), else from its
    #: host (:func:`provider_of_host`), else ``None`` (the wire's own is used).
    provider: str | None = None
    #: A remote MCP server (``--mcp``, ``--mcp-host``): its traffic is JSON-RPC.
    mcp: bool = False

    @property
    def url(self) -> str:
        """The upstream as ``scheme://host[:port]/base``, for records and the screen."""
        default = 443 if self.scheme == "https" else 80
        hostport = self.host if self.port == default else f"{self.host}:{self.port}"
        if ":" in self.host and not self.host.startswith("["):
            hostport = f"[{self.host}]" if self.port == default else f"[{self.host}]:{self.port}"
        return f"{self.scheme}://{hostport}{self.base_path}"

    def upstream_path(self, path: str) -> str:
        """Map a client path under this route's prefix to the upstream path."""
        rest = path[len(self.prefix) :] if self.prefix != "/" else path
        if self.mcp and self.base_path and (not rest or rest.startswith("?")):
            # ``/mcp/NAME`` is the server's endpoint itself, not a folder of it:
            # no slash is added (servers redirect ``/mcp/`` to ``/mcp``, off the mount).
            return self.base_path + rest
        if not rest.startswith("/"):
            rest = "/" + rest
        return (self.base_path + rest) if self.base_path else rest

    def matches(self, path: str) -> bool:
        """True if ``path`` lies under this route's prefix."""
        if self.prefix == "/":
            return True
        return path == self.prefix or path.startswith((self.prefix + "/", self.prefix + "?"))


def parse_upstream_url(
    name: str, url: str, prefix: str | None = None, provider: str | None = None
) -> Route:
    """Build a route from an upstream URL.

    Args:
        name: the route name (letters, digits, ``-``, ``_``, ``.``).
        url: ``http(s)://host[:port][/base]``.
        prefix: the mount point; ``/{name}`` when omitted.
        provider: its provider, checked by :func:`parse_provider`; when
            omitted, the provider of the host (:func:`provider_of_host`), if any.

    Raises:
        RouteError: for a bad name or URL.
    """
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise RouteError(f"bad route name {name!r}: use letters, digits, '-', '_' or '.'")
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError:
        # urlsplit raises plain ValueError on a broken IPv6 literal ("http://[::1",
        # "http://[x]"); the CLI and the addon only catch RouteError.
        raise RouteError(_not_a_url(name, prefix)) from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise RouteError(_not_a_url(name, prefix))
    if any(c.isspace() or not c.isprintable() for c in hostname):
        # Would only fail later, on every request, as a bad Host header.
        raise RouteError(f"route {name}: the upstream host has spaces or control characters")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise RouteError(f"route {name}: the upstream URL may not carry credentials or a query")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise RouteError(f"route {name}: bad port") from None
    return Route(
        name=name,
        prefix=prefix if prefix is not None else f"/{name}",
        scheme=parts.scheme,
        host=hostname,
        port=port,
        base_path=parts.path.rstrip("/"),
        provider=provider_of_host(hostname) if provider is None else parse_provider(provider, name),
    )


#: ``,key=value`` options after a route's URL (only ``provider`` today).
_ROUTE_OPTIONS: Final = re.compile(r"(?P<url>.*?)(?P<options>(?:,[a-z_]+=[^,]*)*)")


def parse_mcp_spec(spec: str) -> Route:
    """Parse ``NAME=URL`` (the ``--mcp`` option): a remote MCP server mounted at ``/mcp/NAME``.

    ``URL`` is the server's MCP endpoint as a client would be given it
    (``https://mcp.example.com/mcp``, or an HTTP+SSE server's base, whose
    ``/sse`` the client then asks for under the mount).

    Raises:
        RouteError: no ``=``, a bad name or URL.
    """
    name, sep, url = spec.partition("=")
    if not sep:
        raise RouteError(f"--mcp takes NAME=URL, got {spec!r}")
    name = name.strip()
    route = parse_upstream_url(name, url.strip(), prefix=MCP_PREFIX + name)
    return replace(route, mcp=True)


def mcp_host_route(host: str) -> Route:
    """The route of a ``--mcp-host`` host (regular mode), named after it.

    Args:
        host: ``HOST`` or ``HOST:PORT``; without a port, any port of the host.

    Raises:
        RouteError: a host that is empty, has spaces, or a bad port.
    """
    name, sep, port = host.strip().lower().rpartition(":")
    if not sep or "]" in port:
        name, port = host.strip().lower(), ""
    name = name.strip("[]").removesuffix(".")
    if not name or any(c.isspace() or not c.isprintable() or c in "/?#@" for c in name):
        raise RouteError("--mcp-host takes HOST or HOST:PORT, e.g. mcp.example.com")
    if port and (not port.isdigit() or not 0 < int(port) < 65536):
        raise RouteError("--mcp-host: bad port")
    return Route(name, "/", "https", name, int(port) if port else 0, "", mcp=True)


def parse_route_spec(spec: str) -> Route:
    """Parse ``NAME=URL[,provider=P]`` (the ``--route`` option).

    Options follow the URL as ``,key=value``; ``provider`` names the route's
    ``gen_ai.provider.name`` (:func:`parse_provider`) when its host does not
    tell it (a gateway, a local stub speaking for Azure).

    Raises:
        RouteError: if the spec has no ``=``, a bad name, URL or provider, or
            an unknown or repeated option.
    """
    name, sep, rest = spec.partition("=")
    if not sep:
        raise RouteError(f"--route takes NAME=URL (or NAME=URL,provider=P), got {spec!r}")
    found = _ROUTE_OPTIONS.fullmatch(rest.strip())
    assert found is not None  # (the pattern matches any string)
    options: dict[str, str] = {}
    for option in found["options"].split(",")[1:]:
        key, _, value = option.partition("=")
        if key != "provider" or key in options:
            raise RouteError(f"route {name.strip()}: unknown or repeated option {key!r}")
        options[key] = value.strip()
    return parse_upstream_url(name.strip(), found["url"], provider=options.get("provider"))


class RouteTable:
    """The routes of one proxy, matched longest prefix first."""

    def __init__(self, routes: list[Route], mcp_hosts: list[Route] | None = None) -> None:
        self.routes = sorted(routes, key=lambda r: (r.prefix == "/", -len(r.prefix)))
        self._by_host = {(r.host.lower(), r.port): r for r in routes}
        #: ``--mcp-host`` hosts (regular mode), by host; port 0 stands for any.
        self.mcp_hosts = {(r.host, r.port): r for r in mcp_hosts or ()}

    @classmethod
    def build(
        cls,
        route_specs: list[str],
        upstream: str | None,
        mcp_specs: list[str] | None = None,
        mcp_hosts: list[str] | None = None,
    ) -> RouteTable:
        """The default routes, replaced or extended by ``--route`` and ``--upstream``,
        and the MCP servers of ``--mcp`` and ``--mcp-host``.

        Raises:
            RouteError: for any bad spec, or two MCP servers of one name.
        """
        named = {n: parse_upstream_url(n, u) for n, u in DEFAULT_ROUTES.items()}
        for spec in route_specs:
            route = parse_route_spec(spec)
            named[route.name] = route
        routes = list(named.values())
        servers: dict[str, Route] = {}
        for spec in mcp_specs or ():
            route = parse_mcp_spec(spec)
            if route.name in servers:
                raise RouteError(f"--mcp {route.name} is given twice")
            servers[route.name] = route
        routes.extend(servers.values())
        if upstream:
            routes.append(parse_upstream_url(UPSTREAM_ROUTE, upstream, prefix="/"))
        return cls(routes, [mcp_host_route(host) for host in mcp_hosts or ()])

    @property
    def mcp(self) -> list[Route]:
        """The MCP servers mounted with ``--mcp``, by name."""
        return sorted((r for r in self.routes if r.mcp), key=lambda r: r.name)

    def match(self, path: str) -> Route | None:
        """The route a reverse-mode request path falls under, or None."""
        for route in self.routes:
            if route.matches(path):
                return route
        return None

    def for_host(self, host: str, port: int, scheme: str = "https") -> Route | None:
        """The route of a provider host (regular mode), or None for other hosts.

        A route whose upstream is that host and port comes first; else a host
        of :data:`PROVIDER_HOSTS` (an Azure resource, a Bedrock region, a
        Vertex region: their names vary, so no route can list them all) gets
        a route of its own, named after its provider.

        Args:
            host: the host the request names.
            port: its port.
            scheme: the request's scheme (for a provider host's route).
        """
        route = self._by_host.get((host.lower(), port))
        if route is not None:
            return route
        name = host.lower().removesuffix(".")
        server = self.mcp_hosts.get((name, port)) or self.mcp_hosts.get((name, 0))
        if server is not None:
            # The client names the host: the route is the host as it was reached.
            return Route(name, "/", scheme, name, port, "", mcp=True)
        provider = provider_of_host(host)
        if provider is None:
            return None
        return Route(provider, "/", scheme, host.lower(), port, "", provider)


# --------------------------------------------------------------------------
# Request paths
#
# SPEC 2, "No way around the audit": whatever an upstream could read as a model
# request is audited or refused. HTTP servers differ in how they turn a request
# target into a route: most percent-decode it, some collapse "//", resolve
# "..", strip ";params" (servlet containers), take "\\" for "/" (IIS), stop at
# a NUL (C code), or decode twice. So the endpoint is decided on the decoded
# path with its ";params" dropped (``routed_path``): the reading that finds the
# most endpoints (a servlet container routes /v1/chat;x/completions to
# /v1/chat/completions, a server that keeps ";" routes it nowhere). A path on
# which the other readings could disagree is refused before anything is
# forwarded (``check_path``). The path itself is forwarded exactly as the
# client sent it: Bedrock's SigV4 signature covers it.

_HEX: Final = frozenset(b"0123456789abcdefABCDEF")
#: What a decoded path may hold: RFC 3986 ``pchar`` and ``/``, minus ``%``
#: (left by a double encoding).
_PATH_CHARS: Final = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,=:@/;"
)
_DOUBLE_ENCODING: Final = re.compile(rb"%25[0-9A-Fa-f]{2}")
#: The usual path (no escape, no ``;``, no segment that is empty or ends in a
#: dot or a colon), accepted without decoding it: every request goes through here.
_PLAIN_PATH: Final = re.compile(r"(?:/[\w\-~!$&'()*+,=:@.]*[\w\-~!$&'()*+,=@])+/?|/", re.ASCII)


def split_target(target: str) -> tuple[str, str]:
    """Split a request target into its path and its query string (without ``?``).

    Args:
        target: the request target as sent, e.g. ``/v1/messages?beta=true``.

    Returns:
        ``(path, query)``; ``query`` is ``""`` when there is none.
    """
    path, _, query = target.partition("?")
    return path, query


def decoded_path(target: str) -> str:
    """The path part of a request target, percent-decoded once.

    This is what an ordinary upstream routes on: ``/v1/chat%2Fcompletions``
    decodes to ``/v1/chat/completions``. Bytes that are not UTF-8 become
    U+FFFD (such a path never matches an endpoint, and :func:`check_path`
    refuses it on a route).

    Args:
        target: the request target as sent (a query string is dropped).

    Returns:
        The decoded path.
    """
    path, _ = split_target(target)
    return unquote_to_bytes(path).decode("utf-8", "replace")


def routed_path(target: str) -> str:
    """The path an upstream may route on: decoded once, each segment's ``;params`` dropped.

    Servlet containers (Tomcat, Jetty, Spring) drop ``;name=value`` from each
    segment before routing, so ``/v1/chat;x/completions`` reaches the chat
    endpoint there; a server that keeps ``;`` routes it nowhere. Deciding on
    the dropped form finds every endpoint either reading finds.

    Args:
        target: the request target as sent (a query string is dropped).

    Returns:
        The decoded path without path parameters.
    """
    path, _ = split_target(target)
    if "%" not in path and ";" not in path:
        return path
    return "/".join(segment.split(";", 1)[0] for segment in decoded_path(target).split("/"))


def check_path(target: str) -> None:
    """Refuse a request path that upstreams could read in more than one way.

    Applied to every request under a route (and to provider hosts in regular
    mode) before anything is forwarded. Allowed: an origin-form path whose
    percent-escapes are well formed and decode to ASCII letters, digits and
    ``-._~!$&'()*+,=:@/;``, with no empty segment except a trailing slash and
    no segment that is ``.``, ``..`` or ends in a dot or a colon, with or
    without its ``;params`` (``..;x`` is Tomcat's ``..``), and no encoded
    ``;``. Encoded slashes (``%2F``, as in Bedrock model ARNs) and colons
    (``%3A``) are fine: the endpoint is decided on the decoded path
    (:func:`routed_path`).

    Args:
        target: the request target as sent (the query string is not checked).

    Raises:
        Rejected: ``noncanonical_path``, its detail naming the fault (fixed
            text, never the path).
    """
    path, _ = split_target(target)
    if _PLAIN_PATH.fullmatch(path):
        return
    raw = path.encode("utf-8", "surrogateescape")
    if not raw.startswith(b"/"):
        raise Rejected(Rule.NONCANONICAL_PATH, "not an absolute path")
    pos = raw.find(b"%")
    while pos != -1:
        if pos + 2 >= len(raw) or raw[pos + 1] not in _HEX or raw[pos + 2] not in _HEX:
            raise Rejected(Rule.NONCANONICAL_PATH, "malformed percent-escape")
        pos = raw.find(b"%", pos + 3)
    if _DOUBLE_ENCODING.search(raw):
        raise Rejected(Rule.NONCANONICAL_PATH, "double encoding")
    if b"%3B" in raw.upper():
        # Servlet containers drop ";params" before decoding (an encoded one
        # stays), others after: the two readings route it differently.
        raise Rejected(Rule.NONCANONICAL_PATH, "encoded semicolon")
    decoded = unquote_to_bytes(raw)
    bad = set(decoded) - _PATH_CHARS
    if bad:
        raise Rejected(Rule.NONCANONICAL_PATH, _fault(min(bad)))
    segments = decoded[1:].split(b"/")
    for i, segment in enumerate(segments):
        bare = segment.split(b";", 1)[0]
        if not bare and i != len(segments) - 1:
            raise Rejected(Rule.NONCANONICAL_PATH, "empty segment")
        if bare.endswith(b".") or segment.endswith(b"."):
            raise Rejected(Rule.NONCANONICAL_PATH, "dot segment")
        if bare.endswith(b":") or segment.endswith(b":"):  # x:generateContent: (a verb, or not)
            raise Rejected(Rule.NONCANONICAL_PATH, "trailing colon")


def _fault(byte: int) -> str:
    """Name what is wrong with one byte a decoded path may not hold."""
    if byte >= 0x80:
        return "non-ASCII character"
    if byte < 0x20 or byte == 0x7F:
        return "control character"
    if byte == ord("\\"):
        return "backslash"
    if byte == ord("%"):
        return "double encoding"
    return "character not allowed in a path"


#: Headers by which some frameworks (IIS URL rewrite, older Symfony and Zend)
#: route a request on another path than its request line's.
PATH_OVERRIDE_HEADERS: Final = ("x-original-url", "x-rewrite-url")


def overrides_path(header_names: Iterable[str]) -> bool:
    """True if a request carries a header some servers route on instead of its path.

    Args:
        header_names: the request's header names (any case).
    """
    return any(name.lower() in PATH_OVERRIDE_HEADERS for name in header_names)


#: Headers by which some frameworks (Google's APIs, Rails, Express middleware)
#: let a request say it is really another method.
METHOD_OVERRIDE_HEADERS: Final = ("x-http-method-override", "x-http-method", "x-method-override")


def overrides_method(header_names: Iterable[str], target: str) -> bool:
    """True if a request says it is another method than its request line's.

    Args:
        header_names: the request's header names (any case).
        target: the request target; a ``_method`` query parameter (Rails,
            Laravel, Symfony) counts too, in any case or percent-encoding.

    Returns:
        Whether a method-override header or parameter is present.
    """
    if any(name.lower() in METHOD_OVERRIDE_HEADERS for name in header_names):
        return True
    _, query = split_target(target)
    for pair in query.split("&"):
        name = pair.partition("=")[0]
        if unquote_to_bytes(name.replace("+", " ")).lower() == b"_method":
            return True
    return False
