"""The MCP side of the exchange core alone: request heads, JSON-RPC bodies and
answers in as plain values; audit lines, events, refusals and notices out.
No proxy, no mitmproxy (the real SDK through the proxy: tests/test_proxy_mcp.py)."""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from modeltap.apis.mcp.transport import session_key
from modeltap.core import mcp_sessions
from modeltap.core.body_audit import RequestBody
from modeltap.core.exchange import Exchange
from modeltap.core.gate import RequestHead
from modeltap.core.mcp_exchange import McpStreamTap
from modeltap.core.notices import Forward, McpCall, Outcome, Reply
from modeltap.evidence.records import ToolCall
from modeltap.evidence.sink import Sink
from modeltap.rules.routing import RouteTable
from tests.conftest import Core
from tests.factories import response_event

MS = 1_000_000
SERVER = "http://127.0.0.1:9000/mcp"
SESSION_ID = "3f1b0c9e8d7a4b6c9e8d7a4b6c3f1b0c"  # an Mcp-Session-Id, a capability
KEY = session_key(SESSION_ID)


@pytest.fixture
def core(tmp_path: Path) -> Core:
    made = Core(tmp_path / "out")
    routes = RouteTable.build([], None, [f"files={SERVER}", "legacy=http://127.0.0.1:9001"])
    made.run.settings = replace(made.run.settings, routes=routes)
    return made


def call(
    id: int | str = 0, name: str = "add", arguments: Any = None, **params: Any
) -> dict[str, Any]:
    sent = {"name": name, "arguments": {"a": 2, "b": 3} if arguments is None else arguments}
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {**sent, **params}}


def result(id: int | str = 0, **fields: Any) -> dict[str, Any]:
    value = fields or {"content": [{"type": "text", "text": "5"}], "isError": False}
    return {"jsonrpc": "2.0", "id": id, "result": value}


def head(
    method: str = "POST",
    target: str = "/mcp/files",
    session: str | None = None,
    id: str = "f1",
    **headers: str,
) -> RequestHead:
    named = {k.replace("_", "-"): v for k, v in headers.items()}
    return RequestHead(
        id=id,
        method=method,
        target=target,
        scheme="http",
        host="127.0.0.1",
        port=8787,
        headers=named,
        fields=tuple((k.encode(), v.encode()) for k, v in named.items()),
        session=session,
    )


def post(
    core: Core, message: object, now: int = 10 * MS, raw: bytes | None = None, **fields: Any
) -> tuple[Exchange, Forward | Reply]:
    ex = Exchange.open(core.run, head(**fields), 0)
    if ex.reply is not None:
        return ex, ex.reply
    content = orjson.dumps(message) if raw is None else raw
    decision = ex.receive_body(RequestBody(content, {k: v for k, v in ex_headers(fields)}), now)
    assert isinstance(decision, Forward | Reply)
    return ex, decision


def ex_headers(fields: dict[str, Any]) -> list[tuple[str, str]]:
    skip = {"method", "target", "session", "id"}
    return [(k.replace("_", "-"), v) for k, v in fields.items() if k not in skip]


def sse(*messages: object, ids: bool = True, priming: bool = True) -> list[bytes]:
    """An SSE answer as the SDK's server sends one: a priming event, then one
    ``event: message`` per message (each a chunk)."""
    chunks = [b"id: 1\r\nretry: 100\r\ndata:\r\n\r\n"] if priming else []
    for n, message in enumerate(messages, start=2):
        idline = f"id: {n}\r\n".encode() if ids else b""
        chunks.append(idline + b"event: message\r\ndata: " + orjson.dumps(message) + b"\r\n\r\n")
    return chunks


def stream(ex: Exchange, chunks: list[bytes], now: int = 20 * MS, **headers: str) -> list[bytes]:
    """Answer an exchange with an SSE stream: what went on to the client, in order."""
    tap = ex.started(200, {"content-type": "text/event-stream", **headers}, 15 * MS)
    assert isinstance(tap, McpStreamTap)
    sent = [piece for chunk in chunks for piece in tap(chunk)] + tap(b"")
    ex.ended(200, None, None, None, now)
    return sent


