"""Bedrock Converse, the request side (SPEC section 2): what a body sends.

Instructions are the ``text`` blocks of ``system`` (and the text of a
``guardContent`` block there: it is sent to the model too; ``cachePoint``
blocks are markers, not text); client tools are
``toolConfig.tools[].toolSpec.name``, and a ``systemTool`` entry is a hosted
tool ``{type: "systemTool", name}``; ``thinking`` is
``additionalModelRequestFields.thinking`` (Anthropic's, passed through) with
the keys Anthropic's ``thinking`` has; the effort is ``outputConfig.effort``,
else the one a model family takes in ``additionalModelRequestFields``
(Anthropic ``output_config.effort``, OpenAI ``reasoning_effort``, Nova
``reasoningConfig.maxReasoningEffort``); images are ``image`` blocks anywhere
in the messages (tool results and ``guardContent`` included), without a
detail; tool results are ``toolResult`` blocks (``toolUseId``, and the size
of their ``content`` as sent). A model id that is a Prompt management ARN
(``arn:aws:bedrock:…:prompt/…``) runs a prompt held by Bedrock, whose
instructions and tools the request may not state: unstated, they are
``None`` and named in ``omitted_settings``, as for any server-held state.
Nothing the model reads is left unread (SPEC section 2, "No way around the
audit"): ``additionalModelRequestFields`` goes into the model's native
request, so its ``tools`` are recorded too and instructions or messages
there are refused (``unsupported_body``); a block, system block or tool is a
union of one member, and one with two is refused; a ``modelId`` in the body
must be the path's (``model_mismatch``).
"""

from __future__ import annotations

from typing import Any, Final

from modeltap.apis.bedrock_converse.content import request_settings
from modeltap.apis.contract import EndpointMatch, images_without_detail
from modeltap.apis.fields import (
    SettingKeys,
    bounded,
    instructions_digest,
    optional_name,
    optional_str,
    request_model,
    require_same_model,
    setting_by_name,
)
from modeltap.apis.json_body import utf8_len
from modeltap.evidence.records import HostedTool, Json, RequestFacts, ToolResult
from modeltap.rules.errors import Rejected, Rule

#: The keys of ``thinking`` whose values the record keeps; others by name only.
_THINKING_KEYS: SettingKeys = {"type": str, "budget_tokens": int, "display": str}


#: The part of a Prompt management ARN that says the model id is a stored prompt.
_PROMPT_ARN = ":prompt/"


def audit_request(body: Json, endpoint: EndpointMatch | None = None) -> RequestFacts:
    """Read the audit facts off a Converse request body.

    Args:
        body: the parsed request body.
        endpoint: what the path said (:func:`match_endpoint`): the model id,
            and whether it is ``converse-stream``.

    Returns:
        The request facts; ``previous_response_id``, ``generate`` and
        ``include_usage`` are always ``None``.

    Raises:
        Rejected: ``missing_model`` (no path naming the model),
            ``malformed_messages``, ``malformed_tools``, ``tool_without_name``,
            ``malformed_image``, ``instructions_not_text``,
            ``malformed_setting``, ``model_mismatch`` (a ``model`` or
            ``modelId`` in the body naming another model than the path) or
            ``value_too_long``.
    """
    model = request_model(body, endpoint)
    # Converse names its model in the path; a ``modelId`` in the body beside it
    # could be read by a gateway instead: it must be the same one.
    require_same_model(optional_str(body.get("modelId"), "modelId"), model)
    stored_prompt = _PROMPT_ARN in model.lower()
    messages = body.get("messages")
    if messages is None and stored_prompt:
        messages = []  # the stored prompt is the conversation
    if not isinstance(messages, list):
        raise Rejected(Rule.MALFORMED_MESSAGES, "messages")
    tool_names, hosted_tools = _tools(body.get("toolConfig"))
    extra = _object(body.get("additionalModelRequestFields"), "additionalModelRequestFields")
    # Bedrock merges these fields into the model's native request: tools sent
    # there are advertised too (AWS documents Claude's computer use that way),
    # and instructions or messages there are ones the record would not show.
    hidden = sorted(_NATIVE_CONTENT.intersection(extra))
    if hidden:
        raise Rejected(Rule.UNSUPPORTED_BODY, f"additionalModelRequestFields.{hidden[0]}")
    native_names, native_hosted = _native_tools(extra.get("tools"))
    tool_names, hosted_tools = tool_names + native_names, hosted_tools + native_hosted
    thinking = setting_by_name(extra.get("thinking"), _THINKING_KEYS, "thinking")
    effort = _effort(body, extra)

    omitted: tuple[str, ...] = ()
    if stored_prompt:
        unstated = {"instructions": "system", "tools": "toolConfig"}
        omitted = tuple(name for name, key in unstated.items() if body.get(key) is None)
    instructions = _instruction_texts(body.get("system"))
    images: list[str | None] = []
    tool_results: list[ToolResult] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            raise Rejected(Rule.MALFORMED_MESSAGES, f"messages[{i}]")
        _read_blocks(message["content"], f"messages[{i}]", images, tool_results)

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
        stream=endpoint is not None and endpoint.stream,
        hosted_tools=hosted_tools,
        tool_results=tuple(tool_results),
        previous_response_id=None,
        generate=None,
        omitted_settings=omitted,
        settings=request_settings(body),
    )


