"""OpenAI Chat Completions (``POST .../chat/completions``): audit and observe.

Request side (SPEC section 2): client-run tools are ``function`` tools (named by
``function.name``) and ``custom`` tools (named by ``custom.name``); any other
tool type (gateways such as OpenRouter add provider-run ones) is a hosted tool.
Images are ``image_url`` content parts of any message. A tool result's size is
its ``content`` as sent (``json_body.utf8_len``): a string as UTF-8, a list of parts
as its compact JSON, so every API measures results the same way.

Response side (SPEC section 4): a JSON body or a stream of ``data: {chunk}``
events ending in ``data: [DONE]``. Evidence is complete when the whole response
was seen and nothing it should carry is missing, so ``evidence_complete`` is
true exactly when ``capture_errors`` is empty.

Why one module of ~650 lines: it is one wire, read whole (request side,
response side, the stream's chunks, what telemetry reads), like the other
API modules.
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
    match_suffix,
)
from modeltap.apis.fields import (
    bounded,
    instructions_digest,
    number,
    objects,
    optional_name,
    optional_str,
    output_type,
    reject_messages_and_input,
    request_model,
    str_or_none,
    string_list,
    text_part_texts,
    token_count,
    whole_number,
)
from modeltap.apis.json_body import utf8_len
from modeltap.apis.stream_observer import (
    ERROR_BODY,
    NOT_AN_OBJECT,
    StreamObserverBase,
    error_type,
)
from modeltap.evidence.records import (
    API_CHAT,
    HostedTool,
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

NAME: Final = API_CHAT
ENDPOINT: Final = "/chat/completions"
PROVIDER: Final = "openai"
OPENAI_API_TYPE: Final = "chat_completions"
#: ``prompt_tokens``, ``completion_tokens``, ``total_tokens``,
#: ``prompt_tokens_details.cached_tokens``, ``completion_tokens_details.reasoning_tokens``;
#: chat has no field for cache writes.
REPORTED_USAGE: Final = frozenset(
    {"input_tokens", "output_tokens", "total_tokens", "cache_read_tokens", "reasoning_tokens"}
)


def match_endpoint(path: str) -> EndpointMatch | None:
    """Match a path ending in :data:`ENDPOINT` (see :meth:`WireApi.match_endpoint`).

    Azure OpenAI's deployment form (``/openai/deployments/{deployment}/chat/completions``)
    names the model in the path: the deployment is what runs, whatever
    ``model`` the body sends (:func:`~modeltap.apis.cloud_paths.azure_deployment_chat`).
    """
    return cloud_paths.azure_deployment_chat(path, NAME) or match_suffix(path, ENDPOINT, NAME)


_INSTRUCTION_ROLES = frozenset({"system", "developer"})
#: Output fields of a streamed ``delta``; reasoning arrives as ``reasoning_content``
#: (DeepSeek, vLLM) or ``reasoning`` (OpenRouter) on compatible servers.
_OUTPUT_DELTA_KEYS = ("content", "refusal", "reasoning_content", "reasoning")
#: The conventions' part type of each output delta key (a refusal is text the
#: model wrote in place of an answer).
_DELTA_PARTS = {
    "content": "text",
    "refusal": "text",
    "reasoning_content": "reasoning",
    "reasoning": "reasoning",
}
#: Chat finish reasons as the GenAI conventions name them; others are kept as sent.
FINISH_REASONS: Final = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_call",
    "function_call": "tool_call",
    "content_filter": "content_filter",
}


# --------------------------------------------------------------------------
# Request side


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


# --------------------------------------------------------------------------
# Response side


def _usage(usage: Json) -> Usage:
    """Map a chat ``usage`` object to :class:`Usage` (chat reports no cache writes)."""
    prompt = usage.get("prompt_tokens_details")
    completion = usage.get("completion_tokens_details")
    return Usage(
        input_tokens=token_count(usage.get("prompt_tokens")),
        output_tokens=token_count(usage.get("completion_tokens")),
        total_tokens=token_count(usage.get("total_tokens")),
        cache_read_tokens=token_count(prompt.get("cached_tokens"))
        if isinstance(prompt, dict)
        else None,
        reasoning_tokens=token_count(completion.get("reasoning_tokens"))
        if isinstance(completion, dict)
        else None,
    )


def _tool_call_parts(call: Json) -> tuple[str | None, str | None]:
    """Return a tool call's name and arguments (``custom`` calls send ``input``)."""
    function = call.get("function")
    if isinstance(function, dict):
        return str_or_none(function.get("name")), str_or_none(function.get("arguments"))
    custom = call.get("custom")
    if isinstance(custom, dict):
        return str_or_none(custom.get("name")), str_or_none(custom.get("input"))
    return None, None


