"""What every wire API module offers: the contract the glue and telemetry rely on.

A wire API is one plain module of this package (``openai_chat``,
``openai_responses``, ``anthropic_messages``). The registry in
:mod:`modeltap.apis` lists the modules as :class:`WireApi` values, so mypy
checks every module against this contract; nothing outside ``apis/`` reads a
request or response body by key. A new wire is a new module meeting
:class:`WireApi`, its entry in the registry, and its samples in
``tests/data/<api>/``.

What a module offers, in three groups:

- **Facts for the evidence files** (``audit.jsonl``, ``events.jsonl``):
  :meth:`WireApi.audit_request`, :meth:`WireApi.set_image_detail`,
  :meth:`WireApi.observe_json` and the sans-I/O :class:`StreamObserver`.
- **Its identity**: the record's ``api`` name, how its endpoint is matched
  (:meth:`WireApi.match_endpoint`, which also reads a model the path names),
  the GenAI provider whose wire it is.
- **What telemetry needs from its bodies** (spans only; never evidence):
  :meth:`WireApi.request_content`, :meth:`WireApi.response_content` and
  :meth:`WireApi.request_settings`. These read a body the audit already
  accepted (or a response body, whatever it holds) and never raise: telemetry
  must not cost an exchange. Content is read only when content capture is on.

The content values are JSON values that telemetry writes as they are. Today
each module hands back its provider's own shape (the ``messages`` list as
sent); the GenAI conventions' shapes (``{"role", "parts": [...]}``) are a
change inside each module, not in telemetry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from modeltap.records import Json, RequestFacts, ResponseFacts
from modeltap.sse import SSEEvent


class StreamObserver(Protocol):
    """Observe one streamed response, one decoded SSE event at a time (sans-I/O)."""

    def feed(self, event: SSEEvent) -> bool:
        """Take one event; True when it carried model output (text, reasoning, a tool call).

        Never raises: a bad event becomes a capture error.
        """
        ...

    @property
    def done(self) -> bool:
        """True once the stream's terminal event was seen."""
        ...

    def finish(self, error: str | None = None) -> ResponseFacts:
        """Return what the stream showed; ``error`` says why it ended early, if it did."""
        ...


@dataclass(frozen=True, slots=True)
class EndpointMatch:
    """A path names one API's endpoint (:meth:`WireApi.match_endpoint`).

    Attributes:
        api: the record's ``api`` value.
        model_from_path: the model the path names, decoded, for an API that
            puts it there (Gemini's ``models/{model}:generateContent``,
            Bedrock's ``/model/{modelId}/converse``); ``None`` when the path
            names none. It becomes the record's ``model`` (``model_source``
            ``"path"``): it is what the upstream serves.
    """

    api: str
    model_from_path: str | None = None


def match_suffix(path: str, suffix: str, api: str) -> EndpointMatch | None:
    """Match an endpoint that is a fixed path suffix, in any case (no model in the path).

    Args:
        path: the routed path (see :meth:`WireApi.match_endpoint`).
        suffix: the endpoint's suffix, lower case (``/chat/completions``).
        api: the API's record name.

    Returns:
        The match, or ``None``.
    """
    return EndpointMatch(api) if path.lower().endswith(suffix) else None


@dataclass(frozen=True, slots=True)
class RequestContent:
    """What a request says to the model, for ``gen_ai.input.messages`` and
    ``gen_ai.system_instructions``.

    Attributes:
        input_messages: the conversation sent, as a JSON value; ``None`` when
            the body carries none.
        system_instructions: instructions sent beside the conversation (a
            top-level ``system`` or ``instructions``); ``None`` when there are
            none outside the messages.
    """

    input_messages: object = None
    system_instructions: object = None


@dataclass(frozen=True, slots=True)
class ResponseContent:
    """What a response says, for ``gen_ai.output.messages``.

    Attributes:
        output_messages: the model's output as a JSON value (``null`` is a
            value: the output part was there, and empty).
    """

    output_messages: object


@dataclass(frozen=True, slots=True)
class RequestSettings:
    """The generation settings a request sent, for the ``gen_ai.request.*`` attributes.

    Each field is ``None`` when the request did not send it (or sent a value
    of the wrong type): unknown is not a default.

    Attributes:
        max_tokens: ``gen_ai.request.max_tokens``.
        temperature: ``gen_ai.request.temperature``.
        top_p: ``gen_ai.request.top_p``.
        top_k: ``gen_ai.request.top_k``.
        stop_sequences: ``gen_ai.request.stop_sequences``.
        seed: ``gen_ai.request.seed``.
        frequency_penalty: ``gen_ai.request.frequency_penalty``.
        presence_penalty: ``gen_ai.request.presence_penalty``.
        choice_count: ``gen_ai.request.choice.count``.
        output_type: ``gen_ai.output.type`` (``text`` or ``json``).
        service_tier: the service tier asked for (``openai.request.service_tier``).
    """

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: float | None = None
    stop_sequences: tuple[str, ...] | None = None
    seed: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    choice_count: int | None = None
    output_type: str | None = None
    service_tier: str | None = None


class WireApi(Protocol):
    """One wire API module (see the module docstring)."""

    @property
    def NAME(self) -> str:
        """The record's ``api`` value (``openai.chat_completions``)."""
        ...

    def match_endpoint(self, path: str) -> EndpointMatch | None:
        """Whether a path names this API's endpoint, and the model it names if any.

        Args:
            path: the routed path: percent-decoded once, each segment's
                ``;params`` dropped, no query string, one trailing slash
                removed, case kept (:func:`modeltap.apis.match_endpoint`).
                Compare without regard to case (some servers route so); keep
                a model's own case.

        Returns:
            The match, or ``None``. Never raises: the registry checks the model.
        """
        ...

    @property
    def PROVIDER(self) -> str:
        """``gen_ai.provider.name`` of the provider whose wire this is."""
        ...

    @property
    def OPENAI_API_TYPE(self) -> str | None:
        """``openai.api.type`` for OpenAI's own wires, else ``None``."""
        ...

    def audit_request(self, body: Json) -> RequestFacts:
        """Read the audit facts off a parsed request body.

        Raises:
            Rejected: the body cannot be audited (the rule says why).
        """
        ...

    def set_image_detail(self, body: Json, detail: str) -> int:
        """Rewrite every image's detail in place; return how many were rewritten."""
        ...

    def observe_json(self, body: object, facts: RequestFacts | None) -> ResponseFacts:
        """Read what a non-streamed response body says; never raises."""
        ...

    @property
    def StreamObserver(self) -> Callable[[RequestFacts | None], StreamObserver]:
        """The class observing its streams, built with the request's facts."""
        ...

    def request_content(self, body: Json) -> RequestContent:
        """The conversation and instructions a request body sends; never raises."""
        ...

    def response_content(self, body: Json) -> ResponseContent | None:
        """The output of a response body, or ``None`` when it holds none of its
        own (an error body): telemetry then shows the body as it is. Never raises."""
        ...

    def request_settings(self, body: Json) -> RequestSettings:
        """The generation settings a request body sends; never raises."""
        ...
