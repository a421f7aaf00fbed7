"""The Responses API, what telemetry reads (spans only; see :mod:`modeltap.apis.contract`)."""

from typing import Any

import orjson

from modeltap.apis import message_parts as parts
from modeltap.apis.contract import RequestContent, ResponseContent
from modeltap.apis.fields import number, output_type, str_or_none, whole_number
from modeltap.apis.openai_responses.items import (
    CLIENT_TOOL_TYPES,
    TOOL_OUTPUT_TYPES,
    finish_reason,
    finish_reasons,
    is_message,
    tool_call,
)
from modeltap.evidence.records import Json, RequestSettings, Usage


def request_content(body: Json) -> RequestContent:
    """The ``input`` as the conventions' messages, ``instructions`` as system
    instructions, and the ``tools`` offered.

    A string input is one user message. Message items keep their role; a
    function or custom tool call item is an assistant ``tool_call`` part and
    its output a ``tool`` message's ``tool_call_response``; a reasoning item
    is a ``reasoning`` part; other items are generic parts of their type.
    Consecutive items of one role share a message.
    """
    value = body.get("input")
    converted: list[Json] | None
    if isinstance(value, str):
        converted = [parts.message("user", [parts.text(value)])]
    elif isinstance(value, list):
        converted = parts.merge_roles(
            [_input_item(item) for item in value if isinstance(item, dict)]
        )
    else:
        converted = None
    return RequestContent(
        input_messages=converted,
        system_instructions=_instructions(body.get("instructions")),
        tool_definitions=_tool_definitions(body.get("tools")),
    )


def _instructions(value: Any) -> list[Json] | None:
    """Top-level ``instructions`` as text parts: a string, or the text of a message list."""
    if isinstance(value, str):
        return [parts.text(value)]
    if not isinstance(value, list):
        return None
    found: list[Json] = []
    for item in value:
        if isinstance(item, dict):
            found.extend(_message_parts(item.get("content")))
    return found


_TEXT_PART_TYPES = frozenset({"input_text", "output_text", "text"})


def _message_parts(content: Any) -> list[Json]:
    """A message item's ``content``: a string, or input/output parts."""
    if isinstance(content, str):
        return [parts.text(content)]
    found: list[Json] = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict):
            found.append(_content_part(part))
    return found


def _content_part(part: Json) -> Json:
    kind = str_or_none(part.get("type")) or "unknown"
    if kind in _TEXT_PART_TYPES and isinstance(part.get("text"), str):
        return parts.text(part["text"])
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return parts.text(part["refusal"])
    modality = {"input_image": "image", "input_file": "document", "input_audio": "audio"}.get(kind)
    if modality is not None:
        if isinstance(part.get("file_id"), str):
            return parts.file(modality, part["file_id"])
        for key in ("image_url", "file_url", "file_data"):
            if isinstance(part.get(key), str):
                return parts.uri(modality, part[key])
    return parts.generic(kind)


def _input_item(item: Json) -> Json:
    """One input item as a message (merged with its neighbours of the same role later)."""
    kind = str_or_none(item.get("type"))
    if is_message(item):
        role = str_or_none(item.get("role")) or "user"
        return parts.message(role, _message_parts(item.get("content")))
    call = tool_call(item)
    if call is not None:
        return parts.message(
            "assistant", [parts.tool_call(call.call_id, call.name, call.arguments)]
        )
    if kind in TOOL_OUTPUT_TYPES:
        response = parts.tool_call_response(str_or_none(item.get("call_id")), item.get("output"))
        return parts.message("tool", [response])
    if kind == "reasoning":
        return parts.message("assistant", _reasoning_parts(item))
    role = "tool" if kind and kind.endswith("_output") else "assistant"
    return parts.message(role, [parts.generic(kind or "unknown", id=str_or_none(item.get("id")))])


def _reasoning_parts(item: Json) -> list[Json]:
    """A reasoning item's summary (and content, when sent) as ``reasoning`` parts."""
    found: list[Json] = []
    for key in ("summary", "content"):
        blocks = item.get(key)
        for block in blocks if isinstance(blocks, list) else ():
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                found.append(parts.reasoning(block["text"]))
    return found


def _tool_definitions(tools: Any, prefix: str = "") -> list[Json] | None:
    """The tools as definitions; a namespace's tools are named ``namespace.name``."""
    if not isinstance(tools, list):
        return None
    found: list[Json] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        kind = str_or_none(tool.get("type")) or "unknown"
        name = str_or_none(tool.get("name"))
        if kind == "namespace":
            found.extend(_tool_definitions(tool.get("tools"), f"{prefix}{name or ''}.") or [])
        elif kind in CLIENT_TOOL_TYPES:
            found.append(
                parts.tool_definition(
                    kind, f"{prefix}{name or ''}", tool.get("description"), tool.get("parameters")
                )
            )
        else:
            label = tool.get("server_label") if kind == "mcp" else name
            found.append(parts.tool_definition(kind, str_or_none(label) or kind))
    return found


def bounded_messages(messages: list[Json]) -> list[Json]:
    """Messages kept from a terminal Response, text cut like assembled output."""
    text, _ = parts.bound_json(messages, 4 * parts.CAPTURE_LIMIT)
    kept = orjson.loads(text)
    return kept if isinstance(kept, list) else []


def response_content(body: Json) -> ResponseContent | None:
    """The ``output`` of a Response object (or of the one a WebSocket
    ``response.*`` event carries) as one output message; ``None`` for a body
    without it (an error)."""
    response = body.get("response")
    if isinstance(response, dict):
        body = response
    output = body.get("output")
    if not isinstance(output, list):
        return None
    found: list[Json] = []
    calls = False
    for item in output:
        if not isinstance(item, dict):
            continue
        call = tool_call(item)
        if call is not None:
            calls = True
            found.append(parts.tool_call(call.call_id, call.name, call.arguments))
        elif is_message(item):
            found.extend(_message_parts(item.get("content")))
        elif item.get("type") == "reasoning":
            found.extend(_reasoning_parts(item))
        else:
            kind = str_or_none(item.get("type")) or "unknown"
            found.append(parts.generic(kind, id=str_or_none(item.get("id"))))
    status = str_or_none(body.get("status"))
    reasons = finish_reasons(status, body.get("incomplete_details"))
    return ResponseContent([parts.output_message(found, finish_reason(status, reasons, calls))])


def request_settings(body: Json) -> RequestSettings:
    """The generation settings sent (the Responses API has no stop, seed,
    penalties or ``n``; its output format is ``text.format``)."""
    text = body.get("text")
    return RequestSettings(
        max_tokens=whole_number(body.get("max_output_tokens")),
        temperature=number(body.get("temperature")),
        top_p=number(body.get("top_p")),
        output_type=output_type(text.get("format") if isinstance(text, dict) else None),
        service_tier=str_or_none(body.get("service_tier")),
    )


def usage_totals(usage: Usage) -> Usage:
    """The counts as reported: ``input_tokens`` already includes cached tokens
    and ``output_tokens`` reasoning tokens."""
    return usage
