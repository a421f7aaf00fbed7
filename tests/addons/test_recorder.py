"""The recorder addon: what the run forwards, kept for ``modeltap replay``."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from mitmproxy import exceptions, http
from mitmproxy.test import tflow, tutils

from modeltap.addons.evidence import Evidence
from modeltap.addons.http import Http
from modeltap.addons.recorder import Recorder
from modeltap.addons.websocket import WebSocket
from modeltap.replay.recording import BlobStore
from tests.addons.conftest import chat_through, json_response, model_flow, tap
from tests.addons.test_websocket import CREATE, opened, send
from tests.conftest import read_jsonl
from tests.upstream import chat_text_sse, default_ws_events, sse_bytes

pytestmark = pytest.mark.anyio
KEY = "sk-test-PLANTED-SECRET"


async def test_a_recording_dir_that_cannot_be_made_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    with tap(tmp_path) as t:
        assert t.addon(Recorder) not in t.run.listeners  # not recording: not listening
        below = tmp_path / "a-file" / "rec"
        with pytest.raises(exceptions.OptionsError) as failed:
            t.tctx.options.update(modeltap_record=str(below))
        assert str(failed.value) == (
            f"cannot create the recording dir {below} (--record): Not a directory"
        )
        with pytest.raises(exceptions.OptionsError) as failed:
            t.tctx.options.update(modeltap_record=str(tmp_path / "a-file"))
        assert str(failed.value) == (
            f"cannot use {tmp_path / 'a-file'} as the recording dir (--record): "
            "it is not a directory"
        )


async def test_json_stream_and_pass_through_exchanges(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    with tap(tmp_path, record=str(rec)) as t:
        http_ = t.addon(Http)
        chat_through(t, **{"x-modeltap-session": "s1", "authorization": f"Bearer {KEY}"})

        stream = model_flow(body=orjson.dumps({"model": "m", "messages": [], "stream": True}))
        http_.requestheaders(stream)
        http_.request(stream)
        stream.response = tutils.tresp(headers=http.Headers(content_type="text/event-stream"))
        http_.responseheaders(stream)
        reply = chat_text_sse("m")
        assert callable(stream.response.stream) and reply.sse is not None
        for name, data in reply.sse:
            stream.response.stream(sse_bytes(name, data))
        stream.response.stream(b"")
        http_.response(stream)

        passed = model_flow("/stub/v1/models")
        http_.requestheaders(passed)
        http_.request(passed)
        passed.response = json_response(b'{"data": []}')
        http_.response(passed)
        t.addon(Evidence).done()
    lines = read_jsonl(rec / "recording.jsonl")
    assert [(line["kind"], line["order"], line["seq"]) for line in lines] == [
        ("http", 1, 1),
        ("http", 1, 2),
        ("unaudited", None, None),
    ]
    first, streamed, _ = lines
    assert first["request"]["headers"] == {"content-type": "application/json"}  # no key
    assert first["response"]["status"] == 200 and first["response"]["chunks"] is None
    assert len(streamed["response"]["chunks"]) == len(reply.sse)
    blobs = BlobStore(rec / "blobs")
    body = blobs.path(streamed["response"]["body"]).read_bytes()
    assert body == b"".join(sse_bytes(n, d) for n, d in reply.sse)
    assert KEY.encode() not in b"".join(p.read_bytes() for p in rec.rglob("*") if p.is_file())


async def test_a_broken_exchange_is_recorded_with_a_fixed_error(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    with tap(tmp_path, record=str(rec)) as t:
        http_ = t.addon(Http)
        flow = model_flow()
        http_.requestheaders(flow)
        http_.request(flow)
        flow.error = tflow.terr("upstream said: sk-secret")
        http_.error(flow)
    (line,) = read_jsonl(rec / "recording.jsonl")
    assert line["response"]["status"] is None and "sk-secret" not in line["response"]["error"]


async def test_websocket_turns_keep_their_messages(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    with tap(tmp_path, record=str(rec)) as t:
        flow = opened(t)
        for n in (1, 2):
            send(t, flow, CREATE)
            for event in default_ws_events(CREATE, n):
                send(t, flow, event, from_client=False)
        send(t, flow, {"type": "response.processed"})
        t.addon(WebSocket).websocket_end(flow)
    lines = read_jsonl(rec / "recording.jsonl")
    assert [(line["kind"], line["order"], line["method"]) for line in lines] == [
        ("websocket", 1, "GET"),
        ("websocket", 2, "GET"),
    ]
    assert [m["from"] for m in lines[0]["messages"]] == ["server"] * 3
    assert [m["from"] for m in lines[1]["messages"]] == ["server"] * 3 + ["client"]
