"""What every wire package offers: the contract the core, the glue and telemetry rely on.

A wire is one package of :mod:`modeltap.apis` (``openai_chat``,
``openai_responses``, ``anthropic_messages``, ``bedrock_converse``,
``gemini``), split the same way: its identity in ``__init__``, the request
side in ``audit``, the response side in ``observe``, what telemetry reads in
``content``. The registry in :mod:`modeltap.apis` lists the packages as
:class:`WireApi` values, so mypy checks every one against this contract;
nothing outside ``apis/`` reads a request or response body by key, or asks
for a wire by name (adding a wire: :mod:`modeltap.apis`).

What any wire offers (:class:`Wire`), whether or not its requests are model
turns:

- **Its identity**: the record's ``api`` name and the GenAI provider whose
  wire it is.
- **How it answers when modeltap answers**: the :class:`ErrorShape` its SDK
  reads a refusal or a failure in (:meth:`Wire.error_shape`).
- **How its responses stream and what their headers add**: the
  :class:`Framing` values its streams come in (:attr:`Wire.FRAMINGS`: SSE,
  AWS's event stream, a JSON array), each with its sans-I/O
  :class:`EventDecoder`, and :meth:`Wire.response_header_facts`.
- **Its WebSocket mode**, if it has one (:attr:`Wire.WEBSOCKET`, a
  :class:`~modeltap.apis.websocket_mode.WebSocketMode`: the Responses API's).
- **What a replay compares** of its request bodies (:meth:`Wire.comparable_body`:
  not what its client makes up on every run).

What a model API adds (:class:`WireApi`):

- **Its endpoint and counts**: how its endpoint is matched
  (:meth:`WireApi.match_endpoint`, which also reads what the path says: the
  model it names, a stream it asks for, the cloud form it is; the audit is
  given that :class:`EndpointMatch`), and which usage counts its wire can
  carry (:attr:`WireApi.REPORTED_USAGE`: a count the wire has no field for
  is not "missing" when a response leaves it out).
- **Facts for the evidence files** (``audit.jsonl``, ``events.jsonl``):
  :meth:`WireApi.audit_request`, :meth:`WireApi.set_image_detail`,
  :meth:`WireApi.observe_json` and the sans-I/O :class:`StreamObserver` its
  framings' events are fed to.
- **What telemetry needs from its bodies and counts** (spans, metrics and
  the cost estimate; never evidence): its spans' operation
  (:attr:`WireApi.OPERATION_NAME`), :meth:`WireApi.request_content`,
  :meth:`WireApi.response_content`, :meth:`WireApi.request_settings` and
  :meth:`WireApi.usage_totals`. These read a body the audit already accepted
  (or a response body, whatever it holds) and never raise: telemetry must not
  cost an exchange. Content is read only when content capture is on; a stream
  observer assembles its output only when built with ``capture_content=True``.

Content comes back in the GenAI semantic conventions' own JSON shapes
(:mod:`modeltap.apis.message_parts`): messages ``{"role", "parts": [...]}``,
output messages with their ``finish_reason``, system instructions as a list of
parts, tool definitions ``{"type", "name", ...}``. Each package maps its
provider's shape onto them; telemetry writes them as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from modeltap.apis.stream_templates import EventTemplate, Slots, TemplateMaker
from modeltap.apis.websocket_mode import WebSocketMode
from modeltap.evidence.records import (
    OPERATION_CREATE,
    Json,
    RequestFacts,
    RequestSettings,
    ResponseFacts,
    Usage,
)
from modeltap.rules.errors import neutral_error_body
from modeltap.wire.sse import SSEDecoder, SSEEvent


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

    def plain_slots(self, name: str | None, event: Json) -> Slots | None:
        """Whether the event just fed may be counted without decoding when it
        comes again with other values in the returned slots
        (:meth:`~modeltap.apis.stream_observer.StreamObserverBase.plain_slots`)."""
        ...


class EventDecoder(Protocol):
    """A sans-I/O stream decoder: fed a response's bytes, it hands back the
    events its wire's :class:`StreamObserver` reads.

    Raises (from :meth:`feed` and :meth:`close`):
        UpstreamProtocolError: the stream broke its framing (fixed text,
            nothing from the stream); decoding ends.
    """

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Take the next bytes, split anywhere; return the events they completed."""
        ...

    def close(self) -> list[SSEEvent]:
        """The stream ended: the events left, or raise if it ended mid-event."""
        ...


