"""Client-to-server MCP messages: JSON-RPC 2.0 read for the audit (pure, sans-I/O).

A POST body is one JSON-RPC message or a batch of them (a list, 2025-03-26):
a request (a method and an id), a notification (a method, no id), or the
client's answer to a server's request (a result or an error, and the id it
answers). :func:`parse_body` parses it as every audited body is parsed
(:mod:`modeltap.apis.json_body`: duplicate keys and keys that differ only in
case are refused), checks it is JSON-RPC as MCP sends it, and reads what the
audit line says of each message (:class:`ClientMessage`): the method, the id
exactly as sent (``0`` and ``"0"`` differ, and neither is "no id"), the
protocol version the message states, and for ``tools/call`` the tool, the
canonical hash of its arguments and the model's call id a client put in
``_meta``. Nothing of an argument's value is kept but that hash.

Refusals name a rule (:class:`~modeltap.rules.errors.Rule`) and a fixed
detail, never body content.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Final

import orjson

from modeltap.apis.json_body import reject_case_variants, reject_duplicate_keys
from modeltap.evidence.records import MAX_ID_CHARS, Json
from modeltap.rules.errors import Rejected, Rule

#: ``params._meta`` key of the protocol version (2026-07-28's per-request envelope).
PROTOCOL_VERSION_META: Final = "io.modelcontextprotocol/protocolVersion"
#: ``params._meta`` keys in which agents name the model's tool call a
#: ``tools/call`` executes: Claude Code's ``tool_use.id``, Codex's ``call_id``
#: (tests/data/mcp/README.md, "The agent CLIs"). Gemini CLI sends none.
CALL_ID_META: Final = ("claudecode/toolUseId", "callId")
#: The members a JSON-RPC 2.0 message may have.
MEMBERS: Final = frozenset({"jsonrpc", "id", "method", "params", "result", "error"})

REQUEST, NOTIFICATION, RESULT, ERROR = "request", "notification", "result", "error"


@dataclass(frozen=True, slots=True)
class ClientMessage:
    """What the audit reads off one client-to-server JSON-RPC message.

    Attributes:
        message_type: ``request``, ``notification``, ``result`` or ``error``.
        jsonrpc_id: the id exactly as sent; ``None`` for a notification (and
            for an error answering no id).
        method: the method of a request or notification; ``None`` for an answer.
        params: its params (an object), or ``None``: read by the header check,
            never written.
        protocol_version: what the body says of the protocol version
            (``params._meta``'s, or ``initialize``'s ``params.protocolVersion``).
        tool_name: ``tools/call``'s ``params.name``.
        arguments_sha256: ``tools/call``: SHA-256 of the arguments'
            canonical JSON; ``None`` when it sent none.
        arguments_bytes: the length of that canonical JSON.
        tool_call_id: ``tools/call``: the model's call id from ``_meta``.
        request_state_sha256: ``tools/call`` retried after an ``input_required``
            result (2026-07-28): SHA-256 of its opaque ``requestState``, which
            names the execution it continues.
    """

    message_type: str
    jsonrpc_id: int | str | None
    method: str | None = None
    params: Json | None = None
    protocol_version: str | None = None
    tool_name: str | None = None
    arguments_sha256: str | None = None
    arguments_bytes: int | None = None
    tool_call_id: str | None = None
    request_state_sha256: str | None = None

    @property
    def id_key(self) -> bytes | None:
        """The id as a key that keeps ``0`` and ``"0"`` apart (its JSON text)."""
        return None if self.jsonrpc_id is None else id_key(self.jsonrpc_id)

    @property
    def expects_answer(self) -> bool:
        """A request: the server owes it a result or an error."""
        return self.message_type == REQUEST


@dataclass(frozen=True, slots=True)
class McpBody:
    """A POST body's messages, in order; ``batch`` when it was a JSON-RPC batch."""

    messages: tuple[ClientMessage, ...]
    batch: bool = False


def id_key(value: int | str) -> bytes:
    """A JSON-RPC id as a dictionary key: its JSON text (``0`` is ``b"0"``, ``"0"`` is
    ``b'"0"'``), so ids of the two types never collide."""
    return orjson.dumps(value)


