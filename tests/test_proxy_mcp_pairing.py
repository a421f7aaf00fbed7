"""An agent loop whose tool calls run on MCP, through the proxy, read back (SPEC 3b, 6).

The model is the upstream stub (tests/upstream.py) spoken to with the official
``openai`` SDK; its tool calls (named as Claude Code names MCP tools,
``mcp__shapes__add``) are executed with the official ``mcp`` SDK client on the
FastMCP server of tests/mcp_server.py, mounted with ``--mcp shapes=URL``; both
go through one proxy in one session. The out dir is then read as a user reads
it: ``Capture.load``, ``modeltap report`` and ``modeltap check``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import jsonschema
import mcp_types as types
import openai
import orjson
import pytest

from modeltap.evidence.capture import Capture
from modeltap.report import check
from modeltap.report import report as report_command
from modeltap.report.view import build_page, build_view_data
from tests import mcp_shapes
from tests.conftest import read_jsonl
from tests.factories import schema
from tests.test_proxy_mcp import SERVER, proxied
from tests.upstream import Reply, Upstream, chat_text_json
from tests.view_browser import CHROMIUM, CHROMIUM_ARGS, PageWatch, require_browser, screenshot

REPORT_SCHEMA = jsonschema.Draft202012Validator(schema("report.schema.json"))
PREFIX = f"mcp__{SERVER}__"
TOOLS: Any = [
    {"type": "function", "function": {"name": PREFIX + name, "parameters": {}}}
    for name in ("add", "lookup_order", "weather")
]


def tool_calls_reply(n: int, *calls: tuple[str, str, dict[str, Any]]) -> Reply:
    """A chat completion asking for ``calls`` (``(call id, tool, arguments)``)."""
    return Reply(
        json={
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1760000000,
            "model": "gpt-5",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {
                                    "name": PREFIX + tool,
                                    "arguments": orjson.dumps(args).decode(),
                                },
                            }
                            for call_id, tool, args in calls
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
        }
    )


def result_text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def agent(
    tmp_path: Path,
    upstream: Upstream,
    *,
    run: set[str] | None = None,
    send_results: bool = True,
    **config: Any,
) -> list[str]:
    """The agent loop: ask the model, run each call it asks for on the MCP
    server (those named in ``run``, default all), send the results back;
    stop at a text answer, or after the first round when not ``send_results``.
    Returns what each MCP call answered (``ok``, ``isError`` or the refusal)."""
    outcomes: list[str] = []
    proxy_config = {"routes": [f"stub={upstream.url}"], "session": "agent", **config}
    async with proxied(tmp_path, **proxy_config) as (proxy, url):
        model = openai.AsyncOpenAI(base_url=f"{proxy.url}/stub/v1", api_key="k", max_retries=0)
        async with mcp_shapes.client(url, "legacy") as tools:
            messages: Any = [{"role": "user", "content": "go"}]
            while True:
                out = await model.chat.completions.create(
                    model="gpt-5", messages=messages, tools=TOOLS
                )
                message = out.choices[0].message
                if not message.tool_calls:
                    break
                messages.append(message.model_dump(exclude_none=True))
                for call in message.tool_calls:
                    assert call.type == "function"
                    tool = call.function.name.removeprefix(PREFIX)
                    if run is not None and tool not in run:
                        continue
                    try:
                        answer = await tools.call_tool(tool, orjson.loads(call.function.arguments))
                    except Exception as refused:  # the proxy's JSON-RPC refusal
                        outcomes.append(f"refused: {refused}")
                        continue
                    outcomes.append("isError" if answer.is_error else "ok")
                    messages.append(
                        {"role": "tool", "tool_call_id": call.id, "content": result_text(answer)}
                    )
                if not send_results:
                    break
        await model.close()
    return outcomes


def report_of(out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    """``modeltap report --json`` and ``modeltap report`` of ``out``."""
    capsys.readouterr()  # what was printed before
    assert report_command.main([str(out), "--json"]) == 0
    as_json: dict[str, Any] = orjson.loads(capsys.readouterr().out)
    REPORT_SCHEMA.validate(as_json)  # executions, denied calls and all
    assert report_command.main([str(out)]) == 0
    return as_json, capsys.readouterr().out


def test_each_model_call_is_shown_with_the_mcp_execution_that_ran_it(
    tmp_path: Path, upstream: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream.replies.append(
        tool_calls_reply(
            1,
            ("call_add", "add", {"b": 3, "a": 2}),  # key order differs from the wire's: canonical
            ("call_order", "lookup_order", {"order_id": "A-17"}),
        )
    )
    upstream.replies.append(chat_text_json("gpt-5", "done"))
    assert asyncio.run(agent(tmp_path, upstream)) == ["ok", "isError"]
    out = tmp_path / "out"

    capture = Capture.load(out)
    session = capture.sessions["agent"]
    first, second = session.turns
    add, order = first.tool_invocations
    assert add.execution is not None and order.execution is not None
    assert (add.execution.server, add.execution.tool) == (SERVER, "add")
    assert (add.execution.outcome, add.execution.failed) == ("result", False)
    assert add.execution.duration_ms is not None and add.execution.result_bytes is not None
    assert (order.execution.outcome, order.execution.failed) == ("tool_error", True)
    assert order.execution.answer is not None and order.execution.answer.status == 200
    assert order.failed is True  # OpenAI's tool results carry no flag: MCP's isError says it
    assert order.result_is_error is None
    assert [e.call for e in session.mcp_executions] == [(0, 0), (0, 1)]
    assert session.unasked_executions == ()
    assert capture.evidence_complete, capture.capture_errors

    # The assertion that an OpenAI wire cannot judge alone is judged from MCP.
    verdict = session.expect.no_tool_errors()
    assert verdict.status == "failed", str(verdict)
    assert f"lookup_order on MCP server {SERVER}" in str(verdict)
    assert "isError: true" in str(verdict)
    assert first.expect.no_tool_errors().status == "failed"  # the turn whose call failed
    carried = second.expect.no_tool_errors()  # and the one that carried its result back
    assert carried.status == "failed" and "sent back in turn 2" in str(carried)

    as_json, text = report_of(out, capsys)
    (reported,) = as_json["sessions"]
    assert (reported["tool_errors"], reported["tool_outcomes_unknown"]) == (1, 0)
    calls = reported["turns"][0]["tool_invocations"]
    assert [c["execution"]["outcome"] for c in calls] == ["result", "tool_error"]
    assert [c["failed"] for c in calls] == [False, True]
    assert [e["call"]["call_id"] for e in reported["mcp_executions"]] == ["call_add", "call_order"]
    assert f"MCP lookup_order on {SERVER}: isError" in text
    assert f"MCP add on {SERVER}: ok" in text
    assert "tool errors  1" in text

    # The proxy's own line agrees with the reader.
    (status,) = [s for s in read_jsonl(out / "sessions.jsonl") if s["session_id"] == "agent"]
    assert status["evidence_complete"] is True and status["mcp_tool_calls"] == 2
    assert check.main([str(out)]) == 0
    cases = tmp_path / "cases.toml"
    cases.write_text('[[case]]\nname = "tools worked"\nsession = "agent"\nexpect_no_error = true\n')
    capsys.readouterr()
    assert check.main([str(out), "--expect", str(cases)]) == 1
    printed = capsys.readouterr().out
    assert "[FAIL] tools worked" in printed and "lookup_order" in printed


def test_the_tool_side_completes_a_call_whose_result_never_came_back(
    tmp_path: Path, upstream: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    """The agent runs ``add`` on MCP and stops before sending its result: the
    execution says what the tool did. ``weather``, never run, says so."""
    upstream.replies.append(
        tool_calls_reply(1, ("call_add", "add", {"a": 1, "b": 2}), ("call_w", "weather", {}))
    )
    outcomes = asyncio.run(agent(tmp_path, upstream, run={"add"}, send_results=False))
    assert outcomes == ["ok"]
    out = tmp_path / "out"

    capture = Capture.load(out)
    session = capture.sessions["agent"]
    (turn,) = session.turns
    add, weather = turn.tool_invocations
    assert not add.answered and add.execution is not None and add.execution.failed is False
    assert weather.execution is None and weather.failed is None  # not observed, not "ok"
    assert session.coverage.actions.reasons == (
        f"[turn 1] tool call {PREFIX}weather (call_w) got no result in a later request; "
        "no MCP tools/call seen in this session ran it",
    )
    verdict = session.expect.no_tool_errors()
    assert verdict.status == "unavailable", str(verdict)
    assert "actions channel is partial" in str(verdict)

    (status,) = [s for s in read_jsonl(out / "sessions.jsonl") if s["session_id"] == "agent"]
    assert status["evidence_complete"] is False
    assert status["capture_errors"] == session.capture_errors  # one definition
    assert check.main([str(out)]) == 1

    as_json, text = report_of(out, capsys)
    calls = as_json["sessions"][0]["turns"][0]["tool_invocations"]
    assert calls[0]["execution"]["outcome"] == "result" and calls[1]["execution"] is None
    assert "MCP: not observed" in text
    assert as_json["sessions"][0]["tool_outcomes_unknown"] == 1


def test_a_run_call_alone_is_complete_evidence(tmp_path: Path, upstream: Upstream) -> None:
    upstream.replies.append(tool_calls_reply(1, ("call_add", "add", {"a": 1, "b": 2})))
    assert asyncio.run(agent(tmp_path, upstream, send_results=False)) == ["ok"]
    capture = Capture.load(tmp_path / "out")
    session = capture.sessions["agent"]
    assert session.coverage.actions.status == "complete", session.capture_errors
    assert session.expect.no_tool_errors().status == "passed"
    (status,) = [
        s for s in read_jsonl(tmp_path / "out" / "sessions.jsonl") if s["session_id"] == "agent"
    ]
    assert status["evidence_complete"] is True


def test_a_denied_tools_call_is_listed(
    tmp_path: Path, upstream: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream.replies.append(
        tool_calls_reply(
            1, ("call_add", "add", {"a": 1, "b": 2}), ("call_w", "weather", {"city": "Oslo"})
        )
    )
    outcomes = asyncio.run(agent(tmp_path, upstream, send_results=False, max_tool_calls=1))
    assert outcomes[0] == "ok" and "tool_budget_exceeded" in outcomes[1]
    capture = Capture.load(tmp_path / "out")
    session = capture.sessions["agent"]
    (denied,) = session.denied_tool_calls
    assert (denied.rule, denied.server, denied.tool) == ("tool_budget_exceeded", SERVER, "weather")
    assert [e.tool for e in session.mcp_executions] == ["add"]  # the denied one never ran
    as_json, text = report_of(tmp_path / "out", capsys)
    assert [d["tool"] for d in as_json["sessions"][0]["denied_tool_calls"]] == ["weather"]
    assert f"weather on {SERVER}: refused (tool_budget_exceeded)" in text


def test_the_page_shows_each_execution_under_the_model_call(
    tmp_path: Path, upstream: Upstream
) -> None:
    """``modeltap view``'s data and page, in a real headless Chromium."""
    upstream.replies.append(
        tool_calls_reply(
            1,
            ("call_add", "add", {"a": 2, "b": 3}),
            ("call_order", "lookup_order", {"order_id": "A-17"}),
        )
    )
    upstream.replies.append(chat_text_json("gpt-5", "done"))
    asyncio.run(agent(tmp_path, upstream))
    out = tmp_path / "out"
    capture = Capture.load(out)
    (session,) = build_view_data(capture)["sessions"]
    calls = session["turns"][0]["invocations"]
    assert [c["execution"]["outcome"] for c in calls] == ["result", "tool_error"]
    assert all(c["execution"]["t"] is not None for c in calls)
    assert [e["call"] for e in session["mcp_executions"]] == [
        {"turn_index": 0, "position": 0},
        {"turn_index": 0, "position": 1},
    ]

    require_browser()
    from playwright.sync_api import sync_playwright

    page_file = tmp_path / "view.html"
    page_file.write_text(build_page(out), encoding="utf-8")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            tab = chromium.new_page(viewport={"width": 1400, "height": 900})
            watch = PageWatch(tab)
            tab.goto(page_file.as_uri())
            tab.wait_for_selector("html[data-ready=true]")
            bars = tab.locator("#rows .row[data-key=t1] [data-role=mcp-execution]")
            assert bars.count() == 2  # on the timeline, in the model turn's lane
            titles = [bars.nth(i).get_attribute("title") for i in range(2)]
            assert titles[0] is not None and titles[0].startswith(f"MCP add on {SERVER}: ok")
            assert titles[1] is not None and titles[1].startswith(
                f"MCP lookup_order on {SERVER}: isError"
            )
            tab.click("#rows .row[data-key=t1]")
            shown = [
                str(t).strip()
                for t in tab.locator("#tool-calls [data-role=mcp-execution]").all_inner_texts()
            ]
            assert [s.split(" · ")[0] for s in shown] == [
                f"MCP add on {SERVER}: ok",
                f"MCP lookup_order on {SERVER}: isError",
            ]
            screenshot(tab, "mcp-executions")
            watch.assert_clean()
        finally:
            chromium.close()


