"""The replayer addon: each request matched with the recording before it goes."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from mitmproxy.test import tflow

from modeltap.addons.http import Http
from modeltap.addons.replayer import Replayer
from modeltap.apis.openai_chat import NAME as API_CHAT
from modeltap.core.body_audit import audit_body
from modeltap.evidence.records import AuditRecord
from modeltap.replay.matching import Player
from modeltap.replay.recording import BLOBS_DIR, RECORDING_FILE, Recording, TurnKey
from modeltap.replay.upstream import CONNECTION_HEADER, ENTRY_HEADER, ReplayServer
from tests.addons.conftest import CHAT, Tap, model_flow, tap
from tests.conftest import read_jsonl

pytestmark = pytest.mark.anyio


def recording_of(tmp_path: Path) -> Recording:
    facts, _ = audit_body(API_CHAT, CHAT, None)
    record = AuditRecord.build(
        facts, request_id="r", seq=1, run_id="old", session_id="s1", transport="http",
        api=API_CHAT, provider="openai", route="stub", upstream="http://127.0.0.1:9",
        path="/v1/chat/completions",
        body_bytes=len(CHAT), body_sha256="0" * 64,
    )  # fmt: skip
    key = TurnKey.of(record, orjson.loads(CHAT)).to_json()
    common = {"v": 1, "session_id": "s1", "transport": "http"}
    line = dict(common, kind="http", order=1, api=API_CHAT, method="POST", key=key)
    line["path"] = "/v1/chat/completions"
    models = dict(common, kind="unaudited", order=None, api=None, method="GET", key=None)
    models["path"] = "/v1/models"
    root = tmp_path / "rec"
    (root / BLOBS_DIR).mkdir(parents=True)
    (root / RECORDING_FILE).write_bytes(orjson.dumps(line) + b"\n" + orjson.dumps(models) + b"\n")
    return Recording.load(root)


def replayer(t: Tap, tmp_path: Path) -> Replayer:
    recording = recording_of(tmp_path)
    server = ReplayServer(recording, fast=True)
    return Replayer(t.run, Player(recording), server, tmp_path / "out", quiet=True)


async def test_a_matching_request_is_tagged_with_its_recorded_exchange(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        replay = replayer(t, tmp_path)
        flow = model_flow(**{"x-modeltap-session": "s1"})
        t.addon(Http).requestheaders(flow)
        t.addon(Http).request(flow)
        assert flow.response is None and flow.request.headers[ENTRY_HEADER] == "0"
        models = model_flow("/stub/v1/models")
        models.request.method = "GET"
        t.addon(Http).requestheaders(models)
        t.addon(Http).request(models)
        assert models.request.headers[ENTRY_HEADER] == "1"
        assert replay.turns_played == 1
        replay.stopped()
        replay.server.close()
        assert replay.problems == []


async def test_a_changed_or_unrecorded_request_is_answered_and_noted(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        replay = replayer(t, tmp_path)
        changed = orjson.dumps({"model": "gpt-6", "messages": []})
        flow = model_flow(body=changed, **{"x-modeltap-session": "s1"})
        t.addon(Http).requestheaders(flow)
        t.addon(Http).request(flow)
        assert flow.response is not None and flow.response.status_code == 400
        error = orjson.loads(flow.response.content)["error"]
        assert error["code"] == "modeltap_replay_mismatch"
        assert "model changed ('gpt-5' -> 'gpt-6')" in error["message"]
        other = model_flow("/stub/v1/files")
        t.addon(Http).requestheaders(other)
        t.addon(Http).request(other)
        assert other.response is not None and other.response.status_code == 404
        replay.stopped()
        assert [p.kind for p in replay.problems] == ["mismatch"]
        diff = read_jsonl(tmp_path / "out" / "replay-diff.jsonl")
        assert [d["kind"] for d in diff] == ["mismatch"]
        assert "replayed 0 of 1 recorded turn; 1 difference" in replay.summary()


async def test_a_websocket_is_tagged_for_the_replay_upstream(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        replay = replayer(t, tmp_path)
        flow = tflow.twebsocketflow()
        flow.response = None
        flow.request.path = "/stub/v1/responses"
        t.addon(Http).requestheaders(flow)
        t.addon(Http).request(flow)
        assert flow.request.headers[CONNECTION_HEADER] == flow.id
        assert flow.id in replay.server.connections
        replay.server.close()
