"""Capture the MCP wire samples of ``tests/data/mcp/`` (re-run it to refresh them).

    .venv/bin/python -m tests.mcp_shapes sdk [--out tests/data/mcp]
    .venv/bin/python -m tests.mcp_shapes cli claude|codex|gemini --clis /tmp/clis

``sdk`` runs the official ``mcp`` SDK's clients against its own server
(:mod:`tests.mcp_server`) through the recorder (:mod:`tests.mcp_recorder`)
in every transport and answer mode, one sample per combination;
``cli`` runs an agent CLI installed with npm under ``--clis`` against the
same server, its model being the local stub of :mod:`tests.upstream`
(:mod:`tests.mcp_agent_clis`). Everything stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.metadata
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.client.session
import mcp_types as types
import orjson
from mcp import Client
from mcp.client.sse import sse_client
from mcp_types import version as mcp_versions

from tests.mcp_recorder import Recorder
from tests.mcp_server import serve

DATA = Path(__file__).parent / "data" / "mcp"
Json = dict[str, Any]
Step = tuple[str, Callable[[Client], Awaitable[Any]]]


def sdk_versions() -> Json:
    return {
        "mcp": importlib.metadata.version("mcp"),
        "LATEST_PROTOCOL_VERSION": mcp_versions.LATEST_PROTOCOL_VERSION,
        "SUPPORTED_PROTOCOL_VERSIONS": list(mcp_versions.SUPPORTED_PROTOCOL_VERSIONS),
    }


async def _sampling(
    _ctx: Any, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="ship it on friday"),
        model="stub-model",
        stop_reason="endTurn",
    )


async def _elicitation(_ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"confirm": True})


async def _logging(params: types.LoggingMessageNotificationParams) -> None:
    pass


async def _progress(progress: float, total: float | None, message: str | None) -> None:
    pass


#: The steps of the shorter scenarios (the variants of a transport already
#: captured whole): enough to show their headers, ids and answer framing.
CORE_STEPS = frozenset(
    {
        "tools/list",
        "tools/call add",
        "tools/call lookup_order (isError)",
        "tools/call count_slowly (progress)",
        "ping",
        "tools/call summarise (sampling)",
        "tools/call grow_catalogue (list_changed)",
        "wait for notifications",
    }
)


def steps(*, full: bool, resumable: bool) -> list[Step]:
    """What an SDK scenario does, in order: each a name and a call; all of
    them when ``full``, else the :data:`CORE_STEPS`."""
    out: list[Step] = [
        ("tools/list", lambda c: c.list_tools()),
        ("tools/call add", lambda c: c.call_tool("add", {"a": 2, "b": 3})),
        (
            "tools/call weather (structuredContent)",
            lambda c: c.call_tool("weather", {"city": "Oslo"}),
        ),
        (
            "tools/call forecast (x-mcp-header)",
            lambda c: c.call_tool("forecast", {"region": "north"}),
        ),
        (
            "tools/call lookup_order (isError)",
            lambda c: c.call_tool("lookup_order", {"order_id": "A-7"}),
        ),
        ("tools/call explode (raises)", lambda c: c.call_tool("explode", {})),
        (
            "tools/call count_slowly (progress)",
            lambda c: c.call_tool("count_slowly", {"n": 2}, progress_callback=_progress),
        ),
        ("resources/list", lambda c: c.list_resources()),
        ("resources/templates/list", lambda c: c.list_resource_templates()),
        ("resources/read notes://today", lambda c: c.read_resource("notes://today")),
        ("resources/read orders://A-7", lambda c: c.read_resource("orders://A-7")),
        ("prompts/list", lambda c: c.list_prompts()),
        ("prompts/get review", lambda c: c.get_prompt("review", {"code": "x = 1"})),
        ("ping", lambda c: c.send_ping()),
        ("tools/call summarise (sampling)", lambda c: c.call_tool("summarise", {"text": "notes"})),
        (
            "tools/call delete_file (elicitation)",
            lambda c: c.call_tool("delete_file", {"path": "a"}),
        ),
        ("tools/call grow_catalogue (list_changed)", lambda c: c.call_tool("grow_catalogue", {})),
        ("wait for notifications", lambda c: anyio.sleep(0.5)),
        ("tools/list again", lambda c: c.list_tools()),
    ]
    if not full:
        return [step for step in out if step[0] in CORE_STEPS]
    if resumable:
        out.append(
            (
                "tools/call pause (stream cut, Last-Event-ID)",
                lambda c: c.call_tool("pause", {}, progress_callback=_progress),
            )
        )
    return out


async def run_steps(client: Client, todo: list[Step]) -> list[Json]:
    """Run each step (10 s at most), noting what came of it: a step that
    fails is a finding too (a mode without a back channel, say)."""
    done = []
    for name, call in todo:
        try:
            with anyio.fail_after(10):
                result = await call(client)
            outcome = "ok"
            if isinstance(result, types.CallToolResult) and result.is_error:
                outcome = "ok: isError"
        except Exception as exc:  # the outcome is the finding
            outcome = f"{type(exc).__name__}: {str(exc)[:160]}"
        done.append({"step": name, "outcome": outcome})
    return done


def client(server: Any, mode: str) -> Client:
    return Client(
        server,
        mode=mode,
        sampling_callback=_sampling,
        elicitation_callback=_elicitation,
        logging_callback=_logging,
        client_info=types.Implementation(name="shapes-capture", version="1.0.0"),
    )


@contextlib.contextmanager
def offering(version: str | None) -> Any:
    """The SDK client offers LATEST_HANDSHAKE_VERSION in ``initialize``;
    pinning it is the only way to make today's SDK speak an older revision."""
    if version is None:
        yield
        return
    saved = mcp.client.session.LATEST_HANDSHAKE_VERSION
    mcp.client.session.LATEST_HANDSHAKE_VERSION = version  # type: ignore[misc]
    try:
        yield
    finally:
        mcp.client.session.LATEST_HANDSHAKE_VERSION = saved  # type: ignore[misc]


