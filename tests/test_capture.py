"""Tests for modeltap.evidence.capture: reading a capture directory back.

Fixtures are built from the dataclasses of modeltap.evidence.records and written with
records.to_json_line, so the schema stays in one place; every line written is
also validated against the shipped JSON schemas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from modeltap import apis
from modeltap.evidence import records
from modeltap.evidence.capture import (
    MESSAGES_NOT_RECORDED,
    NO_REQUESTS,
    NO_RESPONSE,
    Capture,
    LoadError,
    decode_event,
    sum_usage,
)
from modeltap.evidence.records import (
    AuditRecord,
    ErrorEvent,
    Event,
    RejectedEvent,
    ResponseEvent,
    ToolCall,
    ToolResult,
    UnauditedEvent,
    Usage,
    WsCloseEvent,
    WsControlEvent,
    WsOpenEvent,
)
from modeltap.evidence.sink import TORN_MARK
from tests.factories import (
    AUDIT_SCHEMA,
    EVENT_SCHEMA,
    RUN,
    audit_record,
    rejected_event,
    response_event,
    schema,
    ts,
    write_capture,
)

FULL_USAGE = Usage(
    input_tokens=100,
    output_tokens=20,
    total_tokens=120,
    cache_read_tokens=0,
    cache_write_tokens=0,
    reasoning_tokens=0,
)
TOOLS = ("get_weather", "fs.read", "lookup")


def audit(seq: int, at: float, **fields: Any) -> AuditRecord:
    """A chat request ``at`` seconds into the run, advertising :data:`TOOLS`."""
    return audit_record(**({"seq": seq, "ts": ts(at), "tool_names": TOOLS} | fields))


def response(seq: int, at: float, **fields: Any) -> ResponseEvent:
    """Its response: full usage, finish reason ``tool_calls`` when it made calls."""
    calls = fields.get("tool_calls", ())
    reasons = ("tool_calls",) if calls else ("stop",)
    defaults = {"seq": seq, "ts": ts(at), "usage": FULL_USAGE, "finish_reasons": reasons}
    return response_event(**(defaults | fields))


def rejected(at: float, **fields: Any) -> RejectedEvent:
    return rejected_event(ts=ts(at), **fields)


def tool_loop(directory: Path) -> Path:
    """Three turns: get_weather answered in turn 1, fs.read answered in turn 2.

    Chat resends the whole history, so turn 2 carries call_1's result again;
    the pairing must use the first later request (turn 1).
    """
    calls0 = (ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)
    calls1 = (ToolCall("call_2", "read", '{"path": "a.txt"}', namespace="fs"),)
    return write_capture(
        directory,
        [
            audit(1, 0.0),
            audit(2, 1.25, tool_results=(ToolResult("call_1", 42),)),
            audit(3, 2.5, tool_results=(ToolResult("call_1", 42), ToolResult("call_2", 128))),
        ],
        [
            response(1, 1.0, tool_calls=calls0),
            response(2, 2.0, tool_calls=calls1, duration_ms=700.0),
            response(3, 3.0, duration_ms=500.0),
        ],
        sessions=[
            {
                "run_id": RUN,
                "session_id": "s-1",
                "ts": ts(4.0),
                "stop_reason": "completed",
                "requests_audited": 3,
                "refusals": 0,
                "tool_calls_admitted": 2,
                "evidence_complete": True,
                "capture_errors": [],
                "message": None,
            }
        ],
    )


def assert_invariant(capture: Capture) -> None:
    """evidence_complete is exactly "no capture errors", at every level."""
    assert capture.evidence_complete == (capture.capture_errors == [])
    for session in capture.sessions.values():
        assert session.evidence_complete == (session.capture_errors == [])
        for turn in session.turns:
            assert turn.evidence_complete == (turn.capture_errors == [])


# --------------------------------------------------------------------------
# A complete three-turn tool loop


def test_tool_loop_groups_turns_and_pairs_results(tmp_path: Path) -> None:
    capture = Capture.load(tool_loop(tmp_path))

    assert capture.load_errors == ()
    assert list(capture.sessions) == ["s-1"]
    session = capture.sessions["s-1"]
    assert [t.index for t in session.turns] == [0, 1, 2]
    assert [t.record.seq for t in session.turns] == [1, 2, 3]
    assert all(t.response is not None for t in session.turns)
    assert session.stop_reason == "completed"

    first, second = session.tool_invocations
    assert (first.name, first.result_turn_index, first.result_bytes) == ("get_weather", 1, 42)
    assert first.duration_ms == 250.0  # response end at 1.0 s -> request at 1.25 s
    assert (second.name, second.result_turn_index, second.result_bytes) == ("fs.read", 2, 128)
    assert second.duration_ms == 500.0


def test_tool_loop_evidence_is_complete(tmp_path: Path) -> None:
    capture = Capture.load(tool_loop(tmp_path))
    session = capture.sessions["s-1"]

    assert session.evidence_complete
    assert session.capture_errors == []
    assert capture.evidence_complete
    coverage = session.coverage.to_json()
    assert coverage["messages"] == {
        "status": "unavailable",
        "reason": MESSAGES_NOT_RECORDED,
        "reasons": [MESSAGES_NOT_RECORDED],
    }
    for name in ("events", "actions", "usage", "status", "data"):
        assert coverage[name] == {"status": "complete"}
    assert_invariant(capture)


def test_tool_helpers_match_bare_and_namespaced_names(tmp_path: Path) -> None:
    capture = Capture.load(tool_loop(tmp_path))
    session = capture.sessions["s-1"]

    for helpers in (capture, session):
        assert helpers.tool_was_called("get_weather")
        assert helpers.tool_was_called("read")  # bare name: any namespace
        assert helpers.tool_was_called("fs.read")  # qualified: that namespace only
        assert not helpers.tool_was_called("other.read")
        assert not helpers.tool_was_called("lookup")  # advertised, never called
        assert helpers.tool_call_count("fs.read") == 1
        assert [c.call_id for c in helpers.tool_calls_for("read")] == ["call_2"]
        assert helpers.tools_advertised() == ["get_weather", "fs.read", "lookup"]


def test_usage_totals_sum_known_counts(tmp_path: Path) -> None:
    capture = Capture.load(tool_loop(tmp_path))

    total = capture.sessions["s-1"].usage
    assert total.input_tokens == 300
    assert total.total_tokens == 360
    assert total.cache_read_tokens == 0  # a known zero stays zero
    assert capture.usage == total
    assert capture.sessions["s-1"].execution_time_ms == 2000.0


# --------------------------------------------------------------------------
# Unknown is not zero


def test_stream_without_usage_is_unavailable_not_zero(tmp_path: Path) -> None:
    write_capture(tmp_path, [audit(1, 0.0)], [response(1, 1.0, usage=Usage())])
    session = Capture.load(tmp_path).sessions["s-1"]

    assert session.usage == Usage()  # every total None, none 0
    usage = session.coverage.usage
    assert usage.status == "unavailable"
    assert usage.reason == "[turn 1] the provider reported no token usage for this turn"
    # Missing usage is the provider's gap, not a hole in what was seen.
    assert session.evidence_complete


def test_known_zero_versus_unknown(tmp_path: Path) -> None:
    zero = Usage(0, 0, 0, 0, None, 0)
    write_capture(
        tmp_path,
        [audit(1, 0.0), audit(2, 2.0)],
        [response(1, 1.0, usage=zero), response(2, 3.0, usage=Usage(5, 1, 6, 0, 0, None))],
    )
    session = Capture.load(tmp_path).sessions["s-1"]

    assert session.usage == Usage(
        input_tokens=5,
        output_tokens=1,
        total_tokens=6,
        cache_read_tokens=0,
        cache_write_tokens=None,  # unknown in turn 0
        reasoning_tokens=None,  # unknown in turn 1
    )
    usage = session.coverage.usage
    assert usage.status == "partial"
    # Chat has no cache-write count: only the reasoning count it carries is missing.
    assert usage.reasons == ("[turn 2] not reported: reasoning_tokens",)


def test_sum_usage_of_nothing_is_unknown() -> None:
    assert sum_usage([]) == Usage()
    assert sum_usage([Usage(0, 0, 0, 0, 0, 0)]) == Usage(0, 0, 0, 0, 0, 0)


def test_missing_duration_makes_session_time_unknown(tmp_path: Path) -> None:
    write_capture(
        tmp_path,
        [audit(1, 0.0), audit(2, 2.0)],
        [response(1, 1.0), response(2, 3.0, duration_ms=None)],
    )
    assert Capture.load(tmp_path).sessions["s-1"].execution_time_ms is None


# --------------------------------------------------------------------------
# Gaps in the evidence


def test_refused_request_lowers_status(tmp_path: Path) -> None:
    write_capture(tmp_path, [audit(1, 0.0)], [response(1, 1.0), rejected(2.0)])
    capture = Capture.load(tmp_path)
    session = capture.sessions["s-1"]

    assert len(session.turns) == 1  # a refused request is no turn
    assert [r.rule for r in session.refusals] == ["malformed_tools"]
    assert session.coverage.status.status == "partial"
    assert session.coverage.status.reasons == (
        "request refused (malformed_tools): the tool list is malformed",
    )
    assert not session.evidence_complete
    assert session.capture_errors == [
        "request refused (malformed_tools): the tool list is malformed"
    ]
    assert capture.capture_errors == [
        "[session s-1] request refused (malformed_tools): the tool list is malformed"
    ]
    assert_invariant(capture)


def test_tool_call_without_result_lowers_actions(tmp_path: Path) -> None:
    calls = (ToolCall("call_9", "lookup", "{}"),)
    write_capture(
        tmp_path,
        [audit(1, 0.0), audit(2, 2.0, tool_results=())],
        [response(1, 1.0, tool_calls=calls), response(2, 3.0)],
    )
    session = Capture.load(tmp_path).sessions["s-1"]

    (inv,) = session.tool_invocations
    assert not inv.answered
    assert (inv.result_bytes, inv.duration_ms) == (None, None)
    actions = session.coverage.actions
    assert actions.status == "partial"
    assert actions.reasons == (
        "[turn 1] tool call lookup (call_9) got no result in a later request",
    )
    assert session.capture_errors == [
        "[turn 1] tool call lookup (call_9) got no result in a later request"
    ]
    assert session.tool_was_called("lookup")  # the call itself was seen


def test_tool_call_without_call_id_and_no_result_stays_unanswered(tmp_path: Path) -> None:
    write_capture(
        tmp_path,
        [audit(1, 0.0), audit(2, 2.0)],
        [response(1, 1.0, tool_calls=(ToolCall(None, "lookup", "{}"),)), response(2, 3.0)],
    )
    actions = Capture.load(tmp_path).sessions["s-1"].coverage.actions
    assert actions.reasons == (
        "[turn 1] tool call lookup has no call_id and no later request's results "
        "matched it by position",
    )


def anon(*sizes: int) -> tuple[ToolResult, ...]:
    return tuple(ToolResult(None, size) for size in sizes)


def test_calls_without_ids_are_paired_by_position_as_gemini_resends_its_history(
    tmp_path: Path,
) -> None:
    # Turn 0 asks for two calls, turn 1 carries both results; turn 1 asks for
    # one more, and turn 2 resends the two old results before the new one.
    two = (ToolCall(None, "lookup", '{"q":1}'), ToolCall(None, "lookup", '{"q":2}'))
    write_capture(
        tmp_path,
        [
            audit(1, 0.0),
            audit(2, 2.0, tool_results=anon(10, 20)),
            audit(3, 4.0, tool_results=anon(10, 20, 30)),
        ],
        [
            response(1, 1.0, tool_calls=two),
            response(2, 3.0, tool_calls=(ToolCall(None, "fetch", "{}"),)),
            response(3, 5.0),
        ],
    )
    session = Capture.load(tmp_path).sessions["s-1"]
    paired = [(i.turn_index, i.result_turn_index, i.result_bytes) for i in session.tool_invocations]
    assert paired == [(0, 1, 10), (0, 1, 20), (1, 2, 30)]
    assert session.evidence_complete


def test_results_with_ids_no_response_named_pair_by_position(tmp_path: Path) -> None:
    # Gemini CLI gives an id-less call an id of its own making.
    write_capture(
        tmp_path,
        [
            audit(1, 0.0),
            audit(2, 2.0, tool_results=(ToolResult("read_file_1_0", 12),)),
            audit(3, 4.0, tool_results=(ToolResult("read_file_1_0", 12), ToolResult("x_2_0", 7))),
        ],
        [
            response(1, 1.0, tool_calls=(ToolCall(None, "read_file", "{}"),)),
            response(2, 3.0, tool_calls=(ToolCall(None, "x", "{}"),)),
            response(3, 5.0),
        ],
    )
    session = Capture.load(tmp_path).sessions["s-1"]
    paired = [(i.result_turn_index, i.result_bytes) for i in session.tool_invocations]
    assert paired == [(1, 12), (2, 7)] and session.evidence_complete


def test_a_result_count_that_does_not_fit_the_history_pairs_nothing(tmp_path: Path) -> None:
    # Turn 1 drops the first answer from its history: which result answers
    # which call is not known, so neither call is claimed answered.
    two = (ToolCall(None, "lookup", "{}"), ToolCall(None, "lookup", "{}"))
    write_capture(
        tmp_path,
        [audit(1, 0.0), audit(2, 2.0, tool_results=anon(20))],
        [response(1, 1.0, tool_calls=two), response(2, 3.0)],
    )
    session = Capture.load(tmp_path).sessions["s-1"]
    assert [i.answered for i in session.tool_invocations] == [False, False]
    assert not session.evidence_complete


def test_incomplete_stream_lowers_events_and_actions(tmp_path: Path) -> None:
    write_capture(
        tmp_path,
        [audit(1, 0.0)],
        [
            response(
                1,
                1.0,
                evidence_complete=False,
                capture_errors=("stream ended before response.completed",),
                usage=Usage(),
            )
        ],
    )
    session = Capture.load(tmp_path).sessions["s-1"]
    reason = "response not seen completely (stream ended before response.completed)"

    assert session.coverage.events.reasons == (f"[turn 1] {reason}",)
    assert session.coverage.actions.status == "partial"
    # One fact, one capture error, even though it lowers two channels.
    assert session.capture_errors == [f"[turn 1] {reason}"]
    assert session.turns[0].errors == ["stream ended before response.completed"]


def test_request_without_response(tmp_path: Path) -> None:
    write_capture(tmp_path, [audit(1, 0.0), audit(2, 2.0)], [response(1, 1.0)])
    session = Capture.load(tmp_path).sessions["s-1"]

    assert session.turns[1].response is None
    assert session.turns[1].usage == Usage()
    assert session.usage.input_tokens is None
    # Turn 2 has no usage; turn 1 has: the session's is partial (one rule, usage_status).
    assert session.turns[1].coverage.usage.status == "unavailable"
    assert session.coverage.usage.status == "partial"
    assert session.coverage.status.status == "partial"
    assert session.capture_errors == [f"[turn 2] {NO_RESPONSE}"]


def test_error_event_lowers_status_and_is_a_turn_error(tmp_path: Path) -> None:
    error = ErrorEvent(
        ts=ts(1.0),
        run_id=RUN,
        session_id="s-1",
        seq=1,
        error="upstream_unreachable",
        message="connection refused",
        transport="http",
        method="POST",
        path="/v1/chat/completions",
    )
    write_capture(tmp_path, [audit(1, 0.0)], [error])
    session = Capture.load(tmp_path).sessions["s-1"]

    assert session.turns[0].error_events == (error,)
    assert session.error_messages == [
        "[turn 1] upstream_unreachable: connection refused",
        f"[turn 1] {NO_RESPONSE}",
    ]
    assert "error event: upstream_unreachable: connection refused" in "; ".join(
        session.coverage.status.reasons
    )


def test_session_without_requests(tmp_path: Path) -> None:
    write_capture(tmp_path, [], [rejected(0.0, session_id="only-refused")])
    capture = Capture.load(tmp_path)
    session = capture.sessions["only-refused"]

    assert session.turns == ()
    assert session.coverage.events.status == "unavailable"
    assert session.coverage.events.reasons == (NO_REQUESTS,)
    assert NO_REQUESTS in session.capture_errors
    assert session.usage == Usage()
    assert not capture.evidence_complete


def test_proxy_reported_incomplete_session(tmp_path: Path) -> None:
    write_capture(
        tmp_path,
        [audit(1, 0.0)],
        [response(1, 1.0)],
        sessions=[
            {
                "run_id": RUN,
                "session_id": "s-1",
                "ts": ts(2.0),
                "stop_reason": "client_gone",
                "requests_audited": 1,
                "refusals": 0,
                "tool_calls_admitted": 0,
                "evidence_complete": False,
                "capture_errors": ["client went away mid-stream"],
                "message": None,
            }
        ],
    )
    session = Capture.load(tmp_path).sessions["s-1"]
    assert session.stop_reason == "client_gone"
    assert session.capture_errors == ["the proxy reported: client went away mid-stream"]


# --------------------------------------------------------------------------
# Reading the files


def test_torn_last_line_is_reported_not_dropped(tmp_path: Path) -> None:
    tool_loop(tmp_path)
    with (tmp_path / "events.jsonl").open("ab") as out:
        out.write(records.to_json_line(response(4, 5.0))[:40])  # killed mid-append
    capture = Capture.load(tmp_path)

    assert capture.load_errors == (
        LoadError(
            "events.jsonl", 4, "incomplete last line (torn write: no newline at end of file)"
        ),
    )
    assert str(capture.load_errors[0]).startswith("events.jsonl line 4: incomplete last line")
    session = capture.sessions["s-1"]
    assert len(session.turns) == 3  # everything before the torn line is kept
    assert session.coverage.data.status == "partial"
    assert session.coverage.data.reasons == (f"unreadable line: {capture.load_errors[0]}",)
    assert not capture.evidence_complete
    # The load error is said once at capture level, not once per session.
    assert capture.capture_errors == [f"unreadable line: {capture.load_errors[0]}"]
    assert_invariant(capture)


def test_invalid_lines_in_the_middle_are_reported(tmp_path: Path) -> None:
    lines = [
        records.to_json_line(audit(1, 0.0)),
        b"{not json\n",
        b"[1, 2]\n",
        orjson.dumps({**orjson.loads(records.to_json_line(audit(2, 1.0))), "seq": "two"}) + b"\n",
        b"\n",
        records.to_json_line(audit(3, 2.0)),
    ]
    (tmp_path / "audit.jsonl").write_bytes(b"".join(lines))
    capture = Capture.load(tmp_path)

    assert [(e.file, e.line, e.message) for e in capture.load_errors] == [
        ("audit.jsonl", 2, "not valid JSON"),
        ("audit.jsonl", 3, "not a JSON object"),
        ("audit.jsonl", 4, "seq: expected int"),
    ]
    assert [r.seq for r in capture.records] == [1, 3]


def test_unknown_keys_and_kinds_from_newer_writers(tmp_path: Path) -> None:
    record = {**orjson.loads(records.to_json_line(audit(1, 0.0))), "future_field": [1]}
    event = orjson.loads(records.to_json_line(response(1, 1.0)))
    event["usage"]["audio_tokens"] = 7
    event["tool_calls"] = [{"call_id": "c", "name": "n", "arguments": "{}", "extra": True}]
    future = {"kind": "compaction", "ts": ts(1.5), "run_id": RUN, "session_id": "s-1"}
    (tmp_path / "audit.jsonl").write_bytes(orjson.dumps(record) + b"\n")
    (tmp_path / "events.jsonl").write_bytes(
        orjson.dumps(event) + b"\n" + orjson.dumps(future) + b"\n"
    )
    capture = Capture.load(tmp_path)

    assert capture.load_errors == ()
    turn = capture.sessions["s-1"].turns[0]
    assert turn.usage == FULL_USAGE
    # namespace was not written: nullable and missing reads as unknown.
    assert turn.tool_calls == (ToolCall("c", "n", "{}", None),)
    assert type(capture.events[1]) is Event
    assert capture.events[1].kind == "compaction"


def test_every_event_kind_round_trips(tmp_path: Path) -> None:
    events: list[Event] = [
        response(1, 1.0),
        rejected(1.5),
        UnauditedEvent(
            ts=ts(1.6), run_id=RUN, session_id="s-1", method="HEAD", host="h", path="/", status=200
        ),
        ErrorEvent(
            ts=ts(1.7),
            run_id=RUN,
            session_id="s-1",
            error="client_gone",
            message="the client closed the connection",
            transport="websocket",
            method=None,
            path=None,
        ),
        WsOpenEvent(
            ts=ts(0.1), run_id=RUN, session_id="s-1", path="/v1/responses", route=None, upstream="u"
        ),
        WsControlEvent(ts=ts(1.8), run_id=RUN, session_id="s-1", type="response.processed"),
        WsCloseEvent(
            ts=ts(1.9),
            run_id=RUN,
            session_id="s-1",
            code=1000,
            reason=None,
            closed_by="client",
            messages_from_client=2,
            messages_from_server=9,
        ),
    ]
    write_capture(tmp_path, [audit(1, 0.0)], events)
    capture = Capture.load(tmp_path)

    assert capture.events == tuple(events)
    session = capture.sessions["s-1"]
    assert len(session.unaudited) == 1
    assert [e.error for e in session.errors] == ["client_gone"]  # no seq: session level


def test_orphan_event_lowers_data(tmp_path: Path) -> None:
    write_capture(tmp_path, [audit(1, 0.0)], [response(1, 1.0), response(7, 2.0)])
    session = Capture.load(tmp_path).sessions["s-1"]

    assert [e.seq for e in session.orphan_events] == [7]
    assert session.coverage.data.reasons == (
        "response event names seq 7, which has no audit record",
    )


def test_sessions_ordered_by_first_appearance_and_linked_by_run(tmp_path: Path) -> None:
    write_capture(
        tmp_path,
        [audit(1, 5.0, session_id="late"), audit(1, 1.0, session_id="early", run_id="run-2")],
        [
            response(1, 6.0, session_id="late", usage=Usage(1, 1, 2, 0, 0, 0)),
            response(1, 2.0, session_id="early", run_id="run-2", usage=Usage(9, 9, 18, 0, 0, 0)),
            rejected(0.5, session_id="refused-first"),
        ],
    )
    capture = Capture.load(tmp_path)

    assert list(capture.sessions) == ["refused-first", "early", "late"]
    # Same seq in two runs: each event finds its own run's record.
    assert capture.sessions["early"].usage.input_tokens == 9
    assert capture.sessions["late"].usage.input_tokens == 1
    assert capture.run_ids == ["run-1", "run-2"]


def test_load_without_sessions_file(tmp_path: Path) -> None:
    write_capture(tmp_path, [audit(1, 0.0)], [response(1, 1.0)])
    capture = Capture.load(tmp_path)
    assert capture.session_ends == ()
    assert capture.sessions["s-1"].stop_reason is None


def test_load_refuses_what_is_not_a_capture(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        Capture.load(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        Capture.load(tmp_path)


# --------------------------------------------------------------------------
# The shipped schemas


def test_schemas_are_valid_draft_2020_12() -> None:
    for name in (
        "audit_record.schema.json",
        "event.schema.json",
        "report.schema.json",
        "verdicts.schema.json",
    ):
        jsonschema.Draft202012Validator.check_schema(schema(name))


def test_schemas_name_every_api_the_writer_writes() -> None:
    """A new wire's records and events must validate: the schemas list its api."""
    names = [api.NAME for api in apis.APIS]
    model_record = AUDIT_SCHEMA.schema["$defs"]["AuditRecord"]
    assert model_record["properties"]["api"]["enum"] == names
    # An MCP line (SPEC 3b) is the other kind of audit line; refusals name its api.
    mcp_record = AUDIT_SCHEMA.schema["$defs"]["McpAuditRecord"]
    assert mcp_record["properties"]["api"]["const"] == apis.MCP.NAME == "mcp"
    assert EVENT_SCHEMA.schema["$defs"]["api"]["enum"] == [*names, "mcp"]
    assert model_record["properties"]["operation"]["enum"] == list(records.OPERATIONS)