@dataclass(frozen=True, slots=True)
class Framing:
    """How a response streams: piece by piece, observed as it passes, never buffered.

    Attributes:
        name: what it is called (``sse``, ``eventstream``, ``json_array``).
        media_type: the ``Content-Type`` it comes as, lower case, without
            parameters.
        decoder: builds the decoder of one response.
        streamed_requests_only: the media type also carries whole bodies
            (Gemini's JSON array is ``application/json``): a response is this
            framing only when its request asked for a stream and the answer
            is a success (an error answers with one object).
        template: makes a template of a plain event's bytes
            (:mod:`~modeltap.apis.stream_templates`), for a decoder that says
            where its events begin (``at_event_boundary``); None: every event
            is decoded.
    """

    name: str
    media_type: str
    decoder: Callable[[], EventDecoder]
    streamed_requests_only: bool = False
    template: TemplateMaker | None = None


#: Server-sent events (``text/event-stream``), the framing most wires stream in.
SSE: Final = Framing("sse", "text/event-stream", SSEDecoder, template=EventTemplate.make)


class StreamObserverFactory(Protocol):
    """How a module's :class:`StreamObserver` class is called."""

    def __call__(
        self, facts: RequestFacts | None = None, *, capture_content: bool = False
    ) -> StreamObserver: ...


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
    #: True when the path itself asks for a streamed answer (Bedrock's
    #: ``converse-stream`` and ``invoke-with-response-stream``, Vertex's
    #: ``:streamRawPredict``, Gemini's ``:streamGenerateContent``): the
    #: record's ``stream`` then is true whatever the body says.
    stream: bool = False
    #: Which of the API's path forms matched when it is not the API's own
    #: (:data:`FORMS`): a cloud that carries the wire under its own path
    #: and may ask more of the body (Bedrock and Vertex want Anthropic bodies
    #: that name their ``anthropic_version``). ``None`` for the API's own path.
    form: str | None = None
    #: The ``gen_ai.provider.name`` the path names when its route does not say
    #: one (Vertex AI's ``…/publishers/google/models/…`` paths speak Gemini's
    #: wire for ``gcp.vertex_ai``); ``None`` for the wire's own provider.
    provider: str | None = None
    #: What the path asks the model to do (:data:`~modeltap.evidence.records.OPERATIONS`):
    #: ``compact`` for the Responses API's ``…/responses/compact``, else
    #: ``create``; it becomes the record's ``operation``.
    operation: str = OPERATION_CREATE


#: The path forms of :attr:`EndpointMatch.form`.
FORM_AZURE_DEPLOYMENT = "azure.deployment"
FORM_BEDROCK_INVOKE = "bedrock.invoke"
FORM_VERTEX_RAW_PREDICT = "vertex.raw_predict"
FORMS = (FORM_AZURE_DEPLOYMENT, FORM_BEDROCK_INVOKE, FORM_VERTEX_RAW_PREDICT)


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


def no_header_facts(facts: ResponseFacts, header: Callable[[str], str | None]) -> ResponseFacts:
    """:meth:`Wire.response_header_facts` of a wire whose provider's headers
    say nothing the body does not.

    Returns:
        ``facts``, the same object.
    """
    return facts


def compared_as_sent(body: Json) -> Json:
    """:meth:`Wire.comparable_body` of a wire whose clients make nothing up per run.

    Returns:
        ``body``, the same object.
    """
    return body


def images_without_detail(body: Json, detail: str) -> int:
    """:meth:`WireApi.set_image_detail` of a wire whose images have no detail setting.

    Leaves the body unchanged (Anthropic Messages, Bedrock Converse); the
    audit record keeps ``null`` details.

    Args:
        body: a request body that the wire's ``audit_request`` accepted.
        detail: the detail ``--image-detail`` asks for.

    Returns:
        0, always.
    """
    return 0


