"""Chat Completions, the response side (SPEC section 4): a JSON body or a
stream of ``data: {chunk}`` events ending in ``data: [DONE]``.

Evidence is complete when the whole response was seen and nothing it should
carry is missing, so ``evidence_complete`` is true exactly when
``capture_errors`` is empty.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from modeltap.apis import message_parts as parts
from modeltap.apis.fields import id_or_none, str_or_none, token_count
from modeltap.apis.stream_observer import ERROR_BODY, NOT_AN_OBJECT, StreamObserverBase, error_type
from modeltap.apis.stream_templates import Slots
from modeltap.evidence.records import Json, RequestFacts, ResponseFacts, ToolCall, Usage
from modeltap.wire.sse import SSEEvent

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


def tool_call_parts(call: Json) -> tuple[str | None, str | None]:
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
                    calls.append(ToolCall(id_or_none(call.get("id")), *tool_call_parts(call)))
                else:
                    errors.append("response has a tool call that is not an object")
    return ResponseFacts(
        response_id=id_or_none(body.get("id")),
        model=id_or_none(body.get("model")),
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
        # The first id and model that are not placeholders: Azure's first chunk
        # (its prompt filter results) has "" for both.
        self._response_id = self._response_id or id_or_none(chunk.get("id"))
        self._model = self._model or id_or_none(chunk.get("model"))
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
            call_id = id_or_none(call.get("id"))
            name, fragment = tool_call_parts(call)
            assembled.call_id = assembled.call_id or call_id
            assembled.name = assembled.name or name
            if fragment is not None:
                if assembled.arguments is None:
                    assembled.arguments = []
                assembled.arguments.append(fragment)
            output = True
        return output

    def plain_slots(self, name: str | None, event: Json) -> Slots | None:
        """A chunk of one choice whose delta carries text and no tool call, with no
        usage and no error: fed again, its ids, tier and fingerprint are already
        kept, its finish reason is set to the same value, and it returns True
        whatever non-empty text it carries. OpenAI's ``obfuscation`` padding is
        never read."""
        choices = event.get("choices")
        if (
            self._output is not None
            or event.get("error") is not None
            or isinstance(event.get("usage"), dict)
            or not isinstance(choices, list)
            or len(choices) != 1
            or not isinstance(choices[0], dict)
        ):
            return None
        delta = choices[0].get("delta")
        if (
            not isinstance(delta, dict)
            or isinstance(delta.get("tool_calls"), list)
            or not isinstance(delta.get("content"), str)
            or not delta["content"]
        ):
            return None
        padding = (("obfuscation",),) if isinstance(event.get("obfuscation"), str) else ()
        return Slots(text=(("choices", 0, "delta", "content"),), ignored=padding)

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
