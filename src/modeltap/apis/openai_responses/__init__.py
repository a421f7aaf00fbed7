"""OpenAI Responses API (``POST .../responses``): one wire, one package.

Pure: a request body gives :class:`~modeltap.evidence.records.RequestFacts`
(or a :class:`~modeltap.rules.errors.Rejected`), a Response object or a
stream of Responses events gives :class:`~modeltap.evidence.records.ResponseFacts`.
The package meets :class:`~modeltap.apis.contract.WireApi`: its identity and
endpoints here, what its items are in :mod:`~modeltap.apis.openai_responses.items`,
the request side in :mod:`~modeltap.apis.openai_responses.audit`, the
response side in :mod:`~modeltap.apis.openai_responses.observe`, what
telemetry reads in :mod:`~modeltap.apis.openai_responses.content`, and the
WebSocket mode (SPEC section 3), which sends the same bodies and events, in
:mod:`~modeltap.apis.openai_responses.websocket`.

``POST …/responses/compact`` (:data:`COMPACT_ENDPOINT`) takes a Responses
body and runs the model over it: it is audited by the same rules, its match
naming the operation ``compact``.
"""

from __future__ import annotations

from typing import Final

from modeltap.apis.contract import (
    SSE,
    EndpointMatch,
    ErrorShape,
    compared_as_sent,
    match_suffix,
    no_header_facts,
)
from modeltap.apis.openai_chat import ERROR_SHAPE
from modeltap.apis.openai_responses import websocket
from modeltap.apis.openai_responses.audit import (
    SERVER_STATE_FIELDS,
    audit_request,
    continues_server_state,
    set_image_detail,
    unstated_settings,
)
from modeltap.apis.openai_responses.content import (
    request_content,
    request_settings,
    response_content,
    usage_totals,
)
from modeltap.apis.openai_responses.items import FINISH_REASONS
from modeltap.apis.openai_responses.observe import StreamObserver, observe_json
from modeltap.apis.websocket_mode import WebSocketMode
from modeltap.evidence.records import OPERATION_COMPACT

#: The record's ``api``.
NAME: Final = "openai.responses"
ENDPOINT: Final = "/responses"
PROVIDER: Final = "openai"
OPENAI_API_TYPE: Final = "responses"
#: ``input_tokens``, ``output_tokens``, ``total_tokens``,
#: ``input_tokens_details.cached_tokens``, ``output_tokens_details.reasoning_tokens``;
#: the Responses API has no field for cache writes.
REPORTED_USAGE: Final = frozenset(
    {"input_tokens", "output_tokens", "total_tokens", "cache_read_tokens", "reasoning_tokens"}
)
#: Its spans' ``gen_ai.operation.name``: the conventions' ``chat``.
OPERATION_NAME: Final = "chat"
#: Its WebSocket mode: ``response.create`` messages audited one by one.
WEBSOCKET: Final[WebSocketMode] = websocket
#: A replay compares its bodies as sent (but for the fields no wire compares).
comparable_body: Final = compared_as_sent
#: ``stream: true`` answers with SSE (the WebSocket mode sends the same events
#: as messages: :mod:`~modeltap.apis.openai_responses.websocket`).
FRAMINGS: Final = (SSE,)
RESPONSE_HEADERS: Final[tuple[str, ...]] = ()
response_header_facts: Final = no_header_facts


#: The compaction endpoint (``client.responses.compact``, Codex's context
#: compaction): a Responses body (``model``, ``input``, ``instructions``, maybe
#: ``tools`` and ``previous_response_id``), answered with one JSON
#: ``response.compaction`` object; it runs the model, so it is audited.
COMPACT_ENDPOINT: Final = "/responses/compact"


def match_endpoint(path: str) -> EndpointMatch | None:
    """Match a path ending in :data:`ENDPOINT`, or in :data:`COMPACT_ENDPOINT`
    (operation ``compact``); see :meth:`WireApi.match_endpoint`.

    Only the whole last segment ``compact`` after ``responses`` is the
    compaction: ``/responses/{id}`` and ``/responses/{id}/cancel`` name a
    stored response, not a model request, and match nothing.
    """
    if path.lower().endswith(COMPACT_ENDPOINT):
        return EndpointMatch(NAME, operation=OPERATION_COMPACT)
    return match_suffix(path, ENDPOINT, NAME)


def error_shape(provider: str | None) -> ErrorShape:
    """OpenAI's error shape, as for Chat Completions (one SDK reads both wires'
    errors: :data:`modeltap.apis.openai_chat.ERROR_SHAPE`)."""
    return ERROR_SHAPE


__all__ = [
    "COMPACT_ENDPOINT",
    "ENDPOINT",
    "FINISH_REASONS",
    "FRAMINGS",
    "NAME",
    "OPENAI_API_TYPE",
    "OPERATION_NAME",
    "PROVIDER",
    "REPORTED_USAGE",
    "RESPONSE_HEADERS",
    "SERVER_STATE_FIELDS",
    "WEBSOCKET",
    "StreamObserver",
    "audit_request",
    "comparable_body",
    "continues_server_state",
    "error_shape",
    "match_endpoint",
    "observe_json",
    "request_content",
    "request_settings",
    "response_content",
    "response_header_facts",
    "set_image_detail",
    "unstated_settings",
    "usage_totals",
]
