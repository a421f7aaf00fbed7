"""Every OpenTelemetry name modeltap emits, and which convention text each follows.

The GenAI semantic conventions are at Development stability and their names
still move, so this module is the one place that spells them: a rename is one
edit here, and nothing else in modeltap writes a span, attribute or metric
name.

**Version followed: semantic-conventions v1.41.1** (2026-05-11), the last
release that carries the GenAI conventions. They have since moved to their
own repository (open-telemetry/semantic-conventions-genai), which has not cut
a release (its main is ``1.42.0-dev``); the installed
``opentelemetry-semantic-conventions`` constants are the v1.41.1 text and are
used wherever they exist. Metrics follow v1.41.1 exactly, so their meter
carries its schema URL (:data:`METRICS_SCHEMA_URL`); the newer repository
replaces ``gen_ai.client.token.usage`` with token counters, unreleased.

Three span attribute names are not in v1.41.1 and are spelled as SPEC section
5 and semantic-conventions-genai main spell them:

- ``gen_ai.usage.cache_write.input_tokens``: v1.41.1 calls it
  ``gen_ai.usage.cache_creation.input_tokens``; semantic-conventions-genai
  renamed it (#440). One edit of :data:`USAGE_CACHE_WRITE_INPUT_TOKENS`
  follows either.
- ``gen_ai.request.reasoning.level`` and ``gen_ai.request.previous_response.id``:
  no name in v1.41.1.

**MCP** (SPEC section 3b): the MCP client span and
``mcp.client.operation.duration`` follow v1.41.1's ``docs/gen-ai/mcp.md``,
which semantic-conventions v1.42.0 (2026-06-12) moved out to
semantic-conventions-genai without changing it; the text on that
repository's main (read 2026-12-02, ``docs/gen-ai/mcp.md`` at 1e01e830,
``model/mcp/*.yaml``) still spells every name and bucket used here the same
way. The installed package marks the ``mcp.*`` constants "moved", not
renamed; they are used as they are.

Whether semantic-conventions-genai has released since v1.41.1 (checked
2026-12-02, for issue 26): no. Its ``CHANGELOG.md`` (read at 002c8a6e and an
earlier snapshot) opens with ``## Unreleased`` and no version heading, the
token-metric rework listed under it; ``model/manifest.yaml`` (at 67dff024)
says ``schema_url: https://opentelemetry.io/schemas/gen-ai-dev/1.42.0-dev``
on semantic-conventions v1.44.0; its ``RELEASING.md`` cuts only
``vX.Y.Z-dev`` pre-releases, and none is recorded (opentelemetry-js#7014,
2026-08-18: "The registry has no tagged release yet"). The core repository's
tags after v1.41.1 (v1.42.0 2026-06-12, v1.43.0, v1.44.0 2026-08-04; mirror
head 384d6616, 2026-08-20) carry no GenAI text. So the token-metric change
(``gen_ai.client.token.usage`` replaced by ``gen_ai.client.inference.*``
counters) is not followed: it is unreleased. No git mirror of the genai
repository could be had here, so this reads its stored files, not its tags.

Names of modeltap's own (``modeltap.*``) are for what the conventions have no
name for: the audit record's links, cost estimates, content cuts, tool results.
"""

from __future__ import annotations

from typing import Final

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes import (
    jsonrpc_attributes,
    log_attributes,
    mcp_attributes,
    openai_attributes,
    rpc_attributes,
)
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics, mcp_metrics
from opentelemetry.semconv.attributes import (
    error_attributes,
    http_attributes,
    network_attributes,
    server_attributes,
)

from modeltap import apis

#: The release whose text the names follow (see the module docstring).
CONVENTIONS_VERSION: Final = "1.41.1"
#: Schema URL of the metrics, which follow that release exactly.
METRICS_SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{CONVENTIONS_VERSION}"

# --------------------------------------------------------------------------
# Span attributes: the exchange (inference) span

