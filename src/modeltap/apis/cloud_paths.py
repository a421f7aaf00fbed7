"""Where the clouds put a wire under their own paths, and the model they name there.

Azure OpenAI, AWS Bedrock and Google Vertex carry the OpenAI and Anthropic
wires (and Bedrock its own Converse) under paths that name the model
(SPEC section 2, "More wires"). These readers find those paths; the API
modules call them from their ``match_endpoint``. Each takes the routed path
(:meth:`~modeltap.apis.contract.WireApi.match_endpoint`: percent-decoded once,
``;params`` dropped, no query, no trailing slash), compares the fixed parts
without regard to case and keeps the model's own case.

The model is read off the decoded path: boto3 percent-encodes the whole
Bedrock model id (``us.anthropic.claude-sonnet-4-5-20250929-v1%3A0``, an
inference profile ARN with ``%2F``), the Anthropic SDKs and Claude Code keep
``:`` and encode only ``/``; both decode to the same id, which is what the
record holds. The path itself is forwarded as sent.
"""

from __future__ import annotations

import re
from typing import Final

from modeltap.apis.contract import (
    FORM_AZURE_DEPLOYMENT,
    FORM_BEDROCK_INVOKE,
    FORM_VERTEX_RAW_PREDICT,
    EndpointMatch,
)

#: Azure OpenAI's deployment form: ``/openai/deployments/{deployment}/chat/completions``
#: (the AzureOpenAI client also builds it under ``/openai/v1/``), and its "On Your
#: Data" form ``…/{deployment}/extensions/chat/completions`` (the same deployment
#: runs). The deployment is everything between the first ``/deployments/`` and the
#: endpoint: a client that encodes a ``/`` in it sends one name, not two segments.
_AZURE_CHAT: Final = re.compile(
    r"/deployments/(?P<model>.*?)(?:/extensions)?/chat/completions\Z", re.IGNORECASE
)

#: Bedrock Runtime: ``/model/{modelId}/{operation}``; an ARN model id holds ``/`` once decoded.
_BEDROCK: Final = re.compile(
    r"/model/(?P<model>.*)/(?P<op>converse-stream|converse|invoke-with-response-stream|invoke)\Z",
    re.IGNORECASE,
)

#: Bedrock's operations that answer as a stream (``application/vnd.amazon.eventstream``).
_BEDROCK_STREAMS: Final = frozenset({"converse-stream", "invoke-with-response-stream"})

#: A Bedrock ARN: ``arn:{partition}:bedrock:{region}:{account}:{type}/{id}``.
_BEDROCK_ARN: Final = re.compile(
    r"arn:[a-z-]+:bedrock:[^:]*:[^:]*:(?P<type>[a-z-]+)/(?P<id>.+)\Z", re.IGNORECASE
)
#: ARN resource types whose id starts with the foundation model it runs.
_MODEL_ARN_TYPES: Final = frozenset({"foundation-model", "inference-profile", "custom-model"})

#: The geography prefixes of cross-region inference profiles (``us.anthropic.…``).
_GEOGRAPHIES: Final = frozenset({"us", "eu", "apac", "global", "us-gov", "jp", "au", "ca"})

#: Vertex AI's Anthropic models: ``…/publishers/anthropic/models/{model}:rawPredict``
#: and ``:streamRawPredict`` (``{model}`` such as ``claude-sonnet-4-5@20250929``).
_VERTEX_ANTHROPIC: Final = re.compile(
    r"/publishers/anthropic/models/(?P<model>[^/]*):(?P<verb>rawPredict|streamRawPredict)\Z",
    re.IGNORECASE,
)

#: Vertex's token counting for Anthropic models (``count-tokens:rawPredict``): not a
#: model turn (it generates nothing), so it passes as ``unaudited``.
VERTEX_COUNT_TOKENS: Final = "count-tokens"


def azure_deployment_chat(path: str, api: str) -> EndpointMatch | None:
    """Match Azure's deployment form of Chat Completions.

    Args:
        path: the routed path.
        api: the record's ``api`` to name (``openai.chat_completions``).

    Returns:
        The match with the deployment as ``model_from_path`` (form
        ``azure.deployment``), or ``None``.
    """
    found = _AZURE_CHAT.search(path)
    if found is None:
        return None
    return EndpointMatch(api, found["model"], form=FORM_AZURE_DEPLOYMENT)