# ------------------------------------------------- no session named (the common setup)


def test_without_a_session_named_mcp_traffic_keeps_its_own_session(
    tmp_path: Path, upstream: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    """No ``--session``, no header: SPEC 3b puts MCP traffic in one session per
    ``Mcp-Session-Id``, apart from the model's turns. Nothing is paired across
    sessions on a guess, and the MCP session says what it is (not "No outbound
    model requests captured"); check fails it, saying how to join them."""
    upstream.replies.append(
        tool_calls_reply(
            1,
            ("call_add", "add", {"a": 2, "b": 3}),
            ("call_order", "lookup_order", {"order_id": "A-17"}),
        )
    )
    upstream.replies.append(chat_text_json("gpt-5", "done"))
    assert asyncio.run(agent(tmp_path, upstream, session=None)) == ["ok", "isError"]
    out = tmp_path / "out"

    records = read_jsonl(out / "audit.jsonl")
    model_sessions = {r["session_id"] for r in records if r.get("api") != "mcp"}
    mcp = [r for r in records if r.get("api") == "mcp"]
    by_mcp_session = {(r["mcp_session"], r["session_id"]) for r in mcp if r["mcp_session"]}
    assert len(model_sessions) == 1
    assert {s for _, s in by_mcp_session}.isdisjoint(model_sessions)
    # one modeltap session per Mcp-Session-Id, and back
    assert (
        len({m for m, _ in by_mcp_session})
        == len(by_mcp_session)
        == len({s for _, s in by_mcp_session})
    )

    capture = Capture.load(out)
    (model_session,) = [capture.sessions[s] for s in model_sessions]
    add, order = model_session.turns[0].tool_invocations
    assert add.execution is None and order.execution is None  # not observed here
    mcp_session_ids = {s for _, s in by_mcp_session}
    for sid in mcp_session_ids:
        errors = capture.sessions[sid].capture_errors
        assert errors and errors[0].startswith("MCP session: "), errors
    capsys.readouterr()
    assert check.main([str(out)]) == 1
    printed = capsys.readouterr().out
    assert "MCP session: " in printed and "No outbound" not in printed


def test_a_session_of_mcp_traffic_alone_says_what_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """MCP traffic and no model request (the model's went elsewhere, or
    bypassed the proxy): not "audit unsupported" (MCP was audited), but an
    MCP session whose executions no observed model call asked for; check
    fails it, saying so."""

    async def tools_only() -> None:
        async with proxied(tmp_path) as (_proxy, url), mcp_shapes.client(url, "legacy") as tools:
            await tools.list_tools()
            await tools.call_tool("add", {"a": 1, "b": 2})

    asyncio.run(tools_only())
    out = tmp_path / "out"
    statuses = read_jsonl(out / "sessions.jsonl")
    (with_calls,) = [s["session_id"] for s in statuses if s["mcp_tool_calls"]]
    mcp_lines = [r for r in read_jsonl(out / "audit.jsonl") if r["session_id"] == with_calls]
    said = (
        f"MCP session: {len(mcp_lines)} MCP messages and no model request; "
        "1 tools/call execution, none asked for by an observed model call"
    )
    # HTTP+SSE: the GET stream opens before the server names a session (it is
    # the run's), the POSTs belong to the Mcp-Session-Id's: both say what they are.
    statuses = read_jsonl(out / "sessions.jsonl")
    assert all(s["message"].startswith("MCP session: ") for s in statuses), statuses
    (status,) = [s for s in statuses if s["mcp_tool_calls"]]
    assert (status["stop_reason"], status["mcp_tool_calls"]) == ("completed", 1)
    assert status["message"] == said
    assert status["evidence_complete"] is False
    assert status["capture_errors"] == [said]

    capture = Capture.load(out)
    session = capture.sessions[status["session_id"]]
    coverage = session.coverage
    assert (coverage.actions.status, coverage.actions.reasons) == ("unavailable", (said,))
    assert coverage.usage.status == "unavailable"
    assert coverage.events.status == "complete"  # the execution's answer was read whole
    assert coverage.status.status == "complete"  # nothing refused, nothing broke
    assert session.capture_errors == [said]  # one definition: the proxy's line agrees

    capsys.readouterr()
    assert check.main([str(out)]) == 1
    printed = capsys.readouterr().out
    assert said in printed and "No outbound" not in printed
    as_json, text = report_of(out, capsys)
    assert "No outbound" not in text
    (reported,) = [s for s in as_json["sessions"] if s["session_id"] == with_calls]
    assert [e["tool"] for e in reported["mcp_executions"]] == ["add"]
