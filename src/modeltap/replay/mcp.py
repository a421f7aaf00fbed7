"""Replaying MCP exchanges (pure): what differs, whose ids answer, the errors.

``modeltap replay`` stands in for a recorded MCP server. Each replayed POST
(or ``DELETE``) is matched in order with its session's recorded exchanges
with that server (:class:`~modeltap.replay.matching.Player`, one per server)
on its :class:`~modeltap.replay.recording.McpKey`; this module says what a
mismatch changed (:func:`describe_mcp_changes`: the method, the tool, the
arguments or any other param as JSON paths with sizes, never a value), puts the live request's
JSON-RPC ids into the recorded answer (:func:`id_map`, :class:`IdRewriter`:
the client matches answers by id, and needs not have counted as the
recorded one did), and words the JSON-RPC error a request the recording
cannot answer gets (:func:`replay_error_body`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from modeltap.apis.mcp.errors import REFUSED_BY_POLICY, error_object
from modeltap.replay.recording import McpKey, McpMessageKey, comparable_params
from modeltap.replay.request_diff import BodyChange, body_changes, summarize

__all__ = [
    "PARAMS_NOT_COMPARED",
    "IdRewriter",
    "JsonRpcId",
    "describe_mcp_changes",
    "id_map",
    "replay_error_body",
]

JsonRpcId = int | str
#: A mismatch with an exchange recorded before params were hashed says so:
#: only the method, the tool and the arguments could be compared.
PARAMS_NOT_COMPARED: Final = "params not compared (recorded before modeltap hashed them)"
#: The message types whose answers carry their id back.
_ANSWERED: Final = "request"


def _short(sha: str | None) -> str:
    return "none" if sha is None else sha[:8] + "…"


def _params(body: Any, index: int) -> Any:
    """The ``params`` of message ``index`` of a parsed POST body, or None."""
    members = body if isinstance(body, list) else [body]
    if index >= len(members) or not isinstance(members[index], dict):
        return None
    return members[index].get("params")


def _arguments(body: Any, index: int) -> Any:
    """The ``params.arguments`` of message ``index`` of a parsed POST body, or None."""
    params = _params(body, index)
    return params.get("arguments") if isinstance(params, dict) else None


def _asked(message: McpMessageKey) -> str:
    """``tools/call 'add'``, ``tools/list``: a message as a diff line names it."""
    method = message.mcp_method or message.message_type
    return f"{method} {message.tool_name!r}" if message.tool_name else method


def _under(name: str, path: str) -> str:
    """A change's path under ``arguments`` or ``params``."""
    if path == "$":
        return name
    return f"{name}{path}" if path.startswith("[") else f"{name}.{path}"


def describe_mcp_changes(
    recorded: McpKey | None,
    key: McpKey,
    bodies: tuple[Any, Any] | None = None,
    *,
    show_content: bool = False,
) -> tuple[list[str], list[BodyChange]]:
    """What differs between a recorded MCP exchange and a replayed one, most
    specific first.

    Args:
        recorded: the recorded exchange's key.
        key: the replayed exchange's key.
        bodies: the recorded and the replayed body, parsed, when both are
            known: changed arguments then show as JSON paths with sizes
            (``arguments.b: 1 -> 2 bytes``) instead of hashes.
        show_content: give the changed values too (:mod:`modeltap.replay.request_diff`).

    Returns:
        One phrase per difference (empty when the exchange matches), and the
        body changes behind the path phrases.
    """
    if recorded is None:
        return ["the recorded exchange has no key"], []
    out: list[str] = []
    found: list[BodyChange] = []
    if recorded.server != key.server:
        out.append(f"server changed ({recorded.server!r} -> {key.server!r})")
    if recorded.method != key.method:
        # A POST where the recording has its DELETE (or the other way): the
        # messages are not comparable; say what was asked instead.
        asked = ", ".join(_asked(m) for m in key.messages)
        out.append(
            f"HTTP method changed ({recorded.method} -> {key.method}{' ' + asked if asked else ''})"
        )
        return out, []
    if len(recorded.messages) != len(key.messages):
        out.append(f"messages changed ({len(recorded.messages)} -> {len(key.messages)})")
    many = max(len(recorded.messages), len(key.messages)) > 1
    for i, (old, new) in enumerate(zip(recorded.messages, key.messages, strict=False)):
        where = f"message {i + 1}: " if many else ""
        if old.message_type != new.message_type:
            out.append(f"{where}message type changed ({old.message_type} -> {new.message_type})")
        if old.mcp_method != new.mcp_method:
            out.append(f"{where}method changed ({old.mcp_method!r} -> {new.mcp_method!r})")
            continue
        if old.tool_name != new.tool_name:
            out.append(f"{where}tool changed ({old.tool_name!r} -> {new.tool_name!r})")
            continue
        if old.arguments_sha256 == new.arguments_sha256:
            if recorded.params_compared and old.params_sha256 != new.params_sha256:
                phrases, params = _params_changes(old, new, bodies, i, show_content)
                out += [f"{where}{text}" for text in phrases]
                found += params
            continue
        changes: list[BodyChange] = []
        if bodies is not None:
            before, after = _arguments(bodies[0], i), _arguments(bodies[1], i)
            changes = [
                BodyChange(_under("arguments", c.path), c.text, c.content)
                for c in body_changes(before, after, show_content=show_content)
            ]
        if changes:
            out += [f"{where}{text}" for text in summarize(changes)]
            found += changes
        else:
            out.append(
                f"{where}arguments changed (sha256 {_short(old.arguments_sha256)} -> "
                f"{_short(new.arguments_sha256)})"
            )
    if not out and recorded.batch != key.batch:
        out.append(f"batch changed ({str(recorded.batch).lower()} -> {str(key.batch).lower()})")
    if out and not recorded.params_compared:
        out.append(PARAMS_NOT_COMPARED)
    return out, found


