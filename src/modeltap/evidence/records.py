"""Records and events: the one place that knows the JSONL schema.

Everything written to ``audit.jsonl``, ``events.jsonl`` and ``sessions.jsonl``
is one of the frozen dataclasses below, serialised by :func:`to_json_line`
(orjson, every field, in order). Unknown values are ``None`` (JSON ``null``),
never ``0`` or ``""``; an empty tuple means "sent, and empty".

The same types are read back (:mod:`modeltap.evidence.capture.lines`: msgspec
converts each parsed line into them, checking every field's type) and the
shipped JSON Schemas are generated from them
(:mod:`modeltap.evidence.schemas`, ``src/modeltap/schemas/``). A field's
``Annotated`` metadata says what the schema adds to its type: a description
(:func:`doc`) and what *this* writer promises (:func:`promise`: the known
apis, bounded identifiers, hex digests; :data:`NEVER_NULL`), which reading
does not check, since a newer writer may widen it. Adding a field is one
edit here: a field added after lines were first written has a default (for a
nullable one, ``None``: unknown), which is what a line an older modeltap
wrote reads as; the writer always writes it.

Why one module of ~800 lines: the schema is read whole. Splitting the
dataclasses from their serialiser, or requests from responses, would make a
reader hold two files open to learn what one JSONL line can say; most of the
length is field declarations, each with the description that documents it.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

import msgspec
import orjson

from modeltap.evidence.redaction import redact_path

Json = dict[str, Any]

TRANSPORTS = ("http", "websocket")

#: A record's ``operation``: what the audited request asks the model to do.
#: ``create`` is every API's own model turn (a chat completion, a response, a
#: message, a ``generateContent``); ``compact`` is the Responses API's
#: compaction pass (``POST …/responses/compact``), which runs the model over
#: the input to shrink a conversation's context rather than to answer it.
OPERATION_CREATE = "create"
OPERATION_COMPACT = "compact"
OPERATIONS = (OPERATION_CREATE, OPERATION_COMPACT)


def utc_now() -> str:
    """Return the current UTC time as ISO-8601 with milliseconds and ``Z``."""
    # Called twice per exchange: format each second once, then add the milliseconds.
    ns = time.time_ns()
    return f"{_utc_second(ns // 1_000_000_000)}.{ns // 1_000_000 % 1000:03d}Z"


@functools.lru_cache(maxsize=4)
def _utc_second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


#: Longest identifier a record or event copies from the wire: a model, an
#: effort, a tool name or type, a call or response id, a status, a finish
#: reason. Real ones are far shorter; anything longer could be prompt text.
MAX_ID_CHARS = 256

#: The files of an out dir, as :class:`FileReopenedEvent` names them.
AUDIT_FILE: Final = "audit.jsonl"
EVENTS_FILE: Final = "events.jsonl"
SESSIONS_FILE: Final = "sessions.jsonl"
OUT_FILES: Final = (AUDIT_FILE, EVENTS_FILE, SESSIONS_FILE)
#: Where ``modeltap run`` writes them unless told (``--out``), and so where
#: ``report``, ``check`` and ``view`` read unless told.
DEFAULT_OUT: Final = "./modeltap-out"
#: Why a file was opened again: the path was gone, or named another file.
REOPEN_MISSING: Final = "missing"
REOPEN_REPLACED: Final = "replaced"
#: The settings a continuation of server-held state may leave unstated.
OMITTABLE_SETTINGS: Final = ("instructions", "tools")

#: The ``api`` of an MCP audit line (SPEC 3b): the name of the wire
#: :mod:`modeltap.apis.mcp`, which is not a model API.
MCP_API: Final = "mcp"
#: What an MCP audit line's JSON-RPC message is (``message_type``): a request
#: (it has an id and awaits an answer), a notification (no id), or the client's
#: answer to a server's request, a result or an error.
MCP_MESSAGE_TYPES: Final = ("request", "notification", "result", "error")
#: How an ``mcp_result`` came: a JSON-RPC result, a JSON-RPC error, or an HTTP
#: error status with no JSON-RPC answer for the request's id.
MCP_OUTCOMES: Final = ("result", "error", "http_error")
#: What an MCP answer came in: a JSON body or an SSE event.
MCP_FRAMINGS: Final = ("json", "sse")
#: Where an ``mcp_request`` came from: a server's JSON-RPC request on a stream,
#: or an input request inside an ``input_required`` result (2026-07-28).
MCP_REQUEST_ORIGINS: Final = ("stream", "input_required")
#: What became of an HTTP+SSE ``endpoint`` event: put onto the route's mount
#: (the client's POSTs then come through the proxy), kept (it reaches the
#: server through the proxy as it is: a path relative to the stream's own, or
#: regular mode), or left pointing elsewhere (another origin, or off the
#: route: the client's POSTs go there, not through the mount).
MCP_ENDPOINTS: Final = ("rewritten", "kept", "elsewhere")

# --------------------------------------------------------------------------
# What the schema says beyond the types


def doc(text: str) -> msgspec.Meta:
    """A field's description in the generated JSON Schema (and for its reader here)."""
    return msgspec.Meta(description=text)


