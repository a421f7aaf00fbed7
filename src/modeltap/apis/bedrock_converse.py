"""AWS Bedrock Converse (``POST /model/{modelId}/converse | converse-stream``): audit and observe.

Converse is Bedrock's own wire, one shape for every model family; the model
is the path's (the body has none). Request side (SPEC section 2):
instructions are the ``text`` blocks of ``system`` (and the text of a
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

Response side (SPEC section 4): a JSON body (``output.message.content``,
``stopReason``, ``usage``, ``metrics``) or, for ``converse-stream``, an
``application/vnd.amazon.eventstream`` of events (``messageStart``,
``contentBlockStart``, ``contentBlockDelta``, ``contentBlockStop``,
``messageStop``, ``metadata``) that :mod:`modeltap.apis.bedrock_stream` hands the observer
as :class:`~modeltap.wire.sse.SSEEvent` objects (``event`` the event type, ``data``
its JSON); an exception ending the stream comes as an ``error`` event. The
stream is complete at ``metadata``, its last event. The body names no model
and no id: the request id is the ``x-amzn-RequestId`` header's
(:func:`modeltap.apis.bedrock_stream.with_response_headers`). Converse's ``inputTokens``
leaves out the tokens read from and written to the cache, as Anthropic's does.

Why one module of ~800 lines: it is one wire, read whole, like the other API
modules; every model family puts its thinking, effort and guard content
somewhere of its own, and each place is read here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from modeltap.apis import cloud_paths
from modeltap.apis import message_parts as parts
from modeltap.apis.contract import (
    EndpointMatch,
    RequestContent,
    ResponseContent,
    images_without_detail,
)
from modeltap.apis.fields import (
    SettingKeys,
    bounded,
    input_with_cache,
    instructions_digest,
    number,
    objects,
    optional_name,
    optional_str,
    request_model,
    require_same_model,
    setting_by_name,
    str_or_none,
    string_list,
    token_count,
    whole_number,
)
from modeltap.apis.json_body import json_text, utf8_len
from modeltap.apis.stream_observer import (
    ERROR_BODY,
    NOT_AN_OBJECT,
    StreamObserverBase,
    error_type,
)
from modeltap.evidence.records import (
    API_BEDROCK_CONVERSE,
    HostedTool,
    InvocationMetrics,
    Json,
    RequestFacts,
    RequestSettings,
    ResponseFacts,
    ToolCall,
    ToolResult,
    Usage,
)
from modeltap.rules.errors import Rejected, Rule
from modeltap.wire.sse import SSEEvent

NAME: Final = API_BEDROCK_CONVERSE
PROVIDER: Final = "aws.bedrock"
OPENAI_API_TYPE: Final = None
#: ``inputTokens``, ``outputTokens``, ``totalTokens``, on every response.
#: ``cacheReadInputTokens`` / ``cacheWriteInputTokens`` come only when prompt
#: caching is in play, and Converse has no reasoning count: their absence says
#: nothing about completeness.
REPORTED_USAGE: Final = frozenset({"input_tokens", "output_tokens", "total_tokens"})


def match_endpoint(path: str) -> EndpointMatch | None:
    """Match ``/model/{modelId}/converse`` and ``/converse-stream`` (see
    :func:`~modeltap.apis.cloud_paths.bedrock_converse`)."""
    return cloud_paths.bedrock_converse(path, NAME)


#: The keys of ``thinking`` whose values the record keeps; others by name only.
_THINKING_KEYS: SettingKeys = {"type": str, "budget_tokens": int, "display": str}

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

#: The part of a Prompt management ARN that says the model id is a stored prompt.
_PROMPT_ARN = ":prompt/"


# --------------------------------------------------------------------------
# Request side


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


# --------------------------------------------------------------------------
# Response side


def _usage(reported: Any) -> Usage:
    """Converse's ``usage``; each count ``None`` when not reported."""
    if not isinstance(reported, dict):
        return Usage()
    return Usage(
        input_tokens=token_count(reported.get("inputTokens")),
        output_tokens=token_count(reported.get("outputTokens")),
        total_tokens=token_count(reported.get("totalTokens")),
        cache_read_tokens=token_count(reported.get("cacheReadInputTokens")),
        cache_write_tokens=token_count(reported.get("cacheWriteInputTokens")),
    )