def answer_json(ex: Exchange, message: object, status: int = 200, **headers: str) -> None:
    assert ex.started(status, {"content-type": "application/json", **headers}, 15 * MS) is None
    ex.ended(status, orjson.dumps(message), None, None, 20 * MS)


def outcomes(core: Core) -> list[Outcome]:
    return [args[0] for args in core.heard.args("finished")]


def no_secret(core: Core) -> None:
    for name in ("audit.jsonl", "events.jsonl", "sessions.jsonl"):
        path = core.out / name
        if path.exists():
            assert SESSION_ID.encode() not in path.read_bytes(), name


# ---------------------------------------------------------------- one tools/call


def test_a_tools_call_is_audited_before_it_goes_and_its_result_observed(core: Core) -> None:
    ex, decision = post(core, call(), session="s1", mcp_session_id=SESSION_ID)
    assert isinstance(decision, Forward)
    (line,) = core.audit()  # written before the exchange was let go
    canonical = b'{"a":2,"b":3}'
    assert {k: line[k] for k in list(line)[5:]} == {
        "transport": "http",
        "api": "mcp",
        "route": "files",
        "upstream": "http://127.0.0.1:9000/mcp",
        "path": "/mcp",
        "mcp_server": "files",
        "mcp_session": KEY,
        "protocol_version": None,
        "message_type": "request",
        "mcp_method": "tools/call",
        "jsonrpc_id": 0,
        "batch_index": None,
        "tool_name": "add",
        "arguments_sha256": hashlib.sha256(canonical).hexdigest(),
        "arguments_bytes": len(canonical),
        "tool_call_id": None,
        "continues_seq": None,
        "unchecked_headers": [],
        "body_bytes": len(orjson.dumps(call())),
        "body_sha256": hashlib.sha256(orjson.dumps(call())).hexdigest(),
    }
    assert (line["seq"], line["session_id"], line["request_id"]) == (1, "s1", "f1")
    assert core.events() == []
    sent = stream(ex, sse(result(0, content=[{"type": "text", "text": "5"}], isError=True)))
    assert b"".join(sent).count(b"event: message") == 1  # passed on as it came
    (event,) = core.events()
    assert {k: event[k] for k in ("kind", "seq", "session_id", "request_id")} == {
        "kind": "mcp_result",
        "seq": 1,
        "session_id": "s1",
        "request_id": "f1",
    }
    assert {k: v for k, v in event.items() if k not in ("ts", "run_id", "duration_ms")} | {} == {
        "kind": "mcp_result",
        "session_id": "s1",
        "seq": 1,
        "request_id": "f1",
        "mcp_server": "files",
        "mcp_session": KEY,
        "mcp_method": "tools/call",
        "jsonrpc_id": 0,
        "tool_name": "add",
        "outcome": "result",
        "status": 200,
        "framing": "sse",
        "is_error": True,
        "error_code": None,
        "content": [{"type": "text", "bytes": len(b'{"type":"text","text":"5"}')}],
        "structured_content": False,
        "result_type": None,
        "tools": None,
        "tools_sha256": None,
        "next_cursor": None,
        "evidence_complete": True,
        "capture_errors": [],
    }
    assert event["duration_ms"] >= 0  # an SSE event is timed as it passes (the real clock)
    no_secret(core)


def test_a_json_answer_is_timed_from_forwarding(core: Core) -> None:
    ex, _ = post(core, call(), session="s1")
    answer_json(ex, result(0))
    (event,) = core.events()
    assert (event["framing"], event["duration_ms"]) == ("json", 10.0)  # 10 ms to 20 ms