def promise(**keywords: Any) -> msgspec.Meta:
    """What this writer promises about a value beyond its type.

    Args:
        keywords: JSON Schema keywords (``enum``, ``maxLength``, ``pattern``,
            ``minimum``...), added to the generated schema only: reading does not
            check them, since a newer writer may widen them (a new api, a new
            stop reason).
    """
    return msgspec.Meta(extra_json_schema=keywords)


def named(name: str, **keywords: Any) -> msgspec.Meta:
    """Like :func:`promise`, for a value the schema names (``api``,
    ``timestamp``): used more than once in a file, it is written once under
    ``$defs`` and referred to."""
    return msgspec.Meta(title=name, extra_json_schema=keywords)


#: On a nullable field: this writer never writes null there; the type allows
#: ``None`` for a line an older modeltap wrote without the field, or for
#: another event kind that shares it.
NEVER_NULL: Final = msgspec.Meta(extra_json_schema={"not": {"type": "null"}})

#: An identifier copied from the wire (:data:`MAX_ID_CHARS` at most).
WireId = Annotated[str, promise(maxLength=MAX_ID_CHARS)]
Sha256Hex = Annotated[str, promise(pattern="^[0-9a-f]{64}$")]
Count = Annotated[int, promise(minimum=0)]
Millis = Annotated[float, promise(minimum=0)]
NonEmpty = Annotated[str, promise(minLength=1)]
Timestamp = Annotated[
    str,
    named(
        "timestamp",
        pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
        r"(Z|[+-][0-9]{2}:[0-9]{2})$",
    ),
    doc("UTC time, ISO-8601."),
]
#: A wire's name (:attr:`modeltap.apis.contract.Wire.NAME`: ``openai.chat_completions``,
#: ...). The names are the wire registry's, below this module: the schemas'
#: enum is filled in from :data:`modeltap.apis.APIS` (:mod:`modeltap.evidence.schemas`).
ApiName = Annotated[str, named("api")]
TransportName = Annotated[str, named("transport", enum=list(TRANSPORTS))]
#: An MCP session as the files name it: never the Mcp-Session-Id itself (an id
#: can be a capability), the first 16 hex digits of its SHA-256.
McpSession = Annotated[
    str,
    named("mcp_session", pattern="^[0-9a-f]{16}$"),
    doc(
        "The first 16 hex digits of the SHA-256 of the Mcp-Session-Id (HTTP+SSE: of the "
        "session_id query value); null where the protocol has no session."
    ),
]
#: A JSON-RPC id exactly as sent: a number or a string (0 and "0" differ).
JsonRpcId = int | WireId

# --------------------------------------------------------------------------
# Request side


