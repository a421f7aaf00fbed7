"""WebSocket Responses mode end to end: SDK / raw client -> modeltap -> the stub.

Each client text frame is one ``response.create`` (audited, then forwarded),
an allow-listed control message, or something refused with an ``error`` event
on the same, still usable, connection (SPEC section 3). Expected record values
are written here by hand from the messages each test sends (hashes computed
once from the texts shown beside them), never by the code under test.
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import openai
import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.extensions.permessage_deflate import PerMessageDeflate
from websockets.sync.client import ClientConnection, connect
from websockets.sync.server import Server, ServerConnection, serve

from modeltap.evidence.cost import SOURCE as COST_SOURCE
from tests.conftest import Running
from tests.factories import NO_USAGE, usage_json
from tests.upstream import default_ws_events

KEY = "sk-test-PLANTED-SECRET-0123456789"
PNG = "data:image/png;base64,iVBORw0KGgo="

# The openai SDK's own use of websockets warns; not ours to fix.
pytestmark = pytest.mark.filterwarnings(
    "ignore:connect\\(\\) must be used as a context manager:DeprecationWarning"
)

# sha256("You are a careful agent.")
AGENT_SHA = "858d0989b96833dfadabc7d495880611256ee64d0155a58ddfa691f8ae7e382f"
# sha256("Keep going.")
KEEP_GOING_SHA = "8fc6411ffc04a8f3561a621f7d2a957332ecfd357643c78eecf950dab867df01"
# sha256("Codex base rules.\n\nWork in the repo.\n\nAsk before deleting.")
CODEX_SHA = "96121d92eae4f0209804ee147c390550d176db7463d3b57ee124d23119560012"
# sha256("Look carefully.")
LOOK_SHA = "0abe8292a3dd1b38c627ef28a3d0dbd9ea24bf37bebe37941539385c9e9783e7"
# sha256("")
EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

RECORD_FIELDS = {
    "request_id",
    "model",
    "model_source",
    "tool_names",
    "reasoning_effort",
    "thinking",
    "image_details",
    "image_count",
    "instructions_sha256",
    "instructions_parts",
    "seq",
    "run_id",
    "session_id",
    "ts",
    "transport",
    "api",
    "operation",
    "provider",
    "route",
    "upstream",
    "path",
    "stream",
    "hosted_tools",
    "tool_results",
    "previous_response_id",
    "generate",
    "omitted_settings",
    "body_bytes",
    "body_sha256",
}
TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}

LOOKUP = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
}
CALL_OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "42 files"}


# ------------------------------------------------------------------ helpers


def ws_url(running: Running, route: str = "stub") -> str:
    return running.url.replace("http://", "ws://") + f"/{route}/v1/responses"


@contextmanager
def raw_client(
    running: Running, headers: dict[str, str] | None = None, route: str = "stub"
) -> Iterator[ClientConnection]:
    """A plain ``websockets`` client; it offers permessage-deflate by default."""
    with connect(
        ws_url(running, route), additional_headers=headers or {}, open_timeout=10, close_timeout=5
    ) as ws:
        yield ws


def sdk(running: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=running.base() + "/v1", api_key=KEY, max_retries=0)


def send(ws: ClientConnection, message: dict[str, Any]) -> str:
    """Send one JSON text frame; return it as sent."""
    text = orjson.dumps(message).decode()
    ws.send(text)
    return text


def recv_json(ws: ClientConnection) -> dict[str, Any]:
    event: dict[str, Any] = orjson.loads(ws.recv(timeout=10))
    return event


def until_terminal(ws: ClientConnection) -> list[dict[str, Any]]:
    """Every event up to and including the next terminal one."""
    events = [recv_json(ws)]
    while events[-1]["type"] not in TERMINAL:
        events.append(recv_json(ws))
    return events


def create(**fields: Any) -> dict[str, Any]:
    return {"type": "response.create", **fields}


def first_turn(model: str = "gpt-5", **extra: Any) -> dict[str, Any]:
    return create(
        model=model,
        instructions="You are a careful agent.",
        tools=[LOOKUP],
        input=[{"role": "user", "content": "Count the files."}],
        **extra,
    )


def wait_for(probe: Callable[[], Any]) -> Any:
    """Poll until ``probe()`` is truthy (lines written after the client moved on)."""
    deadline = time.monotonic() + 10
    while True:
        value = probe()
        if value or time.monotonic() > deadline:
            assert value, "timed out waiting"
            return value
        time.sleep(0.01)


def sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def check_record(
    rec: dict[str, Any], running: Running, forwarded: str | bytes, expected: dict[str, Any]
) -> None:
    """The fields every WebSocket record shares, then ``expected`` exactly."""
    raw = forwarded.encode() if isinstance(forwarded, str) else forwarded
    assert set(rec) == RECORD_FIELDS
    assert rec["transport"] == "websocket"
    assert (rec["api"], rec["operation"]) == ("openai.responses", "create")
    assert rec["route"] == "stub"
    assert rec["upstream"] == running.upstream.url
    assert rec["path"] == "/v1/responses"
    assert rec["stream"] is True  # always, on a WebSocket
    assert rec["thinking"] is None
    assert rec["image_count"] == len(rec["image_details"])
    assert rec["body_bytes"] == len(raw)
    assert rec["body_sha256"] == sha(raw)
    assert rec["ts"].endswith("Z")
    assert {k: rec[k] for k in expected} == expected


def forwarded_texts(running: Running) -> list[str | bytes]:
    return [m.data for m in running.upstream.ws_received]


def rejection(rule: str, text: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "code": "modeltap_rejected",
            "message": f"modeltap refused the request [rule {rule}]: {text}.",
        },
    }


# ------------------------------------------------------------------ response.create


def test_sdk_create_one_record_per_message(running: Running) -> None:
    """The OpenAI SDK's connect(): no x-client-request-id on the handshake, so the
    proxy's connection id is the request_id of every message, and the session."""
    client = sdk(running)
    seen: list[list[str]] = []
    with client.responses.connect(max_retries=0) as conn:
        for n in range(2):
            conn.send(
                create(
                    model="gpt-5",
                    instructions="You are a careful agent.",
                    tools=[LOOKUP, PATCH, {"type": "web_search"}],
                    reasoning={"effort": "low"},
                    input=[{"role": "user", "content": [{"type": "input_text", "text": f"#{n}"}]}],
                )
            )
            types = []
            for event in conn:
                types.append(event.type)
                if event.type == "response.completed":
                    assert event.response.id == f"resp_ws{n + 1}"
                    break
            seen.append(types)
    assert seen == [["response.created", "response.output_text.delta", "response.completed"]] * 2

    records = running.audit()
    assert len(records) == 2
    request_id = records[0]["request_id"]
    assert request_id and "x-client-request-id" not in running.upstream.ws_handshakes[0]
    for n, (rec, sent) in enumerate(zip(records, forwarded_texts(running), strict=True)):
        check_record(
            rec,
            running,
            sent,
            {
                "seq": n + 1,
                "request_id": request_id,  # the same id for every message on the connection
                "session_id": request_id,  # no x-modeltap-session: the connection
                "model": "gpt-5",
                "tool_names": ["lookup", "apply_patch"],
                "reasoning_effort": "low",
                "image_details": [],
                "image_count": 0,
                "instructions_sha256": AGENT_SHA,
                "hosted_tools": [{"type": "web_search", "name": None}],
                "tool_results": [],
                "previous_response_id": None,
                "generate": None,
                "omitted_settings": [],
            },
        )
    responses = running.events("response")
    assert [(e["seq"], e["response_id"], e["request_id"]) for e in responses] == [
        (1, "resp_ws1", request_id),
        (2, "resp_ws2", request_id),
    ]
    assert all(e["run_id"] == records[0]["run_id"] for e in running.events())
    # The handshake's Authorization reaches the upstream, never the files.
    assert running.upstream.ws_handshakes[0]["Authorization"] == f"Bearer {KEY}"
    for name in ("audit.jsonl", "events.jsonl"):
        assert KEY.encode() not in (running.out / name).read_bytes()


