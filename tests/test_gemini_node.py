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


def test_node_sdk_defaults_to_v1beta_and_is_audited(running: Running) -> None:
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
    assert out == {
        "calls": [{"name": "get_weather", "args": {"city": "Lyon"}}],
        "text": "Hello from Gemini.",
    }

    first, second = running.audit()
    assert first["path"] == f"/v1beta/models/{MODEL}:generateContent"
    assert second["path"] == f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    for record in (first, second):
        assert (record["model"], record["model_source"]) == (MODEL, "path")
        assert record["tool_names"] == ["get_weather"]
        # sha256("You compare weather reports.")
        assert record["instructions_sha256"] == (
            "34a847fcbcd3693f13b90a00af4785aeeecd996574e8122181c781e689c9681a"
        )
        assert record["thinking"] == {"thinkingBudget": 256, "includeThoughts": True}
    assert (first["stream"], second["stream"]) == (False, True)
    calls, stream = running.events("response")
    assert calls["tool_calls"][0]["arguments"] == '{"city":"Lyon"}'
    assert stream["evidence_complete"] is True and stream["finish_reasons"] == ["STOP"]
    assert KEY.encode() not in (running.out / "audit.jsonl").read_bytes()