@contextlib.asynccontextmanager
async def recorded(upstream: str) -> AsyncIterator[Recorder]:
    async with Recorder(upstream) as recorder:
        yield recorder


async def streamable(
    *, mode: str, json_response: bool, stateless: bool, offer: str | None = None, full: bool = True
) -> Json:
    async with (
        serve(json_response=json_response, stateless=stateless) as base,
        recorded(base) as rec,
    ):
        with offering(offer):
            async with client(rec.url + "/mcp", mode) as c:
                resumable = not json_response and not stateless
                done = await run_steps(c, steps(full=full, resumable=resumable))
        await anyio.sleep(0.2)  # let the DELETE and the GET stream's end pass
        return rec.scenario(
            client="mcp Python SDK Client (streamable_http_client)",
            server=f"MCPServer streamable_http_app(json_response={json_response}, "
            f"stateless_http={stateless}, event_store=CountingEventStore(), retry_interval=100)",
            client_mode=mode,
            offered_protocol_version=offer or mcp_versions.LATEST_HANDSHAKE_VERSION
            if mode == "legacy"
            else None,
            sdk=sdk_versions(),
            steps=done,
        )


async def http_sse() -> Json:
    async with serve("sse") as base, recorded(base) as rec:
        async with client(sse_client(rec.url + "/sse"), "legacy") as c:
            done = await run_steps(c, steps(full=True, resumable=False))
        await anyio.sleep(0.2)
        return rec.scenario(
            client="mcp Python SDK Client (sse_client)",
            server="MCPServer sse_app() (GET /sse, POST /messages/?session_id=)",
            client_mode="legacy",
            offered_protocol_version=mcp_versions.LATEST_HANDSHAKE_VERSION,
            sdk=sdk_versions(),
            steps=done,
        )


#: A JSON-RPC batch as the 2025-03-26 revision allows it (and 2025-06-18
#: removed): no SDK sends one, so this body is written by hand.
BATCH = [
    {
        "jsonrpc": "2.0",
        "id": 10,
        "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 1, "b": 2}},
    },
    {"jsonrpc": "2.0", "id": "req-11", "method": "tools/list"},
    {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "t1", "progress": 1},
    },
]


