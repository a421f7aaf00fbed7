"""OpenAI Responses API: ``POST .../responses`` bodies and their answers.

Pure: a request body gives :class:`~modeltap.evidence.records.RequestFacts` (or a
:class:`~modeltap.rules.errors.Rejected`), a Response object or a stream of Responses
events gives :class:`~modeltap.evidence.records.ResponseFacts`. The WebSocket mode
(:mod:`modeltap.apis.responses_ws`) sends the same bodies and events, so it reuses all of this.

Reading rules (SPEC section 2) that need a decision beyond the SPEC's table:

- ``input`` is a string (one user message) or a list of items. A *message* is
  an item with ``type: "message"``, or with a ``role`` and no ``type`` (the
  Agents SDK sends those); other items (``additional_tools``, which also has a
  ``role``, function calls, reasoning, item references) are not messages.
- Top-level ``instructions`` is a string, or a list of messages (the shape a
  Response object echoes back); every message of that list is instruction
  text, whatever its role, because of where it stands.
- ``finish_reasons`` is ``(incomplete_details.reason,)`` for an incomplete
  response (``("max_output_tokens",)``) and ``(status,)`` otherwise
  (``("completed",)``, ``("failed",)``): the Responses API has no per-choice
  finish reason, and the incomplete reason is the one that explains a stop.
- An HTTP error body (``{"error": {...}}``) and a stream's ``error`` event are
  whole answers: status ``"error"``, evidence complete.
- ``POST …/responses/compact`` (:data:`COMPACT_ENDPOINT`) takes a Responses
  body and runs the model over it: it is audited by the same rules, its match
  naming the operation ``compact``. Its answer, a ``response.compaction``
  object, has an id, output items and usage but no ``model`` or ``status``:
  those facts stay ``None``.

Why one module of ~700 lines: it is one wire, read whole. The Responses API
has the most shapes of the three (input items of a dozen types, namespaced
and hosted tools, server-held state, some forty stream events); split into
request and response halves, a change to one item type would touch two files
that must agree. Its sections (request side, response side, what telemetry
reads) follow the order of the contract in :mod:`modeltap.apis.contract`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, Final

import orjson

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
    optional_bool,
    optional_name,
    optional_str,
    output_type,
    reject_messages_and_input,
    request_model,
    str_or_none,
    token_count,
    whole_number,
)
from modeltap.apis.json_body import utf8_len
from modeltap.apis.stream_observer import ERROR_BODY, NOT_AN_OBJECT, StreamObserverBase
from modeltap.evidence.records import (
    API_RESPONSES,
    OPERATION_COMPACT,
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

NAME: Final = API_RESPONSES
ENDPOINT: Final = "/responses"
PROVIDER: Final = "openai"
OPENAI_API_TYPE: Final = "responses"
#: ``input_tokens``, ``output_tokens``, ``total_tokens``,
#: ``input_tokens_details.cached_tokens``, ``output_tokens_details.reasoning_tokens``;
#: the Responses API has no field for cache writes.
REPORTED_USAGE: Final = frozenset(
    {"input_tokens", "output_tokens", "total_tokens", "cache_read_tokens", "reasoning_tokens"}
)


#: The compaction endpoint (``client.responses.compact``, Codex's context
#: compaction): a Responses body (``model``, ``input``, ``instructions``, maybe
#: ``tools`` and ``previous_response_id``), answered with one JSON
#: ``response.compaction`` object; it runs the model, so it is audited.
COMPACT_ENDPOINT: Final = "/responses/compact"


def match_endpoint(path: str) -> EndpointMatch | None:
    """Match a path ending in :data:`ENDPOINT`, or in :data:`COMPACT_ENDPOINT`
    (operation ``compact``); see :meth:`WireApi.match_endpoint`.

    Only the whole last segment ``compact`` after ``responses`` is the
    compaction: ``/responses/{id}`` and ``/responses/{id}/cancel`` name a
    stored response, not a model request, and match nothing.
    """
    if path.lower().endswith(COMPACT_ENDPOINT):
        return EndpointMatch(NAME, operation=OPERATION_COMPACT)
    return match_suffix(path, ENDPOINT, NAME)


_INSTRUCTION_ROLES = frozenset({"system", "developer"})
_CLIENT_TOOL_TYPES = frozenset({"function", "custom"})
_TOOL_OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
_STARTED_EVENTS = frozenset({"response.created", "response.queued", "response.in_progress"})
_ARGUMENT_DELTAS = frozenset(
    {"response.function_call_arguments.delta", "response.custom_tool_call_input.delta"}
)
# Events that end one response; ``error`` ends it without a Response object.
_TERMINAL_EVENTS = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error"}
)
_STREAM_CUT = "stream ended before response.completed"
#: Text deltas of a streamed output and the part each fills (content capture only).
_TEXT_DELTAS = {
    "response.output_text.delta": "text",
    "response.refusal.delta": "text",
    "response.reasoning_text.delta": "reasoning",
    "response.reasoning_summary_text.delta": "reasoning",
}


# --------------------------------------------------------------------------
# Request side


def audit_request(body: Json, endpoint: EndpointMatch | None = None) -> RequestFacts:
    """Read the audit facts off a Responses request body (SPEC section 2).

    A body that continues state the server holds (:func:`continues_server_state`)
    and does not state its instructions or tools (:func:`unstated_settings`)
    is recorded as sent: ``instructions_sha256`` and/or ``tool_names`` are
    None and ``omitted_settings`` names them, over HTTP and WebSocket alike
    (whether a WebSocket accepts it is :mod:`modeltap.apis.responses_ws`'s policy).

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
        if _is_message(item):
            content = item.get("content")
            if str_or_none(item.get("role")) in _INSTRUCTION_ROLES:
                instructions.extend(_instruction_texts(content))
            elif isinstance(content, str | list):
                _check_part_list(content, where)
            else:
                raise Rejected(Rule.MALFORMED_MESSAGES, where)
        elif kind == "additional_tools":
            _read_tools(item.get("tools"), f"{where}.tools", "", tool_names, hosted)
        elif kind in _TOOL_OUTPUT_TYPES:
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
        _is_message(item) and str_or_none(item.get("role")) in _INSTRUCTION_ROLES for item in items
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


def _is_message(item: Json) -> bool:
    """A message item: ``type: "message"``, or a ``role`` without a ``type``."""
    kind = item.get("type")
    return kind == "message" or (kind is None and "role" in item)


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
        if not isinstance(item, dict) or not _is_message(item):
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
        if _is_message(item):
            parts = item.get("content")
        elif str_or_none(item.get("type")) in _TOOL_OUTPUT_TYPES:
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
        if kind in _CLIENT_TOOL_TYPES or kind == "namespace":
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


# --------------------------------------------------------------------------
# Response side


def observe_json(body: object, facts: RequestFacts | None) -> ResponseFacts:
    """Read the response facts off a non-streamed Responses answer. Never raises.

    Args:
        body: the parsed response body: a Response object or an error body.
        facts: the request's facts (unused here: a Response carries its own
            usage; accepted for the interface every API module shares).

    Returns:
        The facts; ``evidence_complete`` is False, with a capture error, when
        the body is neither a Response object nor an error body.
    """
    if not isinstance(body, dict):
        return NOT_AN_OBJECT
    if isinstance(body.get("error"), dict) and "output" not in body:
        return ERROR_BODY
    output = body.get("output")
    if not isinstance(output, list):
        return _from_response(body, (), ("response has no output list",))
    return _from_response(body, _output_tool_calls(output), ())


def _from_response(
    response: Json, tool_calls: tuple[ToolCall, ...], errors: tuple[str, ...]
) -> ResponseFacts:
    """ResponseFacts from a whole Response object's id, model, status and usage."""
    status = str_or_none(response.get("status"))
    return ResponseFacts(
        response_id=str_or_none(response.get("id")),
        model=str_or_none(response.get("model")),
        usage=_usage(response.get("usage")),
        finish_reasons=_finish_reasons(status, response.get("incomplete_details")),
        tool_calls=tool_calls,
        status=status,
        evidence_complete=not errors,
        capture_errors=errors,
        service_tier=str_or_none(response.get("service_tier")),
    )


def _usage(value: Any) -> Usage:
    """Usage as reported; the Responses API reports no cache writes."""
    if not isinstance(value, dict):
        return Usage()
    inputs = value.get("input_tokens_details")
    outputs = value.get("output_tokens_details")
    return Usage(
        input_tokens=token_count(value.get("input_tokens")),
        output_tokens=token_count(value.get("output_tokens")),
        total_tokens=token_count(value.get("total_tokens")),
        cache_read_tokens=(
            token_count(inputs.get("cached_tokens")) if isinstance(inputs, dict) else None
        ),
        reasoning_tokens=(
            token_count(outputs.get("reasoning_tokens")) if isinstance(outputs, dict) else None
        ),
    )


def _finish_reasons(status: str | None, incomplete_details: Any) -> tuple[str, ...] | None:
    """The incomplete reason for an incomplete response, else the status (module doc)."""
    if status == "incomplete" and isinstance(incomplete_details, dict):
        reason = incomplete_details.get("reason")
        if isinstance(reason, str):
            return (reason,)
    return None if status is None else (status,)


def _tool_call(item: Json) -> ToolCall | None:
    """The client tool call an output item asks for, or None for other items."""
    kind = item.get("type")
    if kind == "function_call":
        arguments = item.get("arguments")
    elif kind == "custom_tool_call":
        arguments = item.get("input")
    else:
        return None
    return ToolCall(
        call_id=str_or_none(item.get("call_id")),
        name=str_or_none(item.get("name")),
        arguments=str_or_none(arguments),
        namespace=str_or_none(item.get("namespace")),
    )


def _output_tool_calls(output: list[Any]) -> tuple[ToolCall, ...]:
    calls = (_tool_call(item) for item in output if isinstance(item, dict))
    return tuple(call for call in calls if call is not None)


class _PendingCall:
    """A tool call being streamed: what is known of it so far (no model text)."""

    __slots__ = ("chunks", "done_arguments", "final", "started")

    def __init__(self, item: Json | None) -> None:
        # The `added` item (arguments usually "", sometimes already whole).
        self.started = _tool_call(item) if item is not None else None
        self.chunks: list[str] = []
        self.done_arguments: str | None = None
        self.final: ToolCall | None = None

    def result(self) -> ToolCall:
        """The call: its ``output_item.done`` item, else what the stream assembled.

        Arguments, best first: the ``arguments.done`` / ``input.done`` value,
        the deltas joined, the ``added`` item's own.
        """
        if self.final is not None:
            return self.final
        started = self.started or ToolCall(None, None, None)
        arguments = self.done_arguments
        if arguments is None:
            arguments = "".join(self.chunks) if self.chunks else started.arguments
        return dataclasses.replace(started, arguments=arguments)


class StreamObserver(StreamObserverBase):
    """Observe one streamed Responses answer, event by event (sans-I/O).

    Keeps facts only (ids, usage, tool calls and their arguments), never output
    text. Tool calls come from ``response.output_item.done`` items; a call whose
    done item never came is assembled from its ``added`` item and argument
    deltas. When no tool-call item event was seen at all, the terminal Response
    object's ``output`` is used instead.

    With ``capture_content`` the output is kept for spans: the terminal
    Response object's ``output`` when it comes, else the text deltas and tool
    calls seen (bounded, :class:`~modeltap.apis.message_parts.OutputAssembler`).

    Args:
        facts: the request's facts (unused: Responses streams always carry
            usage in their terminal event; accepted for the shared interface).
        capture_content: keep the output (content capture is on).
    """

    def __init__(self, facts: RequestFacts | None = None, *, capture_content: bool = False) -> None:
        super().__init__()
        self._response_id: str | None = None
        self._model: str | None = None
        self._status: str | None = None
        self._usage = Usage()
        self._finish_reasons: tuple[str, ...] | None = None
        self._calls: dict[object, _PendingCall] = {}
        self._terminal_calls: tuple[ToolCall, ...] = ()
        self._service_tier: str | None = None
        self._output = parts.OutputAssembler() if capture_content else None
        self._terminal_output: list[Json] | None = None

    def feed(self, event: SSEEvent) -> bool:
        """Observe one SSE event.

        Args:
            event: a decoded SSE event whose ``data`` is one JSON event object.

        Returns:
            True when the event carried model output.
        """
        return self.feed_text(event.data)

    def feed_text(self, data: str | bytes) -> bool:
        """Observe one JSON-encoded event (SSE data or a WebSocket message).

        Invalid JSON is noted as a capture error, never raised. Anything after
        the terminal event is ignored.

        Args:
            data: the encoded event.

        Returns:
            True when the event carried model output.
        """
        if self._done:
            return False
        event = self._json_object(data, "a stream event")
        return event is not None and self.feed_json(event)

    def feed_json(self, event: Json) -> bool:
        """Observe one parsed event object (also how WebSocket server events come in).

        Args:
            event: the event, e.g. ``{"type": "response.output_text.delta", ...}``.

        Returns:
            True when the event carried model output: any ``response.*.delta``
            (text, refusal, reasoning, tool-call arguments), or the
            ``output_item.added`` that starts a tool call.
        """
        if self._done:
            return False
        kind = event.get("type")
        if not isinstance(kind, str):
            self._note("a stream event has no type")
            return False
        if kind in _STARTED_EVENTS or kind in _TERMINAL_EVENTS:
            self._read_response_event(kind, event)
        elif kind == "response.output_item.added":
            item = event.get("item")
            if isinstance(item, dict) and _tool_call(item) is not None:
                self._calls[_call_key(event, item)] = _PendingCall(item)
                return True
        elif kind == "response.output_item.done":
            item = event.get("item")
            call = _tool_call(item) if isinstance(item, dict) else None
            if isinstance(item, dict) and call is not None:
                self._pending(event, item).final = call
        elif kind in _ARGUMENT_DELTAS:
            delta = event.get("delta")
            if isinstance(delta, str):
                self._pending(event, None).chunks.append(delta)
        elif kind == "response.function_call_arguments.done":
            self._pending(event, None).done_arguments = str_or_none(event.get("arguments"))
        elif kind == "response.custom_tool_call_input.done":
            self._pending(event, None).done_arguments = str_or_none(event.get("input"))
        elif kind in _TEXT_DELTAS and self._output is not None:
            delta = event.get("delta")
            if isinstance(delta, str):
                key = (_call_key(event, None), event.get("content_index"), _TEXT_DELTAS[kind])
                self._output.add_text(0, key, _TEXT_DELTAS[kind], delta)
        return kind.startswith("response.") and kind.endswith(".delta")

    def finish(self, error: str | None = None) -> ResponseFacts:
        """The facts observed so far, as the response's final record.

        Args:
            error: why the stream ended early, if the caller knows (a reset,
                a client gone); added to ``capture_errors``.

        Returns:
            The facts; ``evidence_complete`` only when a terminal event was
            seen and nothing went wrong.
        """
        errors = list(self._errors)
        if not self._done:
            errors.append(_STREAM_CUT)
        if error:
            errors.append(error)
        calls = tuple(pending.result() for pending in self._calls.values())
        return ResponseFacts(
            response_id=self._response_id,
            model=self._model,
            usage=self._usage,
            finish_reasons=self._finish_reasons,
            tool_calls=calls or self._terminal_calls,
            status=self._status,
            evidence_complete=not errors,
            capture_errors=tuple(errors),
            service_tier=self._service_tier,
            output_messages=self._assembled(),
        )

    def _assembled(self) -> list[Json] | None:
        """The output kept for spans (content capture only)."""
        if self._terminal_output is not None:
            return self._terminal_output
        calls = (((key, None, "tool_call"), p.result()) for key, p in self._calls.items())
        reason = (
            _finish_reason(self._status, self._finish_reasons, bool(self._calls))
            if self._done
            else "error"  # cut short: nothing finished
        )
        return parts.assembled(self._output, calls, reason)

    def _read_response_event(self, kind: str, event: Json) -> None:
        """Take id, model, status (and, when terminal, usage) from a response event."""
        if kind == "error":
            self._status = "error"
            self._done = True
            return
        response = event.get("response")
        terminal = kind in _TERMINAL_EVENTS
        if terminal:
            self._done = True
        if not isinstance(response, dict):
            self._note(f"{kind} without a response object")
            return
        # Only facts are kept: the Response object also holds the output text.
        facts = _from_response(response, (), ())
        self._response_id = facts.response_id or self._response_id
        self._model = facts.model or self._model
        self._status = facts.status or self._status
        self._service_tier = facts.service_tier or self._service_tier
        if terminal:
            self._usage = facts.usage
            self._finish_reasons = facts.finish_reasons
            output = response.get("output")
            if isinstance(output, list):
                self._terminal_calls = _output_tool_calls(output)
                # The whole output is authoritative when the terminal event
                # carries it; one without any part leaves the deltas seen.
                kept = response_content(response) if self._output is not None else None
                if kept is not None and any(m["parts"] for m in kept.output_messages):
                    self._terminal_output = _bounded_messages(kept.output_messages)

    def _pending(self, event: Json, item: Json | None) -> _PendingCall:
        """The tool call an event belongs to, started here if its ``added`` was missed."""
        key = _call_key(event, item)
        pending = self._calls.get(key)
        if pending is None:
            pending = self._calls[key] = _PendingCall(item)
        return pending


def _call_key(event: Json, item: Json | None) -> object:
    """Which output item an event is about: its ``output_index``, else the item id."""
    index = event.get("output_index")
    if isinstance(index, int):
        return index
    item_id = item.get("id") if item is not None else event.get("item_id")
    return str_or_none(item_id)


# --------------------------------------------------------------------------
# What telemetry reads (spans only; see modeltap.apis.contract)


def request_content(body: Json) -> RequestContent:
    """The ``input`` as the conventions' messages, ``instructions`` as system
    instructions, and the ``tools`` offered.

    A string input is one user message. Message items keep their role; a
    function or custom tool call item is an assistant ``tool_call`` part and
    its output a ``tool`` message's ``tool_call_response``; a reasoning item
    is a ``reasoning`` part; other items are generic parts of their type.
    Consecutive items of one role share a message.
    """
    value = body.get("input")
    converted: list[Json] | None
    if isinstance(value, str):
        converted = [parts.message("user", [parts.text(value)])]
    elif isinstance(value, list):
        converted = parts.merge_roles(
            [_input_item(item) for item in value if isinstance(item, dict)]
        )
    else:
        converted = None
    return RequestContent(
        input_messages=converted,
        system_instructions=_instructions(body.get("instructions")),
        tool_definitions=_tool_definitions(body.get("tools")),
    )


def _instructions(value: Any) -> list[Json] | None:
    """Top-level ``instructions`` as text parts: a string, or the text of a message list."""
    if isinstance(value, str):
        return [parts.text(value)]
    if not isinstance(value, list):
        return None
    found: list[Json] = []
    for item in value:
        if isinstance(item, dict):
            found.extend(_message_parts(item.get("content")))
    return found


_TEXT_PART_TYPES = frozenset({"input_text", "output_text", "text"})


def _message_parts(content: Any) -> list[Json]:
    """A message item's ``content``: a string, or input/output parts."""
    if isinstance(content, str):
        return [parts.text(content)]
    found: list[Json] = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict):
            found.append(_content_part(part))
    return found