def test_raw_client_request_id_and_session_header(running: Running) -> None:
    """The handshake's x-client-request-id is the request_id; x-modeltap-session
    names the session and is not forwarded."""
    with raw_client(running, {"x-client-request-id": "req-ws-7"}) as ws:
        sent = send(ws, first_turn())
        assert until_terminal(ws)[-1]["type"] == "response.completed"
    with raw_client(running, {"x-client-request-id": "req-ws-8", "x-modeltap-session": "eval-9"}):
        pass
    (rec,) = running.audit()
    check_record(
        rec,
        running,
        sent,
        {
            "seq": 1,
            "request_id": "req-ws-7",
            "session_id": "req-ws-7",
            "model": "gpt-5",
            "tool_names": ["lookup"],
            "reasoning_effort": None,
            "image_details": [],
            "instructions_sha256": AGENT_SHA,
            "hosted_tools": [],
            "tool_results": [],
            "previous_response_id": None,
            "generate": None,
            "omitted_settings": [],
        },
    )
    opened = wait_for(lambda: len(running.events("ws_close")) == 2 and running.events("ws_open"))
    assert [(e["request_id"], e["session_id"]) for e in opened] == [
        ("req-ws-7", "req-ws-7"),
        ("req-ws-8", "eval-9"),
    ]
    second = {k.lower() for k in running.upstream.ws_handshakes[1]}
    assert "x-modeltap-session" not in second
    assert "x-client-request-id" in second


