"""Span attributes: their names, and their values read from records and bodies.

Names come from opentelemetry-semantic-conventions where the installed version
has them; the rest are spelled out exactly as SPEC section 5 lists them. The
values that depend on an API (provider, OpenAI API type, message content) are
asked of the API's module (:class:`modeltap.apis.contract.WireApi`): this
module reads no body key itself, so a new wire needs nothing here.

Content (prompts, outputs) is read only when content capture is on, and each
value is bounded by :data:`CONTENT_LIMIT`.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

import orjson
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes import openai_attributes
from opentelemetry.semconv.attributes import (
    error_attributes,
    http_attributes,
    server_attributes,
)

from modeltap import apis
from modeltap.records import Json

# Constants come from opentelemetry-semantic-conventions where
# the installed version has them; the GenAI conventions moved to their own
# repository (semantic-conventions-genai) and renamed or added the ones below
# after the installed package was cut, so they are spelled out here, exactly as
# SPEC section 5 lists them.

OPERATION_NAME: Final = gen_ai.GEN_AI_OPERATION_NAME
PROVIDER_NAME: Final = gen_ai.GEN_AI_PROVIDER_NAME
REQUEST_MODEL: Final = gen_ai.GEN_AI_REQUEST_MODEL
REQUEST_STREAM: Final = gen_ai.GEN_AI_REQUEST_STREAM
REQUEST_REASONING_LEVEL: Final = "gen_ai.request.reasoning.level"
REQUEST_PREVIOUS_RESPONSE_ID: Final = "gen_ai.request.previous_response.id"
RESPONSE_MODEL: Final = gen_ai.GEN_AI_RESPONSE_MODEL
RESPONSE_ID: Final = gen_ai.GEN_AI_RESPONSE_ID
RESPONSE_FINISH_REASONS: Final = gen_ai.GEN_AI_RESPONSE_FINISH_REASONS
RESPONSE_TIME_TO_FIRST_CHUNK: Final = gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK
USAGE_INPUT_TOKENS: Final = gen_ai.GEN_AI_USAGE_INPUT_TOKENS
USAGE_OUTPUT_TOKENS: Final = gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
USAGE_CACHE_READ_INPUT_TOKENS: Final = gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
# Installed semconv still says "cache_creation"; the current GenAI conventions
# (and the SPEC) say "cache_write".
USAGE_CACHE_WRITE_INPUT_TOKENS: Final = "gen_ai.usage.cache_write.input_tokens"
USAGE_REASONING_OUTPUT_TOKENS: Final = gen_ai.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS
INPUT_MESSAGES: Final = gen_ai.GEN_AI_INPUT_MESSAGES
OUTPUT_MESSAGES: Final = gen_ai.GEN_AI_OUTPUT_MESSAGES
SYSTEM_INSTRUCTIONS: Final = gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS
OPENAI_API_TYPE: Final = openai_attributes.OPENAI_API_TYPE
SERVER_ADDRESS: Final = server_attributes.SERVER_ADDRESS
SERVER_PORT: Final = server_attributes.SERVER_PORT
HTTP_RESPONSE_STATUS_CODE: Final = http_attributes.HTTP_RESPONSE_STATUS_CODE
ERROR_TYPE: Final = error_attributes.ERROR_TYPE

MODELTAP_SEQ: Final = "modeltap.seq"
MODELTAP_REQUEST_ID: Final = "modeltap.request_id"
MODELTAP_SESSION_ID: Final = "modeltap.session_id"
MODELTAP_RUN_ID: Final = "modeltap.run_id"
MODELTAP_INSTRUCTIONS_SHA256: Final = "modeltap.instructions_sha256"
MODELTAP_WS_CLOSE_CODE: Final = "modeltap.websocket.close_code"

#: Every API modeltap audits is a chat-style generation; the current GenAI
#: conventions use ``chat`` for OpenAI Responses as well as Chat Completions.
OPERATION_CHAT: Final = "chat"

#: error.type of spans still open when telemetry shut down (Ctrl-C mid-stream).
ERROR_INTERRUPTED: Final = "modeltap.interrupted"
#: Longest captured content per attribute; Jaeger struggles with huge tags.
CONTENT_LIMIT: Final = 64 * 1024


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


def api_identity(api: str) -> tuple[str | None, str | None]:
    """The ``gen_ai.provider.name`` and ``openai.api.type`` of an API; ``None`` when unknown."""
    module = apis.find(api)
    if module is None:
        return None, None
    return module.PROVIDER, module.OPENAI_API_TYPE


def _clip(text: str) -> str:
    if len(text) <= CONTENT_LIMIT:
        return text
    return text[:CONTENT_LIMIT] + f"... [truncated {len(text) - CONTENT_LIMIT} characters]"


def _json_text(value: object) -> str:
    return _clip(orjson.dumps(value).decode())


def _parse_object(content: bytes) -> Json | None:
    try:
        value = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def request_content(api: str, content: bytes) -> dict[str, str]:
    """Content attributes of a request body: what the API's module reads from it.

    A body that is not a JSON object is kept as text in ``gen_ai.input.messages``.

    Args:
        api: the record's ``api``.
        content: the decoded request body.

    Returns:
        ``gen_ai.input.messages`` and ``gen_ai.system_instructions``, each only
        when the body carries it.
    """
    body = _parse_object(content)
    if body is None:
        return {INPUT_MESSAGES: _clip(content.decode("utf-8", "replace"))}
    module = apis.find(api)
    if module is None:
        return {}
    read = module.request_content(body)
    attributes: dict[str, str] = {}
    if read.input_messages is not None:
        attributes[INPUT_MESSAGES] = _json_text(read.input_messages)
    if read.system_instructions is not None:
        attributes[SYSTEM_INSTRUCTIONS] = _json_text(read.system_instructions)
    return attributes


def response_content(api: str | None, content: bytes) -> str:
    """The ``gen_ai.output.messages`` value of a response body.

    A JSON body gives the output its API's module reads from it; a body the
    module finds no output in (an error), or of an unknown API, is kept whole.
    Anything else, such as a raw SSE stream, is kept as text.

    Args:
        api: the record's ``api``, or ``None`` when no record was written.
        content: the decoded response body.
    """
    body = _parse_object(content)
    if body is None:
        return _clip(content.decode("utf-8", "replace"))
    module = apis.find(api)
    read = module.response_content(body) if module is not None else None
    return _json_text(read.output_messages if read is not None else body)