def test_the_notices_of_an_mcp_exchange(core: Core) -> None:
    ex, _ = post(core, call(), session="s1")
    stream(ex, sse(result(0)))
    assert [n for n in core.heard.names() if n != "chunk"] == [
        "mcp_audited",
        "forwarding",
        "first_byte",
        "mcp_observed",
        "finished",
    ]
    ((view, records, t),) = core.heard.args("mcp_audited")
    assert (view.api, view.mcp_server, records[0].tool_name, t) == ("mcp", "files", "add", 10 * MS)
    ((_, event, answered, _),) = core.heard.args("mcp_observed")
    assert isinstance(answered, McpCall) and answered.record == records[0]
    assert event.kind == "mcp_result" and answered.forwarded_ns == 10 * MS
    (outcome,) = outcomes(core)
    assert outcome.mcp is not None and outcome.mcp.records == records
    assert (outcome.mcp.messages_from_server, outcome.status) == (1, 200)


def test_ids_start_at_zero_and_are_per_direction(core: Core) -> None:
    """The CLIs count from 0, the server its own requests from 1: the client's
    answer to the server's request 1 names that request's method."""
    get = Exchange.open(core.run, head("GET", mcp_session_id=SESSION_ID, id="g1"), 0)
    assert isinstance(get.receive_body(RequestBody(b"", {}), MS), Forward)
    tap = get.started(200, {"content-type": "text/event-stream"}, 2 * MS)
    assert isinstance(tap, McpStreamTap)
    ask = {"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": {}}
    tap(sse(ask, priming=False)[0])
    post(core, {"jsonrpc": "2.0", "id": 1, "result": {"model": "m"}}, mcp_session_id=SESSION_ID)
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    ex, _ = post(core, initialize, id="f2", mcp_session_id=SESSION_ID)
    answer_json(ex, result(1, ok=True))
    lines = core.audit()
    assert [(r["message_type"], r["mcp_method"], r["jsonrpc_id"]) for r in lines] == [
        ("result", "sampling/createMessage", 1),
        ("request", "ping", 1),
    ]
    kinds = [(e["kind"], e.get("mcp_method"), e["seq"]) for e in core.events()]
    assert kinds == [("mcp_request", "sampling/createMessage", None), ("mcp_result", "ping", 2)]


# ---------------------------------------------------------------- answers on other exchanges


def test_a_result_on_a_resumed_get_is_matched_by_session_and_id(core: Core) -> None:
    # Forwarded five seconds before the resumed stream carries its answer.
    asked = time.perf_counter_ns() - 5000 * MS
    ex, _ = post(core, call(7, "pause", {}), now=asked, mcp_session_id=SESSION_ID)
    cut = stream(ex, sse()[:1])  # only the priming event, then the server cut the stream
    assert cut == [b"id: 1\r\nretry: 100\r\ndata:\r\n\r\n"]
    assert core.events() == []  # no answer yet; none is made up
    get = Exchange.open(core.run, head("GET", mcp_session_id=SESSION_ID, last_event_id="1"), 0)
    assert isinstance(get.receive_body(RequestBody(b"", {}), 30 * MS), Forward)
    stream(get, sse(result(7), priming=False), now=50 * MS)
    answered, exchange = core.events()
    assert (answered["kind"], answered["seq"], answered["mcp_method"]) == (
        "mcp_result",
        1,
        "tools/call",
    )
    assert answered["duration_ms"] >= 5000  # from the POST's forwarding, not the GET's
    assert answered["session_id"] == f"mcp-files-{KEY}"  # one session per Mcp-Session-Id
    assert (exchange["kind"], exchange["method"], exchange["resumed"]) == (
        "mcp_exchange",
        "GET",
        True,
    )
    assert exchange["messages_from_server"] == 1
    no_secret(core)