def bedrock_operation(path: str) -> tuple[str, str] | None:
    """The Bedrock Runtime operation a path names, and its model id.

    Args:
        path: the routed path.

    Returns:
        ``(model id, operation)`` with the operation in lower case
        (``converse``, ``converse-stream``, ``invoke``,
        ``invoke-with-response-stream``), or ``None``. ``count-tokens`` and
        the control plane (``/inference-profiles``) are not operations here:
        they run no model.
    """
    found = _BEDROCK.search(path)
    if found is None:
        return None
    return found["model"], found["op"].lower()


def bedrock_invoke(path: str, api: str) -> EndpointMatch | None:
    """Match Bedrock's InvokeModel and InvokeModelWithResponseStream.

    Args:
        path: the routed path.
        api: the record's ``api`` to name (``anthropic.messages``: the only
            native body modeltap can audit).

    Returns:
        The match (form ``bedrock.invoke``; ``stream`` for
        ``invoke-with-response-stream``), or ``None``.
    """
    found = bedrock_operation(path)
    if found is None or not found[1].startswith("invoke"):
        return None
    model, op = found
    return EndpointMatch(api, model, stream=op in _BEDROCK_STREAMS, form=FORM_BEDROCK_INVOKE)


def bedrock_converse(path: str, api: str) -> EndpointMatch | None:
    """Match Bedrock's Converse and ConverseStream.

    Args:
        path: the routed path.
        api: the record's ``api`` to name (``bedrock.converse``).

    Returns:
        The match (``stream`` for ``converse-stream``), or ``None``.
    """
    found = bedrock_operation(path)
    if found is None or not found[1].startswith("converse"):
        return None
    model, op = found
    return EndpointMatch(api, model, stream=op in _BEDROCK_STREAMS)


def vertex_anthropic(path: str, api: str) -> EndpointMatch | None:
    """Match Vertex AI's ``:rawPredict`` and ``:streamRawPredict`` for Anthropic models.

    Args:
        path: the routed path.
        api: the record's ``api`` to name (``anthropic.messages``).

    Returns:
        The match (form ``vertex.raw_predict``, ``@`` kept in the model;
        ``stream`` for ``:streamRawPredict``), or ``None``, also for
        ``count-tokens:rawPredict``.
    """
    found = _VERTEX_ANTHROPIC.search(path)
    if found is None:
        return None
    model = found["model"]
    if model.lower() == VERTEX_COUNT_TOKENS:
        return None
    stream = found["verb"].lower() == "streamrawpredict"
    return EndpointMatch(api, model, stream=stream, form=FORM_VERTEX_RAW_PREDICT)


def bedrock_model_family(model: str) -> str | None:
    """The model family a Bedrock model id names, as far as the id says.

    A foundation model id is ``{provider}.{model}`` (``anthropic.claude-…``,
    ``amazon.nova-pro-v1:0``, ``meta.llama3-…``), a cross-region inference
    profile puts a geography in front (``us.``, ``eu.``, ``global.``, …),
    and the ARNs of foundation models, inference profiles and custom models
    (a base model's id, then the model's own) hold one of those. Other ARNs
    (application inference profiles, provisioned throughput, imported
    models) name a resource whose model the id does not show.

    Args:
        model: the decoded model id of the path.

    Returns:
        The provider part in lower case (``anthropic``, ``amazon``, …),
        ``"prompt"`` for a Prompt management ARN (the stored prompt supplies
        model and messages), or ``None`` when the id does not say.
    """
    arn = _BEDROCK_ARN.fullmatch(model)
    if arn is not None:
        kind = arn["type"].lower()
        if kind == "prompt":
            return "prompt"
        if kind not in _MODEL_ARN_TYPES:
            return None
        model = arn["id"]
    pieces = model.lower().split(".")
    if len(pieces) < 2:
        return None
    # With a geography prefix or not, the provider is one of the first two
    # pieces: "anthropic" there is all the audit needs to know.
    if "anthropic" in pieces[:2]:
        return "anthropic"
    return pieces[1] if pieces[0] in _GEOGRAPHIES else pieces[0]