def test_x_request_id_is_not_a_websocket_connection_id(running: Running) -> None:
    with raw_client(running, {"x-request-id": "hdr-1"}) as ws:
        send(ws, first_turn())
        until_terminal(ws)
    (rec,) = running.audit()
    assert rec["request_id"] != "hdr-1"
    assert rec["session_id"] == rec["request_id"]


def test_explicit_continuation(running: Running) -> None:
    """A continuation that restates model, instructions and tools is audited as sent."""
    with raw_client(running, {"x-client-request-id": "req-cont"}) as ws:
        send(ws, first_turn())
        assert until_terminal(ws)[-1]["response"]["id"] == "resp_ws1"
        send(
            ws,
            create(
                model="gpt-5-mini",
                previous_response_id="resp_ws1",
                instructions="Keep going.",
                tools=[LOOKUP, {"type": "namespace", "name": "fs", "tools": [PATCH]}],
                input=[CALL_OUTPUT],
            ),
        )
        assert until_terminal(ws)[-1]["response"]["id"] == "resp_ws2"
    first, second = running.audit()
    assert first["previous_response_id"] is None
    check_record(
        second,
        running,
        forwarded_texts(running)[1],
        {
            "seq": 2,
            "request_id": "req-cont",
            "session_id": "req-cont",
            "model": "gpt-5-mini",
            "tool_names": ["lookup", "fs.apply_patch"],
            "reasoning_effort": None,
            "image_details": [],
            "instructions_sha256": KEEP_GOING_SHA,
            "hosted_tools": [],
            "tool_results": [{"call_id": "call_1", "bytes": 8, "is_error": None}],  # "42 files"
            "previous_response_id": "resp_ws1",
            "generate": None,
            "omitted_settings": [],
        },
    )


