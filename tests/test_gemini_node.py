"""The @google/genai Node SDK through modeltap against the local stub.

The SDK is the pinned one of ``tests/gemini_cli/`` (``npm ci`` there; ``.ci/run``
does it), driven by ``tests/gemini_cli/genai_turns.mjs`` with the environment
a user sets (``GOOGLE_GEMINI_BASE_URL``, ``GEMINI_API_KEY``). Skipped where it
is not installed, unless ``MODELTAP_REQUIRE_GEMINI_CLI=1`` (CI): then it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from modeltap.evidence.capture import Capture
from tests.conftest import Running
from tests.upstream import gemini_function_call_chunks, gemini_reply

NODE_CLIENTS = Path(__file__).parent / "gemini_cli"
KEY = "AIza-node-PLANTED-SECRET-0123456789"
MODEL = "gemini-2.5-flash"


def require_sdk() -> str:
    node = shutil.which("node")
    if node is not None and (NODE_CLIENTS / "node_modules" / "@google" / "genai").exists():
        return node
    if os.environ.get("MODELTAP_REQUIRE_GEMINI_CLI") == "1":
        pytest.fail("@google/genai is not installed (run npm ci in tests/gemini_cli)")
    pytest.skip("@google/genai not installed (npm ci in tests/gemini_cli)")


def test_node_sdk_tool_loop_image_stream_and_refusal(running: Running) -> None:
    """The Node SDK defaults to /v1beta; its tool loop, image, stream and refusal."""
    node = require_sdk()
    call = {"name": "get_weather", "args": {"city": "Lyon"}}
    running.upstream.replies.append(
        gemini_reply(gemini_function_call_chunks(MODEL, [call]), "generateContent", None, False)
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GOOGLE_GEMINI_BASE_URL": running.base(),
        "GEMINI_API_KEY": KEY,
    }
    done = subprocess.run(
        [node, "genai_turns.mjs"],
        cwd=NODE_CLIENTS,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    out = orjson.loads(done.stdout)
    assert out["calls"] == [{"name": "get_weather", "args": {"city": "Lyon"}}]
    assert out["answer"] == out["text"] == "Hello from Gemini."
    # The refusal reaches the SDK as Google's error shape: a 400 naming the rule.
    assert out["refusal"]["status"] == 400
    assert "[rule instructions_not_text]" in out["refusal"]["message"]

    first, second, streamed = running.audit()
    assert [r["path"] for r in (first, second, streamed)] == [
        f"/v1beta/models/{MODEL}:generateContent",
        f"/v1beta/models/{MODEL}:generateContent",
        f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse",
    ]
    for record in (first, second, streamed):
        assert (record["model"], record["model_source"]) == (MODEL, "path")
        assert record["provider"] == "gcp.gemini"
        assert record["tool_names"] == ["get_weather"]
        # sha256("You compare weather reports.")
        assert record["instructions_sha256"] == (
            "34a847fcbcd3693f13b90a00af4785aeeecd996574e8122181c781e689c9681a"
        )
        assert record["thinking"] == {"thinkingBudget": 256, "includeThoughts": True}
    assert [r["stream"] for r in (first, second, streamed)] == [False, False, True]
    # The result: {"temp_c":14} is 13 bytes; no id on the wire. Its image counts.
    assert first["tool_results"] == [] and first["image_count"] == 0
    assert second["tool_results"] == [{"call_id": None, "bytes": 13, "is_error": None}]
    assert (second["image_count"], second["image_details"]) == (1, [None])

    calls, answered, stream = running.events("response")
    assert answered["tool_calls"] == [] and answered["evidence_complete"] is True
    assert calls["tool_calls"][0]["arguments"] == '{"city":"Lyon"}'
    assert stream["evidence_complete"] is True and stream["finish_reasons"] == ["STOP"]
    (refused,) = running.events("rejected")
    assert refused["rule"] == "instructions_not_text"
    running.proxy.stop()
    (session,) = Capture.load(running.out).sessions.values()
    assert [inv.answered for inv in session.tool_invocations] == [True]
    for name in ("audit.jsonl", "events.jsonl"):
        assert KEY.encode() not in (running.out / name).read_bytes()
