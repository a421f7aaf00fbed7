"""OpenAI Chat Completions (``POST .../chat/completions``): one wire, one package.

The package meets :class:`~modeltap.apis.contract.WireApi`: its identity and
endpoint here, the request side in :mod:`~modeltap.apis.openai_chat.audit`
(SPEC section 2), the response side in :mod:`~modeltap.apis.openai_chat.observe`
(SPEC section 4: a JSON body, or a stream of ``data: {chunk}`` events ending
in ``data: [DONE]``), and what telemetry reads in
:mod:`~modeltap.apis.openai_chat.content`.
"""

from __future__ import annotations

from typing import Final

import orjson

from modeltap.apis import cloud_paths
from modeltap.apis.contract import (
    SSE,
    EndpointMatch,
    ErrorShape,
    compared_as_sent,
    match_suffix,
    no_header_facts,
)
from modeltap.apis.openai_chat.audit import audit_request, set_image_detail
from modeltap.apis.openai_chat.content import (
    request_content,
    request_settings,
    response_content,
    usage_totals,
)
from modeltap.apis.openai_chat.observe import FINISH_REASONS, StreamObserver, observe_json
from modeltap.rules.errors import error_kind

#: The record's ``api``.
NAME: Final = "openai.chat_completions"
ENDPOINT: Final = "/chat/completions"
PROVIDER: Final = "openai"
OPENAI_API_TYPE: Final = "chat_completions"
#: ``prompt_tokens``, ``completion_tokens``, ``total_tokens``,
#: ``prompt_tokens_details.cached_tokens``, ``completion_tokens_details.reasoning_tokens``;
#: chat has no field for cache writes.
REPORTED_USAGE: Final = frozenset(
    {"input_tokens", "output_tokens", "total_tokens", "cache_read_tokens", "reasoning_tokens"}
)
#: Its spans' ``gen_ai.operation.name``: the conventions' ``chat``.
OPERATION_NAME: Final = "chat"
#: It has no WebSocket mode.
WEBSOCKET: Final = None
#: A replay compares its bodies as sent (but for the fields no wire compares).
comparable_body: Final = compared_as_sent
#: ``stream: true`` answers with SSE, ending in ``data: [DONE]``.
FRAMINGS: Final = (SSE,)
#: Its headers (``x-request-id``) say nothing the body does not.
RESPONSE_HEADERS: Final[tuple[str, ...]] = ()
response_header_facts: Final = no_header_facts


def match_endpoint(path: str) -> EndpointMatch | None:
    """Match a path ending in :data:`ENDPOINT` (see :meth:`WireApi.match_endpoint`).

    Azure OpenAI's deployment form (``/openai/deployments/{deployment}/chat/completions``)
    names the model in the path: the deployment is what runs, whatever
    ``model`` the body sends (:func:`~modeltap.apis.cloud_paths.azure_deployment_chat`).
    """
    return cloud_paths.azure_deployment_chat(path, NAME) or match_suffix(path, ENDPOINT, NAME)


def _openai_error(message: str, status: int, code: str) -> bytes:
    """``{"error": {message, type, param, code}}``, as OpenAI's API answers errors."""
    error = {"message": message, "type": error_kind(status), "param": None, "code": code}
    return orjson.dumps({"error": error})


#: The errors OpenAI's SDKs read, from OpenAI and from Azure OpenAI alike
#: (both of OpenAI's wires answer so).
ERROR_SHAPE: Final = ErrorShape("openai", _openai_error, frozenset({"openai", "azure.ai.openai"}))


def error_shape(provider: str | None) -> ErrorShape:
    """:data:`ERROR_SHAPE`, on every route (see :meth:`Wire.error_shape`)."""
    return ERROR_SHAPE


__all__ = [
    "ENDPOINT",
    "ERROR_SHAPE",
    "FINISH_REASONS",
    "FRAMINGS",
    "NAME",
    "OPENAI_API_TYPE",
    "OPERATION_NAME",
    "PROVIDER",
    "REPORTED_USAGE",
    "RESPONSE_HEADERS",
    "WEBSOCKET",
    "StreamObserver",
    "audit_request",
    "comparable_body",
    "error_shape",
    "match_endpoint",
    "observe_json",
    "request_content",
    "request_settings",
    "response_content",
    "response_header_facts",
    "set_image_detail",
    "usage_totals",
]
