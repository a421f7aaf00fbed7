"""Errors of modeltap, and the catalogue of refusal rules.

The hierarchy::

    ModelTapError
     ├── Rejected               the client sent something we refuse to forward
     │                          (carries its Rule; answered 400/413/503)
     ├── UpstreamProtocolError  the upstream broke its wire format (bad SSE,
     │                          undecodable compressed stream, invalid JSON)
     ├── SinkError              the audit file could not be written
     └── StartupError           the proxy could not start: a listener, the out
                                dir or an option (one line naming what and why)

Errors say whose fault it was and name a rule; they never carry request
content, headers or keys. A refusal's rule is a :class:`Rule` (an enum:
a misspelt rule is a type error); messages come from :data:`RULES`, fixed
text per rule, so nothing taken from a request can end up in one.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

import orjson


#: Every refusal rule: name -> (HTTP status, fixed explanation). The message
#: shown to the agent is built from this text only.
class Rule(StrEnum):
    """The name of every refusal rule: a misspelt one is a type error.

    Its value is the name written in ``rejected`` events, refusal messages and
    spans (``invalid_json``); :data:`RULES` gives its status and explanation.
    """

    INVALID_JSON = "invalid_json"
    BODY_NOT_OBJECT = "body_not_object"
    MISSING_MODEL = "missing_model"
    MESSAGES_AND_INPUT = "messages_and_input"
    INSTRUCTIONS_NOT_TEXT = "instructions_not_text"
    MALFORMED_MESSAGES = "malformed_messages"
    MALFORMED_TOOLS = "malformed_tools"
    TOOL_WITHOUT_NAME = "tool_without_name"
    MALFORMED_IMAGE = "malformed_image"
    MALFORMED_SETTING = "malformed_setting"
    UNSUPPORTED_BODY = "unsupported_body"
    VALUE_TOO_LONG = "value_too_long"
    UNDECODABLE_CONTENT_ENCODING = "undecodable_content_encoding"
    BODY_TOO_LARGE = "body_too_large"
    DUPLICATE_KEY = "duplicate_key"
    CASE_VARIANT_KEY = "case_variant_key"
    REQUEST_TRAILERS = "request_trailers"
    INVALID_HEADER_BYTES = "invalid_header_bytes"
    NONCANONICAL_PATH = "noncanonical_path"
    SIGNED_REQUEST = "signed_request"
    SIGNED_REQUEST_REWRITE = "signed_request_rewrite"
    METHOD_OVERRIDE = "method_override"
    WS_UNSUPPORTED_ENDPOINT = "ws_unsupported_endpoint"
    UNSUPPORTED_ENDPOINT = "unsupported_endpoint"
    UNSUPPORTED_UPGRADE = "unsupported_upgrade"
    UNSUPPORTED_CHARSET = "unsupported_charset"
    MODEL_MISMATCH = "model_mismatch"
    FAIL_CLOSED = "fail_closed"
    STRICT_UNAUDITED = "strict_unaudited"
    TOOL_BUDGET_EXCEEDED = "tool_budget_exceeded"
    SESSION_ENDED = "session_ended"
    CONTROL_NOT_ON_PROXY_PORT = "control_not_on_proxy_port"
    PROXY_STOPPED = "proxy_stopped"
    AUDIT_INTERNAL_ERROR = "audit_internal_error"
    AUDIT_WRITE_FAILED = "audit_write_failed"
    WS_BINARY_FRAME = "ws_binary_frame"
    WS_INVALID_JSON = "ws_invalid_json"
    WS_UNSUPPORTED_TYPE = "ws_unsupported_type"
    WS_MISSING_INPUT = "ws_missing_input"
    WS_NESTED_RESPONSE = "ws_nested_response"
    WS_IMPLICIT_CONTINUATION = "ws_implicit_continuation"
    MCP_NOT_JSONRPC = "mcp_not_jsonrpc"
    MCP_MALFORMED_PARAMS = "mcp_malformed_params"
    MCP_HEADER_MISMATCH = "mcp_header_mismatch"


RULES: Final[dict[Rule, tuple[int, str]]] = {
    # The body itself.
    Rule.INVALID_JSON: (400, "the request body is not valid JSON"),
    Rule.BODY_NOT_OBJECT: (400, "the request body is not a JSON object"),
    Rule.MISSING_MODEL: (400, "the request has no non-empty 'model' string"),
    Rule.MESSAGES_AND_INPUT: (400, "the request has both 'messages' and 'input'"),
    Rule.INSTRUCTIONS_NOT_TEXT: (400, "system/developer instruction content is not text"),
    Rule.MALFORMED_MESSAGES: (400, "the message list is malformed"),
    Rule.MALFORMED_TOOLS: (400, "the tool list is malformed"),
    Rule.TOOL_WITHOUT_NAME: (400, "a client tool has no name"),
    Rule.MALFORMED_IMAGE: (400, "an image part is malformed"),
    Rule.MALFORMED_SETTING: (400, "a setting the audit records has the wrong type"),
    Rule.UNSUPPORTED_BODY: (
        400,
        "the body carries model input modeltap cannot audit: on Bedrock InvokeModel (for "
        "an Anthropic model) and Vertex rawPredict only an Anthropic Messages body with its "
        "anthropic_version is audited (other model families: use Bedrock Converse), and "
        "Converse's additionalModelRequestFields may not carry instructions or messages",
    ),
    Rule.VALUE_TOO_LONG: (
        400,
        "a value the audit records (model, setting, tool name or type, id) is longer than "
        "256 characters",
    ),
    Rule.UNDECODABLE_CONTENT_ENCODING: (
        400,
        "the request body's content-encoding could not be decoded",
    ),
    Rule.BODY_TOO_LARGE: (413, "the request body is larger than --max-body"),
    Rule.DUPLICATE_KEY: (
        400,
        "the request body has a duplicate key in an object (parsers disagree on which one wins)",
    ),
    Rule.CASE_VARIANT_KEY: (
        400,
        "the request body has two keys in an object that differ only in case, or a top-level "
        "key spelled like a field the audit reads in another case ('Model', 'Instructions'): "
        "case-insensitive parsers (Go's encoding/json) read them as that field",
    ),
    Rule.REQUEST_TRAILERS: (
        400,
        "the request carries HTTP trailer fields after its body, which modeltap does not "
        "audit or forward",
    ),
    Rule.INVALID_HEADER_BYTES: (
        400,
        "the request head carries bytes an intermediary must not pass on (RFC 9110 5.5, "
        "RFC 9112 5.2): a header line folded onto the one before (obs-fold), CR, LF, NUL or "
        "another control character in a header value, a header name that is not a token, or "
        "a control character or space in the method or target; servers read such a head "
        "differently, so it is not forwarded",
    ),
    # The request line: what an upstream could read as a model request.
    Rule.NONCANONICAL_PATH: (
        400,
        "the request path could be read in more than one way (dot or empty segments, "
        "double or malformed percent-encoding, or characters servers treat differently)",
    ),
    Rule.SIGNED_REQUEST: (
        400,
        "the request is signed with AWS SigV4 for the host it was sent to, and reverse mode "
        "must send it to another host, which breaks the signature; run modeltap in regular "
        "mode (HTTPS_PROXY, the request goes out unchanged) or authenticate with a Bedrock "
        "API key (bearer token, AWS_BEARER_TOKEN_BEDROCK)",
    ),
    Rule.SIGNED_REQUEST_REWRITE: (
        400,
        "the request is signed (AWS SigV4) and --image-detail would change its body, which "
        "breaks the signature; modeltap never rewrites a signed request",
    ),
    Rule.METHOD_OVERRIDE: (
        400,
        "a model or MCP endpoint takes a body only by POST: another method with a body, a "
        "method spelt otherwise than 'POST', or a method override (header or _method "
        "parameter) is not forwarded",
    ),
    Rule.WS_UNSUPPORTED_ENDPOINT: (
        400,
        "WebSocket connections are audited only on a Responses endpoint",
    ),
    Rule.UNSUPPORTED_ENDPOINT: (
        400,
        "this endpoint runs a model on input modeltap cannot audit (a batch, a live or "
        "realtime session, a raw prediction, gRPC, a legacy completion), so it is not "
        "forwarded; send the requests one by one to an endpoint modeltap audits",
    ),
    Rule.UNSUPPORTED_UPGRADE: (
        400,
        "the request (or the upstream's 101 answer) switches protocols in a way modeltap "
        "cannot follow: only a WebSocket handshake (GET, one 'Upgrade: websocket', "
        "Sec-WebSocket-Version 13) answered as a WebSocket is audited message by message; "
        "any other switch would become a tunnel nobody audits",
    ),
    Rule.UNSUPPORTED_CHARSET: (
        400,
        "the request's Content-Type declares a charset other than UTF-8: the audit reads the "
        "JSON body as UTF-8, and a server honouring the charset would read other text",
    ),
    Rule.MODEL_MISMATCH: (
        400,
        "the path and the body name different models, and upstreams differ on which one runs",
    ),
    # Policy.
    Rule.FAIL_CLOSED: (
        400,
        "an earlier request of this session was refused and --fail-closed is set",
    ),
    Rule.STRICT_UNAUDITED: (
        400,
        "this request is not a model request modeltap can audit and --strict is set",
    ),
    Rule.TOOL_BUDGET_EXCEEDED: (400, "the session used up its --max-tool-calls budget"),
    Rule.SESSION_ENDED: (
        400,
        "this session was ended (modeltap session end) and takes no more requests",
    ),
    Rule.CONTROL_NOT_ON_PROXY_PORT: (
        403,
        "modeltap's control API is not served through the proxy; the harness runs "
        "'modeltap session end ID --out DIR', which finds the control listener and its "
        "token in the out dir",
    ),
    Rule.PROXY_STOPPED: (503, "modeltap is stopping, so the request was not forwarded"),
    Rule.AUDIT_INTERNAL_ERROR: (
        500,
        "modeltap failed while auditing this request (a modeltap bug), so it was not forwarded",
    ),
    Rule.AUDIT_WRITE_FAILED: (
        503,
        "the audit record could not be written, so the request was not forwarded",
    ),
    # WebSocket Responses mode.
    Rule.WS_BINARY_FRAME: (400, "binary WebSocket frames cannot be audited"),
    Rule.WS_INVALID_JSON: (400, "the WebSocket message is not a JSON object"),
    Rule.WS_UNSUPPORTED_TYPE: (400, "this WebSocket message type is not forwarded"),
    Rule.WS_MISSING_INPUT: (400, "response.create has no 'input'"),
    Rule.WS_NESTED_RESPONSE: (400, "response.create carries a nested 'response' object"),
    Rule.WS_IMPLICIT_CONTINUATION: (
        400,
        "a continuation (previous_response_id, conversation or prompt) must state its model, "
        "instructions and tools; use --continuation as-sent to audit it as sent",
    ),
    # MCP on the wire (SPEC 3b).
    Rule.MCP_NOT_JSONRPC: (
        400,
        "the body is not a JSON-RPC 2.0 message (or a non-empty batch of them) as MCP sends: "
        'jsonrpc "2.0", a string method or a result or error, an integer or string id '
        "(none on a notification), no other members",
    ),
    Rule.MCP_MALFORMED_PARAMS: (
        400,
        "an MCP message's params are not what the audit reads: params not an object, a "
        "tools/call without a string name, arguments that are not an object",
    ),
    Rule.MCP_HEADER_MISMATCH: (
        400,
        "an Mcp-Method, Mcp-Name, MCP-Protocol-Version or Mcp-Param-* header says something "
        "other than the JSON-RPC body (or is sent twice): an intermediary routing on the "
        "header and the server reading the body would see two different requests",
    ),
}

#: What ``events.jsonl`` says about an exchange that failed, per kind of
#: failure, in modeltap's own words. mitmproxy's and the upstream's texts are
#: never copied: an upstream's malformed status line can echo the request.
ERROR_MESSAGES: Final[dict[str, str]] = {
    "upstream_unreachable": (
        "the upstream could not be reached, or closed or broke the connection before answering"
    ),
    "upstream_reset": "the upstream connection broke before the response ended",
    "upstream_timeout": "the upstream did not answer in time (--upstream-timeout)",
    "upstream_protocol_error": "the upstream's answer broke the HTTP protocol",
    "client_gone": "the client closed the connection before the response ended",
    "bad_request": "the client's request broke the HTTP protocol; the proxy answered it",
    "client_timeout": "the client stopped sending its request body (--client-timeout)",
    "proxy_stopped": "modeltap stopped while the exchange was in flight",
}


def error_message(kind: str) -> str:
    """The fixed text an error event carries for a kind of failure.

    Args:
        kind: the error event's ``error`` (e.g. ``upstream_reset``).

    Returns:
        The text of :data:`ERROR_MESSAGES`, or a generic one for a kind it
        does not list; never anything taken from the wire.
    """
    return ERROR_MESSAGES.get(kind, "the exchange failed before the response ended")


class ModelTapError(Exception):
    """Base class of every error modeltap raises on purpose."""


class Rejected(ModelTapError):
    """The client sent something modeltap will not forward.

    Args:
        rule: the rule it breaks.
        detail: an optional *fixed* refinement written by modeltap itself (for
            example ``"tools[2]"``, a position, never a value from the body).

    Raises:
        KeyError: if ``rule`` is not a :class:`Rule` (a programming error).
    """

    def __init__(self, rule: Rule, detail: str | None = None) -> None:
        status, text = RULES[rule]
        self.rule: Rule = Rule(rule)
        self.status = status
        self.detail = detail
        where = f" ({detail})" if detail else ""
        self.message = f"modeltap refused the request [rule {rule}]: {text}{where}."
        super().__init__(self.message)


class UpstreamProtocolError(ModelTapError):
    """The upstream sent something that breaks its own wire format."""


class SinkError(ModelTapError):
    """The audit or events file could not be written."""


class StartupError(ModelTapError, RuntimeError):
    """The proxy could not start. The message is one line naming what failed
    (the address, the path, the option) and the operating system's reason.

    A :class:`RuntimeError` too, as :meth:`modeltap.app.proxy.Proxy.start` raised
    before this class existed.
    """


def error_kind(status: int) -> str:
    """The error ``type`` OpenAI's and Anthropic's SDKs read: the client's fault
    (4xx, ``invalid_request_error``) or the service's (5xx, ``api_error``).

    Args:
        status: the HTTP status the error goes with.
    """
    return "invalid_request_error" if status < 500 else "api_error"


def neutral_error_body(message: str, status: int, code: str) -> bytes:
    """An error body both the OpenAI and the Anthropic SDKs read, for an answer
    whose wire and provider are not known (a path no route matches, a request
    after the proxy stopped, an upstream that could not be reached).

    Each wire's own shape is its package's
    (:meth:`modeltap.apis.contract.Wire.error_shape`).

    Args:
        message: a message built by modeltap (never request content).
        status: the HTTP status it goes with.
        code: the machine-readable code, e.g. ``modeltap_rejected``.

    Returns:
        UTF-8 JSON bytes: ``{"type": "error", "error": {type, message, code}}``.
    """
    error = {"type": error_kind(status), "message": message, "code": code}
    return orjson.dumps({"type": "error", "error": error})