def _content_part(part: Json) -> Json:
    kind = str_or_none(part.get("type")) or "unknown"
    if kind in _TEXT_PART_TYPES and isinstance(part.get("text"), str):
        return parts.text(part["text"])
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return parts.text(part["refusal"])
    modality = {"input_image": "image", "input_file": "document", "input_audio": "audio"}.get(kind)
    if modality is not None:
        if isinstance(part.get("file_id"), str):
            return parts.file(modality, part["file_id"])
        for key in ("image_url", "file_url", "file_data"):
            if isinstance(part.get(key), str):
                return parts.uri(modality, part[key])
    return parts.generic(kind)


def _input_item(item: Json) -> Json:
    """One input item as a message (merged with its neighbours of the same role later)."""
    kind = str_or_none(item.get("type"))
    if _is_message(item):
        role = str_or_none(item.get("role")) or "user"
        return parts.message(role, _message_parts(item.get("content")))
    call = _tool_call(item)
    if call is not None:
        return parts.message(
            "assistant", [parts.tool_call(call.call_id, call.name, call.arguments)]
        )
    if kind in _TOOL_OUTPUT_TYPES:
        response = parts.tool_call_response(str_or_none(item.get("call_id")), item.get("output"))
        return parts.message("tool", [response])
    if kind == "reasoning":
        return parts.message("assistant", _reasoning_parts(item))
    role = "tool" if kind and kind.endswith("_output") else "assistant"
    return parts.message(role, [parts.generic(kind or "unknown", id=str_or_none(item.get("id")))])


