"""modeltap.replay.mcp: what a replayed MCP exchange changed, whose ids answer, its error."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from modeltap.replay.mcp import (
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
