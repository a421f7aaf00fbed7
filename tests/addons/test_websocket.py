"""The WebSocket addon's hooks, called directly (taddons, twebsocketflow)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from mitmproxy import exceptions, http
from mitmproxy.test import tflow
from mitmproxy.websocket import WebSocketMessage
from wsproto.frame_protocol import Opcode

from modeltap.addons.deadlines import DEADLINE_KEY
from modeltap.addons.http import Http
from modeltap.addons.patches.ws_limit import TOO_BIG_KEY
from modeltap.addons.websocket import WebSocket
from tests.addons.conftest import Tap, tap
from tests.upstream import default_ws_events

pytestmark = pytest.mark.anyio

CREATE = {"type": "response.create", "model": "gpt-5", "instructions": "Hi.", "input": []}


def opened(t: Tap) -> http.HTTPFlow:
    """A WebSocket to the Responses endpoint, through the HTTP addon, then open."""
    flow = tflow.twebsocketflow()
    flow.response = None
    flow.request.path = "/stub/v1/responses"
    flow.request.headers["x-client-request-id"] = "thread-1"
    t.addon(Http).requestheaders(flow)
    t.addon(Http).request(flow)
    flow.response = tflow.twebsocketflow().response
    t.addon(WebSocket).websocket_start(flow)
    return flow


def send(t: Tap, flow: http.HTTPFlow, data: object, from_client: bool = True) -> WebSocketMessage:
    assert flow.websocket is not None
    message = WebSocketMessage(Opcode.TEXT, from_client, orjson.dumps(data))
    flow.websocket.messages.append(message)
    t.addon(WebSocket).websocket_message(flow)
    return message


async def test_a_bad_continuation_policy_is_refused(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        with pytest.raises(exceptions.OptionsError, match="explicit or as-sent"):
            t.tctx.options.update(modeltap_continuation="sometimes")
        t.tctx.options.update(modeltap_ws_allow=["response.cancel"])
        assert "response.cancel" in t.run.settings.ws_policy.allow


async def test_a_turn_is_audited_watched_and_answered(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        flow = opened(t)
        assert flow.websocket is not None
        assert [e["kind"] for e in t.events()] == ["ws_open"]
        send(t, flow, CREATE)
        assert len(flow.websocket.messages) == 1  # past messages are not kept
        assert flow.metadata[DEADLINE_KEY].watch == "waiting"
        created, delta, completed = default_ws_events(CREATE, 1)
        send(t, flow, created, from_client=False)
        assert flow.metadata[DEADLINE_KEY].watch == "response"
        send(t, flow, delta, from_client=False)
        send(t, flow, completed, from_client=False)
        assert flow.metadata[DEADLINE_KEY].handle is None  # nothing in flight: not watched
        (record,) = t.audit()
        assert (record["transport"], record["session_id"]) == ("websocket", "thread-1")
        (response,) = t.events("response")
        assert response["evidence_complete"] and response["seq"] == 1
        t.addon(WebSocket).websocket_end(flow)
        (close,) = t.events("ws_close")
        assert (close["messages_from_client"], close["messages_from_server"]) == (1, 3)


async def test_a_refused_message_is_dropped(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        flow = opened(t)
        message = send(t, flow, {"type": "response.create"})
        assert message.dropped
        assert t.events("rejected")[0]["rule"] == "ws_missing_input"
        control = send(t, flow, {"type": "response.processed"})
        assert not control.dropped and t.events("ws_control")


async def test_a_message_past_max_body_is_recorded_at_close(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        flow = opened(t)
        flow.metadata[TOO_BIG_KEY] = "client"
        t.addon(WebSocket).websocket_end(flow)
        assert t.events("rejected")[0]["rule"] == "body_too_large"


async def test_after_stop_client_messages_are_dropped(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        flow = opened(t)
        t.run.stop(0)
        assert send(t, flow, CREATE).dropped
        assert not send(t, flow, {"type": "x"}, from_client=False).dropped
        assert t.audit() == []


async def test_a_flow_without_a_view_is_not_watched(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        flow = tflow.twebsocketflow()  # never went through the HTTP addon
        t.addon(WebSocket).websocket_start(flow)
        t.addon(WebSocket).websocket_message(flow)
        t.addon(WebSocket).websocket_end(flow)
        assert t.events() == []
