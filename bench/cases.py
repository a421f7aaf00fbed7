"""The bench's cases: each one measures one target once per round.

A case records per-round statistics into :class:`Results` under
``"{case}.{figure}"`` keys (``chat.c1_p50``); the report takes medians over
rounds. Wire cases are generated from the table in ``bench/wires.py``.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from dataclasses import dataclass, field

from bench.client import (
    HttpConnection,
    cpu_seconds,
    gaps,
    med,
    pct,
    proc_status,
    reset_peak_rss,
)
from bench.wires import Wire, agent_turn_body, image_chat_body, ws_create_message
from websockets.asyncio.client import connect as ws_connect

MB = 1024 * 1024
#: Targets that write audit lines: every modeltap, whatever its export.
NOT_AUDITED = ("direct", "mitmdump", "mitmdump-stream")


@dataclass
class Target:
    """One place the client sends to: the upstream itself or a proxy in front of it."""

    name: str
    port: int
    proc: subprocess.Popen[bytes] | None = None
    out: str | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.name != "direct" else None

    @property
    def audited(self) -> bool:
        return self.name not in NOT_AUDITED


@dataclass
class Plan:
    rounds: int = 5
    c1_requests: int = 200
    c16_requests: int = 1200
    first_samples: int = 30
    long_events: int = 10_000
    ws_long_messages: int = 2_000
    long_streams: int = 1
    agent_requests: int = 40
    large_5: int = 3
    large_20: int = 3
    ws_round_trips: int = 200
    ws_session: int = 2_500
    ws_window: int = 25
    fixture_tests: int = 20

    @classmethod
    def quick(cls) -> Plan:
        return cls(
            rounds=2,
            c1_requests=80,
            c16_requests=320,
            first_samples=10,
            long_events=3_000,
            ws_long_messages=600,
            agent_requests=10,
            large_5=1,
            large_20=1,
            ws_round_trips=50,
            ws_session=1_000,
            fixture_tests=5,
        )


@dataclass
class Results:
    """Per target, per metric: one value per round (medians are taken at the end)."""

    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    #: Requests and response.create messages sent through each audited target.
    requests: dict[str, int] = field(default_factory=dict)
    #: Problems that make a figure wrong (events missing from a stream, ...).
    problems: list[str] = field(default_factory=list)

    def add(self, target: str, metric: str, value: float) -> None:
        self.values.setdefault(target, {}).setdefault(metric, []).append(value)

    def get(self, target: str, metric: str) -> float | None:
        return med(self.values.get(target, {}).get(metric, []))

    def count(self, target: Target, status: int, audited: int = 1) -> None:
        if status != 200:
            self.errors[target.name] = self.errors.get(target.name, 0) + 1
        elif target.audited:
            self.requests[target.name] = self.requests.get(target.name, 0) + audited


class Bench:
    def __init__(self, plan: Plan, results: Results) -> None:
        self.plan = plan
        self.r = results
        self.images = {5: image_chat_body(5 * MB), 20: image_chat_body(20 * MB)}
        self.agent = agent_turn_body()
        self.ws_message = ws_create_message()

    # ------------------------------------------------------------------ small requests

    async def small_c1(self, t: Target, wire: Wire) -> None:
        """``c1_requests`` sequential small requests on one connection."""
        if wire.transport == "websocket":
            await self.ws_round_trip(t, wire)
            return
        body = wire.body(False)
        await self._sequential(t, wire.name, wire.path, body, self.plan.c1_requests, 20)

    async def agent_turn(self, t: Target) -> None:
        """A 200 KB agent turn (tool results, no images), sequentially."""
        await self._sequential(
            t, "agent", "/v1/chat/completions", self.agent, self.plan.agent_requests, 3
        )

    async def _sequential(
        self, t: Target, case: str, path: str, body: bytes, n: int, warm: int
    ) -> None:
        conn = HttpConnection(t.port)
        try:
            for _ in range(warm):
                self.r.count(t, (await conn.post(path, body)).status)
            cpu0 = cpu_seconds(t.pid) if t.pid else None
            lat = []
            for _ in range(n):
                reply = await conn.post(path, body)
                self.r.count(t, reply.status)
                lat.append(reply.total * 1000)
            if cpu0 is not None and t.pid:
                self.r.add(t.name, f"{case}.c1_cpu_us", (cpu_seconds(t.pid) - cpu0) / n * 1e6)
        finally:
            conn.close()
        self.r.add(t.name, f"{case}.c1_p50", pct(lat, 50))
        self.r.add(t.name, f"{case}.c1_p99", pct(lat, 99))

    async def small_c16(self, t: Target, wire: Wire) -> None:
        """``c16_requests`` small requests over 16 connections."""
        conns = [HttpConnection(t.port) for _ in range(16)]
        per_conn = self.plan.c16_requests // 16
        body = wire.body(False)
        lat: list[float] = []

        async def worker(conn: HttpConnection, n: int, keep: bool) -> None:
            for _ in range(n):
                reply = await conn.post(wire.path, body)
                self.r.count(t, reply.status)
                if keep:
                    lat.append(reply.total * 1000)

        try:
            await asyncio.gather(*(worker(c, 5, False) for c in conns))  # warm-up
            cpu0 = cpu_seconds(t.pid) if t.pid else None
            t0 = time.perf_counter()
            await asyncio.gather(*(worker(c, per_conn, True) for c in conns))
            elapsed = time.perf_counter() - t0
            if cpu0 is not None and t.pid:
                cpu = cpu_seconds(t.pid) - cpu0
                self.r.add(t.name, f"{wire.name}.c16_cpu_us", cpu / len(lat) * 1e6)
        finally:
            for c in conns:
                c.close()
        self.r.add(t.name, f"{wire.name}.c16_p50", pct(lat, 50))
        self.r.add(t.name, f"{wire.name}.c16_p99", pct(lat, 99))
        self.r.add(t.name, f"{wire.name}.c16_rps", len(lat) / elapsed)

    # ------------------------------------------------------------------ streams

    def _stream_path(self, wire: Wire, **query: int) -> str:
        sep = "&" if "?" in wire.stream_path else "?"
        q = "&".join(f"{k}={v}" for k, v in {"sse": 1, **query}.items())
        return f"{wire.stream_path}{sep}{q}"

    async def first_event(self, t: Target, wire: Wire) -> None:
        """Time to the first event of a short stream whose upstream pauses 10 ms
        after it (a proxy that buffered would show the pause)."""
        conn = HttpConnection(t.port)
        path, body = self._stream_path(wire, n=2), wire.body(True)
        try:
            for _ in range(5):
                self.r.count(t, (await conn.post(path, body, wire.framing)).status)
            firsts = []
            for _ in range(self.plan.first_samples):
                reply = await conn.post(path, body, wire.framing)
                self.r.count(t, reply.status)
                firsts.append(reply.first * 1000)
        finally:
            conn.close()
        self.r.add(t.name, f"{wire.name}.first_p50", pct(firsts, 50))

    async def long_stream(self, t: Target, wire: Wire) -> None:
        """One long stream: ``long_events`` deltas (WebSocket: ``ws_long_messages``
        messages answering one response.create); time to the last byte, the
        proxy's CPU per event, and the p99 gap between consecutive events."""
        if wire.transport == "websocket":
            await self.ws_long(t, wire)
            return
        n = self.plan.long_events
        path, body = self._stream_path(wire, n=n, pause=0), wire.body(True)
        expected = (
            n + _events(wire.answer().stream.first, wire) + _events(wire.answer().stream.tail, wire)
        )
        conn = HttpConnection(t.port)
        try:
            self.r.count(
                t,
                (
                    await conn.post(self._stream_path(wire, n=50, pause=0), body, wire.framing)
                ).status,
            )
            for _ in range(self.plan.long_streams):
                cpu0 = cpu_seconds(t.pid) if t.pid else None
                reply = await conn.post(path, body, wire.framing)
                self.r.count(t, reply.status)
                if len(reply.events) != expected:
                    self.r.problems.append(
                        f"{t.name} {wire.name}: {len(reply.events)} of {expected} events counted"
                    )
                if cpu0 is not None and t.pid:
                    cpu = cpu_seconds(t.pid) - cpu0
                    self.r.add(t.name, f"{wire.name}.long_cpu_us", cpu / expected * 1e6)
                self.r.add(t.name, f"{wire.name}.long_ttlb_ms", reply.total * 1000)
                self.r.add(
                    t.name, f"{wire.name}.long_gap_p99_ms", pct(gaps(reply.events), 99) * 1000
                )
        finally:
            conn.close()

    async def ws_long(self, t: Target, wire: Wire) -> None:
        n = self.plan.ws_long_messages
        uri = f"ws://127.0.0.1:{t.port}{wire.stream_path}?n={n - 2}"
        async with ws_connect(uri, compression=None, max_size=None) as ws:
            for i in range(1 + self.plan.long_streams):
                cpu0 = cpu_seconds(t.pid) if t.pid else None
                t0 = time.perf_counter()
                await ws.send(self.ws_message)
                times = []
                while True:
                    message = await ws.recv()
                    times.append(time.perf_counter() - t0)
                    if '"response.completed"' in str(message):
                        break
                if t.audited:
                    self.r.requests[t.name] = self.r.requests.get(t.name, 0) + 1
                if i == 0:
                    continue  # warm-up
                if len(times) != n:
                    self.r.problems.append(f"{t.name} {wire.name}: {len(times)} of {n} messages")
                if cpu0 is not None and t.pid:
                    cpu = cpu_seconds(t.pid) - cpu0
                    self.r.add(t.name, f"{wire.name}.long_cpu_us", cpu / n * 1e6)
                self.r.add(t.name, f"{wire.name}.long_ttlb_ms", times[-1] * 1000)
                self.r.add(t.name, f"{wire.name}.long_gap_p99_ms", pct(gaps(times), 99) * 1000)

    # ------------------------------------------------------------------ bodies

    async def large(self, t: Target) -> None:
        """Latency of the 5 MB and 20 MB image requests."""
        for mb, n in ((5, self.plan.large_5), (20, self.plan.large_20)):
            conn = HttpConnection(t.port)
            lat = []
            try:
                for _ in range(n):
                    reply = await conn.post("/v1/chat/completions", self.images[mb])
                    self.r.count(t, reply.status)
                    lat.append(reply.total * 1000)
            finally:
                conn.close()
            self.r.add(t.name, f"large{mb}.p50", pct(lat, 50))

    async def large_memory(self, t: Target) -> None:
        """Peak RSS for one 5 MB, then one 20 MB request, before the rounds: once a
        process has held a large body its allocator keeps the room, and the next
        peak shows nothing (VmHWM reset through clear_refs before each)."""
        pid = t.pid
        if not pid:
            return
        for mb in (5, 20):
            before = proc_status(pid)["VmRSS"]
            if not reset_peak_rss(pid):
                return
            conn = HttpConnection(t.port)
            try:
                status = (await conn.post("/v1/chat/completions", self.images[mb])).status
                if status != 200:  # not counted as sent: this process has its own out dir
                    self.r.errors[t.name] = self.r.errors.get(t.name, 0) + 1
            finally:
                conn.close()
            peak = proc_status(pid)["VmHWM"]
            self.r.add(t.name, f"large{mb}.peak_mb", peak / 1024)
            self.r.add(t.name, f"large{mb}.growth_mb", (peak - before) / 1024)

    # ------------------------------------------------------------------ WebSocket

    async def ws_round_trip(self, t: Target, wire: Wire) -> None:
        uri = f"ws://127.0.0.1:{t.port}{wire.path}"
        async with ws_connect(uri, compression=None, max_size=None) as ws:
            lat = []
            cpu0 = 0.0
            for i in range(10 + self.plan.ws_round_trips):
                if i == 10 and t.pid:
                    cpu0 = cpu_seconds(t.pid)
                t0 = time.perf_counter()
                await ws.send(self.ws_message)
                while '"response.completed"' not in str(await ws.recv()):
                    pass
                if i >= 10:
                    lat.append((time.perf_counter() - t0) * 1000)
            if t.pid:
                cpu = cpu_seconds(t.pid) - cpu0
                self.r.add(t.name, f"{wire.name}.c1_cpu_us", cpu / len(lat) * 1e6)
        if t.audited:
            self.r.requests[t.name] = self.r.requests.get(t.name, 0) + len(lat) + 10
        self.r.add(t.name, f"{wire.name}.c1_p50", pct(lat, 50))
        self.r.add(t.name, f"{wire.name}.c1_p99", pct(lat, 99))

    async def ws_session(self, t: Target) -> None:
        """One connection carrying ``ws_session`` response.create messages (each
        answered by three events), ``ws_window`` in flight; proxy RSS along the way."""
        uri = f"ws://127.0.0.1:{t.port}/v1/responses"
        n, window = self.plan.ws_session, self.plan.ws_window
        pid = t.pid
        rss: list[tuple[int, int]] = []
        t0 = time.perf_counter()
        async with ws_connect(uri, compression=None, max_size=None) as ws:
            sent = 0
            while sent < n:
                batch = min(window, n - sent)
                for _ in range(batch):
                    await ws.send(self.ws_message)
                done = 0
                while done < batch:
                    if '"response.completed"' in str(await ws.recv()):
                        done += 1
                sent += batch
                if pid and (sent % 250 < window or sent == n):
                    rss.append((sent, proc_status(pid)["VmRSS"]))
        elapsed = time.perf_counter() - t0
        if t.audited:
            self.r.requests[t.name] = self.r.requests.get(t.name, 0) + n
        self.r.add(t.name, "ws_session.s", elapsed)
        if rss:
            # From the first thousand on: start-up allocations are not growth.
            base = next(kb for sent, kb in rss if sent >= 1000)
            self.r.add(t.name, "ws_session.rss_end_mb", rss[-1][1] / 1024)
            self.r.add(t.name, "ws_session.growth_mb", (rss[-1][1] - base) / 1024)


def _events(data: bytes, wire: Wire) -> int:
    from bench.client import EventCounter

    return EventCounter(wire.framing).feed(data)