def _metrics(reported: Any) -> InvocationMetrics | None:
    """Converse's ``metrics`` (``latencyMs``), or ``None`` when not reported."""
    latency = whole_number(reported.get("latencyMs")) if isinstance(reported, dict) else None
    return None if latency is None else InvocationMetrics(latency_ms=latency)


def _service_tier(body: Json) -> str | None:
    """``serviceTier.type`` (``default``, ``priority``, ``flex``), if reported."""
    tier = body.get("serviceTier")
    return str_or_none(tier.get("type")) if isinstance(tier, dict) else None


def _is_error_body(body: Json) -> bool:
    """An AWS error body: ``{"message": ...}`` (or ``Message``) and no ``output``."""
    return "output" not in body and ("message" in body or "Message" in body)


def observe_json(body: object, facts: RequestFacts | None) -> ResponseFacts:
    """Read what a Converse response (or an error body) says.

    Args:
        body: the parsed response body, whatever it turned out to be.
        facts: the request's facts, if known (unused).

    Returns:
        The observed facts; never raises. An AWS error body gives status
        ``error``; a body of an unexpected shape gives capture errors. The
        response id is the ``x-amzn-RequestId`` header's, added by the glue.
    """
    if not isinstance(body, dict):
        return NOT_AN_OBJECT
    if _is_error_body(body):
        return ERROR_BODY
    errors: list[str] = []
    calls: list[ToolCall] = []
    content = _output_content(body)
    if content is None:
        errors.append("response has no output message content list")
    else:
        for block in content:
            if not isinstance(block, dict):
                errors.append("response has a content block that is not an object")
            elif isinstance(block.get("toolUse"), dict):
                use = block["toolUse"]
                calls.append(
                    ToolCall(
                        str_or_none(use.get("toolUseId")),
                        str_or_none(use.get("name")),
                        json_text(use.get("input")),
                    )
                )
    reason = body.get("stopReason")
    return ResponseFacts(
        usage=_usage(body.get("usage")),
        finish_reasons=(reason,) if isinstance(reason, str) else None,
        tool_calls=tuple(calls),
        evidence_complete=not errors,
        capture_errors=tuple(dict.fromkeys(errors)),
        service_tier=_service_tier(body),
        invocation_metrics=_metrics(body.get("metrics")),
    )


def _output_content(body: Json) -> list[Any] | None:
    """``output.message.content``, or ``None`` when the body has no such list."""
    output = body.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else None


class _StreamedToolUse:
    """A ``toolUse`` block being assembled: id, name, input fragments."""

    __slots__ = ("call_id", "fragments", "name")

    def __init__(self, start: Json) -> None:
        self.call_id = str_or_none(start.get("toolUseId"))
        self.name = str_or_none(start.get("name"))
        self.fragments: list[str] = []

    def tool_call(self) -> ToolCall:
        return ToolCall(self.call_id, self.name, "".join(self.fragments) or None)