def observe_json(body: object, facts: RequestFacts | None) -> ResponseFacts:
    """Read what a chat completion (or an error body) says.

    Args:
        body: the parsed response body, whatever it turned out to be.
        facts: the request's facts, if known (unused: a completion needs none).

    Returns:
        The observed facts; never raises. An error body (``{"error": ...}``)
        gives status ``error``; a completion without its ``choices`` list, or
        a choice without its ``finish_reason``, gives capture errors.
    """
    if not isinstance(body, dict):
        return NOT_AN_OBJECT
    if body.get("error") is not None:
        return ERROR_BODY
    errors: list[str] = []
    # A response without usage was still seen whole: its counts stay unknown (None),
    # which the report's usage coverage states; the evidence is not incomplete.
    usage = body.get("usage")
    choices = body.get("choices")
    reasons: list[str] = []
    calls: list[ToolCall] = []
    if not isinstance(choices, list):
        errors.append("response has no choices list")
    else:
        for choice in choices:
            if not isinstance(choice, dict):
                errors.append("response has a choice that is not an object")
                continue
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                reasons.append(reason)
            else:
                errors.append("response has a choice without finish_reason")
            message = choice.get("message")
            tool_calls = message.get("tool_calls") if isinstance(message, dict) else None
            for call in tool_calls if isinstance(tool_calls, list) else ():
                if isinstance(call, dict):
                    calls.append(ToolCall(str_or_none(call.get("id")), *_tool_call_parts(call)))
                else:
                    errors.append("response has a tool call that is not an object")
    return ResponseFacts(
        response_id=str_or_none(body.get("id")),
        model=str_or_none(body.get("model")),
        usage=_usage(usage) if isinstance(usage, dict) else Usage(),
        finish_reasons=tuple(reasons) if isinstance(choices, list) else None,
        tool_calls=tuple(calls),
        evidence_complete=not errors,
        capture_errors=tuple(dict.fromkeys(errors)),
        service_tier=str_or_none(body.get("service_tier")),
        system_fingerprint=str_or_none(body.get("system_fingerprint")),
    )


class _StreamedCall:
    """A tool call being assembled from deltas: its id, name and argument fragments."""

    __slots__ = ("arguments", "call_id", "name")

    def __init__(self) -> None:
        self.call_id: str | None = None
        self.name: str | None = None
        self.arguments: list[str] | None = None


