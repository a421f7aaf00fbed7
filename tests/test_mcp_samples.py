"""The MCP wire samples of ``tests/data/mcp/`` stay what they were captured as.

Each sample (``python -m tests.mcp_shapes``; ``tests/data/mcp/README.md``)
is a list of HTTP exchanges recorded between a real MCP client and server.
These tests keep them honest before any rule is written against them: every
message is JSON-RPC 2.0 as the spec shapes it, every request the client sent
was answered somewhere, a batch appears only where it was written by hand,
and no session id or credential is kept as captured.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

DATA = Path(__file__).parent / "data" / "mcp"
SAMPLES = sorted(DATA.rglob("*.json"))
MEMBERS = {"jsonrpc", "id", "method", "params", "result", "error"}
PLACEHOLDER = re.compile(r"<session-\d+>")


def load(path: Path) -> dict[str, Any]:
    sample: dict[str, Any] = orjson.loads(path.read_bytes())
    return sample


def check_message(message: Any) -> str:
    """Assert ``message`` is one JSON-RPC 2.0 message; say which kind it is."""
    assert isinstance(message, dict), message
    assert message.get("jsonrpc") == "2.0", message
    assert set(message) <= MEMBERS, set(message) - MEMBERS
    if "method" in message:
        assert isinstance(message["method"], str) and message["method"], message
        assert "result" not in message and "error" not in message, message
        assert isinstance(message.get("params", {}), dict | list), message
        if "id" not in message:
            return "notification"
        assert isinstance(message["id"], int | str) and not isinstance(message["id"], bool)
        return "request"
    assert "id" in message, message
    assert ("result" in message) != ("error" in message), message
    if "error" in message:
        error = message["error"]
        assert isinstance(error["code"], int) and isinstance(error["message"], str), error
        assert message["id"] is None or isinstance(message["id"], int | str), message
        return "error"
    assert isinstance(message["id"], int | str) and not isinstance(message["id"], bool)
    return "result"


def client_messages(exchange: dict[str, Any]) -> list[Any]:
    """What the client sent in one exchange: a message, a batch's members, or nothing."""
    body = exchange.get("request_body")
    if body is None:
        return []
    return body if isinstance(body, list) else [body]


def server_messages(exchange: dict[str, Any]) -> list[Any]:
    """What the server sent in one exchange: a JSON body's message(s), or each
    SSE event's data that is a message (not a priming event, comment or the
    older transport's ``endpoint``)."""
    if "response_body" in exchange:
        body = exchange["response_body"]
        return body if isinstance(body, list) else [body]
    return [e["data"] for e in exchange.get("sse_events", []) if isinstance(e.get("data"), dict)]


def speaks_jsonrpc(exchange: dict[str, Any]) -> bool:
    """Only exchanges with the MCP endpoint carry JSON-RPC; a CLI's OAuth
    discovery probes (``/.well-known/...``) and the like do not."""
    return "request_body" in exchange or "sse_events" in exchange


@pytest.fixture(params=SAMPLES, ids=[str(p.relative_to(DATA)) for p in SAMPLES])
def sample(request: pytest.FixtureRequest) -> dict[str, Any]:
    return load(request.param)


def test_the_samples_are_there() -> None:
    # The SDK in every transport, and at least one agent CLI.
    assert len(list((DATA / "python_sdk").glob("*.json"))) >= 10
    assert [p for p in DATA.iterdir() if p.is_dir() and p.name != "python_sdk"]


def test_every_message_is_jsonrpc(sample: dict[str, Any]) -> None:
    assert sample["exchanges"], "a sample with no exchange"
    for exchange in sample["exchanges"]:
        assert exchange["method"] in {"GET", "POST", "DELETE", "HEAD", "OPTIONS"}
        assert exchange["path"].startswith("/")
        assert isinstance(exchange["status"], int) or exchange.get("closed_by")
        if not speaks_jsonrpc(exchange):
            continue
        for message in client_messages(exchange):
            check_message(message)
        if exchange.get("request_body") is not None:
            for message in server_messages(exchange):
                check_message(message)
        for event in exchange.get("sse_events", []):
            assert isinstance(event["t_ms"], int | float)
            data = event.get("data")
            if event.get("event") == "endpoint":  # HTTP+SSE: where to POST
                assert isinstance(data, str) and data.startswith("/"), event
            elif data == "":  # a priming event: only an id (and retry) to resume from
                assert "id" in event, event
            elif data is not None:
                check_message(data)


def test_every_request_is_answered(sample: dict[str, Any]) -> None:
    """Each client request's id comes back in a result or error (on its own
    POST, the GET stream, or a resumed stream): nothing was lost in capture.
    Ids are per direction: the server numbers its own requests from 1 too."""
    asked = {
        m["id"]
        for e in sample["exchanges"]
        for m in client_messages(e)
        if "method" in m and "id" in m
    }
    answered = {
        m.get("id")
        for e in sample["exchanges"]
        for m in server_messages(e)
        if isinstance(m, dict) and "method" not in m
    }
    if any(e.get("hand_written") for e in sample["exchanges"]):
        # The SDK's server refuses a batch whole (id null): its members go unanswered.
        asked -= {m["id"] for e in sample["exchanges"] if e.get("hand_written")
                  for m in client_messages(e) if "id" in m}  # fmt: skip
    assert asked <= answered, asked - answered


def test_batches_only_where_written_by_hand(sample: dict[str, Any]) -> None:
    """No SDK or CLI captured here sends a JSON-RPC batch (a new capture that
    does is a finding: README, then the rules)."""
    for exchange in sample["exchanges"]:
        if isinstance(exchange.get("request_body"), list):
            assert exchange.get("hand_written") is True
            assert sample["offered_protocol_version"] == "2025-03-26"


def test_no_session_id_or_credential_is_kept(sample: dict[str, Any]) -> None:
    for exchange in sample["exchanges"]:
        for headers in (exchange["request_headers"], exchange["response_headers"]):
            for name, value in headers.items():
                if name.lower() == "mcp-session-id":
                    assert PLACEHOLDER.fullmatch(value), "a session id kept as captured"
                if name.lower() in {"authorization", "x-api-key", "cookie"}:
                    assert "<redacted>" in value, name
        for found in re.finditer(r"session_id=([^&\s\"]+)", exchange["path"]):
            assert PLACEHOLDER.fullmatch(found.group(1)), "a session id kept as captured"
