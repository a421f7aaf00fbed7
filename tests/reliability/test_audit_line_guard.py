"""SPEC 8 holds even when the audit line cannot be *serialised*, not only when
the file cannot be written: the glue must refuse, never forward unaudited.

The one wire input found that broke serialisation (an Anthropic ``thinking``
nested 255-1023 levels deep, readable by orjson but not writable) can no
longer reach the record: unknown keys of ``thinking`` are kept by name only.
This test injects such facts directly, to show that the glue itself still
refuses when ``to_json_line`` raises ``TypeError``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx2 as httpx
import orjson
import pytest

from modeltap.apis import anthropic_messages
from tests.conftest import Running

BODY = {"model": "claude-x", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}


def too_deep() -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(300):
        value = {"x": value}
    return value


def test_unserialisable_record_is_refused_not_forwarded(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = anthropic_messages.audit_request

    def audit(body: Any, endpoint: Any = None) -> Any:
        return dataclasses.replace(real(body, endpoint), thinking=too_deep())

    monkeypatch.setattr(anthropic_messages, "audit_request", audit)
    resp = httpx.post(running.base() + "/v1/messages", content=orjson.dumps(BODY), timeout=10)
    assert running.upstream.received == []  # nothing reached the model unaudited
    assert resp.status_code == 503


def test_deep_thinking_on_the_wire_is_kept_by_name(running: Running) -> None:
    """The wire input that found the bug. An unknown key of ``thinking`` is now
    kept by name only (SPEC 8), so its depth never reaches the record: the line
    is written whole and the request goes on."""
    raw = (
        b'{"model":"claude-x","max_tokens":5,"messages":[],"thinking":{"type":"enabled","x":'
        + b'{"a":' * 400
        + b"1"
        + b"}" * 400
        + b"}}"
    )
    resp = httpx.post(running.base() + "/v1/messages", content=raw, timeout=10)
    assert resp.status_code == 200
    assert [r["thinking"] for r in running.audit()] == [{"type": "enabled", "x": "REDACTED"}]
    assert len(running.upstream.received) == 1
