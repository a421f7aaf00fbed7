"""Span and metric attribute values, read from records, events and the API modules.

The names are :mod:`modeltap.telemetry.conventions`'; the values that depend
on an API (provider, OpenAI API type, content, usage totals) are asked of the
API's module (:class:`modeltap.apis.contract.WireApi`): nothing here reads a
body by key, so a new wire needs nothing here.

Rules of the conventions applied here, once for every API:

- the sampling attributes (operation, provider, request model, ``server.*``)
  are known when the span starts (:func:`start_attributes`);
- ``gen_ai.request.stream`` only when the request streamed ("if unset, the
  request is assumed to be non-streaming"); ``gen_ai.request.choice.count``
  only when it is not 1; ``openai.request.service_tier`` only when it is not
  ``auto``;
- ``gen_ai.usage.input_tokens`` counts every input token, cached ones
  included, and ``output_tokens`` every output token (the API module's
  :meth:`~modeltap.apis.contract.WireApi.usage_totals`);
- ``openai.*`` attributes only on spans whose provider is OpenAI (the provider
  name "identifies the telemetry format flavor").

Content (prompts, outputs) is read only when content capture is on; each
value is cut to :data:`CONTENT_LIMIT` bytes of valid JSON, and the span's
``modeltap.content.cut`` lists the attributes that were cut.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlsplit

import orjson

from modeltap import apis
from modeltap.apis.message_parts import bound_json
from modeltap.evidence.records import (
    AuditRecord,
    Json,
    RequestSettings,
    ResponseEvent,
    ResponseFacts,
    ToolCall,
    Usage,
)
from modeltap.telemetry import conventions as names

__all__ = [
    "CONTENT_LIMIT",
    "AttributeValue",
    "Attributes",
    "api_identity",
    "content_attributes",
    "content_values",
    "cost_attributes",
    "metric_attributes",
    "output_attributes",
    "provider_of",
    "response_attributes",
    "server_address",
    "start_attributes",
    "tool_attributes",
    "usage_totals",
]

#: Longest captured content per attribute, in bytes; Jaeger struggles with huge tags.
CONTENT_LIMIT: Final = 64 * 1024

AttributeValue = str | int | float | bool | list[str]
Attributes = dict[str, AttributeValue]


def _present(values: dict[str, Any]) -> Attributes:
    """The attributes whose value is known (``None`` means not set)."""
    return {key: value for key, value in values.items() if value is not None}


def server_address(upstream: str) -> tuple[str | None, int | None]:
    """Host and port of an upstream URL (default port by scheme); unknown is ``None``."""
    try:
        parts = urlsplit(upstream)
        port = parts.port
    except ValueError:
        return None, None
    if port is None:
        port = {"https": 443, "http": 80, "wss": 443, "ws": 80}.get(parts.scheme)
    return parts.hostname or None, port


def api_identity(api: str | None) -> tuple[str | None, str | None]:
    """The ``gen_ai.provider.name`` and ``openai.api.type`` of a wire; ``None`` when unknown."""
    module = apis.find(api)
    if module is None:
        return None, None
    return module.PROVIDER, module.OPENAI_API_TYPE


def provider_of(record: AuditRecord) -> str | None:
    """``gen_ai.provider.name`` of an exchange: the route's real provider when
    its record names one (a route's ``provider``, SPEC section 5), else the
    provider of the wire's API module."""
    return record.provider or api_identity(record.api)[0]


def _openai_flavoured(record: AuditRecord) -> bool:
    """Whether the span carries ``openai.*`` attributes: an OpenAI wire to OpenAI."""
    provider, api_type = api_identity(record.api)
    return api_type is not None and provider_of(record) == provider == names.OPENAI_PROVIDER


def usage_totals(api: str | None, usage: Usage) -> Usage:
    """``usage`` as the conventions count it (see the API module's ``usage_totals``)."""
    module = apis.find(api)
    return module.usage_totals(usage) if module is not None else usage


# --------------------------------------------------------------------------
# The exchange span


def start_attributes(
    record: AuditRecord, settings: RequestSettings | None, conversation_id: str | None
) -> Attributes:
    """Every request attribute, known when the exchange span starts.

    Args:
        record: the audit record of the request.
        settings: the generation settings it sent (``None``: not known).
        conversation_id: the user-named session, for ``gen_ai.conversation.id``.
    """
    address, port = server_address(record.upstream)
    openai = _openai_flavoured(record)
    values: dict[str, Any] = {
        names.OPERATION_NAME: names.operation_of(record.api),
        names.PROVIDER_NAME: provider_of(record),
        names.REQUEST_MODEL: record.model,
        names.SERVER_ADDRESS: address,
        names.SERVER_PORT: port,
        names.CONVERSATION_ID: conversation_id,
        names.REQUEST_STREAM: True if record.stream else None,
        names.REQUEST_REASONING_LEVEL: record.reasoning_effort,
        names.REQUEST_PREVIOUS_RESPONSE_ID: record.previous_response_id,
        names.OPENAI_API_TYPE: api_identity(record.api)[1] if openai else None,
        names.MODELTAP_SEQ: record.seq,
        names.MODELTAP_REQUEST_ID: record.request_id,
        names.MODELTAP_SESSION_ID: record.session_id,
        names.MODELTAP_INSTRUCTIONS_SHA256: record.instructions_sha256,
    }
    if settings is not None:
        values |= {
            names.REQUEST_MAX_TOKENS: settings.max_tokens,
            names.REQUEST_TEMPERATURE: settings.temperature,
            names.REQUEST_TOP_P: settings.top_p,
            names.REQUEST_TOP_K: settings.top_k,
            names.REQUEST_STOP_SEQUENCES: (
                list(settings.stop_sequences) if settings.stop_sequences is not None else None
            ),
            names.REQUEST_SEED: settings.seed,
            names.REQUEST_FREQUENCY_PENALTY: settings.frequency_penalty,
            names.REQUEST_PRESENCE_PENALTY: settings.presence_penalty,
            names.REQUEST_CHOICE_COUNT: (
                settings.choice_count if settings.choice_count != 1 else None
            ),
            names.OUTPUT_TYPE: settings.output_type,
            names.OPENAI_REQUEST_SERVICE_TIER: (
                settings.service_tier
                if openai and settings.service_tier != names.SERVICE_TIER_AUTO
                else None
            ),
        }
    return _present(values)


def response_attributes(
    record: AuditRecord | None, response: ResponseEvent, observed: ResponseFacts | None
) -> Attributes:
    """What came back: response model and id, usage as the conventions count it,
    finish reasons, the served tier and fingerprint (OpenAI), the cost estimate."""
    usage = usage_totals(response.api, response.usage)
    openai = record is not None and _openai_flavoured(record)
    values: dict[str, Any] = {
        names.RESPONSE_MODEL: response.model,
        names.RESPONSE_ID: response.response_id,
        names.USAGE_INPUT_TOKENS: usage.input_tokens,
        names.USAGE_OUTPUT_TOKENS: usage.output_tokens,
        names.USAGE_CACHE_READ_INPUT_TOKENS: usage.cache_read_tokens,
        names.USAGE_CACHE_WRITE_INPUT_TOKENS: usage.cache_write_tokens,
        names.USAGE_REASONING_OUTPUT_TOKENS: usage.reasoning_tokens,
        names.RESPONSE_FINISH_REASONS: (
            list(response.finish_reasons) if response.finish_reasons is not None else None
        ),
    }
    if openai and observed is not None:
        values[names.OPENAI_RESPONSE_SERVICE_TIER] = observed.service_tier
        values[names.OPENAI_RESPONSE_SYSTEM_FINGERPRINT] = observed.system_fingerprint
    return _present(values) | cost_attributes(response)


def cost_attributes(response: ResponseEvent) -> Attributes:
    """``modeltap.evidence.cost.*``: the estimate (absent when unknown), its source, why none."""
    cost = response.cost
    if cost is None:
        return {}
    return _present(
        {
            names.MODELTAP_COST_ESTIMATE_USD: cost.estimate_usd,
            names.MODELTAP_COST_SOURCE: cost.source,
            names.MODELTAP_COST_NOTE: cost.note,
        }
    )


# --------------------------------------------------------------------------
# Content (only with content capture)


def _parse_object(content: bytes) -> Json | None:
    try:
        value = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def content_values(values: dict[str, Any]) -> Attributes:
    """Each known value as bounded JSON text; ``modeltap.content.cut`` names the cut ones."""
    out: Attributes = {}
    cut: list[str] = []
    for key, value in values.items():
        if value is None:
            continue
        text, was_cut = bound_json(value, CONTENT_LIMIT)
        out[key] = text
        if was_cut:
            cut.append(key)
    if cut:
        out[names.MODELTAP_CONTENT_CUT] = cut
    return out


def content_attributes(api: str, content: bytes, parsed: Json | None = None) -> Attributes:
    """The request's content attributes, in the conventions' shapes.

    Args:
        api: the record's ``api``.
        content: the decoded request body (audited, so a JSON object).
        parsed: ``content`` parsed already (the exchange's), if it was.

    Returns:
        ``gen_ai.input.messages``, ``gen_ai.system_instructions`` and
        ``gen_ai.tool.definitions``, each only when the body carries it.
    """
    body = parsed if parsed is not None else _parse_object(content)
    module = apis.find(api)
    if body is None or module is None:
        return {}
    read = module.request_content(body)
    return content_values(
        {
            names.INPUT_MESSAGES: read.input_messages,
            names.SYSTEM_INSTRUCTIONS: read.system_instructions,
            names.TOOL_DEFINITIONS: read.tool_definitions,
        }
    )


def output_attributes(
    api: str | None, content: bytes | None, observed: ResponseFacts | None
) -> Attributes:
    """``gen_ai.output.messages``: what the stream observer assembled, else what
    the API's module reads off the JSON body. An error body holds no output."""
    messages: list[Json] | None = observed.output_messages if observed is not None else None
    if messages is None and content is not None:
        body = _parse_object(content)
        module = apis.find(api)
        read = module.response_content(body) if body is not None and module is not None else None
        messages = read.output_messages if read is not None else None
    return content_values({names.OUTPUT_MESSAGES: messages})


# --------------------------------------------------------------------------
# Tool execution spans and metrics


def tool_attributes(call: ToolCall, name: str) -> Attributes:
    """The ``execute_tool`` span's attributes (arguments are content: not here)."""
    return _present(
        {
            names.OPERATION_NAME: names.OPERATION_EXECUTE_TOOL,
            names.TOOL_NAME: name,
            names.TOOL_CALL_ID: call.call_id,
            names.TOOL_TYPE: names.TOOL_TYPE_FUNCTION,
        }
    )


def metric_attributes(
    record: AuditRecord,
    response: ResponseEvent | None,
    observed: ResponseFacts | None,
) -> Attributes:
    """The GenAI metric attributes of an exchange (without ``error.type``)."""
    address, port = server_address(record.upstream)
    values: dict[str, Any] = {
        names.OPERATION_NAME: names.operation_of(record.api),
        names.PROVIDER_NAME: provider_of(record),
        names.REQUEST_MODEL: record.model,
        names.RESPONSE_MODEL: response.model if response is not None else None,
        names.SERVER_ADDRESS: address,
        names.SERVER_PORT: port,
    }
    if _openai_flavoured(record) and observed is not None:
        values[names.OPENAI_RESPONSE_SERVICE_TIER] = observed.service_tier
        values[names.OPENAI_RESPONSE_SYSTEM_FINGERPRINT] = observed.system_fingerprint
    return _present(values)
