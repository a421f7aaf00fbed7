"""One definition of complete evidence: sessions.jsonl, Capture, report and check agree.

Each case drives the real proxy with an SDK, ends the session through the control
API, stops the proxy, then reads the out dir four ways. A tool call that never got
its result, a refused request, an incomplete stream each make the session incomplete,
whichever of them reads it, and in the same words.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from websockets.sync.client import connect

from modeltap.app import control
from modeltap.evidence.capture import Capture
from modeltap.evidence.coverage import PROXY_REPORTED
from modeltap.evidence.records import NO_REQUESTS_MESSAGE
from modeltap.report.report import build_report
from tests.cli_process import cli_main
from tests.conftest import Running, read_jsonl
from tests.reliability.faults import figure
from tests.test_proxy_guards import TOOLS, tool_call_reply
from tests.upstream import Reply, chat_chunk

SESSION = "agree-1"
HEADERS = {"x-modeltap-session": SESSION}
CHAT: Any = [{"role": "user", "content": "go"}]


def oai(running: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=running.base() + "/v1", api_key="k", max_retries=0)


def complete(running: Running) -> None:
    oai(running).chat.completions.create(model="gpt-5", messages=CHAT, extra_headers=HEADERS)


def tool_never_answered(running: Running) -> None:
    """The model asks for `lookup`; the agent stops there."""
    running.upstream.replies.append(tool_call_reply(1))
    out = oai(running).chat.completions.create(
        model="gpt-5", messages=CHAT, tools=TOOLS, extra_headers=HEADERS
    )
    assert out.choices[0].message.tool_calls


def refused_request(running: Running) -> None:
    complete(running)
    with pytest.raises(openai.BadRequestError):
        oai(running).chat.completions.create(model="", messages=CHAT, extra_headers=HEADERS)


def stream_cut(running: Running) -> None:
    running.upstream.replies.append(
        Reply(sse=[(None, chat_chunk("a")), (None, chat_chunk("b"))], cut_after=0)
    )
    with pytest.raises(openai.APIError):
        list(
            oai(running).chat.completions.create(
                model="gpt-5", messages=CHAT, stream=True, extra_headers=HEADERS
            )
        )


def stream_without_its_end(running: Running) -> None:
    """A clean end of the body, but no `[DONE]`: the agent cannot tell, the evidence can."""
    running.upstream.replies.append(Reply(sse=[(None, chat_chunk("a"))]))
    list(
        oai(running).chat.completions.create(
            model="gpt-5", messages=CHAT, stream=True, extra_headers=HEADERS
        )
    )


def websocket_tool_never_answered(running: Running) -> None:
    def script(message: dict[str, Any], n: int) -> list[dict[str, Any]]:
        call = {"type": "function_call", "id": "fc_1", "call_id": "call_ws", "name": "lookup"}
        call |= {"arguments": "{}", "status": "completed"}
        done = {"id": "resp_1", "object": "response", "status": "completed", "model": "gpt-5"}
        done |= {"output": [call], "usage": {"input_tokens": 1, "output_tokens": 1}}
        return [{"type": "response.completed", "response": done}]

    running.upstream.ws_script = script
    url = running.base().replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers=HEADERS) as ws:
        create = {"type": "response.create", "model": "gpt-5", "instructions": "i"}
        ws.send(orjson.dumps(create | {"tools": [], "input": []}).decode())
        while orjson.loads(ws.recv(timeout=10))["type"] != "response.completed":
            pass


def audit_file_moved(running: Running) -> None:
    """A log rotation under the running proxy, mid-session: turn 0's line is gone."""
    complete(running)
    (running.out / "audit.jsonl").rename(running.out / "audit.jsonl.1")
    complete(running)


def events_file_deleted(running: Running) -> None:
    complete(running)
    (running.out / "events.jsonl").unlink()
    complete(running)


CASES: dict[str, tuple[Callable[[Running], None], bool, str]] = {
    # name: (agent, evidence complete?, a reason every reader must give)
    "complete": (complete, True, ""),
    "tool-never-answered": (
        tool_never_answered,
        False,
        "[turn 1] tool call lookup (call_1) got no result in a later request",
    ),
    "refused-request": (refused_request, False, "request refused (missing_model)"),
    "stream-cut": (stream_cut, False, "[turn 1] error event: upstream_"),
    "stream-without-its-end": (stream_without_its_end, False, "[turn 1] response not seen"),
    "audit-file-moved": (
        audit_file_moved,
        False,
        "audit.jsonl was moved or deleted under the running proxy; this session's lines",
    ),
    "events-file-deleted": (
        events_file_deleted,
        False,
        "events.jsonl was moved or deleted under the running proxy; this session's lines",
    ),
    "websocket-tool-never-answered": (
        websocket_tool_never_answered,
        False,
        "[turn 1] tool call lookup (call_ws) got no result in a later request",
    ),
    # The harness ends a session no request carried (the agent bypassed the proxy).
    "never-seen": (lambda running: None, False, NO_REQUESTS_MESSAGE),
}


def check_cli(out: Path, *args: str) -> tuple[int, str]:
    result = cli_main("check", str(out), *args)
    return result.returncode, result.stdout


