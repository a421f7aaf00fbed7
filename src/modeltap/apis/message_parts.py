"""The GenAI semantic conventions' content shapes, and how content is kept bounded.

Spans carry content (only under content capture) in the conventions' own JSON
shapes, not the provider's: the JSON schemas of semantic-conventions v1.41.1
(``gen-ai-input-messages.json``, ``gen-ai-output-messages.json``,
``gen-ai-system-instructions.json``, ``gen-ai-tool-definitions.json``). Each
wire API module maps its provider's shape onto the constructors below; this
module knows no API.

- A message is ``{"role", "parts"}`` (``"name"`` when the participant is
  named); an output message also has ``"finish_reason"``.
- Parts: ``text`` and ``reasoning`` (``content``), ``tool_call`` (``id``,
  ``name``, ``arguments``), ``tool_call_response`` (``id``, ``response``),
  ``uri`` / ``blob`` / ``file`` (``modality`` with ``uri`` / ``content`` /
  ``file_id``, and ``mime_type`` when known), ``server_tool_call``, and a
  generic part ``{"type": <the provider's type>, ...}`` for anything else.
- A tool definition is ``{"type", "name"}`` plus ``description`` and
  ``parameters`` when sent.

Content is bounded twice: a stream observer stops assembling text past
:data:`CAPTURE_LIMIT` characters, and :func:`bound_json` cuts a whole value
down to a size, keeping it valid JSON. Every cut string ends with
:data:`CUT_MARK` and the number of characters dropped, so a reader sees that
(and how much) was cut.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import orjson

from modeltap.evidence.records import Json, ToolCall

__all__ = [
    "CAPTURE_LIMIT",
    "CUT_MARK",
    "OutputAssembler",
    "assembled",
    "blob",
    "block_message",
    "bound_json",
    "file",
    "finish_reason",
    "generic",
    "json_value",
    "merge_roles",
    "message",
    "output_message",
    "reasoning",
    "server_tool_call",
    "text",
    "text_of",
    "tool_call",
    "tool_call_response",
    "tool_definition",
    "uri",
]

#: Characters of model output a stream observer assembles for one response,
#: at most (only when content capture is on). Past it, text is cut.
CAPTURE_LIMIT: Final = 64 * 1024
#: What a cut string ends with, followed by the number of characters dropped.
CUT_MARK: Final = "…[cut by modeltap: "

#: The conventions' well-known finish reasons (``FinishReason``).
FINISH_REASONS: Final = frozenset({"stop", "length", "content_filter", "tool_call", "error"})


# --------------------------------------------------------------------------
# Parts and messages


def text(content: str) -> Json:
    """A ``text`` part."""
    return {"type": "text", "content": content}


def reasoning(content: str) -> Json:
    """A ``reasoning`` part (the model's thinking, or its summary)."""
    return {"type": "reasoning", "content": content}


def json_value(value: Any) -> Any:
    """A string holding JSON as the value it holds (best effort), else as it is.

    Tool arguments and results "are expected to be an object": a serialized
    one is deserialized; text that is not JSON stays text.
    """
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def tool_call(call_id: str | None, name: str | None, arguments: Any) -> Json:
    """A ``tool_call`` part: the model asks the client to run a tool.

    Args:
        call_id: the call's id, if any.
        name: the tool's name (``""`` when the provider sent none: the schema
            requires one).
        arguments: the arguments as sent; a JSON string is parsed.
    """
    part: Json = {"type": "tool_call", "id": call_id, "name": name or ""}
    if arguments is not None:
        part["arguments"] = json_value(arguments)
    return part


def tool_call_response(call_id: str | None, response: Any) -> Json:
    """A ``tool_call_response`` part: a tool's result sent back to the model."""
    return {"type": "tool_call_response", "id": call_id, "response": response}


def server_tool_call(call_id: str | None, name: str, details: Json) -> Json:
    """A ``server_tool_call`` part: a tool the provider ran (web search, code, MCP)."""
    return {"type": "server_tool_call", "id": call_id, "name": name, "server_tool_call": details}


def uri(modality: str, address: str, mime_type: str | None = None) -> Json:
    """A ``uri`` part (an image or file by address); a ``data:`` URL becomes a :func:`blob`."""
    if address.startswith("data:") and ";base64," in address:
        head, data = address[5:].split(";base64,", 1)
        return blob(modality, data, head or mime_type)
    part: Json = {"type": "uri", "modality": modality, "uri": address}
    if mime_type:
        part["mime_type"] = mime_type
    return part


def blob(modality: str, content: str, mime_type: str | None = None) -> Json:
    """A ``blob`` part: inline data, ``content`` base64 as sent."""
    part: Json = {"type": "blob", "modality": modality, "content": content}
    if mime_type:
        part["mime_type"] = mime_type
    return part


def file(modality: str, file_id: str, mime_type: str | None = None) -> Json:
    """A ``file`` part: a file uploaded to the provider, by id."""
    part: Json = {"type": "file", "modality": modality, "file_id": file_id}
    if mime_type:
        part["mime_type"] = mime_type
    return part


def generic(kind: str, **fields: Any) -> Json:
    """A part of a type the conventions do not name (``GenericPart``): ``{"type": kind, ...}``."""
    return {"type": kind, **{key: value for key, value in fields.items() if value is not None}}


def message(role: str, parts: list[Json], name: str | None = None) -> Json:
    """An input message ``{"role", "parts"}`` (with ``name`` when the participant is named)."""
    out: Json = {"role": role, "parts": parts}
    if name:
        out["name"] = name
    return out


def block_message(role: str, parts: list[Json]) -> Json:
    """An input message of content blocks (Anthropic, Converse): ``role``'s, but
    a message made only of tool results is a ``tool`` message, where the
    conventions put tool results."""
    if parts and all(part["type"] == "tool_call_response" for part in parts):
        role = "tool"
    return message(role, parts)


def output_message(parts: list[Json], finish: str, role: str = "assistant") -> Json:
    """An output message: one choice (candidate) of a response, with its finish reason."""
    return {"role": role, "parts": parts, "finish_reason": finish}


def finish_reason(value: str | None, table: Mapping[str, str]) -> str:
    """The conventions' finish reason for a provider's own.

    Args:
        value: the provider's reason (``None`` when it sent none).
        table: the API's mapping onto the well-known values (``stop``,
            ``length``, ``content_filter``, ``tool_call``, ``error``).

    Returns:
        The mapped value; a reason the table does not know is kept as sent
        (the schema allows any string); ``""`` when there was none.
    """
    if value is None:
        return ""
    return table.get(value, value)


def tool_definition(kind: str, name: str, description: Any = None, parameters: Any = None) -> Json:
    """A tool definition ``{"type", "name"}``, with ``description`` and ``parameters`` when sent."""
    out: Json = {"type": kind, "name": name}
    if isinstance(description, str):
        out["description"] = description
    if parameters is not None:
        out["parameters"] = parameters
    return out


def text_of(blocks: Any, kinds: frozenset[str], key: str = "text") -> list[Json]:
    """Text parts of a string or a list of ``{"type": kind, key: ...}`` blocks (others skipped)."""
    if isinstance(blocks, str):
        return [text(blocks)]
    parts: list[Json] = []
    for block in blocks if isinstance(blocks, list) else ():
        if isinstance(block, dict) and block.get("type") in kinds:
            value = block.get(key)
            if isinstance(value, str):
                parts.append(text(value))
    return parts


def merge_roles(messages: list[Json]) -> list[Json]:
    """Join consecutive messages of the same role without a name into one, parts in order."""
    merged: list[Json] = []
    for item in messages:
        last = merged[-1] if merged else None
        if (
            last is not None
            and last["role"] == item["role"]
            and "name" not in last
            and "name" not in item
        ):
            last["parts"].extend(item["parts"])
        else:
            merged.append({**item, "parts": list(item["parts"])})
    return merged


# --------------------------------------------------------------------------
# Assembling a streamed output


class OutputAssembler:
    """Build output messages from stream deltas, within :data:`CAPTURE_LIMIT` characters.

    Parts are kept per choice in the order they first appear; text deltas of
    one part are joined. Past the limit further text is dropped and counted,
    and the last text part says how much was cut. Only used when content
    capture is on: an observer without capture never builds one.
    """

    __slots__ = ("_choices", "_dropped", "_used")

    def __init__(self) -> None:
        #: choice index -> part key -> [part, list of text pieces or None]
        self._choices: dict[int, dict[object, list[Any]]] = {}
        self._used = 0
        self._dropped = 0

    def open_text(self, choice: int, key: object, kind: str) -> None:
        """Place an empty ``kind`` part at ``key`` now, so it keeps its place among the parts."""
        self._choices.setdefault(choice, {}).setdefault(key, [{"type": kind, "content": ""}, []])

    def add_text(self, choice: int, key: object, kind: str, delta: str) -> None:
        """Append ``delta`` to the ``kind`` part (``text`` or ``reasoning``) at ``key``."""
        if not delta:
            return
        room = CAPTURE_LIMIT - self._used
        if room <= 0:
            self._dropped += len(delta)
            return
        kept = delta[:room]
        self._dropped += len(delta) - len(kept)
        self._used += len(kept)
        parts = self._choices.setdefault(choice, {})
        entry = parts.get(key)
        if entry is None:
            parts[key] = [{"type": kind, "content": ""}, [kept]]
        else:
            entry[1].append(kept)

    def add_part(self, choice: int, key: object, part: Json) -> None:
        """Put a whole part (a tool call) at ``key``; a later one at the same key replaces it."""
        parts = self._choices.setdefault(choice, {})
        if key in parts:
            parts[key][0] = part
        else:
            parts[key] = [part, None]

    def messages(self, finish: Callable[[int], str]) -> list[Json]:
        """The assembled output messages, one per choice in index order.

        Args:
            finish: the conventions' finish reason of a choice index.
        """
        out: list[Json] = []
        last_text: Json | None = None
        for index in sorted(self._choices):
            parts: list[Json] = []
            for part, pieces in self._choices[index].values():
                if pieces is not None:
                    part = {**part, "content": "".join(pieces)}
                    last_text = part
                parts.append(part)
            out.append(output_message(parts, finish(index)))
        if self._dropped and last_text is not None:
            last_text["content"] += f"{CUT_MARK}{self._dropped} characters]"
        return out


def assembled(
    output: OutputAssembler | None, calls: Iterable[tuple[object, ToolCall]], finish: str
) -> list[Json] | None:
    """A one-message output (choice 0) as assembled, its tool calls put in at the end.

    A streamed tool call's arguments are whole only once the stream ends, so
    each call is placed at its key (where its block started) only now.

    Args:
        output: the observer's assembler; ``None`` without content capture.
        calls: each tool call with its key among the parts.
        finish: the conventions' finish reason of the message.

    Returns:
        The output messages, or ``None`` without content capture.
    """
    if output is None:
        return None
    for key, call in calls:
        output.add_part(0, key, tool_call(call.call_id, call.name, call.arguments))
    return output.messages(lambda _: finish)


# --------------------------------------------------------------------------
# Bounding a value


def _size(value: Any) -> int:
    return len(orjson.dumps(value))


def _cap_strings(value: Any, cap: int) -> tuple[Any, bool]:
    """``value`` with every string longer than ``cap`` characters cut (and marked)."""
    if isinstance(value, str):
        if len(value) <= cap:
            return value, False
        return f"{value[:cap]}{CUT_MARK}{len(value) - cap} characters]", True
    if isinstance(value, list):
        items = [_cap_strings(item, cap) for item in value]
        return [item for item, _ in items], any(cut for _, cut in items)
    if isinstance(value, dict):
        pairs = {key: _cap_strings(item, cap) for key, item in value.items()}
        return {key: item for key, (item, _) in pairs.items()}, any(
            cut for _, cut in pairs.values()
        )
    return value, False


def bound_json(value: Any, limit: int) -> tuple[str, bool]:
    """Serialise ``value`` to at most ``limit`` bytes of valid JSON.

    Strings are cut first (longest allowance first, halved until it fits),
    each ending in :data:`CUT_MARK` and the count dropped; if the value still
    does not fit, the oldest items of a top-level list are left out (the
    newest messages are the ones that explain a turn), and as a last resort
    the value becomes a marker string. Never raises.

    Args:
        value: a JSON value.
        limit: the most bytes the result may take.

    Returns:
        The JSON text, and whether anything was cut (a cut mark already in
        ``value``, from an observer, counts as cut).
    """
    try:
        encoded = orjson.dumps(value).decode()
    except TypeError:
        return orjson.dumps(f"{CUT_MARK}the value could not be written as JSON]").decode(), True
    already_cut = CUT_MARK in encoded
    if len(encoded.encode()) <= limit:
        return encoded, already_cut
    cap = max(limit // 2, 64)
    current = value
    while cap >= 64:
        current, _ = _cap_strings(value, cap)
        if _size(current) <= limit:
            return orjson.dumps(current).decode(), True
        cap //= 2
    if isinstance(current, list):
        items = list(current)
        while len(items) > 1 and _size(items) > limit:
            items.pop(0)
        if _size(items) <= limit:
            return orjson.dumps(items).decode(), True
    return orjson.dumps(f"{CUT_MARK}{len(encoded)} characters of JSON]").decode(), True
