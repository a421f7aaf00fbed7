"""Gemini ``generateContent``, what telemetry reads (spans only; see
:mod:`modeltap.apis.contract`)."""

from __future__ import annotations

from typing import Final

from modeltap.apis import message_parts as parts
from modeltap.apis.contract import RequestContent, ResponseContent
from modeltap.apis.fields import number, objects, str_or_none, string_list, whole_number
from modeltap.apis.gemini.observe import candidate_parts, finish_reason, unwrap
from modeltap.apis.gemini.spelling import camel_case, lenient_field, request_of
from modeltap.evidence.records import Json, RequestSettings, Usage

#: Gemini's roles as the conventions name them.
_ROLES: Final = {"user": "user", "model": "assistant", "function": "tool", "tool": "tool"}


def _modality(mime: str | None) -> str:
    kind = (mime or "").split("/", 1)[0].lower()
    return kind if kind in ("image", "video", "audio") else "document"


def _content_part(part: Json) -> Json:
    """One Gemini part in the conventions' shape."""
    text = part.get("text")
    if isinstance(text, str):
        return parts.reasoning(text) if part.get("thought") is True else parts.text(text)
    inline = lenient_field(part, "inlineData")
    if isinstance(inline, dict):
        mime = str_or_none(lenient_field(inline, "mimeType"))
        return parts.blob(_modality(mime), str_or_none(inline.get("data")) or "", mime)
    file_data = lenient_field(part, "fileData")
    if isinstance(file_data, dict):
        mime = str_or_none(lenient_field(file_data, "mimeType"))
        return parts.uri(
            _modality(mime), str_or_none(lenient_field(file_data, "fileUri")) or "", mime
        )
    call = lenient_field(part, "functionCall")
    if isinstance(call, dict):
        name = str_or_none(call.get("name"))
        return parts.tool_call(str_or_none(call.get("id")), name, call.get("args"))
    response = lenient_field(part, "functionResponse")
    if isinstance(response, dict):
        return parts.tool_call_response(str_or_none(response.get("id")), response.get("response"))
    for key in part:
        if key not in ("thought", "thoughtSignature", "thought_signature", "mediaResolution"):
            return parts.generic(camel_case(key))
    return parts.generic("unknown")


def request_content(body: Json) -> RequestContent:
    """``contents`` as the conventions' messages (``model`` is ``assistant``; a
    content of function responses is ``tool``), ``systemInstruction`` as the
    system instructions, and the function declarations and hosted tools."""
    request = request_of(body)
    contents = lenient_field(request, "contents")
    messages: list[Json] | None = None
    if isinstance(contents, list):
        messages = []
        for content in objects(contents):
            found = [_content_part(p) for p in objects(content.get("parts"))]
            role = _ROLES.get(str_or_none(content.get("role")) or "user", "user")
            if found and found[0]["type"] == "tool_call_response":
                role = "tool"  # function responses (and a tool's image after them)
            messages.append(parts.message(role, found))
    system = lenient_field(request, "systemInstruction")
    texts = objects(system.get("parts")) if isinstance(system, dict) else []
    instructions = [parts.text(p["text"]) for p in texts if isinstance(p.get("text"), str)]
    return RequestContent(messages, instructions or None, _tool_definitions(request))


def _tool_definitions(request: Json) -> list[Json] | None:
    tools = lenient_field(request, "tools")
    if not isinstance(tools, list):
        return None
    found: list[Json] = []
    for tool in objects(tools):
        for key, value in tool.items():
            if camel_case(key) != "functionDeclarations":
                found.append(parts.tool_definition(camel_case(key), camel_case(key)))
                continue
            for declaration in objects(value):
                schema = lenient_field(declaration, "parametersJsonSchema")
                found.append(
                    parts.tool_definition(
                        "function",
                        str_or_none(declaration.get("name")) or "",
                        declaration.get("description"),
                        schema if schema is not None else declaration.get("parameters"),
                    )
                )
    return found


def response_content(body: Json) -> ResponseContent | None:
    """Each candidate as an output message, or ``None`` for a body without
    candidates (an error, a blocked prompt)."""
    body = unwrap(body)
    candidates = body.get("candidates") if isinstance(body, dict) else None
    if not isinstance(candidates, list):
        return None
    messages: list[Json] = []
    for candidate in objects(candidates):
        found = [_content_part(p) for p in candidate_parts(candidate)]
        called = any(p["type"] == "tool_call" for p in found)
        reason = finish_reason(str_or_none(candidate.get("finishReason")), called)
        messages.append(parts.output_message(found, reason))
    return ResponseContent(messages)


#: ``gen_ai.output.type`` of the response MIME types.
_OUTPUT_TYPES: Final = {"application/json": "json", "text/plain": "text"}


def generation_settings(config: Json) -> RequestSettings:
    mime = str_or_none(lenient_field(config, "responseMimeType"))
    return RequestSettings(
        max_tokens=whole_number(lenient_field(config, "maxOutputTokens")),
        temperature=number(lenient_field(config, "temperature")),
        top_p=number(lenient_field(config, "topP")),
        top_k=number(lenient_field(config, "topK")),
        stop_sequences=string_list(lenient_field(config, "stopSequences")),
        seed=whole_number(lenient_field(config, "seed")),
        frequency_penalty=number(lenient_field(config, "frequencyPenalty")),
        presence_penalty=number(lenient_field(config, "presencePenalty")),
        choice_count=whole_number(lenient_field(config, "candidateCount")),
        output_type=_OUTPUT_TYPES.get(mime.lower()) if mime else None,
    )


def request_settings(body: Json) -> RequestSettings:
    """The ``generationConfig`` settings sent (either spelling)."""
    config = lenient_field(request_of(body), "generationConfig")
    return generation_settings(config) if isinstance(config, dict) else RequestSettings()


def usage_totals(usage: Usage) -> Usage:
    """``promptTokenCount`` already counts cached tokens; output adds the
    thoughts, which ``candidatesTokenCount`` leaves out."""
    if usage.output_tokens is None or usage.reasoning_tokens is None:
        return usage
    return Usage(
        usage.input_tokens,
        usage.output_tokens + usage.reasoning_tokens,
        usage.total_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.reasoning_tokens,
    )