#: Fields of the model families' native requests that carry instructions,
#: messages or tools modeltap would not read in ``additionalModelRequestFields``.
_NATIVE_CONTENT: Final = frozenset(
    {
        "system",
        "messages",
        "prompt",
        "input",
        "inputText",
        "instructions",
        "contents",
        "systemInstruction",
        "system_instruction",
        "toolConfig",
        "tool_config",
        "functions",
        "mcp_servers",
        "documents",
        "chat_history",
        "preamble",
        "message",
    }
)


def _native_tools(tools: Any) -> tuple[tuple[str, ...], tuple[HostedTool, ...]]:
    """The tools of ``additionalModelRequestFields.tools``, in a model's native shape.

    Anthropic's (``{name, input_schema}`` client tools, ``{type, name}``
    server tools such as ``computer_20250124``) and OpenAI's
    (``{type: "function", function: {name}}``): client tools by name, the
    others as hosted ``{type, name}``.

    Raises:
        Rejected: ``malformed_tools`` for a list or entry of another shape,
            ``tool_without_name`` for a client tool without a name.
    """
    if tools is None:
        return (), ()
    if not isinstance(tools, list):
        raise Rejected(Rule.MALFORMED_TOOLS, "additionalModelRequestFields.tools")
    names: list[str] = []
    hosted: list[HostedTool] = []
    for i, tool in enumerate(tools):
        where = f"additionalModelRequestFields.tools[{i}]"
        if not isinstance(tool, dict):
            raise Rejected(Rule.MALFORMED_TOOLS, where)
        kind = tool.get("type")
        if kind is not None and not isinstance(kind, str):
            raise Rejected(Rule.MALFORMED_TOOLS, where)
        spec = tool.get("function") if kind == "function" else tool
        if kind in (None, "custom", "function"):
            name = spec.get("name") if isinstance(spec, dict) else None
            if not isinstance(name, str) or not name:
                raise Rejected(Rule.TOOL_WITHOUT_NAME, where)
            names.append(bounded(name, where))
        else:
            assert kind is not None
            hosted.append(
                HostedTool(bounded(kind, f"{where}.type"), optional_name(tool.get("name"), where))
            )
    return tuple(names), tuple(hosted)


def _one_member(block: Json, rule: Rule, where: str) -> None:
    """Refuse a union (a content block, a system block, a tool) with more than one member.

    Converse's blocks are unions: one member each. A block with two (text and
    guard content, a tool spec and a system tool) is read differently by
    different parsers, and the record could show the one the model never sees.

    Raises:
        Rejected: ``rule`` naming ``where``.
    """
    if len(block) != 1:
        raise Rejected(rule, where)