@dataclass(frozen=True, slots=True)
class ErrorShape:
    """How an error answer looks to the SDK that speaks a wire.

    modeltap answers in it when it answers itself (a refusal, a timeout), so
    the SDK raises a clear error of its own kind (and may retry a 5xx).

    Attributes:
        name: what the shape is called (``openai``, ``anthropic``,
            ``bedrock``, ``google``; ``both`` for :data:`NEUTRAL_ERRORS`).
        write: the JSON body for ``(message, status, code)``: modeltap's own
            message (never request content), the HTTP status, and the
            machine-readable code (``modeltap_rejected``).
        providers: the route providers whose SDKs read this shape whatever
            the request: a request of no known wire on a route to one of
            them is answered in it (:func:`modeltap.apis.error_shape_for`).
        extra_headers: the headers the SDK reads beside the body, by status,
            for a shape whose body does not say it all (AWS's
            ``x-amzn-ErrorType``); ``None`` for none.
    """

    name: str
    write: Callable[[str, int, str], bytes]
    providers: frozenset[str] = frozenset()
    extra_headers: Callable[[int], dict[str, str]] | None = None

    def body(self, message: str, *, status: int, code: str) -> bytes:
        """The error's JSON body (UTF-8)."""
        return self.write(message, status, code)

    def headers(self, status: int) -> dict[str, str]:
        """The headers the body goes with, ``Content-Type`` included."""
        headers = {"Content-Type": "application/json"}
        if self.extra_headers is not None:
            headers.update(self.extra_headers(status))
        return headers


#: The shape for an answer whose wire and provider are not known: a body both
#: the OpenAI and the Anthropic SDKs read (:func:`~modeltap.rules.errors.neutral_error_body`).
NEUTRAL_ERRORS: Final = ErrorShape("both", neutral_error_body)


@dataclass(frozen=True, slots=True)
class RequestContent:
    """What a request says to the model, in the GenAI conventions' shapes.

    Attributes:
        input_messages: ``gen_ai.input.messages``: the conversation sent, as a
            list of ``{"role", "parts"}`` messages in the order sent; ``None``
            when the body carries none.
        system_instructions: ``gen_ai.system_instructions``: instructions sent
            beside the conversation (a top-level ``system`` or
            ``instructions``) as a list of parts; ``None`` when there are none
            outside the messages (instructions inside them stay there).
        tool_definitions: ``gen_ai.tool.definitions``: the tools offered, as
            ``{"type", "name", ...}`` objects; ``None`` when none were sent.
    """

    input_messages: list[Json] | None = None
    system_instructions: list[Json] | None = None
    tool_definitions: list[Json] | None = None


@dataclass(frozen=True, slots=True)
class ResponseContent:
    """What a response says, for ``gen_ai.output.messages``.

    Attributes:
        output_messages: one ``{"role", "parts", "finish_reason"}`` message
            per choice (candidate) of the response, in order.
    """

    output_messages: list[Json]


