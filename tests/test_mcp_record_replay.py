"""Record and replay of MCP exchanges, end to end with the official ``mcp`` SDK.

A session of the SDK's ``Client`` goes through ``modeltap run --record``
to the SDK's own server (tests/mcp_server.py) in JSON and SSE answer modes;
then the server is gone and ``modeltap replay`` answers the same session
from the recording: the client gets the same tool results, nothing differs,
and the replayed run is audited as the recorded one was. A changed call is
answered with a JSON-RPC error naming the rule and listed in the diff.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import orjson
import pytest
from mcp import Client

from modeltap.addons.replayer import Replayer
from modeltap.app.proxy import Proxy, ProxyConfig, replay_proxy
from modeltap.replay.recording import RECORDING_FILE, Recording
from tests import mcp_shapes
from tests.conftest import read_jsonl
from tests.mcp_server import serve

SERVER = "shapes"
Session = Callable[[Client], Awaitable[list[Any]]]


async def agent(c: Client, *, sampling: bool = True) -> list[Any]:
    """What the agent does: list, call tools (one an error result, one with
    progress notifications, and, where the server can reach the client, one
    that makes the server ask the client to sample)."""
    out: list[Any] = [[t.name for t in (await c.list_tools()).tools]]
    calls: list[tuple[str, dict[str, Any]]] = [
        ("add", {"a": 2, "b": 3}),
        ("lookup_order", {"order_id": "A-7"}),
        ("count_slowly", {"n": 2}),
    ]
    if sampling:
        calls.append(("summarise", {"text": "notes"}))
    for name, arguments in calls:
        result = await c.call_tool(name, arguments)
        out.append(result.model_dump(exclude_none=True))
    return out


async def json_agent(c: Client) -> list[Any]:
    """The agent of a server answering JSON: no stream, so no sampling."""
    return await agent(c, sampling=False)


def changed_agent(c: Client) -> Awaitable[list[Any]]:
    async def run() -> list[Any]:
        await c.list_tools()
        try:
            await c.call_tool("add", {"a": 2, "b": 4})  # the recording has b = 3
        except Exception as e:  # the SDK raises the JSON-RPC error it got
            return [str(e)]
        return ["no error"]

    return run()


async def _session(url: str, session: Session, mode: str = "legacy") -> list[Any]:
    """``session`` in a client of ``mode``: ``legacy`` (initialize, 2025-11-25,
    an ``Mcp-Session-Id``) or ``auto`` (2026-07-28: no session, sampling
    through ``input_required``)."""
    async with mcp_shapes.client(url, mode) as c:
        with anyio.fail_after(20):
            return await session(c)


def record(
    tmp_path: Path,
    *,
    json_response: bool,
    session: Session = agent,
    mode: str = "legacy",
    named: str | None = None,
) -> list[Any]:
    """Run ``session`` through ``--record`` against the SDK server; then the server is gone."""

    async def scenario() -> list[Any]:
        async with serve(json_response=json_response) as base:
            cfg = ProxyConfig(
                listen_port=0,
                out=str(tmp_path / "out-record"),
                mcp=[f"{SERVER}={base}/mcp"],
                record=str(tmp_path / "rec"),
                quiet=True,
                session=named,
            )
            proxy = Proxy(cfg).start()
            try:
                return await _session(f"{proxy.url}/mcp/{SERVER}", session, mode)
            finally:
                await anyio.sleep(0.3)  # the DELETE passes
                proxy.stop()

    return asyncio.run(scenario())


@contextlib.asynccontextmanager
async def replaying(
    tmp_path: Path, *, fast: bool = True, named: str | None = None
) -> AsyncIterator[tuple[str, Replayer]]:
    config = ProxyConfig(listen_port=0, out=str(tmp_path / "out-replay"), quiet=True, session=named)
    proxy, replayer = replay_proxy(tmp_path / "rec", config, fast=fast)
    proxy.start()
    try:
        yield f"{proxy.url}/mcp/{SERVER}", replayer
    finally:
        await anyio.sleep(0.3)
        proxy.stop()


def replay(
    tmp_path: Path,
    session: Session = agent,
    *,
    fast: bool = True,
    mode: str = "legacy",
    named: str | None = None,
) -> tuple[Any, Replayer]:
    async def scenario() -> tuple[Any, Replayer]:
        async with replaying(tmp_path, fast=fast, named=named) as (url, replayer):
            return await _session(url, session, mode), replayer

    return asyncio.run(scenario())


def audit_keys(out: Path) -> list[tuple[Any, ...]]:
    return [
        (r["message_type"], r["mcp_method"], r["jsonrpc_id"], r["tool_name"], r["arguments_sha256"])
        for r in read_jsonl(out / "audit.jsonl")
    ]


def results(out: Path) -> list[tuple[Any, ...]]:
    return [
        (e["mcp_method"], e["tool_name"], e["outcome"], e["is_error"], e["framing"])
        for e in read_jsonl(out / "events.jsonl")
        if e["kind"] == "mcp_result"
    ]


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])
@pytest.mark.parametrize("json_response", [False, True], ids=["sse", "json"])
def test_round_trip_with_no_server(tmp_path: Path, json_response: bool, mode: str) -> None:
    session = json_agent if json_response else agent
    recorded = record(tmp_path, json_response=json_response, session=session, mode=mode)
    assert recorded[1]["structured_content"] == {"result": 5}
    assert recorded[2]["is_error"] is True
    if not json_response:
        assert recorded[4]["content"][0]["text"] == "ship it on friday"  # the client's sampling

    replayed, replayer = replay(tmp_path, session=session, mode=mode)

    assert replayed == recorded
    assert replayer.problems == []
    assert replayer.mcp_played == replayer.mcp_players[SERVER].turns_recorded
    # The replayed run is audited as the recorded one: same messages, ids,
    # arguments; the same answers observed, framed as they were recorded.
    assert audit_keys(tmp_path / "out-replay") == audit_keys(tmp_path / "out-record")
    assert results(tmp_path / "out-replay") == results(tmp_path / "out-record")
    framings = {framing for *_, framing in results(tmp_path / "out-replay")}
    assert framings == {"json" if json_response or mode == "auto" else "sse"}
    if not json_response and mode == "legacy":
        # The server's sampling request came on the replayed stream, and the
        # client's answer to it was matched with the recorded one.
        assert ("result", "sampling/createMessage") in [
            (r["message_type"], r["mcp_method"])
            for r in read_jsonl(tmp_path / "out-replay" / "audit.jsonl")
        ]


def test_the_session_id_is_handed_out_never_stored(tmp_path: Path) -> None:
    record(tmp_path, json_response=True, session=json_agent)
    recorded = read_jsonl(tmp_path / "out-record" / "audit.jsonl")
    (key,) = {r["mcp_session"] for r in recorded[1:]}
    lines = (tmp_path / "rec" / RECORDING_FILE).read_bytes()
    blobs = b"".join(p.read_bytes() for p in (tmp_path / "rec" / "blobs").iterdir())
    assert b"mcp-session-id" not in lines.lower() + blobs.lower()
    mcp_lines = [line for line in read_jsonl(tmp_path / "rec" / RECORDING_FILE)]
    assert {line["kind"] for line in mcp_lines} == {"mcp"}
    initialize = mcp_lines[0]
    assert initialize["key"]["messages"][0]["mcp_method"] == "initialize"
    assert initialize["response"]["mcp_session"] == key  # the hash, as the audit names it
    assert {line["mcp_session"] for line in mcp_lines[1:]} == {key}
    assert [line["order"] for line in mcp_lines[1:]] == list(range(1, len(mcp_lines)))

    replay(tmp_path, session=json_agent)
    replayed = read_jsonl(tmp_path / "out-replay" / "audit.jsonl")
    (live,) = {r["mcp_session"] for r in replayed[1:]}
    assert live is not None and live != key  # a session of the replay's own


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
ACCEPT = {"accept": "application/json, text/event-stream"}


async def raw_session(url: str) -> tuple[str, list[Any]]:
    """initialize, initialized, one tools/call, DELETE, by hand: the session
    id the server gave, and the answers."""
    async with httpx2.AsyncClient(timeout=10) as http:
        first = await http.post(url, json=INIT, headers=ACCEPT)
        sid = first.headers["mcp-session-id"]
        session = {"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25", **ACCEPT}
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await http.post(url, json=note, headers=session)
        add = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": 2, "b": 3}},
        }
        answer = await http.post(url, json=add, headers=session)
        gone = await http.delete(url, headers=session)
        return sid, [first.status_code, answer.json(), gone.status_code]


def test_no_session_id_in_any_file(tmp_path: Path) -> None:
    async def recording() -> tuple[str, list[Any]]:
        async with serve(json_response=True) as base:
            cfg = ProxyConfig(
                listen_port=0,
                out=str(tmp_path / "out-record"),
                mcp=[f"{SERVER}={base}/mcp"],
                record=str(tmp_path / "rec"),
                quiet=True,
            )
            proxy = Proxy(cfg).start()
            try:
                return await raw_session(f"{proxy.url}/mcp/{SERVER}")
            finally:
                await anyio.sleep(0.2)
                proxy.stop()

    sid, recorded = asyncio.run(recording())
    files = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert len(files) > 5 and not any(sid.encode() in f.read_bytes() for f in files)
    assert [line["method"] for line in read_jsonl(tmp_path / "rec" / RECORDING_FILE)] == [
        "POST", "POST", "POST", "DELETE",
    ]  # fmt: skip

    async def replaying_raw() -> tuple[str, list[Any]]:
        async with replaying(tmp_path) as (url, _):
            return await raw_session(url)

    handed_out, replayed = asyncio.run(replaying_raw())
    assert replayed == recorded
    assert handed_out != sid  # the replay's own


def test_ids_are_the_live_requests(tmp_path: Path) -> None:
    """A client that counts its ids otherwise gets its own ids back, in JSON
    and in SSE answers."""
    record(tmp_path, json_response=False)

    async def raw() -> list[Any]:
        async with replaying(tmp_path) as (url, _), httpx2.AsyncClient(timeout=10) as http:
            accept = {"accept": "application/json, text/event-stream"}
            init = orjson.loads((tmp_path / "rec" / "blobs" / _blob(tmp_path, 0)).read_bytes())
            init["id"] = "init-77"
            first = await http.post(url, json=init, headers=accept)
            session = {"mcp-session-id": first.headers["mcp-session-id"], **accept}
            await http.post(
                url,
                json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                headers=session,
            )
            listing = await http.post(
                url, json={"jsonrpc": "2.0", "id": 900, "method": "tools/list"}, headers=session
            )
            return [first.text, listing.text]

    first, listing = asyncio.run(raw())
    assert '"id":"init-77"' in first.replace(" ", "")
    events = [line for line in listing.splitlines() if line.startswith("data:")]
    messages = [orjson.loads(line[5:]) for line in events if line[5:].strip()]
    assert [m["id"] for m in messages if "result" in m] == [900]


def _blob(tmp_path: Path, index: int) -> str:
    line = Recording.load(tmp_path / "rec").entries[index].line
    sha: str = line["request"]["body"]
    return sha


def test_a_changed_call_is_a_jsonrpc_error_naming_the_rule(tmp_path: Path) -> None:
    record(tmp_path, json_response=True, session=lambda c: _add(c, 3))

    replayed, replayer = replay(tmp_path, session=changed_agent)

    (said,) = replayed
    assert "modeltap replay: the request does not match the recording" in said
    assert "arguments.b: changed (1 bytes)" in said
    kinds = [(p.kind, p.message) for p in replayer.problems]
    assert (
        kinds[0]
        == (
            "mismatch",
            kinds[0][1],
        )
        and "mcp server shapes request 3: arguments.b: changed (1 bytes)" in kinds[0][1]
    )
    diff = read_jsonl(tmp_path / "out-replay" / "replay-diff.jsonl")
    assert diff[0]["kind"] == "mismatch"
    assert "4" not in diff[0]["message"].split("arguments.b")[1]  # sizes, never the value
    answer = next(
        e for e in read_jsonl(tmp_path / "out-replay" / "events.jsonl") if e["kind"] == "mcp_result"
        and e["tool_name"] == "add"
    )  # fmt: skip
    assert (answer["outcome"], answer["error_code"]) == ("error", -32005)


async def _add(c: Client, b: int) -> list[Any]:
    await c.list_tools()
    result = await c.call_tool("add", {"a": 2, "b": b})
    return [result.model_dump(exclude_none=True)]


def test_more_calls_than_recorded_are_errors_not_hangs(tmp_path: Path) -> None:
    record(tmp_path, json_response=True, session=lambda c: _add(c, 3))

    async def more(c: Client) -> list[Any]:
        await _add(c, 3)
        said = []
        for _ in range(2):  # asked twice: one diff line
            try:
                await c.call_tool("add", {"a": 2, "b": 3})
            except Exception as e:
                said.append(str(e))
        return said

    said, replayer = replay(tmp_path, session=more)
    assert len(said) == 2 and said[0] == said[1]
    assert "request 4: HTTP method changed (DELETE -> POST tools/call 'add')" in said[0]
    # The client's DELETE at its exit then plays the recorded one: one line in all.
    assert [p.kind for p in replayer.problems] == ["mismatch"]


def test_get_stream_is_held_open_silent(tmp_path: Path) -> None:
    """The SDK opens a GET stream after initialize; the replay keeps it open and
    says nothing on it (GET streams are not recorded), so the client neither
    fails nor reconnects."""
    record(tmp_path, json_response=False, session=lambda c: _add(c, 3))
    lines = read_jsonl(tmp_path / "rec" / RECORDING_FILE)
    assert "GET" not in {line["method"] for line in lines}

    replayed, replayer = replay(tmp_path, session=lambda c: _add(c, 3))
    assert replayed[0]["structured_content"] == {"result": 5}
    streams = [
        e for e in read_jsonl(tmp_path / "out-replay" / "events.jsonl")
        if e["kind"] == "mcp_exchange" and e["method"] == "GET"
    ]  # fmt: skip
    assert len(streams) == 1 and streams[0]["status"] == 200
    assert replayer.problems == []


def test_a_named_session_replays_by_its_name(tmp_path: Path) -> None:
    """--session names the session: every MCP message is in it (initialize too),
    and the replay finds it by name."""
    recorded = record(tmp_path, json_response=True, session=json_agent, named="task-1")
    lines = read_jsonl(tmp_path / "rec" / RECORDING_FILE)
    assert {line["session_id"] for line in lines} == {"task-1"}
    assert [line["order"] for line in lines] == list(range(1, len(lines) + 1))

    replayed, replayer = replay(tmp_path, session=json_agent, named="task-1")
    assert replayed == recorded
    assert replayer.problems == []
    assert {r["session_id"] for r in read_jsonl(tmp_path / "out-replay" / "audit.jsonl")} == {
        "task-1"
    }


def test_an_http_sse_stream_is_refused_not_a_hang(tmp_path: Path) -> None:
    """HTTP+SSE answers on its GET stream: a recording with no HTTP+SSE
    session of the server (this one is Streamable HTTP's) cannot answer it, so
    the replay refuses the stream (405, a JSON-RPC error naming the rule) at once."""
    record(tmp_path, json_response=True, session=lambda c: _add(c, 3))

    async def opening() -> httpx2.Response:
        async with replaying(tmp_path) as (url, _), httpx2.AsyncClient(timeout=10) as http:
            return await http.get(url + "/sse", headers={"accept": "text/event-stream"})

    answer = asyncio.run(opening())
    assert answer.status_code == 405
    error = answer.json()["error"]
    assert error["data"] == {"rule": "modeltap_replay_unrecorded"}
    assert "HTTP+SSE" in error["message"]


def _read(uri: str) -> Session:
    async def run(c: Client) -> list[Any]:
        try:
            result = await c.read_resource(uri)
        except Exception as e:  # the SDK raises the JSON-RPC error it got
            return [str(e)]
        return [result.model_dump(exclude_none=True)]

    return run


def test_a_read_of_another_resource_is_a_mismatch_naming_the_param(tmp_path: Path) -> None:
    """Not only tools/call: every request's params are compared (the URI here),
    so another resource is not answered with the recorded one's contents."""
    (recorded,) = record(tmp_path, json_response=True, session=_read("orders://A-7"))
    assert "A-7" in orjson.dumps(recorded).decode()
    line = Recording.load(tmp_path / "rec").entries[-2].line
    (message,) = line["key"]["messages"]
    assert message["mcp_method"] == "resources/read" and len(message["params_sha256"]) == 64

    (same,), replayer = replay(tmp_path, session=_read("orders://A-7"))
    assert same == recorded and replayer.problems == []

    (said,), replayer = replay(tmp_path, session=_read("orders://B-12"))
    assert "modeltap replay: the request does not match the recording" in said
    assert "params.uri: 12 -> 13 bytes" in said
    (problem,) = [p for p in replayer.problems if p.kind == "mismatch"]
    assert "params.uri: 12 -> 13 bytes" in problem.message and "B-12" not in problem.message


def test_a_recording_without_params_hashes_replays_and_says_so(tmp_path: Path) -> None:
    """A recording made before params were hashed still replays (on method, tool
    and arguments); a mismatch then says the params were not compared."""
    record(tmp_path, json_response=True, session=_read("orders://A-7"))
    index = tmp_path / "rec" / RECORDING_FILE
    lines = [orjson.loads(raw) for raw in index.read_bytes().splitlines()]
    for line in lines:
        for m in (line.get("key") or {}).get("messages", []):
            m.pop("params_sha256", None)
    index.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))

    (other,), replayer = replay(tmp_path, session=_read("orders://B-12"))
    assert "orders://A-7" in orjson.dumps(other).decode()  # not compared: as recorded
    assert [p for p in replayer.problems if p.kind == "mismatch"] == []
    # Each POST's (a DELETE has no messages, so nothing went uncompared).
    mcp_lines = sum(1 for line in lines if line["kind"] == "mcp" and line["key"]["messages"])
    assert replayer.mcp_params_not_compared == mcp_lines > 0

    async def lists(c: Client) -> list[Any]:
        try:
            await c.list_tools()  # the recording has a resources/read here
        except Exception as e:
            return [str(e)]
        return ["no error"]

    (said,), replayer = replay(tmp_path, session=lists)
    assert "method changed ('resources/read' -> 'tools/list')" in said
    assert "params not compared" in said