@pytest.mark.parametrize("case", list(CASES))
def test_every_reader_agrees(start_proxy: Callable[..., Running], case: str) -> None:
    agent, expected, reason = CASES[case]
    running = start_proxy()
    agent(running)
    (ended,) = control.end_session(running.out, SESSION)
    running.proxy.stop()

    (line,) = [s for s in read_jsonl(running.out / "sessions.jsonl") if s["session_id"] == SESSION]
    assert orjson.loads(orjson.dumps(ended.status)) == line
    session = Capture.load(running.out).sessions[SESSION]
    (reported,) = [s for s in build_report(Capture.load(running.out))["sessions"]]
    code, printed = check_cli(running.out)
    alone, printed_alone = check_cli(running.out, "--session", SESSION)

    assert (alone, printed_alone) == (code, printed)  # the one session, named or not
    assert line["evidence_complete"] is expected
    assert session.evidence_complete is expected
    assert reported["evidence_complete"] is expected
    assert code == (0 if expected else 1), printed
    if expected:
        assert line["capture_errors"] == session.capture_errors == [] and "ok   session" in printed
        return
    assert f"FAIL session {SESSION}" in printed
    # The same computation gave the same words: every reason of the line is one of
    # Capture's own (none had to be carried over as "the proxy reported: ...").
    assert set(line["capture_errors"]) <= set(session.capture_errors)
    assert not any(e.startswith(PROXY_REPORTED) for e in session.capture_errors)
    for text in (str(line["capture_errors"]), str(session.capture_errors), printed):
        assert reason in text, text
    figure(
        f"agreement_{case}",
        line_reasons=len(line["capture_errors"]),
        capture_reasons=len(session.capture_errors),
        check_exit=code,
    )


def test_check_reads_a_dir_holding_only_sessions_jsonl(
    start_proxy: Callable[..., Running],
) -> None:
    """The agent bypassed the proxy: a session named with --session saw no traffic.
    It is reported at stop, and check names it."""
    running = start_proxy(session="eval-7")
    running.proxy.stop()
    assert sorted(p.name for p in running.out.iterdir()) == ["sessions.jsonl"]
    (line,) = read_jsonl(running.out / "sessions.jsonl")
    assert line["session_id"] == "eval-7" and line["requests_audited"] == 0
    assert line["message"] == "No outbound model requests captured; audit unsupported"
    code, printed = check_cli(running.out)
    assert code == 1
    assert "FAIL session eval-7" in printed
    assert "No outbound model requests captured; audit unsupported" in printed
    assert check_cli(running.out, "--session", "eval-7")[0] == 1
    # A session nobody saw at all fails by name too.
    code, printed = check_cli(running.out, "--session", "eval-8")
    assert code == 1 and "FAIL session eval-8" in printed
    # report reads it as well.
    (session,) = build_report(Capture.load(running.out))["sessions"]
    assert session["session_id"] == "eval-7" and session["evidence_complete"] is False


def test_check_fails_a_session_whose_lines_went_missing(
    start_proxy: Callable[..., Running], tmp_path: Path
) -> None:
    """sessions.jsonl beside no audit.jsonl at all (lost, or never written): the
    session's own line says what it audited, and check fails it by name."""
    running = start_proxy()
    complete(running)
    control.end_session(running.out, SESSION)
    running.proxy.stop()
    only = tmp_path / "only-sessions"
    only.mkdir()
    (only / "sessions.jsonl").write_bytes((running.out / "sessions.jsonl").read_bytes())
    code, printed = check_cli(only)
    assert code == 1
    assert f"FAIL session {SESSION}" in printed
    assert (
        "sessions.jsonl says run" in printed
        and "audited 1 requests; audit.jsonl holds 0" in printed
    )


def test_a_file_moved_between_sessions_costs_no_session_its_evidence(
    start_proxy: Callable[..., Running],
) -> None:
    """The harness rotated (or cleaned) the out dir after one session ended: the next
    session lost nothing, and no reader says otherwise; the move is still told."""
    running = start_proxy()
    complete(running)
    control.end_session(running.out, SESSION)
    (running.out / "audit.jsonl").rename(running.out / "audit.jsonl.1")
    (running.out / "events.jsonl").rename(running.out / "events.jsonl.1")
    oai(running).chat.completions.create(
        model="gpt-5", messages=CHAT, extra_headers={"x-modeltap-session": "next"}
    )
    control.end_session(running.out, "next")
    running.proxy.stop()

    moved = [e for e in read_jsonl(running.out / "events.jsonl") if e["kind"] == "file_reopened"]
    assert [(e["file"], e["session_id"], e["lost_lines"]) for e in moved] == [
        ("audit.jsonl", "next", False),
        ("events.jsonl", "next", False),
    ]
    (line,) = [s for s in read_jsonl(running.out / "sessions.jsonl") if s["session_id"] == "next"]
    session = Capture.load(running.out).sessions["next"]
    reported = build_report(Capture.load(running.out))["sessions"]
    assert line["evidence_complete"] is True
    assert session.evidence_complete is True, session.capture_errors
    assert [s["evidence_complete"] for s in reported if s["session_id"] == "next"] == [True]
    code, printed = check_cli(running.out, "--session", "next")
    assert code == 0, printed
