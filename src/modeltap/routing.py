"""Routes: which upstream a request goes to (pure; no mitmproxy).

In reverse mode a route is a path prefix (``/openai``) mounted on an upstream
URL (``https://api.openai.com``); the prefix is stripped and the upstream's own
base path is put in front. In regular (forward proxy) mode the request already
names its host; a route then only tells that the host is a model provider.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from modeltap.records import API_ANTHROPIC, API_CHAT, API_RESPONSES

DEFAULT_ROUTES: dict[str, str] = {
    "openai": "https://api.openai.com",
    "anthropic": "https://api.anthropic.com",
}

#: The route name used by ``--upstream URL`` (mounted at ``/``).
UPSTREAM_ROUTE = "upstream"


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
        if not rest.startswith("/"):
            rest = "/" + rest
        return (self.base_path + rest) if self.base_path else rest

    def matches(self, path: str) -> bool:
        """True if ``path`` lies under this route's prefix."""
        if self.prefix == "/":
            return True
        return path == self.prefix or path.startswith((self.prefix + "/", self.prefix + "?"))


def parse_upstream_url(name: str, url: str, prefix: str | None = None) -> Route:
    """Build a route from an upstream URL.

    Args:
        name: the route name (letters, digits, ``-``, ``_``, ``.``).
        url: ``http(s)://host[:port][/base]``.
        prefix: the mount point; ``/{name}`` when omitted.

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
        raise RouteError(f"route {name}: the upstream must be an http:// or https:// URL") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise RouteError(f"route {name}: the upstream must be an http:// or https:// URL")
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
    )


def parse_route_spec(spec: str) -> Route:
    """Parse ``NAME=URL`` (the ``--route`` option).

    Raises:
        RouteError: if the spec has no ``=`` or a bad name or URL.
    """
    name, sep, url = spec.partition("=")
    if not sep:
        raise RouteError(f"--route takes NAME=URL, got {spec!r}")
    return parse_upstream_url(name.strip(), url.strip())


class RouteTable:
    """The routes of one proxy, matched longest prefix first."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes = sorted(routes, key=lambda r: (r.prefix == "/", -len(r.prefix)))
        self._by_host = {(r.host.lower(), r.port): r for r in routes}

    @classmethod
    def build(cls, route_specs: list[str], upstream: str | None) -> RouteTable:
        """The default routes, replaced or extended by ``--route`` and ``--upstream``.

        Raises:
            RouteError: for any bad spec.
        """
        named = {n: parse_upstream_url(n, u) for n, u in DEFAULT_ROUTES.items()}
        for spec in route_specs:
            route = parse_route_spec(spec)
            named[route.name] = route
        routes = list(named.values())
        if upstream:
            routes.append(parse_upstream_url(UPSTREAM_ROUTE, upstream, prefix="/"))
        return cls(routes)

    def match(self, path: str) -> Route | None:
        """The route a reverse-mode request path falls under, or None."""
        for route in self.routes:
            if route.matches(path):
                return route
        return None

    def for_host(self, host: str, port: int) -> Route | None:
        """The route of a provider host (regular mode), or None for other hosts."""
        return self._by_host.get((host.lower(), port))


def error_shape_for(api: str | None, route: Route | None) -> str:
    """Which provider's error shape an agent expects: ``openai`` or ``anthropic``."""
    if api == API_ANTHROPIC:
        return "anthropic"
    if api in (API_CHAT, API_RESPONSES):
        return "openai"
    if route is not None and "anthropic" in (route.name + route.host).lower():
        return "anthropic"
    return "openai"