def test_http_sse_endpoint_goes_on_the_mount_and_names_the_session(core: Core) -> None:
    get = Exchange.open(core.run, head("GET", target="/mcp/legacy/sse", id="g1"), 0)
    assert get.rerouted and get.path == "/sse"
    forwarded = get.receive_body(RequestBody(b"", {}), MS)
    assert isinstance(forwarded, Forward)
    assert ("accept-encoding", "identity") in forwarded.headers  # so the endpoint can be read
    tap = get.started(200, {"content-type": "text/event-stream; charset=utf-8"}, 2 * MS)
    assert isinstance(tap, McpStreamTap)
    endpoint = (
        b"event: endpoint\r\ndata: /messages/?session_id=" + SESSION_ID.encode() + b"\r\n\r\n"
    )
    assert tap(endpoint[:20]) == []  # held only until the event is whole: never an empty chunk
    (sent,) = tap(endpoint[20:])
    assert sent == endpoint.replace(b"data: /messages/", b"data: /mcp/legacy/messages/")
    assert get.session_id == f"mcp-legacy-{KEY}"

    target = f"/mcp/legacy/messages/?session_id={SESSION_ID}"
    ex, decision = post(core, call(3), target=target, id="f2")
    assert isinstance(decision, Forward) and ex.path == f"/messages/?session_id={SESSION_ID}"
    ex.started(202, {"content-length": "8"}, 11 * MS)
    ex.ended(202, b"Accepted", None, None, 12 * MS)
    assert core.events() == []  # every answer comes on the GET stream
    (piece,) = tap(sse(result(3), ids=False, priming=False)[0])
    assert piece.startswith(b"event: message")
    tap(b"")
    get.ended(200, None, None, None, 40 * MS)
    (line,) = core.audit()
    assert (line["mcp_session"], line["path"]) == (KEY, "/messages/?session_id=REDACTED")
    answered, exchange = core.events()
    assert (answered["seq"], answered["session_id"], answered["status"]) == (
        1,
        line["session_id"],
        200,
    )
    assert (exchange["endpoint"], exchange["mcp_session"], exchange["path"]) == (
        "rewritten",
        KEY,
        "/sse",
    )
    no_secret(core)


def test_sessionless_answers_are_matched_on_their_own_exchange_only(core: Core) -> None:
    """Two stateless clients both count from 1: neither gets the other's answer."""
    a, _ = post(core, call(1), id="a")
    b, _ = post(core, call(1, "weather", {"city": "Oslo"}), id="b")
    answer_json(b, result(1))
    answer_json(a, result(1))
    first, second = core.events()
    assert (first["request_id"], first["tool_name"]) == ("b", "weather")
    assert (second["request_id"], second["tool_name"]) == ("a", "add")


def test_an_http_error_without_an_answer_is_said_per_request(core: Core) -> None:
    ex, _ = post(core, call(4), mcp_session_id=SESSION_ID)
    ex.started(404, {"content-type": "text/plain"}, 11 * MS)
    ex.ended(404, b"Session not found", None, None, 12 * MS)
    (event,) = core.events()
    assert (event["outcome"], event["status"], event["framing"], event["seq"]) == (
        "http_error",
        404,
        None,
        1,
    )


def test_a_jsonrpc_error_in_an_http_error_is_the_answer(core: Core) -> None:
    ex, _ = post(core, {"jsonrpc": "2.0", "id": 2, "method": "ping"})
    error = {"jsonrpc": "2.0", "id": 2, "error": {"code": -32601, "message": "Method not found"}}
    answer_json(ex, error, status=404)
    (event,) = core.events()
    assert (event["outcome"], event["error_code"], event["status"]) == ("error", -32601, 404)


# ---------------------------------------------------------------- batches and 2026-07-28


def test_a_batch_gives_one_line_per_member(core: Core) -> None:
    note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t"}}
    post(core, [call(10), {"jsonrpc": "2.0", "id": "req-11", "method": "tools/list"}, note])
    lines = core.audit()
    assert [(r["batch_index"], r["jsonrpc_id"], r["mcp_method"]) for r in lines] == [
        (0, 10, "tools/call"),
        (1, "req-11", "tools/list"),
        (2, None, "notifications/progress"),
    ]
    assert len({r["body_sha256"] for r in lines}) == 1 and [r["seq"] for r in lines] == [1, 2, 3]


