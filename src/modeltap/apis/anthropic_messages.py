"""Anthropic Messages (``POST .../messages``): audit and observe.

The same wire runs on the clouds without a body ``model``: Bedrock's
InvokeModel and InvokeModelWithResponseStream (``/model/{modelId}/invoke``,
``/invoke-with-response-stream``) and Vertex's ``:rawPredict`` and
``:streamRawPredict``; the path names the model and, for the stream forms,
the stream. Bedrock's streams arrive as binary event streams whose chunks
are these same events (:mod:`modeltap.apis.bedrock_stream`); its last ``message_stop``
carries Bedrock's invocation metrics, observed here.

Request side (SPEC section 2): client tools are those with no ``type`` or
``type: "custom"``, named by ``name``. Every tool with another ``type`` is a
hosted tool, ``{type, name}``: the server tools (``web_search_…``,
``code_execution_…``) and also the versioned, schema-less tools such as
``bash_…`` and ``text_editor_…``; those run on the client, but their type is
what identifies them on the wire, so they are recorded with it rather than
mixed into the catalogue of tools the client defined. Each ``mcp_servers``
entry is a hosted tool ``{type: "mcp", name}``, after the ``tools``.
Instructions are the top-level ``system`` then any ``role: system`` message.
Images are ``image`` blocks, inside ``tool_result`` content too; Anthropic
images carry no detail, so each is ``None`` and :func:`set_image_detail`
changes nothing. A tool result's size is its ``content`` as sent
(``json_body.utf8_len``): a string as UTF-8, a block list as its compact JSON,
absent as 0.
``thinking`` keeps ``type``, ``budget_tokens`` and ``display``; any other key
by name only (SPEC section 8). A request whose ``thread`` continues state the
server holds (``{"type": "continue", "previous_message_id": …}``, the
message-threads beta of the SDKs' tool runners) and does not state ``system``
or ``tools`` records those as ``None`` and lists them in ``omitted_settings``:
the server applies the thread's own, which this request does not show.

Response side (SPEC section 4): a JSON message (or error body), or an SSE
stream ending in ``message_stop``. Tool calls are the model's ``tool_use``
blocks (the client runs those); server tool use runs at the provider and is
not a call the client answers. ``total_tokens`` stays ``None``: Anthropic does
not report one. ``evidence_complete`` is true exactly when ``capture_errors``
is empty.

One wire read whole, in the sections of :mod:`modeltap.apis.contract`
(request side, response side, what telemetry reads); over 500 lines because
threads, MCP servers, server tools and the clouds' forms (a body without
``model``, Bedrock's metrics) each need their own reading.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from modeltap.apis import cloud_paths
from modeltap.apis import message_parts as parts
from modeltap.apis.contract import (
    FORM_BEDROCK_INVOKE,
    FORM_VERTEX_RAW_PREDICT,
    EndpointMatch,
    RequestContent,
    ResponseContent,
    images_without_detail,
    match_suffix,
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
    output_type,
    reject_messages_and_input,
    request_model,
    setting_by_name,
    str_or_none,
    string_list,
    text_part_texts,
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
    API_ANTHROPIC,
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

NAME: Final = API_ANTHROPIC
ENDPOINT: Final = "/messages"
PROVIDER: Final = "anthropic"
OPENAI_API_TYPE: Final = None
#: ``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``,
#: ``cache_creation_input_tokens``; Messages reports no total (it is the sum of
#: the four) and no reasoning count (thinking is inside ``output_tokens``).
REPORTED_USAGE: Final = frozenset(
    {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"}
)


def match_endpoint(path: str) -> EndpointMatch | None:
    """Match a path ending in :data:`ENDPOINT` (see :meth:`WireApi.match_endpoint`),
    or a cloud's path carrying Messages bodies without ``model``: Bedrock's
    ``/model/{modelId}/invoke`` and ``/invoke-with-response-stream``
    (:func:`~modeltap.apis.cloud_paths.bedrock_invoke`), Vertex's
    ``…/publishers/anthropic/models/{model}:rawPredict`` and
    ``:streamRawPredict`` (:func:`~modeltap.apis.cloud_paths.vertex_anthropic`)."""
    return (
        cloud_paths.bedrock_invoke(path, NAME)
        or cloud_paths.vertex_anthropic(path, NAME)
        or match_suffix(path, ENDPOINT, NAME)
    )


#: The keys of ``thinking`` whose values the record keeps; others by name only.
_THINKING_KEYS: SettingKeys = {"type": str, "budget_tokens": int, "display": str}

#: Delta types that carry model output (signatures and citations do not).
_OUTPUT_DELTAS = frozenset({"text_delta", "thinking_delta", "input_json_delta"})
#: The conventions' part type of each text-like delta.
_DELTA_PARTS = {"text_delta": ("text", "text"), "thinking_delta": ("reasoning", "thinking")}
#: Stop reasons as the GenAI conventions name them; others are kept as sent.
FINISH_REASONS: Final = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_call",
    "refusal": "content_filter",
}


# --------------------------------------------------------------------------
# Request side


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
            tool_results.append(
                ToolResult(
                    optional_name(block.get("tool_use_id"), f"{here}.tool_use_id"),
                    0 if content is None else utf8_len(content),
                )
            )
            if isinstance(content, list):
                # Images returned by a tool count like any other (SPEC section 2).
                _read_blocks(content, here, images, tool_results)


#: Anthropic images have no detail setting: the body is left unchanged.
set_image_detail: Final = images_without_detail


# --------------------------------------------------------------------------
# Response side


def _merge_usage(usage: Usage, reported: Json) -> Usage:
    """Overlay the counts ``reported`` carries on ``usage``; a later count wins."""

    def pick(key: str, old: int | None) -> int | None:
        new = token_count(reported.get(key))
        return old if new is None else new

    return Usage(
        input_tokens=pick("input_tokens", usage.input_tokens),
        output_tokens=pick("output_tokens", usage.output_tokens),
        cache_read_tokens=pick("cache_read_input_tokens", usage.cache_read_tokens),
        cache_write_tokens=pick("cache_creation_input_tokens", usage.cache_write_tokens),
    )


def observe_json(body: object, facts: RequestFacts | None) -> ResponseFacts:
    """Read what a Message (or an error body) says.

    Args:
        body: the parsed response body, whatever it turned out to be.
        facts: the request's facts, if known (unused: a Message needs none).

    Returns:
        The observed facts; never raises. An error body (``{"type": "error"}``)
        gives status ``error``; a Message without its ``content`` list, or
        with a block that is no object, gives capture errors.
    """
    if not isinstance(body, dict):
        return NOT_AN_OBJECT
    if body.get("type") == "error":
        return ERROR_BODY
    errors: list[str] = []
    # A response without usage was still seen whole: its counts stay unknown (None),
    # which the report's usage coverage states; the evidence is not incomplete.
    usage = body.get("usage")
    content = body.get("content")
    calls: list[ToolCall] = []
    if not isinstance(content, list):
        errors.append("response has no content list")
    else:
        for block in content:
            if not isinstance(block, dict):
                errors.append("response has a content block that is not an object")
            elif block.get("type") == "tool_use":
                calls.append(
                    ToolCall(
                        str_or_none(block.get("id")),
                        str_or_none(block.get("name")),
                        json_text(block.get("input")),
                    )
                )
    reason = body.get("stop_reason")
    return ResponseFacts(
        response_id=str_or_none(body.get("id")),
        model=str_or_none(body.get("model")),
        usage=_merge_usage(Usage(), usage) if isinstance(usage, dict) else Usage(),
        finish_reasons=(reason,) if isinstance(reason, str) else None,
        tool_calls=tuple(calls),
        evidence_complete=not errors,
        capture_errors=tuple(dict.fromkeys(errors)),
        service_tier=_service_tier(usage),
    )


#: Where Bedrock adds its invocation metrics to a streamed ``message_stop``.
BEDROCK_METRICS: Final = "amazon-bedrock-invocationMetrics"


def _bedrock_metrics(metrics: Any) -> InvocationMetrics | None:
    """Bedrock's ``amazon-bedrock-invocationMetrics``, or ``None`` when absent."""
    if not isinstance(metrics, dict):
        return None
    return InvocationMetrics(
        input_tokens=whole_number(metrics.get("inputTokenCount")),
        output_tokens=whole_number(metrics.get("outputTokenCount")),
        latency_ms=whole_number(metrics.get("invocationLatency")),
        first_byte_latency_ms=whole_number(metrics.get("firstByteLatency")),
    )


