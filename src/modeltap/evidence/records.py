"""Records and events: the one place that knows the JSONL schema.

Everything written to ``audit.jsonl``, ``events.jsonl`` and ``sessions.jsonl``
is one of the frozen dataclasses below, serialised by :func:`to_json_line`
(orjson, every field, in order). Unknown values are ``None`` (JSON ``null``),
never ``0`` or ``""``; an empty tuple means "sent, and empty". The same types
are read back (:mod:`modeltap.evidence.capture.lines`). A field added after
lines were first written has a default (for a nullable one, ``None``:
unknown), which is what a line an older modeltap wrote reads as; the writer
always writes it.

Why one module of ~700 lines: the schema is read whole. Splitting the
dataclasses from their serialiser, or requests from responses, would make a
reader hold two files open to learn what one JSONL line can say; most of the
length is field declarations, each with the comment that documents it.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from modeltap.evidence.redaction import redact_path

Json = dict[str, Any]

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
#: Why a file was opened again: the path was gone, or named another file.
REOPEN_MISSING: Final = "missing"
REOPEN_REPLACED: Final = "replaced"

# --------------------------------------------------------------------------
# Request side


@dataclass(frozen=True, slots=True)
class HostedTool:
    """A provider-run or non-function tool advertised in a request."""

    type: str
    name: str | None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool result carried back to the model: its call id and its size."""

    call_id: str | None
    bytes: int


@dataclass(frozen=True, slots=True)
class InstructionPart:
    """One instruction text of a request, as ``instructions_parts`` lists it.

    Attributes:
        sha256: SHA-256 (hex) of the text's UTF-8.
        bytes: the text's length in UTF-8 bytes.
    """

    sha256: str
    bytes: int


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
    """One line of ``audit.jsonl``: a validated outgoing model request."""

    request_id: str
    model: str
    #: ``"path"`` or ``"body"`` (:data:`MODEL_SOURCES`). ``None`` only in a line an
    #: older modeltap wrote (read back by :mod:`modeltap.evidence.capture`): unknown.
    model_source: str | None = None
    tool_names: tuple[str, ...] | None
    reasoning_effort: str | None
    thinking: Json | None
    image_details: tuple[str | None, ...]
    image_count: int
    instructions_sha256: str | None
    instructions_parts: tuple[InstructionPart, ...] | None = None
    seq: int
    run_id: str
    session_id: str
    ts: str
    transport: str
    #: The wire's name (:attr:`modeltap.apis.contract.Wire.NAME`:
    #: ``openai.chat_completions``, ...); the schemas list every one.
    api: str
    #: :data:`OPERATIONS`: ``compact`` for a Responses compaction, else
    #: ``create``. ``None`` only in a line an older modeltap wrote: unknown.
    operation: str | None = None
    #: The route's real provider, in ``gen_ai.provider.name`` terms. ``None``
    #: only in a line an older modeltap wrote: unknown.
    provider: str | None = None
    route: str | None
    upstream: str
    path: str
    stream: bool
    hosted_tools: tuple[HostedTool, ...]
    tool_results: tuple[ToolResult, ...]
    previous_response_id: str | None
    generate: bool | None
    omitted_settings: tuple[str, ...]
    body_bytes: int
    body_sha256: str

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


# --------------------------------------------------------------------------
# Response side


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage as the provider reported it; each count ``None`` if not reported."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None


#: The counts of :class:`Usage`, in order: the one usage vocabulary of the
#: files, the report, coverage and the page.
USAGE_COUNTS: Final = tuple(f.name for f in dataclasses.fields(Usage))


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for, arguments exactly as the model sent them."""

    call_id: str | None
    name: str | None
    arguments: str | None
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class InvocationMetrics:
    """The provider's own measurements of one invocation, as it reported them.

    Bedrock reports them beside the usage: InvokeModel in response headers
    (``X-Amzn-Bedrock-Invocation-Latency``, ``-Input-Token-Count``,
    ``-Output-Token-Count``), InvokeModelWithResponseStream in the last
    chunk's ``amazon-bedrock-invocationMetrics``, Converse in ``metrics``
    (``latencyMs``). Each value ``None`` when not reported.

    Attributes:
        input_tokens: ``inputTokenCount``.
        output_tokens: ``outputTokenCount``.
        latency_ms: the invocation's latency as the provider measured it
            (``invocationLatency``, ``latencyMs``), in milliseconds.
        first_byte_latency_ms: ``firstByteLatency``, in milliseconds.
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    latency_ms: int | None = None
    first_byte_latency_ms: int | None = None


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
            if value is not None and len(value) > MAX_ID_CHARS:
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
                    bounded(call.call_id, "tool call id"),
                    bounded(call.name, "tool call name"),
                    call.arguments,
                    bounded(call.namespace, "tool call namespace"),
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
    return any(
        value is not None and len(value) > MAX_ID_CHARS
        for value in (call.call_id, call.name, call.namespace)
    )


