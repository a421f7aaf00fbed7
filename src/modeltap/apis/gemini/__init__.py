"""Gemini ``generateContent`` (``gemini.generate_content``): one wire, one package.

Endpoints (SPEC section 2, "More wires"): a POST whose last path segment ends
in ``:generateContent`` or ``:streamGenerateContent`` (the custom-method
form of Google's APIs), under any prefix: the Developer API
(``/v1[beta]/models/{model}:…``), Vertex AI
(``/v1*/projects/{p}/locations/{l}/publishers/google/models/{model}:…`` and
the express form ``/v1*/publishers/google/models/{model}:…``, provider
``gcp.vertex_ai``), tuned models and endpoints (``tunedModels/{m}``,
``endpoints/{e}``: the model is that resource name), and Gemini CLI's Code
Assist wrapper (``/v1internal:generateContent``, no model in the path).
The model named by the path is what the upstream serves; the path also
says whether a stream is asked for (``:streamGenerateContent``).
``:countTokens`` and Code Assist's other methods are not model requests.

The package meets :class:`~modeltap.apis.contract.WireApi`: its identity and
endpoint here, both spellings of its keys in :mod:`~modeltap.apis.gemini.spelling`,
the request side (two body forms) in :mod:`~modeltap.apis.gemini.audit`,
the response side (three framings) in :mod:`~modeltap.apis.gemini.observe`,
and what telemetry reads in :mod:`~modeltap.apis.gemini.content`.
"""

from __future__ import annotations

import re
from typing import Final

import orjson

from modeltap.apis.contract import SSE, EndpointMatch, ErrorShape, Framing, no_header_facts
from modeltap.apis.gemini.audit import audit_request, set_image_detail
from modeltap.apis.gemini.content import (
    request_content,
    request_settings,
    response_content,
    usage_totals,
)
from modeltap.apis.gemini.observe import FINISH_REASONS, StreamObserver, observe_json, unwrap
from modeltap.apis.gemini.replay import comparable_body
from modeltap.wire.json_array import JsonArrayDecoder

#: The record's ``api``.
NAME: Final = "gemini.generate_content"
PROVIDER: Final = "gcp.gemini"
#: The provider of Vertex AI's paths (``…/publishers/…``, ``…/projects/…/locations/…``).
VERTEX_PROVIDER: Final = "gcp.vertex_ai"
OPENAI_API_TYPE: Final = None
#: ``usageMetadata``'s ``promptTokenCount``, ``candidatesTokenCount`` and
#: ``totalTokenCount``. ``cachedContentTokenCount`` comes only with cached
#: content and ``thoughtsTokenCount`` only from thinking models, and Gemini has
#: no cache-write count: their absence says nothing about completeness.
REPORTED_USAGE: Final = frozenset({"input_tokens", "output_tokens", "total_tokens"})
#: Its spans' ``gen_ai.operation.name``: the conventions' ``generate_content``
#: ("multimodal content generation operation such as Gemini Generate Content").
OPERATION_NAME: Final = "generate_content"
#: It has no WebSocket mode.
WEBSOCKET: Final = None
#: ``:streamGenerateContent`` answers as one JSON array whose elements arrive
#: one by one, or as SSE with ``?alt=sse``; a whole ``generateContent`` answer
#: (and an error) is one JSON object of the same media type.
JSON_ARRAY: Final = Framing(
    "json_array", "application/json", JsonArrayDecoder, streamed_requests_only=True
)
FRAMINGS: Final = (SSE, JSON_ARRAY)
RESPONSE_HEADERS: Final[tuple[str, ...]] = ()
response_header_facts: Final = no_header_facts

#: The model-running methods, lower case, and whether each streams.
_METHODS: Final = {"generatecontent": False, "streamgeneratecontent": True}
#: A version segment (``v1``, ``v1beta``, ``v1internal``): a method on it names no model.
_VERSION: Final = re.compile(r"v\d+[a-z0-9]*", re.IGNORECASE)


def match_endpoint(path: str) -> EndpointMatch | None:
    """Match ``…/{resource}:generateContent`` or ``:streamGenerateContent``.

    The model is the segment after the last ``models`` (several segments when
    a decoded ``%2F`` split it; ``tunedModels/{m}`` keeps its collection), else
    the last ``{collection}/{id}`` pair; a method on a version segment
    (``/v1internal:generateContent``) names none (Code Assist's body does).
    See :meth:`WireApi.match_endpoint`.
    """
    head, _, last = path.rpartition("/")
    resource, colon, method = last.rpartition(":")
    stream = _METHODS.get(method.lower()) if colon else None
    if stream is None:
        return None
    names = [*head.split("/"), resource]
    lowered = [name.lower() for name in names]
    model: str | None
    collections = [i for i, name in enumerate(lowered[:-1]) if name in ("models", "tunedmodels")]
    found = collections[-1] if collections else -1
    if found >= 0:
        rest = "/".join(names[found + 1 :])
        model = rest if lowered[found] == "models" or not rest else f"{names[found]}/{rest}"
    elif _VERSION.fullmatch(resource) or not resource:
        model = None if resource else ""
    elif len(names) >= 2 and names[-2] and not _VERSION.fullmatch(names[-2]):
        model = f"{names[-2]}/{resource}"
    else:
        model = resource
    vertex = "publishers" in lowered or ("projects" in lowered and "locations" in lowered)
    return EndpointMatch(NAME, model, stream, provider=VERTEX_PROVIDER if vertex else None)


#: The ``google.rpc.Code`` name Google's APIs give each HTTP status modeltap answers.
_GOOGLE_STATUS: Final = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    413: "INVALID_ARGUMENT",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _google_error(message: str, status: int, code: str) -> bytes:
    """Google APIs' ``{"error": {code, message, status, details}}``, which the
    google-genai SDKs and Gemini CLI read (the reason in an ``ErrorInfo``)."""
    error = {
        "code": status,
        "message": message,
        "status": _GOOGLE_STATUS.get(status, "INTERNAL" if status >= 500 else "UNKNOWN"),
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": code,
                "domain": "modeltap",
            }
        ],
    }
    return orjson.dumps({"error": error})


#: The errors Google's Gemini clients read. Vertex AI is left out of its
#: providers: a Vertex route also carries Anthropic's wire, so a request of no
#: known wire there is answered in the shape both SDKs read.
ERROR_SHAPE: Final = ErrorShape("google", _google_error, frozenset({PROVIDER}))


def error_shape(provider: str | None) -> ErrorShape:
    """Google's, on every route (Vertex AI's included)."""
    return ERROR_SHAPE


__all__ = [
    "ERROR_SHAPE",
    "FINISH_REASONS",
    "FRAMINGS",
    "JSON_ARRAY",
    "NAME",
    "OPENAI_API_TYPE",
    "OPERATION_NAME",
    "PROVIDER",
    "REPORTED_USAGE",
    "RESPONSE_HEADERS",
    "VERTEX_PROVIDER",
    "WEBSOCKET",
    "StreamObserver",
    "audit_request",
    "comparable_body",
    "error_shape",
    "match_endpoint",
    "observe_json",
    "request_content",
    "request_settings",
    "response_content",
    "response_header_facts",
    "set_image_detail",
    "unwrap",
    "usage_totals",
]
