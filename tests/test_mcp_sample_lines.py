"""The MCP wire samples of ``tests/data/mcp/`` replayed through the proxy's
audit and observer, each against the lines expected beside it.

Each sample's exchanges (real clients and the SDK's server, recorded;
tests/data/mcp/README.md) are replayed into the exchange core in the order
their parts happened: a request's head and body when it was sent, each SSE
event when it arrived, a JSON answer when it ended. So an answer that came
on another exchange (a resumed GET, HTTP+SSE's one stream) meets its request
as it did on the wire. What the core writes is compared with
``<sample>.expected.jsonl`` beside the sample: every audit line and event,
without what changes from run to run (times, the run id, the proxy's own
exchange ids, durations).

To write the expected files after a deliberate change, run with
``MODELTAP_WRITE_EXPECTED=1`` and read the diff before committing it.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from modeltap.core.body_audit import RequestBody
from modeltap.core.exchange import Exchange
from modeltap.core.gate import RequestHead
from modeltap.core.mcp_exchange import McpStreamTap
from modeltap.rules.routing import RouteTable
from tests.conftest import Core

DATA = Path(__file__).parent / "data" / "mcp"
SAMPLES = sorted(DATA.rglob("*.json"))
#: What differs between two replays of one sample: not what the lines say.
VARYING = ("ts", "run_id", "request_id", "duration_ms")
WRITE = os.environ.get("MODELTAP_WRITE_EXPECTED") == "1"


def sse_bytes(event: dict[str, Any]) -> bytes:
    """One recorded SSE event as the server framed it."""
    out = [f": {c}" for c in event.get("comments", [])]
    for field in ("id", "event", "retry"):
        if field in event:
            out.append(f"{field}: {event[field]}")
    data = event.get("data", "")
    text = data if isinstance(data, str) else orjson.dumps(data).decode()
    out.extend(f"data: {line}" if line else "data:" for line in text.split("\n"))
    return ("\r\n".join(out) + "\r\n\r\n").encode()


class Replay:
    """A sample's exchanges, fed to the core in the order their parts happened."""

    def __init__(self, core: Core, sample: dict[str, Any]) -> None:
        self.core = core
        exchanges = sample["exchanges"]
        self.base = "/mcp" if any(e["path"].startswith("/mcp") for e in exchanges) else ""
        routes = RouteTable.build([], None, [f"shapes=http://127.0.0.1:9{self.base}"])
        core.run.settings = replace(core.run.settings, routes=routes)
        self.steps: list[tuple[float, int, int, Any]] = []
        end = max(e["t_ms"] + (e.get("duration_ms") or 0) for e in exchanges) + 1
        for n, exchange in enumerate(exchanges):
            t = exchange["t_ms"]
            self.steps.append((t, n, 0, ("request", exchange)))
            events = exchange.get("sse_events")
            first = min((e["t_ms"] for e in events), default=0) if events else 0
            self.steps.append((t + min(first, 0.001), n, 1, ("head", exchange)))
            for i, event in enumerate(events or ()):
                self.steps.append((t + event["t_ms"], n, 2 + i, ("event", event)))
            done = exchange.get("duration_ms")
            self.steps.append((t + done if done is not None else end, n, 10**6, ("end", exchange)))
        self.steps.sort(key=lambda step: step[:3])
        self.open: dict[int, Exchange] = {}
        self.taps: dict[int, McpStreamTap] = {}

    def run(self) -> None:
        for t, n, _, (kind, item) in self.steps:
            now = int(t * 1e6)
            getattr(self, f"_{kind}")(n, item, now)

    def _request(self, n: int, exchange: dict[str, Any], now: int) -> None:
        headers = {k.lower(): v for k, v in exchange["request_headers"].items()}
        target = "/mcp/shapes" + exchange["path"][len(self.base) :]
        head = RequestHead(
            id=f"x{n}",
            method=exchange["method"],
            target=target,
            scheme="http",
            host="127.0.0.1",
            port=8787,
            headers=headers,
            fields=tuple((k.encode(), v.encode()) for k, v in headers.items()),
        )
        ex = Exchange.open(self.core.run, head, now)
        assert ex.reply is None, f"exchange {n} refused at its head"
        if "request_body" in exchange:
            raw = orjson.dumps(exchange["request_body"])
        else:
            raw = exchange.get("request_text", "").encode()
        ex.receive_body(RequestBody(raw, headers), now)
        self.open[n] = ex

    def _head(self, n: int, exchange: dict[str, Any], now: int) -> None:
        ex = self.open[n]
        headers = {k.lower(): v for k, v in exchange["response_headers"].items()}
        tap = ex.started(exchange["status"], headers, now)
        if isinstance(tap, McpStreamTap):
            self.taps[n] = tap

    def _event(self, n: int, event: dict[str, Any], now: int) -> None:
        self.taps[n](sse_bytes(event))

    def _end(self, n: int, exchange: dict[str, Any], now: int) -> None:
        ex = self.open[n]
        if n in self.taps:
            self.taps[n](b"")
            if exchange.get("closed_by"):
                ex.failed("client_gone", None, now, request_complete=True)
                return
            ex.ended(exchange["status"], None, None, None, now)
            return
        if "response_body" in exchange:
            raw = orjson.dumps(exchange["response_body"])
        else:
            raw = exchange.get("response_text", "").encode()
        ex.ended(exchange["status"], raw, None, None, now)


def written(core: Core) -> list[dict[str, Any]]:
    lines = [{"file": "audit.jsonl", **line} for line in core.audit()]
    lines += [{"file": "events.jsonl", **line} for line in core.events()]
    return [{k: v for k, v in line.items() if k not in VARYING} for line in lines]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: str(p.relative_to(DATA)))
def test_a_sample_replayed_writes_the_lines_beside_it(path: Path, tmp_path: Path) -> None:
    core = Core(tmp_path / "out")
    Replay(core, orjson.loads(path.read_bytes())).run()
    got = written(core)
    expected_path = path.with_suffix(".expected.jsonl")
    if WRITE:
        expected_path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in got))
    expected = [orjson.loads(line) for line in expected_path.read_bytes().splitlines()]
    assert got == expected
    # Whatever the sample: every request the client sent has its line, and
    # nothing of a session id, an argument or a result is written.
    sent = sum(
        len(b) if isinstance(b, list) else 1
        for e in orjson.loads(path.read_bytes())["exchanges"]
        if (b := e.get("request_body")) is not None
    )
    assert sum(1 for line in got if line["file"] == "audit.jsonl") == sent
    raw = (tmp_path / "out" / "audit.jsonl").read_bytes() + (
        tmp_path / "out" / "events.jsonl"
    ).read_bytes()
    assert b"<session-" not in raw and b"ship the release" not in raw and b"Oslo" not in raw