class StreamObserver(StreamObserverBase):
    """Observe a streamed chat response, one SSE event at a time.

    Only facts are kept (ids, usage, finish reasons, tool-call names and
    argument fragments), never the text the model wrote, unless
    ``capture_content`` asks for the output to be assembled for spans
    (bounded, :class:`~modeltap.apis.message_parts.OutputAssembler`).

    Args:
        facts: the request's facts; ``include_usage`` says whether a usage
            chunk must arrive before ``[DONE]``.
        capture_content: assemble the output (content capture is on).
    """

    def __init__(self, facts: RequestFacts | None = None, *, capture_content: bool = False) -> None:
        super().__init__()
        self._include_usage = facts is not None and facts.include_usage is True
        self._response_id: str | None = None
        self._model: str | None = None
        self._usage: Usage | None = None
        self._reasons: dict[int, str] = {}
        self._calls: dict[tuple[int, int], _StreamedCall] = {}
        self._status: str | None = None
        self._service_tier: str | None = None
        self._fingerprint: str | None = None
        self._output = parts.OutputAssembler() if capture_content else None

    def feed(self, event: SSEEvent) -> bool:
        """Take one SSE event.

        Args:
            event: the decoded event.

        Returns:
            True when the event carried model output (text, refusal, reasoning
            or a tool-call delta). Never raises: a bad event becomes a capture
            error.
        """
        if event.data.strip() == "[DONE]":
            self._done = True
            return False
        if self._done:
            self._note("stream sent data after data: [DONE]")
            return False
        chunk = self._json_object(event.data, "stream chunk")
        if chunk is None:
            return False
        if chunk.get("error") is not None:
            self._status = "error"
            self._note(f"upstream sent an error chunk: {error_type(chunk['error'])}")
            return False
        if self._response_id is None:
            self._response_id = str_or_none(chunk.get("id"))
        if self._model is None:
            self._model = str_or_none(chunk.get("model"))
        self._service_tier = str_or_none(chunk.get("service_tier")) or self._service_tier
        self._fingerprint = str_or_none(chunk.get("system_fingerprint")) or self._fingerprint
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
        choices = chunk.get("choices")
        if choices is not None and not isinstance(choices, list):
            self._note("stream chunk has a choices value that is not a list")
            return False
        output = False
        for position, choice in enumerate(choices or ()):
            if isinstance(choice, dict):
                output = self._feed_choice(choice, position) or output
            else:
                self._note("stream chunk has a choice that is not an object")
        return output

    def _feed_choice(self, choice: Json, position: int) -> bool:
        """Record one choice of a chunk; True if its delta carried output."""
        index = choice.get("index")
        index = index if isinstance(index, int) else position
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            self._reasons[index] = reason
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return False
        output = any(isinstance(delta.get(k), str) and delta[k] for k in _OUTPUT_DELTA_KEYS)
        if self._output is not None:
            for delta_key in _OUTPUT_DELTA_KEYS:
                piece = delta.get(delta_key)
                if isinstance(piece, str):
                    kind = _DELTA_PARTS[delta_key]
                    self._output.add_text(index, kind, kind, piece)
        tool_calls = delta.get("tool_calls")
        for tool_position, call in enumerate(tool_calls if isinstance(tool_calls, list) else ()):
            if not isinstance(call, dict):
                self._note("stream has a tool-call delta that is not an object")
                continue
            tool_index = call.get("index")
            key = (index, tool_index if isinstance(tool_index, int) else tool_position)
            assembled = self._calls.setdefault(key, _StreamedCall())
            call_id = str_or_none(call.get("id"))
            name, fragment = _tool_call_parts(call)
            assembled.call_id = assembled.call_id or call_id
            assembled.name = assembled.name or name
            if fragment is not None:
                if assembled.arguments is None:
                    assembled.arguments = []
                assembled.arguments.append(fragment)
            output = True
        return output

    def _missing(self) -> Iterator[str]:
        if not self._done:
            yield "stream ended before data: [DONE]"
        if self._include_usage and self._usage is None:
            yield "stream_options.include_usage was sent but no usage chunk arrived"

    def _facts(self) -> ResponseFacts:
        # Usage counts stay None when no usage chunk came.
        calls = tuple(
            ToolCall(
                c.call_id,
                c.name,
                "".join(c.arguments) if c.arguments is not None else None,
            )
            for _, c in sorted(self._calls.items())
        )
        return ResponseFacts(
            response_id=self._response_id,
            model=self._model,
            usage=self._usage or Usage(),
            finish_reasons=tuple(r for _, r in sorted(self._reasons.items()))
            if self._reasons
            else None,
            tool_calls=calls,
            status=self._status,
            evidence_complete=not self._errors,
            capture_errors=tuple(self._errors),
            service_tier=self._service_tier,
            system_fingerprint=self._fingerprint,
            output_messages=self._assembled(),
        )

    def _assembled(self) -> list[Json] | None:
        """The output assembled for spans (content capture only)."""
        if self._output is None:
            return None
        for (index, position), call in sorted(self._calls.items()):
            arguments = "".join(call.arguments) if call.arguments is not None else None
            self._output.add_part(
                index, ("tool", position), parts.tool_call(call.call_id, call.name, arguments)
            )
        if not self._done:
            return self._output.messages(lambda _: "error")  # cut short: nothing finished
        return self._output.messages(
            lambda index: parts.finish_reason(self._reasons.get(index), FINISH_REASONS)
        )


# --------------------------------------------------------------------------
# What telemetry reads (spans only; see modeltap.apis.contract)


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
            name, arguments = _tool_call_parts(call)
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
            name, arguments = _tool_call_parts(call)
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
