"""Anthropic Messages, the response side (SPEC section 4): a JSON message (or
error body), or an SSE stream ending in ``message_stop``.

Tool calls are the model's ``tool_use`` blocks (the client runs those);
server tool use runs at the provider and is not a call the client answers.
``total_tokens`` stays ``None``: Anthropic does not report one.
``evidence_complete`` is true exactly when ``capture_errors`` is empty. On
Bedrock, the stream's last ``message_stop`` carries Bedrock's invocation
metrics (:data:`BEDROCK_METRICS`), observed here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from modeltap.apis import message_parts as parts
from modeltap.apis.anthropic_messages.content import FINISH_REASONS, block_part
from modeltap.apis.fields import id_or_none, str_or_none, token_count, whole_number
from modeltap.apis.json_body import json_text
from modeltap.apis.stream_observer import ERROR_BODY, NOT_AN_OBJECT, StreamObserverBase, error_type
from modeltap.apis.stream_templates import Slots
from modeltap.evidence.records import (
    InvocationMetrics,
    Json,
    RequestFacts,
    ResponseFacts,
    ToolCall,
    Usage,
)
from modeltap.wire.sse import SSEEvent

#: Delta types that carry model output (signatures and citations do not).
_OUTPUT_DELTAS = frozenset({"text_delta", "thinking_delta", "input_json_delta"})
#: The conventions' part type of each text-like delta.
_DELTA_PARTS = {"text_delta": ("text", "text"), "thinking_delta": ("reasoning", "thinking")}


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
                        id_or_none(block.get("id")),
                        str_or_none(block.get("name")),
                        json_text(block.get("input")),
                    )
                )
    reason = body.get("stop_reason")
    return ResponseFacts(
        response_id=id_or_none(body.get("id")),
        model=id_or_none(body.get("model")),
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
        self.call_id = id_or_none(block.get("id"))
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
                self._response_id = self._response_id or id_or_none(message.get("id"))
                self._model = self._model or id_or_none(message.get("model"))
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

    def plain_slots(self, name: str | None, event: Json) -> Slots | None:
        """A ``content_block_delta`` of text or thinking: without content capture
        it changes nothing kept and returns True, whatever it carries."""
        delta = event.get("delta")
        if (
            self._output is not None
            or event.get("type") != "content_block_delta"
            or not isinstance(delta, dict)
        ):
            return None
        key = {"text_delta": "text", "thinking_delta": "thinking"}.get(delta.get("type"))  # type: ignore[arg-type]
        if key is None or not isinstance(delta.get(key), str) or not delta[key]:
            return None
        return Slots(text=(("delta", key),))

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
            self._output.add_part(0, index, block_part(block))