# --------------------------------------------------------------------------
# Events (events.jsonl)


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Fields every line of ``events.jsonl`` carries."""

    kind: str
    ts: str
    run_id: str
    session_id: str
    seq: int | None = None
    request_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RejectedEvent(Event):
    """A request or WebSocket message refused before forwarding."""

    kind: str = field(default="rejected", init=False)
    rule: str
    message: str
    status: int | None
    transport: str
    method: str | None
    path: str
    api: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UnauditedEvent(Event):
    """A request passed through without audit (not a model request)."""

    kind: str = field(default="unaudited", init=False)
    method: str
    host: str | None
    path: str
    status: int | None


@dataclass(frozen=True, slots=True)
class Cost:
    """The estimated price of an exchange (SPEC section 5): an estimate, never a bill.

    Attributes:
        estimate_usd: the price in US dollars by the price table, or ``None``
            when it cannot be estimated (unknown model, a count the table
            prices not reported): never ``0`` for unknown.
        source: the price table it comes from, with its version
            (``genai-prices 0.2.3``).
        priced_as: the table's provider and model the exchange was priced as
            (``anthropic/claude-sonnet-4-5``); ``None`` when not found.
        note: why there is no estimate, when there is none.
    """

    estimate_usd: float | None
    source: str
    priced_as: str | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseEvent(Event):
    """What came back for one audited request (SPEC section 4)."""

    kind: str = field(default="response", init=False)
    api: str
    transport: str
    status: int | None
    stream: bool
    response_id: str | None
    model: str | None
    usage: Usage
    finish_reasons: tuple[str, ...] | None
    tool_calls: tuple[ToolCall, ...]
    response_status: str | None
    ttfb_ms: float | None
    ttft_ms: float | None
    duration_ms: float | None
    evidence_complete: bool
    capture_errors: tuple[str, ...]
    #: The estimated price (``None`` on lines written before estimates existed).
    cost: Cost | None = None
    #: The provider's own measurements of the invocation (Bedrock), else ``None``.
    invocation_metrics: InvocationMetrics | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent(Event):
    """Something broke: upstream unreachable, a reset, a client that went away."""

    kind: str = field(default="error", init=False)
    error: str
    message: str
    transport: str
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
    messages_from_client: int
    messages_from_server: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WsControlEvent(Event):
    """An allowed WebSocket control message (e.g. ``response.processed``)."""

    kind: str = field(default="ws_control", init=False)
    type: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FileReopenedEvent(Event):
    """An out file was deleted, renamed or replaced under the running proxy, and
    opened (created) again at its path; lines written to it before are not in
    the new file (SPEC section 8)."""

    kind: str = field(default="file_reopened", init=False)
    #: Which file: ``audit.jsonl``, ``events.jsonl`` or ``sessions.jsonl``.
    file: str
    #: ``missing`` (the path was gone) or ``replaced`` (it named another file).
    reason: str
    #: True when this session had lines before the move, which the file may have
    #: held: they are not in the out dir now, and its ``data`` evidence is partial.
    #: False on the one event that names no such session (the file was moved
    #: between sessions: nothing of an open session was lost).
    lost_lines: bool = True


#: Every kind of ``events.jsonl`` line; a new kind is added here (reading
#: takes it from this tuple).
EVENT_TYPES: Final[tuple[type[Event], ...]] = (
    RejectedEvent,
    UnauditedEvent,
    ResponseEvent,
    ErrorEvent,
    WsOpenEvent,
    WsCloseEvent,
    WsControlEvent,
    FileReopenedEvent,
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

    These are execution facts, never a verdict on the agent's task.
    """

    run_id: str
    session_id: str
    ts: str
    stop_reason: str | None
    requests_audited: int | None
    refusals: int | None
    tool_calls_admitted: int | None
    evidence_complete: bool | None
    capture_errors: tuple[str, ...] = ()
    message: str | None = None
    #: Log records of this proxy's lines (SPEC 9) known not to reach the OTLP
    #: collector when this line was written: refused by a full queue or in a
    #: failed export (the exact total is printed at exit). ``None`` when lines
    #: are not exported as log records.
    otlp_logs_dropped: int | None = None
    #: Upstream TLS certificates were not verified (``--upstream-insecure``):
    #: whoever answered may not have been the upstream the records name.
    upstream_insecure: bool = False


def to_json_line(record: object) -> bytes:
    """Serialise a record or event to one JSON line (ending in ``\\n``).

    Args:
        record: one of the dataclasses of this module.

    Returns:
        UTF-8 JSON bytes followed by a newline.
    """
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
