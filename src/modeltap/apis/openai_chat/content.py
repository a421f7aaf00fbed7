"""Chat Completions, what telemetry reads (spans only; see :mod:`modeltap.apis.contract`)."""

from __future__ import annotations

from typing import Any

from modeltap.apis import message_parts as parts
from modeltap.apis.contract import RequestContent, ResponseContent
from modeltap.apis.fields import (
    number,
    objects,
    output_type,
    str_or_none,
    string_list,
    whole_number,
)
from modeltap.apis.openai_chat.observe import FINISH_REASONS, tool_call_parts
from modeltap.evidence.records import Json, RequestSettings, Usage


def request_content(body: Json) -> RequestContent:
    """The ``messages`` as the conventions' messages, and the ``tools`` offered.

    System and developer messages stay among the input messages (chat has no
    instructions outside the conversation, so ``system_instructions`` is
    always ``None``). A ``tool`` message is a ``tool_call_response``; an
    assistant's ``tool_calls`` are ``tool_call`` parts.
    """
    sent = body.get("messages")
    converted = [_input_message(m) for m in objects(sent)] if isinstance(sent, list) else None
    return RequestContent(input_messages=converted, tool_definitions=_tool_definitions(body))


def _input_message(message: Json) -> Json:
    role = str_or_none(message.get("role")) or "user"
    content = message.get("content")
    found: list[Json] = []
    if role == "tool":
        found.append(parts.tool_call_response(str_or_none(message.get("tool_call_id")), content))
    else:
        found.extend(_content_parts(content))
        refusal = message.get("refusal")
        if isinstance(refusal, str):
            found.append(parts.text(refusal))
        for call in objects(message.get("tool_calls")):
            name, arguments = tool_call_parts(call)
            found.append(parts.tool_call(str_or_none(call.get("id")), name, arguments))
        legacy = message.get("function_call")
        if isinstance(legacy, dict):
            found.append(
                parts.tool_call(
                    None, str_or_none(legacy.get("name")), str_or_none(legacy.get("arguments"))
                )
            )
    return parts.message(role, found, str_or_none(message.get("name")))


def _content_parts(content: Any) -> list[Json]:
    """A chat message's ``content``: a string, or parts (text, images, audio, files)."""
    if isinstance(content, str):
        return [parts.text(content)]
    return [_content_part(part) for part in objects(content)]


def _field(part: Json, outer: str, inner: str) -> str | None:
    """``part[outer][inner]`` when it is a string (``image_url.url``, ``file.file_id``)."""
    value = part.get(outer)
    return str_or_none(value.get(inner)) if isinstance(value, dict) else None


def _content_part(part: Json) -> Json:
    kind = str_or_none(part.get("type")) or "unknown"
    if kind in ("text", "refusal") and isinstance(part.get(kind), str):
        return parts.text(part[kind])
    if kind == "image_url" and (url := _field(part, "image_url", "url")) is not None:
        return parts.uri("image", url)
    if kind == "input_audio" and (data := _field(part, "input_audio", "data")) is not None:
        audio_format = _field(part, "input_audio", "format")
        return parts.blob("audio", data, f"audio/{audio_format}" if audio_format else None)
    if kind == "file" and (file_id := _field(part, "file", "file_id")) is not None:
        return parts.file("document", file_id)
    if kind == "file" and (data := _field(part, "file", "file_data")) is not None:
        return parts.uri("document", data)
    return parts.generic(kind)


def _tool_definitions(body: Json) -> list[Json] | None:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return None
    found: list[Json] = []
    for tool in objects(tools):
        kind = str_or_none(tool.get("type")) or "unknown"
        spec = tool.get(kind)
        if kind in ("function", "custom") and isinstance(spec, dict):
            found.append(
                parts.tool_definition(
                    kind,
                    str_or_none(spec.get("name")) or "",
                    spec.get("description"),
                    spec.get("parameters") if kind == "function" else None,
                )
            )
        else:
            found.append(parts.tool_definition(kind, str_or_none(tool.get("name")) or kind))
    return found


def response_content(body: Json) -> ResponseContent | None:
    """Each of ``choices`` as an output message, or ``None`` for a body without
    them (an error)."""
    choices = body.get("choices")
    if not isinstance(choices, list):
        return None
    messages: list[Json] = []
    for choice in objects(choices):
        message = choice.get("message")
        message = message if isinstance(message, dict) else {}
        found = _content_parts(message.get("content"))
        for key in ("refusal", "reasoning_content", "reasoning"):
            value = message.get(key)
            if isinstance(value, str):
                found.append(parts.text(value) if key == "refusal" else parts.reasoning(value))
        for call in objects(message.get("tool_calls")):
            name, arguments = tool_call_parts(call)
            found.append(parts.tool_call(str_or_none(call.get("id")), name, arguments))
        reason = parts.finish_reason(str_or_none(choice.get("finish_reason")), FINISH_REASONS)
        messages.append(
            parts.output_message(found, reason, str_or_none(message.get("role")) or "assistant")
        )
    return ResponseContent(messages)


def request_settings(body: Json) -> RequestSettings:
    """The generation settings sent (``max_completion_tokens`` before ``max_tokens``)."""
    max_tokens = whole_number(body.get("max_completion_tokens"))
    return RequestSettings(
        max_tokens=max_tokens if max_tokens is not None else whole_number(body.get("max_tokens")),
        temperature=number(body.get("temperature")),
        top_p=number(body.get("top_p")),
        stop_sequences=string_list(body.get("stop")),
        seed=whole_number(body.get("seed")),
        frequency_penalty=number(body.get("frequency_penalty")),
        presence_penalty=number(body.get("presence_penalty")),
        choice_count=whole_number(body.get("n")),
        output_type=output_type(body.get("response_format")),
        service_tier=str_or_none(body.get("service_tier")),
    )


def usage_totals(usage: Usage) -> Usage:
    """The counts as reported: ``prompt_tokens`` already includes cached tokens
    and ``completion_tokens`` reasoning tokens."""
    return usage