def test_an_input_required_retry_continues_its_execution(core: Core) -> None:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    first, _ = post(core, call(16, "summarise", {"text": "n"}, _meta=meta))
    asked = {
        "resultType": "input_required",
        "inputRequests": {"ask": {"method": "sampling/createMessage", "params": {}}},
        "requestState": "signed-state",
    }
    answer_json(first, result(16, **asked))
    retry = call(17, "summarise", {"text": "n"}, _meta=meta, requestState="signed-state")
    post(core, retry, id="f2", mcp_protocol_version="2026-07-28", mcp_method="tools/call")
    one, two = core.audit()
    assert (one["continues_seq"], two["continues_seq"]) == (None, one["seq"])
    assert two["protocol_version"] == "2026-07-28"
    kinds = [(e["kind"], e["seq"], e.get("origin"), e.get("input_key")) for e in core.events()]
    assert kinds == [("mcp_result", 1, None, None), ("mcp_request", 1, "input_required", "ask")]
    session = core.run.session(core.run.run_id)
    assert session is not None and session.mcp_tool_calls == 1  # one execution, two calls


def test_a_header_that_contradicts_the_body_is_refused_and_never_forwarded(core: Core) -> None:
    _, decision = post(core, call(3), session="s1", mcp_method="tools/call", mcp_name="delete_file")
    assert isinstance(decision, Reply) and decision.status == 400
    error = orjson.loads(decision.body)
    assert (error["id"], error["error"]["code"], error["error"]["data"]) == (
        3,
        -32020,
        {"rule": "mcp_header_mismatch"},
    )
    assert (
        "(Mcp-Name)" in error["error"]["message"] and "delete_file" not in error["error"]["message"]
    )
    assert core.audit() == []
    (rejected,) = core.events("rejected")
    assert (rejected["rule"], rejected["api"], rejected["path"]) == (
        "mcp_header_mismatch",
        "mcp",
        "/mcp",
    )
    assert rejected["mcp"] == {
        "mcp_server": "files",
        "mcp_session": None,
        "messages": [
            {
                "message_type": "request",
                "mcp_method": "tools/call",
                "jsonrpc_id": 3,
                "tool_name": "add",
            }
        ],
    }
    assert "forwarding" not in core.heard.names()


def test_param_headers_are_checked_against_the_catalogue_the_server_sent(core: Core) -> None:
    schema = {
        "type": "object",
        "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
    }
    listing, _ = post(core, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    answer_json(listing, result(1, tools=[{"name": "forecast", "inputSchema": schema}]))
    _, ok = post(core, call(2, "forecast", {"region": "north"}), mcp_param_region="north", id="f2")
    _, wrong = post(
        core, call(3, "forecast", {"region": "north"}), mcp_param_region="south", id="f3"
    )
    _, unknown = post(core, call(4, "add"), mcp_param_region="north", id="f4")
    assert isinstance(ok, Forward) and isinstance(unknown, Forward)
    assert isinstance(wrong, Reply) and orjson.loads(wrong.body)["error"]["code"] == -32020
    lines = core.audit()
    assert [r["unchecked_headers"] for r in lines[1:]] == [[], ["region"]]


# ---------------------------------------------------------------- refusals: fail closed


def refusal(decision: Forward | Reply) -> tuple[int, str]:
    assert isinstance(decision, Reply)
    error = orjson.loads(decision.body)["error"]
    return decision.status, error["data"]["rule"]


def test_bad_bodies_are_refused_with_their_rule_in_jsonrpc(core: Core) -> None:
    cases = [
        (b"{oops", "invalid_json"),
        (b'{"jsonrpc":"2.0","id":1,"id":1,"method":"ping"}', "duplicate_key"),
        (orjson.dumps({"jsonrpc": "2.0", "id": 1}), "mcp_not_jsonrpc"),
        (
            orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}),
            "mcp_malformed_params",
        ),
    ]
    for raw, rule in cases:
        _, decision = post(core, None, raw=raw)
        assert refusal(decision) == (400, rule)
    _, coded = post(core, None, raw=b"x", content_encoding="bz2")
    assert refusal(coded) == (400, "undecodable_content_encoding")
    assert core.audit() == []
    assert [e["rule"] for e in core.events("rejected")] == [r for _, r in cases] + [
        "undecodable_content_encoding"
    ]


