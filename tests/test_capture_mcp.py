"""Capture reading MCP executions back from recorded lines (SPEC 3b, 6): which
model call each ``tools/call`` ran, how it ended, what coverage and
``no_tool_errors`` make of it. The lines are the proxy's own types, written
as the proxy writes them (tests/factories.py); the end-to-end run is
tests/test_proxy_mcp_pairing.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from modeltap.core.sessions import SessionTracker
from modeltap.evidence.capture import Capture
from modeltap.evidence.records import (
    AuditRecord,
    Event,
    McpAuditRecord,
    McpMessageRef,
    McpRefused,
    RejectedEvent,
    ResponseEvent,
    ToolCall,
    ToolResult,
)
from modeltap.report.report import build_report
from tests.factories import (
    audit_record,
    mcp_result_event,
    mcp_tools_call,
    rejected_event,
    response_event,
    ts,
    write_capture,
)

ADD = ToolCall(call_id="call_1", name="mcp__files__add", arguments='{"b": 3, "a": 2}')


def asked(*calls: ToolCall) -> list[AuditRecord | Event]:
    """Turn 1 (seq 1): a request whose response asks for ``calls``."""
    return [audit_record(seq=1), response_event(seq=1, tool_calls=calls)]


def answered(seq: int, *call_ids: str) -> AuditRecord:
    """A later request carrying the results of ``call_ids`` (OpenAI: no flag)."""
    results = tuple(ToolResult(call_id=c, bytes=2, is_error=None) for c in call_ids)
    return audit_record(seq=seq, ts=ts(5), tool_results=results)


def load(tmp_path: Path, *lines: AuditRecord | McpAuditRecord | Event) -> Capture:
    audits = [line for line in lines if isinstance(line, AuditRecord | McpAuditRecord)]
    events = [line for line in lines if isinstance(line, Event)]
    return Capture.load(write_capture(tmp_path, audits, events))


def tracked(*lines: AuditRecord | McpAuditRecord | Event) -> list[str]:
    """The ``capture_errors`` the proxy's session line would carry, fed the
    lines in the order the proxy wrote them."""
    tracker = SessionTracker(run_id="run-1", session_id="s-1")
    for line in lines:
        if isinstance(line, AuditRecord):
            tracker.audited(line)
        elif isinstance(line, McpAuditRecord):
            tracker.mcp_audited([line], ())
        elif isinstance(line, ResponseEvent):
            tracker.responded(line)
        elif isinstance(line, RejectedEvent):
            tracker.refused(line)
        else:
            tracker.mcp_answered(line)  # type: ignore[arg-type]
    return list(tracker.status().capture_errors)


def test_an_execution_pairs_by_tool_name_and_canonical_arguments(tmp_path: Path) -> None:
    lines: list[Any] = [
        *asked(ADD),
        mcp_tools_call(2, "add", {"a": 2, "b": 3}, ts=ts(2)),
        mcp_result_event(seq=2, ts=ts(3)),
    ]
    capture = load(tmp_path, *lines)
    session = capture.sessions["s-1"]
    (inv,) = session.turns[0].tool_invocations
    assert inv.execution is not None and inv.execution.seq == 2
    assert (inv.execution.outcome, inv.execution.failed, inv.failed) == ("result", False, False)
    assert inv.execution.result_bytes == 30 and inv.execution.duration_ms == 12.5
    # Its result never came back, but the tool side was seen whole.
    assert session.coverage.actions.status == "complete"
    assert session.expect.no_tool_errors().status == "passed"
    assert tracked(*lines) == [] == session.capture_errors


def test_an_execution_after_the_result_came_back_ran_no_model_call(tmp_path: Path) -> None:
    """SPEC 3b: an execution runs a call before the request that carries its
    result; a call answered without one ran elsewhere (and stops waiting)."""
    lines: list[Any] = [
        *asked(ADD),
        answered(2, "call_1"),
        response_event(seq=2, ts=ts(6)),
        mcp_tools_call(3, "add", {"a": 2, "b": 3}, ts=ts(7)),
        mcp_result_event(seq=3, ts=ts(8)),
    ]
    session = load(tmp_path, *lines).sessions["s-1"]
    assert session.turns[0].tool_invocations[0].execution is None
    assert [e.call for e in session.mcp_executions] == [None]
    assert (
        tracked(*lines)
        == session.capture_errors
        == [
            "MCP tools/call add on files (seq 3) ran no tool call the model asked for "
            "(no call of that tool with equal arguments or its call id)"
        ]
    )


def test_the_meta_call_id_pairs_whatever_the_name(tmp_path: Path) -> None:
    call = ToolCall(call_id="toolu_9", name="Whatever", arguments="{}")
    capture = load(
        tmp_path,
        *asked(call),
        mcp_tools_call(2, "add", {"a": 1}, tool_call_id="toolu_9"),
        mcp_result_event(seq=2),
    )
    (inv,) = capture.sessions["s-1"].turns[0].tool_invocations
    assert inv.execution is not None and inv.execution.record.tool_call_id == "toolu_9"


def test_different_arguments_pair_nothing_and_each_side_says_so(tmp_path: Path) -> None:
    lines: list[Any] = [
        *asked(ADD),
        mcp_tools_call(2, "add", {"a": 2, "b": 4}),
        mcp_result_event(seq=2),
    ]
    session = load(tmp_path, *lines).sessions["s-1"]
    (inv,) = session.turns[0].tool_invocations
    assert inv.execution is None and inv.failed is None  # not observed, never "succeeded"
    (unasked,) = session.unasked_executions
    assert unasked.call is None and unasked.tool == "add"
    assert session.capture_errors == [
        "[turn 1] tool call mcp__files__add (call_1) got no result in a later request; "
        "no MCP tools/call seen in this session ran it",
        "MCP tools/call add on files (seq 2) ran no tool call the model asked for: "
        "its arguments differ from those of tool call mcp__files__add (call_1)",
    ]
    assert tracked(*lines) == session.capture_errors


def test_a_session_without_mcp_traffic_says_the_tool_side_was_not_seen(tmp_path: Path) -> None:
    local = ToolCall(call_id="call_2", name="lookup", arguments="{}")
    session = load(tmp_path, *asked(ADD, local)).sessions["s-1"]
    assert session.coverage.actions.reasons == (
        "[turn 1] tool call mcp__files__add (call_1) got no result in a later request; it "
        "names an MCP tool, but no MCP tools/call was seen in this session (MCP over stdio, "
        "or a server not mounted with --mcp, is invisible to the proxy)",
        # A tool the agent names as its own says what it always said.
        "[turn 1] tool call lookup (call_2) got no result in a later request",
    )


def test_a_jsonrpc_error_in_an_http_200_is_a_tool_error(tmp_path: Path) -> None:
    error = mcp_result_event(
        seq=2, outcome="error", error_code=-32603, is_error=None, content=None, status=200
    )
    capture = load(tmp_path, *asked(ADD), mcp_tools_call(2, "add", {"a": 2, "b": 3}), error)
    session = capture.sessions["s-1"]
    (inv,) = session.turns[0].tool_invocations
    assert inv.execution is not None
    assert (inv.execution.outcome, inv.execution.failed) == ("error", True)
    verdict = session.expect.no_tool_errors()
    assert verdict.status == "failed"
    assert "add on MCP server files (seq 2, mcp__files__add, turn 1): JSON-RPC error -32603" in (
        str(verdict)
    )
    (reported,) = build_report(capture)["sessions"]
    assert reported["tool_errors"] == 1
    assert reported["turns"][0]["tool_invocations"][0]["execution"]["error_code"] == -32603


def test_an_execution_without_its_answer_is_unknown(tmp_path: Path) -> None:
    lines: list[Any] = [*asked(ADD), mcp_tools_call(2, "add", {"a": 2, "b": 3})]
    session = load(tmp_path, *lines).sessions["s-1"]
    (inv,) = session.turns[0].tool_invocations
    assert inv.execution is not None and inv.execution.outcome is None
    assert inv.execution.failed is None and inv.failed is None
    assert session.coverage.actions.reasons == (
        "[turn 1] tool call mcp__files__add (call_1) got no result in a later request; "
        "its MCP execution (seq 2) has no answer read whole",
    )
    verdict = session.expect.no_tool_errors()
    assert verdict.status == "unavailable", str(verdict)
    assert tracked(*lines) == session.capture_errors


def test_an_answer_not_read_whole_leaves_the_tool_side_open(tmp_path: Path) -> None:
    torn = mcp_result_event(seq=2, evidence_complete=False, capture_errors=("stream cut",))
    session = load(
        tmp_path, *asked(ADD), mcp_tools_call(2, "add", {"a": 2, "b": 3}), torn
    ).sessions["s-1"]
    assert session.coverage.actions.status == "partial"


def test_an_input_required_execution_ends_with_its_retry(tmp_path: Path) -> None:
    lines: list[Any] = [
        *asked(ADD),
        mcp_tools_call(2, "add", {"a": 2, "b": 3}),
        mcp_result_event(seq=2, result_type="input_required", content=None, is_error=None),
        mcp_tools_call(3, "add", {"a": 2, "b": 3}, continues_seq=2),
        mcp_result_event(seq=3, is_error=True),
    ]
    session = load(tmp_path, *lines).sessions["s-1"]
    (execution,) = session.mcp_executions
    assert [r.seq for r in execution.retries] == [3]
    assert execution.answer is not None and execution.answer.seq == 3
    assert (execution.outcome, execution.call) == ("tool_error", (0, 0))
    assert session.coverage.actions.status == "complete"
    assert tracked(*lines) == session.capture_errors == []


def test_a_flagged_result_and_a_clean_execution_still_fail(tmp_path: Path) -> None:
    """The wire's own flag is evidence too: either failing fails the verdict."""
    result = ToolResult(call_id="call_1", bytes=2, is_error=True)
    session = load(
        tmp_path,
        *asked(ADD),
        mcp_tools_call(2, "add", {"a": 2, "b": 3}),
        mcp_result_event(seq=2),
        audit_record(seq=3, ts=ts(5), tool_results=(result,)),
    ).sessions["s-1"]
    assert session.expect.no_tool_errors().status == "failed"


