"""Anthropic Messages, the request side (SPEC section 2): what a body sends.

Client tools are those with no ``type`` or ``type: "custom"``, named by
``name``. Every tool with another ``type`` is a hosted tool, ``{type, name}``:
the server tools (``web_search_…``, ``code_execution_…``) and also the
versioned, schema-less tools such as ``bash_…`` and ``text_editor_…``; those
run on the client, but their type is what identifies them on the wire, so
they are recorded with it rather than mixed into the catalogue of tools the
client defined. Each ``mcp_servers`` entry is a hosted tool ``{type: "mcp",
name}``, after the ``tools``. Instructions are the top-level ``system`` then
any ``role: system`` message. Images are ``image`` blocks, inside
``tool_result`` content too; Anthropic images carry no detail, so each is
``None`` and :func:`set_image_detail` changes nothing. A tool result's size
is its ``content`` as sent (``json_body.utf8_len``): a string as UTF-8, a
block list as its compact JSON, absent as 0. ``thinking`` keeps ``type``,
``budget_tokens`` and ``display``; any other key by name only (SPEC section
8). A request whose ``thread`` continues state the server holds (``{"type":
"continue", "previous_message_id": …}``, the message-threads beta of the
SDKs' tool runners) and does not state ``system`` or ``tools`` records those
as ``None`` and lists them in ``omitted_settings``: the server applies the
thread's own, which this request does not show.
"""

from __future__ import annotations

from typing import Any, Final

from modeltap.apis import cloud_paths
from modeltap.apis.anthropic_messages.content import request_settings
from modeltap.apis.contract import (
    FORM_BEDROCK_INVOKE,
    FORM_VERTEX_RAW_PREDICT,
    EndpointMatch,
    images_without_detail,
)
from modeltap.apis.fields import (
    SettingKeys,
    bounded,
    instructions_digest,
    optional_name,
    optional_str,
    reject_messages_and_input,
    request_model,
    setting_by_name,
    text_part_texts,
)
from modeltap.apis.json_body import utf8_len
from modeltap.evidence.records import HostedTool, Json, RequestFacts, ToolResult
from modeltap.rules.errors import Rejected, Rule

#: The keys of ``thinking`` whose values the record keeps; others by name only.
_THINKING_KEYS: SettingKeys = {"type": str, "budget_tokens": int, "display": str}


def audit_request(body: Json, endpoint: EndpointMatch | None = None) -> RequestFacts:
    """Read the audit facts off a Messages request body.

    On Bedrock's InvokeModel and Vertex's rawPredict (``endpoint.form``) the
    model is the path's and the body has none; those paths run other model
    families' native bodies too (Titan's ``inputText``, Llama's ``prompt``,
    the legacy Claude ``prompt``), which modeltap cannot audit, so the body
    must be a Messages body naming its ``anthropic_version`` (as every
    Anthropic client writes it there) and carrying ``messages``.

    Args:
        body: the parsed request body.
        endpoint: what the path said (:func:`match_endpoint`), or ``None``.

    Returns:
        The request facts; ``previous_response_id``, ``generate`` and
        ``include_usage`` are always ``None`` (Messages has none of them).

    Raises:
        Rejected: ``missing_model``, ``unsupported_body``,
            ``messages_and_input``, ``malformed_messages``,
            ``malformed_tools``, ``tool_without_name``, ``malformed_image``,
            ``instructions_not_text`` or ``malformed_setting``.
    """
    model = request_model(body, endpoint)
    if endpoint is not None and endpoint.form in _CLOUD_FORMS:
        _require_cloud_messages_body(body)
    if endpoint is not None and endpoint.form == FORM_BEDROCK_INVOKE:
        # InvokeModel hands the body to the model the path names, which reads it
        # its own way: a Messages body audits only an Anthropic model's turn.
        family = cloud_paths.bedrock_model_family(model)
        if family is not None and family != "anthropic":
            raise Rejected(Rule.UNSUPPORTED_BODY, "the model id names another model family")
    reject_messages_and_input(body)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise Rejected(Rule.MALFORMED_MESSAGES, "messages")
    tool_names, hosted_tools = _tools(body.get("tools"), body.get("mcp_servers"))

    # Known keys with their values, any other key by name only (SPEC section 8):
    # an extra field must not carry text into the record.
    thinking = setting_by_name(body.get("thinking"), _THINKING_KEYS, "thinking")
    output_config = body.get("output_config")
    if output_config is not None and not isinstance(output_config, dict):
        raise Rejected(Rule.MALFORMED_SETTING, "output_config")
    effort = optional_str(
        output_config.get("effort") if output_config else None, "output_config.effort"
    )

    omitted = _unstated_settings(body) if _continues_thread(body.get("thread")) else ()
    instructions: list[str] = []
    system = body.get("system")
    if system is not None:
        instructions.extend(text_part_texts(system, "system"))
    images: list[str | None] = []
    tool_results: list[ToolResult] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise Rejected(Rule.MALFORMED_MESSAGES, f"messages[{i}]")
        content = message.get("content")
        if message.get("role") == "system":
            instructions.extend(text_part_texts(content, f"messages[{i}]"))
        elif isinstance(content, list):
            _read_blocks(content, f"messages[{i}]", images, tool_results)

    instructions_sha256, instructions_parts = instructions_digest(
        None if "instructions" in omitted else instructions
    )
    return RequestFacts(
        model=model,
        tool_names=None if "tools" in omitted else tool_names,
        reasoning_effort=effort,
        thinking=thinking,
        image_details=tuple(images),
        instructions_sha256=instructions_sha256,
        instructions_parts=instructions_parts,
        stream=body.get("stream") is True or (endpoint is not None and endpoint.stream),
        hosted_tools=hosted_tools,
        tool_results=tuple(tool_results),
        previous_response_id=None,
        generate=None,
        omitted_settings=omitted,
        settings=request_settings(body),
    )