class StreamObserver(StreamObserverBase):
    """Observe a ConverseStream response, one event at a time.

    Fed :class:`~modeltap.wire.sse.SSEEvent` objects whose ``event`` is the Bedrock
    event type and ``data`` its JSON payload (:mod:`modeltap.apis.bedrock_stream` decodes
    the event stream into them). Only facts are kept (usage, stop reason, tool
    ids, names and input fragments), never the text the model wrote, unless
    ``capture_content`` asks for the output to be assembled for spans.

    Args:
        facts: the request's facts (unused).
        capture_content: assemble the output (content capture is on).
    """

    def __init__(self, facts: RequestFacts | None = None, *, capture_content: bool = False) -> None:
        super().__init__()
        self._usage = Usage()
        self._metrics: InvocationMetrics | None = None
        self._stop_reason: str | None = None
        self._stopped = False
        self._tools: dict[int, _StreamedToolUse] = {}
        self._status: str | None = None
        self._service_tier: str | None = None
        self._output = parts.OutputAssembler() if capture_content else None

    def feed(self, event: SSEEvent) -> bool:
        """Take one event.

        Args:
            event: the event (``event`` the Bedrock event type).

        Returns:
            True when it carried model output (text, reasoning text, a tool
            call's start or input). Never raises: a bad event becomes a
            capture error.
        """
        data = self._json_object(event.data, "stream event")
        if data is None:
            return False
        kind = event.event
        if kind == "contentBlockStart":
            return self._start_block(data)
        if kind == "contentBlockDelta":
            return self._delta(data)
        if kind == "messageStop":
            reason = data.get("stopReason")
            self._stop_reason = reason if isinstance(reason, str) else self._stop_reason
            self._stopped = True
        elif kind == "metadata":
            self._usage = _usage(data.get("usage"))
            self._metrics = _metrics(data.get("metrics"))
            self._service_tier = _service_tier(data) or self._service_tier
            self._done = True
        elif kind == "error":
            self._status = "error"
            self._note(f"upstream sent an error event: {error_type(data.get('error'))}")
        return False

    def _start_block(self, data: Json) -> bool:
        start = data.get("start")
        index = data.get("contentBlockIndex")
        use = start.get("toolUse") if isinstance(start, dict) else None
        if not isinstance(use, dict):
            return False
        if not isinstance(index, int):
            self._note("stream has a toolUse block without a contentBlockIndex")
            return True
        self._tools[index] = _StreamedToolUse(use)
        if self._output is not None:
            self._output.add_part(0, index, parts.tool_call(None, None, None))
        return True

    def _delta(self, data: Json) -> bool:
        delta = data.get("delta")
        index = data.get("contentBlockIndex")
        if not isinstance(delta, dict):
            self._note("stream has a contentBlockDelta without a delta object")
            return False
        if isinstance(delta.get("text"), str):
            self._capture(index, "text", delta["text"])
            return True
        reasoning = delta.get("reasoningContent")
        if isinstance(reasoning, dict):
            if isinstance(reasoning.get("text"), str):
                self._capture(index, "reasoning", reasoning["text"])
                return True
            return False  # a signature or redacted content: no output of its own
        use = delta.get("toolUse")
        if isinstance(use, dict):
            tool = self._tools.get(index) if isinstance(index, int) else None
            fragment = use.get("input")
            if tool is None or not isinstance(fragment, str):
                self._note("stream has a toolUse delta that matches no toolUse block")
            else:
                tool.fragments.append(fragment)
            return True
        return False

    def _capture(self, index: Any, kind: str, piece: str) -> None:
        if self._output is not None and isinstance(index, int):
            self._output.add_text(0, index, kind, piece)

    def _missing(self) -> Iterator[str]:
        if not self._done:
            yield f"stream ended before {'metadata' if self._stopped else 'messageStop'}"

    def _facts(self) -> ResponseFacts:
        calls = tuple(t.tool_call() for _, t in sorted(self._tools.items()))
        reason = parts.finish_reason(self._stop_reason, FINISH_REASONS) if self._done else "error"
        return ResponseFacts(
            usage=self._usage,
            finish_reasons=(self._stop_reason,) if self._stop_reason is not None else None,
            tool_calls=calls,
            status=self._status,
            evidence_complete=not self._errors,
            capture_errors=tuple(self._errors),
            service_tier=self._service_tier,
            invocation_metrics=self._metrics,
            output_messages=parts.assembled(
                self._output, zip(sorted(self._tools), calls, strict=True), reason
            ),
        )


# --------------------------------------------------------------------------
# What telemetry reads (spans only; see modeltap.apis.contract)


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
    content = _output_content(body)
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