def test_codex_shape_warmup_then_additional_tools_continuation(running: Running) -> None:
    """Codex: a generate:false warm-up with empty input, then a continuation whose
    instructions are a developer message of several input_text parts and whose
    tools come in an additional_tools item holding namespace tools."""
    additional_tools = {
        "type": "additional_tools",
        "role": "developer",  # has a role, but is not a message: not instructions
        "tools": [
            {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
            {
                "type": "namespace",
                "name": "fs",
                "description": "files",
                "tools": [
                    {"type": "function", "name": "read", "parameters": {"type": "object"}},
                    PATCH,
                ],
            },
            {"type": "web_search"},
        ],
    }
    developer = {
        "type": "message",
        "role": "developer",
        "content": [
            {"type": "input_text", "text": "Codex base rules."},
            {"type": "input_text", "text": "Work in the repo."},
            {"type": "input_text", "text": "Ask before deleting."},
        ],
    }
    with raw_client(running, {"x-client-request-id": "codex-conn-1"}) as ws:
        send(ws, create(model="gpt-5-codex", generate=False, input=[]))
        assert until_terminal(ws)[-1]["type"] == "response.completed"
        send(
            ws,
            create(
                model="gpt-5-codex",
                previous_response_id="resp_ws1",
                reasoning={"effort": "high"},
                input=[
                    developer,
                    additional_tools,
                    {"type": "message", "role": "user", "content": "fix the test"},
                ],
            ),
        )
        assert until_terminal(ws)[-1]["type"] == "response.completed"
    warmup, turn = running.audit()
    sent = forwarded_texts(running)
    common = {"request_id": "codex-conn-1", "session_id": "codex-conn-1", "model": "gpt-5-codex"}
    check_record(
        warmup,
        running,
        sent[0],
        {
            **common,
            "seq": 1,
            "tool_names": [],
            "reasoning_effort": None,
            "image_details": [],
            "instructions_sha256": EMPTY_SHA,  # no instructions hashes ""
            "hosted_tools": [],
            "tool_results": [],
            "previous_response_id": None,
            "generate": False,
            "omitted_settings": [],
        },
    )
    check_record(
        turn,
        running,
        sent[1],
        {
            **common,
            "seq": 2,
            "tool_names": ["exec_command", "fs.read", "fs.apply_patch"],
            "reasoning_effort": "high",
            "image_details": [],
            "instructions_sha256": CODEX_SHA,
            "hosted_tools": [{"type": "web_search", "name": None}],
            "tool_results": [],
            "previous_response_id": "resp_ws1",
            "generate": None,
            "omitted_settings": [],
        },
    )


IMPLICIT = create(model="gpt-5", previous_response_id="resp_ws1", input=[CALL_OUTPUT])


def test_implicit_continuation_refused_by_default(running: Running) -> None:
    with raw_client(running) as ws:
        send(ws, first_turn())
        until_terminal(ws)
        send(ws, IMPLICIT)
        error = recv_json(ws)
    assert error == rejection(
        "ws_implicit_continuation",
        "a continuation (previous_response_id, conversation or prompt) must state its "
        "model, instructions and tools; use --continuation as-sent to audit it as sent",
    )
    assert "--continuation as-sent" in error["error"]["message"]
    assert len(running.audit()) == 1
    assert len(running.upstream.ws_received) == 1  # only the first turn
    (rejected,) = running.events("rejected")
    assert (rejected["rule"], rejected["transport"], rejected["status"]) == (
        "ws_implicit_continuation",
        "websocket",
        None,
    )


def test_implicit_continuation_audited_as_sent(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy(continuation="as-sent")
    with raw_client(running, {"x-client-request-id": "loop-1"}) as ws:
        send(ws, first_turn())
        until_terminal(ws)
        send(ws, IMPLICIT)
        assert until_terminal(ws)[-1]["type"] == "response.completed"
        # States its tools but not its instructions: only those are omitted.
        send(ws, create(model="gpt-5", previous_response_id="resp_ws2", tools=[], input=[]))
        assert until_terminal(ws)[-1]["type"] == "response.completed"
    first, implicit, tools_only = running.audit()
    sent = forwarded_texts(running)
    assert first["omitted_settings"] == []
    common = {"request_id": "loop-1", "session_id": "loop-1", "model": "gpt-5"}
    check_record(
        implicit,
        running,
        sent[1],
        {
            **common,
            "seq": 2,
            "tool_names": None,  # inherited, not seen in this message
            "reasoning_effort": None,
            "image_details": [],
            "instructions_sha256": None,
            "hosted_tools": [],
            "tool_results": [{"call_id": "call_1", "bytes": 8, "is_error": None}],
            "previous_response_id": "resp_ws1",
            "generate": None,
            "omitted_settings": ["instructions", "tools"],
        },
    )
    check_record(
        tools_only,
        running,
        sent[2],
        {
            **common,
            "seq": 3,
            "tool_names": [],  # sent, and empty
            "instructions_sha256": None,
            "previous_response_id": "resp_ws2",
            "omitted_settings": ["instructions"],
        },
    )
    assert running.events("rejected") == []


# ------------------------------------------------------------------ refusals


REFUSED: list[Any] = [
    pytest.param(
        b"\x00\x01binary",
        "ws_binary_frame",
        "binary WebSocket frames cannot be audited",
        id="binary",
    ),
    pytest.param(
        "{not json",
        "ws_invalid_json",
        "the WebSocket message is not a JSON object",
        id="invalid-json",
    ),
    pytest.param(
        "[1, 2]", "ws_invalid_json", "the WebSocket message is not a JSON object", id="json-array"
    ),
    pytest.param(
        '{"type": "response.cancel", "response_id": "resp_ws1"}',
        "ws_unsupported_type",
        "this WebSocket message type is not forwarded",
        id="cancel",
    ),
    pytest.param(
        '{"type": "response.steer", "previous_response_id": "resp_ws1", "input": "stop"}',
        "ws_unsupported_type",
        "this WebSocket message type is not forwarded",
        id="steer",
    ),
    pytest.param(
        '{"type": "response.create", "response": {"model": "gpt-5", "input": "hi"}}',
        "ws_nested_response",
        "response.create carries a nested 'response' object",
        id="nested-response",
    ),
    pytest.param(
        '{"type": "response.create", "model": "gpt-5"}',
        "ws_missing_input",
        "response.create has no 'input'",
        id="no-input",
    ),
]


@pytest.mark.parametrize(("frame", "rule", "text"), REFUSED)
def test_refused_message_then_connection_still_usable(
    running: Running, frame: str | bytes, rule: str, text: str
) -> None:
    with raw_client(running, {"x-client-request-id": "req-refuse"}) as ws:
        ws.send(frame)
        assert recv_json(ws) == rejection(rule, text)
        assert running.audit() == []
        # The connection stays usable: a valid create afterwards is audited and answered.
        sent = send(ws, first_turn())
        assert [e["type"] for e in until_terminal(ws)] == [
            "response.created",
            "response.output_text.delta",
            "response.completed",
        ]
    assert forwarded_texts(running) == [sent]  # the refused frame never reached the upstream
    (rec,) = running.audit()
    assert (rec["seq"], rec["request_id"], rec["instructions_sha256"]) == (
        1,
        "req-refuse",
        AGENT_SHA,
    )
    (rejected,) = running.events("rejected")
    assert {k: rejected[k] for k in ("rule", "status", "transport", "method", "path", "api")} == {
        "rule": rule,
        "status": None,
        "transport": "websocket",
        "method": None,
        "path": "/v1/responses",
        "api": "openai.responses",
    }
    assert (rejected["session_id"], rejected["request_id"], rejected["seq"]) == (
        "req-refuse",
        "req-refuse",
        None,
    )
    assert rejected["message"] == rejection(rule, text)["error"]["message"]


def test_sdk_sees_refusal_as_error_event(running: Running) -> None:
    with sdk(running).responses.connect(max_retries=0) as conn:
        conn.send({"type": "response.cancel", "response_id": "resp_x"})
        event = conn.recv()
        assert event.type == "error"
        assert event.error.code == "modeltap_rejected"
        assert event.error.type == "invalid_request_error"
        assert "[rule ws_unsupported_type]" in event.error.message
        conn.send(first_turn())
        types = []
        for ev in conn:
            types.append(ev.type)
            if ev.type == "response.completed":
                break
    assert types[-1] == "response.completed"
    assert len(running.audit()) == 1
    assert [e["rule"] for e in running.events("rejected")] == ["ws_unsupported_type"]


def test_fail_closed_refuses_every_later_message_of_the_session(
    start_proxy: Callable[..., Running],
) -> None:
    running = start_proxy(fail_closed=True)
    with raw_client(running, {"x-client-request-id": "strict-1"}) as ws:
        send(ws, first_turn())
        assert until_terminal(ws)[-1]["type"] == "response.completed"
        ws.send("{not json")
        assert recv_json(ws)["error"]["message"].startswith(
            "modeltap refused the request [rule ws_invalid_json]"
        )
        send(ws, first_turn())
        fail_closed = rejection(
            "fail_closed",
            "an earlier request of this session was refused and --fail-closed is set",
        )
        assert recv_json(ws) == fail_closed
    # Another connection is another session, and is not affected.
    with raw_client(running, {"x-client-request-id": "strict-2"}) as ws:
        send(ws, first_turn())
        assert until_terminal(ws)[-1]["type"] == "response.completed"
    assert [(r["seq"], r["session_id"]) for r in running.audit()] == [
        (1, "strict-1"),
        (2, "strict-2"),
    ]
    assert len(running.upstream.ws_received) == 2
    assert [(e["session_id"], e["rule"]) for e in running.events("rejected")] == [
        ("strict-1", "ws_invalid_json"),
        ("strict-1", "fail_closed"),
    ]


def test_fail_closed_refuses_later_control_messages_too(
    start_proxy: Callable[..., Running],
) -> None:
    running = start_proxy(fail_closed=True)
    fail_closed = rejection(
        "fail_closed",
        "an earlier request of this session was refused and --fail-closed is set",
    )
    with raw_client(running, {"x-client-request-id": "strict-3"}) as ws:
        ws.send("{not json")
        recv_json(ws)
        send(ws, {"type": "response.processed", "response_id": "resp_ws1"})
        send(ws, first_turn())
        # Whatever happened to response.processed happened before this answer.
        assert recv_json(ws) == fail_closed
    assert running.events("ws_control") == []
    assert [e["rule"] for e in running.events("rejected")] == [
        "ws_invalid_json",
        "fail_closed",
        "fail_closed",
    ]


# ------------------------------------------------------------------ control messages


def test_response_processed_forwarded_and_logged(running: Running) -> None:
    with raw_client(running, {"x-client-request-id": "ctl-1"}) as ws:
        send(ws, first_turn())
        until_terminal(ws)
        processed = send(ws, {"type": "response.processed", "response_id": "resp_ws1"})
        ws.send('{"type": "x.custom"}')
        assert recv_json(ws)["error"]["message"].startswith(
            "modeltap refused the request [rule ws_unsupported_type]"
        )
        # In order on one connection: once this answer is back, the upstream
        # has seen everything forwarded before it.
        last = send(ws, first_turn())
        until_terminal(ws)
    assert forwarded_texts(running)[1:] == [processed, last]
    (control,) = running.events("ws_control")
    assert {k: control[k] for k in ("type", "session_id", "request_id", "seq")} == {
        "type": "response.processed",
        "session_id": "ctl-1",
        "request_id": "ctl-1",
        "seq": None,
    }
    assert [r["seq"] for r in running.audit()] == [1, 2]


def test_ws_allow_extends_the_control_list(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy(ws_allow=["x.custom"])
    with raw_client(running) as ws:
        custom = send(ws, {"type": "x.custom", "note": 1})
        processed = send(ws, {"type": "response.processed"})
        ws.send('{"type": "x.other"}')
        assert recv_json(ws)["error"]["message"].startswith(
            "modeltap refused the request [rule ws_unsupported_type]"
        )
        last = send(ws, first_turn())
        until_terminal(ws)
    assert forwarded_texts(running) == [custom, processed, last]
    assert [e["type"] for e in running.events("ws_control")] == ["x.custom", "response.processed"]
    assert [e["rule"] for e in running.events("rejected")] == ["ws_unsupported_type"]
    assert len(running.audit()) == 1


# ------------------------------------------------------------------ images


def test_images_counted_per_message_only(running: Running) -> None:
    """Turn 2 continues turn 1 (two images) but carries none: image_count 0."""
    with raw_client(running) as ws:
        send(
            ws,
            create(
                model="gpt-5",
                instructions="Look carefully.",
                tools=[],
                input=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_text", "text": "a.png, b.png"},
                            {"type": "input_image", "image_url": PNG, "detail": "high"},
                            {"type": "input_image", "image_url": PNG},
                        ],
                    }
                ],
            ),
        )
        until_terminal(ws)
        send(
            ws,
            create(
                model="gpt-5",
                previous_response_id="resp_ws1",
                instructions="Look carefully.",
                tools=[],
                input=[{"role": "user", "content": "and now?"}],
            ),
        )
        until_terminal(ws)
    first, second = running.audit()
    assert (first["image_details"], first["image_count"]) == (["high", None], 2)
    assert (second["image_details"], second["image_count"]) == ([], 0)
    assert first["instructions_sha256"] == second["instructions_sha256"] == LOOK_SHA


