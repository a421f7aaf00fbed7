"""The wire APIs modeltap audits: one registry, and dispatch to their pure packages.

Each wire API is one package of this package meeting
:class:`~modeltap.apis.contract.WireApi`: its identity (record name,
endpoint, provider, span operation), request audit and refusals, response
and stream observation (its framings, what its headers add), the error shape
its SDK reads, its WebSocket mode if it has one, what a replay compares, and
what telemetry reads from its bodies (content and settings). :data:`APIS` is
the registry, and the rest of modeltap asks it, never a wire by name.

Adding a wire is:

1. its package, ``apis/<wire>/`` (``__init__`` with its identity and the
   contract's names; ``audit``, ``observe``, ``content``; whatever else only
   it needs), which mypy checks against the contract;
2. one entry in :data:`APIS`;
3. its samples under ``tests/data/<wire>/`` (requests, ``refused/``,
   ``responses/``, ``streams/``), which ``tests/test_samples.py`` runs;
4. the JSON Schemas regenerated (``python scripts/make_schemas.py``: their
   ``api`` enum is the registry's; ``tests/test_schemas.py`` fails until the
   committed files match).

A wire that brings a new provider also adds its host, its start-up
``export`` lines and its price-table id (``docs/ARCHITECTURE.md``, "Where to
add"). Nothing else changes: ``tests/test_import_graph.py`` fails if a module outside ``apis/``
imports a wire's package or spells a wire's name.

The pieces the wires share are modules of this package: ``contract`` (the
contract and its value types), ``json_body`` (parsing, duplicate keys,
payload eliding), ``fields`` (field readers), ``message_parts`` (the
conventions' message shapes), ``stream_observer`` (the observers' base),
``cloud_paths`` (where the clouds put a wire), ``unsupported`` (model
endpoints modeltap refuses), ``websocket_mode`` (what a mode hands the core).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Final

from modeltap.apis import (
    anthropic_messages,
    bedrock_converse,
    gemini,
    mcp,
    openai_chat,
    openai_responses,
    unsupported,
)
from modeltap.apis.contract import (
    NEUTRAL_ERRORS,
    SSE,
    EndpointMatch,
    ErrorShape,
    EventDecoder,
    Framing,
    RequestContent,
    ResponseContent,
    StreamObserver,
    Wire,
    WireApi,
)
from modeltap.apis.stream_templates import TemplateMaker
from modeltap.apis.websocket_mode import WebSocketMode
from modeltap.evidence.records import (
    MAX_ID_CHARS,
    USAGE_COUNTS,
    RequestFacts,
    RequestSettings,
    ResponseFacts,
    Usage,
)
from modeltap.rules.errors import Rejected, Rule
from modeltap.rules.routing import Route, decoded_path, routed_path, split_target

#: Every wire API, in the order endpoints are matched. Adding an API is adding
#: its package here (mypy checks it against :class:`WireApi`).
APIS: Final[tuple[WireApi, ...]] = (
    openai_chat,
    openai_responses,
    anthropic_messages,
    bedrock_converse,
    gemini,
)

_BY_NAME: Final[dict[str, WireApi]] = {api.NAME: api for api in APIS}

#: MCP's wire (SPEC section 3b): a :class:`Wire`, not a model API, so not in
#: :data:`APIS`; the core's MCP exchange drives its package
#: (:mod:`modeltap.apis.mcp`) directly.
MCP: Final[Wire] = mcp

#: Every wire's framings by name, and those that are a stream whatever the
#: request (by media type; the first wire's wins).
_FRAMINGS: Final[dict[str, Framing]] = {
    framing.name: framing for api in reversed(APIS) for framing in api.FRAMINGS
}
_STREAMS: Final[dict[str, Framing]] = {
    framing.media_type: framing
    for framing in _FRAMINGS.values()
    if not framing.streamed_requests_only
}

#: How many request paths :func:`match_endpoint` remembers its answer for: a
#: client's few endpoints. Longer paths are not kept (the memo stays small).
_MEMO_PATHS: Final = 256
_MEMO_CHARS: Final = 2048
#: The registry the memo's answers were found with.
_memo_for: tuple[WireApi, ...] = APIS


def api_for_path(method: str, path: str) -> str | None:
    """Return the API a request targets, or ``None`` if it is not a model request.

    Model endpoints are POSTs to a path ending in ``/chat/completions``,
    ``/responses`` (or ``/responses/compact``, a compaction) or ``/messages``,
    whatever the query string, and the clouds' forms that name the model
    (Azure's deployments, Bedrock's
    ``/model/{id}/converse|converse-stream|invoke|invoke-with-response-stream``,
    Vertex's ``…/publishers/anthropic/models/{m}:rawPredict|:streamRawPredict``),
    and Gemini's: a last segment ending in ``:generateContent`` or
    ``:streamGenerateContent`` (the model before it, or in Code Assist's body).
    The path is read as an upstream reads it (see :func:`endpoint_of`), so an
    encoding cannot hide an endpoint.

    Args:
        method: the HTTP method.
        path: the request target as sent, possibly with a query string.
    """
    if method.upper() != "POST":
        return None
    return endpoint_of(path)


def endpoint_of(path: str) -> str | None:
    """Return the API whose endpoint a path names, whatever the method.

    The API of :func:`match_endpoint`, or ``None``.

    Args:
        path: the request target as sent.

    Raises:
        Rejected: as :func:`match_endpoint`.
    """
    found = match_endpoint(path)
    return None if found is None else found.api


def match_endpoint(path: str) -> EndpointMatch | None:
    """Return the API whose endpoint a path names, and the model the path names.

    Decided on the percent-decoded path without ``;params``
    (:func:`~modeltap.rules.routing.routed_path`: ``/v1/chat%2Fcompletions``,
    ``/v1/respons%65s`` and ``/v1/chat;x/completions`` name endpoints), and
    on the decoded path with them kept, as a server that does not strip them
    routes: a path the second reading reads as another endpoint or model
    (``/model/x;y/converse``, ``models/x;y:generateContent``) is refused,
    whatever the first reads. The query string and
    one trailing slash are ignored; each module of :data:`APIS` is asked in
    turn (:meth:`WireApi.match_endpoint`), and compares without regard to
    case (some servers route case-insensitively).

    Args:
        path: the request target as sent.

    Returns:
        The first module's match, or ``None`` when no API's endpoint is named.

    Raises:
        Rejected: ``noncanonical_path`` when the reading with ``;params``
            kept names an endpoint, and another endpoint or model than the
            reading without them; ``missing_model`` when the path names an empty model;
            ``value_too_long`` (``model``) when it names one longer than
            :data:`~modeltap.evidence.records.MAX_ID_CHARS`.
    """
    global _memo_for
    if len(path) > _MEMO_CHARS:
        found = _judge_endpoint(path)
    else:
        if _memo_for is not APIS:  # the registry was replaced (a test adds a module)
            _judged_endpoint.cache_clear()
            _memo_for = APIS
        found = _judged_endpoint(path)
    if isinstance(found, tuple):
        raise Rejected(*found)  # a new instance each time: one is never raised twice
    return found


@functools.lru_cache(maxsize=_MEMO_PATHS)
def _judged_endpoint(path: str) -> EndpointMatch | tuple[Rule, str | None] | None:
    """:func:`match_endpoint`'s answer for a path, a refusal as its rule and detail.

    Memoised: a client sends its few endpoints again and again (each request
    is matched once, by the gate, which keeps the match on the exchange), and
    it is a pure function of the path (:class:`EndpointMatch` is frozen).
    """
    return _judge_endpoint(path)


def _judge_endpoint(path: str) -> EndpointMatch | tuple[Rule, str | None] | None:
    """:func:`match_endpoint`'s answer for a path, uncached (see :func:`_judged_endpoint`)."""
    found, *kept = [_match(reading) for reading in _readings(path)]
    if kept and kept[0] is not None and kept[0] != found:
        # A server keeping ";params" would route to another endpoint or model
        # than one dropping them (or to one only it finds): nothing ambiguous goes.
        return Rule.NONCANONICAL_PATH, "path parameters change the endpoint"
    if found is not None:
        model = found.model_from_path
        if model is not None and not model:
            return Rule.MISSING_MODEL, None
        if model is not None and len(model) > MAX_ID_CHARS:
            return Rule.VALUE_TOO_LONG, "model"
    return found


def _readings(path: str) -> tuple[str, ...]:
    """The paths an upstream may route a request target on, without a trailing slash:
    decoded with its ``;params`` dropped, and (when it has any) decoded with them kept."""
    readings = [routed_path(path)]
    if ";" in split_target(path)[0]:
        readings.append(decoded_path(path))
    return tuple(r[:-1] if r.endswith("/") else r for r in readings)


def _match(bare: str) -> EndpointMatch | None:
    """The first module's match of one reading of a path."""
    for api in APIS:
        found = api.match_endpoint(bare)
        if found is not None:
            return found
    return None


def unsupported_endpoint(path: str) -> str | None:
    """Name the model endpoint a path targets that modeltap cannot audit, if it does.

    A batch, a live or realtime session, a raw prediction of a body modeltap
    does not read, a gRPC generation method, a legacy completion
    (:mod:`modeltap.apis.unsupported`); decided on both readings of the path,
    like :func:`match_endpoint`, and only for a path no API's endpoint matches.

    Args:
        path: the request target as sent.

    Returns:
        A fixed description of the endpoint, or ``None``.
    """
    for reading in _readings(path):
        found = unsupported.unsupported_endpoint(reading)
        if found is not None:
            return found
    return None


def model_from_path(path: str) -> str | None:
    """The model a request path names (decoded), for an API that puts it there.

    Args:
        path: the request target as it goes upstream.

    Returns:
        :attr:`EndpointMatch.model_from_path`, or ``None`` (no model in the
        path, or no endpoint).

    Raises:
        Rejected: as :func:`match_endpoint`.
    """
    found = match_endpoint(path)
    return None if found is None else found.model_from_path


def provider_for(
    route: Route | None,
    api: str,
    path: str | None = None,
    *,
    endpoint: EndpointMatch | None = None,
) -> str:
    """The record's ``provider``: the route's real provider, else the path's, else the wire's.

    Args:
        route: the route the request went through (its ``provider`` was said
            with ``--route NAME=URL,provider=P`` or found from its host), or
            ``None``.
        api: the record's ``api`` value.
        path: the request target, when known: a path may name its provider
            (:attr:`EndpointMatch.provider`, Vertex AI's Gemini paths).
        endpoint: the path's match, when already made (then ``path`` is not
            matched again).

    Returns:
        A ``gen_ai.provider.name`` value: the route's provider, else the
        path's, else the :attr:`Wire.PROVIDER` of the API (a local stub
        speaking chat is ``openai``).

    Raises:
        KeyError: for an unknown API name.
    """
    if route is not None and route.provider is not None:
        return route.provider
    found = endpoint
    if found is None and path is not None:
        try:
            found = match_endpoint(path)
        except Rejected:
            found = None
    if found is not None and found.api == api and found.provider is not None:
        return found.provider
    return module_for(api).PROVIDER


def error_shape_for(api: str | None, route: Route | None) -> ErrorShape:
    """The error shape an agent expects when modeltap answers itself.

    The wire the request speaks decides, on the route's real provider
    (:meth:`Wire.error_shape`: on Bedrock, InvokeModel answers Anthropic
    requests the AWS way). A request of no known wire takes the shape of its
    route's provider (:attr:`ErrorShape.providers`), else one that both the
    OpenAI and the Anthropic SDKs read (:data:`~modeltap.apis.contract.NEUTRAL_ERRORS`).

    Args:
        api: the record's ``api``, or ``None`` (not a model request).
        route: the route the request went through, or ``None``.

    Returns:
        The shape (its ``name``: ``openai``, ``anthropic``, ``bedrock``,
        ``google``, ``jsonrpc`` for MCP's, or ``both``).
    """
    provider = route.provider if route is not None else None
    if api == MCP.NAME:
        return MCP.error_shape(provider)
    module = find(api)
    if module is not None:
        return module.error_shape(provider)
    for module in APIS:
        shape = module.error_shape(provider)
        if provider in shape.providers:
            return shape
    return NEUTRAL_ERRORS


def stream_framing(
    content_type: str,
    api: str | None,
    facts: RequestFacts | None,
    status: int,
    *,
    stream: bool | None = None,
) -> Framing | None:
    """How a response streams, to be observed piece by piece as it arrives.

    The framings of the request's wire (:attr:`Wire.FRAMINGS`) are
    matched first, then any wire's that is a stream whatever the request: a
    stream is never buffered, whoever answers it.

    Args:
        content_type: its ``Content-Type`` (any case, parameters allowed).
        api: the request's API (``None``: not a model request).
        facts: the request's audit facts (``None``: not audited).
        status: the response's HTTP status (an error answers with one object).
        stream: whether the request asked for a stream, where there are no
            ``facts`` to say it (a recorded exchange read back).

    Returns:
        The framing, or ``None`` for a body read whole (an error body of a
        streamed request included).
    """
    media = content_type.split(";", 1)[0].strip().lower()
    module = find(api)
    streamed = stream if stream is not None else facts is not None and facts.stream
    asked = streamed and 200 <= status < 300
    for framing in module.FRAMINGS if module is not None else ():
        if framing.media_type == media and (asked or not framing.streamed_requests_only):
            return framing
    return _STREAMS.get(media)


def decoder_for(framing: str) -> EventDecoder:
    """A new decoder of the framing :func:`stream_framing` named (SSE's for a name no
    wire declares)."""
    return _FRAMINGS.get(framing, SSE).decoder()


def template_for(framing: str) -> TemplateMaker | None:
    """How the framing :func:`decoder_for` decodes makes templates of plain events
    (:mod:`modeltap.apis.stream_templates`), or None."""
    return _FRAMINGS.get(framing, SSE).template


def with_header_facts(
    facts: ResponseFacts,
    api: str | None,
    provider: str | None,
    header: Callable[[str], str | None],
) -> ResponseFacts:
    """Add what a response's headers say to what its body showed.

    Read by the request's wire and by the wire of the route's provider
    (:meth:`Wire.response_header_facts`: Bedrock's headers say the same
    on InvokeModel as on Converse).

    Args:
        facts: what the body or stream showed.
        api: the exchange's API, if any.
        provider: its route's ``gen_ai.provider.name``, if known.
        header: the response header of a (lower-case) name, or ``None``.

    Returns:
        The facts with the headers' additions (``facts`` itself when they
        add nothing).
    """
    served = next((module for module in APIS if provider == module.PROVIDER), None)
    for module in dict.fromkeys(m for m in (find(api), served) if m is not None):
        facts = module.response_header_facts(facts, header)
    return facts


def response_headers() -> tuple[str, ...]:
    """Every response header a wire reads facts from (:attr:`Wire.RESPONSE_HEADERS`),
    in registry order: a recording keeps them."""
    return tuple(dict.fromkeys(name for api in APIS for name in api.RESPONSE_HEADERS))


def websocket_mode(api: str | None) -> WebSocketMode | None:
    """The WebSocket mode of a handshake's API (:attr:`Wire.WEBSOCKET`), or
    ``None`` for an API without one (or no API)."""
    module = find(api)
    return None if module is None else module.WEBSOCKET


def api_for_ws_path(path: str) -> str | None:
    """Return the API a WebSocket handshake path names (see :func:`endpoint_of`)."""
    return endpoint_of(path)


def is_models_listing(method: str, path: str) -> bool:
    """True for ``GET .../models`` (and ``.../models/{id}``), passed through unaudited."""
    bare = path.split("?", 1)[0].rstrip("/")
    parts = bare.split("/")
    return method.upper() == "GET" and ("models" in parts[-2:])


def module_for(api: str) -> WireApi:
    """Return the module implementing ``api`` (a record's ``api`` value).

    Raises:
        KeyError: for an unknown API name.
    """
    return _BY_NAME[api]


def reported_usage(api: str | None) -> tuple[str, ...]:
    """The usage counts a wire can carry, in :class:`~modeltap.evidence.records.Usage` order.

    Args:
        api: a record's ``api`` value.

    Returns:
        The names of :attr:`WireApi.REPORTED_USAGE`; every count for an
        unknown or absent API (nothing is known about what it leaves out).
    """
    module = find(api)
    if module is None:
        return USAGE_COUNTS
    return tuple(name for name in USAGE_COUNTS if name in module.REPORTED_USAGE)


def usage_total(api: str | None, usage: Usage) -> tuple[int | None, bool]:
    """A turn's total tokens: as reported, or the sum of its parts.

    A reported total is taken as it is; a wire with a total field
    (OpenAI's ``total_tokens``) that left it out has none. A wire without
    one (Anthropic Messages) has a total all the same: the sum
    of every count it reports, input and output as the GenAI conventions
    count them (:meth:`WireApi.usage_totals`: Anthropic's input plus its
    cache reads and writes, plus output). It is known only when every one of
    those counts was reported; unknown stays unknown.

    Args:
        api: the record's ``api`` value.
        usage: the turn's usage as the provider reported it.

    Returns:
        ``(total, summed)``: the total or ``None``, and whether modeltap
        summed it (the provider reported no total).
    """
    module = find(api)
    if usage.total_tokens is not None or module is None:
        return usage.total_tokens, False
    if "total_tokens" in module.REPORTED_USAGE:
        return None, False  # the wire has a total and this response left it out
    if any(getattr(usage, name) is None for name in module.REPORTED_USAGE):
        return None, False
    counted = module.usage_totals(usage)
    if counted.input_tokens is None or counted.output_tokens is None:
        return None, False
    return counted.input_tokens + counted.output_tokens, True


def find(api: str | None) -> WireApi | None:
    """Return the module implementing ``api``, or ``None`` for an unknown or absent name."""
    return _BY_NAME.get(api) if api is not None else None


__all__ = [
    "APIS",
    "MCP",
    "EndpointMatch",
    "ErrorShape",
    "EventDecoder",
    "Framing",
    "RequestContent",
    "RequestFacts",
    "RequestSettings",
    "ResponseContent",
    "ResponseFacts",
    "StreamObserver",
    "Wire",
    "WireApi",
    "api_for_path",
    "api_for_ws_path",
    "decoder_for",
    "endpoint_of",
    "error_shape_for",
    "find",
    "is_models_listing",
    "match_endpoint",
    "model_from_path",
    "module_for",
    "provider_for",
    "reported_usage",
    "response_headers",
    "stream_framing",
    "template_for",
    "unsupported_endpoint",
    "usage_total",
    "websocket_mode",
    "with_header_facts",
]
