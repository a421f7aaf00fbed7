"""What Bedrock Runtime says outside a wire's bodies, whatever wire it carries.

Errors are AWS's (:data:`ERROR_SHAPE`): ``{"message"}``, the type in the
``x-amzn-ErrorType`` header, which boto3 reads as a ``ClientError``'s code;
Converse and InvokeModel answer so alike. Non-streamed answers carry facts
in headers (:func:`with_response_headers`): the request id
(``x-amzn-RequestId``: Converse bodies have no id) and InvokeModel's
invocation metrics. (A stream's metrics, in its last chunk, are
the Anthropic observer's to read: :mod:`modeltap.apis.anthropic_messages.observe`.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Final

import orjson

from modeltap.apis.contract import ErrorShape
from modeltap.evidence.records import MAX_ID_CHARS, InvocationMetrics, ResponseFacts

#: Bedrock Runtime's ``gen_ai.provider.name``.
PROVIDER: Final = "aws.bedrock"

#: The ``x-amzn-ErrorType`` of a Bedrock-shaped error, by HTTP status (AWS's own names).
_AWS_ERROR_TYPES: Final = {
    413: "ValidationException",
    500: "InternalServerException",
    502: "InternalServerException",
    503: "ServiceUnavailableException",
    504: "ModelTimeoutException",
}


def _aws_error(message: str, status: int, code: str) -> bytes:
    """AWS's own body, ``{"message"}``: the type is ``x-amzn-ErrorType``'s."""
    return orjson.dumps({"message": message})


def _aws_error_type(status: int) -> dict[str, str]:
    """``x-amzn-ErrorType``: ``ValidationException`` for a refusal, the service's
    names for 5xx answers."""
    return {"x-amzn-ErrorType": _AWS_ERROR_TYPES.get(status, "ValidationException")}


#: The errors AWS SDKs read (boto3 raises a ``ClientError`` with the header's code).
ERROR_SHAPE: Final = ErrorShape("bedrock", _aws_error, frozenset({PROVIDER}), _aws_error_type)

#: Response headers of InvokeModel: its invocation metrics, and the request id.
HEADER_LATENCY = "x-amzn-bedrock-invocation-latency"
HEADER_INPUT = "x-amzn-bedrock-input-token-count"
HEADER_OUTPUT = "x-amzn-bedrock-output-token-count"
HEADER_REQUEST_ID = "x-amzn-requestid"
#: Every header :func:`with_response_headers` reads.
RESPONSE_HEADERS: Final = (HEADER_REQUEST_ID, HEADER_LATENCY, HEADER_INPUT, HEADER_OUTPUT)


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
    request_id = header(HEADER_REQUEST_ID)
    if facts.response_id is None and request_id and len(request_id) <= MAX_ID_CHARS:
        changes["response_id"] = request_id
    if facts.invocation_metrics is None:
        metrics = InvocationMetrics(
            input_tokens=_header_count(header(HEADER_INPUT)),
            output_tokens=_header_count(header(HEADER_OUTPUT)),
            latency_ms=_header_count(header(HEADER_LATENCY)),
        )
        if metrics != InvocationMetrics():
            changes["invocation_metrics"] = metrics
    return dataclasses.replace(facts, **changes) if changes else facts