async def batch(json_response: bool) -> Json:
    """Initialize at 2025-03-26 with the SDK, then POST the hand-written batch
    in that session: what the SDK's server answers is real."""
    async with serve(json_response=json_response) as base, recorded(base) as rec:
        with offering("2025-03-26"):
            async with client(rec.url + "/mcp", "legacy") as c:
                session_id = next(
                    e.response_headers["mcp-session-id"]
                    for e in rec.exchanges
                    if "mcp-session-id" in e.response_headers
                )
                async with httpx2.AsyncClient() as http:
                    await http.post(
                        rec.url + "/mcp",
                        content=orjson.dumps(BATCH),
                        headers={
                            "content-type": "application/json",
                            "accept": "application/json, text/event-stream",
                            "mcp-session-id": session_id,
                            "mcp-protocol-version": "2025-03-26",
                        },
                    )
                await c.send_ping()
        await anyio.sleep(0.2)
        sample = rec.scenario(
            client="mcp Python SDK Client for the session; the batch POST (marked "
            '"hand_written": true) is written by hand per the 2025-03-26 spec and sent with httpx2',
            server=f"MCPServer streamable_http_app(json_response={json_response})",
            client_mode="legacy",
            offered_protocol_version="2025-03-26",
            sdk=sdk_versions(),
        )
        for exchange in sample["exchanges"]:
            if isinstance(exchange.get("request_body"), list):
                exchange["hand_written"] = True
        return sample


Scenario = Callable[[], Awaitable[Json]]


def scenarios() -> dict[str, Scenario]:
    """Every SDK sample by its file name."""
    legacy, modern = mcp_versions.LATEST_HANDSHAKE_VERSION, mcp_versions.LATEST_MODERN_VERSION
    out: dict[str, Scenario] = {}
    for json_response in (False, True):
        answer = "json" if json_response else "sse"
        for stateless in (False, True):
            state = "stateless" if stateless else "stateful"
            out[f"streamable_{answer}_{state}_{legacy}"] = functools.partial(
                streamable,
                mode="legacy",
                json_response=json_response,
                stateless=stateless,
                full=not stateless,
            )
        out[f"streamable_{answer}_auto_{modern}"] = functools.partial(
            streamable,
            mode="auto",
            json_response=json_response,
            stateless=False,
            full=not json_response,
        )
    for offer in ("2025-03-26", "2025-06-18"):
        out[f"streamable_sse_stateful_{offer}"] = functools.partial(
            streamable, mode="legacy", json_response=False, stateless=False, offer=offer, full=False
        )
    out["http_sse_legacy_transport"] = http_sse
    out["batch_2025_03_26_sse"] = functools.partial(batch, False)
    out["batch_2025_03_26_json"] = functools.partial(batch, True)
    return out


def write(folder: Path, name: str, sample: Json) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_bytes(orjson.dumps(sample, option=orjson.OPT_INDENT_2) + b"\n")
    return path


async def capture_sdk(out: Path, only: str | None) -> None:
    for name, scenario in scenarios().items():
        if only is None or only in name:
            print(write(out / "python_sdk", name, await scenario()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sdk = sub.add_parser("sdk", help="the Python SDK's clients, every transport and mode")
    sdk.add_argument("--out", type=Path, default=DATA)
    sdk.add_argument("--only", help="write only the scenarios whose name contains this")
    cli = sub.add_parser("cli", help="an agent CLI through the recorder")
    cli.add_argument("name", choices=["claude", "codex", "gemini"])
    cli.add_argument("--clis", type=Path, default=Path("/tmp/clis"))
    cli.add_argument("--out", type=Path, default=DATA)
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    if args.what == "sdk":
        asyncio.run(capture_sdk(args.out, args.only))
    else:
        from tests.mcp_agent_clis import capture_cli

        asyncio.run(capture_cli(args.name, args.clis, args.out))


if __name__ == "__main__":
    main()