#: The clouds' paths whose native bodies are audited only when they are Messages bodies.
_CLOUD_FORMS: Final = frozenset({FORM_BEDROCK_INVOKE, FORM_VERTEX_RAW_PREDICT})


def _require_cloud_messages_body(body: Json) -> None:
    """Refuse a native invoke body that is not Anthropic Messages.

    Raises:
        Rejected: ``unsupported_body`` without a string ``anthropic_version``
            or without ``messages``, or with the legacy Text Completions
            ``prompt`` beside them (a model that takes both could read either).
    """
    if not isinstance(body.get("anthropic_version"), str) or "messages" not in body:
        raise Rejected(Rule.UNSUPPORTED_BODY)
    if "prompt" in body:
        raise Rejected(Rule.UNSUPPORTED_BODY, "prompt beside messages")


def _continues_thread(thread: Any) -> bool:
    """Whether ``thread`` continues state the server holds (SPEC section 2).

    ``{"type": "create"}`` (or no thread) starts from what the request says;
    ``{"type": "continue", "previous_message_id": ...}`` and any other type
    may carry server-held settings over, so the record does not claim them.

    Raises:
        Rejected: ``malformed_setting`` when ``thread`` is not an object.
    """
    if thread is None:
        return False
    if not isinstance(thread, dict):
        raise Rejected(Rule.MALFORMED_SETTING, "thread")
    return thread.get("type") != "create"


def _unstated_settings(body: Json) -> tuple[str, ...]:
    """Which of instructions (``system``) and ``tools`` a thread continuation leaves
    to the server: ``"instructions"`` and/or ``"tools"``, in that order.

    A ``role: system`` message in a continuation's messages adds to the
    thread's ``system``, which the server keeps; it does not state it.
    """
    unstated = []
    if body.get("system") is None:
        unstated.append("instructions")
    if body.get("tools") is None:
        unstated.append("tools")
    return tuple(unstated)


def _tools(tools: Any, mcp_servers: Any) -> tuple[tuple[str, ...], tuple[HostedTool, ...]]:
    """Split ``tools`` and ``mcp_servers`` into client tool names and hosted tools.

    Absent (or ``null``) tools mean none were advertised: an empty tuple, since
    the whole request was seen (a thread continuation overrides it with None).
    """
    names: list[str] = []
    hosted: list[HostedTool] = []
    if tools is not None and not isinstance(tools, list):
        raise Rejected(Rule.MALFORMED_TOOLS, "tools")
    for i, tool in enumerate(tools or ()):
        if not isinstance(tool, dict):
            raise Rejected(Rule.MALFORMED_TOOLS, f"tools[{i}]")
        kind = tool.get("type")
        name = tool.get("name")
        if kind is None or kind == "custom":
            if not isinstance(name, str) or not name:
                raise Rejected(Rule.TOOL_WITHOUT_NAME, f"tools[{i}]")
            names.append(bounded(name, f"tools[{i}]"))
        elif isinstance(kind, str):
            hosted.append(
                HostedTool(
                    bounded(kind, f"tools[{i}].type"),
                    optional_name(name, f"tools[{i}].name"),
                )
            )
        else:
            raise Rejected(Rule.MALFORMED_TOOLS, f"tools[{i}]")
    if mcp_servers is not None and not isinstance(mcp_servers, list):
        raise Rejected(Rule.MALFORMED_TOOLS, "mcp_servers")
    for i, server in enumerate(mcp_servers or ()):
        if not isinstance(server, dict):
            raise Rejected(Rule.MALFORMED_TOOLS, f"mcp_servers[{i}]")
        hosted.append(HostedTool("mcp", optional_name(server.get("name"), "mcp_servers")))
    return tuple(names), tuple(hosted)


def _read_blocks(
    blocks: list[Any], where: str, images: list[str | None], tool_results: list[ToolResult]
) -> None:
    """Collect images and tool results of a content block list, in order."""
    for j, block in enumerate(blocks):
        here = f"{where}.content[{j}]"
        if not isinstance(block, dict):
            raise Rejected(Rule.MALFORMED_MESSAGES, here)
        kind = block.get("type")
        if kind == "image":
            if not isinstance(block.get("source"), dict):
                raise Rejected(Rule.MALFORMED_IMAGE, here)
            images.append(None)
        elif kind == "tool_result":
            content = block.get("content")
            flag = block.get("is_error", False)  # absent: the API's default, not an error
            tool_results.append(
                ToolResult(
                    optional_name(block.get("tool_use_id"), f"{here}.tool_use_id"),
                    0 if content is None else utf8_len(content),
                    flag if isinstance(flag, bool) else None,
                )
            )
            if isinstance(content, list):
                # Images returned by a tool count like any other (SPEC section 2).
                _read_blocks(content, here, images, tool_results)


#: Anthropic images have no detail setting: the body is left unchanged.
set_image_detail: Final = images_without_detail
