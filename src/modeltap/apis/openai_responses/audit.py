"""The Responses API, the request side (SPEC section 2): what a body sends.

Reading rules that need a decision beyond the SPEC's table:

- ``input`` is a string (one user message) or a list of items
  (:func:`~modeltap.apis.openai_responses.items.is_message` tells the messages).
- Top-level ``instructions`` is a string, or a list of messages (the shape a
  Response object echoes back); every message of that list is instruction
  text, whatever its role, because of where it stands.
- A body that continues state the server holds and does not restate its
  instructions or tools records them as unknown (:func:`unstated_settings`).
"""

from collections.abc import Iterator
from typing import Any

from modeltap.apis.contract import EndpointMatch
from modeltap.apis.fields import (
    bounded,
    instructions_digest,
    optional_bool,
    optional_name,
    optional_str,
    reject_messages_and_input,
    request_model,
    str_or_none,
)
from modeltap.apis.json_body import utf8_len
from modeltap.apis.openai_responses.content import request_settings
from modeltap.apis.openai_responses.items import (
    CLIENT_TOOL_TYPES,
    INSTRUCTION_ROLES,
    TOOL_OUTPUT_TYPES,
    is_message,
)
from modeltap.evidence.records import HostedTool, Json, RequestFacts, ToolResult
from modeltap.rules.errors import Rejected, Rule


def audit_request(body: Json, endpoint: EndpointMatch | None = None) -> RequestFacts:
    """Read the audit facts off a Responses request body (SPEC section 2).

    A body that continues state the server holds (:func:`continues_server_state`)
    and does not state its instructions or tools (:func:`unstated_settings`)
    is recorded as sent: ``instructions_sha256`` and/or ``tool_names`` are
    None and ``omitted_settings`` names them, over HTTP and WebSocket alike
    (whether a WebSocket accepts it is :mod:`modeltap.apis.openai_responses.websocket`'s policy).

    Args:
        body: the parsed request body (for WebSocket, the ``response.create``
            message; its ``type`` key is ignored).
        endpoint: what the path said (no Responses path names a model: Azure
            sends ``/openai/responses`` with the deployment in the body).

    Returns:
        The request facts.

    Raises:
        Rejected: ``missing_model``, ``messages_and_input``,
            ``malformed_messages``, ``instructions_not_text``,
            ``malformed_tools``, ``tool_without_name``, ``malformed_image`` or
            ``malformed_setting``.
    """
    model = request_model(body, endpoint)
    reject_messages_and_input(body)
    items = _input_items(body.get("input"))
    omitted = unstated_settings(body) if continues_server_state(body) else ()

    instructions = _top_level_instructions(body.get("instructions"))
    tool_names: list[str] = []
    hosted: list[HostedTool] = []
    tool_results: list[ToolResult] = []
    if body.get("tools") is not None:
        _read_tools(body["tools"], "tools", "", tool_names, hosted)
    for index, item in enumerate(items):
        where = f"input[{index}]"
        for key in ("type", "role"):
            if key in item and not isinstance(item[key], str):
                raise Rejected(Rule.MALFORMED_MESSAGES, f"{where}.{key}")
        kind = item.get("type")
        if is_message(item):
            content = item.get("content")
            if str_or_none(item.get("role")) in INSTRUCTION_ROLES:
                instructions.extend(_instruction_texts(content))
            elif isinstance(content, str | list):
                _check_part_list(content, where)
            else:
                raise Rejected(Rule.MALFORMED_MESSAGES, where)
        elif kind == "additional_tools":
            _read_tools(item.get("tools"), f"{where}.tools", "", tool_names, hosted)
        elif kind in TOOL_OUTPUT_TYPES:
            output = item.get("output")
            _check_part_list(output, where)
            tool_results.append(
                ToolResult(
                    call_id=optional_name(item.get("call_id"), f"{where}.call_id"),
                    bytes=0 if output is None else utf8_len(output),
                )
            )
    image_details = tuple(_image_detail(part) for part in _image_parts(items))
    instructions_sha256, instructions_parts = instructions_digest(
        None if "instructions" in omitted else instructions
    )

    return RequestFacts(
        model=model,
        tool_names=None if "tools" in omitted else tuple(tool_names),
        reasoning_effort=_reasoning_effort(body.get("reasoning")),
        thinking=None,
        image_details=image_details,
        instructions_sha256=instructions_sha256,
        instructions_parts=instructions_parts,
        stream=body.get("stream") is True or (endpoint is not None and endpoint.stream),
        hosted_tools=tuple(hosted),
        tool_results=tuple(tool_results),
        previous_response_id=optional_str(body.get("previous_response_id"), "previous_response_id"),
        generate=optional_bool(body.get("generate"), "generate"),
        omitted_settings=omitted,
        settings=request_settings(body),
    )


