"""The MCP case: one ``tools/call`` through the proxy, against a direct connection
and bare ``mitmdump`` on the same call.

Run as a script it is the MCP server of the case, in its own process::

    python bench/mcp_call.py --port 0

a minimal loopback Streamable HTTP server (aiohttp, stateless: no
``Mcp-Session-Id``, as the SDK's ``stateless_http`` server) that reads each
POST as JSON-RPC and answers a request with the result the SDK's
``MCPServer`` gives its ``add`` tool, for the request's id: as one JSON body
at ``/mcp/json``, as one SSE event (``event: message``) at ``/mcp/sse``; a
notification gets 202. It prints ``PORT <n>`` once it listens. A FastMCP
server would spend more time in the server than the proxies spend in front
of it (pydantic, starlette), hiding the proxy's cost the case is there to
show; this one does what a server must and nothing more.

``bench/run.py`` starts, for the ``mcp`` family, that server, a bare
``mitmdump`` in reverse mode in front of it (and one streaming SSE answers,
the reference of the SSE figures), and a ``modeltap run`` mounting
it (``--mcp json=URL/mcp/json --mcp sse=URL/mcp/sse``), so every target is
asked the same path. Each round, 200 sequential ``tools/call`` POSTs
(``id`` counting up, ``MCP-Protocol-Version: 2025-11-25``) on one
connection per target and answer mode: p50, p99, proxy CPU per call.
modeltap writes one audit line per call, checked at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cases import Bench, Target
from bench.client import HttpConnection, cpu_seconds, free_port, pct
from bench.report import Row, le
from bench.upstream import serve_app

#: The answer modes, each a path of the server and a ``--mcp`` mount of modeltap.
MODES = ("json", "sse")
HEADERS = "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n"
#: What the SDK's MCPServer answers ``add(a=2, b=3)`` with (its id put in).
RESULT = {
    "content": [{"type": "text", "text": "5"}],
    "structuredContent": {"result": 5},
    "isError": False,
}
WARM = 20


def call_body(jsonrpc_id: int) -> bytes:
    """The ``tools/call`` the SDK's client sends for ``add(a=2, b=3)``."""
    return orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": jsonrpc_id,
            "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": 2, "b": 3}},
        }
    )


# --------------------------------------------------------------------------- the server


async def handle(request: web.Request) -> web.StreamResponse:
    message: Any = orjson.loads(await request.read())
    if not isinstance(message, dict) or "id" not in message:
        return web.Response(status=202)
    answer = orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": RESULT})
    if not request.path.endswith("/sse"):
        return web.Response(body=answer, content_type="application/json")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b"event: message\r\ndata: " + answer + b"\r\n\r\n")
    await resp.write_eof()
    return resp


async def serve(port: int, max_seconds: float) -> None:
    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", handle)
    await serve_app(app, port, max_seconds)


# --------------------------------------------------------------------------- the case


