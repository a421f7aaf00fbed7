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
from modeltap.rules.routing import Route


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


def no_route() -> Reply:
    """A path no route matches (a shape both SDKs read)."""
    message = "modeltap: no modeltap route matches this path"
    return Reply(404, neutral_error_body(message, status=404, code="modeltap_no_route"))


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
