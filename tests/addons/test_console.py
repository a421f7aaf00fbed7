"""The console addon: one stderr line per exchange, unless quiet."""

from __future__ import annotations

from pathlib import Path

import pytest

from modeltap.addons.console import Console, lines
from modeltap.addons.http import Http
from modeltap.core.notices import ExchangeView, Outcome
from modeltap.evidence.records import UnauditedEvent
from modeltap.rules.errors import Rejected, Rule
from modeltap.rules.failures import Phase
from tests.addons.conftest import chat_through, model_flow, tap
from tests.conftest import exchange_view
from tests.factories import error_event, response_event

pytestmark = pytest.mark.anyio

VIEW = exchange_view(method="GET", path="/v1/models", api=None)
ENVELOPE = {"ts": "t", "run_id": "r", "session_id": "s1"}


def test_the_lines_say_what_happened() -> None:
    refused = Outcome(VIEW, 0, status=400, rejected=Rejected(Rule.MISSING_MODEL))
    assert lines(refused, "12:00:00") == ["12:00:00 s1 - - 400 - - refused: missing_model"]
    unaudited = UnauditedEvent(**ENVELOPE, method="GET", host=None, path="/v1/models", status=None)
    error = error_event(session_id="s1", error="upstream_reset")
    broke = Outcome(VIEW, 0, unaudited=unaudited, error=error)
    assert lines(broke, "12:00:00") == [
        "12:00:00 s1 - - - - - unaudited GET /v1/models: upstream closed the connection",
    ]


def test_an_mcp_exchange_says_its_messages_or_its_stream() -> None:
    from modeltap.core.notices import McpOutcome
    from tests.factories import mcp_audit_record

    post = exchange_view(api="mcp", mcp_server="files", path="/mcp")
    calls = (
        mcp_audit_record(mcp_method="tools/call", tool_name="add"),
        mcp_audit_record(message_type="result", mcp_method="sampling/createMessage"),
    )
    done = Outcome(post, 0, status=200, mcp=McpOutcome("files", calls, 1, 12.0))
    assert lines(done, "12:00:00") == [
        "12:00:00 s1 mcp files 200 - 12ms tools/call add, result to sampling/createMessage"
    ]
    get = exchange_view(api="mcp", method="GET", mcp_server="files")
    stream = Outcome(
        get, 0, status=200, failure="client_gone", mcp=McpOutcome("files", (), 3, 900.0)
    )
    assert lines(stream, "12:00:00") == [
        "12:00:00 s1 mcp files 200 - 900ms GET stream, 3 messages: client gone"
    ]
    refused = Outcome(post, 0, status=400, rejected=Rejected(Rule.MCP_HEADER_MISMATCH))
    assert lines(refused, "12:00:00") == ["12:00:00 s1 mcp - 400 - - refused: mcp_header_mismatch"]


CHAT = exchange_view(session_id="s1")
WS_TURN = exchange_view(session_id="s1", transport="websocket", api="openai.responses")


@pytest.mark.parametrize(
    ("view", "kind", "expired", "status", "ttfb_ms", "line"),
    [
        (CHAT, "upstream_unreachable", None, None, None, "gpt-5 - - 3ms upstream unreachable"),
        (CHAT, "upstream_reset", None, 200, 40.0, "gpt-5 200 in=? out=? 3ms stream cut"),
        (CHAT, "upstream_timeout", "first_byte", None, None, "gpt-5 - - 3ms timeout: first byte"),
        (CHAT, "upstream_timeout", "idle", 200, 40.0, "gpt-5 200 in=? out=? 3ms timeout: idle"),
        (CHAT, "client_gone", None, 200, 40.0, "gpt-5 200 in=? out=? 3ms client gone"),
        (CHAT, "upstream_protocol_error", None, None, None, "gpt-5 - - 3ms upstream broke HTTP"),
        (WS_TURN, "upstream_reset", None, None, 40.0, "gpt-5 - in=? out=? 3ms stream cut"),
        (WS_TURN, "client_gone", None, None, None, "gpt-5 - - 3ms client gone"),
        (WS_TURN, "proxy_stopped", None, None, 40.0, "gpt-5 - in=? out=? 3ms proxy stopped"),
    ],
)
def test_a_failed_exchange_says_what_happened(
    view: ExchangeView,
    kind: str,
    expired: Phase | None,
    status: int | None,
    ttfb_ms: float | None,
    line: str,
) -> None:
    """Issue 15: not ``gpt-stub - in=? out=? 1ms``, but what went wrong."""
    response = response_event(
        session_id="s1", model="gpt-5", status=status, ttfb_ms=ttfb_ms, duration_ms=3.0
    )
    error = error_event(session_id="s1", error=kind)
    outcome = Outcome(view, 0, status=status, response=response, error=error, expired=expired)
    assert lines(outcome, "12:00:00") == [f"12:00:00 s1 {view.api} {line}"]


async def test_a_line_per_exchange_unless_quiet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with tap(tmp_path, quiet=False) as t:
        http_ = t.addon(Http)
        chat_through(t, **{"x-modeltap-session": "s1"})
        line = capsys.readouterr().err
        assert " s1 openai.chat_completions gpt-5 200 in=21 out=5 " in line
        t.tctx.options.update(modeltap_quiet=True)
        assert t.addon(Console) not in t.run.listeners
        http_.requestheaders(model_flow("/__modeltap/"))
        assert capsys.readouterr().err == ""
