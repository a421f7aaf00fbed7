"""A WebSocket connection's core alone: messages in, audit lines, events and
notices out. No proxy, no mitmproxy."""

from __future__ import annotations

from dataclasses import replace

import orjson

from modeltap.core.exchange import Exchange
from modeltap.core.gate import RequestHead
from modeltap.core.notices import ExchangeView
from modeltap.core.ws_connection import Connection
from tests.conftest import Core
from tests.upstream import default_ws_events

MS = 1_000_000
CREATE = {"type": "response.create", "model": "gpt-5", "instructions": "Be brief.", "input": []}


def handshake(core: Core, client_id: str | None = "thread-1") -> ExchangeView:
    headers = {"upgrade": "websocket", "sec-websocket-version": "13"}
    if client_id:
        headers["x-client-request-id"] = client_id
    head = RequestHead(
        id="flow-ws",
        method="GET",
        target="/openai/v1/responses",
        scheme="http",
        host="127.0.0.1",
        port=8787,
        headers=headers,
    )
    ex = Exchange.open(core.run, head, 0)
    assert ex.reply is None and ex.websocket
    return ex.view


def connect(core: Core, client_id: str | None = "thread-1") -> Connection:
    conn = Connection.open(core.run, handshake(core, client_id), 1)
    assert conn is not None
    return conn


def server(conn: Connection, n: int, t: int) -> None:
    for i, event in enumerate(default_ws_events(CREATE, n)):
        conn.server_message(orjson.dumps(event), True, t + i)


def test_a_turn_carries_its_connections_match_and_its_parsed_message(core: Core) -> None:
    conn = connect(core)
    conn.client_message(orjson.dumps(CREATE), True, 10 * MS)
    ((view, _, body, _),) = core.heard.args("audited")
    assert view.endpoint is not None and view.endpoint.api == "openai.responses"
    assert view.body == CREATE and view.parsed_body(body) is view.body  # not parsed again


def test_a_turn_is_audited_and_answered(core: Core) -> None:
    conn = connect(core)
    verdict = conn.client_message(orjson.dumps(CREATE), True, 10 * MS)
    assert verdict.refusal is None and verdict.content == orjson.dumps(CREATE)
    (record,) = core.audit()
    assert (record["transport"], record["api"], record["session_id"]) == (
        "websocket",
        "openai.responses",
        "thread-1",
    )
    assert conn.watch() == "waiting"
    server(conn, 1, 30 * MS)
    assert conn.watch() is None
    (event,) = core.events("response")
    assert (event["seq"], event["status"], event["stream"], event["ttfb_ms"]) == (
        1,
        None,
        True,
        20.0,
    )
    assert event["evidence_complete"]
    # The turn's notices carry its own view, child of the connection's.
    ((view, _),) = core.heard.args("started")
    assert (view.id, view.parent, view.transport, view.turn) == (
        "flow-ws/1",
        "flow-ws",
        "websocket",
        1,
    )
    assert core.heard.names().count("message") == 3  # the server events were relayed
    assert "first_chunk" in core.heard.names()


def test_control_messages_are_logged_and_relayed(core: Core) -> None:
    conn = connect(core)
    verdict = conn.client_message(b'{"type": "response.processed"}', True, 1)
    assert verdict.refusal is None
    (event,) = core.events("ws_control")
    assert event["type"] == "response.processed" and core.audit() == []


def test_a_refused_message_is_dropped_with_an_error_event_for_the_client(core: Core) -> None:
    conn = connect(core)
    verdict = conn.client_message(b'{"type": "response.create"}', True, 1)
    assert verdict.refusal is not None
    assert orjson.loads(verdict.refusal)["error"]["code"] == "modeltap_rejected"
    (event,) = core.events("rejected")
    assert (event["transport"], event["status"], event["method"]) == ("websocket", None, None)
    assert conn.from_client == 1 and core.audit() == []


def test_image_detail_rewrites_what_is_forwarded(core: Core) -> None:
    core.run.settings = replace(core.run.settings, image_detail="low")
    conn = connect(core)
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "high"}
    create = dict(CREATE, input=[{"role": "user", "content": [image]}])
    verdict = conn.client_message(orjson.dumps(create), True, 1)
    assert b'"detail":"low"' in verdict.content
    assert core.audit()[0]["image_details"] == ["low"]


def test_close_ends_turns_in_flight_and_the_conversation(core: Core) -> None:
    conn = connect(core)
    conn.client_message(orjson.dumps(CREATE), True, 1)
    conn.close(1006, None, "server", too_big_from_client=False, expired=None, now=5)
    (response,) = core.events("response")
    assert not response["evidence_complete"]
    assert "closed (code 1006)" in response["capture_errors"][-1]
    (close,) = core.events("ws_close")
    assert (close["code"], close["closed_by"], close["messages_from_client"]) == (1006, "server", 1)
    # The connection was the session: its line is written, and a reconnect resumes it.
    (status,) = core.sessions()
    assert (status["session_id"], status["requests_audited"]) == ("thread-1", 1)
    again = connect(core)
    again.client_message(orjson.dumps(CREATE), True, 10)
    again.close(1000, None, "client", too_big_from_client=False, expired=None, now=20)
    assert core.sessions()[-1]["requests_audited"] == 2


def test_a_timeout_or_a_message_too_big_is_named(core: Core) -> None:
    conn = connect(core)
    conn.client_message(orjson.dumps(CREATE), True, 1)
    conn.close(1009, None, "proxy", too_big_from_client=True, expired="first_byte", now=5)
    assert [e["kind"] for e in core.events()] == [
        "ws_open",
        "error",
        "response",
        "rejected",
        "ws_close",
    ]
    assert core.events("error")[0]["error"] == "upstream_timeout"
    assert core.events("rejected")[0]["rule"] == "body_too_large"


def test_stop_fails_turns_in_flight(core: Core) -> None:
    conn = connect(core, client_id=None)
    conn.client_message(orjson.dumps(CREATE), True, 1)
    later = handshake(core)
    core.run.stop(9)
    assert core.events("error")[0]["error"] == "proxy_stopped"
    assert core.events("ws_close")[0]["closed_by"] == "proxy"
    # After stop nothing more happens on it, and no connection opens.
    conn.close(1000, None, "client", too_big_from_client=False, expired=None, now=10)
    assert len(core.events("ws_close")) == 1
    assert Connection.open(core.run, later, 11) is None
