"""Builders for the records and events tests write or feed, and the files they go in.

One place that spells out every field of :mod:`modeltap.evidence.records`' types, so a
new field is added here once, not in every test file. Each builder takes any
field as a keyword and fills the rest with plausible values (a chat exchange
of run ``run-1``, session ``s-1``); a test passes what its assertions are
about. :func:`write_capture` writes a capture directory the way the proxy
does (``records.to_json_line``), validating every line against the shipped
JSON Schemas.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import orjson

from modeltap import apis
from modeltap.apis import openai_chat
from modeltap.apis.mcp.messages import arguments_digest
from modeltap.evidence import records
from modeltap.evidence.records import (
    AuditRecord,
    ErrorEvent,
    Event,
    McpAuditRecord,
    McpContentItem,
    McpResultEvent,
    RejectedEvent,
    ResponseEvent,
    Usage,
)

RUN = "run-1"
T0 = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)


def ts(seconds: float) -> str:
    """The record timestamp ``seconds`` after :data:`T0` (milliseconds, ``Z``)."""
    return (
        (T0 + timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def schema(name: str) -> dict[str, Any]:
    """One of the shipped JSON Schemas (``audit_record.schema.json``, ...)."""
    text = resources.files("modeltap").joinpath("schemas", name).read_text("utf-8")
    value: dict[str, Any] = json.loads(text)
    return value


AUDIT_SCHEMA = jsonschema.Draft202012Validator(schema("audit_record.schema.json"))
EVENT_SCHEMA = jsonschema.Draft202012Validator(schema("event.schema.json"))
SESSION_SCHEMA = jsonschema.Draft202012Validator(schema("session.schema.json"))


def audit_record(**fields: Any) -> AuditRecord:
    """An audit record; ``request_id`` defaults to ``req-{seq}``."""
    seq = fields.get("seq", 1)
    values: dict[str, Any] = {
        "request_id": f"req-{seq}",
        "model": "gpt-5",
        "model_source": "body",
        "tool_names": (),
        "reasoning_effort": None,
        "thinking": None,
        "image_details": (),
        "image_count": 0,
        "instructions_sha256": "0" * 64,
        "instructions_parts": (records.InstructionPart("0" * 64, 0),),
        "seq": seq,
        "run_id": RUN,
        "session_id": "s-1",
        "ts": ts(0),
        "transport": "http",
        "api": openai_chat.NAME,
        "operation": records.OPERATION_CREATE,
        "route": "openai",
        "upstream": "https://api.openai.com",
        "path": "/v1/chat/completions",
        "stream": True,
        "hosted_tools": (),
        "tool_results": (),
        "previous_response_id": None,
        "generate": None,
        "omitted_settings": (),
        "body_bytes": 512,
        "body_sha256": "a" * 64,
    }
    values = values | fields
    # Unless the test names one: the wire's provider, as a route of unknown
    # provider records it.
    values.setdefault("provider", apis.module_for(values["api"]).PROVIDER)
    return AuditRecord(**values)


def mcp_audit_record(**fields: Any) -> McpAuditRecord:
    """An MCP audit line (a ``tools/list`` request by default); ``request_id``
    defaults to ``req-{seq}``."""
    seq = fields.get("seq", 1)
    values: dict[str, Any] = {
        "request_id": f"req-{seq}",
        "seq": seq,
        "run_id": RUN,
        "session_id": "s-1",
        "ts": ts(0),
        "transport": "http",
        "route": "files",
        "upstream": "https://mcp.example.com/mcp",
        "path": "/mcp",
        "mcp_server": "files",
        "mcp_session": None,
        "protocol_version": "2025-11-25",
        "message_type": "request",
        "mcp_method": "tools/list",
        "jsonrpc_id": seq,
        "batch_index": None,
        "tool_name": None,
        "arguments_sha256": None,
        "arguments_bytes": None,
        "tool_call_id": None,
        "continues_seq": None,
        "unchecked_headers": (),
        "body_bytes": 46,
        "body_sha256": "0" * 64,
    }
    return McpAuditRecord(**(values | fields))


def mcp_tools_call(seq: int, tool: str, arguments: Any = None, **fields: Any) -> McpAuditRecord:
    """The audit line of a ``tools/call`` of ``tool`` with ``arguments`` (a
    dict, hashed canonically as the proxy does; ``None``: none sent)."""
    digest = arguments_digest(arguments) if arguments is not None else None
    return mcp_audit_record(
        seq=seq,
        mcp_method="tools/call",
        tool_name=tool,
        arguments_sha256=digest[0] if digest is not None else None,
        arguments_bytes=digest[1] if digest is not None else None,
        **fields,
    )


def mcp_result_event(**fields: Any) -> McpResultEvent:
    """An ``mcp_result``: by default a ``tools/call`` result of request 1,
    ``isError: false``, one text item, read whole."""
    seq = fields.get("seq", 1)
    values: dict[str, Any] = {
        "ts": ts(2),
        "run_id": RUN,
        "session_id": "s-1",
        "seq": seq,
        "request_id": f"req-{seq}",
        "mcp_server": "files",
        "mcp_session": None,
        "mcp_method": "tools/call",
        "jsonrpc_id": seq,
        "tool_name": None,
        "outcome": "result",
        "status": 200,
        "framing": "json",
        "is_error": False,
        "error_code": None,
        "content": (McpContentItem("text", 30),),
        "structured_content": False,
        "result_type": None,
        "tools": None,
        "tools_sha256": None,
        "next_cursor": None,
        "duration_ms": 12.5,
        "evidence_complete": True,
        "capture_errors": (),
    }
    return McpResultEvent(**(values | fields))


def response_event(**fields: Any) -> ResponseEvent:
    """A ``response`` event; ``request_id`` defaults to ``req-{seq}``, usage to unknown."""
    seq = fields.get("seq", 1)
    values: dict[str, Any] = {
        "ts": ts(1),
        "run_id": RUN,
        "session_id": "s-1",
        "seq": seq,
        "request_id": f"req-{seq}",
        "api": openai_chat.NAME,
        "transport": "http",
        "status": 200,
        "stream": True,
        "response_id": f"resp-{seq}",
        "model": "gpt-5-2025-08-07",
        "usage": Usage(),
        "finish_reasons": ("stop",),
        "tool_calls": (),
        "response_status": None,
        "ttfb_ms": 120.0,
        "ttft_ms": 150.0,
        "duration_ms": 800.0,
        "evidence_complete": True,
        "capture_errors": (),
    }
    return ResponseEvent(**(values | fields))


#: A line's ``usage`` when the provider reported no count: every one unknown.
NO_USAGE: dict[str, int | None] = {
    "input_tokens": None,
    "output_tokens": None,
    "total_tokens": None,
    "cache_read_tokens": None,
    "cache_write_tokens": None,
    "reasoning_tokens": None,
}


def usage_json(**counts: int) -> dict[str, int | None]:
    """A line's ``usage`` object: the counts named (``input=21`` is
    ``input_tokens``), every other one unknown (``None``, never 0)."""
    return NO_USAGE | {f"{name}_tokens": count for name, count in counts.items()}


def rejected_event(**fields: Any) -> RejectedEvent:
    """A ``rejected`` event (a refused request: no audit record, no ``seq``)."""
    values: dict[str, Any] = {
        "ts": ts(0),
        "run_id": RUN,
        "session_id": "s-1",
        "rule": "malformed_tools",
        "message": "the tool list is malformed",
        "status": 400,
        "transport": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "api": openai_chat.NAME,
    }
    return RejectedEvent(**(values | fields))


def error_event(**fields: Any) -> ErrorEvent:
    """An ``error`` event (by default ``upstream_unreachable`` of request 1)."""
    values: dict[str, Any] = {
        "ts": ts(1),
        "run_id": RUN,
        "session_id": "s-1",
        "seq": 1,
        "error": "upstream_unreachable",
        "message": "connect failed",
        "transport": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
    }
    return ErrorEvent(**(values | fields))


def write_capture(
    directory: Path,
    audits: Sequence[AuditRecord | McpAuditRecord],
    events: list[Event],
    *,
    sessions: list[dict[str, Any]] | None = None,
) -> Path:
    """Write a capture directory as the proxy does, validating every line against the schemas.

    Args:
        directory: where ``audit.jsonl``, ``events.jsonl`` (and, when
            ``sessions`` is given, ``sessions.jsonl``) go.
        audits: the audit records, in file order.
        events: the events, in file order.
        sessions: ``sessions.jsonl`` lines as JSON objects, written as given.

    Returns:
        ``directory``.
    """
    with (directory / "audit.jsonl").open("wb") as out:
        for record in audits:
            line = records.to_json_line(record)
            AUDIT_SCHEMA.validate(orjson.loads(line))
            out.write(line)
    with (directory / "events.jsonl").open("wb") as out:
        for event in events:
            line = records.to_json_line(event)
            EVENT_SCHEMA.validate(orjson.loads(line))
            out.write(line)
    if sessions is not None:
        with (directory / "sessions.jsonl").open("wb") as out:
            for session in sessions:
                out.write(orjson.dumps(session, option=orjson.OPT_APPEND_NEWLINE))
    return directory
