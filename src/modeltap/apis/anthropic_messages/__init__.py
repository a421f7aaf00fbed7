"""Anthropic Messages (``POST .../messages``): one wire, one package.

The same wire runs on the clouds without a body ``model``: Bedrock's
InvokeModel and InvokeModelWithResponseStream (``/model/{modelId}/invoke``,
``/invoke-with-response-stream``) and Vertex's ``:rawPredict`` and
``:streamRawPredict``; the path names the model and, for the stream forms,
the stream. This one package reads it wherever it runs. Bedrock's streams
arrive as binary event streams whose chunks are these same events
(:mod:`modeltap.apis.bedrock_converse.stream`).

The package meets :class:`~modeltap.apis.contract.WireApi`: its identity and
endpoints here, the request side in :mod:`~modeltap.apis.anthropic_messages.audit`,
the response side in :mod:`~modeltap.apis.anthropic_messages.observe`, and
what telemetry reads in :mod:`~modeltap.apis.anthropic_messages.content`.
"""

from __future__ import annotations

from typing import Final

import orjson

from modeltap.apis import cloud_paths
from modeltap.apis.anthropic_messages.audit import audit_request, set_image_detail
from modeltap.apis.anthropic_messages.content import (
    FINISH_REASONS,
    request_content,
    request_settings,
    response_content,
    usage_totals,
)
from modeltap.apis.anthropic_messages.observe import BEDROCK_METRICS, StreamObserver, observe_json
from modeltap.apis.bedrock_converse import runtime as bedrock
from modeltap.apis.bedrock_converse.stream import EVENT_STREAM
from modeltap.apis.contract import (
    SSE,
    EndpointMatch,
    ErrorShape,
    compared_as_sent,
    match_suffix,
    no_header_facts,
)
from modeltap.rules.errors import error_kind

#: The record's ``api``.
NAME: Final = "anthropic.messages"
ENDPOINT: Final = "/messages"
PROVIDER: Final = "anthropic"
OPENAI_API_TYPE: Final = None
#: ``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``,
#: ``cache_creation_input_tokens``; Messages reports no total (it is the sum of
#: the four) and no reasoning count (thinking is inside ``output_tokens``).
REPORTED_USAGE: Final = frozenset(
    {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"}
)
#: Its spans' ``gen_ai.operation.name``: the conventions' ``chat``.
OPERATION_NAME: Final = "chat"
#: It has no WebSocket mode.
WEBSOCKET: Final = None
#: A replay compares its bodies as sent (but for the fields no wire compares).
comparable_body: Final = compared_as_sent
#: SSE from Anthropic and Vertex; Bedrock's InvokeModelWithResponseStream wraps
#: the same events in its binary event stream.
FRAMINGS: Final = (SSE, EVENT_STREAM)
#: Its own headers say nothing the body does not (on a route to Bedrock,
#: Bedrock Runtime's are read: :meth:`Wire.response_header_facts`).
RESPONSE_HEADERS: Final[tuple[str, ...]] = ()
response_header_facts: Final = no_header_facts


def match_endpoint(path: str) -> EndpointMatch | None:
    """Match a path ending in :data:`ENDPOINT` (see :meth:`WireApi.match_endpoint`),
    or a cloud's path carrying Messages bodies without ``model``: Bedrock's
    ``/model/{modelId}/invoke`` and ``/invoke-with-response-stream``
    (:func:`~modeltap.apis.cloud_paths.bedrock_invoke`), Vertex's
    ``…/publishers/anthropic/models/{model}:rawPredict`` and
    ``:streamRawPredict`` (:func:`~modeltap.apis.cloud_paths.vertex_anthropic`)."""
    return (
        cloud_paths.bedrock_invoke(path, NAME)
        or cloud_paths.vertex_anthropic(path, NAME)
        or match_suffix(path, ENDPOINT, NAME)
    )


def _anthropic_error(message: str, status: int, code: str) -> bytes:
    """``{"type": "error", "error": {type, message}}``, as Anthropic's API answers errors."""
    return orjson.dumps(
        {"type": "error", "error": {"type": error_kind(status), "message": message}}
    )


#: The errors Anthropic's SDKs read.
ERROR_SHAPE: Final = ErrorShape("anthropic", _anthropic_error, frozenset({PROVIDER}))


def error_shape(provider: str | None) -> ErrorShape:
    """:data:`ERROR_SHAPE`; on a route to Bedrock, AWS's (InvokeModel answers
    errors the AWS way whatever the body's wire: boto3 and AnthropicBedrock
    read ``x-amzn-ErrorType``, :data:`modeltap.apis.bedrock_converse.runtime.ERROR_SHAPE`)."""
    return bedrock.ERROR_SHAPE if provider == bedrock.PROVIDER else ERROR_SHAPE


__all__ = [
    "BEDROCK_METRICS",
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
