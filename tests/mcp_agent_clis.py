"""Agent CLIs speaking HTTP MCP through the recorder, offline (``python -m
tests.mcp_shapes cli NAME``).

Each CLI (installed with npm in a scratch folder, ``--clis``, never in the
repository) gets a fresh HOME holding only its MCP configuration, pointed at
the recorder in front of :mod:`tests.mcp_server`, and a model base URL
pointed at the stub of :mod:`tests.upstream`. The stub answers the CLI's
first model request with a call of the MCP tool ``add`` under whatever name
the CLI gave it, and the request carrying the tool's result with a text, so
the CLI really executes ``tools/call``. What the model saw (the MCP tool
names as the CLI presents them) is kept beside the MCP exchanges.
"""

from __future__ import annotations

import asyncio
import copy
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tests.mcp_recorder import Recorder
from tests.mcp_server import serve
from tests.upstream import (
    GEMINI_METHOD,
    Received,
    Reply,
    Upstream,
    anthropic_tool_sse,
    gemini_function_call_chunks,
    gemini_reply,
    responses_tool_sse,
)

Json = dict[str, Any]
SERVER = "shapes"  # the name each CLI's MCP configuration gives the server
ARGUMENTS = {"a": 2, "b": 3}
FAKE_KEY = "sk-shapes-NOT-A-REAL-KEY-0123456789"


@dataclass
class ModelSide:
    """What the stub model saw: every request's tool names, and which tool it called."""

    tool_names: list[list[str]] = field(default_factory=list)
    called: str | None = None
    results_seen: int = 0


def mcp_tool(names: list[str]) -> str | None:
    """The CLI's name for the server's ``add`` tool (it prefixes it its own way)."""
    return next((n for n in names if n.endswith("add") and SERVER in n), None)


# ------------------------------------------------------------ Claude Code


def anthropic_call(model: str, name: str) -> Reply:
    """The stub's canned tool_use stream, calling ``name`` with :data:`ARGUMENTS`."""
    reply = anthropic_tool_sse(model)
    assert reply.sse is not None
    events = []
    for event, data in copy.deepcopy(reply.sse):
        if data.get("type") == "content_block_start":
            data["content_block"]["name"] = name
        if data.get("delta", {}).get("type") == "input_json_delta":
            if data["delta"]["partial_json"] == "":
                data["delta"]["partial_json"] = orjson.dumps(ARGUMENTS).decode()
            else:
                continue
        events.append((event, data))
    return Reply(sse=events)


def claude_answer(seen: ModelSide) -> Callable[[Received], Reply | None]:
    def answer(received: Received) -> Reply | None:
        if not received.path.startswith("/v1/messages") or "count_tokens" in received.path:
            return None
        body = received.json()
        names = [t.get("name", "") for t in body.get("tools", [])]
        seen.tool_names.append(names)
        last = body["messages"][-1]["content"] if body.get("messages") else ""
        if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
            seen.results_seen += 1
            return None  # the stub's default text answer
        name = mcp_tool(names)
        if name is None or not body.get("stream"):
            return None
        seen.called = name
        return anthropic_call(body.get("model", "claude"), name)

    return answer


# ------------------------------------------------------------ Codex


def responses_call(model: str, namespace: str | None, name: str) -> Reply:
    """The stub's canned function_call stream, calling ``name`` (in
    ``namespace``, as Codex groups an MCP server's tools) with :data:`ARGUMENTS`."""
    reply = responses_tool_sse(model)
    assert reply.sse is not None
    arguments = orjson.dumps(ARGUMENTS).decode()
    events = []
    for event, data in copy.deepcopy(reply.sse):
        items = [data.get("item"), *(data.get("response", {}).get("output") or [])]
        for item in items:
            if isinstance(item, dict) and item.get("type") == "function_call":
                item["name"] = name
                if namespace is not None:
                    item["namespace"] = namespace
                item["arguments"] = arguments if item["arguments"] else ""
        if event == "response.function_call_arguments.delta":
            if data["sequence_number"] != 2:
                continue
            data["delta"] = arguments
        if event == "response.function_call_arguments.done":
            data["arguments"] = arguments
        events.append((event, data))
    return Reply(sse=events)


