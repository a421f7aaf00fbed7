"""Model endpoints modeltap cannot audit: named, so they are refused, never passed.

SPEC section 2: "whatever an upstream could read as a model request is audited
or refused". The wire modules (:data:`modeltap.apis.APIS`) find the endpoints
modeltap audits; this module finds the endpoints that also run a model on
input the request carries, but in a form the audit cannot read:

- **batches**: Gemini's ``:batchGenerateContent``, OpenAI's and Azure's
  ``/batches``, Anthropic's ``/messages/batches``, Vertex AI's
  ``batchPredictionJobs``: each runs many model requests that no audit line
  describes;
- **other generation methods of Google's APIs**: ``:generateAnswer`` (the AQA
  model), the legacy ``:generateText`` and ``:generateMessage``, the
  Interactions API (``/v1beta/interactions``);
- **raw predictions**: Vertex AI's ``:rawPredict`` and ``:streamRawPredict``
  of anything the Anthropic wire module did not match (other publishers'
  models such as Mistral's or Llama's, a deployed endpoint), whose body is a
  provider's own;
- **bidirectional streams**: Gemini's Live API (``BidiGenerateContent``, the
  live Interactions socket), OpenAI's and Azure's Realtime API, Bedrock's
  ``invoke-with-bidirectional-stream``: their messages are not audited
  one by one;
- **gRPC**: a ``/{package}.{Service}/{Method}`` path naming a generation
  method (the Vertex AI SDK's default transport), whose body is protobuf;
- **legacy completions**: ``/completions`` that is not ``/chat/completions``
  (OpenAI's and Azure's Completions API, fill-in-the-middle), Anthropic's
  ``/complete``;
- **runs of stored settings**: the Assistants API's runs (``/threads/runs``,
  ``/threads/{id}/runs``, ``…/submit_tool_outputs``), which run a model with
  an assistant's stored instructions and tools, OpenAI's eval runs
  (``/evals/{id}/runs``, a model over a dataset), and Bedrock's
  ``/async-invoke`` (a model input run in the background).

Embeddings, token counting, file uploads, listings and other requests that
run no generation turn are not named here: they pass as ``unaudited`` (SPEC
section 2), and ``--strict`` refuses them too. Decided on the routed path
(percent-decoded, ``;params`` dropped, no query, no trailing slash), without
regard to case, like the endpoints modeltap audits.
"""

from __future__ import annotations

import re
from typing import Final

#: Custom methods (``…/{resource}:{method}``) that run a model modeltap cannot
#: audit, lower case, with the fixed text a refusal names.
_METHODS: Final = {
    "batchgeneratecontent": "batchGenerateContent (a batch of model requests)",
    "generateanswer": "generateAnswer",
    "generatetext": "generateText (legacy)",
    "generatemessage": "generateMessage (legacy)",
    "rawpredict": "rawPredict of a model whose body modeltap does not audit",
    "streamrawpredict": "streamRawPredict of a model whose body modeltap does not audit",
    "directrawpredict": "directRawPredict",
    "streamdirectrawpredict": "streamDirectRawPredict",
    "bidigeneratecontent": "BidiGenerateContent (Live API)",
    "bidigeneratecontentconstrained": "BidiGenerateContent (Live API)",
}
#: gRPC methods (``/{package}.{Service}/{Method}``) that run a model, lower case.
_GRPC_METHODS: Final = frozenset(
    {
        "generatecontent",
        "streamgeneratecontent",
        "chatcompletions",
        "streamchatcompletions",
        *_METHODS,
    }
)
#: Vertex AI's token counting for Anthropic models: a ``:rawPredict`` that runs no turn.
_COUNT_TOKENS: Final = "count-tokens"
#: A version segment (``v1``, ``v1beta``).
_VERSION: Final = re.compile(r"v\d+[a-z0-9]*")
#: Collections whose creation runs a batch of model requests.
_BATCH_COLLECTIONS: Final = frozenset({"batches", "batchpredictionjobs"})


def unsupported_endpoint(routed: str) -> str | None:
    """Name the model endpoint a routed path targets that modeltap cannot audit.

    Call it for a path no wire module matched (an audited endpoint wins:
    Anthropic's ``:rawPredict`` on Vertex is audited).

    Args:
        routed: the routed path (:func:`modeltap.rules.routing.routed_path`, without
            its trailing slash).

    Returns:
        A fixed description of the endpoint (never text from the path), or
        ``None`` when the path names none of them.
    """
    segments = routed.lower().split("/")
    last = segments[-1]
    before = segments[-2] if len(segments) > 1 else ""
    resource, colon, method = last.rpartition(":")
    if colon and method in _METHODS and resource != _COUNT_TOKENS:
        return _METHODS[method]
    grpc = _grpc_method(before, last)
    if grpc is not None:
        return _METHODS.get(grpc) or f"gRPC {grpc}"
    if last in _BATCH_COLLECTIONS:
        return "a batch of model requests"
    if "realtime" in segments:
        tail = segments[segments.index("realtime") + 1 :]
        # The socket, a WebRTC call's offer, a SIP call accepted with its session.
        if not tail or tail == ["calls"] or (len(tail) == 3 and tail[::2] == ["calls", "accept"]):
            return "Realtime API"
    if _VERSION.fullmatch(before) and last == "interactions":
        return "Interactions API"
    if last == "live" and before == "interactions":
        return "Interactions API (live)"
    if last == "invoke-with-bidirectional-stream" and "model" in segments:
        return "InvokeModelWithBidirectionalStream"
    if "threads" in segments and (last == "runs" or last == "submit_tool_outputs"):
        return "Assistants run"
    if last == "runs" and len(segments) > 2 and segments[-3] == "evals":
        return "eval run"
    if last == "async-invoke":
        return "StartAsyncInvoke"
    if last == "completions" and before != "chat":
        return "legacy completions"
    if last == "complete" and _VERSION.fullmatch(before):
        return "legacy text completions"
    return None


def _grpc_method(before: str, last: str) -> str | None:
    """The generation method of a gRPC-style path, if it is one.

    gRPC names a method ``/{package}.{Service}/{Method}``; Google's Live API
    puts the whole name in one segment (``google.ai….GenerativeService.BidiGenerateContent``).
    """
    if "." in last:
        service, _, method = last.rpartition(".")
    else:
        service, method = before, last
    if "." not in service or not service.endswith("service"):
        return None
    return method if method in _GRPC_METHODS else None
