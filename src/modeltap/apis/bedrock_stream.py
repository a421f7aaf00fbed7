"""Bedrock's answers as the API observers read them (pure; sans-I/O).

Bedrock streams (ConverseStream, InvokeModelWithResponseStream) use the binary
``application/vnd.amazon.eventstream`` framing, not SSE. :class:`BedrockStreamDecoder`
is fed the response bytes as they arrive, like :class:`~modeltap.wire.sse.SSEDecoder`,
and hands back the same :class:`~modeltap.wire.sse.SSEEvent` objects, so each API's
stream observer reads Bedrock streams unchanged:

- an InvokeModelWithResponseStream ``chunk`` is the Anthropic streaming event
  it wraps: ``SSEEvent(None, <the event's JSON>)``, exactly what the Messages
  SSE stream carries (the last one, ``message_stop``, also carries Bedrock's
  ``amazon-bedrock-invocationMetrics``);
- any other event is ``SSEEvent(<event type>, <its JSON payload>)`` (Converse's
  ``messageStart`` … ``metadata``);
- an ``exception`` or ``error`` message, which ends a Bedrock stream, is
  ``SSEEvent("error", {"type": "error", "error": {"type": <its type or code>}})``:
  the shape of an Anthropic error event, read by both observers. The
  provider's message is never copied.

Non-streamed answers carry facts in headers too (:func:`with_response_headers`):
the request id (``x-amzn-RequestId``: Converse bodies have no id) and
InvokeModel's invocation metrics. (A stream's metrics, in its last chunk, are
the Anthropic observer's to read: :mod:`modeltap.apis.anthropic_messages`.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Final

import orjson

from modeltap.apis import bedrock_converse
from modeltap.evidence.records import (
    API_BEDROCK_CONVERSE,
    MAX_ID_CHARS,
    InvocationMetrics,
    ResponseFacts,
)
from modeltap.wire.eventstream import (
    BedrockChunk,
    BedrockError,
    BedrockEvent,
    BedrockException,
    EventStreamDecoder,
    read_bedrock_message,
)
from modeltap.wire.sse import SSEEvent

#: The content type of Bedrock's streamed answers.
EVENTSTREAM_CONTENT_TYPE: Final = "application/vnd.amazon.eventstream"

#: Response headers of InvokeModel: its invocation metrics, and the request id.
_HEADER_LATENCY = "x-amzn-bedrock-invocation-latency"
_HEADER_INPUT = "x-amzn-bedrock-input-token-count"
_HEADER_OUTPUT = "x-amzn-bedrock-output-token-count"
_HEADER_REQUEST_ID = "x-amzn-requestid"


def is_bedrock(api: str | None, provider: str | None) -> bool:
    """Whether an exchange's answer is Bedrock's, whose headers say more (see
    :func:`with_response_headers`): a Converse request, or any on a route to
    Bedrock (InvokeModel speaks the Anthropic wire there).

    Args:
        api: the record's ``api``, if any.
        provider: the route's provider, if known.
    """
    return api == API_BEDROCK_CONVERSE or provider == bedrock_converse.PROVIDER


def is_eventstream(content_type: str) -> bool:
    """Whether a response's ``Content-Type`` is the AWS event stream framing.

    Args:
        content_type: the header's value (any case, parameters allowed).
    """
    return content_type.split(";", 1)[0].strip().lower() == EVENTSTREAM_CONTENT_TYPE


def _error_event(kind: str) -> SSEEvent:
    """An Anthropic-shaped error event naming only the type (never the message)."""
    return SSEEvent("error", orjson.dumps({"type": "error", "error": {"type": kind}}).decode())


class BedrockStreamDecoder:
    """Decode a Bedrock event stream into the events its API's observer reads.

    Feed it the (decompressed) body as it arrives, split anywhere; each call
    returns the events completed so far (see the module docstring for their
    shape). Checksums are checked (:class:`~modeltap.wire.eventstream.EventStreamDecoder`);
    memory holds at most one unfinished message.

    Raises (from :meth:`feed` and :meth:`close`):
        UpstreamProtocolError: the stream broke its framing (a bad checksum,
            a message cut at the end, a chunk that is not base64 JSON); fixed
            text, nothing from the stream. Decoding ends.
    """

    __slots__ = ("_decoder",)

    def __init__(self) -> None:
        self._decoder = EventStreamDecoder()

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Take the next bytes; return the events they completed, in order."""
        return [_as_event(m) for m in self._decoder.feed(data)]

    def close(self) -> list[SSEEvent]:
        """The stream ended: raise if it ended inside a message."""
        return [_as_event(m) for m in self._decoder.close()]


def _as_event(message: Any) -> SSEEvent:
    meaning = read_bedrock_message(message)
    if isinstance(meaning, BedrockChunk):
        return SSEEvent(None, meaning.data)
    if isinstance(meaning, BedrockEvent):
        return SSEEvent(meaning.event_type, orjson.dumps(meaning.body).decode())
    if isinstance(meaning, BedrockException):
        return _error_event(meaning.exception_type)
    assert isinstance(meaning, BedrockError)
    return _error_event(meaning.error_code)


def _header_count(value: str | None) -> int | None:
    """A header holding a whole number, else ``None`` (unknown)."""
    if value is None or not value.strip().isdigit() or len(value) > 18:
        return None
    return int(value)


def with_response_headers(
    facts: ResponseFacts, header: Callable[[str], str | None]
) -> ResponseFacts:
    """Add what Bedrock's response headers say to an observed response.

    The request id (``x-amzn-RequestId``) is the response id when the body
    named none (Converse); InvokeModel's invocation metrics
    (``X-Amzn-Bedrock-Invocation-Latency``, ``-Input-Token-Count``,
    ``-Output-Token-Count``) are its metrics when the body reported none.
    Facts the body gave are kept. Headers of other providers change nothing.

    Args:
        facts: what the body (or stream) showed.
        header: the response header of a (lower-case) name, or ``None``.

    Returns:
        The facts with the headers' additions.
    """
    changes: dict[str, Any] = {}
    request_id = header(_HEADER_REQUEST_ID)
    if facts.response_id is None and request_id and len(request_id) <= MAX_ID_CHARS:
        changes["response_id"] = request_id
    if facts.invocation_metrics is None:
        metrics = InvocationMetrics(
            input_tokens=_header_count(header(_HEADER_INPUT)),
            output_tokens=_header_count(header(_HEADER_OUTPUT)),
            latency_ms=_header_count(header(_HEADER_LATENCY)),
        )
        if metrics != InvocationMetrics():
            changes["invocation_metrics"] = metrics
    return dataclasses.replace(facts, **changes) if changes else facts