def codex_answer(seen: ModelSide) -> Callable[[Received], Reply | None]:
    def answer(received: Received) -> Reply | None:
        if not received.path.endswith("/responses"):
            return None
        body = received.json()
        names = []
        for tool in body.get("tools", []):
            if tool.get("type") == "namespace":
                names += [f"{tool['name']} / {t.get('name')}" for t in tool.get("tools", [])]
            elif tool.get("name"):
                names.append(tool["name"])
        seen.tool_names.append(names)
        if any(i.get("type") == "function_call_output" for i in body.get("input", [])):
            seen.results_seen += 1
            return None
        found = mcp_tool([n.replace(" / ", "__") for n in names])
        if found is None:
            return None
        namespace, _, name = found.rpartition("__")
        seen.called = f"{namespace} / {name}"
        return responses_call(body.get("model", "stub-model"), namespace, name)

    return answer


# ------------------------------------------------------------ Gemini CLI


def gemini_answer(seen: ModelSide) -> Callable[[Received], Reply | None]:
    def answer(received: Received) -> Reply | None:
        found = GEMINI_METHOD.search(received.path.split("?", 1)[0])
        if found is None or found["method"] not in ("generateContent", "streamGenerateContent"):
            return None
        body = received.json()
        names = [
            d.get("name", "")
            for t in body.get("tools", [])
            for d in t.get("functionDeclarations", [])
        ]
        seen.tool_names.append(names)
        parts = [p for c in body.get("contents", []) for p in c.get("parts", [])]
        if any("functionResponse" in p for p in parts):
            seen.results_seen += 1
            return None
        name = next((n for n in names if n.endswith("add")), None)
        if name is None:
            return None
        seen.called = name
        alt = "sse" if "alt=sse" in received.path else None
        call = {"name": name, "args": ARGUMENTS}
        model = found["model"] or "gemini-2.5-flash"
        return gemini_reply(gemini_function_call_chunks(model, [call]), found["method"], alt, False)

    return answer


# ------------------------------------------------------------ running one


@dataclass
class Cli:
    """How to set one CLI up and run it."""

    name: str
    version: str
    command: list[str]
    env: dict[str, str]
    config_snippet: str


