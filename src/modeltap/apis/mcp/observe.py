"""Server-to-client MCP messages: what an answer, a request or a notification says (pure).

A server answers in a JSON body (one message, or a list answering a batch) or
in SSE events, on the POST that asked or on a GET stream (a resumed one, or
HTTP+SSE's single stream). :func:`read_sse_event` tells an SSE event's kind:
a priming event (empty data, kept only for its ``id``, the resume point), the
HTTP+SSE ``endpoint`` event (a path, not JSON), or JSON-RPC messages
(``event: message`` or no type). :func:`read_messages` reads JSON-RPC out of
a parsed value, and :func:`answer_facts` what an answer says: for a
``tools/call`` result its ``isError``, its content items' types and sizes and
whether ``structuredContent`` came; for a ``tools/list`` result the tools'
names and the hashes of their definitions; at 2026-07-28 its ``resultType``
and the input requests of an ``input_required`` result. Content is never kept.

Nothing here raises on what a server sends: what cannot be read becomes a
capture error in modeltap's own words.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

import orjson

from modeltap.apis.json_body import utf8_len
from modeltap.apis.mcp.headers import ToolHeaders, tool_headers
from modeltap.apis.mcp.messages import MEMBERS, canonical_json, id_key
from modeltap.evidence.records import MAX_ID_CHARS, McpContentItem, McpToolDigest
from modeltap.wire.sse import SSEEvent

#: The SSE event type of HTTP+SSE's endpoint announcement.
ENDPOINT_EVENT: Final = "endpoint"
#: The SSE event types that carry JSON-RPC (none given is ``message``).
MESSAGE_EVENTS: Final = frozenset({None, "message"})
#: Methods whose results list things and may be paged (``nextCursor``).
LIST_METHODS: Final = frozenset(
    {"tools/list", "resources/list", "resources/templates/list", "prompts/list"}
)
#: A ``tools/list`` page's tools beyond this many are not kept (named in a capture error).
MAX_TOOLS: Final = 4096

RESULT, ERROR, REQUEST, NOTIFICATION = "result", "error", "request", "notification"


@dataclass(frozen=True, slots=True)
class ServerMessage:
    """One server-to-client JSON-RPC message.

    Attributes:
        kind: ``result``, ``error`` (both answer a client request),
            ``request`` (the server asks the client: sampling, elicitation,
            roots) or ``notification``.
        jsonrpc_id: its id (an answer's, or the server's own request's).
        method: a request's or notification's method (bounded), else ``None``.
        body: the message as parsed (read by :func:`answer_facts`, never written).
    """

    kind: str
    jsonrpc_id: int | str | None
    method: str | None
    body: Mapping[str, Any]

    @property
    def id_key(self) -> bytes | None:
        """The id as :func:`~modeltap.apis.mcp.messages.id_key` keys it."""
        return None if self.jsonrpc_id is None else id_key(self.jsonrpc_id)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """HTTP+SSE's ``endpoint`` event: where the client is to POST its messages."""

    data: str


@dataclass(frozen=True, slots=True)
class Unreadable:
    """An event or body that is not JSON-RPC (its capture error, in our words)."""

    reason: str


@dataclass(frozen=True, slots=True)
class AnswerFacts:
    """What one answer to a client request says (:func:`answer_facts`)."""

    is_error: bool | None = None
    error_code: int | None = None
    content: tuple[McpContentItem, ...] | None = None
    structured_content: bool | None = None
    result_type: str | None = None
    tools: tuple[McpToolDigest, ...] | None = None
    tools_sha256: str | None = None
    next_cursor: bool | None = None
    #: ``tools/list``: each tool's mirrored arguments (``Mcp-Param-*``), for
    #: checking later ``tools/call`` headers; never written.
    tool_headers: Mapping[str, ToolHeaders] | None = None
    #: ``input_required`` (2026-07-28): ``(key, method)`` of each input request.
    input_requests: tuple[tuple[str | None, str | None], ...] = ()
    #: ``input_required``: SHA-256 of its ``requestState``, which the retried
    #: ``tools/call`` sends back.
    request_state_sha256: str | None = None
    capture_errors: tuple[str, ...] = field(default=())


def read_sse_event(event: SSEEvent) -> Endpoint | list[ServerMessage] | Unreadable | None:
    """What one SSE event of an MCP stream is.

    Returns:
        ``None`` for an event that carries no message (a priming event: empty
        data, sent for its ``id``; an event type MCP does not define), the
        :class:`Endpoint` of HTTP+SSE, the messages of a JSON-RPC event, or
        :class:`Unreadable`.
    """
    if event.event == ENDPOINT_EVENT:
        return Endpoint(event.data)
    if event.event not in MESSAGE_EVENTS or not event.data.strip():
        return None
    try:
        value = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        return Unreadable("an SSE event of the MCP stream is not valid JSON")
    return read_messages(value)


def read_messages(value: Any) -> list[ServerMessage] | Unreadable:
    """The JSON-RPC messages of a parsed body or event (one, or a list answering a batch)."""
    members = value if isinstance(value, list) else [value]
    out = []
    for member in members:
        message = _read(member)
        if message is None:
            return Unreadable("a message from the MCP server is not JSON-RPC 2.0")
        out.append(message)
    return out


def _read(value: Any) -> ServerMessage | None:
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0":
        return None
    if not MEMBERS.issuperset(value):
        return None
    raw_id = value.get("id")
    jsonrpc_id = raw_id if type(raw_id) is int or isinstance(raw_id, str) else None
    if isinstance(jsonrpc_id, str) and len(jsonrpc_id) > MAX_ID_CHARS:
        jsonrpc_id = None
    method = value.get("method")
    if isinstance(method, str):
        bounded = method if len(method) <= MAX_ID_CHARS else None
        return ServerMessage(REQUEST if "id" in value else NOTIFICATION, jsonrpc_id, bounded, value)
    if "result" in value or "error" in value:
        return ServerMessage(ERROR if "error" in value else RESULT, jsonrpc_id, None, value)
    return None


def answer_facts(message: ServerMessage, method: str | None) -> AnswerFacts:
    """What an answer says, read by the method of the request it answers.

    Args:
        message: a ``result`` or ``error``.
        method: the request's method, when the request was seen.
    """
    if message.kind == ERROR:
        error = message.body.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        if type(code) is not int:
            return AnswerFacts(capture_errors=("a JSON-RPC error without an integer code",))
        return AnswerFacts(error_code=code)
    result = message.body.get("result")
    if not isinstance(result, dict):
        return AnswerFacts(capture_errors=("a JSON-RPC result that is not an object",))
    errors: list[str] = []
    result_type = _bounded(result.get("resultType"), "resultType", errors)
    facts = AnswerFacts(result_type=result_type)
    if method in LIST_METHODS:
        facts = replace(facts, next_cursor=result.get("nextCursor") is not None)
    if method == "tools/call":
        facts = _tool_result(facts, result, errors)
    elif method == "tools/list":
        facts = _catalogue(facts, result, errors)
    if errors:
        facts = replace(facts, capture_errors=tuple(errors))
    return facts


def _bounded(value: Any, what: str, errors: list[str]) -> str | None:
    if not isinstance(value, str):
        return None
    if len(value) > MAX_ID_CHARS:
        errors.append(f"the result's {what} is longer than {MAX_ID_CHARS} characters; not recorded")
        return None
    return value


def _tool_result(facts: AnswerFacts, result: Mapping[str, Any], errors: list[str]) -> AnswerFacts:
    """A ``tools/call`` result: its error flag, content items, structured content,
    and (2026-07-28) the input requests of an ``input_required`` answer."""
    flag = result.get("isError", False)
    if not isinstance(flag, bool):
        errors.append("the tool result's isError is not a boolean")
    content = result.get("content")
    items: tuple[McpContentItem, ...] | None = None
    if isinstance(content, list):
        items = tuple(
            McpContentItem(_bounded(item.get("type"), "content type", errors), utf8_len(item))
            if isinstance(item, dict)
            else McpContentItem(None, utf8_len(item))
            for item in content
        )
    elif content is not None or facts.result_type != "input_required":
        errors.append("the tool result has no content list")
    requests: list[tuple[str | None, str | None]] = []
    state_sha = None
    if facts.result_type == "input_required":
        asked = result.get("inputRequests")
        if isinstance(asked, dict):
            for key, entry in asked.items():
                wanted = entry.get("method") if isinstance(entry, dict) else None
                requests.append(
                    (_bounded(key, "input request key", errors), _bounded(wanted, "method", errors))
                )
        else:
            errors.append("an input_required result without inputRequests")
        state = result.get("requestState")
        if isinstance(state, str):
            state_sha = hashlib.sha256(state.encode("utf-8", "surrogatepass")).hexdigest()
    return replace(
        facts,
        is_error=flag if isinstance(flag, bool) else None,
        content=items,
        structured_content="structuredContent" in result,
        input_requests=tuple(requests),
        request_state_sha256=state_sha,
    )


def _catalogue(facts: AnswerFacts, result: Mapping[str, Any], errors: list[str]) -> AnswerFacts:
    """A ``tools/list`` result: each tool's name and definition hash, the hash of
    the whole page (sorted by name, so an order change is no change), and the
    arguments each tool mirrors into headers."""
    tools = result.get("tools")
    if not isinstance(tools, list):
        errors.append("the tools/list result has no tools list")
        return facts
    if len(tools) > MAX_TOOLS:
        errors.append(f"the tools/list result lists more than {MAX_TOOLS} tools; the rest not kept")
    digests: list[McpToolDigest] = []
    definitions: list[tuple[str, bytes]] = []
    headers: dict[str, ToolHeaders] = {}
    for tool in tools[:MAX_TOOLS]:
        name = tool.get("name") if isinstance(tool, dict) else None
        text = canonical_json(tool)
        if not isinstance(name, str) or text is None:
            errors.append("a tool of the tools/list result has no name or cannot be hashed")
            continue
        if len(name) > MAX_ID_CHARS:
            errors.append(f"a tool name is longer than {MAX_ID_CHARS} characters; not recorded")
            continue
        digests.append(McpToolDigest(name, hashlib.sha256(text).hexdigest()))
        definitions.append((name, text))
        assert isinstance(tool, dict)
        mirrored = tool_headers(tool.get("inputSchema"))
        headers[name] = mirrored
    page = b"[" + b",".join(text for _, text in sorted(definitions)) + b"]"
    return replace(
        facts,
        tools=tuple(digests),
        tools_sha256=hashlib.sha256(page).hexdigest(),
        tool_headers=headers,
    )
