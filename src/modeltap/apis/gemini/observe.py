"""Gemini ``generateContent``, the response side.

A JSON ``GenerateContentResponse`` (Code Assist wraps it as ``{response,
traceId}``), or a stream of them, as SSE (``?alt=sse``) or as one JSON array
whose elements arrive one by one (:class:`~modeltap.wire.json_array.JsonArrayDecoder`
hands each element over like an SSE event, so one observer reads both).
Usage is ``usageMetadata`` (``promptTokenCount`` input, cached tokens
included; ``candidatesTokenCount`` output, thoughts excluded;
``thoughtsTokenCount`` reasoning; ``cachedContentTokenCount`` cache read;
``totalTokenCount``), finish reasons ``candidates[].finishReason`` as sent
(``STOP``), tool calls the ``functionCall`` parts (``call_id`` ``None`` when
the server sent no id: the Developer API sends none; arguments the compact
JSON of ``args``). A stream is complete once a chunk with a ``finishReason``
(or a prompt ``blockReason``) has arrived. Thought signatures are never
touched: the response passes through byte for byte, and a request that
carries them back is forwarded as sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from modeltap.apis import message_parts as parts
from modeltap.apis.fields import id_or_none, objects, str_or_none, token_count
from modeltap.apis.json_body import json_text
from modeltap.apis.stream_observer import ERROR_BODY, NOT_AN_OBJECT, StreamObserverBase
from modeltap.apis.stream_templates import Slots
from modeltap.evidence.records import Json, RequestFacts, ResponseFacts, ToolCall, Usage
from modeltap.wire.sse import SSEEvent

#: ``STOP`` with a function call in the candidate is ``tool_call``.
FINISH_REASONS: Final = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "MALFORMED_FUNCTION_CALL": "error",
    "UNEXPECTED_TOOL_CALL": "error",
}
#: The members of a part's ``data`` oneof (a part holds one; ``thought``,


_OUTPUT_KEYS: Final = (
    "functionCall",
    "inlineData",
    "fileData",
    "executableCode",
    "codeExecutionResult",
)


def unwrap(body: Any) -> Any:
    """A response as Gemini writes it: Code Assist's ``{response, traceId}`` unwrapped.

    A ``GenerateContentResponse`` has no ``response`` field of its own, so
    the wrapper is told by shape.
    """
    if (
        isinstance(body, dict)
        and isinstance(body.get("response"), dict)
        and "candidates" not in body
        and "usageMetadata" not in body
    ):
        return body["response"]
    return body


def _usage(usage: Json) -> Usage:
    return Usage(
        input_tokens=token_count(usage.get("promptTokenCount")),
        output_tokens=token_count(usage.get("candidatesTokenCount")),
        total_tokens=token_count(usage.get("totalTokenCount")),
        cache_read_tokens=token_count(usage.get("cachedContentTokenCount")),
        reasoning_tokens=token_count(usage.get("thoughtsTokenCount")),
    )


def _call(call: Any) -> ToolCall:
    """A ``functionCall`` as a tool call: its id (``None`` when absent), name, ``args`` as JSON."""
    if not isinstance(call, dict):
        return ToolCall(None, None, None)
    args = call.get("args")
    return ToolCall(
        id_or_none(call.get("id")),
        str_or_none(call.get("name")),
        json_text(args) if args is not None else None,
    )


def candidate_parts(candidate: Json) -> list[Json]:
    content = candidate.get("content")
    return objects(content.get("parts")) if isinstance(content, dict) else []


def _blocked(body: Json) -> str | None:
    feedback = body.get("promptFeedback")
    return str_or_none(feedback.get("blockReason")) if isinstance(feedback, dict) else None


def observe_json(body: object, facts: RequestFacts | None) -> ResponseFacts:
    """Read what a non-streamed response (or an error body) says.

    Args:
        body: the parsed response body (Code Assist's wrapper is unwrapped).
        facts: the request's facts (unused).

    Returns:
        The observed facts; never raises. An error body gives status
        ``error``; a prompt blocked before any candidate gives status
        ``blocked`` and no finish reason.
    """
    body = unwrap(body)
    if not isinstance(body, dict):
        return NOT_AN_OBJECT
    if body.get("error") is not None:
        return ERROR_BODY
    errors: list[str] = []
    candidates = body.get("candidates")
    reasons: list[str] = []
    calls: list[ToolCall] = []
    blocked = _blocked(body)
    if candidates is None and blocked is None:
        errors.append("response has no candidates")
    elif candidates is not None and not isinstance(candidates, list):
        errors.append("response has a candidates value that is not a list")
    for candidate in candidates if isinstance(candidates, list) else ():
        if not isinstance(candidate, dict):
            errors.append("response has a candidate that is not an object")
            continue
        reason = candidate.get("finishReason")
        if isinstance(reason, str):
            reasons.append(reason)
        else:
            errors.append("response has a candidate without finishReason")
        for part in candidate_parts(candidate):
            if "functionCall" in part:
                calls.append(_call(part["functionCall"]))
    usage = body.get("usageMetadata")
    return ResponseFacts(
        response_id=id_or_none(body.get("responseId")),
        model=id_or_none(body.get("modelVersion")),
        usage=_usage(usage) if isinstance(usage, dict) else Usage(),
        finish_reasons=tuple(reasons) if isinstance(candidates, list) or blocked else None,
        tool_calls=tuple(calls),
        status="blocked" if blocked is not None else None,
        evidence_complete=not errors,
        capture_errors=tuple(dict.fromkeys(errors)),
    )


class StreamObserver(StreamObserverBase):
    """Observe a streamed response, one chunk (SSE event or array element) at a time.

    Each chunk is a whole ``GenerateContentResponse`` (wrapped for Code
    Assist): usage is cumulative (the last reported wins), finish reasons
    come with the last chunk of each candidate, function calls arrive whole.
    Only facts are kept, never text, unless ``capture_content`` asks for the
    output to be assembled for spans (bounded).

    Args:
        facts: the request's facts (unused: Gemini's stream needs none).
        capture_content: assemble the output (content capture is on).
    """

    def __init__(self, facts: RequestFacts | None = None, *, capture_content: bool = False) -> None:
        super().__init__()
        self._response_id: str | None = None
        self._model: str | None = None
        self._usage: Usage | None = None
        self._reasons: dict[int, str] = {}
        self._calls: list[tuple[int, ToolCall]] = []
        self._status: str | None = None
        self._output = parts.OutputAssembler() if capture_content else None
        #: Per candidate: the key of its open text part and that part's kind.
        self._open: dict[int, tuple[int, str]] = {}
        self._keys = 0

    def feed(self, event: SSEEvent) -> bool:
        """Take one chunk.

        Args:
            event: an SSE event, or an array element handed over as one.

        Returns:
            True when the chunk carried model output (text, a thought, a
            function call, data). Never raises.
        """
        chunk = self._json_object(event.data, "stream chunk")
        if chunk is None:
            return False
        chunk = unwrap(chunk)
        if chunk.get("error") is not None:
            self._status = "error"
            self._note("upstream sent an error chunk")
            return False
        self._response_id = self._response_id or id_or_none(chunk.get("responseId"))
        self._model = self._model or id_or_none(chunk.get("modelVersion"))
        usage = chunk.get("usageMetadata")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
        if _blocked(chunk) is not None:
            self._status, self._done = "blocked", True
        candidates = chunk.get("candidates")
        if candidates is not None and not isinstance(candidates, list):
            self._note("stream chunk has a candidates value that is not a list")
            return False
        output = False
        for position, candidate in enumerate(candidates or ()):
            if isinstance(candidate, dict):
                output = self._feed_candidate(candidate, position) or output
            else:
                self._note("stream chunk has a candidate that is not an object")
        return output

    def _feed_candidate(self, candidate: Json, position: int) -> bool:
        index = candidate.get("index")
        index = index if isinstance(index, int) and not isinstance(index, bool) else position
        output = False
        for part in candidate_parts(candidate):
            text = part.get("text")
            if isinstance(text, str):
                output = output or bool(text)
                if self._output is not None:
                    kind = "reasoning" if part.get("thought") is True else "text"
                    key, open_kind = self._open.get(index, (-1, ""))
                    if open_kind != kind:
                        self._keys += 1
                        key = self._keys
                        self._open[index] = (key, kind)
                    self._output.add_text(index, key, kind, text)
            if "functionCall" in part:
                call = _call(part["functionCall"])
                self._calls.append((index, call))
                if self._output is not None:
                    self._keys += 1
                    self._output.add_part(
                        index, self._keys, parts.tool_call(call.call_id, call.name, call.arguments)
                    )
                    self._open.pop(index, None)
            if any(key in part for key in _OUTPUT_KEYS):
                output = True
        reason = candidate.get("finishReason")
        if isinstance(reason, str):
            self._reasons[index] = reason
            self._done = True
        return output

    def plain_slots(self, name: str | None, event: Json) -> Slots | None:
        """A chunk of one candidate with one text part, no finish reason, no
        block and no error: fed again, its ids are kept, its usage (if any) is
        set to the same counts, and it returns True whatever non-empty text it
        carries."""
        candidates = event.get("candidates")
        if (
            self._output is not None
            or event.get("error") is not None
            or _blocked(event) is not None
            or not isinstance(candidates, list)
            or len(candidates) != 1
            or not isinstance(candidates[0], dict)
            or isinstance(candidates[0].get("finishReason"), str)
        ):
            return None
        content = candidates[0].get("content")
        found = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(found, list) or len(found) != 1 or not isinstance(found[0], dict):
            return None
        text = found[0].get("text")
        if (
            not isinstance(text, str)
            or not text
            or any(k != "text" and k != "thought" for k in found[0])
        ):
            return None
        return Slots(text=(("candidates", 0, "content", "parts", 0, "text"),))

    def _missing(self) -> Iterator[str]:
        if not self._done:
            yield "stream ended before a chunk with a finishReason"

    def _facts(self) -> ResponseFacts:
        reasons = tuple(reason for _, reason in sorted(self._reasons.items()))
        return ResponseFacts(
            response_id=self._response_id,
            model=self._model,
            usage=self._usage or Usage(),
            finish_reasons=reasons if self._reasons or self._status == "blocked" else None,
            tool_calls=tuple(call for _, call in sorted(self._calls, key=lambda c: c[0])),
            status=self._status,
            evidence_complete=not self._errors,
            capture_errors=tuple(self._errors),
            output_messages=self._assembled(),
        )

    def _assembled(self) -> list[Json] | None:
        if self._output is None:
            return None
        if not self._done:
            return self._output.messages(lambda _: "error")
        called = {index for index, _ in self._calls}
        return self._output.messages(
            lambda index: finish_reason(self._reasons.get(index), index in called)
        )


def finish_reason(reason: str | None, called: bool) -> str:
    """The conventions' finish reason of a candidate (``STOP`` after a call: ``tool_call``)."""
    if reason == "STOP" and called:
        return "tool_call"
    return parts.finish_reason(reason, FINISH_REASONS)