async def run(cli: Cli, cwd: Path, timeout: float = 240) -> tuple[int | None, str]:
    proc = await asyncio.create_subprocess_exec(
        *cli.command,
        cwd=cwd,
        env=cli.env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
    return proc.returncode, out.decode("utf-8", "replace")


def base_env(home: Path) -> dict[str, str]:
    """A clean environment: a fresh HOME, no proxy, nothing of the machine's keys."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM", "TMPDIR")}
    return {**keep, "HOME": str(home), "NO_COLOR": "1", "CI": "1"}


def npm_version(clis: Path, package: str) -> str:
    manifest = clis / "node_modules" / package / "package.json"
    version: str = orjson.loads(manifest.read_bytes())["version"]
    return version


async def setup_claude(clis: Path, home: Path, work: Path, mcp_url: str, model: str) -> Cli:
    env = {
        **base_env(home),
        "ANTHROPIC_BASE_URL": model,
        "ANTHROPIC_API_KEY": FAKE_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }
    claude = str(clis / "node_modules" / ".bin" / "claude")
    add = [claude, "mcp", "add", "--transport", "http", SERVER, mcp_url]
    add_cli = Cli("claude", "", add, env, "")
    code, out = await run(add_cli, work, 60)
    assert code == 0, out
    tool = f"mcp__{SERVER}__add"
    return Cli(
        name="claude",
        version=npm_version(clis, "@anthropic-ai/claude-code"),
        command=[claude, "-p", "Add 2 and 3 with the add tool.", "--allowedTools", tool],
        env=env,
        config_snippet=f"claude mcp add --transport http {SERVER} {mcp_url}",
    )


async def setup_gemini(clis: Path, home: Path, work: Path, mcp_url: str, model: str) -> Cli:
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "mcpServers": {SERVER: {"httpUrl": mcp_url, "trust": True}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True},
    }
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_bytes(orjson.dumps(settings))
    env = {
        **base_env(home),
        "GOOGLE_GEMINI_BASE_URL": model,
        "GEMINI_API_KEY": FAKE_KEY,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }
    gemini = str(clis / "node_modules" / ".bin" / "gemini")
    snippet = orjson.dumps({"mcpServers": {SERVER: {"httpUrl": mcp_url}}}).decode()
    return Cli(
        name="gemini",
        version=npm_version(clis, "@google/gemini-cli"),
        command=[gemini, "-p", "Add 2 and 3 with the add tool.", "--yolo"],
        env=env,
        config_snippet=f"~/.gemini/settings.json: {snippet}",
    )


async def setup_codex(clis: Path, home: Path, work: Path, mcp_url: str, model: str) -> Cli:
    # A model name Codex has no metadata for: with its own models' metadata
    # (gpt-5.5, say) Codex defers MCP tools behind tool_search, and the stub
    # would have to search before it could call.
    snippet = f'[mcp_servers.{SERVER}]\nurl = "{mcp_url}"\n'
    # codex exec never asks: without "approve" the MCP call fails before it is sent.
    approve = 'default_tools_approval_mode = "approve"\n'
    (home / "config.toml").write_text(
        'model = "stub-model"\nmodel_provider = "stub"\napproval_policy = "never"\n'
        'sandbox_mode = "read-only"\n\n[model_providers.stub]\nname = "stub"\n'
        f'base_url = "{model}/v1"\nwire_api = "responses"\nenv_key = "OPENAI_API_KEY"\n\n'
        + snippet
        + approve
    )
    env = {**base_env(home), "CODEX_HOME": str(home), "OPENAI_API_KEY": FAKE_KEY}
    codex = str(clis / "node_modules" / ".bin" / "codex")
    return Cli(
        name="codex",
        version=npm_version(clis, "@openai/codex"),
        command=[codex, "exec", "--skip-git-repo-check", "Add 2 and 3 with the add tool."],
        env=env,
        config_snippet=f"$CODEX_HOME/config.toml: {snippet}{approve}",
    )


SETUPS = {
    "claude": (setup_claude, claude_answer),
    "codex": (setup_codex, codex_answer),
    "gemini": (setup_gemini, gemini_answer),
}


async def capture_cli(name: str, clis: Path, out: Path) -> None:
    """Run CLI ``name`` once through the recorder and write its sample."""
    setup, answer = SETUPS[name]
    seen = ModelSide()
    scratch = Path(tempfile.mkdtemp(prefix=f"mcp-{name}-"))
    home, work = scratch / "home", scratch / "work"
    home.mkdir()
    work.mkdir()
    try:
        with Upstream() as model:
            model.responder = answer(seen)
            async with serve(json_response=False) as base, Recorder(base) as rec:
                cli = await setup(clis, home, work, rec.url + "/mcp", model.url)
                code, output = await run(cli, work)
                await asyncio.sleep(0.5)
                sample = rec.scenario(
                    client=f"{cli.name} {cli.version}",
                    server="MCPServer streamable_http_app(json_response=False, "
                    "event_store=CountingEventStore(), retry_interval=100)",
                    config_snippet=cli.config_snippet,  # its port becomes <recorder> with the rest
                    command=[Path(cli.command[0]).name, *cli.command[1:]],
                    exit_code=code,
                    model_side={
                        "mcp_tool_names": sorted(
                            {n for names in seen.tool_names for n in names if SERVER in n}
                        ),
                        "called": seen.called,
                        "tool_results_seen": seen.results_seen,
                        "model_requests": [r.path for r in model.received],
                    },
                )
        folder = out / f"{name}_cli"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "tools_call.json"
        path.write_bytes(orjson.dumps(sample, option=orjson.OPT_INDENT_2) + b"\n")
        print(path)
        print(output[-3000:])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