def _reasoning_parts(item: Json) -> list[Json]:
    """A reasoning item's summary (and content, when sent) as ``reasoning`` parts."""
    found: list[Json] = []
    for key in ("summary", "content"):
        blocks = item.get(key)
        for block in blocks if isinstance(blocks, list) else ():
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                found.append(parts.reasoning(block["text"]))
    return found


def _tool_definitions(tools: Any, prefix: str = "") -> list[Json] | None:
    """The tools as definitions; a namespace's tools are named ``namespace.name``."""
    if not isinstance(tools, list):
        return None
    found: list[Json] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        kind = str_or_none(tool.get("type")) or "unknown"
        name = str_or_none(tool.get("name"))
        if kind == "namespace":
            found.extend(_tool_definitions(tool.get("tools"), f"{prefix}{name or ''}.") or [])
        elif kind in _CLIENT_TOOL_TYPES:
            found.append(
                parts.tool_definition(
                    kind, f"{prefix}{name or ''}", tool.get("description"), tool.get("parameters")
                )
            )
        else:
            label = tool.get("server_label") if kind == "mcp" else name
            found.append(parts.tool_definition(kind, str_or_none(label) or kind))
    return found


#: How a Response's end maps onto the conventions' finish reasons.
FINISH_REASONS: Final = {
    "completed": "stop",
    "max_output_tokens": "length",
    "content_filter": "content_filter",
    "failed": "error",
}