def test_a_body_over_max_body_is_refused_413(core: Core) -> None:
    core.run.settings = replace(core.run.settings, max_body=64)
    _, declared = post(core, call(1, arguments={"text": "x" * 100}), content_length="200")
    assert refusal(declared) == (413, "body_too_large")
    _, sent = post(core, call(1, arguments={"text": "x" * 100}), id="f2")
    assert refusal(sent) == (413, "body_too_large")


def test_a_message_in_an_ended_session_is_refused(core: Core) -> None:
    post(core, call(1), session="s1")
    assert core.run.end_session("s1") is not None
    _, decision = post(core, call(2), session="s1", id="f2")
    assert refusal(decision) == (400, "session_ended")
    _, stream_refused = post(core, None, raw=b"", method="GET", session="s1", id="f3")
    assert refusal(stream_refused) == (400, "session_ended")
    assert len(core.audit()) == 1


def test_fail_closed_refuses_every_later_message_of_the_session(core: Core) -> None:
    core.run.settings = replace(core.run.settings, fail_closed=True)
    post(core, None, raw=b"{", session="s1")
    _, decision = post(core, call(2), session="s1", id="f2")
    assert refusal(decision) == (400, "fail_closed")
    _, other = post(core, call(2), session="s2", id="f3")
    assert isinstance(other, Forward)


