"""Records and events: the one place that knows the JSONL schema.

Everything written to ``audit.jsonl``, ``events.jsonl`` and ``sessions.jsonl``
is one of the frozen dataclasses below, serialised by :func:`to_json_line`.
Unknown values are ``None`` (JSON ``null``), never ``0`` or ``""``; an empty
tuple means "sent, and empty".
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus

import orjson

Json = dict[str, Any]

API_CHAT = "openai.chat_completions"
API_RESPONSES = "openai.responses"
API_ANTHROPIC = "anthropic.messages"
APIS = (API_CHAT, API_RESPONSES, API_ANTHROPIC)


def utc_now() -> str:
    """Return the current UTC time as ISO-8601 with milliseconds and ``Z``."""
    # Called twice per exchange: format each second once, then add the milliseconds.
    ns = time.time_ns()
    return f"{_utc_second(ns // 1_000_000_000)}.{ns // 1_000_000 % 1000:03d}Z"


@functools.lru_cache(maxsize=4)
def _utc_second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


_SECRET_NAME = re.compile(
    r"(?:key|api[-_]?key|apikey|access[-_]?token|token|auth|authorization|"
    r"sig|signature|code|password|secret)",
    re.IGNORECASE,
)


def redact_path(path: str) -> str:
    """Return ``path`` with the values of secret-bearing query parameters redacted.

    Parameter names are compared after percent-decoding (``?%6Bey=`` is
    ``?key=``), and a fragment after ``#`` is dropped: a raw request target
    should not carry one, and whatever it holds is not ours to keep.

    Args:
        path: a request path, possibly with a query string (``/v1/x?key=abc``).

    Returns:
        The same path with each secret value replaced by ``REDACTED``.
    """
    path = path.split("#", 1)[0]
    head, sep, query = path.partition("?")
    if not sep:
        return path
    params = []
    for param in query.split("&"):
        name, eq, _ = param.partition("=")
        if eq and _SECRET_NAME.fullmatch(unquote_plus(name).strip()):
            param = f"{name}=REDACTED"
        params.append(param)
    return f"{head}?{'&'.join(params)}"


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
class RequestFacts:
    """What an API module reads off one outgoing request body (SPEC section 2)."""

    model: str
    tool_names: tuple[str, ...] | None
    reasoning_effort: str | None
    thinking: Json | None
    image_details: tuple[str | None, ...]
    instructions_sha256: str | None
    stream: bool
    hosted_tools: tuple[HostedTool, ...]
    tool_results: tuple[ToolResult, ...]
    previous_response_id: str | None
    generate: bool | None
    omitted_settings: tuple[str, ...] = ()
    #: Chat only: whether ``stream_options.include_usage`` was sent true.
    #: Not written to the record; the response observer needs it.
    include_usage: bool | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditRecord:
    """One line of ``audit.jsonl``: a validated outgoing model request."""

    request_id: str
    model: str
    tool_names: tuple[str, ...] | None
    reasoning_effort: str | None
    thinking: Json | None
    image_details: tuple[str | None, ...]
    image_count: int
    instructions_sha256: str | None
    seq: int
    run_id: str
    session_id: str
    ts: str
    transport: str
    api: str
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
        route: str | None,
        upstream: str,
        path: str,
        body_bytes: int,
        body_sha256: str,
        ts: str | None = None,
    ) -> AuditRecord:
        """Combine request facts with where and when the request went."""
        return cls(
            request_id=request_id,
            model=facts.model,
            tool_names=facts.tool_names,
            reasoning_effort=facts.reasoning_effort,
            thinking=facts.thinking,
            image_details=facts.image_details,
            image_count=len(facts.image_details),
            instructions_sha256=facts.instructions_sha256,
            seq=seq,
            run_id=run_id,
            session_id=session_id,
            ts=ts or utc_now(),
            transport=transport,
            api=api,
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


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for, arguments exactly as the model sent them."""

    call_id: str | None
    name: str | None
    arguments: str | None
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class ResponseFacts:
    """What an observer read off one response (JSON body, SSE stream or WS events)."""

    response_id: str | None = None
    model: str | None = None
    usage: Usage = field(default_factory=Usage)
    finish_reasons: tuple[str, ...] | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    status: str | None = None
    evidence_complete: bool = False
    capture_errors: tuple[str, ...] = ()


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


def to_json_line(record: object) -> bytes:
    """Serialise a record or event to one JSON line (ending in ``\\n``).

    Args:
        record: one of the dataclasses of this module.

    Returns:
        UTF-8 JSON bytes followed by a newline.
    """
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
