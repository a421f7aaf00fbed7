"""modeltap.replay.mcp: what a replayed MCP exchange changed, whose ids answer, its error."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from modeltap.evidence.recordings import comparable_params, params_sha256
from modeltap.replay.mcp import (
    PARAMS_NOT_COMPARED,
    IdRewriter,
    describe_mcp_changes,
    id_map,
    replay_error_body,
    rewrite_message,
)
from modeltap.replay.recording import McpKey, McpMessageKey

ADD = McpMessageKey("request", "tools/call", "add", "a" * 64)


def key(*messages: McpMessageKey, method: str = "POST") -> McpKey:
    return McpKey("shapes", method, messages)


def call(arguments: dict[str, Any], id: int = 3) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": "add", "arguments": arguments},
    }


def test_key_round_trips_through_json() -> None:
    k = McpKey("shapes", "POST", (ADD, McpMessageKey("notification", "x", None, None)), True)
    assert McpKey.from_json(orjson.loads(orjson.dumps(k.to_json()))) == k
    with pytest.raises(ValueError, match="bad MCP key"):
        McpKey.from_json({"server": "s", "method": "POST"})


def test_equal_keys_describe_nothing() -> None:
    assert describe_mcp_changes(key(ADD), key(ADD)) == ([], [])


def test_changed_arguments_are_paths_with_sizes_never_values() -> None:
    new = McpMessageKey("request", "tools/call", "add", "b" * 64)
    bodies = (call({"a": 2, "b": 3}), call({"a": 2, "b": 40, "c": "secret text"}))
    changes, found = describe_mcp_changes(key(ADD), key(new), bodies)
    assert changes == ["arguments.b: 1 -> 2 bytes", "arguments.c: added (11 bytes)"]
    assert all(c.content is None for c in found)
    assert "secret" not in repr(changes)
    # With content asked for, the values (in the diff file only).
    _, shown = describe_mcp_changes(key(ADD), key(new), bodies, show_content=True)
    assert shown[0].content == '"3" -> "40"'
    # Without the bodies, the hashes.
    assert describe_mcp_changes(key(ADD), key(new))[0] == [
        "arguments changed (sha256 aaaaaaaa… -> bbbbbbbb…)"
    ]


def test_method_and_tool_changes_are_named_per_message() -> None:
    listing = McpMessageKey("request", "tools/list", None, None)
    weather = McpMessageKey("request", "tools/call", "weather", "a" * 64)
    assert describe_mcp_changes(key(ADD), key(weather))[0] == ["tool changed ('add' -> 'weather')"]
    assert describe_mcp_changes(key(ADD, listing), key(ADD, ADD))[0] == [
        "message 2: method changed ('tools/list' -> 'tools/call')"
    ]
    assert describe_mcp_changes(key(ADD), key(ADD, listing))[0] == ["messages changed (1 -> 2)"]
    assert describe_mcp_changes(key(method="DELETE"), key(ADD))[0] == [
        "HTTP method changed (DELETE -> POST tools/call 'add')"
    ]


def test_id_map_keeps_types_apart_and_only_requests() -> None:
    assert id_map([1, None, 2], [1, None, 2], ["request", "notification", "request"]) == {}
    assert id_map([1, "2"], ["1", 2], ["request", "request"]) == {b"1": "1", b'"2"': 2}
    # The client's answer to a server request keeps the server's id.
    assert id_map([7], [9], ["result"]) == {}


def test_rewrite_message_changes_answers_not_server_requests() -> None:
    ids = {b"1": 41}
    assert orjson.loads(rewrite_message(b'{"jsonrpc":"2.0","id":1,"result":{}}', ids))["id"] == 41
    request = b'{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage"}'
    assert rewrite_message(request, ids) is request
    batch = b'[{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}},{"id":2,"result":{}}]'
    assert [m["id"] for m in orjson.loads(rewrite_message(batch, ids))] == [41, 2]
    assert rewrite_message(b"not json", ids) == b"not json"


def test_sse_is_rewritten_as_it_passes_other_bytes_as_recorded() -> None:
    stream = (
        b"id: 7\r\nevent: message\r\ndata: \r\n\r\n"  # a priming event, kept
        b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\r\n\r\n'
        b'event: message\r\ndata: {"jsonrpc":"2.0","id":1,"result":{"x":1}}\r\n\r\n'
    )
    rewriter = IdRewriter({b"1": "live-1"}, sse=True)
    out = b""
    for i in range(0, len(stream), 5):  # split anywhere
        piece = rewriter.feed(stream[i : i + 5])
        assert len(rewriter._pending) < 80  # only the line not yet ended is held
        out += piece
    out += rewriter.flush()
    assert out == stream.replace(b'"id":1,', b'"id":"live-1",')


def test_json_answer_is_rewritten_whole() -> None:
    rewriter = IdRewriter({b"3": 30}, sse=False)
    assert rewriter.feed(b'{"jsonrpc":"2.0",') == b""
    assert orjson.loads(rewriter.feed(b'"id":3,"result":{}}') + rewriter.flush())["id"] == 30


def test_error_body_names_the_rule_for_each_request() -> None:
    one = orjson.loads(replay_error_body([5], "modeltap replay: no", "modeltap_replay_mismatch"))
    assert one["id"] == 5
    assert one["error"]["data"] == {"rule": "modeltap_replay_mismatch"}
    assert one["error"]["message"] == "modeltap replay: no"
    assert orjson.loads(replay_error_body([], "m", "r"))["id"] is None
    batch = orjson.loads(replay_error_body([1, "b"], "m", "r", batch=True))
    assert [e["id"] for e in batch] == [1, "b"]


# ---------------------------------------------------------------- params (the whole request)


def read(uri: str, **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"uri": uri}
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": params}


def read_key(body: dict[str, Any]) -> McpKey:
    sha = params_sha256(body["method"], body["params"])
    return key(McpMessageKey("request", "resources/read", None, None, sha))


def test_params_hash_sorts_keys_and_skips_only_the_volatile() -> None:
    a = params_sha256("prompts/get", {"name": "review", "arguments": {"code": "x"}})
    b = params_sha256("prompts/get", {"arguments": {"code": "x"}, "name": "review"})
    assert a == b and a is not None
    assert params_sha256("prompts/get", {"name": "review", "arguments": {"code": "y"}}) != a
    # _meta (the progress token, tracing) is not the request.
    meta = {"name": "review", "arguments": {"code": "x"}, "_meta": {"progressToken": 7}}
    assert params_sha256("prompts/get", meta) == a
    # A cancellation's requestId is an id (not compared); its reason is compared.
    cancel = {"requestId": 3, "reason": "user"}
    assert params_sha256("notifications/cancelled", cancel) == params_sha256(
        "notifications/cancelled", {**cancel, "requestId": 9}
    )
    assert params_sha256("notifications/cancelled", cancel) != params_sha256(
        "notifications/cancelled", {**cancel, "reason": "timeout"}
    )
    # Elsewhere requestId is a param like any other.
    assert params_sha256("x/y", {"requestId": 3}) != params_sha256("x/y", {"requestId": 9})
    assert params_sha256("tools/list", None) is None
    assert comparable_params("notifications/progress", {"progressToken": 1, "progress": 2}) == {
        "progress": 2
    }


def test_a_read_of_another_uri_names_the_param_with_sizes_never_values() -> None:
    old, new = read("notes://today"), read("orders://A-7")
    recorded, live = read_key(old), read_key(new)
    assert not recorded.matches(live)
    assert recorded.matches(read_key(read("notes://today", progressToken=5)))
    changes, found = describe_mcp_changes(recorded, live, (old, new))
    assert changes == ["params.uri: 13 -> 12 bytes"]
    assert "orders" not in repr(changes) and all(c.content is None for c in found)
    # Without the bodies, the hashes.
    (said,), _ = describe_mcp_changes(recorded, live)
    assert said.startswith("params changed (sha256 ")


def test_changed_arguments_are_named_once_not_again_as_params() -> None:
    old, new = call({"a": 2, "b": 3}), call({"a": 2, "b": 40})
    recorded = McpKey.of("shapes", "POST", [], old)  # no records: no messages
    assert recorded.messages == ()
    a = McpMessageKey("request", "tools/call", "add", "a" * 64, params_sha256("tools/call", old))
    b = McpMessageKey("request", "tools/call", "add", "b" * 64, params_sha256("tools/call", new))
    assert describe_mcp_changes(key(a), key(b), (old, new))[0] == ["arguments.b: 1 -> 2 bytes"]


def test_a_key_recorded_before_params_were_hashed_still_replays() -> None:
    live = read_key(read("orders://A-7"))
    data = live.to_json()
    for m in data["messages"]:
        del m["params_sha256"]  # as the first MCP recordings wrote it
    old = McpKey.from_json(data)
    assert not old.params_compared and old.messages[0].params_sha256 is None
    assert old.matches(live)  # the params cannot be compared: not a mismatch
    assert McpKey.from_json(orjson.loads(orjson.dumps(old.to_json()))) == old
    # A mismatch on what was compared says the params were not.
    other = McpKey("shapes", "POST", (McpMessageKey("request", "tools/list", None, None),))
    changes, _ = describe_mcp_changes(old, other)
    assert changes[-1] == PARAMS_NOT_COMPARED and len(changes) == 2
