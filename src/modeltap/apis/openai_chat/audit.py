"""Chat Completions, the request side (SPEC section 2): what a body sends.

Client-run tools are ``function`` tools (named by ``function.name``) and
``custom`` tools (named by ``custom.name``); any other tool type (gateways
such as OpenRouter add provider-run ones) is a hosted tool. Images are
``image_url`` content parts of any message. A tool result's size is its
``content`` as sent (``json_body.utf8_len``): a string as UTF-8, a list of
parts as its compact JSON, so every API measures results the same way.
"""

from __future__ import annotations

from typing import Any

from modeltap.apis.contract import EndpointMatch
from modeltap.apis.fields import (
    bounded,
    instructions_digest,
    optional_name,
    optional_str,
    reject_messages_and_input,
    request_model,
    text_part_texts,
)
from modeltap.apis.json_body import utf8_len
from modeltap.apis.openai_chat.content import request_settings
from modeltap.evidence.records import HostedTool, Json, RequestFacts, ToolResult
from modeltap.rules.errors import Rejected, Rule

_INSTRUCTION_ROLES = frozenset({"system", "developer"})


def audit_request(body: Json, endpoint: EndpointMatch | None = None) -> RequestFacts:
    """Read the audit facts off a Chat Completions request body.

    Args:
        body: the parsed request body.
        endpoint: what the path said (:func:`match_endpoint`): an Azure
            deployment names the model; ``None`` for a plain path.

    Returns:
        The request facts; ``thinking``, ``previous_response_id`` and
        ``generate`` are always ``None`` (chat has none of them).

    Raises:
        Rejected: ``missing_model``, ``messages_and_input``,
            ``malformed_messages``, ``malformed_tools``, ``tool_without_name``,
            ``malformed_image``, ``instructions_not_text`` or
            ``malformed_setting``.
    """
    model = request_model(body, endpoint)
    reject_messages_and_input(body)
    messages = _messages(body)
    tool_names, hosted_tools = _tools(body.get("tools"))
    # The deprecated `functions` still advertises tools the upstream offers the model.
    tool_names += _functions(body.get("functions"))
    reasoning_effort = optional_str(body.get("reasoning_effort"), "reasoning_effort")

    instructions: list[str] = []
    images: list[str | None] = []
    tool_results: list[ToolResult] = []
    for i, message in enumerate(messages):
        role = message.get("role")
        if not isinstance(role, str):
            raise Rejected(Rule.MALFORMED_MESSAGES, f"messages[{i}].role")
        content = message.get("content")
        if role in _INSTRUCTION_ROLES:
            instructions.extend(text_part_texts(content, f"messages[{i}]"))
        elif role == "tool":
            tool_results.append(
                ToolResult(
                    optional_name(message.get("tool_call_id"), f"messages[{i}].tool_call_id"),
                    0 if content is None else utf8_len(content),
                )
            )
        elif role == "function":
            # The deprecated function result: no call id to pair it by.
            tool_results.append(ToolResult(None, 0 if content is None else utf8_len(content)))
        if isinstance(content, list):
            images.extend(_image_details(content, i))

    stream_options = body.get("stream_options")
    instructions_sha256, instructions_parts = instructions_digest(instructions)
    return RequestFacts(
        model=model,
        tool_names=tool_names,
        reasoning_effort=reasoning_effort,
        thinking=None,
        image_details=tuple(images),
        instructions_sha256=instructions_sha256,
        instructions_parts=instructions_parts,
        stream=body.get("stream") is True or (endpoint is not None and endpoint.stream),
        hosted_tools=hosted_tools,
        tool_results=tuple(tool_results),
        previous_response_id=None,
        generate=None,
        include_usage=isinstance(stream_options, dict)
        and stream_options.get("include_usage") is True,
        settings=request_settings(body),
    )


def _messages(body: Json) -> list[Json]:
    """Return ``messages``, which must be a list of objects."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise Rejected(Rule.MALFORMED_MESSAGES, "messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise Rejected(Rule.MALFORMED_MESSAGES, f"messages[{i}]")
    return messages


def _tools(tools: Any) -> tuple[tuple[str, ...], tuple[HostedTool, ...]]:
    """Split ``tools`` into client-run tool names and hosted tools, in order.

    Absent (or ``null``) tools mean none were advertised: an empty tuple, since
    the whole request was seen.
    """
    if tools is None:
        return (), ()
    if not isinstance(tools, list):
        raise Rejected(Rule.MALFORMED_TOOLS, "tools")
    names: list[str] = []
    hosted: list[HostedTool] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise Rejected(Rule.MALFORMED_TOOLS, f"tools[{i}]")
        kind = tool["type"]
        if kind in ("function", "custom"):
            spec = tool.get(kind)
            name = spec.get("name") if isinstance(spec, dict) else None
            if not isinstance(name, str) or not name:
                raise Rejected(Rule.TOOL_WITHOUT_NAME, f"tools[{i}]")
            names.append(bounded(name, f"tools[{i}]"))
        else:
            hosted.append(
                HostedTool(
                    bounded(kind, f"tools[{i}].type"),
                    optional_name(tool.get("name"), f"tools[{i}].name"),
                )
            )
    return tuple(names), tuple(hosted)


def _functions(functions: Any) -> tuple[str, ...]:
    """The names of the deprecated ``functions`` list (chat's tools before ``tools``)."""
    if functions is None:
        return ()
    if not isinstance(functions, list):
        raise Rejected(Rule.MALFORMED_TOOLS, "functions")
    names: list[str] = []
    for i, function in enumerate(functions):
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise Rejected(Rule.TOOL_WITHOUT_NAME, f"functions[{i}]")
        names.append(bounded(name, f"functions[{i}]"))
    return tuple(names)


def _image_details(content: list[Any], index: int) -> list[str | None]:
    """Return the detail of each ``image_url`` part of one message's content."""
    details: list[str | None] = []
    for j, part in enumerate(content):
        where = f"messages[{index}].content[{j}]"
        if not isinstance(part, dict):
            raise Rejected(Rule.MALFORMED_MESSAGES, where)
        if part.get("type") != "image_url":
            continue
        image = part.get("image_url")
        if not isinstance(image, dict) or not isinstance(image.get("url"), str):
            raise Rejected(Rule.MALFORMED_IMAGE, where)
        detail = image.get("detail")
        if detail is not None and not isinstance(detail, str):
            raise Rejected(Rule.MALFORMED_IMAGE, where)
        details.append(None if detail is None else bounded(detail, where))
    return details


def set_image_detail(body: Json, detail: str) -> int:
    """Set ``image_url.detail`` of every image part to ``detail``, in place.

    Args:
        body: a request body that :func:`audit_request` accepted.
        detail: the detail to send (``low``, ``high`` or ``auto``).

    Returns:
        How many images were rewritten.
    """
    count = 0
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") == "image_url":
                image = part.get("image_url")
                if isinstance(image, dict):
                    image["detail"] = detail
                    count += 1
    return count