def _params_changes(
    old: McpMessageKey,
    new: McpMessageKey,
    bodies: tuple[Any, Any] | None,
    index: int,
    show_content: bool,
) -> tuple[list[str], list[BodyChange]]:
    """A message whose params (not its arguments) changed: the changed params
    as JSON paths with sizes, or the two hashes when a body is not known."""
    if bodies is not None:
        before = comparable_params(old.mcp_method, _params(bodies[0], index))
        after = comparable_params(new.mcp_method, _params(bodies[1], index))
        changes = [
            BodyChange(_under("params", c.path), c.text, c.content)
            for c in body_changes(before, after, show_content=show_content)
        ]
        if changes:
            return summarize(changes), changes
    text = f"params changed (sha256 {_short(old.params_sha256)} -> {_short(new.params_sha256)})"
    return [text], []


def _id_key(value: object) -> bytes:
    """An id as a map key: ``1`` and ``"1"`` are two ids."""
    return orjson.dumps(value)


def id_map(
    recorded: Sequence[object], live: Sequence[object], types: Sequence[str]
) -> dict[bytes, JsonRpcId]:
    """Which recorded answer id becomes which live one.

    Args:
        recorded: the recorded exchange's ids, one per message (None for a
            notification).
        live: the replayed exchange's ids, in the same order.
        types: the messages' types (only a ``request``'s id comes back in an answer).

    Returns:
        Recorded id (:func:`_id_key`) -> live id, for each request whose
        two ids differ; empty when the answer can be served as recorded.
    """
    out: dict[bytes, JsonRpcId] = {}
    for old, new, kind in zip(recorded, live, types, strict=False):
        if kind != _ANSWERED or not isinstance(new, int | str) or old is None:
            continue
        if _id_key(old) != _id_key(new):
            out[_id_key(old)] = new
    return out


def _rewritten(message: Any, ids: Mapping[bytes, JsonRpcId]) -> tuple[Any, bool]:
    """An answer with its id put to the live one; a server's own request keeps its id."""
    if not isinstance(message, dict) or "method" in message or "id" not in message:
        return message, False
    if "result" not in message and "error" not in message:
        return message, False
    live = ids.get(_id_key(message["id"]))
    if live is None:
        return message, False
    return {**message, "id": live}, True


def rewrite_message(data: bytes, ids: Mapping[bytes, JsonRpcId]) -> bytes:
    """A JSON-RPC message (or batch) with its answers' ids put to the live ones;
    ``data`` unchanged when nothing in it needs to change (or it is not JSON)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data
    if isinstance(value, list):
        pairs = [_rewritten(m, ids) for m in value]
        if not any(changed for _, changed in pairs):
            return data
        return orjson.dumps([m for m, _ in pairs])
    message, changed = _rewritten(value, ids)
    return orjson.dumps(message) if changed else data


class IdRewriter:
    """A recorded answer on its way to the client, its ids put to the live ones.

    Sans-I/O: :meth:`feed` it the recorded bytes as they are served, send
    what it returns, and at the end what :meth:`flush` returns. An SSE
    answer is rewritten line by line as it passes (only ``data:`` lines
    holding a whole answer change; every other byte is sent as recorded, and
    nothing is held but the line not yet ended); a JSON answer is read whole
    (it is one message) and rewritten at the end.

    Args:
        ids: from :func:`id_map` (not empty: an empty map needs no rewriter).
        sse: the answer is an event stream.
    """

    def __init__(self, ids: Mapping[bytes, JsonRpcId], *, sse: bool) -> None:
        self.ids = ids
        self.sse = sse
        self._pending = bytearray()

    def feed(self, data: bytes) -> bytes:
        self._pending += data
        if not self.sse:
            return b""
        end = max(self._pending.rfind(b"\n"), self._pending.rfind(b"\r"))
        if end < 0:
            return b""
        whole = bytes(self._pending[: end + 1])
        del self._pending[: end + 1]
        return b"".join(self._line(line) for line in whole.splitlines(keepends=True))

    def flush(self) -> bytes:
        rest = bytes(self._pending)
        self._pending.clear()
        if not self.sse:
            return rewrite_message(rest, self.ids)
        return self._line(rest) if rest else b""

    def _line(self, line: bytes) -> bytes:
        if not line.startswith(b"data:"):
            return line
        body = line.rstrip(b"\r\n")
        ending = line[len(body) :]
        value = body[5:]
        space = value.startswith(b" ")
        text = value[1:] if space else value
        out = rewrite_message(text, self.ids)
        if out is text:
            return line
        return b"data: " + out + ending if space else b"data:" + out + ending


def replay_error_body(
    request_ids: Sequence[object], message: str, rule: str, *, batch: bool = False
) -> bytes:
    """The JSON-RPC error a replayed request gets when the recording cannot
    answer it: one per request of its body (``id: null`` when it had none),
    ``error.data.rule`` naming the rule (``modeltap_replay_mismatch``, ...).

    Args:
        request_ids: the ids of the body's requests.
        message: modeltap's own words (never request content).
        rule: the replay's error code.
        batch: the body was a batch: the answer is a list.
    """
    data = {"rule": rule}
    ids = [i for i in request_ids if isinstance(i, int | str)]
    if batch and ids:
        return orjson.dumps([error_object(i, REFUSED_BY_POLICY, message, data) for i in ids])
    only = ids[0] if len(ids) == 1 else None
    return orjson.dumps(error_object(only, REFUSED_BY_POLICY, message, data))
