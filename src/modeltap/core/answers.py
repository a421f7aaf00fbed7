"""What modeltap answers itself, instead of forwarding.

Every answer is a :class:`~modeltap.core.notices.Reply` in the error shape the
agent's SDK expects from its provider (:func:`modeltap.apis.error_shape_for`:
each wire's :class:`~modeltap.apis.contract.ErrorShape`), so the SDK raises a
clear error: a refusal names its rule, nothing quotes the request. The HTTP
addon puts a reply on the flow; that is the one way modeltap answers.
"""

from __future__ import annotations

from modeltap import apis
from modeltap.core.notices import Reply
from modeltap.rules.errors import Rejected, Rule, neutral_error_body
from modeltap.rules.failures import ANSWER_STATUS, PHASE_TEXT, Phase
from modeltap.rules.routing import DEFAULT_PROVIDERS, Route, RouteTable


def error(
    status: int,
    message: str,
    code: str,
    api: str | None,
    route: Route | None,
    *,
    close: bool = False,
) -> Reply:
    """An error in the shape of the provider behind ``api`` or ``route``.

    Args:
        status: the HTTP status.
        message: modeltap's own words (never request content).
        code: the machine-readable code, e.g. ``modeltap_rejected``.
        api: the exchange's API, if known.
        route: its route, if any.
        close: close the client's connection after it.
    """
    shape = apis.error_shape_for(api, route)
    body = shape.body(message, status=status, code=code)
    extra = shape.headers(status)
    headers = tuple((k, v) for k, v in extra.items() if k.lower() != "content-type")
    return Reply(status, body, close, headers)


def refusal(rejected: Rejected, api: str | None, route: Route | None) -> Reply:
    """A refused request: its rule's status and message."""
    return error(rejected.status, rejected.message, "modeltap_rejected", api, route)


def stopping() -> Reply:
    """A request that arrived after the proxy stopped (a shape both SDKs read)."""
    rejected = Rejected(Rule.PROXY_STOPPED)
    body = neutral_error_body(rejected.message, status=rejected.status, code="modeltap_rejected")
    return Reply(rejected.status, body, close=True)


def no_route(target: str, routes: RouteTable) -> Reply:
    """A path no route matches: a 404 that says which routes exist and which
    base URL reaches the one the path was meant for.

    The usual cause is a base URL without the route's prefix (the OpenAI SDK
    at ``http://127.0.0.1:8787/v1``, not ``…/openai/v1``). The answer takes
    the error shape of the API the path looks like (an OpenAI path gets
    OpenAI's, a Gemini path Google's: :func:`modeltap.apis.error_shape_for`),
    so the agent's own SDK shows the message; a path of no known API gets a
    shape both the OpenAI and the Anthropic SDKs read. It names the routes
    and the wire, never the path (it may name a model or a deployment).

    Args:
        target: the request target as sent.
        routes: the proxy's routes.
    """
    try:
        endpoint = apis.match_endpoint(target)
    except Rejected:
        endpoint = None
    mounted = [r for r in routes.routes if r.prefix != "/"]
    listed = ", ".join(sorted(r.prefix for r in mounted)) or "none"
    if endpoint is None:
        message = (
            f"modeltap: no route matches this path (routes here: {listed}); the base URL is "
            "this proxy's address followed by a route's prefix"
        )
        return Reply(404, neutral_error_body(message, status=404, code="modeltap_no_route"))
    serving = [r for r in mounted if not r.mcp and _serves(r, endpoint.api)]
    if serving:
        prefix = serving[0].prefix
        fix = (
            f"put {prefix} right after this proxy's address in the base URL (the start-up "
            "screen's export lines are right as printed)"
        )
    else:
        fix = "no route here serves it: add one with --route NAME=URL"
    article = "an" if endpoint.api[:1] in "aeiou" else "a"
    message = (
        f"modeltap: no route matches this path ({article} {endpoint.api} endpoint): {fix}. "
        f"Routes here: {listed}"
    )
    return error(404, message, "modeltap_no_route", endpoint.api, None)


def _serves(route: Route, api: str) -> bool:
    """Whether a route serves an API's wire: its provider speaks it, or, of
    unknown provider, it is named after the wire's default route (``openai``)."""
    wire = apis.provider_for(None, api)
    if route.provider is not None:
        return route.provider == wire or route.provider in apis.error_shape_for(api, None).providers
    return DEFAULT_PROVIDERS.get(route.name) == wire


def failure(kind: str, expired: Phase | None, api: str | None, route: Route | None) -> Reply:
    """The answer when modeltap ends an exchange itself (an upstream timeout):
    the provider's error shape, so the SDK raises (and may retry) as for a
    gateway timeout."""
    text = PHASE_TEXT[expired] if expired else "the upstream failed"
    status = ANSWER_STATUS[kind]
    return error(status, f"modeltap: {text} [{kind}]", f"modeltap_{kind}", api, route, close=True)


def upstream_error(status: int, message: str) -> Reply:
    """In place of mitmproxy's HTML error page (an unreachable upstream, say)."""
    text = f"modeltap: the upstream could not be reached or failed ({message})"
    body = neutral_error_body(text, status=status, code="modeltap_upstream_error")
    return Reply(status, body, close=True)