#: Top-level fields by which a request continues state the server holds: an
#: earlier response, a stored conversation, a stored prompt (which carries its
#: own instructions and tools).
SERVER_STATE_FIELDS = ("previous_response_id", "conversation", "prompt")


def continues_server_state(body: Json) -> bool:
    """Whether ``body`` builds on server-held state (:data:`SERVER_STATE_FIELDS`).

    Such a request need not restate its instructions and tools; what is in
    effect then was not seen in it. Never raises.

    Args:
        body: a request body or ``response.create`` message.
    """
    return any(body.get(key) is not None for key in SERVER_STATE_FIELDS)


def unstated_settings(body: Json) -> tuple[str, ...]:
    """Which of instructions and tools a body does not state itself (SPEC section 3).

    Instructions are stated by a top-level ``instructions`` or a system/developer
    message in the body's own ``input``; tools by a top-level ``tools`` (even
    empty) or an ``additional_tools`` item in its own ``input``. Never raises:
    a malformed body is left for :func:`audit_request` to refuse.

    Args:
        body: a request body or ``response.create`` message.

    Returns:
        ``"instructions"`` and/or ``"tools"``, in that order.
    """
    items = body.get("input")
    items = [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []
    has_instructions = body.get("instructions") is not None or any(
        is_message(item) and str_or_none(item.get("role")) in INSTRUCTION_ROLES for item in items
    )
    has_tools = body.get("tools") is not None or any(
        item.get("type") == "additional_tools" for item in items
    )
    unstated = []
    if not has_instructions:
        unstated.append("instructions")
    if not has_tools:
        unstated.append("tools")
    return tuple(unstated)


def set_image_detail(body: Json, detail: str) -> int:
    """Rewrite, in place, the ``detail`` of every image :func:`audit_request` counts.

    Never raises: parts of a malformed body that cannot hold an image are skipped.

    Args:
        body: a parsed request body (or ``response.create`` message).
        detail: the value to send, e.g. ``"low"``.

    Returns:
        How many images were rewritten.
    """
    count = 0
    for part in _image_parts(body.get("input")):
        part["detail"] = detail
        count += 1
    return count


def _input_items(value: Any) -> list[Json]:
    """The input as a list of item objects; a string input is one user message."""
    if value is None or isinstance(value, str):
        return []
    if not isinstance(value, list):
        raise Rejected(Rule.MALFORMED_MESSAGES, "input")
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise Rejected(Rule.MALFORMED_MESSAGES, f"input[{index}]")
    return value


def _top_level_instructions(value: Any) -> list[str]:
    """The texts of top-level ``instructions``: a string, or a list of messages."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise Rejected(Rule.INSTRUCTIONS_NOT_TEXT, "instructions")
    texts = []
    for item in value:
        if not isinstance(item, dict) or not is_message(item):
            raise Rejected(Rule.INSTRUCTIONS_NOT_TEXT, "instructions")
        texts.extend(_instruction_texts(item.get("content")))
    return texts


def _instruction_texts(content: Any) -> list[str]:
    """The texts of a system/developer message: a string, or each ``input_text``
    part (no parts: one empty text, as it joins)."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        raise Rejected(Rule.INSTRUCTIONS_NOT_TEXT)
    texts = []
    for part in content:
        if (
            not isinstance(part, dict)
            or part.get("type") != "input_text"
            or not isinstance(part.get("text"), str)
        ):
            raise Rejected(Rule.INSTRUCTIONS_NOT_TEXT)
        texts.append(part["text"])
    return texts or [""]


def _check_part_list(value: Any, where: str) -> None:
    """Refuse a list of parts (content or tool output) holding a non-object.

    Such a list could hide an image we cannot read; a tool output that is not
    a list at all is only sized, never read, so it passes.
    """
    if isinstance(value, list) and not all(isinstance(part, dict) for part in value):
        raise Rejected(Rule.MALFORMED_MESSAGES, where)


def _image_parts(items: Any) -> Iterator[Json]:
    """Every ``input_image`` part of the input: message contents and tool outputs.

    The one traversal both :func:`audit_request` and :func:`set_image_detail`
    use, so the images rewritten are exactly the images recorded.
    """
    if not isinstance(items, list):
        return
    for item in items:
        if not isinstance(item, dict):
            continue
        if is_message(item):
            parts = item.get("content")
        elif str_or_none(item.get("type")) in TOOL_OUTPUT_TYPES:
            parts = item.get("output")
        else:
            continue
        if isinstance(parts, list):
            for part in parts:
                if isinstance(part, dict) and part.get("type") == "input_image":
                    yield part


def _image_detail(part: Json) -> str | None:
    """The detail of an ``input_image`` part as sent, after checking its shape."""
    detail = part.get("detail")
    if detail is not None and not isinstance(detail, str):
        raise Rejected(Rule.MALFORMED_IMAGE, "detail")
    if detail is not None:
        bounded(detail, "detail")
    if not isinstance(part.get("image_url"), str) and not isinstance(part.get("file_id"), str):
        raise Rejected(Rule.MALFORMED_IMAGE, "image_url or file_id")
    return detail


def _read_tools(
    tools: Any, where: str, prefix: str, names: list[str], hosted: list[HostedTool]
) -> None:
    """Append client tool names and hosted tools of one tool list, in order.

    Args:
        tools: the list as sent.
        where: its position, for the refusal detail (never a value).
        prefix: ``"ns."`` inside a namespace, else ``""``.
        names: client tool names collected so far.
        hosted: hosted tools collected so far.
    """
    if not isinstance(tools, list):
        raise Rejected(Rule.MALFORMED_TOOLS, where)
    for index, tool in enumerate(tools):
        here = f"{where}[{index}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise Rejected(Rule.MALFORMED_TOOLS, here)
        kind = tool["type"]
        if kind in CLIENT_TOOL_TYPES or kind == "namespace":
            name = tool.get("name")
            if not isinstance(name, str) or not name:
                raise Rejected(Rule.TOOL_WITHOUT_NAME, here)
            if kind == "namespace":
                _read_tools(tool.get("tools"), f"{here}.tools", f"{prefix}{name}.", names, hosted)
            else:
                names.append(bounded(f"{prefix}{name}", here))
        else:
            # An MCP tool is known by its server label; other hosted tools by
            # their name when they carry one.
            label = tool.get("server_label") if kind == "mcp" else tool.get("name")
            hosted.append(
                HostedTool(
                    type=bounded(kind, f"{here}.type"),
                    name=optional_name(label, f"{here}.name"),
                )
            )


def _reasoning_effort(reasoning: Any) -> str | None:
    """``reasoning.effort`` as sent, or None."""
    if reasoning is None:
        return None
    if not isinstance(reasoning, dict):
        raise Rejected(Rule.MALFORMED_SETTING, "reasoning")
    return optional_str(reasoning.get("effort"), "reasoning.effort")
