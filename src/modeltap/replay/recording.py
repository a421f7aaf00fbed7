"""The proxy's half of a recording: what goes into a ``recording.jsonl`` line.

The format, turn keys, the blob store and reading a recording back are
:mod:`modeltap.evidence.recordings`' (a capture reads its recording too, and
sits below this layer); they are re-exported here for the replay code. What
only the proxy knows is here: the start of an exchange's line
(:func:`index_line`, from the exchange's view), which headers are kept
(:data:`KEPT_HEADERS`), when a WebSocket message goes to a blob
(:data:`INLINE_LIMIT`) and which client frame starts a turn
(:func:`is_ws_create`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import orjson

from modeltap import apis
from modeltap.core.notices import ExchangeView
from modeltap.evidence.recordings import (
    BLOBS_DIR,
    FORMAT_VERSION,
    MCP_STREAM_KIND,
    RECORDING_FILE,
    VOLATILE_FIELDS,
    BlobStore,
    BlobWriter,
    Entry,
    McpKey,
    McpMessageKey,
    Recording,
    RecordingError,
    TurnKey,
    comparable_body,
    comparable_params,
    input_sha256,
)
from modeltap.evidence.records import Json, McpAuditRecord
from modeltap.evidence.redaction import redact_path

__all__ = [
    "BLOBS_DIR",
    "DIFF_FILE",
    "FORMAT_VERSION",
    "INLINE_LIMIT",
    "KEPT_HEADERS",
    "MCP_STREAM_KIND",
    "RECORDING_FILE",
    "VOLATILE_FIELDS",
    "BlobStore",
    "BlobWriter",
    "Entry",
    "McpKey",
    "McpMessageKey",
    "Recording",
    "RecordingError",
    "TurnKey",
    "comparable_body",
    "comparable_params",
    "index_line",
    "input_sha256",
    "is_ws_create",
    "kept_headers",
    "mcp_index_line",
    "mcp_stream_line",
]

DIFF_FILE: Final = "replay-diff.jsonl"
#: The only headers a recording keeps (request and response): these, and those
#: a wire reads facts from (:func:`modeltap.apis.response_headers`: Bedrock's
#: request id, as Converse bodies have none, and InvokeModel's metrics).
#: Everything else, credentials included, is dropped: an allow-list cannot
#: leak a header that a new SDK invents.
KEPT_HEADERS: Final = (
    "content-type",
    "content-encoding",
    "x-request-id",
    "request-id",
    *apis.response_headers(),
)
#: WebSocket messages longer than this go to a blob instead of the index line.
INLINE_LIMIT: Final = 64 * 1024


def index_line(kind: str, view: ExchangeView, key: TurnKey | None) -> Json:
    """The start of an exchange's ``recording.jsonl`` line (its ``request`` and
    ``response``, or ``messages``, are added as they happen).

    Args:
        kind: ``http``, ``websocket`` or ``unaudited``.
        view: the exchange (a WebSocket turn for ``websocket``).
        key: its turn key (None when unaudited).
    """
    websocket = kind == "websocket"
    return {
        "v": FORMAT_VERSION,
        "kind": kind,
        "session_id": view.session_id,
        "order": view.turn if key is not None else None,
        "seq": view.record.seq if kind == "http" and view.record is not None else None,
        # Which run's audit record this is: seq and session repeat from run to run.
        "run_id": view.record.run_id if view.record is not None else None,
        "transport": "websocket" if websocket else "http",
        "api": view.api,
        # A WebSocket turn is filed under its connection's handshake, a GET.
        "method": "GET" if websocket else view.method,
        "path": redact_path(view.path),
        "route": view.route.name if view.route else None,
        "provider": view.route.provider if view.route else None,
        "upstream": view.upstream,
        "key": key.to_json() if key is not None else None,
    }


def mcp_index_line(
    view: ExchangeView,
    records: Sequence[McpAuditRecord],
    order: int,
    run_id: str,
    body: bytes = b"",
) -> Json:
    """The start of an MCP exchange's ``recording.jsonl`` line (``kind: "mcp"``).

    Args:
        view: the exchange (a POST of JSON-RPC messages, or a ``DELETE``).
        records: its audit lines (none for a ``DELETE``).
        order: its place among its session's exchanges with its server (from 1).
        run_id: the run.
        body: its body (its messages' params are hashed into the key).
    """
    server = view.mcp_server or ""
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:  # audited as JSON-RPC: never, but a key is still made
        parsed = None
    line = index_line("mcp", view, None)
    line.update(
        order=order,
        seq=records[0].seq if records else None,
        run_id=run_id,
        key=McpKey.of(server, view.method or "", records, parsed).to_json(),
        mcp_server=server,
        mcp_session=view.mcp_session,
        jsonrpc_ids=[r.jsonrpc_id for r in records],
    )
    return line


def mcp_stream_line(server: str, session: str, after: int, message: str | None) -> Json:
    """A ``recording.jsonl`` line of an HTTP+SSE stream (``kind: "mcp_stream"``).

    Args:
        server: its server (``--mcp NAME``).
        session: the MCP session its endpoint named, hashed (never the id).
        after: the ``order`` of the session's latest POST forwarded before it (0: none).
        message: the blob of the event's JSON-RPC message; None for the
            line saying the stream opened.
    """
    return {
        "v": FORMAT_VERSION,
        "kind": MCP_STREAM_KIND,
        "transport": "http",
        "api": "mcp",
        "mcp_server": server,
        "mcp_session": session,
        "after": after,
        "message": message,
    }


def kept_headers(headers: Any) -> Json:
    """The allow-listed headers of a mitmproxy ``Headers`` (or any mapping), lower-cased."""
    return {name: headers[name] for name in KEPT_HEADERS if name in headers}


def is_ws_create(content: bytes | str) -> bool:
    """True when a client frame names itself ``response.create`` (valid or not)."""
    try:
        message = orjson.loads(content)
    except orjson.JSONDecodeError:
        return False
    return isinstance(message, dict) and message.get("type") == "response.create"