def _finish_reason(status: str | None, reasons: tuple[str, ...] | None, calls: bool) -> str:
    """``tool_call`` when a completed response asks for tools, else the mapped reason."""
    if status == "completed" and calls:
        return "tool_call"
    reason = reasons[0] if reasons else status
    return parts.finish_reason(reason, FINISH_REASONS)


def _bounded_messages(messages: list[Json]) -> list[Json]:
    """Messages kept from a terminal Response, text cut like assembled output."""
    text, _ = parts.bound_json(messages, 4 * parts.CAPTURE_LIMIT)
    kept = orjson.loads(text)
    return kept if isinstance(kept, list) else []


def response_content(body: Json) -> ResponseContent | None:
    """The ``output`` of a Response object (or of the one a WebSocket
    ``response.*`` event carries) as one output message; ``None`` for a body
    without it (an error)."""
    response = body.get("response")
    if isinstance(response, dict):
        body = response
    output = body.get("output")
    if not isinstance(output, list):
        return None
    found: list[Json] = []
    calls = False
    for item in output:
        if not isinstance(item, dict):
            continue
        call = _tool_call(item)
        if call is not None:
            calls = True
            found.append(parts.tool_call(call.call_id, call.name, call.arguments))
        elif _is_message(item):
            found.extend(_message_parts(item.get("content")))
        elif item.get("type") == "reasoning":
            found.extend(_reasoning_parts(item))
        else:
            kind = str_or_none(item.get("type")) or "unknown"
            found.append(parts.generic(kind, id=str_or_none(item.get("id"))))
    status = str_or_none(body.get("status"))
    reasons = _finish_reasons(status, body.get("incomplete_details"))
    return ResponseContent([parts.output_message(found, _finish_reason(status, reasons, calls))])


def request_settings(body: Json) -> RequestSettings:
    """The generation settings sent (the Responses API has no stop, seed,
    penalties or ``n``; its output format is ``text.format``)."""
    text = body.get("text")
    return RequestSettings(
        max_tokens=whole_number(body.get("max_output_tokens")),
        temperature=number(body.get("temperature")),
        top_p=number(body.get("top_p")),
        output_type=output_type(text.get("format") if isinstance(text, dict) else None),
        service_tier=str_or_none(body.get("service_tier")),
    )


def usage_totals(usage: Usage) -> Usage:
    """The counts as reported: ``input_tokens`` already includes cached tokens
    and ``output_tokens`` reasoning tokens."""
    return usage
