"""What to tell clients: the environment that points an SDK at a route (pure).

The start-up screen prints, for each route in effect, the ``export`` lines that
are true for it: the variable the provider's own SDKs and agents read, set to
the URL that reaches that route through the proxy. One table
(:data:`EXPORTS`) maps a provider to its rules; a route whose provider is not
known (a local stub, a gateway: ``Route.provider`` is ``None``) may speak any
wire, so every rule of :data:`ANY_WIRE` applies to it, each saying which wire
it assumes. A route whose provider has no rules gets no line (the screen then
shows its URL). A new wire adds its provider's rules here and nothing else.

Which routes get lines is :func:`exported_routes`: all of them, unless one
upstream is mounted at ``/`` (``--upstream``), which is then what the user
means an agent to reach; the default routes stay mounted, without lines.

An MCP server (``--mcp NAME=URL``) is configured in the agent, not in its
environment: :func:`mcp_snippets` gives, per agent, the configuration that
points it at the server's mount, as each CLI was seen to take it
(tests/data/mcp/README.md, "The agent CLIs").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from modeltap.rules.routing import DEFAULT_ROUTES, UPSTREAM_ROUTE, Route, parse_upstream_url


@dataclass(frozen=True, slots=True)
class ExportLine:
    """One ``export`` line for one route.

    Attributes:
        route: the route's name.
        variable: the environment variable (``OPENAI_BASE_URL``).
        value: what to set it to.
        note: when the line holds only on a condition (the wire the route's
            upstream speaks), that condition in words; else ``None``.
        labelled: whether the screen names the route: always but for a route
            named after its provider (the default ``openai`` and ``anthropic``).
    """

    route: str
    variable: str
    value: str
    note: str | None = None
    labelled: bool = True

    @property
    def text(self) -> str:
        """The line as the screen shows it: ``VAR=value``, then the route and
        the note in parentheses when labelled."""
        return self.shown()

    def shown(self, root: str = "--upstream") -> str:
        """:attr:`text`, naming the route mounted at ``/`` as ``root``
        (``modeltap replay`` has no ``--upstream``: it says ``route /``)."""
        line = f"{self.variable}={self.value}"
        if self.labelled:
            where = root if self.route == UPSTREAM_ROUTE else f"route {self.route}"
            line += f"  ({where}{', ' + self.note if self.note else ''})"
        return line


#: A rule: from a route and the URL that reaches it through the proxy (the
#: proxy's address and the route's prefix), the variable and value (and, when
#: the line holds only for some clients or credentials, a note saying which),
#: or ``None`` when no value is true for that route.
Rule = Callable[[Route, str], tuple[str, str] | tuple[str, str, str] | None]


def _openai_base_url(route: Route, base: str) -> tuple[str, str] | None:
    # The OpenAI SDKs append /chat/completions (/responses) to a base that
    # ends in the API version; add it unless the upstream's own base has it.
    return "OPENAI_BASE_URL", base if route.base_path.endswith("/v1") else f"{base}/v1"


def _anthropic_base_url(route: Route, base: str) -> tuple[str, str] | None:
    # The Anthropic SDKs and Claude Code append /v1/messages themselves: no
    # value is true for an upstream whose base already ends in /v1.
    return None if route.base_path.endswith("/v1") else ("ANTHROPIC_BASE_URL", base)


# --- The clouds (each variable checked against what the real clients read,
# research/shapes/*/NOTES.md). A rule with a note returns it third.


def _azure_endpoint(route: Route, base: str) -> tuple[str, str] | None:
    # AzureOpenAI (openai SDKs) reads AZURE_OPENAI_ENDPOINT and appends
    # /openai/deployments/... or /openai/responses: the resource's root.
    if route.base_path.endswith(("/openai", "/openai/v1")):
        return None
    return "AZURE_OPENAI_ENDPOINT", base


def _azure_v1_base_url(route: Route, base: str) -> tuple[str, str, str] | None:
    # Azure's v1 API is the OpenAI wire under {resource}/openai/v1: the plain
    # OpenAI client takes it as its base URL.
    if route.base_path.endswith("/openai/v1"):
        url = base
    elif route.base_path.endswith("/openai"):
        url = f"{base}/v1"
    else:
        url = f"{base}/openai/v1"
    return "OPENAI_BASE_URL", url, "Azure's v1 API with the OpenAI client"


def _anthropic_bedrock_base_url(route: Route, base: str) -> tuple[str, str, str] | None:
    # AnthropicBedrock and Claude Code (CLAUDE_CODE_USE_BEDROCK=1) append
    # /model/{id}/invoke...; Claude Code sends its /inference-profiles calls there too.
    # A SigV4 request cannot be forwarded in reverse mode: a Bedrock API key can.
    return (
        "ANTHROPIC_BEDROCK_BASE_URL",
        base,
        "with a Bedrock API key, AWS_BEARER_TOKEN_BEDROCK; SigV4 needs --mode regular",
    )


def _boto_bedrock_endpoint(route: Route, base: str) -> tuple[str, str, str] | None:
    # boto3 (and the other AWS SDKs) read the service's endpoint variable, keep
    # its path, and send a bearer token only over HTTPS: the proxy's port
    # answers TLS too, with a certificate from mitmproxy's CA.
    return (
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
        "https://" + base.split("://", 1)[1],
        "boto3 with AWS_BEARER_TOKEN_BEDROCK, over TLS: AWS_CA_BUNDLE=the CA cert",
    )


def _anthropic_vertex_base_url(route: Route, base: str) -> tuple[str, str] | None:
    # AnthropicVertex and Claude Code (CLAUDE_CODE_USE_VERTEX=1) read
    # ANTHROPIC_VERTEX_BASE_URL, whose default ends in /v1, and append
    # /projects/{p}/locations/{r}/publishers/anthropic/models/...
    return "ANTHROPIC_VERTEX_BASE_URL", base if route.base_path.endswith("/v1") else f"{base}/v1"


#: A base path that ends in an API version (``/v1``, ``/v1beta1``).
_VERSIONED: Final = re.compile(r"/v\d+[a-z0-9]*$")


#: Gemini CLI's Code Assist host (Google sign-in).
_CODE_ASSIST_HOST: Final = "cloudcode-pa.googleapis.com"


def _gemini_base_url(route: Route, base: str) -> tuple[str, str] | None:
    # The google-genai SDKs (Python, Node) and Gemini CLI read
    # GOOGLE_GEMINI_BASE_URL and append /{version}/models/...: no value is
    # true for an upstream whose base already names a version. Code Assist
    # speaks Gemini too, but only the CLI reaches it, at
    # $CODE_ASSIST_ENDPOINT/v1internal:...
    if route.host.lower().rstrip(".") == _CODE_ASSIST_HOST:
        return None if route.base_path else ("CODE_ASSIST_ENDPOINT", base)
    if _VERSIONED.search(route.base_path):
        return None
    return "GOOGLE_GEMINI_BASE_URL", base


def _google_vertex_base_url(route: Route, base: str) -> tuple[str, str] | None:
    # With GOOGLE_GENAI_USE_VERTEXAI=true the same clients read
    # GOOGLE_VERTEX_BASE_URL and append /{version}/projects/{p}/locations/{l}/...
    # (or /{version}/publishers/... with an API key).
    if _VERSIONED.search(route.base_path):
        return None
    return "GOOGLE_VERTEX_BASE_URL", base


#: Each provider's rules, by ``gen_ai.provider.name``.
EXPORTS: Final[dict[str, tuple[Rule, ...]]] = {
    "openai": (_openai_base_url,),
    "anthropic": (_anthropic_base_url,),
    "azure.ai.openai": (_azure_endpoint, _azure_v1_base_url),
    "aws.bedrock": (_anthropic_bedrock_base_url, _boto_bedrock_endpoint),
    "gcp.vertex_ai": (_anthropic_vertex_base_url, _google_vertex_base_url),
    "gcp.gemini": (_gemini_base_url,),
}

#: For a route of unknown provider: each rule with the wire it assumes, and
#: the default route of that wire (``--route openai=URL`` replaces it: that
#: route speaks OpenAI, and gets only OpenAI's line).
ANY_WIRE: Final[tuple[tuple[Rule, str, str], ...]] = (
    (_openai_base_url, "if it speaks OpenAI", "openai"),
    (_anthropic_base_url, "if it speaks Anthropic", "anthropic"),
    (_gemini_base_url, "if it speaks Gemini", "gemini"),
)


def export_lines(routes: Iterable[Route], proxy_url: str) -> list[ExportLine]:
    """The true ``export`` lines for each route, in route order.

    Args:
        routes: the routes in effect (reverse mode).
        proxy_url: the proxy's own URL (``http://127.0.0.1:8787``).

    Returns:
        The lines; none for a route whose provider has no rules in
        :data:`EXPORTS`. A guess (:data:`ANY_WIRE`: a route of unknown
        provider) gives way to a default route that serves the variable's
        API, so ``--route stub=URL`` does not print a second
        ``ANTHROPIC_BASE_URL`` beside the ``anthropic`` route's. Two lines
        the user asked for (``--upstream`` and a ``--route``) both stay,
        each labelled.
    """
    out: list[tuple[ExportLine, bool]] = []
    for route in routes:
        if route.mcp:
            continue  # an MCP server is configured in the agent: mcp_snippets
        base = proxy_url.rstrip("/") + ("" if route.prefix == "/" else route.prefix)
        rules: list[tuple[Rule, str | None]]
        guessed = route.provider is None
        if not guessed:
            rules = [(rule, None) for rule in EXPORTS.get(route.provider or "", ())]
        elif route.name in {wire for _, _, wire in ANY_WIRE}:
            # Named after a wire's default route, which it replaces: it serves that wire.
            rules = [(rule, None) for rule, _, wire in ANY_WIRE if wire == route.name]
            guessed = False
        else:
            rules = [(rule, note) for rule, note, _ in ANY_WIRE]
        for rule, note in rules:
            found = rule(route, base)
            if found is not None:
                labelled = route.name != route.provider
                said = found[2] if len(found) == 3 else None
                notes = ", ".join(n for n in (note, said) if n) or None
                line = ExportLine(route.name, found[0], found[1], notes, labelled)
                out.append((line, guessed))
    defaults = {line.route for line, _ in out if _is_default(line.route, routes)}
    served = {line.variable for line, guessed in out if not guessed and line.route in defaults}
    return [line for line, guessed in out if not guessed or line.variable not in served]


def _is_default(name: str, routes: Iterable[Route]) -> bool:
    """Whether the route of that name is a default route as it comes (not replaced)."""
    if name not in DEFAULT_ROUTES:
        return False
    default = parse_upstream_url(name, DEFAULT_ROUTES[name])
    return any(route == default for route in routes)


def exported_routes(routes: Sequence[Route], named: Collection[str]) -> list[Route]:
    """The routes to print ``export`` lines for.

    Args:
        routes: the routes in effect, in order.
        named: the names of the routes given with ``--route``.

    Returns:
        Every route; but when one upstream is mounted at ``/`` (``--upstream``),
        only it and the routes named with ``--route``: the default routes stay
        mounted, yet an agent pointed at ``/openai/v1`` would reach
        api.openai.com, not the upstream the user asked for.
    """
    if not any(route.prefix == "/" for route in routes):
        return list(routes)
    return [route for route in routes if route.prefix == "/" or route.name in named]


@dataclass(frozen=True, slots=True)
class McpSnippet:
    """How one agent is pointed at an MCP server through the proxy.

    Attributes:
        agent: the agent (``Claude Code``, ``Codex``, ``Gemini CLI``).
        text: the command to run, or the configuration to write.
        where: the file the configuration goes into, or ``None`` for a command.
    """

    agent: str
    text: str
    where: str | None = None


def mcp_url(route: Route, proxy_url: str) -> str:
    """The URL that reaches an MCP server's mount through the proxy."""
    return proxy_url.rstrip("/") + route.prefix


def mcp_snippets(name: str, url: str) -> list[McpSnippet]:
    """The configuration that points each agent CLI at an MCP server (Streamable HTTP).

    Each was checked by running that CLI against a local server through the
    proxy (tests/data/mcp/README.md): Claude Code's ``claude mcp add``
    (``--transport http``), Codex's ``[mcp_servers.NAME]`` table with ``url``,
    Gemini CLI's ``mcpServers`` entry with ``httpUrl``. The agent then names
    the server's tools after ``name``, which is how a model's tool call is
    paired with its execution: keep the ``--mcp`` name.

    Args:
        name: the server's name (``--mcp NAME``), also the agent's name for it.
        url: :func:`mcp_url`.
    """
    return [
        McpSnippet("Claude Code", f"claude mcp add --transport http {name} {url}"),
        McpSnippet("Codex", f'[mcp_servers.{name}] url = "{url}"', "~/.codex/config.toml"),
        McpSnippet(
            "Gemini CLI",
            f'{{"mcpServers": {{"{name}": {{"httpUrl": "{url}"}}}}}}',
            "~/.gemini/settings.json",
        ),
    ]
