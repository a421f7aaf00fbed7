"""A fast loopback upstream for the benchmarks: every wire of ``bench/wires.py``.

Run by ``bench/run.py`` in its own process::

    python bench/upstream.py --port 0

It prints ``PORT <n>`` on stdout once it listens, and stops on SIGINT/SIGTERM
or after ``--max-seconds``. It never parses request bodies (a 20 MB image body
costs it one read), so what is measured is the proxy, not the stub:

- ``POST`` to a wire's path (``bench/wires.py``: chat, Responses, Anthropic,
  Gemini, Bedrock Converse): the wire's whole JSON answer; with ``?sse=1``
  (or on a streaming path: ``:streamGenerateContent``, ``/converse-stream``)
  its stream: the first event at once, a pause of ``pause`` ms (default
  ``--sse-pause-ms``), ``n`` deltas (default 2), then the tail. Each delta is
  its own write, as a model server flushes each token; after every ``burst``
  deltas (default 10) the stream pauses 1 ms, so a long stream arrives as a
  reasoning model's does, in small pieces, not as one buffer.
- ``GET .../responses`` with ``Upgrade: websocket``: for each text message
  (taken to be a ``response.create``) ``response.created``, ``n`` deltas (the
  handshake's ``?n=``, default 1) and ``response.completed``, with the same
  bursts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

import orjson
from aiohttp import WSMsgType, web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.wires import Answer, Stream, responses_events, wire_for_path

STREAMING_PATHS = (":streamGenerateContent", "/converse-stream")


def _query_int(request: web.Request, name: str, default: int) -> int:
    try:
        return int(request.query.get(name, default))
    except ValueError:
        return default


class BenchUpstream:
    def __init__(self, sse_pause: float) -> None:
        self.sse_pause = sse_pause
        self.answers: dict[str, Answer] = {}

    def _answer(self, path: str) -> Answer | None:
        wire = wire_for_path(path)
        if wire is None:
            return None
        if wire.name not in self.answers:
            self.answers[wire.name] = wire.answer()
        return self.answers[wire.name]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("upgrade", "").lower() == "websocket":
            return await self._websocket(request)
        await request.read()  # the whole body, as a real upstream would
        answer = self._answer(request.path)
        if answer is None:
            return web.Response(status=404, text="no such bench path")
        if request.query.get("sse") or request.path.endswith(STREAMING_PATHS):
            return await self._stream(request, answer.stream)
        return web.Response(body=answer.json, content_type="application/json")

    async def _stream(self, request: web.Request, stream: Stream) -> web.StreamResponse:
        n = _query_int(request, "n", 2)
        burst = max(1, _query_int(request, "burst", 10))
        pause = _query_int(request, "pause", -1)
        resp = web.StreamResponse(headers={"Content-Type": stream.content_type})
        await resp.prepare(request)
        await resp.write(stream.first)
        await asyncio.sleep(self.sse_pause if pause < 0 else pause / 1000)
        for i in range(n):
            await resp.write(stream.delta)
            if (i + 1) % burst == 0 and i + 1 < n:
                await asyncio.sleep(0.001)
        await resp.write(stream.tail)
        await resp.write_eof()
        return resp

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        n = _query_int(request, "n", 1)
        burst = max(1, _query_int(request, "burst", 10))
        first, delta, done = (orjson.dumps(e).decode() for e in responses_events())
        ws = web.WebSocketResponse(max_msg_size=0, compress=False)
        await ws.prepare(request)
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                await ws.send_str(first)
                for i in range(n):
                    await ws.send_str(delta)
                    if (i + 1) % burst == 0 and i + 1 < n:
                        await asyncio.sleep(0.001)
                await ws.send_str(done)
            elif msg.type in (WSMsgType.ERROR, WSMsgType.CLOSE):
                break
        return ws


async def serve(port: int, sse_pause: float, max_seconds: float) -> None:
    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", BenchUpstream(sse_pause).handle)
    await serve_app(app, port, max_seconds)


async def serve_app(app: web.Application, port: int, max_seconds: float) -> None:
    """Serve ``app`` on loopback, print ``PORT N``, stop on a signal or after ``max_seconds``."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=256)
    await site.start()
    server = site._server
    assert server is not None and server.sockets
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(TimeoutError):
        # Bounded: a forgotten upstream stops by itself.
        await asyncio.wait_for(stop.wait(), max_seconds)
    await runner.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--sse-pause-ms", type=float, default=10.0)
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.sse_pause_ms / 1000, args.max_seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
