"""The wire APIs modeltap audits, and dispatch to their pure modules.

Each module (``openai_chat``, ``openai_responses``, ``anthropic_messages``)
offers the same four things:

- ``audit_request(body: Json) -> RequestFacts`` (raises ``Rejected``);
- ``set_image_detail(body: Json, detail: str) -> int``: rewrite every image's
  detail in place, return how many were rewritten;
- ``observe_json(body: object, facts: RequestFacts | None) -> ResponseFacts``;
- ``StreamObserver(facts)`` with ``feed(SSEEvent) -> bool`` (True when the
  event carried model output), ``done`` (the terminal event was seen) and
  ``finish(error: str | None) -> ResponseFacts``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Protocol

from modeltap.records import API_ANTHROPIC, API_CHAT, API_RESPONSES, RequestFacts, ResponseFacts
from modeltap.routing import routed_path
from modeltap.sse import SSEEvent

_SUFFIXES = (
    ("/chat/completions", API_CHAT),
    ("/responses", API_RESPONSES),
    ("/messages", API_ANTHROPIC),
)


def api_for_path(method: str, path: str) -> str | None:
    """Return the API a request targets, or ``None`` if it is not a model request.

    Model endpoints are POSTs to a path ending in ``/chat/completions``,
    ``/responses`` or ``/messages``, whatever the query string. The path is
    read as an upstream reads it (see :func:`endpoint_of`), so an encoding
    cannot hide an endpoint.

    Args:
        method: the HTTP method.
        path: the request target as sent, possibly with a query string.
    """
    if method.upper() != "POST":
        return None
    return endpoint_of(path)


def endpoint_of(path: str) -> str | None:
    """Return the API whose endpoint a path names, whatever the method.

    Decided on the percent-decoded path without ``;params``
    (:func:`~modeltap.routing.routed_path`: ``/v1/chat%2Fcompletions``,
    ``/v1/respons%65s`` and ``/v1/chat;x/completions`` name endpoints),
    compared without regard to case (some servers route case-insensitively),
    ignoring the query string and one trailing slash.

    Args:
        path: the request target as sent.
    """
    bare = routed_path(path).lower()
    if bare.endswith("/"):
        bare = bare[:-1]
    for suffix, api in _SUFFIXES:
        if bare.endswith(suffix):
            return api
    return None


def api_for_ws_path(path: str) -> str | None:
    """Return the API a WebSocket handshake path names (see :func:`endpoint_of`)."""
    return endpoint_of(path)


def is_models_listing(method: str, path: str) -> bool:
    """True for ``GET .../models`` (and ``.../models/{id}``), passed through unaudited."""
    bare = path.split("?", 1)[0].rstrip("/")
    parts = bare.split("/")
    return method.upper() == "GET" and ("models" in parts[-2:])


class StreamObserver(Protocol):
    """What every API's stream observer offers (see the module docstring)."""

    def feed(self, event: SSEEvent) -> bool: ...

    @property
    def done(self) -> bool: ...

    def finish(self, error: str | None = None) -> ResponseFacts: ...


def module_for(api: str) -> ModuleType:
    """Return the pure module implementing ``api``.

    Raises:
        KeyError: for an unknown API name.
    """
    if not _MODULES:  # imported on first use: the API modules import this one
        from modeltap.apis import anthropic_messages, openai_chat, openai_responses

        _MODULES.update(
            {
                API_CHAT: openai_chat,
                API_RESPONSES: openai_responses,
                API_ANTHROPIC: anthropic_messages,
            }
        )
    return _MODULES[api]


_MODULES: dict[str, ModuleType] = {}


def provider_of(api: str) -> str:
    """The ``gen_ai.provider.name`` of an API: ``openai`` or ``anthropic``."""
    return "anthropic" if api == API_ANTHROPIC else "openai"


__all__ = [
    "RequestFacts",
    "ResponseFacts",
    "StreamObserver",
    "api_for_path",
    "api_for_ws_path",
    "endpoint_of",
    "is_models_listing",
    "module_for",
    "provider_of",
]
