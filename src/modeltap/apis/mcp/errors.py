"""MCP's error shape: what modeltap answers an MCP client with (pure).

An MCP client reads an answer it did not get from the server as JSON-RPC: a
refused message is answered with a JSON-RPC error object for its id (a batch:
one per request; ``id: null`` when no request id was read), under the HTTP
status of the rule, as the official SDK's server answers a message it cannot
take. The message names the rule and says why in modeltap's fixed words
(``modeltap refused this message: mcp_header_mismatch (Mcp-Name): ...``),
never content; ``error.data.rule`` carries the rule for programs.

Codes: JSON-RPC's own where they fit (parse error, invalid request, invalid
params), MCP's ``HEADER_MISMATCH`` (-32020) for a header that contradicts the
body, and -32005, in the band JSON-RPC leaves to implementations
(-32000..-32019), for a refusal by policy (a session ended, the tool-call
budget, the audit file, fail-closed).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import orjson

from modeltap.rules.errors import RULES, Rejected, Rule

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
#: MCP 2026-07-28's code for headers that do not match the body (the SDK's).
HEADER_MISMATCH: Final = -32020
#: modeltap's own: refused by policy, not for the message's form.
REFUSED_BY_POLICY: Final = -32005

_CODES: Final[dict[Rule, int]] = {
    Rule.INVALID_JSON: PARSE_ERROR,
    Rule.UNDECODABLE_CONTENT_ENCODING: PARSE_ERROR,
    Rule.UNSUPPORTED_CHARSET: PARSE_ERROR,
    Rule.MCP_NOT_JSONRPC: INVALID_REQUEST,
    Rule.DUPLICATE_KEY: INVALID_REQUEST,
    Rule.CASE_VARIANT_KEY: INVALID_REQUEST,
    Rule.VALUE_TOO_LONG: INVALID_REQUEST,
    Rule.NONCANONICAL_PATH: INVALID_REQUEST,
    Rule.METHOD_OVERRIDE: INVALID_REQUEST,
    Rule.REQUEST_TRAILERS: INVALID_REQUEST,
    Rule.MCP_MALFORMED_PARAMS: INVALID_PARAMS,
    Rule.MCP_HEADER_MISMATCH: HEADER_MISMATCH,
    Rule.AUDIT_INTERNAL_ERROR: INTERNAL_ERROR,
}


def error_code(rule: Rule) -> int:
    """The JSON-RPC error code a refusal by ``rule`` is answered with."""
    return _CODES.get(rule, REFUSED_BY_POLICY)


def refusal_message(rejected: Rejected) -> str:
    """The error's message: the rule, its fixed detail, and why (never content)."""
    where = f" ({rejected.detail})" if rejected.detail else ""
    return f"modeltap refused this message: {rejected.rule}{where}: {RULES[rejected.rule][1]}"


def error_object(
    jsonrpc_id: int | str | None, code: int, message: str, data: object
) -> dict[str, object]:
    """One JSON-RPC error response."""
    return {
        "jsonrpc": "2.0",
        "id": jsonrpc_id,
        "error": {"code": code, "message": message, "data": data},
    }


def refusal_body(
    rejected: Rejected, request_ids: Iterable[int | str], batch: bool = False
) -> bytes:
    """The JSON body answering a refused POST.

    Args:
        rejected: the refusal.
        request_ids: the ids of the body's requests, when it was read as
            JSON-RPC (its notifications and answers expect nothing).
        batch: the body was a batch: the answer is a list with one error per
            request (or the one error, ``id: null``, when it had none).
    """
    code, message = error_code(rejected.rule), refusal_message(rejected)
    data = {"rule": str(rejected.rule)}
    ids = list(request_ids)
    if batch and ids:
        return orjson.dumps([error_object(i, code, message, data) for i in ids])
    return orjson.dumps(error_object(ids[0] if len(ids) == 1 else None, code, message, data))


def failure_body(message: str, status: int, code: str) -> bytes:
    """An :class:`~modeltap.apis.contract.ErrorShape` body: an error modeltap answers
    itself where no message id is known (an upstream that timed out, say)."""
    return orjson.dumps(error_object(None, INTERNAL_ERROR, message, {"code": code}))
