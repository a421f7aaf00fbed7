"""Tests for modeltap.report.report: the JSON report, its text rendering and the command.

Fixtures are built from the dataclasses of modeltap.evidence.records and written with
records.to_json_line; every report is validated against report.schema.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from modeltap.apis import anthropic_messages
from modeltap.evidence import records
from modeltap.evidence.capture import MESSAGES_NOT_RECORDED, Capture
from modeltap.evidence.records import (
    AuditRecord,
    Cost,
    Event,
    ResponseEvent,
    ToolCall,
    ToolResult,
    Usage,
)
from modeltap.report.report import build_report, main, render_text, tool_arguments
from tests.factories import (
    audit_record,
    rejected_event,
    response_event,
    schema,
    ts,
    write_capture,
)

USAGE = Usage(100, 20, 120, 0, 0, 0)
#: What claude-sonnet-4-5 costs for USAGE by the price table: 100 x $3 + 20 x $15 per Mtok.
COST = Cost(0.0006, "genai-prices 0.2.3", "anthropic/claude-sonnet-4-5")
REPORT_SCHEMA = jsonschema.Draft202012Validator(schema("report.schema.json"))


#: A Claude Code request: what every turn of these reports asked for.
CLAUDE_REQUEST: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "tool_names": ("Read", "Bash", "fs.grep"),
    "reasoning_effort": "high",
    "thinking": {"type": "adaptive"},
    "image_details": (None,),
    "image_count": 1,
    "instructions_sha256": "b" * 64,
    "api": anthropic_messages.NAME,
    "provider": "anthropic",
    "route": "anthropic",
    "upstream": "https://api.anthropic.com",
    "path": "/v1/messages?beta=true",
    "hosted_tools": (records.HostedTool("web_search_20250305", "web_search"),),
    "body_bytes": 2048,
    "body_sha256": "c" * 64,
}


def audit(seq: int, at: float, **fields: Any) -> AuditRecord:
    """A Claude Code request ``at`` seconds into the run."""
    return audit_record(**(CLAUDE_REQUEST | {"seq": seq, "ts": ts(at)} | fields))


def response(seq: int, at: float, **fields: Any) -> ResponseEvent:
    """Its streamed answer; finish reason ``tool_use`` when it made calls."""
    calls = fields.get("tool_calls", ())
    answer = {
        "seq": seq,
        "request_id": None,
        "ts": ts(at),
        "api": anthropic_messages.NAME,
        "response_id": f"msg_{seq}",
        "model": "claude-sonnet-4-5-20250929",
        "usage": USAGE,
        "finish_reasons": ("tool_use",) if calls else ("end_turn",),
        "ttfb_ms": 300.0,
        "ttft_ms": 420.5,
        "duration_ms": 900.0,
        "cost": COST,
    }
    return response_event(**(answer | fields))


def write(directory: Path, audits: list[AuditRecord], events: list[Event]) -> Path:
    """Write the fixture, validating each line against the shipped schemas."""
    return write_capture(directory, audits, events)


def tool_loop(directory: Path) -> Path:
    """Turn 0 calls Read, turn 1 answers it and calls fs.grep, turn 2 answers and ends."""
    return write(
        directory,
        [
            audit(1, 0.0),
            audit(2, 1.5, tool_results=(ToolResult("toolu_1", 3000),)),
            audit(3, 3.0, tool_results=(ToolResult("toolu_1", 3000), ToolResult("toolu_2", 17))),
        ],
        [
            response(
                1, 1.0, tool_calls=(ToolCall("toolu_1", "Read", '{"file_path": "README.md"}'),)
            ),
            response(2, 2.0, tool_calls=(ToolCall("toolu_2", "grep", "TODO", namespace="fs"),)),
            response(3, 4.0, duration_ms=1250.0),
        ],
    )


def report_of(directory: Path) -> dict[str, Any]:
    report = build_report(Capture.load(directory))
    # What build_report returns must be JSON as it is, and match the schema.
    REPORT_SCHEMA.validate(orjson.loads(orjson.dumps(report)))
    return report


# --------------------------------------------------------------------------
# JSON report


def test_turns_follow_the_turn_result_shape(tmp_path: Path) -> None:
    report = report_of(tool_loop(tmp_path))
    (session,) = report["sessions"]
    turn0, turn1, turn2 = session["turns"]

    assert (turn0["turn_index"], turn0["turn"]) == (0, 1)  # a position, and the number shown
    assert [t["turn"] for t in (turn0, turn1, turn2)] == [1, 2, 3]
    assert [t["retry_of_turn"] for t in (turn0, turn1, turn2)] == [None, None, None]
    assert [t["attempt"] for t in (turn0, turn1, turn2)] == [1, 1, 1]
    assert turn0["model"] == "claude-sonnet-4-5"
    assert (turn0["provider"], turn0["model_source"]) == ("anthropic", "body")
    assert turn0["tools_advertised"] == ["Read", "Bash", "fs.grep"]
    assert turn0["tool_calls"] == ["Read"]
    assert turn0["tool_invocations"] == [
        {
            "name": "Read",
            "call_id": "toolu_1",
            "args": {"file_path": "README.md"},
            "result": None,
            "bytes": 3000,
            "is_error": None,  # the factory's record carries no flag
            "duration_ms": 500.0,  # response ended at 1.0 s, answer sent at 1.5 s
            "result_turn_index": 1,
            "result_turn": 2,
            "execution": None,  # no MCP tools/call ran it: not observed
            "failed": None,  # and no flag says how it went
        }
    ]
    assert turn1["tool_invocations"][0]["name"] == "fs.grep"
    assert turn1["tool_invocations"][0]["args"] == "TODO"  # free text kept as sent
    assert turn1["tool_invocations"][0]["duration_ms"] == 1000.0
    assert turn2["tool_calls"] == []
    # events.jsonl's names, the provider's numbers.
    assert turn0["token_usage"] == {
        "input_tokens": 100,
        "output_tokens": 20,
        "total_tokens": 120,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "total_summed": False,
    }
    assert turn2["execution_time_ms"] == 1250.0
    assert (turn0["input"], turn0["response"]) == (None, None)
    assert turn0["errors"] == []


def test_session_roll_up(tmp_path: Path) -> None:
    report = report_of(tool_loop(tmp_path))
    (session,) = report["sessions"]

    assert session["tool_calls"] == ["Read", "fs.grep"]
    assert [inv["call_id"] for inv in session["tool_invocations"]] == ["toolu_1", "toolu_2"]
    assert session["token_usage"]["input_tokens"] == 300
    assert session["token_usage"]["cache_read_tokens"] == 0
    assert session["execution_time_ms"] == 3050.0
    assert session["errors"] == []
    assert session["evidence_complete"] is True
    assert report["evidence_complete"] is True
    assert report["counts"] == {
        "audit_records": 3,
        "events": 3,
        "sessions": 1,
        "turns": 3,
        "retries": 0,
        "refusals": 0,
        "pass_through": 0,
        "load_errors": 0,
    }
    assert session["retry_count"] == 0
    assert session["coverage"]["messages"] == {
        "status": "unavailable",
        "reason": MESSAGES_NOT_RECORDED,
        "reasons": [MESSAGES_NOT_RECORDED],
    }
    assert session["coverage"]["actions"] == {"status": "complete"}


def test_stream_without_usage(tmp_path: Path) -> None:
    write(tmp_path, [audit(1, 0.0)], [response(1, 1.0, usage=Usage())])
    report = report_of(tmp_path)
    (session,) = report["sessions"]

    assert set(session["token_usage"].values()) == {None, False}
    assert session["token_usage"]["total_summed"] is False
    reason = "the provider reported no token usage for this turn"
    assert session["coverage"]["usage"] == {
        "status": "unavailable",
        "reason": f"[turn 1] {reason}",
        "reasons": [f"[turn 1] {reason}"],
    }
    assert session["turns"][0]["coverage"]["usage"] == {
        "status": "unavailable",
        "reason": reason,
        "reasons": [reason],
    }


def test_known_zero_stays_zero_and_unknown_stays_null(tmp_path: Path) -> None:
    write(
        tmp_path,
        [audit(1, 0.0), audit(2, 2.0)],
        [
            response(1, 1.0, usage=Usage(0, 0, 0, 0, 0, 0)),
            response(2, 3.0, usage=Usage(10, 2, None, 0, 0, 0)),
        ],
    )
    usage = report_of(tmp_path)["sessions"][0]["token_usage"]
    assert usage["input_tokens"] == 10
    assert usage["cache_read_tokens"] == 0
    # Anthropic reports no total: the second turn's is the sum of its parts.
    assert usage["total_tokens"] == 12
    assert usage["total_summed"] is True


def test_refused_request(tmp_path: Path) -> None:
    refusal = rejected_event(
        ts=ts(2.0),
        rule="fail_closed",
        message="an earlier request of this session was refused and --fail-closed is set",
        path="/v1/messages",
        api=None,
    )
    write(tmp_path, [audit(1, 0.0)], [response(1, 1.0), refusal])
    report = report_of(tmp_path)
    (session,) = report["sessions"]

    assert session["coverage"]["status"]["status"] == "partial"
    assert "request refused (fail_closed)" in session["coverage"]["status"]["reason"]
    assert session["refusals"][0]["rule"] == "fail_closed"
    assert session["errors"] == [f"request refused (fail_closed): {refusal.message}"]
    assert report["counts"]["refusals"] == 1
    assert report["evidence_complete"] is False


def test_tool_call_without_result(tmp_path: Path) -> None:
    write(
        tmp_path,
        [audit(1, 0.0)],
        [response(1, 1.0, tool_calls=(ToolCall("toolu_9", "Bash", '{"command": "ls"}'),))],
    )
    session = report_of(tmp_path)["sessions"][0]

    inv = session["tool_invocations"][0]
    assert (inv["bytes"], inv["duration_ms"], inv["result_turn_index"]) == (None, None, None)
    assert inv["result_turn"] is None
    reason = "[turn 1] tool call Bash (toolu_9) got no result in a later request"
    assert session["coverage"]["actions"] == {
        "status": "partial",
        "reason": reason,
        "reasons": [reason],
    }
    assert session["capture_errors"] == [reason]


def test_incomplete_response_errors_are_prefixed(tmp_path: Path) -> None:
    write(
        tmp_path,
        [audit(1, 0.0), audit(2, 2.0)],
        [
            response(1, 1.0),
            response(
                2,
                3.0,
                evidence_complete=False,
                capture_errors=("stream ended before message_stop",),
            ),
        ],
    )
    session = report_of(tmp_path)["sessions"][0]

    assert session["errors"] == ["[turn 2] stream ended before message_stop"]
    assert session["turns"][1]["errors"] == ["stream ended before message_stop"]
    reason = "[turn 2] response not seen completely (stream ended before message_stop)"
    assert session["coverage"]["events"] == {
        "status": "partial",
        "reason": reason,
        "reasons": [reason],
    }
    # A turn can only lower a channel: turn 0 stays complete on its own.
    assert session["turns"][0]["coverage"]["events"] == {"status": "complete"}


def test_torn_last_line(tmp_path: Path) -> None:
    tool_loop(tmp_path)
    with (tmp_path / "audit.jsonl").open("ab") as out:
        out.write(records.to_json_line(audit(4, 5.0))[:-30])
    report = report_of(tmp_path)

    assert report["load_errors"] == [
        {
            "file": "audit.jsonl",
            "line": 4,
            "message": "incomplete last line (torn write: no newline at end of file)",
        }
    ]
    data = report["sessions"][0]["coverage"]["data"]
    assert data["status"] == "partial"
    assert "audit.jsonl line 4" in data["reason"]
    assert report["coverage"]["data"]["status"] == "partial"


def test_cost_per_turn_session_and_capture(tmp_path: Path) -> None:
    """Estimates sum up; one turn that could not be priced makes the sum unknown, not 0."""
    report = report_of(tool_loop(tmp_path))
    session = report["sessions"][0]
    assert [turn["cost"] for turn in session["turns"]] == [
        {
            "estimate_usd": 0.0006,
            "source": "genai-prices 0.2.3",
            "priced_as": "anthropic/claude-sonnet-4-5",
            "note": None,
        }
    ] * 3
    total = {
        "estimate_usd": 0.0018,
        "source": "genai-prices 0.2.3",
        "priced_as": None,
        "note": None,
    }
    assert session["cost"] == total
    assert report["cost"] == total

    unpriced = Cost(None, "genai-prices 0.2.3", None, "model not in the price table")
    (tmp_path / "gap").mkdir()
    write(
        tmp_path / "gap",
        [audit(1, 0.0), audit(2, 2.0), audit(3, 4.0)],
        [response(1, 1.0), response(2, 3.0, cost=unpriced)],  # turn 2 has no response
    )
    gap = report_of(tmp_path / "gap")
    turns = gap["sessions"][0]["turns"]
    assert [turn["cost"] and turn["cost"]["estimate_usd"] for turn in turns] == [0.0006, None, None]
    assert gap["cost"] == {
        "estimate_usd": None,
        "source": "genai-prices 0.2.3",
        "priced_as": None,
        "note": "2 of 3 turns could not be priced",
    }
    assert Capture.load(tmp_path / "gap").sessions["s-1"].turns[0].cost == COST


def test_empty_capture(tmp_path: Path) -> None:
    write(tmp_path, [], [])
    report = report_of(tmp_path)
    assert report["sessions"] == []
    assert report["evidence_complete"] is False
    assert report["coverage"]["events"]["status"] == "unavailable"


def test_tool_arguments() -> None:
    assert tool_arguments('{"a": 1}') == {"a": 1}
    assert tool_arguments("[1]") == "[1]"  # not an object: kept as sent
    assert tool_arguments("{broken") == "{broken"
    assert tool_arguments(None) is None


# --------------------------------------------------------------------------
# Text


def test_render_text_key_lines(tmp_path: Path) -> None:
    text = render_text(report_of(tool_loop(tmp_path)))
    lines = text.splitlines()

    assert lines[0] == f"modeltap report  {tmp_path}"
    assert lines[1] == (
        "runs 1   sessions 1   turns 3   refusals 0   unreadable lines 0   evidence complete"
    )
    assert "session s-1   run run-1   stop: not recorded" in lines
    assert "  tools advertised (3): Read, Bash, fs.grep" in lines
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["turn", "model"])
    table = lines[header : header + 5]  # header, three turns, the "all" row
    assert table[0].split() == [
        *("turn", "model", "provider", "http", "tools", "in", "out", "total", "est.", "$"),
        *("time", "evidence", "calls"),
    ]
    assert table[1].split() == [
        *("1", "claude-sonnet-4-5", "anthropic", "200", "3", "100", "20", "120", "$0.0006"),
        *("900", "ms", "complete", "Read"),
    ]
    assert table[-1].split() == [
        *("all", "300", "60", "360", "$0.0018", "3.0", "s", "complete", "2", "calls")
    ]
    # Columns line up: every table row has the same width up to "calls".
    assert len({line.index("complete") for line in table[1:]}) == 1
    assert "    turn 1  Read     toolu_1  -> turn 2  2.9 KB  500 ms" in lines
    assert "    turn 2  fs.grep  toolu_2  -> turn 3    17 B   1.0 s" in lines
    assert (
        "  usage     in 300  out 60  total 360  cache read 0  cache write 0  reasoning 0" in lines
    )
    assert "  cost      $0.0018 estimated by genai-prices 0.2.3" in lines
    assert (
        "    messages  unavailable  message content is not recorded (names, counts and hashes only)"
        in lines
    )
    assert "    actions   complete" in lines
    assert text.endswith("? = unknown (not reported or not seen)\n")


def test_render_text_shows_gaps(tmp_path: Path) -> None:
    write(
        tmp_path,
        [audit(1, 0.0), audit(2, 2.0)],
        [
            response(1, 1.0, tool_calls=(ToolCall("toolu_9", "Bash", "{}"),), usage=Usage()),
            response(
                2,
                3.0,
                usage=Usage(),
                evidence_complete=False,
                capture_errors=("stream cut",),
                cost=Cost(None, "genai-prices 0.2.3", None, "input or output tokens not reported"),
            ),
        ],
    )
    lines = render_text(report_of(tmp_path)).splitlines()

    assert lines[1].endswith("evidence INCOMPLETE")
    assert "    turn 1  Bash  toolu_9  no result" in lines
    assert "  usage     in ?  out ?  total ?  cache read ?  cache write ?  reasoning ?" in lines
    assert (
        "  cost      ? estimated by genai-prices 0.2.3 (1 of 2 turns could not be priced)" in lines
    )
    assert "    [turn 2] stream cut" in lines
    actions = lines.index(
        "    actions   partial      [turn 1] tool call Bash (toolu_9) got no result"
        " in a later request"
    )
    # A second reason goes on its own line, under the first.
    assert lines[actions + 1] == (
        "                           [turn 2] response not seen completely (stream cut)"
    )
    assert (
        "    usage     unavailable  [turns 1-2] the provider reported no token usage for this turn"
        in lines
    )


# --------------------------------------------------------------------------
# Command


def test_main_prints_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tool_loop(tmp_path))]) == 0
    assert capsys.readouterr().out.startswith("modeltap report  ")


def test_main_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tool_loop(tmp_path)), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    REPORT_SCHEMA.validate(report)
    assert report["sessions"][0]["tool_calls"] == ["Read", "fs.grep"]


def test_main_on_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nope")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("modeltap report: no such directory")


def test_a_session_with_no_turn_names_no_price_table(tmp_path: Path) -> None:
    """The agent bypassed the proxy: no turn was priced, so no table estimated
    anything (the line read ``? estimated by none (no turn to price)``)."""
    unsupported = "No outbound model requests captured; audit unsupported"
    session = {
        "run_id": "r1", "session_id": "eval-42", "ts": ts(1), "stop_reason": "completed",
        "requests_audited": 0, "refusals": 0, "tool_calls_admitted": 0,
        "evidence_complete": False, "capture_errors": [unsupported], "message": unsupported,
        "otlp_logs_dropped": None, "upstream_insecure": False,
    }  # fmt: skip
    write_capture(tmp_path, [], [], sessions=[session])
    text = render_text(build_report(Capture.load(tmp_path)))
    assert "  cost      ? (no turn to price)" in text.splitlines()


def test_check_on_a_session_still_open_says_how_to_end_it(tmp_path: Path) -> None:
    """Run while the proxy still runs, check failed with only "has not ended"."""
    from modeltap.report import check

    write_capture(
        tmp_path, [audit_record(session_id="eval-42")], [response_event(session_id="eval-42")]
    )
    assert check.problems(Capture.load(tmp_path))["eval-42"][0] == (
        "the session has not ended (no sessions.jsonl line yet): stop the proxy, or run "
        f"`modeltap session end eval-42 --out {tmp_path}`, before the check (a proxy killed "
        "with -9 writes no line)"
    )