class Wire(Protocol):
    """What any wire package offers, whatever its requests are (see the module docstring).

    The members a wire needs whether or not its requests are model turns: an
    MCP server's JSON-RPC over Streamable HTTP (SPEC section 3b) has a name,
    an error shape (JSON-RPC's), framings (JSON and SSE) and a replay's
    comparison too. :class:`WireApi` adds what a model API offers.
    """

    @property
    def NAME(self) -> str:
        """The record's ``api`` value (``openai.chat_completions``)."""
        ...

    @property
    def PROVIDER(self) -> str:
        """``gen_ai.provider.name`` of the provider whose wire this is."""
        ...

    def error_shape(self, provider: str | None) -> ErrorShape:
        """How this wire's SDK reads an error modeltap answers itself.

        Args:
            provider: the route's ``gen_ai.provider.name``, if known: a cloud
                may answer another wire's requests its own way (Bedrock's
                InvokeModel answers Anthropic Messages requests as AWS does,
                and boto3 reads them so).

        Returns:
            The shape; never raises.
        """
        ...

    @property
    def FRAMINGS(self) -> tuple[Framing, ...]:
        """The framings its responses stream in, their events fed to its
        :attr:`StreamObserver` (:func:`modeltap.apis.stream_framing`).

        A response in a framing another wire declares (one not limited to
        streamed requests) is a stream all the same: it is streamed and
        decoded with that framing, never buffered.
        """
        ...

    @property
    def RESPONSE_HEADERS(self) -> tuple[str, ...]:
        """The response headers :meth:`response_header_facts` reads (lower
        case): a recording keeps them."""
        ...

    def response_header_facts(
        self, facts: ResponseFacts, header: Callable[[str], str | None]
    ) -> ResponseFacts:
        """Add what a response's headers say to what its body showed; never raises.

        Asked for this wire's responses, and for every response on a route
        to its :attr:`PROVIDER` (a provider's headers say the same whatever
        wire it carries: Bedrock's request id and InvokeModel's metrics).

        Args:
            facts: what the body or stream showed.
            header: the response header of a (lower-case) name, or ``None``.

        Returns:
            The facts with the headers' additions (``facts`` itself when
            they add nothing).
        """
        ...

    @property
    def WEBSOCKET(self) -> WebSocketMode | None:
        """Its WebSocket mode (SPEC section 3), or ``None``: a handshake to
        its endpoint is then refused (``ws_unsupported_endpoint``)."""
        ...

    def comparable_body(self, body: Json) -> Json:
        """What of a request body a replay compares and hashes
        (:func:`modeltap.replay.recording.input_sha256`): the body without
        what its client makes up on every run (Gemini CLI's call ids), after
        the top-level fields every wire leaves out; never raises.

        Args:
            body: a parsed request body (a JSON object), not changed.
        """
        ...


class WireApi(Wire, Protocol):
    """One wire API package: a :class:`Wire` whose requests are model turns
    (see the module docstring)."""

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
    def OPENAI_API_TYPE(self) -> str | None:
        """``openai.api.type`` for OpenAI's own wires, else ``None``."""
        ...

    @property
    def REPORTED_USAGE(self) -> frozenset[str]:
        """The :class:`~modeltap.evidence.records.Usage` counts this wire reports on every
        response that carries usage.

        A response that leaves one of them out did not report it (coverage
        ``usage`` partial); a count outside the set is never reported by this
        wire (OpenAI has no cache-write count, Anthropic no total and no
        reasoning count) or only when a feature is used (Converse's cache
        counts), so its absence says nothing about completeness. Without
        ``total_tokens`` here, a total is the sum of the counts
        (:func:`modeltap.apis.usage_total`).
        """
        ...

    @property
    def OPERATION_NAME(self) -> str:
        """``gen_ai.operation.name`` of its exchanges' spans, a value of the
        GenAI conventions' list (``chat``; ``generate_content`` for Gemini):
        the span is named ``{operation} {model}``."""
        ...

    def audit_request(self, body: Json, endpoint: EndpointMatch | None = None) -> RequestFacts:
        """Read the audit facts off a parsed request body.

        Args:
            body: the parsed request body.
            endpoint: what the request's path said (:meth:`match_endpoint`):
                the model it names decides the record's ``model`` over the
                body's (which, when sent, is still checked), a path that asks
                for a stream makes ``stream`` true, and a cloud's path form
                may ask more of the body. ``None``: the API's own path,
                naming nothing (the body must name the model).

        Raises:
            Rejected: the body cannot be audited (the rule says why);
                ``missing_model`` when neither the path nor the body names
                a model.
        """
        ...

    def set_image_detail(self, body: Json, detail: str) -> int:
        """Rewrite every image's detail in place; return how many were rewritten."""
        ...

    def observe_json(self, body: object, facts: RequestFacts | None) -> ResponseFacts:
        """Read what a non-streamed response body says; never raises."""
        ...

    @property
    def StreamObserver(self) -> StreamObserverFactory:
        """The class observing its streams, built with the request's facts
        (and ``capture_content=True`` to assemble the output for spans)."""
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

    def usage_totals(self, usage: Usage) -> Usage:
        """Usage as the GenAI conventions and the price table count it; never raises.

        ``input_tokens`` counts every input token, cached ones (read and
        written) included, and ``output_tokens`` every output token, reasoning
        included; the other counts are the provider's. ``events.jsonl`` keeps
        the provider's own numbers: this is for spans, metrics and cost.
        """
        ...
