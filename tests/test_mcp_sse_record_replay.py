"""Record and replay of MCP's older HTTP+SSE transport, with the official ``mcp`` SDK.

The SDK's ``sse_client`` opens ``GET /sse`` to the SDK's own FastMCP SSE app
(tests/mcp_server.py) through ``modeltap run --record``: the endpoint event
names the session, every POST is answered 202 and every answer comes on the
stream. Then the server is gone and ``modeltap replay`` stands in for it: a
fresh endpoint, each POST's recorded answers pushed onto the stream with the
live ids, a changed call answered on the stream with a JSON-RPC error naming
the rule; the session id is never stored.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp.client.sse import sse_client

from modeltap.addons.replayer import HTTP_SSE_NOT_REPLAYED, Replayer
from modeltap.app.proxy import Proxy, ProxyConfig, replay_proxy
from modeltap.replay.recording import RECORDING_FILE, Recording
from tests import mcp_shapes
from tests.conftest import read_jsonl
from tests.mcp_server import serve
from tests.test_mcp_record_replay import SERVER, Session, agent, audit_keys, changed_agent


async def _session(url: str, session: Session, ids: list[str] | None = None) -> list[Any]:
    transport = sse_client(url + "/sse", on_session_created=(ids if ids is not None else []).append)
    async with mcp_shapes.client(transport, "legacy") as c:
        with anyio.fail_after(20):
            return await session(c)


def record(tmp_path: Path, ids: list[str]) -> list[Any]:
    async def scenario() -> list[Any]:
        async with serve(transport="sse") as base:
            cfg = ProxyConfig(
                listen_port=0,
                out=str(tmp_path / "out-record"),
                mcp=[f"{SERVER}={base}"],
                record=str(tmp_path / "rec"),
                quiet=True,
            )
            proxy = Proxy(cfg).start()
            try:
                return await _session(f"{proxy.url}/mcp/{SERVER}", agent, ids)
            finally:
                await anyio.sleep(0.3)
                proxy.stop()

    return asyncio.run(scenario())


def replay(tmp_path: Path, session: Session, ids: list[str]) -> tuple[list[Any], Replayer]:
    async def scenario() -> tuple[list[Any], Replayer]:
        config = ProxyConfig(listen_port=0, out=str(tmp_path / "out-replay"), quiet=True)
        proxy, replayer = replay_proxy(tmp_path / "rec", config, fast=True)
        proxy.start()
        try:
            return await _session(f"{proxy.url}/mcp/{SERVER}", session, ids), replayer
        finally:
            await anyio.sleep(0.3)
            proxy.stop()

    return asyncio.run(scenario())


def test_http_sse_round_trip_with_no_server(tmp_path: Path) -> None:
    recorded_ids: list[str] = []
    recorded = record(tmp_path, recorded_ids)
    assert recorded[1]["structured_content"] == {"result": 5}
    assert recorded[2]["is_error"] is True
    assert recorded[4]["content"][0]["text"] == "ship it on friday"  # the client's sampling

    live_ids: list[str] = []
    replayed, replayer = replay(tmp_path, agent, live_ids)

    assert replayed == recorded
    assert replayer.problems == []
    assert replayer.mcp_played == replayer.mcp_players[SERVER].turns_recorded > 5
    assert audit_keys(tmp_path / "out-replay") == audit_keys(tmp_path / "out-record")
    # The server's sampling request came on the replayed stream, and the
    # client's answer to it was matched with the recorded one.
    assert ("result", "sampling/createMessage") in [
        (r["message_type"], r["mcp_method"])
        for r in read_jsonl(tmp_path / "out-replay" / "audit.jsonl")
    ]
    # The session id is never stored: the stream's lines name it hashed, and
    # the replay handed out one of its own.
    (recorded_id,) = recorded_ids
    (live_id,) = live_ids
    key = hashlib.sha256(recorded_id.encode()).hexdigest()[:16]
    assert live_id != recorded_id
    files = [tmp_path / "rec" / RECORDING_FILE, *(tmp_path / "rec" / "blobs").iterdir()]
    assert not any(recorded_id.encode() in f.read_bytes() for f in files)
    lines = read_jsonl(tmp_path / "rec" / RECORDING_FILE)
    stream = [line for line in lines if line["kind"] == "mcp_stream"]
    assert {line["mcp_session"] for line in stream} == {key}
    assert stream[0]["message"] is None and all(line["message"] for line in stream[1:])
    assert not any("session_id" in line for line in stream)
    # Filed under no model session, and with the MCP exchanges of none.
    recording = Recording.load(tmp_path / "rec")
    assert recording.sessions == {} and list(recording.mcp_streams[SERVER]) == [key]


def test_a_changed_call_gets_its_error_on_the_stream(tmp_path: Path) -> None:
    record(tmp_path, [])

    replayed, replayer = replay(tmp_path, changed_agent, [])

    (error,) = replayed
    assert "modeltap replay" in error
    (problem,) = [p for p in replayer.problems if p.kind != "unplayed"]
    assert "arguments.b" in problem.message
    diff = read_jsonl(tmp_path / "out-replay" / "replay-diff.jsonl")
    assert any(d["kind"] == "mismatch" for d in diff)


def test_a_second_http_sse_session_the_recording_lacks_is_refused(tmp_path: Path) -> None:
    record(tmp_path, [])

    async def scenario() -> tuple[list[Any], str]:
        config = ProxyConfig(listen_port=0, out=str(tmp_path / "out-replay"), quiet=True)
        proxy, _ = replay_proxy(tmp_path / "rec", config, fast=True)
        proxy.start()
        try:
            url = f"{proxy.url}/mcp/{SERVER}"
            first = await _session(url, agent)
            async with httpx2.AsyncClient() as http:
                second = await http.get(url + "/sse")
            return first, second.text
        finally:
            await anyio.sleep(0.3)
            proxy.stop()

    first, second = asyncio.run(scenario())
    assert first[1]["structured_content"] == {"result": 5}
    assert HTTP_SSE_NOT_REPLAYED in second
