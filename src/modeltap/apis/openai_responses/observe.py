"""The Responses API, the response side (SPEC section 4): a Response object,
or a stream of Responses events (over SSE, or a WebSocket's messages).

An HTTP error body (``{"error": {...}}``) and a stream's ``error`` event are
whole answers: status ``"error"``, evidence complete. A compaction's answer,
a ``response.compaction`` object, has an id, output items and usage but no
``model`` or ``status``: those facts stay ``None``.
"""

import dataclasses
from typing import Any

from modeltap.apis import message_parts as parts
from modeltap.apis.fields import id_or_none, str_or_none, token_count
from modeltap.apis.openai_responses.content import bounded_messages, response_content
from modeltap.apis.openai_responses.items import finish_reason, finish_reasons, tool_call
from modeltap.apis.stream_observer import ERROR_BODY, NOT_AN_OBJECT, StreamObserverBase
from modeltap.apis.stream_templates import Slots
from modeltap.evidence.records import Json, RequestFacts, ResponseFacts, ToolCall, Usage
from modeltap.wire.sse import SSEEvent

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
        response_id=id_or_none(response.get("id")),
        model=id_or_none(response.get("model")),
        usage=_usage(response.get("usage")),
        finish_reasons=finish_reasons(status, response.get("incomplete_details")),
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


def _output_tool_calls(output: list[Any]) -> tuple[ToolCall, ...]:
    calls = (tool_call(item) for item in output if isinstance(item, dict))
    return tuple(call for call in calls if call is not None)


class _PendingCall:
    """A tool call being streamed: what is known of it so far (no model text)."""

    __slots__ = ("chunks", "done_arguments", "final", "started")

    def __init__(self, item: Json | None) -> None:
        # The `added` item (arguments usually "", sometimes already whole).
        self.started = tool_call(item) if item is not None else None
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
        self.finish_reasons: tuple[str, ...] | None = None
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
            if isinstance(item, dict) and tool_call(item) is not None:
                self._calls[_call_key(event, item)] = _PendingCall(item)
                return True
        elif kind == "response.output_item.done":
            item = event.get("item")
            call = tool_call(item) if isinstance(item, dict) else None
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

    def plain_slots(self, name: str | None, event: Json) -> Slots | None:
        """A text delta (output, refusal, reasoning): without content capture it
        changes nothing kept and returns True (False once the stream ended),
        whatever its text, sequence number or padding."""
        if self._output is not None or event.get("type") not in _TEXT_DELTAS:
            return None
        ignored = tuple(
            (key,)
            for key, kind in (("delta", str), ("sequence_number", int), ("obfuscation", str))
            if isinstance(event.get(key), kind) and not isinstance(event.get(key), bool)
        )
        return Slots(ignored=ignored)

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
            finish_reasons=self.finish_reasons,
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
            finish_reason(self._status, self.finish_reasons, bool(self._calls))
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
        # The first id and model that are not placeholders (response.created may
        # open with none; later events repeat them).
        self._response_id = self._response_id or facts.response_id
        self._model = self._model or facts.model
        self._status = facts.status or self._status
        self._service_tier = facts.service_tier or self._service_tier
        if terminal:
            self._usage = facts.usage
            self.finish_reasons = facts.finish_reasons
            output = response.get("output")
            if isinstance(output, list):
                self._terminal_calls = _output_tool_calls(output)
                # The whole output is authoritative when the terminal event
                # carries it; one without any part leaves the deltas seen.
                kept = response_content(response) if self._output is not None else None
                if kept is not None and any(m["parts"] for m in kept.output_messages):
                    self._terminal_output = bounded_messages(kept.output_messages)

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
