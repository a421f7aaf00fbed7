"""Observing what came back for an audited request (pure).

- A whole body (:func:`observe_body`): decoded, parsed, handed to the API's
  ``observe_json``.
- A stream (:class:`StreamTap`, the ``response.stream`` callable). Never
  buffer a stream: every chunk goes on to the agent unchanged, as it arrives;
  a copy goes through the content decoding, the decoder of its framing (the
  wire's :class:`~modeltap.apis.contract.Framing`: SSE, Bedrock's binary
  event stream, Gemini's JSON array; :func:`modeltap.apis.stream_framing`)
  and the API's stream observer. When the copy cannot be decoded, observing
  stops, never the stream, and the response's evidence says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, cast

import orjson

from modeltap import apis
from modeltap.apis.contract import SSE
from modeltap.apis.stream_templates import BoundaryDecoder, Learner, Slots, Template
from modeltap.evidence.coverage_reasons import foreign_error_text
from modeltap.evidence.records import RequestFacts, ResponseFacts
from modeltap.rules.errors import UpstreamProtocolError
from modeltap.rules.routing import Route
from modeltap.wire.decoding import StreamDecompressor, decode_body
from modeltap.wire.sse import SSEEvent


def stream_framing(
    content_type: str,
    api: str | None = None,
    facts: RequestFacts | None = None,
    status: int = 200,
) -> str | None:
    """How a response streams, to be observed piece by piece as it arrives.

    Args:
        content_type: its ``Content-Type`` (any case, parameters allowed).
        api: the request's API (None: not a model request).
        facts: the request's audit facts (None: not audited).
        status: the response's HTTP status (an error answers with one object).

    Returns:
        The name of its :class:`~modeltap.apis.contract.Framing`
        (:func:`modeltap.apis.stream_framing`): ``"sse"``
        (``text/event-stream``), ``"eventstream"`` (Bedrock's binary
        ``application/vnd.amazon.eventstream``), ``"json_array"`` (a
        successful JSON answer to a streamed request of a wire that streams
        that way), or None (a body read whole, an error body of a streamed
        request included).
    """
    framing = apis.stream_framing(content_type, api, facts, status)
    return None if framing is None else framing.name


def with_header_facts(
    facts: ResponseFacts,
    api: str | None,
    route: Route | None,
    headers: Mapping[str, str] | None,
) -> ResponseFacts:
    """Add what a response's headers say to what its body showed
    (:func:`modeltap.apis.with_header_facts`: Bedrock's request id and
    InvokeModel's metrics).

    Args:
        facts: what the body or stream showed.
        api: the exchange's API.
        route: its route.
        headers: the response's headers (None: no response head arrived).
    """
    if headers is None:
        return facts
    return apis.with_header_facts(facts, api, route.provider if route else None, headers.get)


def observe_body(
    api: str, facts: RequestFacts | None, raw: bytes, encoding: str | None, status: int = 200
) -> tuple[ResponseFacts, bytes | None]:
    """Observe a whole response body.

    Args:
        api: the request's API.
        facts: the request's audit facts.
        raw: the body as the upstream sent it.
        encoding: its ``content-encoding``.
        status: its HTTP status. An error answer (400 and up) whose body is
            not its API's error shape (another API's, an HTML page) is said
            to be one (:func:`~modeltap.evidence.coverage_reasons.foreign_error_text`),
            not read as a malformed success.

    Returns:
        What it says, and the decoded body (None when it could not be read).
    """
    try:
        data = decode_body(raw, encoding)
        body = orjson.loads(data)
    except (UpstreamProtocolError, orjson.JSONDecodeError):
        if status >= 400:
            return _foreign_error(status), None
        unreadable = ("the response body is not valid JSON",)
        return ResponseFacts(evidence_complete=False, capture_errors=unreadable), None
    observed: ResponseFacts = apis.module_for(api).observe_json(body, facts)
    if status >= 400 and observed.capture_errors:
        return _foreign_error(status), data
    return observed, data


def _foreign_error(status: int) -> ResponseFacts:
    """An error answer its API's reader could not read: what the status says."""
    return ResponseFacts(
        status="error", evidence_complete=False, capture_errors=(foreign_error_text(status),)
    )