def test_schemas_refuse_what_the_writer_never_writes() -> None:
    record = orjson.loads(records.to_json_line(audit(1, 0.0)))
    assert not AUDIT_SCHEMA.is_valid({**record, "extra": 1})
    assert not AUDIT_SCHEMA.is_valid({**record, "image_count": None})
    assert not AUDIT_SCHEMA.is_valid({**record, "operation": None})  # older lines only
    assert not AUDIT_SCHEMA.is_valid({**record, "operation": "embed"})
    assert AUDIT_SCHEMA.is_valid({**record, "operation": "compact"})
    assert not AUDIT_SCHEMA.is_valid({k: v for k, v in record.items() if k != "tool_names"})
    assert AUDIT_SCHEMA.is_valid({**record, "tool_names": None})

    event = orjson.loads(records.to_json_line(response(1, 1.0)))
    assert not EVENT_SCHEMA.is_valid({**event, "extra": 1})
    assert not EVENT_SCHEMA.is_valid({**event, "kind": "nope"})
    assert not EVENT_SCHEMA.is_valid({**event, "usage": {**event["usage"], "input_tokens": "1"}})
    assert not EVENT_SCHEMA.is_valid({**event, "seq": None})  # a response always has a record
    assert not EVENT_SCHEMA.is_valid({**event, "model": "m" * 257})  # identifiers are bounded
    assert not AUDIT_SCHEMA.is_valid({**record, "model": "m" * 257})