@dataclass(frozen=True, slots=True)
class HostedTool:
    """A provider-run or non-function tool advertised in a request."""

    type: WireId
    name: WireId | None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool result carried back to the model: its call id, its size and its
    error flag (never its text)."""

    call_id: WireId | None
    bytes: Count
    is_error: Annotated[
        bool | None,
        doc(
            "The wire's error flag: Anthropic's tool_result is_error, Bedrock's toolResult "
            'status "error" (an absent flag is the wire\'s default, false); null on wires '
            "that have none (OpenAI chat and Responses, Gemini) and for a flag of another type."
        ),
    ] = None


@dataclass(frozen=True, slots=True)
class InstructionPart:
    """One instruction text of a request, as ``instructions_parts`` lists it."""

    sha256: Annotated[Sha256Hex, doc("SHA-256 (hex) of the text's UTF-8.")]
    bytes: Annotated[Count, doc("The text's length in UTF-8 bytes.")]


#: Where a record's ``model`` was read: the request path (an API that names
#: the model there, such as Gemini or Bedrock) or the body.
MODEL_SOURCES = ("path", "body")


@dataclass(frozen=True, slots=True)
class RequestSettings:
    """The generation settings a request sent, for the ``gen_ai.request.*`` span attributes.

    Spans only: never written to a record. Each field is ``None`` when the
    request did not send it (or sent a value of the wrong type): unknown is
    not a default.

    Attributes:
        max_tokens: ``gen_ai.request.max_tokens``.
        temperature: ``gen_ai.request.temperature``.
        top_p: ``gen_ai.request.top_p``.
        top_k: ``gen_ai.request.top_k``.
        stop_sequences: ``gen_ai.request.stop_sequences``.
        seed: ``gen_ai.request.seed``.
        frequency_penalty: ``gen_ai.request.frequency_penalty``.
        presence_penalty: ``gen_ai.request.presence_penalty``.
        choice_count: ``gen_ai.request.choice.count``.
        output_type: ``gen_ai.output.type`` (``text`` or ``json``).
        service_tier: the service tier asked for (``openai.request.service_tier``).
    """

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: float | None = None
    stop_sequences: tuple[str, ...] | None = None
    seed: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    choice_count: int | None = None
    output_type: str | None = None
    service_tier: str | None = None


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What an API module reads off one outgoing request body (SPEC section 2)."""

    #: The model the request asks for: the one its path names where the API
    #: puts it there (Bedrock, Vertex, Azure deployments; the module is told
    #: it, :class:`~modeltap.apis.contract.EndpointMatch`), else the body's.
    #: Never empty: a request naming neither is refused (``missing_model``).
    model: str
    tool_names: tuple[str, ...] | None
    reasoning_effort: str | None
    thinking: Json | None
    image_details: tuple[str | None, ...]
    instructions_sha256: str | None
    #: One part per instruction text, in the order they are joined into
    #: ``instructions_sha256``; ``None`` exactly when that is ``None``.
    instructions_parts: tuple[InstructionPart, ...] | None
    stream: bool
    hosted_tools: tuple[HostedTool, ...]
    tool_results: tuple[ToolResult, ...]
    previous_response_id: str | None
    generate: bool | None
    omitted_settings: tuple[str, ...] = ()
    #: Chat only: whether ``stream_options.include_usage`` was sent true.
    #: Not written to the record; the response observer needs it.
    include_usage: bool | None = field(default=None, compare=False)
    #: The generation settings sent, for spans (``gen_ai.request.*``). Not
    #: written to the record.
    settings: RequestSettings = field(default_factory=RequestSettings, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditRecord:
    """One line of ``audit.jsonl``: a validated outgoing model request, written
    before it was forwarded (SPEC section 2)."""

    request_id: Annotated[
        str,
        doc(
            "HTTP: x-client-request-id or x-request-id if sent, else the proxy's exchange "
            "id. WebSocket: the connection's id (repeats per message)."
        ),
    ]
    model: Annotated[
        str,
        promise(minLength=1, maxLength=MAX_ID_CHARS),
        doc(
            "The model the request asks for: from the path where the API puts it there "
            "(decoded), else the body's (longer ones are refused, value_too_long). When both "
            "are sent and differ, the path's: it is what the upstream serves."
        ),
    ]
    model_source: Annotated[
        str | None,
        promise(enum=list(MODEL_SOURCES)),
        NEVER_NULL,
        doc("Where model was read: the request path or the body (MODEL_SOURCES)."),
    ] = None
    tool_names: Annotated[
        tuple[WireId, ...] | None,
        doc(
            "Client-run tools advertised in this request, in order; namespaced tools as "
            "namespace.name. null when the request did not state its tools "
            '(omitted_settings holds "tools").'
        ),
    ]
    reasoning_effort: Annotated[WireId | None, doc("The effort actually sent, or null.")]
    thinking: Annotated[
        Json | None,
        doc(
            "Anthropic only: the thinking setting as sent (type, budget_tokens, display; "
            'any other key by name only, its value "REDACTED"), else null.'
        ),
    ]
    image_details: Annotated[
        tuple[WireId | None, ...],
        doc("The detail of each outgoing image, in order; absent detail is null."),
    ]
    image_count: Annotated[Count, doc("len(image_details).")]
    instructions_sha256: Annotated[
        Sha256Hex | None,
        doc(
            "SHA-256 (hex) of the system/developer texts joined with two newlines; null "
            "when the request did not state its instructions."
        ),
    ]
    instructions_parts: Annotated[
        tuple[InstructionPart, ...] | None,
        doc(
            "One entry per instruction text (a string, or each text block of a message), "
            "in the order they are joined into instructions_sha256; null exactly when "
            "instructions_sha256 is null; [] when no instructions were sent."
        ),
    ] = None
    seq: Annotated[Count, doc("Order within the run; events link to the record by (run_id, seq).")]
    run_id: NonEmpty
    session_id: NonEmpty
    ts: Timestamp
    transport: TransportName
    api: ApiName
    operation: Annotated[
        str | None,
        promise(enum=list(OPERATIONS)),
        NEVER_NULL,
        doc(
            "What the request asks the model to do (OPERATIONS): create (the API's own "
            "model turn) or compact (a Responses compaction pass, POST .../responses/compact)."
        ),
    ] = None
    provider: Annotated[
        str | None,
        promise(pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$", maxLength=64),
        NEVER_NULL,
        doc(
            "The route's real provider as gen_ai.provider.name names it (openai, anthropic, "
            "azure.ai.openai, gcp.gemini, gcp.vertex_ai, aws.bedrock, or what --route "
            "NAME=URL,provider=P says); else derived from the upstream host; else the "
            "provider whose wire the API is."
        ),
    ] = None
    route: Annotated[str | None, doc("The route name, or null in forward-proxy mode.")]
    upstream: str
    path: Annotated[
        str,
        doc(
            "Path with its query string: parameter names kept, values only for "
            "api-version, beta and alt (harmless shapes), every other value REDACTED; cut "
            "at 2048 characters."
        ),
    ]
    stream: bool
    hosted_tools: tuple[HostedTool, ...]
    tool_results: Annotated[
        tuple[ToolResult, ...],
        doc("Tool results this request carries back, in order: ids and sizes only."),
    ]
    previous_response_id: WireId | None
    generate: Annotated[bool | None, doc("As sent; false marks a warm-up that runs no model.")]
    omitted_settings: Annotated[
        tuple[Annotated[str, promise(enum=list(OMITTABLE_SETTINGS))], ...],
        promise(uniqueItems=True),
        doc(
            "Continuations of server-held state (Responses previous_response_id, "
            "conversation or prompt; Anthropic thread continue; WebSocket under "
            "--continuation as-sent): the settings the request did not state, whose fields "
            "are then null; [] otherwise."
        ),
    ]
    body_bytes: Count
    body_sha256: Sha256Hex

    @classmethod
    def build(
        cls,
        facts: RequestFacts,
        *,
        request_id: str,
        seq: int,
        run_id: str,
        session_id: str,
        transport: str,
        api: str,
        provider: str,
        route: str | None,
        upstream: str,
        path: str,
        body_bytes: int,
        body_sha256: str,
        model_from_path: str | None = None,
        operation: str = OPERATION_CREATE,
        ts: str | None = None,
    ) -> AuditRecord:
        """Combine request facts with where and when the request went.

        Args:
            facts: what the API module read off the body.
            provider: the route's real provider (``gen_ai.provider.name``).
            model_from_path: the model the request path names (decoded), for an
                API that puts it there; it decides over the body's, since it
                is what the upstream serves (``model_source`` says which).
            operation: what the path asks (:data:`OPERATIONS`; the
                :class:`~modeltap.apis.contract.EndpointMatch` says it).
            request_id, seq, run_id, session_id, transport, api, route,
                upstream, path, body_bytes, body_sha256, ts: as recorded
                (``path`` is redacted here; ``ts`` defaults to now).

        Returns:
            The record to write.
        """
        return cls(
            request_id=request_id,
            model=facts.model if model_from_path is None else model_from_path,
            model_source="body" if model_from_path is None else "path",
            tool_names=facts.tool_names,
            reasoning_effort=facts.reasoning_effort,
            thinking=facts.thinking,
            image_details=facts.image_details,
            image_count=len(facts.image_details),
            instructions_sha256=facts.instructions_sha256,
            instructions_parts=facts.instructions_parts,
            seq=seq,
            run_id=run_id,
            session_id=session_id,
            ts=ts or utc_now(),
            transport=transport,
            api=api,
            operation=operation,
            provider=provider,
            route=route,
            upstream=upstream,
            path=redact_path(path),
            stream=facts.stream,
            hosted_tools=facts.hosted_tools,
            tool_results=facts.tool_results,
            previous_response_id=facts.previous_response_id,
            generate=facts.generate,
            omitted_settings=facts.omitted_settings,
            body_bytes=body_bytes,
            body_sha256=body_sha256,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class McpAuditRecord:
    """One line of ``audit.jsonl`` for MCP: one client-to-server JSON-RPC message,
    written before it was forwarded (SPEC section 3b). A batch gives one line
    per member, in order, all sharing the body's ``body_bytes`` and
    ``body_sha256``. No argument value is written: only its canonical hash."""

    request_id: Annotated[
        str,
        doc(
            "x-client-request-id or x-request-id if sent, else the proxy's exchange id; the "
            "members of one batch share it."
        ),
    ]
    seq: Annotated[Count, doc("Order within the run, shared with the model records.")]
    run_id: NonEmpty
    session_id: NonEmpty
    ts: Timestamp
    transport: TransportName
    api: Annotated[str, doc("Always mcp: a line of this kind.")] = field(
        default=MCP_API, init=False
    )
    route: Annotated[str | None, doc("The route name (--mcp NAME), or null in regular mode.")]
    upstream: str
    path: Annotated[
        str,
        doc(
            "As a model record's path: query values REDACTED (HTTP+SSE's session_id "
            "included), cut at 2048 characters."
        ),
    ]
    mcp_server: Annotated[
        NonEmpty, doc("The server's name: --mcp NAME, or the host named with --mcp-host.")
    ]
    mcp_session: McpSession | None
    protocol_version: Annotated[
        WireId | None,
        doc(
            "The MCP-Protocol-Version header, else params._meta's "
            "io.modelcontextprotocol/protocolVersion (2026-07-28), else initialize's "
            "params.protocolVersion (on the initialize line), else null."
        ),
    ]
    message_type: Annotated[
        str, promise(enum=list(MCP_MESSAGE_TYPES)), doc("What the message is (MCP_MESSAGE_TYPES).")
    ]
    mcp_method: Annotated[
        WireId | None,
        doc(
            "The JSON-RPC method (initialize, tools/call, notifications/...); for the client's "
            "answer to a server request, the method of that request when it was seen, else null."
        ),
    ]
    jsonrpc_id: Annotated[
        JsonRpcId | None,
        doc("The JSON-RPC id exactly as sent (0 and strings kept); null for a notification."),
    ]
    batch_index: Annotated[
        Count | None, doc("The message's place in a JSON-RPC batch; null for a lone message.")
    ]
    tool_name: Annotated[WireId | None, doc("tools/call: params.name; else null.")]
    arguments_sha256: Annotated[
        Sha256Hex | None,
        doc(
            "tools/call: SHA-256 of the arguments' canonical JSON (keys sorted, no spaces, "
            "UTF-8); null when the call sent no arguments."
        ),
    ]
    arguments_bytes: Annotated[
        Count | None, doc("tools/call: the length of that canonical JSON; null when none sent.")
    ]
    tool_call_id: Annotated[
        WireId | None,
        doc(
            "tools/call: the model's tool-call id the client put in params._meta "
            "(Claude Code claudecode/toolUseId, Codex callId), else null."
        ),
    ]
    continues_seq: Annotated[
        Count | None,
        doc(
            "tools/call retried with the requestState of an input_required result "
            "(2026-07-28): the seq of the tools/call that began this execution (the same "
            "execution, counted once); else null."
        ),
    ]
    unchecked_headers: Annotated[
        tuple[WireId, ...],
        doc(
            "The Mcp-Param-* headers the proxy could not compare with the body, because no "
            "tools/list result it saw on this server declared the tool's x-mcp-header "
            "arguments; [] otherwise (every header checked, or none sent)."
        ),
    ]
    body_bytes: Count
    body_sha256: Sha256Hex


#: Every kind of ``audit.jsonl`` line: a model request, or an MCP message.
AUDIT_TYPES: Final[tuple[type, ...]] = (AuditRecord, McpAuditRecord)


# --------------------------------------------------------------------------
# Response side


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage as the provider reported it; each count null when not reported."""

    input_tokens: Count | None = None
    output_tokens: Count | None = None
    total_tokens: Count | None = None
    cache_read_tokens: Count | None = None
    cache_write_tokens: Count | None = None
    reasoning_tokens: Count | None = None


#: The counts of :class:`Usage`, in order: the one usage vocabulary of the
#: files, the report, coverage and the page.
USAGE_COUNTS: Final = tuple(f.name for f in dataclasses.fields(Usage))


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for, arguments exactly as the model sent them."""

    call_id: WireId | None
    name: WireId | None
    arguments: Annotated[str | None, doc("As sent by the model.")]
    namespace: WireId | None = None


@dataclass(frozen=True, slots=True)
class InvocationMetrics:
    """The provider's own measurements of one invocation, as it reported them.

    Bedrock reports them beside the usage: InvokeModel in response headers
    (X-Amzn-Bedrock-Invocation-Latency, -Input-Token-Count, -Output-Token-Count),
    InvokeModelWithResponseStream in the last chunk's
    amazon-bedrock-invocationMetrics, Converse in metrics (latencyMs). Each
    value null when not reported.
    """

    input_tokens: Annotated[Count | None, doc("inputTokenCount.")] = None
    output_tokens: Annotated[Count | None, doc("outputTokenCount.")] = None
    latency_ms: Annotated[
        Count | None,
        doc(
            "The invocation's latency as the provider measured it (invocationLatency, "
            "latencyMs), in milliseconds."
        ),
    ] = None
    first_byte_latency_ms: Annotated[Count | None, doc("firstByteLatency, in milliseconds.")] = None


@dataclass(frozen=True, slots=True)
class ResponseFacts:
    """What an observer read off one response (JSON body, SSE stream or WS events).

    Validated on construction (SPEC section 8, no prompt text): an upstream
    that echoes a request into an identifier (``model``, ``id``, ``status``, a
    finish reason, a tool call's id, name or namespace) could put prompt text
    there, so a value over :data:`MAX_ID_CHARS` is not kept (``None``, or left
    out of ``finish_reasons``) and a capture error says so in modeltap's own
    words. Tool call ``arguments`` are the model's output and kept as sent.
    """

    response_id: str | None = None
    model: str | None = None
    usage: Usage = field(default_factory=Usage)
    finish_reasons: tuple[str, ...] | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    status: str | None = None
    evidence_complete: bool = False
    capture_errors: tuple[str, ...] = ()
    #: The service tier that served the response, as the provider named it
    #: (OpenAI ``service_tier``, Anthropic ``usage.service_tier``); it selects
    #: the price. Not written to events: spans and the cost estimate read it.
    service_tier: str | None = None
    #: OpenAI's ``system_fingerprint`` (chat), for spans; not written to events.
    system_fingerprint: str | None = None
    #: The provider's own measurements (Bedrock's invocation metrics), when it
    #: reports them; ``None`` for wires that do not.
    invocation_metrics: InvocationMetrics | None = None
    #: The output in the GenAI conventions' message shape, for spans only,
    #: assembled only when content capture is on (bounded by the observer);
    #: ``None`` when not captured. Never written to a file.
    output_messages: list[Json] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        dropped: list[str] = []

        def bounded(value: str | None, what: str) -> str | None:
            if value is None or len(value) <= MAX_ID_CHARS:
                return value
            dropped.append(what)
            return None

        for name in ("response_id", "model", "status", "service_tier", "system_fingerprint"):
            value = getattr(self, name)
            if value == "":
                object.__setattr__(self, name, None)  # unknown is null, never ""
            elif value is not None and len(value) > MAX_ID_CHARS:
                object.__setattr__(self, name, bounded(value, name))
        if self.finish_reasons is not None and any(
            len(r) > MAX_ID_CHARS for r in self.finish_reasons
        ):
            dropped.append("finish_reason")
            kept = tuple(r for r in self.finish_reasons if len(r) <= MAX_ID_CHARS)
            object.__setattr__(self, "finish_reasons", kept)
        if any(_overlong_call(call) for call in self.tool_calls):
            calls = tuple(
                ToolCall(
                    bounded(call.call_id or None, "tool call id"),
                    bounded(call.name or None, "tool call name"),
                    call.arguments,
                    bounded(call.namespace or None, "tool call namespace"),
                )
                for call in self.tool_calls
            )
            object.__setattr__(self, "tool_calls", calls)
        if dropped:
            notes = tuple(
                f"the response's {what} is longer than {MAX_ID_CHARS} characters; not recorded"
                for what in dict.fromkeys(dropped)
            )
            object.__setattr__(self, "capture_errors", self.capture_errors + notes)
            object.__setattr__(self, "evidence_complete", False)


def _overlong_call(call: ToolCall) -> bool:
    """A call holding an id or name too long to keep, or empty (unknown: null)."""
    return any(
        value is not None and (len(value) > MAX_ID_CHARS or not value)
        for value in (call.call_id, call.name, call.namespace)
    )


# --------------------------------------------------------------------------
# Events (events.jsonl)


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Fields every line of ``events.jsonl`` carries."""

    kind: str
    ts: Timestamp
    run_id: NonEmpty
    session_id: NonEmpty
    seq: Annotated[
        Count | None, doc("The seq of the audit record the event belongs to; null where none.")
    ] = None
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class McpMessageRef:
    """A client-to-server MCP message a refusal names, as far as it was read."""

    message_type: Annotated[str, promise(enum=list(MCP_MESSAGE_TYPES))]
    mcp_method: WireId | None
    jsonrpc_id: JsonRpcId | None
    tool_name: WireId | None


@dataclass(frozen=True, slots=True)
class McpRefused:
    """What an MCP refusal refused (``rejected`` events of MCP bodies)."""

    mcp_server: NonEmpty
    mcp_session: McpSession | None
    messages: Annotated[
        tuple[McpMessageRef, ...],
        doc(
            "The body's messages, in order, when it was JSON-RPC; [] when it could not be "
            "read as such (or carried no message: a GET stream)."
        ),
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class RejectedEvent(Event):
    """A request or WebSocket message refused before forwarding; it has no audit record."""

    kind: str = field(default="rejected", init=False)
    rule: NonEmpty
    message: str
    status: Count | None
    transport: TransportName
    method: str | None
    path: str
    api: ApiName | None = None
    mcp: Annotated[
        McpRefused | None,
        doc("An MCP body's refusal: its server, session and messages; null for other refusals."),
    ] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UnauditedEvent(Event):
    """A request passed through without audit (not a model request)."""

    kind: str = field(default="unaudited", init=False)
    method: str
    host: str | None
    path: str
    status: Count | None


@dataclass(frozen=True, slots=True)
class Cost:
    """The estimated price of an exchange (SPEC section 5): an estimate by a
    price table, never a bill."""

    estimate_usd: Annotated[
        Annotated[float, promise(minimum=0)] | None,
        doc(
            "US dollars, by the price table; null when it cannot be estimated (unknown "
            "model, a count the table prices not reported), never 0 for unknown."
        ),
    ]
    source: Annotated[NonEmpty, doc("The price table and its version, e.g. 'genai-prices 0.2.3'.")]
    priced_as: Annotated[
        str | None,
        doc(
            "The table's provider/model the exchange was priced as "
            "(anthropic/claude-sonnet-4-5); null when the model is not in the table."
        ),
    ] = None
    note: Annotated[str | None, doc("Why there is no estimate, when there is none.")] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseEvent(Event):
    """What came back for one audited request (SPEC section 4)."""

    kind: str = field(default="response", init=False)
    seq: Annotated[
        Count | None, NEVER_NULL, doc("The seq of its audit record: a response always has one.")
    ] = None
    api: ApiName
    transport: TransportName
    status: Annotated[Count | None, doc("HTTP status (WebSocket: null).")]
    stream: bool
    response_id: WireId | None
    model: WireId | None
    usage: Usage
    finish_reasons: tuple[WireId, ...] | None
    tool_calls: tuple[ToolCall, ...]
    response_status: WireId | None
    ttfb_ms: Millis | None
    ttft_ms: Millis | None
    duration_ms: Millis | None
    evidence_complete: Annotated[
        bool, doc("The whole response was seen and parsed, terminal event included.")
    ]
    capture_errors: tuple[str, ...]
    cost: Annotated[
        Cost | None, doc("The estimated price; null only on lines written before estimates.")
    ] = None
    invocation_metrics: Annotated[
        InvocationMetrics | None,
        doc("The provider's own measurements of the invocation (Bedrock), else null."),
    ] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent(Event):
    """Something broke: upstream unreachable, a reset, a client that went away."""

    kind: str = field(default="error", init=False)
    error: NonEmpty
    message: Annotated[
        str,
        doc(
            "modeltap's own fixed text for the kind of error; never the upstream's or "
            "mitmproxy's words."
        ),
    ]
    transport: TransportName
    method: str | None
    path: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class WsOpenEvent(Event):
    """A WebSocket connection was established through the proxy."""

    kind: str = field(default="ws_open", init=False)
    path: str
    route: str | None
    upstream: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WsCloseEvent(Event):
    """A WebSocket connection ended."""

    kind: str = field(default="ws_close", init=False)
    code: int | None
    reason: str | None
    closed_by: str | None
    messages_from_client: Count
    messages_from_server: Count


@dataclass(frozen=True, slots=True, kw_only=True)
class WsControlEvent(Event):
    """An allowed WebSocket control message (e.g. ``response.processed``)."""

    kind: str = field(default="ws_control", init=False)
    type: NonEmpty


@dataclass(frozen=True, slots=True, kw_only=True)
class FileReopenedEvent(Event):
    """An out file was deleted, renamed or replaced under the running proxy, and
    opened (created) again at its path; lines written to it before are not in
    the new file (SPEC section 8)."""

    kind: str = field(default="file_reopened", init=False)
    file: Annotated[str, promise(enum=list(OUT_FILES)), doc("Which file.")]
    reason: Annotated[
        str,
        promise(enum=[REOPEN_MISSING, REOPEN_REPLACED]),
        doc("missing (the path was gone) or replaced (it named another file)."),
    ]
    lost_lines: Annotated[
        bool,
        doc(
            "True when this session had lines before the move, which the file may have "
            "held: they are not in the out dir now, and its data evidence is partial. "
            "False on the one event that names no such session (the file was moved "
            "between sessions: nothing of an open session was lost)."
        ),
    ] = True


@dataclass(frozen=True, slots=True)
class McpContentItem:
    """One content item of a tools/call result: its type and size, never its content."""

    type: Annotated[WireId | None, doc("text, image, audio, resource_link, resource...")]
    bytes: Annotated[Count, doc("The item's size as compact JSON, in UTF-8 bytes.")]


@dataclass(frozen=True, slots=True)
class McpToolDigest:
    """One tool a tools/list result advertises: its name and the hash of its definition."""

    name: WireId
    sha256: Annotated[
        Sha256Hex,
        doc(
            "SHA-256 of the tool's definition as canonical JSON (keys sorted, no spaces): "
            "name, description, inputSchema, outputSchema, annotations, all of it."
        ),
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class McpResultEvent(Event):
    """The server's answer to one client request (SPEC 3b), observed as it arrived,
    on whatever exchange carried it: its own POST, a resumed GET stream, the
    HTTP+SSE stream. Matched to its request by (MCP session, direction, id)."""

    kind: str = field(default="mcp_result", init=False)
    seq: Annotated[
        Count | None,
        doc("The seq of the request's audit line; null when no request with this id was seen."),
    ] = None
    mcp_server: NonEmpty
    mcp_session: McpSession | None
    mcp_method: Annotated[WireId | None, doc("The request's method; null when not seen.")]
    jsonrpc_id: Annotated[JsonRpcId | None, doc("The id as the answer carried it.")]
    tool_name: Annotated[WireId | None, doc("tools/call: the tool the request named.")]
    outcome: Annotated[str, promise(enum=list(MCP_OUTCOMES)), doc("MCP_OUTCOMES.")]
    status: Annotated[Count | None, doc("The HTTP status of the exchange that carried it.")]
    framing: Annotated[
        str | None,
        promise(enum=list(MCP_FRAMINGS)),
        doc("json or sse; null for an http_error (nothing JSON-RPC came)."),
    ]
    is_error: Annotated[
        bool | None,
        doc(
            "tools/call results: isError as sent (absent: false, the wire's default); null "
            "for other methods, errors, and a flag that is not a boolean."
        ),
    ]
    error_code: Annotated[int | None, doc("A JSON-RPC error's code; else null.")]
    content: Annotated[
        tuple[McpContentItem, ...] | None,
        doc("tools/call results: each content item's type and size, in order; else null."),
    ]
    structured_content: Annotated[
        bool | None, doc("tools/call results: whether structuredContent came; else null.")
    ]
    result_type: Annotated[
        WireId | None, doc("resultType as sent (2026-07-28: complete, input_required); else null.")
    ]
    tools: Annotated[
        tuple[McpToolDigest, ...] | None,
        doc("tools/list results: the tools advertised, in order; else null."),
    ]
    tools_sha256: Annotated[
        Sha256Hex | None,
        doc(
            "tools/list results: SHA-256 of the list of the tools' definitions, sorted by "
            "name, as canonical JSON: it changes exactly when the catalogue page does."
        ),
    ]
    next_cursor: Annotated[
        bool | None, doc("List results: whether a nextCursor asked for another page.")
    ]
    duration_ms: Annotated[
        Millis | None, doc("From forwarding the request to this answer; null when not seen.")
    ]
    evidence_complete: Annotated[
        bool, doc("The answer was read whole, every field above as the wire said it.")
    ]
    capture_errors: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class McpRequestEvent(Event):
    """A server-to-client request (sampling/createMessage, elicitation/create,
    roots/list, ...): a JSON-RPC request on a stream, or, at 2026-07-28, an input
    request inside an ``input_required`` result. Its content is not kept."""

    kind: str = field(default="mcp_request", init=False)
    seq: Annotated[
        Count | None,
        doc(
            "The audit line of the client request it belongs to: the POST whose stream "
            "carried it, or the tools/call whose input_required result asked it; null on a "
            "GET stream."
        ),
    ] = None
    mcp_server: NonEmpty
    mcp_session: McpSession | None
    mcp_method: Annotated[WireId | None, doc("What the server asks for.")]
    jsonrpc_id: Annotated[
        JsonRpcId | None, doc("The server's own id (its own numbering); null for input requests.")
    ]
    origin: Annotated[str, promise(enum=list(MCP_REQUEST_ORIGINS)), doc("MCP_REQUEST_ORIGINS.")]
    input_key: Annotated[
        WireId | None, doc("input_required: the key the server gave the input request.")
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class McpNotificationEvent(Event):
    """A server-to-client notification (notifications/progress, /message,
    /tools/list_changed, ...); its params are not kept."""

    kind: str = field(default="mcp_notification", init=False)
    seq: Annotated[
        Count | None,
        doc("The audit line of the request whose stream carried it; null on a GET stream."),
    ] = None
    mcp_server: NonEmpty
    mcp_session: McpSession | None
    mcp_method: WireId | None


@dataclass(frozen=True, slots=True, kw_only=True)
class McpExchangeEvent(Event):
    """An MCP exchange that is more than its audit lines and answers ended: one
    that carried no client message (a GET stream, whose messages are mcp_*
    events of their own; a DELETE that ends an MCP session), or a POST whose
    answer could not be read whole."""

    kind: str = field(default="mcp_exchange", init=False)
    method: str
    path: str
    mcp_server: NonEmpty
    mcp_session: McpSession | None
    status: Annotated[Count | None, doc("HTTP status; null when no answer came.")]
    resumed: Annotated[bool, doc("The client sent Last-Event-ID: it resumes a stream.")]
    messages_from_server: Annotated[Count, doc("JSON-RPC messages the stream carried.")]
    endpoint: Annotated[
        str | None,
        promise(enum=list(MCP_ENDPOINTS)),
        doc("HTTP+SSE: what became of its endpoint event (MCP_ENDPOINTS); else null."),
    ]
    duration_ms: Millis | None
    failure: Annotated[
        str | None,
        doc(
            "How it ended when it did not end by itself: client_gone, upstream_reset, "
            "upstream_timeout, proxy_stopped...; null otherwise. A stream's end is no "
            "failure of the session (clients leave GET streams open and go)."
        ),
    ] = None
    capture_errors: tuple[str, ...] = ()


#: Every kind of ``events.jsonl`` line, in the schema's order; a new kind is
#: added here (reading and the schema take it from this tuple).
EVENT_TYPES: Final[tuple[type[Event], ...]] = (
    RejectedEvent,
    UnauditedEvent,
    ResponseEvent,
    ErrorEvent,
    WsOpenEvent,
    WsCloseEvent,
    WsControlEvent,
    FileReopenedEvent,
    McpResultEvent,
    McpRequestEvent,
    McpNotificationEvent,
    McpExchangeEvent,
)


def kind_of(event_type: type[Event]) -> str:
    """The ``kind`` an event type writes (its field's fixed default)."""
    (kind,) = (f.default for f in dataclasses.fields(event_type) if f.name == "kind")
    assert isinstance(kind, str), f"{event_type.__name__} has no fixed kind"
    return kind


# --------------------------------------------------------------------------
# Sessions (sessions.jsonl)

#: What a session without a single audited request says (seeds/000).
NO_REQUESTS_MESSAGE = "No outbound model requests captured; audit unsupported"

STOP_REASONS = (
    "completed",
    "tool_budget_exceeded",
    "request_audit_error",
    "upstream_error",
    "client_gone",
    "proxy_stopped",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionStatus:
    """One line of ``sessions.jsonl``: how a session ended, as the proxy saw it.

    These are execution facts, never a verdict on the agent's task. The
    types let each count be null (unknown) for a reader; this writer always
    knows them.
    """

    run_id: NonEmpty
    session_id: NonEmpty
    ts: Timestamp
    stop_reason: Annotated[
        str | None,
        promise(enum=list(STOP_REASONS)),
        NEVER_NULL,
        doc("Why the session ended, as the proxy saw it (STOP_REASONS)."),
    ]
    requests_audited: Annotated[Count | None, NEVER_NULL]
    refusals: Annotated[Count | None, NEVER_NULL]
    tool_calls_admitted: Annotated[
        Count | None,
        NEVER_NULL,
        doc("Requested tool calls whose results were let through to the model."),
    ]
    evidence_complete: Annotated[bool | None, NEVER_NULL]
    capture_errors: tuple[str, ...] = ()
    mcp_messages_audited: Annotated[
        Count | None,
        NEVER_NULL,
        doc("Client-to-server MCP messages audited (lines of audit.jsonl with api mcp)."),
    ] = None
    mcp_tool_calls: Annotated[
        Count | None,
        NEVER_NULL,
        doc(
            "MCP tools/call executions let through, each once (an input_required retry "
            "continues one)."
        ),
    ] = None
    message: Annotated[
        str | None, doc("What a session without a single audited request says, else null.")
    ] = None
    otlp_logs_dropped: Annotated[
        Count | None,
        doc(
            "Log records of this proxy's lines (SPEC 9) known not to reach the OTLP "
            "collector when this line was written: refused by a full queue or in a failed "
            "export (the exact total is printed at exit). null when lines are not exported "
            "as log records."
        ),
    ] = None
    upstream_insecure: Annotated[
        bool,
        doc(
            "Upstream TLS certificates were not verified (--upstream-insecure): whoever "
            "answered may not have been the upstream the records name."
        ),
    ] = False


def to_json_line(record: object) -> bytes:
    """Serialise a record or event to one JSON line (ending in ``\\n``).

    Args:
        record: one of the dataclasses of this module.

    Returns:
        UTF-8 JSON bytes followed by a newline.
    """
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
