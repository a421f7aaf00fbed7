"""Anthropic Messages, what telemetry reads (spans only; see :mod:`modeltap.apis.contract`)."""

from __future__ import annotations

from typing import Any, Final

from modeltap.apis import message_parts as parts
from modeltap.apis.contract import RequestContent, ResponseContent
from modeltap.apis.fields import (
    input_with_cache,
    number,
    objects,
    output_type,
    str_or_none,
    string_list,
    whole_number,
)
from modeltap.evidence.records import Json, RequestSettings, Usage

#: Stop reasons as the GenAI conventions name them; others are kept as sent.
FINISH_REASONS: Final = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_call",
    "refusal": "content_filter",
}


def request_content(body: Json) -> RequestContent:
    """The ``messages`` as the conventions' messages, ``system`` as instructions,
    and the ``tools`` (and ``mcp_servers``) offered.

    A user message made only of ``tool_result`` blocks is a ``tool`` message
    of ``tool_call_response`` parts, as the conventions put tool results.
    """
    sent = body.get("messages")
    converted = [_input_message(m) for m in objects(sent)] if isinstance(sent, list) else None
    system = body.get("system")
    return RequestContent(
        input_messages=converted,
        system_instructions=parts.text_of(system, frozenset({"text"}))
        if system is not None
        else None,
        tool_definitions=_tool_definitions(body),
    )


def _input_message(message: Json) -> Json:
    role = str_or_none(message.get("role")) or "user"
    return parts.block_message(role, _block_parts(message.get("content")))


def _block_parts(content: Any) -> list[Json]:
    if isinstance(content, str):
        return [parts.text(content)]
    if not isinstance(content, list):
        return []
    return [block_part(block) for block in content if isinstance(block, dict)]


def block_part(block: Json) -> Json:
    """One content block as a part of the conventions."""
    kind = str_or_none(block.get("type")) or "unknown"
    source = block.get("source")
    if kind == "text" and isinstance(block.get("text"), str):
        return parts.text(block["text"])
    if kind == "thinking" and isinstance(block.get("thinking"), str):
        return parts.reasoning(block["thinking"])
    if kind == "tool_use":
        return parts.tool_call(
            str_or_none(block.get("id")), str_or_none(block.get("name")), block.get("input")
        )
    if kind == "tool_result":
        return parts.tool_call_response(str_or_none(block.get("tool_use_id")), block.get("content"))
    if kind in ("image", "document") and isinstance(source, dict):
        return _source_part("image" if kind == "image" else "document", source)
    if kind in ("server_tool_use", "mcp_tool_use"):
        name = str_or_none(block.get("name")) or kind
        return parts.server_tool_call(
            str_or_none(block.get("id")), name, {"type": name, "input": block.get("input")}
        )
    return parts.generic(kind, id=str_or_none(block.get("id")))


def _source_part(modality: str, source: Json) -> Json:
    """An image or document ``source``: inline base64, a URL, or an uploaded file."""
    kind = source.get("type")
    media_type = str_or_none(source.get("media_type"))
    if kind == "base64" and isinstance(source.get("data"), str):
        return parts.blob(modality, source["data"], media_type)
    if kind == "url" and isinstance(source.get("url"), str):
        return parts.uri(modality, source["url"], media_type)
    if kind == "file" and isinstance(source.get("file_id"), str):
        return parts.file(modality, source["file_id"], media_type)
    if kind == "text" and isinstance(source.get("data"), str):
        return parts.text(source["data"])
    return parts.generic(str_or_none(kind) or "unknown")


def _tool_definitions(body: Json) -> list[Json] | None:
    tools, servers = body.get("tools"), body.get("mcp_servers")
    if not isinstance(tools, list) and not isinstance(servers, list):
        return None
    found: list[Json] = []
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        kind = str_or_none(tool.get("type"))
        name = str_or_none(tool.get("name"))
        if kind is None or kind == "custom":
            found.append(
                parts.tool_definition(
                    "function", name or "", tool.get("description"), tool.get("input_schema")
                )
            )
        else:
            found.append(parts.tool_definition(kind, name or kind))
    for server in servers if isinstance(servers, list) else ():
        if isinstance(server, dict):
            found.append(parts.tool_definition("mcp", str_or_none(server.get("name")) or "mcp"))
    return found


def response_content(body: Json) -> ResponseContent | None:
    """The ``content`` blocks of a message as one output message, or ``None``
    for a body without them (an error)."""
    content = body.get("content")
    if not isinstance(content, list):
        return None
    reason = parts.finish_reason(str_or_none(body.get("stop_reason")), FINISH_REASONS)
    return ResponseContent([parts.output_message(_block_parts(content), reason)])


def request_settings(body: Json) -> RequestSettings:
    """The generation settings sent (Anthropic has no seed, penalties or ``n``)."""
    return RequestSettings(
        max_tokens=whole_number(body.get("max_tokens")),
        temperature=number(body.get("temperature")),
        top_p=number(body.get("top_p")),
        top_k=number(body.get("top_k")),
        stop_sequences=string_list(body.get("stop_sequences")),
        output_type=output_type(body.get("output_format")),
        service_tier=str_or_none(body.get("service_tier")),
    )


def usage_totals(usage: Usage) -> Usage:
    """Anthropic's ``input_tokens`` leaves out the tokens read from and written
    to the cache: the total adds ``cache_read_input_tokens`` and
    ``cache_creation_input_tokens`` (a cache count not reported adds nothing).
    Output tokens include thinking already."""
    return input_with_cache(usage)
