"""Gemini CLI itself, run non-interactively through modeltap against the local stub.

The CLI is the pinned ``@google/gemini-cli`` of ``tests/gemini_cli/`` (``npm
ci`` there; ``.ci/run`` does it). Where it is not installed the test is
skipped, unless ``MODELTAP_REQUIRE_GEMINI_CLI=1`` (CI sets it): then a missing
CLI fails the test instead of hiding it.

What it needs, as a Gemini CLI user would set it up (docs/CLOUDS.md, "Gemini"):
``GOOGLE_GEMINI_BASE_URL`` pointing at the proxy, ``GEMINI_API_KEY``, and in
non-interactive mode ``security.auth.selectedType: "gemini-api-key"`` in
``~/.gemini/settings.json`` (without it the CLI exits 41 before any request);
``GEMINI_CLI_TRUST_WORKSPACE=true`` so it runs in a fresh directory.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from modeltap.app.client_env import mcp_snippets
from modeltap.app.proxy import ProxyConfig, replay_proxy
from modeltap.evidence.capture import Capture
from tests import mcp_agent_clis
from tests.conftest import Running, read_jsonl
from tests.mcp_server import serve
from tests.upstream import (
    GEMINI_METHOD,
    Received,
    Reply,
    gemini_chunk,
    gemini_function_call_chunks,
    gemini_reply,
)

CLI = Path(__file__).parent / "gemini_cli" / "node_modules" / ".bin" / "gemini"
KEY = "AIza-cli-PLANTED-SECRET-0123456789"
MODEL = "gemini-2.5-flash"
NOTES = "ship the release on friday\n"


def require_cli() -> Path:
    if CLI.exists():
        return CLI
    if os.environ.get("MODELTAP_REQUIRE_GEMINI_CLI") == "1":
        pytest.fail(f"Gemini CLI is not installed at {CLI} (run npm ci in tests/gemini_cli)")
    pytest.skip("Gemini CLI not installed (npm ci in tests/gemini_cli)")


def answer(received: Received) -> Reply | None:
    """The model's side of one prompt: read notes.txt, then say what it holds."""
    found = GEMINI_METHOD.search(received.path.split("?", 1)[0])
    if found is None or found["method"] not in ("generateContent", "streamGenerateContent"):
        return None  # countTokens and the like: the stub's default
    body: Any = received.json()
    contents = body.get("contents", []) if isinstance(body, dict) else []
    parts = [p for c in contents for p in c.get("parts", [])]
    declared = [
        d.get("name") for t in body.get("tools", []) for d in t.get("functionDeclarations", [])
    ]
    alt = "sse" if "alt=sse" in received.path else None
    model = found["model"] or MODEL
    if any("functionResponse" in p for p in parts):
        usage = {"promptTokenCount": 90, "candidatesTokenCount": 9, "totalTokenCount": 99}
        chunks = [gemini_chunk(model, [{"text": "The notes say: ship on friday."}], "STOP", usage)]
        return gemini_reply(chunks, found["method"], alt, False)
    if "read_file" in declared:
        call = {"name": "read_file", "args": {"file_path": "notes.txt"}}
        return gemini_reply(gemini_function_call_chunks(model, [call]), found["method"], alt, False)
    return None


def cli_home(tmp_path: Path) -> tuple[Path, Path]:
    """A fresh HOME set up as a Gemini CLI user with an API key does, and a
    working directory holding ``notes.txt``."""
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".gemini").mkdir(parents=True)
    work.mkdir()
    (work / "notes.txt").write_text(NOTES)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
    }
    (home / ".gemini" / "settings.json").write_bytes(orjson.dumps(settings))
    return home, work


