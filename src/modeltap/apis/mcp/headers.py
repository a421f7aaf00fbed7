"""The 2026-07-28 routing headers, checked against the body (pure).

From 2026-07-28 on a client mirrors parts of its JSON-RPC body into headers
so intermediaries can route without reading the body: ``Mcp-Method`` (the
method), ``Mcp-Name`` (``tools/call`` and ``prompts/get``: ``params.name``;
``resources/read``: ``params.uri``), ``MCP-Protocol-Version`` (also in
``params._meta``), and one ``Mcp-Param-{Token}`` per tool argument whose
input schema says ``x-mcp-header: Token``. A header that says something the
body does not would make a gateway and the server see two different
requests, so a header that is sent must match the body
(:func:`check_headers`; the official SDK's server refuses the same with
``HEADER_MISMATCH``). One sent twice arrives joined (``a, b``) and matches
nothing. A header that is not sent misleads nobody and is not required here
(the server decides).

``Mcp-Param-*`` headers can be compared only with the tool's input schema,
which the proxy knows from a ``tools/list`` result it saw
(:func:`tool_headers`): a header it cannot compare is listed in the audit
line's ``unchecked_headers``, never silently taken as checked.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from modeltap.apis.mcp.messages import PROTOCOL_VERSION_META, McpBody
from modeltap.evidence.records import MAX_ID_CHARS, Json
from modeltap.rules.errors import Rejected, Rule

METHOD_HEADER: Final = "mcp-method"
NAME_HEADER: Final = "mcp-name"
VERSION_HEADER: Final = "mcp-protocol-version"
PARAM_PREFIX: Final = "mcp-param-"
#: The method whose ``params`` member ``Mcp-Name`` mirrors.
NAME_BEARING: Final[Mapping[str, str]] = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
}
#: ``x-mcp-header``: the schema annotation naming an argument's header.
X_MCP_HEADER: Final = "x-mcp-header"

_SENTINEL: Final = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")
#: Schema keywords whose value is one schema, a list or a map of them (JSON
#: Schema 2020-12's applicators): an annotation under them is not on a plain
#: ``properties`` chain, which is where the SDKs look.
_SINGLE: Final = frozenset(
    {
        "items", "contains", "unevaluatedItems", "additionalProperties", "propertyNames",
        "unevaluatedProperties", "not", "if", "then", "else", "contentSchema",
    }
)  # fmt: skip
_LISTS: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_MAPS: Final = frozenset({"patternProperties", "dependentSchemas", "$defs", "definitions"})
_DECIMAL: Final = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")


@dataclass(frozen=True, slots=True)
class ParamHeader:
    """One argument a tool's schema mirrors into a header."""

    #: The chain of ``properties`` keys from the schema's root to the argument.
    path: tuple[str, ...]
    #: The schema's ``type`` of the argument (``integer`` compares numerically).
    type: str | None


#: A tool's mirrored arguments, by header token in lower case.
ToolHeaders = Mapping[str, ParamHeader]


def decode_header_value(value: str) -> str | None:
    """A header value as the client meant it: ``=?base64?...?=`` decoded (canonical
    base64 of UTF-8 only), anything else as it is; ``None`` for a broken sentinel."""
    found = _SENTINEL.fullmatch(value)
    if found is None:
        return value
    payload = found["payload"]
    try:
        raw = base64.b64decode(payload, validate=True)
    except binascii.Error:
        return None
    if base64.b64encode(raw).decode("ascii") != payload:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def tool_headers(input_schema: Any) -> ToolHeaders:
    """The arguments a tool's input schema mirrors into ``Mcp-Param-*`` headers.

    Only annotations on a chain of ``properties`` from the root count (as the
    SDKs emit and validate them); a schema the SDKs would drop (an annotation
    elsewhere, or one that is not a string) mirrors nothing.

    Args:
        input_schema: the tool's ``inputSchema`` as ``tools/list`` sent it.

    Returns:
        Token (lower case) to argument.
    """
    found: dict[str, ParamHeader] = {}
    for path, schema in _positions(input_schema):
        token = schema.get(X_MCP_HEADER)
        if token is None:
            continue
        if not path or not isinstance(token, str) or not token:
            return {}
        kind = schema.get("type")
        found[token.lower()] = ParamHeader(path, kind if isinstance(kind, str) else None)
    return found