class StreamTap:
    """Pass chunks on; observe a copy.

    Args:
        observer: the API's stream observer (None: pass the chunks only).
        decompressor: undoes the response's content coding.
        errors: what already kept the stream from being observed.
        framing: ``"sse"``, ``"eventstream"`` or ``"json_array"`` (:func:`stream_framing`).
        on_first_chunk: called with the time of the first model output.
        on_chunk: called with each chunk and its time (a listener asked).
    """

    __slots__ = (
        "decompressor",
        "errors",
        "first_chunk_ns",
        "learner",
        "observer",
        "on_chunk",
        "on_first_chunk",
        "sse",
    )

    def __init__(
        self,
        observer: apis.StreamObserver | None,
        decompressor: StreamDecompressor | None,
        *,
        errors: tuple[str, ...] = (),
        framing: str = SSE.name,
        on_first_chunk: Callable[[int], None] | None = None,
        on_chunk: Callable[[bytes, int], None] | None = None,
    ) -> None:
        self.observer = observer
        self.decompressor = decompressor
        self.sse: apis.EventDecoder | None = None
        #: Plain events counted without decoding (SSE without a content coding).
        self.learner: Learner | None = None
        if observer is not None:
            self.sse = apis.decoder_for(framing)
            make = apis.template_for(framing)
            if make is not None and decompressor is not None and decompressor.identity:
                self.learner = Learner(cast(BoundaryDecoder, self.sse), make)
        self.errors = list(errors)
        self.first_chunk_ns: int | None = None
        self.on_first_chunk = on_first_chunk
        self.on_chunk = on_chunk

    @classmethod
    def observing(
        cls,
        api: str,
        facts: RequestFacts,
        content_encoding: str,
        *,
        framing: str = SSE.name,
        capture_content: bool = False,
        **callbacks: Any,
    ) -> StreamTap:
        """A tap observing an audited request's stream with ``api``'s observer.

        Args:
            api: the request's API.
            facts: its audit facts (what the observer checks the answer against).
            content_encoding: the response's ``content-encoding``.
            framing: ``"sse"``, ``"eventstream"`` or ``"json_array"`` (:func:`stream_framing`).
            capture_content: keep the output for spans (content capture is on).
            callbacks: ``on_first_chunk``, ``on_chunk``.
        """
        try:
            decompressor = StreamDecompressor(content_encoding)
        except UpstreamProtocolError as e:
            return cls(None, None, errors=(str(e),), **callbacks)
        observer = apis.module_for(api).StreamObserver(facts, capture_content=capture_content)
        return cls(observer, decompressor, framing=framing, **callbacks)

    def __call__(self, chunk: bytes) -> bytes:
        if self.sse is not None and self.decompressor is not None:
            try:
                if chunk:
                    data = self.decompressor.feed(chunk)
                    if self.learner is not None and self.learner.template is not None:
                        data = self._counted(data, self.learner.template)
                    if data:
                        self._decoded(data)
                else:
                    events = self.sse.feed(self.decompressor.flush()) + self.sse.close()
                    self._observe(events)
            except UpstreamProtocolError as e:
                # Stop observing, never stop the stream: the agent gets its bytes.
                self.errors.append(str(e))
                assert self.observer is not None
                self.observer, self.sse, self.learner = _Stopped(self.observer), None, None
        if self.on_chunk is not None and chunk:
            self.on_chunk(chunk, time.perf_counter_ns())
        return chunk

    def _counted(self, data: bytes, template: Template) -> bytes:
        """What is left of ``data`` after the plain events at its start.

        The template is kept only while the decoder is between events and the
        last event it decoded was the template's exemplar (:meth:`_decoded`):
        each match is that event again with other values in its slots, which
        the observer would not notice (:mod:`modeltap.apis.stream_templates`).
        """
        assert self.learner is not None
        if len(data) > self.learner.decoder.max_pending_bytes:
            return data  # the decoder's bound decides what such a chunk is
        count, end = template.consumed(data)
        if not count:
            return data
        self.learner.counted()
        if template.output and self.first_chunk_ns is None:
            self._first_output()
        return data[end:]

    def _decoded(self, data: bytes) -> None:
        """Decode ``data`` in full and observe its events; learn a template from it
        when it was exactly one plain event."""
        assert self.sse is not None
        learner = self.learner
        if learner is None:
            self._observe(self.sse.feed(data))
            return
        if learner.template is not None:
            learner.drop()  # the decoder moves on: no template holds any more
        exemplar = learner.ready() and learner.decoder.at_event_boundary
        events = self.sse.feed(data)
        output = self._observe(events)
        if exemplar and len(events) == 1 and learner.decoder.at_event_boundary:
            learner.learned(self._template(data, events[0], output))

    def _template(self, data: bytes, event: SSEEvent, output: bool) -> Template | None:
        assert self.observer is not None and self.learner is not None
        try:
            parsed = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(parsed, dict):
            return None
        slots = self.observer.plain_slots(event.event, parsed)
        return None if slots is None else self.learner.make(data, event, parsed, slots, output)

    def _observe(self, events: list[Any]) -> bool:
        """Feed the events to the observer; return what it said of the last one."""
        assert self.observer is not None
        output = False
        for event in events:
            output = self.observer.feed(event)
            if output and self.first_chunk_ns is None:
                self._first_output()
        return output

    def _first_output(self) -> None:
        self.first_chunk_ns = time.perf_counter_ns()
        if self.on_first_chunk is not None:
            self.on_first_chunk(self.first_chunk_ns)

    @property
    def done(self) -> bool:
        """Whether the whole answer was seen (its terminal event)."""
        return self.observer is not None and self.observer.done

    def finish(self, error: str | None = None) -> ResponseFacts:
        """The stream's facts, with any decoding trouble added.

        Args:
            error: why it ended early (a failure), if it did.
        """
        if self.observer is None:
            reasons = (error,) if error else tuple(self.errors)
            return ResponseFacts(
                evidence_complete=False,
                capture_errors=reasons or ("the stream could not be observed",),
            )
        facts = self.observer.finish(error)
        if self.errors:
            facts = replace(
                facts,
                evidence_complete=False,
                capture_errors=facts.capture_errors + tuple(self.errors),
            )
        return facts


class _Stopped:
    """An observer whose stream became unreadable: it reports what it had."""

    def __init__(self, inner: apis.StreamObserver) -> None:
        self.inner = inner

    def feed(self, event: Any) -> bool:
        return False

    def plain_slots(self, name: str | None, event: Any) -> Slots | None:
        return None

    @property
    def done(self) -> bool:
        return False

    def finish(self, error: str | None = None) -> ResponseFacts:
        facts = self.inner.finish(error or "the stream could not be decoded")
        return replace(facts, evidence_complete=False)
