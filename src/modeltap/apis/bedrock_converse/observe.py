"""Bedrock Converse, the response side (SPEC section 4).

A JSON body (``output.message.content``, ``stopReason``, ``usage``,
``metrics``) or, for ``converse-stream``, an
``application/vnd.amazon.eventstream`` of events (``messageStart``,
``contentBlockStart``, ``contentBlockDelta``, ``contentBlockStop``,
``messageStop``, ``metadata``) that :mod:`modeltap.apis.bedrock_converse.stream`
hands the observer as :class:`~modeltap.wire.sse.SSEEvent` objects (``event``
the event type, ``data`` its JSON); an exception ending the stream comes as
an ``error`` event. The stream is complete at ``metadata``, its last event.
The body names no model and no id: the request id is the ``x-amzn-RequestId``
header's (:func:`modeltap.apis.bedrock_converse.runtime.with_response_headers`).
Converse's ``inputTokens`` leaves out the tokens read from and written to
the cache, as Anthropic's does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from modeltap.apis import message_parts as parts
from modeltap.apis.bedrock_converse.content import FINISH_REASONS, output_content
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
    content = output_content(body)
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
                        id_or_none(use.get("toolUseId")),
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


class _StreamedToolUse:
    """A ``toolUse`` block being assembled: id, name, input fragments."""

    __slots__ = ("call_id", "fragments", "name")

    def __init__(self, start: Json) -> None:
        self.call_id = id_or_none(start.get("toolUseId"))
        self.name = str_or_none(start.get("name"))
        self.fragments: list[str] = []

    def tool_call(self) -> ToolCall:
        return ToolCall(self.call_id, self.name, "".join(self.fragments) or None)


class StreamObserver(StreamObserverBase):
    """Observe a ConverseStream response, one event at a time.

    Fed :class:`~modeltap.wire.sse.SSEEvent` objects whose ``event`` is the
    Bedrock event type and ``data`` its JSON payload
    (:mod:`modeltap.apis.bedrock_converse.stream` decodes the event stream into
    them). Only facts are kept (usage, stop reason, tool
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

    def plain_slots(self, name: str | None, event: Json) -> Slots | None:
        """A ``contentBlockDelta`` of text: without content capture it changes
        nothing kept and returns True, whatever non-empty text it carries and
        whatever Bedrock's ``p`` padding is."""
        delta = event.get("delta")
        if (
            self._output is not None
            or name != "contentBlockDelta"
            or not isinstance(delta, dict)
            or not isinstance(delta.get("text"), str)
            or not delta["text"]
        ):
            return None
        padding = (("p",),) if isinstance(event.get("p"), str) else ()
        return Slots(text=(("delta", "text"),), ignored=padding)

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
