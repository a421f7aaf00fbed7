"""Bedrock Converse, what telemetry reads (spans only; see :mod:`modeltap.apis.contract`)."""

from __future__ import annotations

from typing import Any, Final

from modeltap.apis import message_parts as parts
from modeltap.apis.contract import RequestContent, ResponseContent
from modeltap.apis.fields import (
    input_with_cache,
    number,
    objects,
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
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}


def output_content(body: Json) -> list[Any] | None:
    """``output.message.content``, or ``None`` when the body has no such list."""
    output = body.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else None


def request_content(body: Json) -> RequestContent:
    """The ``messages`` as the conventions' messages, ``system`` as instructions,
    and the tools offered (``toolSpec`` as functions, ``systemTool`` by name).

    A user message made only of ``toolResult`` blocks is a ``tool`` message.
    """
    sent = body.get("messages")
    converted = [_input_message(m) for m in objects(sent)] if isinstance(sent, list) else None
    system = body.get("system")
    instructions = (
        [parts.text(b["text"]) for b in system if isinstance(b, dict) and "text" in b]
        if isinstance(system, list)
        else None
    )
    return RequestContent(
        input_messages=converted,
        system_instructions=instructions,
        tool_definitions=_tool_definitions(body.get("toolConfig")),
    )


def _input_message(message: Json) -> Json:
    role = str_or_none(message.get("role")) or "user"
    return parts.block_message(role, _block_parts(message.get("content")))


def _block_parts(content: Any) -> list[Json]:
    if not isinstance(content, list):
        return []
    return [_block_part(block) for block in content if isinstance(block, dict)]


def _block_part(block: Json) -> Json:
    """One Converse content block (an object with one key) as a part of the conventions."""
    if isinstance(block.get("text"), str):
        return parts.text(block["text"])
    reasoning = block.get("reasoningContent")
    if isinstance(reasoning, dict):
        text = reasoning.get("reasoningText")
        if isinstance(text, dict) and isinstance(text.get("text"), str):
            return parts.reasoning(text["text"])
        return parts.generic("reasoningContent")
    use = block.get("toolUse")
    if isinstance(use, dict):
        return parts.tool_call(
            str_or_none(use.get("toolUseId")), str_or_none(use.get("name")), use.get("input")
        )
    result = block.get("toolResult")
    if isinstance(result, dict):
        return parts.tool_call_response(str_or_none(result.get("toolUseId")), result.get("content"))
    for modality in ("image", "document", "video"):
        if isinstance(block.get(modality), dict):
            return _media_part(modality, block[modality])
    kind = next(iter(block), "unknown")
    return parts.generic(kind if isinstance(kind, str) else "unknown")


def _media_part(modality: str, media: Json) -> Json:
    """An image, document or video block: inline bytes (base64) or an S3 location."""
    source = media.get("source")
    fmt = str_or_none(media.get("format"))
    mime = f"{modality}/{fmt}" if fmt and modality != "document" else None
    if isinstance(source, dict) and isinstance(source.get("bytes"), str):
        return parts.blob(modality, source["bytes"], mime)
    location = source.get("s3Location") if isinstance(source, dict) else None
    if isinstance(location, dict) and isinstance(location.get("uri"), str):
        return parts.uri(modality, location["uri"], mime)
    return parts.generic(modality)


def _tool_definitions(config: Any) -> list[Json] | None:
    tools = config.get("tools") if isinstance(config, dict) else None
    if not isinstance(tools, list):
        return None
    found: list[Json] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        spec = tool.get("toolSpec")
        system_tool = tool.get("systemTool")
        if isinstance(spec, dict):
            schema = spec.get("inputSchema")
            found.append(
                parts.tool_definition(
                    "function",
                    str_or_none(spec.get("name")) or "",
                    spec.get("description"),
                    schema.get("json") if isinstance(schema, dict) else None,
                )
            )
        elif isinstance(system_tool, dict):
            name = str_or_none(system_tool.get("name")) or "systemTool"
            found.append(parts.tool_definition("systemTool", name))
    return found


def response_content(body: Json) -> ResponseContent | None:
    """The output message's content blocks as one output message, or ``None``
    for a body without them (an error)."""
    content = output_content(body)
    if content is None:
        return None
    reason = parts.finish_reason(str_or_none(body.get("stopReason")), FINISH_REASONS)
    return ResponseContent([parts.output_message(_block_parts(content), reason)])


def request_settings(body: Json) -> RequestSettings:
    """The generation settings sent: ``inferenceConfig`` (``maxTokens``,
    ``temperature``, ``topP``, ``stopSequences``), ``top_k`` from
    ``additionalModelRequestFields``, the ``serviceTier`` asked for."""
    config = body.get("inferenceConfig")
    config = config if isinstance(config, dict) else {}
    extra = body.get("additionalModelRequestFields")
    tier = body.get("serviceTier")
    return RequestSettings(
        max_tokens=whole_number(config.get("maxTokens")),
        temperature=number(config.get("temperature")),
        top_p=number(config.get("topP")),
        top_k=number(extra.get("top_k")) if isinstance(extra, dict) else None,
        stop_sequences=string_list(config.get("stopSequences")),
        service_tier=str_or_none(tier.get("type")) if isinstance(tier, dict) else None,
    )


def usage_totals(usage: Usage) -> Usage:
    """Converse's ``inputTokens`` leaves out the tokens read from and written to
    the cache (``cacheReadInputTokens``, ``cacheWriteInputTokens``), as
    Anthropic's does: the total adds them. Output tokens include reasoning."""
    return input_with_cache(usage)