def _object(value: Any, where: str) -> Json:
    """An optional object setting: ``{}`` when absent.

    Raises:
        Rejected: ``malformed_setting`` naming ``where`` when it is not an object.
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Rejected(Rule.MALFORMED_SETTING, where)
    return value


def _effort(body: Json, extra: Json) -> str | None:
    """The reasoning effort sent: ``outputConfig.effort``, else the one a model
    family takes in ``additionalModelRequestFields`` (first found, in that order)."""
    places = (
        (_object(body.get("outputConfig"), "outputConfig"), "effort", "outputConfig.effort"),
        (
            _object(extra.get("output_config"), "output_config"),
            "effort",
            "output_config.effort",
        ),
        (extra, "reasoning_effort", "reasoning_effort"),
        (
            _object(extra.get("reasoningConfig"), "reasoningConfig"),
            "maxReasoningEffort",
            "reasoningConfig.maxReasoningEffort",
        ),
    )
    for holder, key, where in places:
        effort = optional_str(holder.get(key), where)
        if effort is not None:
            return effort
    return None


def _tools(config: Any) -> tuple[tuple[str, ...], tuple[HostedTool, ...]]:
    """Client tool names (``toolSpec``) and hosted tools (``systemTool``), in order.

    No ``toolConfig`` means no tools were advertised: an empty tuple.
    """
    if config is None:
        return (), ()
    if not isinstance(config, dict):
        raise Rejected(Rule.MALFORMED_TOOLS, "toolConfig")
    tools = config.get("tools")
    if tools is None:
        return (), ()
    if not isinstance(tools, list):
        raise Rejected(Rule.MALFORMED_TOOLS, "toolConfig.tools")
    names: list[str] = []
    hosted: list[HostedTool] = []
    for i, tool in enumerate(tools):
        where = f"toolConfig.tools[{i}]"
        if not isinstance(tool, dict):
            raise Rejected(Rule.MALFORMED_TOOLS, where)
        _one_member(tool, Rule.MALFORMED_TOOLS, where)
        if "toolSpec" in tool:
            spec = tool["toolSpec"]
            name = spec.get("name") if isinstance(spec, dict) else None
            if not isinstance(name, str) or not name:
                raise Rejected(Rule.TOOL_WITHOUT_NAME, where)
            names.append(bounded(name, where))
        elif "systemTool" in tool:
            spec = tool["systemTool"]
            if not isinstance(spec, dict):
                raise Rejected(Rule.MALFORMED_TOOLS, where)
            hosted.append(HostedTool("systemTool", optional_name(spec.get("name"), where)))
        elif "cachePoint" not in tool:
            # An entry Bedrock would read as something else: nothing ambiguous is forwarded.
            raise Rejected(Rule.MALFORMED_TOOLS, where)
    return tuple(names), tuple(hosted)


def _instruction_texts(system: Any) -> list[str]:
    """The texts of ``system``, in order: ``text`` blocks and ``guardContent`` text.

    Raises:
        Rejected: ``instructions_not_text`` for any other block (an image to
            a guardrail, an unknown block) or a ``system`` that is no list.
    """
    if system is None:
        return []
    if not isinstance(system, list):
        raise Rejected(Rule.INSTRUCTIONS_NOT_TEXT, "system")
    texts: list[str] = []
    for i, block in enumerate(system):
        where = f"system[{i}]"
        if not isinstance(block, dict):
            raise Rejected(Rule.INSTRUCTIONS_NOT_TEXT, where)
        _one_member(block, Rule.INSTRUCTIONS_NOT_TEXT, where)
        if "text" in block:
            text = block["text"]
        elif "guardContent" in block:
            guarded = block["guardContent"]
            if isinstance(guarded, dict):
                _one_member(guarded, Rule.INSTRUCTIONS_NOT_TEXT, f"{where}.guardContent")
            inner = guarded.get("text") if isinstance(guarded, dict) else None
            text = inner.get("text") if isinstance(inner, dict) else None
        elif "cachePoint" in block:
            continue
        else:
            text = None
        if not isinstance(text, str):
            raise Rejected(Rule.INSTRUCTIONS_NOT_TEXT, where)
        texts.append(text)
    return texts


def _result_failed(status: object) -> bool | None:
    """A ``toolResult``'s ``status`` as an error flag: ``"error"`` is one,
    ``"success"`` or no status (the API's default) is not; anything else is
    unknown."""
    if status is None or status == "success":
        return False
    if status == "error":
        return True
    return None


def _read_blocks(
    blocks: list[Any], where: str, images: list[str | None], tool_results: list[ToolResult]
) -> None:
    """Collect the images and tool results of a content block list, in order."""
    for j, block in enumerate(blocks):
        here = f"{where}.content[{j}]"
        if not isinstance(block, dict):
            raise Rejected(Rule.MALFORMED_MESSAGES, here)
        _one_member(block, Rule.MALFORMED_MESSAGES, here)
        if "image" in block:
            _image(block["image"], here)
            images.append(None)
        elif "toolResult" in block:
            result = block["toolResult"]
            if not isinstance(result, dict):
                raise Rejected(Rule.MALFORMED_MESSAGES, here)
            content = result.get("content")
            tool_results.append(
                ToolResult(
                    optional_name(result.get("toolUseId"), f"{here}.toolUseId"),
                    0 if content is None else utf8_len(content),
                    _result_failed(result.get("status")),
                )
            )
            if content is not None:
                if not isinstance(content, list):
                    raise Rejected(Rule.MALFORMED_MESSAGES, f"{here}.content")
                # Images a tool returned count like any other (SPEC section 2).
                _read_blocks(content, here, images, tool_results)
        elif "guardContent" in block:
            guarded = block["guardContent"]
            if isinstance(guarded, dict):
                _one_member(guarded, Rule.MALFORMED_MESSAGES, f"{here}.guardContent")
            if isinstance(guarded, dict) and "image" in guarded:
                _image(guarded["image"], here)
                images.append(None)


def _image(image: Any, where: str) -> None:
    """Check an ``image`` block: ``{format, source: {bytes | s3Location}}``.

    Raises:
        Rejected: ``malformed_image``.
    """
    if not isinstance(image, dict) or not isinstance(image.get("source"), dict):
        raise Rejected(Rule.MALFORMED_IMAGE, where)


#: Converse images have no detail setting: the body is left unchanged.
set_image_detail: Final = images_without_detail