def targets(
    procs: Any, work: Path, trees: list[tuple[str, Path | None]], main: tuple[str, ...]
) -> dict[str, Target]:
    """The case's processes: its server, a bare mitmdump and each modeltap tree
    (``modeltap``, ``candidate``) in front of it. Keyed ``mcp NAME``; each
    target keeps its column's name (``direct``, ``mitmdump``, ``modeltap``)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--port", "0"]
    proc, line = procs._spawn_reporting("mcp-server", cmd, "PORT ")
    up = int(line.split()[1])
    out = {"mcp direct": Target("direct", up, proc)}
    out["mcp mitmdump"] = procs.mitmdump(up, name="mitmdump")
    # Bare mitmdump reads an SSE answer whole before sending it on; modeltap never
    # does: the SSE figures' reference streams it too (bench/mitm_stream.py).
    stream = str(Path(__file__).resolve().parent / "mitm_stream.py")
    out["mcp mitmdump-stream"] = procs.mitmdump(up, "-s", stream, name="mitmdump-stream")
    for tree, src in trees:
        port = free_port()
        target_out = work / f"mcp-{tree}-out"
        mounts = [
            a for mode in MODES for a in ("--mcp", f"{mode}=http://127.0.0.1:{up}/mcp/{mode}")
        ]
        cmd = [
            sys.executable, *main, "run", "--listen", f"127.0.0.1:{port}",
            *mounts, "--out", str(target_out), "-q",
        ]  # fmt: skip
        out[f"mcp {tree}"] = procs.proxy(tree, cmd, port, src, target_out)
    return out


async def tools_call(bench: Bench, t: Target, mode: str, key: str) -> None:
    """``c1_requests`` sequential ``tools/call`` POSTs on one connection."""
    conn = HttpConnection(t.port, HEADERS)
    path, framing = f"/mcp/{mode}", "sse" if mode == "sse" else None
    sent = 0
    try:
        for i in range(WARM):
            reply = await conn.post(path, call_body(i + 1), framing)
            bench.r.count(t, reply.status, audited=0)
            sent += reply.status == 200
        cpu0 = cpu_seconds(t.pid) if t.pid else None
        lat = []
        for i in range(bench.plan.c1_requests):
            reply = await conn.post(path, call_body(WARM + i + 1), framing)
            bench.r.count(t, reply.status, audited=0)
            sent += reply.status == 200
            lat.append(reply.total * 1000)
        if cpu0 is not None and t.pid:
            used = cpu_seconds(t.pid) - cpu0
            bench.r.add(t.name, f"mcp-{mode}.c1_cpu_us", used / bench.plan.c1_requests * 1e6)
    finally:
        conn.close()
    if t.audited:  # counted under the target's key: the audit check reads it
        bench.r.requests[key] = bench.r.requests.get(key, 0) + sent
    bench.r.add(t.name, f"mcp-{mode}.c1_p50", pct(lat, 50))
    bench.r.add(t.name, f"mcp-{mode}.c1_p99", pct(lat, 99))


def cases(
    bench: Bench, targets: dict[str, Target]
) -> list[tuple[str, Callable[[Target], Awaitable[None]], list[Target]]]:
    """One case per answer mode, each run against the ``mcp ...`` targets."""
    mine = {key: t for key, t in targets.items() if key.startswith("mcp ")}
    keys = {id(t): key for key, t in mine.items()}
    group = list(mine.values())
    return [
        (
            f"mcp tools/call ({mode})",
            lambda t, mode=mode: tools_call(bench, t, mode, keys[id(t)]),
            group,
        )
        for mode in MODES
    ]


def rows() -> tuple[str, list[Row]]:
    """The table's section for the case."""
    out: list[Row] = []
    for mode in MODES:
        what = f"MCP tools/call, {mode.upper()} answer, c=1"
        m = f"mcp-{mode}"
        if mode == "json":
            out += [
                Row(f"{what}: p50 (ms)", f"{m}.c1_p50", goal=le(1.10)),
                Row(f"{what}: p99 (ms)", f"{m}.c1_p99"),
                Row(f"{what}: proxy CPU per call (µs)", f"{m}.c1_cpu_us", digits=0),
            ]
            continue
        ref = "mitmdump-stream"
        out += [
            Row(f"{what}: p50 (ms)", f"{m}.c1_p50", ref=ref, goal=le(1.10)),
            Row(f"{what}: p50 (ms), vs mitmdump reading it whole", f"{m}.c1_p50"),
            Row(f"{what}: p99 (ms)", f"{m}.c1_p99", ref=ref),
            Row(f"{what}: proxy CPU per call (µs)", f"{m}.c1_cpu_us", ref=ref, digits=0),
            Row(
                f"{what}: proxy CPU per call (µs), vs mitmdump reading it whole",
                f"{m}.c1_cpu_us",
                digits=0,
            ),
        ]
    return "MCP (a Streamable HTTP server on loopback: bench/mcp_call.py)", out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.max_seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
