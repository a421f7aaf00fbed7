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
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from modeltap.apis.contract import (
    EndpointMatch,
    RequestContent,
    RequestSettings,
    ResponseContent,
    match_suffix,
)
from modeltap.apis.fields import (
    bounded,
    instructions_digest,
    number,
    optional_name,
    optional_str,
    output_type,
    reject_messages_and_input,
    require_model,
    str_or_none,
    string_list,
    token_count,
    whole_number,
)
from modeltap.apis.json_body import utf8_len
from modeltap.apis.stream_observer import StreamObserverBase, error_type
from modeltap.errors import Rejected
from modeltap.records import (
    API_CHAT,
    HostedTool,
    Json,
    RequestFacts,
    ResponseFacts,
    ToolCall,
    ToolResult,
    Usage,
)
from modeltap.sse import SSEEvent

NAME: Final = API_CHAT
ENDPOINT: Final = "/chat/completions"
PROVIDER: Final = "openai"
OPENAI_API_TYPE: Final = "chat_completions"


def match_endpoint(path: str) -> EndpointMatch | None:
    """Match a path ending in :data:`ENDPOINT` (see :meth:`WireApi.match_endpoint`)."""
    return match_suffix(path, ENDPOINT, NAME)


_INSTRUCTION_ROLES = frozenset({"system", "developer"})
#: Output fields of a streamed ``delta``; reasoning arrives as ``reasoning_content``
#: (DeepSeek, vLLM) or ``reasoning`` (OpenRouter) on compatible servers.
_OUTPUT_DELTA_KEYS = ("content", "refusal", "reasoning_content", "reasoning")


# --------------------------------------------------------------------------
# Request side


def audit_request(body: Json) -> RequestFacts:
    """Read the audit facts off a Chat Completions request body.

    Args:
        body: the parsed request body.

    Returns:
        The request facts; ``thinking``, ``previous_response_id`` and
        ``generate`` are always ``None`` (chat has none of them).

    Raises:
        Rejected: ``missing_model``, ``messages_and_input``,
            ``malformed_messages``, ``malformed_tools``, ``tool_without_name``,
            ``malformed_image``, ``instructions_not_text`` or
            ``malformed_setting``.
    """
    model = require_model(body)
    reject_messages_and_input(body)
    messages = _messages(body)
    tool_names, hosted_tools = _tools(body.get("tools"))
    reasoning_effort = optional_str(body.get("reasoning_effort"), "reasoning_effort")

    instructions: list[str] = []
    images: list[str | None] = []
    tool_results: list[ToolResult] = []
    for i, message in enumerate(messages):
        role = message.get("role")
        if not isinstance(role, str):
            raise Rejected("malformed_messages", f"messages[{i}].role")
        content = message.get("content")
        if role in _INSTRUCTION_ROLES:
            instructions.extend(_instruction_texts(content, f"messages[{i}]"))
        elif role == "tool":
            tool_results.append(
                ToolResult(
                    optional_name(message.get("tool_call_id"), f"messages[{i}].tool_call_id"),
                    0 if content is None else utf8_len(content),
                )
            )
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
        stream=body.get("stream") is True,
        hosted_tools=hosted_tools,
        tool_results=tuple(tool_results),
        previous_response_id=None,
        generate=None,
        include_usage=isinstance(stream_options, dict)
        and stream_options.get("include_usage") is True,
    )


def _messages(body: Json) -> list[Json]:
    """Return ``messages``, which must be a list of objects."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise Rejected("malformed_messages", "messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise Rejected("malformed_messages", f"messages[{i}]")
    return messages


def _tools(tools: Any) -> tuple[tuple[str, ...], tuple[HostedTool, ...]]:
    """Split ``tools`` into client-run tool names and hosted tools, in order.

    Absent (or ``null``) tools mean none were advertised: an empty tuple, since
    the whole request was seen.
    """
    if tools is None:
        return (), ()
    if not isinstance(tools, list):
        raise Rejected("malformed_tools", "tools")
    names: list[str] = []
    hosted: list[HostedTool] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise Rejected("malformed_tools", f"tools[{i}]")
        kind = tool["type"]
        if kind in ("function", "custom"):
            spec = tool.get(kind)
            name = spec.get("name") if isinstance(spec, dict) else None
            if not isinstance(name, str) or not name:
                raise Rejected("tool_without_name", f"tools[{i}]")
            names.append(bounded(name, f"tools[{i}]"))
        else:
            hosted.append(
                HostedTool(
                    bounded(kind, f"tools[{i}].type"),
                    optional_name(tool.get("name"), f"tools[{i}].name"),
                )
            )
    return tuple(names), tuple(hosted)


def _instruction_texts(content: Any, where: str) -> list[str]:
    """Return a system/developer message's texts: a string, or each text part
    (no parts: one empty text, as it joins)."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise Rejected("instructions_not_text", where)
            text = part.get("text")
            if not isinstance(text, str):
                raise Rejected("instructions_not_text", where)
            texts.append(text)
        return texts or [""]
    raise Rejected("instructions_not_text", where)