def test_results_told_by_their_executions_need_no_wire_flag(tmp_path: Path) -> None:
    session = load(
        tmp_path,
        *asked(ADD),
        mcp_tools_call(2, "add", {"a": 2, "b": 3}),
        mcp_result_event(seq=2),
        answered(3, "call_1"),
        response_event(seq=3, ts=ts(6)),
    ).sessions["s-1"]
    assert session.turns[1].results_of[0].execution is not None
    assert session.expect.no_tool_errors().status == "passed"
    # Without the execution, an OpenAI result cannot tell.
    (tmp_path / "bare").mkdir()
    bare = load(
        tmp_path / "bare",
        *asked(ADD),
        answered(3, "call_1"),
        response_event(seq=3, ts=ts(6)),
    ).sessions["s-1"]
    assert bare.expect.no_tool_errors().status == "unavailable"


def test_a_session_of_mcp_traffic_alone_is_no_model_session(tmp_path: Path) -> None:
    session = load(tmp_path, mcp_tools_call(1, "add", {"a": 1}), mcp_result_event(seq=1)).sessions[
        "s-1"
    ]
    assert [e.call for e in session.mcp_executions] == [None]
    # No turn: the session says what it is, once, not once per execution.
    assert session.capture_errors == [
        "MCP session: 1 MCP message and no model request; "
        "1 tools/call execution, none asked for by an observed model call"
    ]


def test_a_refused_tools_call_is_a_denied_call(tmp_path: Path) -> None:
    refusal = rejected_event(
        rule="tool_budget_exceeded",
        message="over budget",
        api="mcp",
        path="/mcp",
        mcp=McpRefused(
            mcp_server="files",
            mcp_session=None,
            messages=(McpMessageRef("request", "tools/call", 4, "delete_file"),),
        ),
    )
    capture = load(tmp_path, *asked(), refusal)
    (denied,) = capture.sessions["s-1"].denied_tool_calls
    assert (denied.rule, denied.server, denied.tool, denied.jsonrpc_id) == (
        "tool_budget_exceeded",
        "files",
        "delete_file",
        4,
    )
    assert build_report(capture)["sessions"][0]["denied_tool_calls"][0]["tool"] == "delete_file"