def test_file_reopened_event_is_in_the_schema_and_reads_back(tmp_path: Path) -> None:
    event = records.FileReopenedEvent(
        ts=ts(1.0), run_id=RUN, session_id="s-1", file="audit.jsonl", reason="missing"
    )
    line = orjson.loads(records.to_json_line(event))
    EVENT_SCHEMA.validate(line)
    assert not EVENT_SCHEMA.is_valid({**line, "reason": "gone"})
    assert decode_event(line) == event


def test_a_torn_line_closed_by_the_next_writer_is_one_load_error(tmp_path: Path) -> None:
    good = records.to_json_line(audit(1, 0.0))
    torn = records.to_json_line(audit(2, 0.5))[:-1]  # all but its newline: still whole JSON
    (tmp_path / "audit.jsonl").write_bytes(
        good + torn + TORN_MARK + good.replace(b'"seq":1', b'"seq":3')
    )
    capture = Capture.load(tmp_path)
    assert [(e.file, e.line) for e in capture.load_errors] == [("audit.jsonl", 2)]
    assert "torn write" in capture.load_errors[0].message
    assert [t.record.seq for s in capture.sessions.values() for t in s.turns] == [1, 3]


def test_session_counts_that_disagree_with_the_files(tmp_path: Path) -> None:
    end = {
        "run_id": RUN,
        "session_id": "s-1",
        "ts": ts(2.0),
        "stop_reason": "completed",
        "requests_audited": 2,
        "refusals": 0,
        "tool_calls_admitted": 0,
        "evidence_complete": True,
        "capture_errors": [],
        "message": None,
    }
    write_capture(tmp_path, [audit(1, 0.0)], [response(1, 1.0)], sessions=[end])
    session = Capture.load(tmp_path).sessions["s-1"]

    assert session.coverage.data.reasons == (
        "sessions.jsonl says run run-1 audited 2 requests; audit.jsonl holds 1",
    )
    assert not session.evidence_complete