OPERATION_NAME: Final = gen_ai.GEN_AI_OPERATION_NAME
PROVIDER_NAME: Final = gen_ai.GEN_AI_PROVIDER_NAME
CONVERSATION_ID: Final = gen_ai.GEN_AI_CONVERSATION_ID
REQUEST_MODEL: Final = gen_ai.GEN_AI_REQUEST_MODEL
REQUEST_STREAM: Final = gen_ai.GEN_AI_REQUEST_STREAM
REQUEST_MAX_TOKENS: Final = gen_ai.GEN_AI_REQUEST_MAX_TOKENS
REQUEST_TEMPERATURE: Final = gen_ai.GEN_AI_REQUEST_TEMPERATURE
REQUEST_TOP_P: Final = gen_ai.GEN_AI_REQUEST_TOP_P
REQUEST_TOP_K: Final = gen_ai.GEN_AI_REQUEST_TOP_K
REQUEST_STOP_SEQUENCES: Final = gen_ai.GEN_AI_REQUEST_STOP_SEQUENCES
REQUEST_SEED: Final = gen_ai.GEN_AI_REQUEST_SEED
REQUEST_FREQUENCY_PENALTY: Final = gen_ai.GEN_AI_REQUEST_FREQUENCY_PENALTY
REQUEST_PRESENCE_PENALTY: Final = gen_ai.GEN_AI_REQUEST_PRESENCE_PENALTY
REQUEST_CHOICE_COUNT: Final = gen_ai.GEN_AI_REQUEST_CHOICE_COUNT
REQUEST_REASONING_LEVEL: Final = "gen_ai.request.reasoning.level"
REQUEST_PREVIOUS_RESPONSE_ID: Final = "gen_ai.request.previous_response.id"
OUTPUT_TYPE: Final = gen_ai.GEN_AI_OUTPUT_TYPE
RESPONSE_MODEL: Final = gen_ai.GEN_AI_RESPONSE_MODEL
RESPONSE_ID: Final = gen_ai.GEN_AI_RESPONSE_ID
RESPONSE_FINISH_REASONS: Final = gen_ai.GEN_AI_RESPONSE_FINISH_REASONS
RESPONSE_TIME_TO_FIRST_CHUNK: Final = gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK
USAGE_INPUT_TOKENS: Final = gen_ai.GEN_AI_USAGE_INPUT_TOKENS
USAGE_OUTPUT_TOKENS: Final = gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
USAGE_CACHE_READ_INPUT_TOKENS: Final = gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
USAGE_CACHE_WRITE_INPUT_TOKENS: Final = "gen_ai.usage.cache_write.input_tokens"
USAGE_REASONING_OUTPUT_TOKENS: Final = gen_ai.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS
INPUT_MESSAGES: Final = gen_ai.GEN_AI_INPUT_MESSAGES
OUTPUT_MESSAGES: Final = gen_ai.GEN_AI_OUTPUT_MESSAGES
SYSTEM_INSTRUCTIONS: Final = gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS
TOOL_DEFINITIONS: Final = gen_ai.GEN_AI_TOOL_DEFINITIONS
OPENAI_API_TYPE: Final = openai_attributes.OPENAI_API_TYPE
OPENAI_REQUEST_SERVICE_TIER: Final = openai_attributes.OPENAI_REQUEST_SERVICE_TIER
OPENAI_RESPONSE_SERVICE_TIER: Final = openai_attributes.OPENAI_RESPONSE_SERVICE_TIER
OPENAI_RESPONSE_SYSTEM_FINGERPRINT: Final = openai_attributes.OPENAI_RESPONSE_SYSTEM_FINGERPRINT
SERVER_ADDRESS: Final = server_attributes.SERVER_ADDRESS
SERVER_PORT: Final = server_attributes.SERVER_PORT
HTTP_RESPONSE_STATUS_CODE: Final = http_attributes.HTTP_RESPONSE_STATUS_CODE
ERROR_TYPE: Final = error_attributes.ERROR_TYPE
#: ``error.type`` "when the instrumentation doesn't define a custom value".
ERROR_OTHER: Final = error_attributes.ErrorTypeValues.OTHER.value

# --------------------------------------------------------------------------
# Span attributes: the tool execution span

TOOL_NAME: Final = gen_ai.GEN_AI_TOOL_NAME
TOOL_CALL_ID: Final = gen_ai.GEN_AI_TOOL_CALL_ID
TOOL_TYPE: Final = gen_ai.GEN_AI_TOOL_TYPE
TOOL_CALL_ARGUMENTS: Final = gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS

# --------------------------------------------------------------------------
# Span attributes: the MCP client span (v1.41.1 docs/gen-ai/mcp.md, "Client")

MCP_METHOD_NAME: Final = mcp_attributes.MCP_METHOD_NAME
MCP_PROTOCOL_VERSION: Final = mcp_attributes.MCP_PROTOCOL_VERSION
#: Set to the files' ``mcp_session`` (16 hex digits of the SHA-256 of the
#: ``Mcp-Session-Id``), never the id itself: an id can be a capability (SPEC 3b).
MCP_SESSION_ID: Final = mcp_attributes.MCP_SESSION_ID
JSONRPC_REQUEST_ID: Final = jsonrpc_attributes.JSONRPC_REQUEST_ID
RPC_RESPONSE_STATUS_CODE: Final = rpc_attributes.RPC_RESPONSE_STATUS_CODE
NETWORK_TRANSPORT: Final = network_attributes.NETWORK_TRANSPORT
NETWORK_PROTOCOL_NAME: Final = network_attributes.NETWORK_PROTOCOL_NAME
#: ``network.transport`` of MCP over HTTP ("SHOULD be set to tcp or quic if
#: the transport protocol is HTTP"); ``network.protocol.name`` ``http``.
NETWORK_TRANSPORT_TCP: Final = network_attributes.NetworkTransportValues.TCP.value
NETWORK_PROTOCOL_HTTP: Final = "http"
#: The method whose span is also an ``execute_tool`` operation.
MCP_METHOD_TOOLS_CALL: Final = "tools/call"
#: ``error.type`` of a ``CallToolResult`` with ``isError: true``.
MCP_ERROR_TOOL: Final = "tool_error"

# --------------------------------------------------------------------------
# Values

#: The conventions use ``chat`` for OpenAI Responses as well as Chat
#: Completions and Anthropic Messages, and ``generate_content`` for Gemini's
#: ``generateContent``: each wire names its own
#: (:attr:`modeltap.apis.contract.WireApi.OPERATION_NAME`), one of
#: :data:`OPERATIONS`; ``chat`` is the operation of an exchange of no known wire.
OPERATION_CHAT: Final = gen_ai.GenAiOperationNameValues.CHAT.value
OPERATIONS: Final = frozenset(value.value for value in gen_ai.GenAiOperationNameValues)
OPERATION_EXECUTE_TOOL: Final = gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
#: ``gen_ai.tool.type`` of every call modeltap sees: the model asks, the
#: client runs it ("a tool executed on the client-side").
TOOL_TYPE_FUNCTION: Final = "function"
TOKEN_TYPE: Final = gen_ai.GEN_AI_TOKEN_TYPE
TOKEN_TYPE_INPUT: Final = gen_ai.GenAiTokenTypeValues.INPUT.value
TOKEN_TYPE_OUTPUT: Final = gen_ai.GenAiTokenTypeValues.OUTPUT.value
#: The request service tier that is not reported (``openai.request.service_tier``
#: is conditionally required "if the request includes a service_tier and the
#: value is not 'auto'").
SERVICE_TIER_AUTO: Final = "auto"
#: The providers whose spans carry ``openai.*`` attributes.
OPENAI_PROVIDER: Final = "openai"


def operation_of(api: str | None) -> str:
    """``gen_ai.operation.name`` of an API's exchanges (``chat`` when not known)."""
    module = apis.find(api)
    return OPERATION_CHAT if module is None else module.OPERATION_NAME


def exchange_span_name(model: str | None, operation: str = OPERATION_CHAT) -> str:
    """``{gen_ai.operation.name} {gen_ai.request.model}``, or the operation alone."""
    return f"{operation} {model}" if model else operation


def tool_span_name(tool: str | None) -> str:
    """``execute_tool {gen_ai.tool.name}``, or the operation alone."""
    return f"{OPERATION_EXECUTE_TOOL} {tool}" if tool else OPERATION_EXECUTE_TOOL


def mcp_span_name(method: str | None, tool: str | None) -> str:
    """``{mcp.method.name} {target}``: the target is ``gen_ai.tool.name`` when there
    is one, else the span is named after the method alone (``ping``)."""
    method = method or "mcp"
    return f"{method} {tool}" if tool else method