def _service_tier(usage: Any) -> str | None:
    """``usage.service_tier`` (``standard``, ``priority``, ``batch``), if reported."""
    return str_or_none(usage.get("service_tier")) if isinstance(usage, dict) else None


class _StreamedToolUse:
    """A ``tool_use`` block being assembled: id, name, start input, JSON fragments."""

    __slots__ = ("call_id", "fragments", "name", "start_input")

    def __init__(self, block: Json) -> None:
        self.call_id = str_or_none(block.get("id"))
        self.name = str_or_none(block.get("name"))
        self.start_input: Any = block.get("input")
        self.fragments: list[str] = []

    def tool_call(self) -> ToolCall:
        # The input arrives as JSON fragments; a tool without arguments may send
        # none (or only empty ones), and then the start block's input is it.
        arguments = "".join(self.fragments)
        if not arguments and self.start_input is not None:
            return ToolCall(self.call_id, self.name, json_text(self.start_input))
        return ToolCall(self.call_id, self.name, arguments or None)


class StreamObserver(StreamObserverBase):
    """Observe a streamed Messages response, one SSE event at a time.

    Only facts are kept (ids, usage, stop reason, tool names and input
    fragments), never the text the model wrote, unless ``capture_content``
    asks for the output to be assembled for spans (bounded,
    :class:`~modeltap.apis.message_parts.OutputAssembler`).

    Args:
        facts: the request's facts (unused: every stream reports usage).
        capture_content: assemble the output (content capture is on).
    """

    def __init__(self, facts: RequestFacts | None = None, *, capture_content: bool = False) -> None:
        super().__init__()
        self._response_id: str | None = None
        self._model: str | None = None
        self._usage = Usage()
        self._stop_reason: str | None = None
        self._tools: dict[int, _StreamedToolUse] = {}
        self._status: str | None = None
        self._service_tier: str | None = None
        self._metrics: InvocationMetrics | None = None
        self._output = parts.OutputAssembler() if capture_content else None

    def feed(self, event: SSEEvent) -> bool:
        """Take one SSE event.

        Args:
            event: the decoded event.

        Returns:
            True when the event carried model output (a text, thinking or
            tool-input delta, or the start of a tool call). Never raises: a
            bad event becomes a capture error.
        """
        data = self._json_object(event.data, "stream event")
        if data is None:
            return False
        # The payload's own type is authoritative; the event: line repeats it.
        kind = data.get("type", event.event)
        if kind == "message_start":
            message = data.get("message")
            if isinstance(message, dict):
                self._response_id = str_or_none(message.get("id"))
                self._model = str_or_none(message.get("model"))
                usage = message.get("usage")
                if isinstance(usage, dict):
                    self._usage = _merge_usage(self._usage, usage)
                    self._service_tier = _service_tier(usage) or self._service_tier
        elif kind == "content_block_start":
            block = data.get("content_block")
            index = data.get("index")
            if self._output is not None and isinstance(block, dict) and isinstance(index, int):
                self._start_block(index, block)
            if isinstance(block, dict) and block.get("type") == "tool_use":
                if isinstance(index, int):
                    self._tools[index] = _StreamedToolUse(block)
                else:
                    self._note("stream has a tool_use block without an index")
                return True
        elif kind == "content_block_delta":
            return self._feed_delta(data)
        elif kind == "message_delta":
            delta = data.get("delta")
            reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            if isinstance(reason, str):
                self._stop_reason = reason
            usage = data.get("usage")
            if isinstance(usage, dict):
                self._usage = _merge_usage(self._usage, usage)
                self._service_tier = _service_tier(usage) or self._service_tier
        elif kind == "message_stop":
            self._done = True
            self._metrics = _bedrock_metrics(data.get(BEDROCK_METRICS))
        elif kind == "error":
            self._status = "error"
            self._note(f"upstream sent an error event: {error_type(data.get('error'))}")
        return False

    def _feed_delta(self, data: Json) -> bool:
        """Record one ``content_block_delta``; True if it carried output."""
        delta = data.get("delta")
        if not isinstance(delta, dict):
            self._note("stream has a content_block_delta without a delta object")
            return False
        kind = delta.get("type")
        index = data.get("index")
        if self._output is not None and kind in _DELTA_PARTS and isinstance(index, int):
            part_type, key = _DELTA_PARTS[kind]
            piece = delta.get(key)
            if isinstance(piece, str):
                self._output.add_text(0, index, part_type, piece)
        if kind == "input_json_delta":
            tool = self._tools.get(data["index"]) if isinstance(data.get("index"), int) else None
            fragment = delta.get("partial_json")
            if tool is None or not isinstance(fragment, str):
                self._note("stream has an input_json_delta that matches no tool_use block")
            else:
                tool.fragments.append(fragment)
        return isinstance(kind, str) and kind in _OUTPUT_DELTAS

    def _missing(self) -> Iterator[str]:
        if not self._done:
            yield "stream ended before message_stop"

    def _facts(self) -> ResponseFacts:
        calls = tuple(t.tool_call() for _, t in sorted(self._tools.items()))
        # A stream cut short finished nothing: its reason is "error".
        reason = parts.finish_reason(self._stop_reason, FINISH_REASONS) if self._done else "error"
        return ResponseFacts(
            response_id=self._response_id,
            model=self._model,
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

    def _start_block(self, index: int, block: Json) -> None:
        """Place a content block's part (content capture only): text and thinking
        fill in from deltas; a tool call or server tool's block is whole here."""
        assert self._output is not None
        kind = str_or_none(block.get("type")) or "unknown"
        if kind in ("text", "thinking"):
            self._output.open_text(0, index, "text" if kind == "text" else "reasoning")
        else:
            # A tool_use block's input is completed at the end (its deltas are
            # assembled for the tool call); it keeps its place from here.
            self._output.add_part(0, index, _block_part(block))


# --------------------------------------------------------------------------
# What telemetry reads (spans only; see modeltap.apis.contract)


def request_content(body: Json) -> RequestContent:
    """The ``messages`` as the conventions' messages, ``system`` as instructions,
    and the ``tools`` (and ``mcp_servers``) offered.

    A user message made only of ``tool_result`` blocks is a ``tool`` message
    of ``tool_call_response`` parts, as the conventions put tool results.
    """
    sent = body.get("messages")
    converted = [_input_message(m) for m in objects(sent)] if isinstance(sent, list) else None
    system = body.get("system")
    return RequestContent(
        input_messages=converted,
        system_instructions=parts.text_of(system, frozenset({"text"}))
        if system is not None
        else None,
        tool_definitions=_tool_definitions(body),
    )


def _input_message(message: Json) -> Json:
    role = str_or_none(message.get("role")) or "user"
    return parts.block_message(role, _block_parts(message.get("content")))


def _block_parts(content: Any) -> list[Json]:
    if isinstance(content, str):
        return [parts.text(content)]
    if not isinstance(content, list):
        return []
    return [_block_part(block) for block in content if isinstance(block, dict)]


def _block_part(block: Json) -> Json:
    """One content block as a part of the conventions."""
    kind = str_or_none(block.get("type")) or "unknown"
    source = block.get("source")
    if kind == "text" and isinstance(block.get("text"), str):
        return parts.text(block["text"])
    if kind == "thinking" and isinstance(block.get("thinking"), str):
        return parts.reasoning(block["thinking"])
    if kind == "tool_use":
        return parts.tool_call(
            str_or_none(block.get("id")), str_or_none(block.get("name")), block.get("input")
        )
    if kind == "tool_result":
        return parts.tool_call_response(str_or_none(block.get("tool_use_id")), block.get("content"))
    if kind in ("image", "document") and isinstance(source, dict):
        return _source_part("image" if kind == "image" else "document", source)
    if kind in ("server_tool_use", "mcp_tool_use"):
        name = str_or_none(block.get("name")) or kind
        return parts.server_tool_call(
            str_or_none(block.get("id")), name, {"type": name, "input": block.get("input")}
        )
    return parts.generic(kind, id=str_or_none(block.get("id")))


def _source_part(modality: str, source: Json) -> Json:
    """An image or document ``source``: inline base64, a URL, or an uploaded file."""
    kind = source.get("type")
    media_type = str_or_none(source.get("media_type"))
    if kind == "base64" and isinstance(source.get("data"), str):
        return parts.blob(modality, source["data"], media_type)
    if kind == "url" and isinstance(source.get("url"), str):
        return parts.uri(modality, source["url"], media_type)
    if kind == "file" and isinstance(source.get("file_id"), str):
        return parts.file(modality, source["file_id"], media_type)
    if kind == "text" and isinstance(source.get("data"), str):
        return parts.text(source["data"])
    return parts.generic(str_or_none(kind) or "unknown")


def _tool_definitions(body: Json) -> list[Json] | None:
    tools, servers = body.get("tools"), body.get("mcp_servers")
    if not isinstance(tools, list) and not isinstance(servers, list):
        return None
    found: list[Json] = []
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        kind = str_or_none(tool.get("type"))
        name = str_or_none(tool.get("name"))
        if kind is None or kind == "custom":
            found.append(
                parts.tool_definition(
                    "function", name or "", tool.get("description"), tool.get("input_schema")
                )
            )
        else:
            found.append(parts.tool_definition(kind, name or kind))
    for server in servers if isinstance(servers, list) else ():
        if isinstance(server, dict):
            found.append(parts.tool_definition("mcp", str_or_none(server.get("name")) or "mcp"))
    return found


def response_content(body: Json) -> ResponseContent | None:
    """The ``content`` blocks of a message as one output message, or ``None``
    for a body without them (an error)."""
    content = body.get("content")
    if not isinstance(content, list):
        return None
    reason = parts.finish_reason(str_or_none(body.get("stop_reason")), FINISH_REASONS)
    return ResponseContent([parts.output_message(_block_parts(content), reason)])


def request_settings(body: Json) -> RequestSettings:
    """The generation settings sent (Anthropic has no seed, penalties or ``n``)."""
    return RequestSettings(
        max_tokens=whole_number(body.get("max_tokens")),
        temperature=number(body.get("temperature")),
        top_p=number(body.get("top_p")),
        top_k=number(body.get("top_k")),
        stop_sequences=string_list(body.get("stop_sequences")),
        output_type=output_type(body.get("output_format")),
        service_tier=str_or_none(body.get("service_tier")),
    )


def usage_totals(usage: Usage) -> Usage:
    """Anthropic's ``input_tokens`` leaves out the tokens read from and written
    to the cache: the total adds ``cache_read_input_tokens`` and
    ``cache_creation_input_tokens`` (a cache count not reported adds nothing).
    Output tokens include thinking already."""
    return input_with_cache(usage)