def test_an_unwritable_audit_file_refuses_503(core: Core, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    core.run.sink = Sink(tmp_path / "a-file" / "out")
    _, decision = post(core, call(1))
    assert refusal(decision) == (503, "audit_write_failed")


def test_a_get_with_a_body_is_refused(core: Core) -> None:
    ex = Exchange.open(core.run, head("GET"), 0)
    assert refusal(ex.receive_body(RequestBody(orjson.dumps(call()), {}), MS)) == (
        400,
        "method_override",
    )


def test_an_mcp_route_matches_no_model_endpoint(core: Core) -> None:
    """HTTP+SSE's /messages/ is no Anthropic endpoint on an MCP route."""
    ex, decision = post(core, call(1), target="/mcp/legacy/messages/?session_id=x")
    assert isinstance(decision, Forward) and ex.endpoint is None and ex.api == "mcp"


# ---------------------------------------------------------------- the tool-call budget


def test_a_model_call_and_its_execution_count_once(core: Core) -> None:
    core.run.sessions.max_tool_calls = 2
    session = core.run.session("s1")
    assert session is not None
    record = core.run.audit(replace(view_of(core), session_id="s1"), facts(), 1, "a" * 64)
    calls = (
        ToolCall("toolu_1", "mcp__files__add", '{"a": 2, "b": 3}'),
        ToolCall("toolu_2", "mcp__files__add", '{"a": 1, "b": 1}'),
    )
    session.responded(response_event(session_id="s1", seq=record.seq, tool_calls=calls))
    # By the _meta id (Claude Code), then by name and canonical arguments (Gemini CLI).
    _, first = post(core, call(0, _meta={"claudecode/toolUseId": "toolu_1"}), session="s1")
    _, second = post(core, call(1, arguments={"b": 1, "a": 1}), session="s1", id="f2")
    assert isinstance(first, Forward) and isinstance(second, Forward)
    _, third = post(core, call(2, "explode", {}), session="s1", id="f3")  # nobody asked: call 3
    assert refusal(third) == (400, "tool_budget_exceeded")
    (rejected,) = core.events("rejected")
    assert rejected["mcp"]["messages"][0]["tool_name"] == "explode"  # denied calls are named


def test_an_execution_no_model_asked_for_counts(core: Core) -> None:
    core.run.sessions.max_tool_calls = 1
    assert isinstance(post(core, call(0), session="s1")[1], Forward)
    assert refusal(post(core, call(1), session="s1", id="f2")[1]) == (400, "tool_budget_exceeded")
    session = core.run.session("s1")
    assert session is not None and session.status().mcp_tool_calls == 1


def view_of(core: Core) -> Any:
    from tests.conftest import exchange_view

    return exchange_view(session_id="s1")


def facts() -> Any:
    from modeltap.evidence.records import RequestFacts

    return RequestFacts(
        model="gpt-5", tool_names=(), reasoning_effort=None, thinking=None, image_details=(),
        instructions_sha256=None, instructions_parts=None, stream=False, hosted_tools=(),
        tool_results=(), previous_response_id=None, generate=None,
    )  # fmt: skip


# ---------------------------------------------------------------- sessions, streams, memory


def test_each_mcp_session_is_a_session_unless_one_is_named(core: Core) -> None:
    post(core, call(1), mcp_session_id=SESSION_ID)
    post(core, call(2), mcp_session_id=SESSION_ID, session="agent", id="f2")
    core.run.settings = replace(core.run.settings, session="run-session")
    post(core, call(3), mcp_session_id=SESSION_ID, id="f3")
    assert [r["session_id"] for r in core.audit()] == [f"mcp-files-{KEY}", "agent", "run-session"]
    assert {r["mcp_session"] for r in core.audit()} == {KEY}


def test_a_get_stream_ending_is_no_failure_of_the_session(core: Core) -> None:
    get = Exchange.open(core.run, head("GET", mcp_session_id=SESSION_ID), 0)
    get.receive_body(RequestBody(b"", {}), MS)
    assert get.open_ended  # no idle limit: it is silent until the server speaks
    get.started(200, {"content-type": "text/event-stream"}, 2 * MS)
    get.failed("client_gone", None, 30 * MS, request_complete=True)
    (event,) = core.events()
    assert (event["kind"], event["failure"]) == ("mcp_exchange", "client_gone")
    assert core.events("error") == []


def test_a_post_that_breaks_is_an_error_of_its_message(core: Core) -> None:
    ex, _ = post(core, call(1), session="s1")
    ex.failed("upstream_unreachable", None, 30 * MS, request_complete=True)
    (error,) = core.events("error")
    assert (error["error"], error["seq"]) == ("upstream_unreachable", 1)


def test_stop_ends_a_stream_in_flight(core: Core) -> None:
    get = Exchange.open(core.run, head("GET", mcp_session_id=SESSION_ID), 0)
    get.receive_body(RequestBody(b"", {}), MS)
    get.started(200, {"content-type": "text/event-stream"}, 2 * MS)
    core.run.stop(5 * MS)
    (event,) = core.events("mcp_exchange")
    assert event["failure"] == "proxy_stopped"
    (status,) = core.sessions()
    assert (status["session_id"], status["mcp_messages_audited"]) == (f"mcp-files-{KEY}", 0)


def test_what_waits_for_answers_stays_bounded(core: Core, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mcp_sessions, "MAX_PENDING", 3)
    monkeypatch.setattr(mcp_sessions, "MAX_STATES", 2)
    for n in range(6):
        post(core, call(n), mcp_session_id=SESSION_ID, id=f"f{n}")
    (state,) = [core.run.mcp.state(("files", KEY))]
    assert [orjson.loads(k) for k in state.pending] == [3, 4, 5]  # the oldest forgotten
    for n in range(3):
        post(core, call(0), mcp_session_id=f"other-{n}", id=f"g{n}")
    assert len(core.run.mcp) == 2