# --------------------------------------------------------------------------
# modeltap's own

MODELTAP_SEQ: Final = "modeltap.seq"
MODELTAP_REQUEST_ID: Final = "modeltap.request_id"
MODELTAP_SESSION_ID: Final = "modeltap.session_id"
MODELTAP_RUN_ID: Final = "modeltap.run_id"
MODELTAP_INSTRUCTIONS_SHA256: Final = "modeltap.instructions_sha256"
MODELTAP_WS_CLOSE_CODE: Final = "modeltap.websocket.close_code"
#: The estimated price of an exchange in US dollars (absent when unknown).
MODELTAP_COST_ESTIMATE_USD: Final = "modeltap.cost.estimate_usd"
#: Where the estimate comes from (``genai-prices 0.2.3``), or why there is none.
MODELTAP_COST_SOURCE: Final = "modeltap.cost.source"
MODELTAP_COST_NOTE: Final = "modeltap.cost.note"
#: The content attributes that were cut to fit (their text says how much).
MODELTAP_CONTENT_CUT: Final = "modeltap.content.cut"
#: On an ``execute_tool`` span: whether a later request carried the result.
MODELTAP_TOOL_RESULT_SEEN: Final = "modeltap.tool.result_seen"
#: On an ``execute_tool`` span: the result's size as sent, in bytes.
MODELTAP_TOOL_RESULT_BYTES: Final = "modeltap.tool.result_bytes"
#: error.type of spans still open when telemetry shut down (Ctrl-C mid-stream).
ERROR_INTERRUPTED: Final = "modeltap.interrupted"
#: On an MCP span: the server's name (``--mcp NAME``, or the ``--mcp-host``).
MODELTAP_MCP_SERVER: Final = "modeltap.mcp.server"
#: error.type of an MCP request whose session ended before an answer came.
ERROR_MCP_UNANSWERED: Final = "modeltap.mcp.unanswered"

# --------------------------------------------------------------------------
# Log records: one per JSONL line (telemetry/logs.py, SPEC section 9)

#: ``audit``, ``session``, or an event's ``kind`` (``response``, ``rejected``, ...).
MODELTAP_KIND: Final = "modeltap.kind"
#: The record's ``api`` (``openai.chat_completions``, ...).
MODELTAP_API: Final = "modeltap.api"
#: The file the line went to, named as the Collector's file_log receiver names it.
LOG_FILE_NAME: Final = log_attributes.LOG_FILE_NAME
#: SHA-256 of the body: the same line delivered twice, or by two paths, dedupes on it.
LOG_RECORD_UID: Final = log_attributes.LOG_RECORD_UID
#: A line's event name is this prefix and its kind: ``modeltap.audit``, ``modeltap.response``.
EVENT_NAME_PREFIX: Final = "modeltap."

# --------------------------------------------------------------------------
# Metrics (v1.41.1, gen-ai-metrics.md)

METRIC_OPERATION_DURATION: Final = gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION
METRIC_TOKEN_USAGE: Final = gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE
METRIC_TIME_TO_FIRST_CHUNK: Final = gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK
UNIT_SECONDS: Final = "s"
UNIT_TOKENS: Final = "{token}"
#: ExplicitBucketBoundaries of ``gen_ai.client.operation.duration`` and
#: ``gen_ai.client.operation.time_to_first_chunk``.
SECONDS_BUCKETS: Final = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
#: ExplicitBucketBoundaries of ``gen_ai.client.token.usage``.
TOKEN_BUCKETS: Final = (
    1,
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    262144,
    1048576,
    4194304,
    16777216,
    67108864,
)

# --------------------------------------------------------------------------
# Metrics: MCP (v1.41.1 docs/gen-ai/mcp.md, "Metrics"; unchanged on
# semantic-conventions-genai main)

METRIC_MCP_CLIENT_OPERATION_DURATION: Final = mcp_metrics.MCP_CLIENT_OPERATION_DURATION
#: ExplicitBucketBoundaries of ``mcp.client.operation.duration``.
MCP_SECONDS_BUCKETS: Final = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
