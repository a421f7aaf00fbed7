"""A fast loopback upstream for the benchmarks: chat JSON, SSE and WebSocket.

Run by ``bench/run.py`` in its own process::

    python bench/upstream.py --port 0 --sse-pause-ms 10

It prints ``PORT <n>`` on stdout once it listens, and stops on SIGINT/SIGTERM
or after ``--max-seconds``. It never parses request bodies (a 20 MB image body
costs it one read), so what is measured is the proxy, not the stub:

- ``POST .../chat/completions``: a canned chat completion (JSON);
  with ``?sse=1``, an SSE stream: the first chunk at once, then a pause of
  ``--sse-pause-ms``, then the rest and ``[DONE]`` (a proxy that buffered the
  stream would show the pause in the time to first byte).
- ``GET .../responses`` with ``Upgrade: websocket``: for each text message
  (taken to be a ``response.create``) three events, ``response.created``,
  ``response.output_text.delta``, ``response.completed``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import signal
import sys

import orjson
from aiohttp import WSMsgType, web

MODEL = "bench-model"

CHAT_JSON = orjson.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello from the bench upstream."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 512, "completion_tokens": 8, "total_tokens": 520},
    }
)


def _sse(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    return _sse(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


SSE_FIRST = _chunk({"role": "assistant", "content": "Hello"})
SSE_REST = (
    _chunk({"content": " from the bench upstream."})
    + _chunk({}, "stop")
    + _sse(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": MODEL,
            "choices": [],
            "usage": {"prompt_tokens": 512, "completion_tokens": 8, "total_tokens": 520},
        }
    )
    + b"data: [DONE]\n\n"
)


def _response(rid: str, status: str, output: list[object], usage: object) -> dict[str, object]:
    return {
        "id": rid,
        "object": "response",
        "created_at": 1700000000,
        "status": status,
        "model": MODEL,
        "output": output,
        "usage": usage,
    }


def ws_events(n: int) -> list[str]:
    """The three server events answering the n-th ``response.create``."""
    rid = f"resp_bench{n}"
    item = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Hi", "annotations": []}],
    }
    usage = {
        "input_tokens": 512,
        "output_tokens": 2,
        "total_tokens": 514,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    events = [
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": _response(rid, "in_progress", [], None),
        },
        {
            "type": "response.output_text.delta",
            "sequence_number": 1,
            "item_id": "msg_bench",
            "output_index": 0,
            "content_index": 0,
            "delta": "Hi",
        },
        {
            "type": "response.completed",
            "sequence_number": 2,
            "response": _response(rid, "completed", [item], usage),
        },
    ]
    return [orjson.dumps(e).decode() for e in events]


class BenchUpstream:
    def __init__(self, sse_pause: float) -> None:
        self.sse_pause = sse_pause
        self._ws_count = itertools.count(1)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("upgrade", "").lower() == "websocket":
            return await self._websocket(request)
        await request.read()  # the whole body, as a real upstream would
        if request.query.get("sse"):
            return await self._sse(request)
        return web.Response(body=CHAT_JSON, content_type="application/json")

    async def _sse(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(SSE_FIRST)
        await asyncio.sleep(self.sse_pause)
        await resp.write(SSE_REST)
        await resp.write_eof()
        return resp

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0, compress=False)
        await ws.prepare(request)
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                for event in ws_events(next(self._ws_count)):
                    await ws.send_str(event)
            elif msg.type in (WSMsgType.ERROR, WSMsgType.CLOSE):
                break
        return ws


async def serve(port: int, sse_pause: float, max_seconds: float) -> None:
    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", BenchUpstream(sse_pause).handle)
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
    parser.add_argument("--max-seconds", type=float, default=900.0)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.sse_pause_ms / 1000, args.max_seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