def test_image_detail_rewritten_before_forwarding(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy(image_detail="low")
    image_turn = create(
        model="gpt-5",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": PNG, "detail": "high"},
                    {"type": "input_image", "image_url": PNG},
                ],
            },
            {
                "type": "function_call_output",
                "call_id": "call_2",
                "output": [{"type": "input_image", "image_url": PNG, "detail": "auto"}],
            },
        ],
    )
    with raw_client(running) as ws:
        sent = send(ws, image_turn)
        until_terminal(ws)
    (forwarded,) = forwarded_texts(running)
    assert forwarded != sent
    body = orjson.loads(forwarded)
    details = [part["detail"] for part in body["input"][0]["content"]]
    assert [*details, body["input"][1]["output"][0]["detail"]] == ["low", "low", "low"]
    (rec,) = running.audit()
    # The record describes (and hashes) what was forwarded, not what was sent.
    check_record(
        rec, running, forwarded, {"image_details": ["low", "low", "low"], "image_count": 3}
    )


# ------------------------------------------------------------------ responses


def scripted_usage(message: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The default events with a different usage per response; response 1 calls a tool."""
    events = default_ws_events(message, n)
    done = events[-1]["response"]
    done["usage"] = {
        "input_tokens": 100 * n,
        "input_tokens_details": {"cached_tokens": 10 * n},
        "output_tokens": n,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 101 * n,
    }
    if n == 1:
        call = {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "lookup",
            "arguments": '{"q":"files"}',
            "status": "completed",
        }
        events[1:1] = [
            {
                "type": "response.output_item.done",
                "sequence_number": 1,
                "output_index": 1,
                "item": call,
            }
        ]
        done["output"] = [*done["output"], call]
    return events


def test_response_events_carry_each_responses_usage(running: Running) -> None:
    running.upstream.ws_script = scripted_usage
    client = sdk(running)
    with client.responses.connect(max_retries=0) as conn:
        for _ in range(3):
            conn.send(first_turn())
            for event in conn:
                if event.type == "response.completed":
                    break
    records = running.audit()
    responses = running.events("response")
    assert [e["seq"] for e in responses] == [r["seq"] for r in records] == [1, 2, 3]
    for n, event in enumerate(responses, start=1):
        assert {
            k: event[k] for k in event if not k.endswith("_ms") and k not in ("ts", "run_id")
        } == {
            "kind": "response",
            "session_id": records[0]["session_id"],
            "seq": n,
            "request_id": records[0]["request_id"],
            "api": "openai.responses",
            "transport": "websocket",
            "status": None,
            "stream": True,
            "response_id": f"resp_ws{n}",
            "model": "gpt-5",
            "usage": usage_json(
                input=100 * n, output=n, total=101 * n, cache_read=10 * n, reasoning=0
            ),
            "finish_reasons": ["completed"],
            "tool_calls": (
                [
                    {
                        "call_id": "call_1",
                        "name": "lookup",
                        "arguments": '{"q":"files"}',
                        "namespace": None,
                    }
                ]
                if n == 1
                else []
            ),
            "response_status": "completed",
            "evidence_complete": True,
            "capture_errors": [],
            # gpt-5 by the price table: $1.25 input, $0.125 cached, $10 output per Mtok.
            "cost": {
                "estimate_usd": pytest.approx((90 * n * 1.25 + 10 * n * 0.125 + n * 10) / 1e6),
                "source": COST_SOURCE,
                "priced_as": "openai/gpt-5",
                "note": None,
            },
            "invocation_metrics": None,  # Bedrock's only
        }
        assert 0 <= event["ttfb_ms"] <= event["ttft_ms"] <= event["duration_ms"]


# ------------------------------------------------------------------ connection events


def test_ws_open_and_close_events(running: Running) -> None:
    with raw_client(running, {"x-client-request-id": "life-1"}) as ws:
        send(ws, first_turn())
        until_terminal(ws)
        ws.send("{bad")
        recv_json(ws)
        send(ws, {"type": "response.processed"})
        ws.close(code=4001, reason="agent done")
    (opened,) = running.events("ws_open")
    assert {k: opened[k] for k in ("session_id", "request_id", "path", "route", "upstream")} == {
        "session_id": "life-1",
        "request_id": "life-1",
        "path": "/v1/responses",
        "route": "stub",
        "upstream": running.upstream.url,
    }
    (closed,) = wait_for(lambda: running.events("ws_close"))
    assert {k: closed[k] for k in closed if k not in ("ts", "run_id")} == {
        "kind": "ws_close",
        "session_id": "life-1",
        "seq": None,
        "request_id": "life-1",
        "code": 4001,
        "reason": "agent done",
        "closed_by": "client",
        "messages_from_client": 3,  # the refused one counts; our injected error does not
        "messages_from_server": 3,
    }


class BreakingUpstream:
    """A WebSocket upstream that answers a response.create with response.created
    only, then ``close``s (code 1011), ``abort``s the TCP connection (no close
    frame), or ``stall``s until the client goes away."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.server: Server = serve(self._handle, "127.0.0.1", 0)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.socket.getsockname()[1]}"

    def _handle(self, ws: ServerConnection) -> None:
        message = orjson.loads(ws.recv(timeout=10))
        created = default_ws_events(message, 1)[0]
        created["response"]["id"] = "resp_cut1"
        ws.send(orjson.dumps(created).decode())
        if self.how == "close":
            ws.close(code=1011, reason="upstream broke")
        elif self.how == "abort":
            ws.socket.shutdown(socket.SHUT_RDWR)
        else:
            with contextlib.suppress(ConnectionClosed, TimeoutError):
                ws.recv(timeout=10)

    def __enter__(self) -> BreakingUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.thread.join(10)


@pytest.mark.parametrize(
    ("how", "code", "closed_by"),
    [("close", 1011, "server"), ("abort", 1006, "server"), ("stall", 1006, "client")],
)
def test_connection_ending_mid_response(
    start_proxy: Callable[..., Running], how: str, code: int, closed_by: str
) -> None:
    """The upstream closes or drops the connection, or the client goes away, after
    response.created: the response event says the evidence is incomplete, and why."""
    with BreakingUpstream(how) as upstream:
        running = start_proxy(routes=[f"cut={upstream.url}"])
        with raw_client(running, {"x-client-request-id": "cut-1"}, route="cut") as ws:
            send(ws, first_turn())
            assert recv_json(ws)["type"] == "response.created"
            if how == "stall":
                ws.socket.shutdown(socket.SHUT_RDWR)  # the agent vanishes
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
        if how == "close":
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
        (response,) = wait_for(lambda: running.events("response"))
        (closed_event,) = wait_for(lambda: running.events("ws_close"))
        (rec,) = running.audit()
    assert response["seq"] == rec["seq"] == 1
    assert {k: response[k] for k in ("response_id", "model", "response_status", "usage")} == {
        "response_id": "resp_cut1",
        "model": "gpt-5",
        "response_status": "in_progress",
        "usage": NO_USAGE,
    }
    assert response["evidence_complete"] is False
    assert response["capture_errors"] == [
        "stream ended before response.completed",
        f"the WebSocket closed (code {code}) before the response ended",
    ]
    assert response["ttft_ms"] is None
    assert response["ttfb_ms"] is not None
    assert (closed_event["code"], closed_event["closed_by"]) == (code, closed_by)
    assert (closed_event["messages_from_client"], closed_event["messages_from_server"]) == (1, 1)


def test_upstream_error_event_ends_its_response(running: Running) -> None:
    """An `error` event answers its response.create; the next create gets its own answer."""

    def script(message: dict[str, Any], n: int) -> list[dict[str, Any]]:
        if n == 1:
            return [
                {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "code": "previous_response_not_found",
                        "message": "Previous response not found.",
                    },
                }
            ]
        return default_ws_events(message, n)

    running.upstream.ws_script = script
    with raw_client(running) as ws:
        send(ws, first_turn())
        assert until_terminal(ws)[-1]["error"]["code"] == "previous_response_not_found"
        send(ws, first_turn())
        assert until_terminal(ws)[-1]["type"] == "response.completed"
    failed, ok = running.events("response")
    assert (failed["seq"], failed["response_status"], failed["response_id"]) == (1, "error", None)
    assert (failed["evidence_complete"], failed["capture_errors"], failed["usage"]) == (
        True,
        [],
        NO_USAGE,
    )
    assert (ok["seq"], ok["response_status"], ok["response_id"]) == (2, "completed", "resp_ws2")
    assert running.events("rejected") == []  # the upstream's error is not a refusal


# ------------------------------------------------------------------ compression


def test_permessage_deflate_negotiated_and_audited(running: Running) -> None:
    """The raw client offers permessage-deflate (its default) and it is negotiated;
    a large, well-compressible message is audited from its decompressed text."""
    long_text = "Count every file in the repository. " * 5000
    with raw_client(running, {"x-client-request-id": "deflate-1"}) as ws:
        assert any(isinstance(ext, PerMessageDeflate) for ext in ws.protocol.extensions)
        sent = send(
            ws,
            create(
                model="gpt-5",
                instructions="You are a careful agent.",
                tools=[LOOKUP],
                input=[{"role": "user", "content": long_text}],
            ),
        )
        assert until_terminal(ws)[-1]["type"] == "response.completed"
        ws.send(b"\x00")
        assert recv_json(ws)["error"]["code"] == "modeltap_rejected"
    (forwarded,) = forwarded_texts(running)
    assert forwarded == sent
    (rec,) = running.audit()
    check_record(
        rec,
        running,
        sent,
        {
            "request_id": "deflate-1",
            "model": "gpt-5",
            "tool_names": ["lookup"],
            "instructions_sha256": AGENT_SHA,
        },
    )
    assert rec["body_bytes"] > 180_000
