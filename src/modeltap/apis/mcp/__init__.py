"""MCP on the wire (SPEC section 3b): JSON-RPC 2.0 to and from remote MCP servers.

A :class:`~modeltap.apis.contract.Wire` but not a model API
(:class:`~modeltap.apis.contract.WireApi`): its messages are tool executions,
catalogue listings and the like, audited one line per client-to-server
message. The package is sans-I/O, like every wire's:

- ``messages``: a POST body read as JSON-RPC, checked, and what its audit
  line says of each message (:func:`~modeltap.apis.mcp.messages.parse_body`);
- ``headers``: 2026-07-28's ``Mcp-Method`` / ``Mcp-Name`` /
  ``MCP-Protocol-Version`` / ``Mcp-Param-*`` headers checked against the body;
- ``observe``: what the server sends back (answers, its own requests,
  notifications; a ``tools/list`` catalogue's digest), JSON or SSE;
- ``transport``: sessions (hashed, never stored) and HTTP+SSE's endpoint;
- ``errors``: the JSON-RPC error shape refusals are answered in;
- ``names``: how agents name a server's tools to their model (pairing).

The core's MCP exchange (:mod:`modeltap.core.mcp_exchange`) drives it;
docs/MCP.md describes the lines and the rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from modeltap.apis.contract import (
    SSE,
    ErrorShape,
    Framing,
    compared_as_sent,
    no_header_facts,
)
from modeltap.apis.mcp.errors import failure_body
from modeltap.apis.websocket_mode import WebSocketMode
from modeltap.evidence.records import MCP_API, Json, ResponseFacts

NAME: Final = MCP_API
#: MCP is no GenAI provider's wire: the name spans and records give a route's
#: provider when none is said (the GenAI conventions' MCP spans carry none).
PROVIDER: Final = "mcp"

#: JSON-RPC errors, as an MCP client reads an answer its server did not give.
ERRORS: Final = ErrorShape("jsonrpc", failure_body)

FRAMINGS: Final[tuple[Framing, ...]] = (SSE,)
#: No response header is kept: ``Mcp-Session-Id`` is a capability.
RESPONSE_HEADERS: Final[tuple[str, ...]] = ()
WEBSOCKET: Final[WebSocketMode | None] = None


def error_shape(provider: str | None) -> ErrorShape:
    """JSON-RPC's, whoever serves the route."""
    return ERRORS


def response_header_facts(
    facts: ResponseFacts, header: Callable[[str], str | None]
) -> ResponseFacts:
    """The headers add nothing to what the body says."""
    return no_header_facts(facts, header)


def comparable_body(body: Json) -> Json:
    """Compared as sent (the record-and-replay stage decides what MCP clients make up)."""
    return compared_as_sent(body)