def canonical_json(value: Any) -> bytes | None:
    """``value`` as canonical JSON: keys sorted at every depth, no spaces, UTF-8
    unescaped (orjson's). ``None`` when orjson cannot write it (nesting past 254)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None


def arguments_digest(arguments: Any) -> tuple[str, int] | None:
    """SHA-256 and length of a tool call's arguments as canonical JSON, or ``None``
    when they cannot be written (too deep)."""
    text = canonical_json(arguments)
    if text is None:
        return None
    return hashlib.sha256(text).hexdigest(), len(text)


def parse_body(decoded: bytes) -> McpBody:
    """Parse and check a client-to-server POST body.

    Args:
        decoded: the body, its content codings undone.

    Returns:
        Its messages.

    Raises:
        Rejected: ``invalid_json``, ``duplicate_key``, ``case_variant_key``,
            ``mcp_not_jsonrpc`` (not JSON-RPC 2.0 as MCP sends it, an empty
            batch, two requests of one batch with one id),
            ``mcp_malformed_params`` or ``value_too_long`` (a method, id,
            tool name or protocol version longer than 256 characters).
    """
    try:
        value = orjson.loads(decoded)
    except orjson.JSONDecodeError:
        raise Rejected(Rule.INVALID_JSON) from None
    reject_duplicate_keys(decoded, value)
    if isinstance(value, list):
        if not value:
            raise Rejected(Rule.MCP_NOT_JSONRPC, "an empty batch")
        members, batch = value, True
    else:
        members, batch = [value], False
    messages = []
    for member in members:
        if not isinstance(member, dict):
            raise Rejected(Rule.MCP_NOT_JSONRPC, "not a JSON-RPC object")
        reject_case_variants(member)
        messages.append(read_message(member))
    ids = [m.id_key for m in messages if m.expects_answer]
    if len(set(ids)) != len(ids):
        # Two answers to one id could not be told apart (nor matched to their request).
        raise Rejected(Rule.MCP_NOT_JSONRPC, "two requests of a batch share an id")
    return McpBody(tuple(messages), batch)


def read_message(message: Json) -> ClientMessage:
    """Check one JSON-RPC message and read what the audit records of it.

    Raises:
        Rejected: as :func:`parse_body`.
    """
    if not MEMBERS.issuperset(message):
        raise Rejected(Rule.MCP_NOT_JSONRPC, "a member JSON-RPC does not define")
    if message.get("jsonrpc") != "2.0":
        raise Rejected(Rule.MCP_NOT_JSONRPC, 'jsonrpc is not "2.0"')
    answer = "result" in message or "error" in message
    if "method" in message:
        if answer:
            raise Rejected(Rule.MCP_NOT_JSONRPC, "both a method and a result or error")
        return _request(message)
    if not answer:
        raise Rejected(Rule.MCP_NOT_JSONRPC, "neither a method nor a result or error")
    if "result" in message and "error" in message:
        raise Rejected(Rule.MCP_NOT_JSONRPC, "both a result and an error")
    if "params" in message:
        raise Rejected(Rule.MCP_NOT_JSONRPC, "params on a result or error")
    if "id" not in message:
        raise Rejected(Rule.MCP_NOT_JSONRPC, "a result or error without an id")
    if "result" in message:
        if not isinstance(message["result"], dict):
            raise Rejected(Rule.MCP_NOT_JSONRPC, "a result that is not an object")
        return ClientMessage(RESULT, _id(message["id"], null=False))
    error = message["error"]
    if (
        not isinstance(error, dict)
        or type(error.get("code")) is not int
        or not isinstance(error.get("message"), str)
    ):
        raise Rejected(Rule.MCP_NOT_JSONRPC, "an error without an integer code and a message")
    return ClientMessage(ERROR, _id(message["id"], null=True))


def _id(value: Any, *, null: bool) -> int | str | None:
    """A JSON-RPC id as MCP allows it: an integer or a string (null only on an
    error that answers a message whose id could not be read)."""
    if value is None and null:
        return None
    if type(value) is int:
        return value
    if isinstance(value, str):
        if len(value) > MAX_ID_CHARS:
            raise Rejected(Rule.VALUE_TOO_LONG, "id")
        return value
    raise Rejected(Rule.MCP_NOT_JSONRPC, "an id that is not an integer or a string")


def _request(message: Json) -> ClientMessage:
    """A request or notification: its method, id and what its params say."""
    method = message["method"]
    if not isinstance(method, str) or not method:
        raise Rejected(Rule.MCP_NOT_JSONRPC, "a method that is not a non-empty string")
    if len(method) > MAX_ID_CHARS:
        raise Rejected(Rule.VALUE_TOO_LONG, "method")
    params = message.get("params")
    if "params" in message and not isinstance(params, dict):
        raise Rejected(Rule.MCP_MALFORMED_PARAMS, "params is not an object")
    meta = params.get("_meta") if params is not None else None
    if params is not None and "_meta" in params and not isinstance(meta, dict):
        raise Rejected(Rule.MCP_MALFORMED_PARAMS, "_meta is not an object")
    jsonrpc_id = _id(message["id"], null=False) if "id" in message else None
    kind = REQUEST if "id" in message else NOTIFICATION
    version = meta.get(PROTOCOL_VERSION_META) if meta is not None else None
    if version is None and method == "initialize" and params is not None:
        version = params.get("protocolVersion")
    if not isinstance(version, str):
        version = None
    elif len(version) > MAX_ID_CHARS:
        raise Rejected(Rule.VALUE_TOO_LONG, "protocol version")
    if method != "tools/call":
        return ClientMessage(kind, jsonrpc_id, method, params, version)
    if params is None:
        raise Rejected(Rule.MCP_MALFORMED_PARAMS, "tools/call without params")
    name = params.get("name")
    if not isinstance(name, str) or not name:
        raise Rejected(Rule.MCP_MALFORMED_PARAMS, "tools/call without a string name")
    if len(name) > MAX_ID_CHARS:
        raise Rejected(Rule.VALUE_TOO_LONG, "tool name")
    arguments = params.get("arguments")
    digest: tuple[str, int] | None = None
    if arguments is not None:
        if not isinstance(arguments, dict):
            raise Rejected(Rule.MCP_MALFORMED_PARAMS, "tools/call arguments are not an object")
        digest = arguments_digest(arguments)
        if digest is None:
            raise Rejected(Rule.MCP_MALFORMED_PARAMS, "tools/call arguments nested too deeply")
    call_id = next(
        (
            value
            for key in CALL_ID_META
            if isinstance(value := (meta or {}).get(key), str) and 0 < len(value) <= MAX_ID_CHARS
        ),
        None,
    )
    state = params.get("requestState")
    return ClientMessage(
        kind,
        jsonrpc_id,
        method,
        params,
        version,
        tool_name=name,
        arguments_sha256=digest[0] if digest is not None else None,
        arguments_bytes=digest[1] if digest is not None else None,
        tool_call_id=call_id,
        request_state_sha256=(
            hashlib.sha256(state.encode("utf-8", "surrogatepass")).hexdigest()
            if isinstance(state, str)
            else None
        ),
    )