def run_cli(cli: Path, home: Path, work: Path, base_url: str) -> subprocess.CompletedProcess[bytes]:
    """One non-interactive prompt, the CLI pointed at ``base_url``."""
    tmp = work.parent / "tmp"  # the CLI's error reports stay in the test's directory
    tmp.mkdir(exist_ok=True)
    env = {
        "TMPDIR": str(tmp),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GOOGLE_GEMINI_BASE_URL": base_url,
        "GEMINI_API_KEY": KEY,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "NO_COLOR": "1",
    }
    done = subprocess.run(
        [str(cli), "-m", MODEL, "-p", "What do my notes say?"],
        cwd=work,
        env=env,
        capture_output=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return done


def test_gemini_cli_tool_loop_through_the_proxy(
    start_proxy: Callable[..., Running], tmp_path: Path
) -> None:
    cli = require_cli()
    running = start_proxy()
    running.upstream.responder = answer
    done = run_cli(cli, *cli_home(tmp_path), running.base())
    assert "ship on friday" in done.stdout.decode()
    records = [r for r in running.audit() if r["path"].endswith(":streamGenerateContent?alt=sse")]
    assert len(records) == 2, [r["path"] for r in running.audit()]
    first, second = records
    for record in (first, second):
        assert (record["api"], record["provider"]) == ("gemini.generate_content", "gcp.gemini")
        assert (record["model"], record["model_source"], record["stream"]) == (MODEL, "path", True)
        assert record["path"].startswith(f"/v1beta/models/{MODEL}:")
        assert "read_file" in record["tool_names"]
        assert record["instructions_parts"] and record["instructions_sha256"]
        assert record["thinking"] is not None  # the CLI always sends a thinkingConfig
    assert first["tool_results"] == []
    # The stub sent the call without an id: the CLI made one of its own.
    (result,) = second["tool_results"]
    assert result["call_id"].startswith("read_file") and result["bytes"] > len(NOTES)

    calls = [e["tool_calls"] for e in running.events("response") if e["tool_calls"]]
    assert calls == [
        [
            {
                "call_id": None,
                "name": "read_file",
                "arguments": '{"file_path":"notes.txt"}',
                "namespace": None,
            }
        ]
    ]
    running.proxy.stop()
    capture = Capture.load(running.out)
    assert capture.tool_was_called("read_file")
    invocations = [i for s in capture.sessions.values() for i in s.tool_invocations]
    assert [(i.name, i.answered) for i in invocations] == [("read_file", True)]
    for name in ("audit.jsonl", "events.jsonl"):
        assert KEY.encode() not in (running.out / name).read_bytes()


def test_gemini_cli_replays_its_recording(
    start_proxy: Callable[..., Running], tmp_path: Path
) -> None:
    """Record a CLI tool loop, then replay it to the CLI with no upstream.

    The CLI makes up the id of every call the server sent without one
    (``read_file_<epoch ms>_<n>``): the replayed run sends other ids than the
    recorded one, and still matches (they count by position).
    """
    cli = require_cli()
    rec = tmp_path / "recording"
    running = start_proxy(record=str(rec))
    running.upstream.responder = answer
    home, work = cli_home(tmp_path)
    run_cli(cli, home, work, running.base())
    running.proxy.stop()
    recorded = [r["tool_results"] for r in running.audit() if r["tool_results"]]
    running.upstream.stop()  # from here on, only the recording can answer

    out = tmp_path / "out-replay"
    config = ProxyConfig(listen_port=0, out=str(out), quiet=True)
    proxy, replayer = replay_proxy(rec, config, fast=True)
    with proxy:
        again = run_cli(cli, home, work, proxy.url + "/stub")
    assert "ship on friday" in again.stdout.decode()
    assert [p.message for p in replayer.problems] == []
    replayed = [r["tool_results"] for r in read_jsonl(out / "audit.jsonl") if r["tool_results"]]
    (before,), (after,) = recorded, replayed
    assert before[0]["call_id"] != after[0]["call_id"]  # the CLI's ids differ from run to run
    assert not (out / "replay-diff.jsonl").exists() or read_jsonl(out / "replay-diff.jsonl") == []


def test_gemini_cli_runs_an_mcp_tool_through_the_proxy(
    start_proxy: Callable[..., Running], tmp_path: Path
) -> None:
    """Gemini CLI with an MCP server configured at the proxy's /mcp/shapes (the
    start-up screen's snippet): the stub model calls the MCP tool, the CLI runs
    it with tools/call through the proxy, and both sides land in one session.

    The budget of one tool call holds the loop: it completes only if the
    model's call (``mcp_shapes_add``) and the execution that answers it are
    counted once (SPEC 3b).
    """
    cli = require_cli()
    seen = mcp_agent_clis.ModelSide()
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()

    async def scenario() -> tuple[Running, int | None, str]:
        async with serve(json_response=False) as base:
            running = start_proxy(mcp=[f"shapes={base}/mcp"], session="gemini", max_tool_calls=1)
            running.upstream.responder = mcp_agent_clis.gemini_answer(seen)
            url = running.url + "/mcp/shapes"
            clis = cli.parent.parent.parent
            setup = await mcp_agent_clis.setup_gemini(clis, home, work, url, running.base())
            # The server is configured as the start-up screen prints it for Gemini CLI.
            (snippet,) = [s for s in mcp_snippets("shapes", url) if s.agent == "Gemini CLI"]
            settings_file = home / ".gemini" / "settings.json"
            settings = orjson.loads(settings_file.read_bytes())
            settings["mcpServers"] = orjson.loads(snippet.text)["mcpServers"]
            settings_file.write_bytes(orjson.dumps(settings))
            code, output = await mcp_agent_clis.run(setup, work)
            await asyncio.sleep(0.3)
            running.proxy.stop()
            return running, code, output

    running, code, output = asyncio.run(scenario())
    assert code == 0, output[-2000:]
    assert seen.called == "mcp_shapes_add" and seen.results_seen == 1
    mcp = [r for r in running.audit() if r["api"] == "mcp"]
    assert {r["session_id"] for r in running.audit()} == {"gemini"}
    methods = [r["mcp_method"] for r in mcp]
    assert methods[:2] == ["initialize", "notifications/initialized"]
    assert {"tools/list", "tools/call"} <= set(methods)
    assert mcp[0]["jsonrpc_id"] == 0  # the CLI counts from 0
    assert mcp[0]["protocol_version"] == "2025-06-18"  # from initialize: no header is sent
    assert {r["protocol_version"] for r in mcp[1:]} == {None}
    (call,) = [r for r in mcp if r["mcp_method"] == "tools/call"]
    canonical = orjson.dumps(mcp_agent_clis.ARGUMENTS, option=orjson.OPT_SORT_KEYS)
    assert (call["tool_name"], call["tool_call_id"]) == ("add", None)
    assert call["arguments_sha256"] == hashlib.sha256(canonical).hexdigest()
    assert call["mcp_session"] is not None and call["mcp_server"] == "shapes"
    (result,) = [e for e in running.events("mcp_result") if e["seq"] == call["seq"]]
    assert (result["is_error"], result["outcome"], result["tool_name"]) == (False, "result", "add")
    model_calls = [c for e in running.events("response") for c in e["tool_calls"]]
    assert [c["name"] for c in model_calls] == ["mcp_shapes_add"]
    assert running.events("rejected") == []
    (status,) = read_jsonl(running.out / "sessions.jsonl")
    assert (status["session_id"], status["stop_reason"]) == ("gemini", "completed")
    assert (status["mcp_tool_calls"], status["tool_calls_admitted"]) == (1, 1)
    for name in ("audit.jsonl", "events.jsonl"):
        assert mcp_agent_clis.FAKE_KEY.encode() not in (running.out / name).read_bytes()