def _positions(root: Any) -> Iterator[tuple[tuple[str, ...] | None, Json]]:
    """Every schema position, with its ``properties`` chain (``None`` off it)."""
    stack: list[tuple[tuple[str, ...] | None, Any]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield path, node
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                for name, sub in value.items():
                    stack.append(((*path, name) if path is not None else None, sub))
            elif key in _SINGLE:
                stack.append((None, value))
            elif key in _LISTS and isinstance(value, list):
                stack.extend((None, sub) for sub in value)
            elif key in _MAPS and isinstance(value, dict):
                stack.extend((None, sub) for sub in value.values())


def check_headers(
    body: McpBody,
    headers: Mapping[str, str],
    schemas: Callable[[str], ToolHeaders | None],
) -> tuple[str, ...]:
    """Check the routing headers a POST carries against its body.

    Args:
        body: its messages (each must agree with every header sent).
        headers: its headers, looked up case-insensitively (a name sent twice
            arrives with its values joined by ``", "``); iterating gives the
            names sent.
        schemas: the mirrored arguments of a tool of this server, from the
            ``tools/list`` results seen; ``None`` when no result named it.

    Returns:
        The ``Mcp-Param-*`` tokens (lower case, in the order sent) that could
        not be compared with the body: no known schema declares them for the
        message's tool, or the message calls no tool.

    Raises:
        Rejected: ``mcp_header_mismatch``, naming the header (a token only
            when the schema declares it).
    """
    method = headers.get(METHOD_HEADER)
    name = headers.get(NAME_HEADER)
    version = headers.get(VERSION_HEADER)
    params = [n.lower()[len(PARAM_PREFIX) :] for n in _names(headers) if _is_param(n)]
    unchecked: dict[str, None] = {}
    for message in body.messages:
        if method is not None and method != message.method:
            raise Rejected(Rule.MCP_HEADER_MISMATCH, "Mcp-Method")
        if name is not None:
            member = NAME_BEARING.get(message.method or "")
            value = (message.params or {}).get(member) if member is not None else None
            if not isinstance(value, str) or decode_header_value(name) != value:
                raise Rejected(Rule.MCP_HEADER_MISMATCH, "Mcp-Name")
        if version is not None and message.params is not None:
            meta = message.params.get("_meta")
            stated = meta.get(PROTOCOL_VERSION_META) if isinstance(meta, dict) else None
            if stated is not None and stated != version:
                raise Rejected(Rule.MCP_HEADER_MISMATCH, "MCP-Protocol-Version")
        if not params:
            continue
        declared = schemas(message.tool_name) if message.tool_name is not None else None
        arguments = (message.params or {}).get("arguments")
        for token in params:
            mirrored = declared.get(token) if declared is not None else None
            if mirrored is None:
                unchecked[token[:MAX_ID_CHARS]] = None
                continue
            sent = headers.get(PARAM_PREFIX + token, "")
            if not _matches(mirrored, _at(arguments, mirrored.path), sent):
                raise Rejected(Rule.MCP_HEADER_MISMATCH, f"Mcp-Param-{token}")
    return tuple(unchecked)


def _names(headers: Mapping[str, str]) -> Iterable[str]:
    return dict.fromkeys(name.lower() for name in headers)


def _is_param(name: str) -> bool:
    return name.startswith(PARAM_PREFIX) and len(name) > len(PARAM_PREFIX)


def _at(arguments: Any, path: tuple[str, ...]) -> Any:
    node = arguments
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _rendered(value: Any) -> str | None:
    """A scalar argument as a client writes it into a header (the SDKs' rendering)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        try:
            return str(value)
        except ValueError:  # an int past Python's digit limit
            return None
    return None


def _matches(mirrored: ParamHeader, value: Any, sent: str) -> bool:
    """Whether a sent ``Mcp-Param-*`` value says what the body's argument says.

    A header for an argument the body does not carry (or carries as no scalar)
    matches nothing: a gateway would route on a value the server never sees.
    An integer argument compares numerically (``42`` and ``42.0``), as the SDKs do.
    """
    rendered = _rendered(value)
    decoded = decode_header_value(sent)
    if rendered is None or decoded is None:
        return False
    if (
        mirrored.type == "integer"
        and not isinstance(value, bool)
        and (isinstance(value, int) or (isinstance(value, float) and value.is_integer()))
        and _DECIMAL.fullmatch(decoded)
    ):
        whole, _, fraction = decoded.partition(".")
        return not fraction.strip("0") and int(whole) == int(value)
    return decoded == rendered