def _image_details(content: list[Any], index: int) -> list[str | None]:
    """Return the detail of each ``image_url`` part of one message's content."""
    details: list[str | None] = []
    for j, part in enumerate(content):
        where = f"messages[{index}].content[{j}]"
        if not isinstance(part, dict):
            raise Rejected("malformed_messages", where)
        if part.get("type") != "image_url":
            continue
        image = part.get("image_url")
        if not isinstance(image, dict) or not isinstance(image.get("url"), str):
            raise Rejected("malformed_image", where)
        detail = image.get("detail")
        if detail is not None and not isinstance(detail, str):
            raise Rejected("malformed_image", where)
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
    """Read what a non-streamed response (or an error body) says.

    Args:
        body: the parsed response body, whatever it turned out to be.
        facts: the request's facts, if known (unused: chat JSON needs none).

    Returns:
        The observed facts; never raises. An error body gives status
        ``error``; a body of an unexpected shape gives capture errors.
    """
    if not isinstance(body, dict):
        return ResponseFacts(capture_errors=("response body is not a JSON object",))
    if body.get("error") is not None:
        return ResponseFacts(status="error", evidence_complete=True)
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
    argument fragments), never the text the model wrote.

    Args:
        facts: the request's facts; ``include_usage`` says whether a usage
            chunk must arrive before ``[DONE]``.
    """

    def __init__(self, facts: RequestFacts | None = None) -> None:
        super().__init__()
        self._include_usage = facts is not None and facts.include_usage is True
        self._response_id: str | None = None
        self._model: str | None = None
        self._usage: Usage | None = None
        self._reasons: dict[int, str] = {}
        self._calls: dict[tuple[int, int], _StreamedCall] = {}
        self._status: str | None = None

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
        try:
            chunk = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            self._note("stream chunk is not valid JSON")
            return False
        if not isinstance(chunk, dict):
            self._note("stream chunk is not a JSON object")
            return False
        if chunk.get("error") is not None:
            self._status = "error"
            self._note(f"upstream sent an error chunk: {error_type(chunk['error'])}")
            return False
        if self._response_id is None:
            self._response_id = str_or_none(chunk.get("id"))
        if self._model is None:
            self._model = str_or_none(chunk.get("model"))
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

    def finish(self, error: str | None = None) -> ResponseFacts:
        """Return what the stream showed.

        Args:
            error: why the stream ended early (reset, client gone), if it did.

        Returns:
            The observed facts; usage counts stay ``None`` when no usage chunk
            came.
        """
        if not self._done:
            self._note("stream ended before data: [DONE]")
        if self._include_usage and self._usage is None:
            self._note("stream_options.include_usage was sent but no usage chunk arrived")
        if error:
            # The caller's reason is always kept, even past the cap.
            self._note(error, always=True)
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
        )


# --------------------------------------------------------------------------
# What telemetry reads (spans only; see modeltap.apis.contract)


def request_content(body: Json) -> RequestContent:
    """The ``messages`` as sent; system and developer messages stay among them.

    Chat has no instructions outside the conversation, so
    ``system_instructions`` is always ``None``.
    """
    return RequestContent(input_messages=body.get("messages"))


def response_content(body: Json) -> ResponseContent | None:
    """The ``choices`` of a completion, or ``None`` for a body without them (an error)."""
    return ResponseContent(body["choices"]) if "choices" in body else None


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
