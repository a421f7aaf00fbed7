"""What a run's exchanges share: listeners, the last gate, sessions, stopping."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from modeltap.core.run import Run, new_run_id
from modeltap.evidence.records import NO_REQUESTS_MESSAGE, RequestFacts, ToolCall, ToolResult
from modeltap.evidence.sink import Sink
from modeltap.rules.errors import Rejected
from tests.conftest import Core, exchange_view
from tests.factories import response_event

VIEW = exchange_view(path="/v1/chat/completions?key=sk-secret")


def facts(*results: str) -> RequestFacts:
    return RequestFacts(
        model="gpt-5",
        tool_names=("lookup",),
        reasoning_effort=None,
        thinking=None,
        image_details=(),
        instructions_sha256=None,
        instructions_parts=None,
        stream=False,
        hosted_tools=(),
        tool_results=tuple(ToolResult(call_id=r, bytes=1) for r in results),
        previous_response_id=None,
        generate=None,
    )


def test_run_ids_sort_by_time_and_differ() -> None:
    a, b = new_run_id(), new_run_id()
    assert a != b and a[:8].isdigit() and a[8] == "T"


def test_the_last_gate_writes_the_line_then_counts_it(core: Core) -> None:
    record = core.run.audit(VIEW, facts(), 10, "ab" * 32)
    assert (record.seq, record.path, record.body_bytes) == (
        1,
        "/v1/chat/completions?key=REDACTED",
        10,
    )
    assert core.audit()[0]["seq"] == 1 and core.run.counts["audited"] == 1
    assert core.run.audit(VIEW, facts(), 10, "ab" * 32).seq == 2


def test_the_tool_budget_is_applied_at_the_last_gate(core: Core) -> None:
    core.run.sessions.max_tool_calls = 1
    record = core.run.audit(VIEW, facts(), 1, "a" * 64)
    session = core.run.session("s1")
    assert session is not None
    call = ToolCall(call_id="c1", name="lookup", arguments="{}")
    session.responded(response_event(session_id="s1", seq=record.seq, tool_calls=(call,)))
    core.run.audit(VIEW, facts("c1"), 1, "a" * 64)  # carries the result of call 1: spent
    with pytest.raises(Rejected, match="tool_budget_exceeded"):
        core.run.audit(VIEW, facts(), 1, "a" * 64)


def test_an_unwritable_audit_file_refuses(tmp_path: Path) -> None:
    run = Run("r")
    (tmp_path / "a-file").write_bytes(b"")
    run.sink = Sink(tmp_path / "a-file" / "out")  # under a file: cannot be written
    with pytest.raises(Rejected, match="audit_write_failed"):
        run.audit(VIEW, facts(), 1, "a" * 64)
    assert run.counts["audited"] == 0


def test_stopped_or_ended_sessions_refuse(core: Core) -> None:
    core.run.audit(VIEW, facts(), 1, "a" * 64)
    ended = core.run.end_session("s1")
    assert ended is not None and ended.now
    with pytest.raises(Rejected, match="session_ended"):
        core.run.audit(VIEW, facts(), 1, "a" * 64)
    core.run.stop(1)
    with pytest.raises(Rejected, match="proxy_stopped"):
        core.run.audit(replace(VIEW, session_id="s2"), facts(), 1, "a" * 64)


def test_ending_a_session_no_traffic_carried(core: Core) -> None:
    """The harness says the agent ran in it; nothing came through: its line says so."""
    assert core.run.end_session("bypassed") is None  # unasked: another proxy may know it
    first = core.run.end_session("bypassed", unseen=True)
    assert first is not None and first.now
    assert (first.status.requests_audited, first.status.evidence_complete) == (0, False)
    assert first.status.message == NO_REQUESTS_MESSAGE
    again = core.run.end_session("bypassed", unseen=True)
    assert again is not None and (again.now, again.status) == (False, first.status)
    assert [s["session_id"] for s in core.sessions()] == ["bypassed"]  # one line, once
    with pytest.raises(Rejected, match="session_ended"):
        core.run.audit(replace(VIEW, session_id="bypassed"), facts(), 1, "a" * 64)


def test_ending_a_session_is_idempotent(core: Core) -> None:
    assert core.run.end_session("never-seen") is None
    core.run.audit(VIEW, facts(), 1, "a" * 64)
    first = core.run.end_session("s1")
    second = core.run.end_session("s1")
    assert first is not None and second is not None
    assert (first.now, second.now, first.status) == (True, False, second.status)
    assert len(core.sessions()) == 1
    assert core.heard.args("session_ended") == [("s1",)]


def test_stop_reports_named_sessions_but_not_the_untouched_run_session(core: Core) -> None:
    core.run.settings = replace(core.run.settings, session="named")
    core.run.session("named")  # named at start: reported even without a request
    core.run.session("run-1")  # the implicit one, pass-through traffic only
    core.run.stop(1)
    core.run.stop(2)  # once
    assert [s["session_id"] for s in core.sessions()] == ["named"]
    assert core.heard.names().count("stopped") == 1


def test_a_lost_events_line_lowers_its_sessions_evidence(core: Core, tmp_path: Path) -> None:
    core.run.session("s1")
    assert core.run.sink is not None
    (tmp_path / "a-file").write_bytes(b"")
    core.run.sink = Sink(tmp_path / "a-file" / "out")  # under a file: cannot be written
    error: Any = core.run.failure(VIEW, None, "client_gone", "gone")
    assert error.error == "client_gone"
    status = core.run.sessions.close("s1")
    assert not status.evidence_complete
    assert any("events.jsonl" in e for e in status.capture_errors)


def test_a_moved_file_marks_the_sessions_that_had_lines(core: Core) -> None:
    core.run.audit(VIEW, facts(), 1, "a" * 64)
    core.run.session("idle")  # nothing written for it: nothing lost
    assert core.run.file_reopened("audit.jsonl") == ["s1"]
    status = core.run.sessions.close("s1")
    assert not status.evidence_complete
