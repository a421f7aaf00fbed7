"""AWS Bedrock: its own wire, Converse (``POST /model/{modelId}/converse |
converse-stream``), and what Bedrock Runtime adds to every wire it carries.

Converse is Bedrock's own wire, one shape for every model family; the model
is the path's (the body has none). The package meets
:class:`~modeltap.apis.contract.WireApi`: its identity and endpoint here, the
request side in :mod:`~modeltap.apis.bedrock_converse.audit`, the response
side in :mod:`~modeltap.apis.bedrock_converse.observe`, what telemetry reads
in :mod:`~modeltap.apis.bedrock_converse.content`. What Bedrock Runtime does
alike for Converse and for the Anthropic Messages it runs on InvokeModel is
here too: the meaning of its binary event streams
(:mod:`~modeltap.apis.bedrock_converse.stream`; their framing is
:mod:`modeltap.wire.eventstream`'s) and the facts its response headers carry
(:mod:`~modeltap.apis.bedrock_converse.runtime`).
"""

from __future__ import annotations

from typing import Final

from modeltap.apis import cloud_paths
from modeltap.apis.bedrock_converse.audit import audit_request, set_image_detail
from modeltap.apis.bedrock_converse.content import (
    FINISH_REASONS,
    request_content,
    request_settings,
    response_content,
    usage_totals,
)
from modeltap.apis.bedrock_converse.observe import StreamObserver, observe_json
from modeltap.apis.bedrock_converse.runtime import ERROR_SHAPE, PROVIDER, RESPONSE_HEADERS
from modeltap.apis.bedrock_converse.runtime import with_response_headers as response_header_facts
from modeltap.apis.bedrock_converse.stream import EVENT_STREAM
from modeltap.apis.contract import EndpointMatch, ErrorShape, compared_as_sent

#: The record's ``api``.
NAME: Final = "bedrock.converse"
OPENAI_API_TYPE: Final = None
#: ``inputTokens``, ``outputTokens``, ``totalTokens``, on every response.
#: ``cacheReadInputTokens`` / ``cacheWriteInputTokens`` come only when prompt
#: caching is in play, and Converse has no reasoning count: their absence says
#: nothing about completeness.
REPORTED_USAGE: Final = frozenset({"input_tokens", "output_tokens", "total_tokens"})
#: Its spans' ``gen_ai.operation.name``: the conventions' ``chat``.
OPERATION_NAME: Final = "chat"
#: It has no WebSocket mode.
WEBSOCKET: Final = None
#: A replay compares its bodies as sent (but for the fields no wire compares).
comparable_body: Final = compared_as_sent
#: ``converse-stream`` answers with Bedrock's binary event stream.
FRAMINGS: Final = (EVENT_STREAM,)


def match_endpoint(path: str) -> EndpointMatch | None:
    """Match ``/model/{modelId}/converse`` and ``/converse-stream`` (see
    :func:`~modeltap.apis.cloud_paths.bedrock_converse`)."""
    return cloud_paths.bedrock_converse(path, NAME)


def error_shape(provider: str | None) -> ErrorShape:
    """AWS's, on every route (:data:`~modeltap.apis.bedrock_converse.runtime.ERROR_SHAPE`)."""
    return ERROR_SHAPE


__all__ = [
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
