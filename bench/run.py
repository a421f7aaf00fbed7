"""Measure modeltap's overhead against a direct connection and bare mitmdump.

One command, from the repository root with the project's venv::

    python bench/run.py                  # full run (~3-4 minutes), prints a markdown table
    python bench/run.py --update-readme  # ... and writes it into bench/README.md
    python bench/run.py --quick          # a smoke run (~40 s), figures not for quoting
    python bench/run.py --profile 20     # py-spy modeltap under the small-request load

Everything runs on loopback in subprocesses that this script starts and stops:
the bench upstream (``bench/upstream.py``), bare ``mitmdump`` in reverse mode,
``mitmdump --set stream_large_bodies=1`` (the streaming reference for SSE, since
bare mitmdump buffers whole responses) and ``modeltap run``. The client is this
process: a minimal keep-alive HTTP/1.1 client on asyncio (so its own cost is
small and the same for every target) and the ``websockets`` client.

Targets are measured in rounds; each round runs every case against every
target in a rotated order, so slow drifts of a noisy machine spread over all
of them. Figures are medians over rounds of each round's statistic.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import math
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.client import connect as ws_connect

BENCH_DIR = Path(__file__).resolve().parent
README = BENCH_DIR / "README.md"
BIN = Path(sys.executable).parent
CHAT_PATH = "/v1/chat/completions"
WS_PATH = "/v1/responses"
MB = 1024 * 1024
#: Targets that write audit lines (the candidate is modeltap from another source tree).
AUDITED = ("modeltap", "candidate")

# --------------------------------------------------------------------------- bodies


def small_chat_body(stream: bool = False, size: int = 2048) -> bytes:
    """A chat request of ``size`` bytes: system message, user message, one tool."""
    body: dict[str, Any] = {
        "model": "gpt-bench",
        "messages": [
            {"role": "system", "content": "You are a careful coding assistant. " * 8},
            {"role": "user", "content": ""},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Read a file of the workspace.",
                    "parameters": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                        "required": ["path"],
                    },
                },
            }
        ],
        "reasoning_effort": "low",
        "stream": stream,
    }
    pad = size - len(orjson.dumps(body))
    body["messages"][1]["content"] = ("lorem ipsum dolor sit amet " * (pad // 27 + 1))[:pad]
    return orjson.dumps(body)


def image_chat_body(size: int) -> bytes:
    """A chat request of about ``size`` bytes, almost all of it one base64 data-URL image."""
    head = {
        "model": "gpt-bench",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Describe this image."},
                    {"type": "image_url", "image_url": {"url": "", "detail": "high"}},
                ],
            }
        ],
    }
    room = size - len(orjson.dumps(head)) - len("data:image/png;base64,")
    b64 = base64.b64encode(os.urandom(room * 3 // 4)).decode()
    head["messages"][0]["content"][1]["image_url"]["url"] = "data:image/png;base64," + b64
    return orjson.dumps(head)


def ws_create_message() -> str:
    """One ``response.create`` (about 1 KB) that states all its settings."""
    return orjson.dumps(
        {
            "type": "response.create",
            "model": "gpt-bench",
            "instructions": "You are a careful coding assistant. " * 6,
            "input": [
                {
                    "role": "user",
                    "content": [{"type": "input_text", "text": "lorem ipsum dolor " * 30}],
                }
            ],
            "tools": [
                {
                    "type": "function",
                    "name": "read_file",
                    "parameters": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                    },
                }
            ],
            "store": False,
        }
    ).decode()


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in kB."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0])
    return out


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM (Linux >= 4.0): writing 5 to clear_refs. False if not allowed."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


@dataclass
class Target:
    """One place the client sends to: the upstream itself or a proxy in front of it."""

    name: str
    port: int
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


class Processes:
    """Starts the subprocesses and stops every one of them at the end."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.procs: list[subprocess.Popen[bytes]] = []

    def _env(self, src: Path | None = None) -> dict[str, str]:
        # No span export: measure the proxy, not a collector; nor a stray endpoint.
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env["PYTHONUNBUFFERED"] = "1"
        if src is not None:
            # Another source tree of modeltap (a snapshot, a patched copy) wins
            # over the editable install.
            env["PYTHONPATH"] = str(src)
        return env

    def upstream(self, sse_pause_ms: float) -> Target:
        cmd = [
            sys.executable,
            str(BENCH_DIR / "upstream.py"),
            "--port",
            "0",
            "--sse-pause-ms",
            str(sse_pause_ms),
        ]
        log = self.work / "upstream.log"
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log.open("wb"), env=self._env())
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if not line.startswith("PORT "):
            raise RuntimeError(f"the bench upstream did not start; see {log}")
        return Target("direct", int(line.split()[1]), proc, log)

    def proxy(self, name: str, cmd: list[str], port: int, src: Path | None = None) -> Target:
        log = self.work / f"{name}.log"
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=log.open("wb"), env=self._env(src)
        )
        self.procs.append(proc)
        target = Target(name, port, proc, log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                return target
            time.sleep(0.05)
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{name} did not start listening on {port}:\n{tail}")

    def mitmdump(self, up: int, *extra: str, name: str = "mitmdump") -> Target:
        port = free_port()
        cmd = [
            str(BIN / "mitmdump"),
            "--mode",
            f"reverse:http://127.0.0.1:{up}",
            "-p",
            str(port),
            "--listen-host",
            "127.0.0.1",
            "-q",
            "--set",
            "connection_strategy=lazy",
            *extra,
        ]
        return self.proxy(name, cmd, port)

    def modeltap(
        self, up: int, out: Path, src: Path | None = None, name: str = "modeltap"
    ) -> Target:
        port = free_port()
        cmd = [
            sys.executable,
            "-m",
            "modeltap.cli",
            "run",
            "--listen",
            f"127.0.0.1:{port}",
            "--upstream",
            f"http://127.0.0.1:{up}",
            "--out",
            str(out),
            "-q",
        ]
        return self.proxy(name, cmd, port, src)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


# --------------------------------------------------------------------------- HTTP client


class HttpConnection:
    """A minimal keep-alive HTTP/1.1 client: one request at a time on one socket.

    It sends a whole request, reads a Content-Length, chunked or close-delimited
    body, and notes when the first SSE event (a blank-line-terminated block) has
    arrived. Small and the same for every target.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.reader is None or self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(
                "127.0.0.1", self.port, limit=1 << 20
            )
        return self.reader, self.writer

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def post(self, path: str, body: bytes) -> tuple[int, float, float]:
        """Send one POST; return (status, seconds to the first SSE event or the
        whole body, seconds to the end of the response)."""
        reader, writer = await self._open()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            "Content-Type: application/json\r\nAuthorization: Bearer sk-bench-not-a-key\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        t0 = time.perf_counter()
        if len(body) < 65536:
            writer.write(head + body)
        else:
            writer.write(head)
            writer.write(body)
            await writer.drain()
        raw_head = await reader.readuntil(b"\r\n\r\n")
        status = int(raw_head.split(b" ", 2)[1])
        headers: dict[bytes, bytes] = {}
        for line in raw_head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            headers[key.strip().lower()] = value.strip().lower()
        first: float | None = None
        if b"content-length" in headers:
            await reader.readexactly(int(headers[b"content-length"]))
        elif headers.get(b"transfer-encoding") == b"chunked":
            seen = b""
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    while await reader.readuntil(b"\r\n") != b"\r\n":
                        pass
                    break
                data = (await reader.readexactly(size + 2))[:-2]
                if first is None:
                    seen += data
                    if b"\n\n" in seen:
                        first = time.perf_counter()
        else:
            await reader.read()
            self.close()
        t1 = time.perf_counter()
        if headers.get(b"connection") == b"close":
            self.close()
        return status, (first or t1) - t0, t1 - t0


# --------------------------------------------------------------------------- statistics


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass
class Results:
    """Per target, per metric: one value per round (medians are taken at the end)."""

    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)

    def add(self, target: str, metric: str, value: float) -> None:
        self.values.setdefault(target, {}).setdefault(metric, []).append(value)

    def get(self, target: str, metric: str) -> float | None:
        return med(self.values.get(target, {}).get(metric, []))

    def count(self, target: Target, status: int, audited: int = 1) -> None:
        if status != 200:
            self.errors[target.name] = self.errors.get(target.name, 0) + 1
        elif target.name in AUDITED:
            self.requests[target.name] = self.requests.get(target.name, 0) + audited


# --------------------------------------------------------------------------- cases


@dataclass
class Plan:
    rounds: int = 5
    c1_requests: int = 300
    c16_requests: int = 1200
    sse_samples: int = 40
    large_5: int = 3
    large_20: int = 2
    ws_round_trips: int = 200
    ws_session: int = 2_500
    ws_window: int = 25


class Bench:
    def __init__(self, plan: Plan, results: Results) -> None:
        self.plan = plan
        self.r = results
        self.small = small_chat_body()
        self.small_sse = small_chat_body(stream=True)
        self.images = {5: image_chat_body(5 * MB), 20: image_chat_body(20 * MB)}
        self.ws_message = ws_create_message()

    async def small_c1(self, t: Target) -> None:
        conn = HttpConnection(t.port)
        try:
            for _ in range(20):  # warm-up
                status, _, _ = await conn.post(CHAT_PATH, self.small)
                self.r.count(t, status)
            lat = []
            for _ in range(self.plan.c1_requests):
                status, _, total = await conn.post(CHAT_PATH, self.small)
                self.r.count(t, status)
                lat.append(total * 1000)
        finally:
            conn.close()
        self.r.add(t.name, "c1_p50", pct(lat, 50))
        self.r.add(t.name, "c1_p99", pct(lat, 99))

    async def small_c16(self, t: Target) -> None:
        conns = [HttpConnection(t.port) for _ in range(16)]
        per_conn = self.plan.c16_requests // 16
        lat: list[float] = []

        async def worker(conn: HttpConnection, n: int, keep: bool) -> None:
            for _ in range(n):
                status, _, total = await conn.post(CHAT_PATH, self.small)
                self.r.count(t, status)
                if keep:
                    lat.append(total * 1000)

        try:
            await asyncio.gather(*(worker(c, 5, False) for c in conns))  # warm-up
            cpu0 = cpu_seconds(t.pid) if t.pid and t.name != "direct" else None
            t0 = time.perf_counter()
            await asyncio.gather(*(worker(c, per_conn, True) for c in conns))
            elapsed = time.perf_counter() - t0
            if cpu0 is not None and t.pid:
                cpu = cpu_seconds(t.pid) - cpu0
                self.r.add(t.name, "c16_cpu_us", cpu / len(lat) * 1e6)
        finally:
            for c in conns:
                c.close()
        self.r.add(t.name, "c16_p50", pct(lat, 50))
        self.r.add(t.name, "c16_p99", pct(lat, 99))
        self.r.add(t.name, "c16_rps", len(lat) / elapsed)

    async def sse_first_byte(self, t: Target) -> None:
        conn = HttpConnection(t.port)
        path = CHAT_PATH + "?sse=1"
        try:
            for _ in range(5):
                status, _, _ = await conn.post(path, self.small_sse)
                self.r.count(t, status)
            firsts, totals = [], []
            for _ in range(self.plan.sse_samples):
                status, first, total = await conn.post(path, self.small_sse)
                self.r.count(t, status)
                firsts.append(first * 1000)
                totals.append(total * 1000)
        finally:
            conn.close()
        self.r.add(t.name, "sse_first_p50", pct(firsts, 50))
        self.r.add(t.name, "sse_total_p50", pct(totals, 50))

    async def large(self, t: Target) -> None:
        for mb, n in ((5, self.plan.large_5), (20, self.plan.large_20)):
            body = self.images[mb]
            conn = HttpConnection(t.port)
            pid = t.pid if t.name != "direct" else None
            before = proc_status(pid)["VmRSS"] if pid else 0
            reset = reset_peak_rss(pid) if pid else False
            lat = []
            try:
                for _ in range(n):
                    status, _, total = await conn.post(CHAT_PATH, body)
                    self.r.count(t, status)
                    lat.append(total * 1000)
            finally:
                conn.close()
            self.r.add(t.name, f"large{mb}_p50", pct(lat, 50))
            if pid:
                peak = proc_status(pid)["VmHWM"]
                if reset:
                    self.r.add(t.name, f"large{mb}_peak_mb", peak / 1024)
                    self.r.add(t.name, f"large{mb}_growth_mb", (peak - before) / 1024)

    async def ws_round_trip(self, t: Target) -> None:
        uri = f"ws://127.0.0.1:{t.port}{WS_PATH}"
        async with ws_connect(uri, compression=None, max_size=None) as ws:
            lat = []
            for i in range(10 + self.plan.ws_round_trips):
                t0 = time.perf_counter()
                await ws.send(self.ws_message)
                while '"response.completed"' not in str(await ws.recv()):
                    pass
                if i >= 10:
                    lat.append((time.perf_counter() - t0) * 1000)
        if t.name in AUDITED:
            self.r.requests[t.name] = self.r.requests.get(t.name, 0) + len(lat) + 10
        self.r.add(t.name, "ws_rtt_p50", pct(lat, 50))

    async def ws_session(self, t: Target) -> None:
        """One connection carrying ``ws_session`` response.create messages (each
        answered by three events), ``ws_window`` in flight; proxy RSS along the way."""
        uri = f"ws://127.0.0.1:{t.port}{WS_PATH}"
        n, window = self.plan.ws_session, self.plan.ws_window
        pid = t.pid if t.name != "direct" else None
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
        if t.name in AUDITED:
            self.r.requests[t.name] = self.r.requests.get(t.name, 0) + n
        self.r.add(t.name, "ws_session_s", elapsed)
        if rss:
            # From the first thousand on: start-up allocations are not growth.
            base = next(kb for sent, kb in rss if sent >= 1000)
            self.r.add(t.name, "ws_rss_end_mb", rss[-1][1] / 1024)
            self.r.add(t.name, "ws_growth_mb", (rss[-1][1] - base) / 1024)
            self.r.values.setdefault(t.name, {})["ws_rss_trace"] = [float(kb) for _, kb in rss]


# --------------------------------------------------------------------------- report


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


ROWS: list[tuple[str, str, int]] = [
    # (metric, label, digits)
    ("c1_p50", "small 2 KB chat, c=1: p50 latency (ms)", 2),
    ("c1_p99", "small 2 KB chat, c=1: p99 latency (ms)", 2),
    ("c16_p50", "small 2 KB chat, c=16: p50 latency (ms)", 2),
    ("c16_p99", "small 2 KB chat, c=16: p99 latency (ms)", 2),
    ("c16_rps", "small 2 KB chat, c=16: requests/s", 0),
    ("c16_cpu_us", "small 2 KB chat, c=16: proxy CPU per request (µs)", 0),
    ("sse_first_p50", "SSE first event, p50 (ms)", 2),
    ("large5_p50", "5 MB image body: p50 latency (ms)", 1),
    ("large5_peak_mb", "5 MB image body: proxy peak RSS (MB)", 1),
    ("large5_growth_mb", "5 MB image body: peak RSS above idle (MB)", 1),
    ("large20_p50", "20 MB image body: p50 latency (ms)", 1),
    ("large20_peak_mb", "20 MB image body: proxy peak RSS (MB)", 1),
    ("large20_growth_mb", "20 MB image body: peak RSS above idle (MB)", 1),
    ("ws_rtt_p50", "WebSocket response.create → completed, p50 (ms)", 2),
    ("ws_session_s", "WebSocket session of N messages: wall time (s)", 1),
    ("ws_rss_end_mb", "WebSocket session: proxy RSS at the end (MB)", 1),
    ("ws_growth_mb", "WebSocket session: RSS growth after the first 4,000 messages (MB)", 1),
]


def table(r: Results, plan: Plan) -> str:
    """Rows of cases, columns of targets, and modeltap's (and a candidate's) ratio
    to bare mitmdump."""
    cand = "candidate" in r.values
    cols = ["direct", "mitmdump", "modeltap"] + (["candidate"] if cand else [])
    ratios = ["modeltap"] + (["candidate"] if cand else [])
    lines = [
        "| case | " + " | ".join([*cols, *(f"{t} / mitmdump" for t in ratios)]) + " |",
        "|---" + "|---:" * (len(cols) + len(ratios)) + "|",
    ]

    def row(label: str, metric: str, digits: int, ref: str = "mitmdump") -> None:
        vals = {c: r.get(c, metric) for c in cols}
        vals["mitmdump"] = r.get(ref, metric)
        if all(v is None for v in vals.values()):
            return
        m = vals["mitmdump"]
        cells = [fmt(vals[c], digits) for c in cols]
        cells += [fmt(vals[t] / m if vals[t] is not None and m else None) for t in ratios]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    for metric, label, digits in ROWS:
        label = label.replace("N messages", f"{4 * plan.ws_session:,} messages")
        if metric == "sse_first_p50":
            # Bare mitmdump buffers whole responses; the fair reference streams.
            row(f"{label} — bare mitmdump (buffers the stream)", metric, digits)
            row(f"{label} — vs mitmdump `stream_large_bodies=1`", metric, digits, "mitmdump-stream")
            continue
        row(label, metric, digits)
    return "\n".join(lines)


def goals(r: Results) -> list[tuple[str, bool | None, str]]:
    """(goal, met, the figures behind it)."""
    g = r.get
    out: list[tuple[str, bool | None, str]] = []

    def ratio(metric: str) -> float | None:
        m, t = g("mitmdump", metric), g("modeltap", metric)
        return t / m if t is not None and m else None

    rp = [ratio("c1_p50"), ratio("c16_p50")]
    ok = all(x is not None and x <= 1.10 for x in rp) if all(rp) else None
    out.append(
        (
            "small requests: modeltap/mitmdump p50 <= 1.10",
            ok,
            f"c=1 {fmt(rp[0])}, c=16 {fmt(rp[1])}",
        )
    )
    rr = ratio("c16_rps")
    out.append(
        (
            "small requests: modeltap/mitmdump requests/s >= 0.90",
            None if rr is None else rr >= 0.90,
            f"{fmt(rr)}",
        )
    )
    s, t = g("mitmdump-stream", "sse_first_p50"), g("modeltap", "sse_first_p50")
    diff = t - s if s is not None and t is not None else None
    out.append(
        (
            "SSE first byte within 2 ms of mitmdump (streaming)",
            None if diff is None else diff <= 2.0,
            f"modeltap {fmt(t)} ms, mitmdump stream_large_bodies=1 {fmt(s)} ms, "
            f"difference {fmt(diff)} ms",
        )
    )
    for mb in (5, 20):
        lr = ratio(f"large{mb}_p50")
        out.append(
            (
                f"{mb} MB body: latency <= 1.25x mitmdump",
                None if lr is None else lr <= 1.25,
                f"{fmt(lr)}x",
            )
        )
        pm, pt = g("mitmdump", f"large{mb}_peak_mb"), g("modeltap", f"large{mb}_peak_mb")
        gm, gt = g("mitmdump", f"large{mb}_growth_mb"), g("modeltap", f"large{mb}_growth_mb")
        out.append(
            (
                f"{mb} MB body: peak RSS <= mitmdump's",
                None if pm is None or pt is None else pt <= pm,
                f"peak {fmt(pt, 1)} vs {fmt(pm, 1)} MB; above idle {fmt(gt, 1)} vs {fmt(gm, 1)} MB",
            )
        )
    gw = g("modeltap", "ws_growth_mb")
    out.append(
        (
            "WebSocket session memory flat (< 5 MB growth from message 4,000 to 10,000)",
            None if gw is None else gw < 5.0,
            f"modeltap {fmt(gw, 1)} MB, bare mitmdump {fmt(g('mitmdump', 'ws_growth_mb'), 1)} MB",
        )
    )
    return out


def machine() -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    from importlib.metadata import version

    return (
        f"{cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}, "
        f"Python {platform.python_version()}, mitmproxy {version('mitmproxy')}, "
        f"aiohttp {version('aiohttp')} upstream, websockets {version('websockets')}"
    )


def report(
    r: Results, plan: Plan, elapsed: float, audit_lines: dict[str, int | None], load: str
) -> str:
    parts = [
        f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {plan.rounds} rounds, "
        f"{elapsed:.0f} s. {machine()}. Load average (1 min) {load}: other work on the "
        "machine shows here, and in the absolute figures more than in the ratios.",
        "",
        table(r, plan),
        "",
        "| goal | status | figures |",
        "|---|---|---|",
    ]
    for goal, ok, figures in goals(r):
        status = "n/a" if ok is None else ("met" if ok else "**not met**")
        parts.append(f"| {goal} | {status} | {figures} |")
    parts.append("")
    errors = ", ".join(f"{k} {v}" for k, v in sorted(r.errors.items())) or "none"
    audits = "; ".join(
        f"{name} {audit_lines.get(name)} (requests and response.create messages sent "
        f"through it: {r.requests.get(name, 0)})"
        for name in AUDITED
        if name in r.values
    )
    parts.append(f"Non-200 answers: {errors}. Audit lines: {audits}.")
    return "\n".join(parts)


def update_readme(text: str) -> None:
    start, end = "<!-- bench:results:start -->", "<!-- bench:results:end -->"
    readme = README.read_text()
    if start not in readme or end not in readme:
        raise SystemExit(f"{README} has no {start} ... {end} block")
    head, rest = readme.split(start, 1)
    _, tail = rest.split(end, 1)
    README.write_text(f"{head}{start}\n{text}\n{end}{tail}")


# --------------------------------------------------------------------------- main


async def run_rounds(bench: Bench, targets: dict[str, Target], plan: Plan) -> None:
    http_targets = [
        targets[n] for n in ("direct", "mitmdump", "modeltap", "candidate") if n in targets
    ]
    sse_targets = [*http_targets, targets["mitmdump-stream"]]
    cases: list[tuple[str, Callable[[Target], Awaitable[None]], list[Target]]] = [
        ("small c=1", bench.small_c1, http_targets),
        ("small c=16", bench.small_c16, http_targets),
        ("SSE", bench.sse_first_byte, sse_targets),
        ("large bodies", bench.large, http_targets),
        ("WebSocket round trip", bench.ws_round_trip, http_targets),
    ]
    # The memory session first, in fresh processes: after the large bodies the
    # allocator has freed arenas to reuse, which would hide growth.
    t0 = time.perf_counter()
    for t in http_targets:
        await bench.ws_session(t)
    print(f"WebSocket sessions: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    for i in range(plan.rounds):
        t0 = time.perf_counter()
        for _, case, group in cases:
            k = i % len(group)
            for t in group[k:] + group[:k]:  # rotate the order each round
                await case(t)
        print(f"round {i + 1}/{plan.rounds}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def sink_micro(work: Path, lines: int = 20_000, rounds: int = 5) -> dict[str, float]:
    """Cost per audit line of the sink's guards (SPEC section 8: whole lines after
    a full disk, a new file when the old one is renamed or deleted).

    In this process, on the bench's temp dir: ``lines`` appends of a 600-byte
    line with one bare ``os.write`` on an ``O_APPEND`` descriptor (what the
    sink did before), against :class:`modeltap.sink.JsonlFile` (``stat`` of
    the path, ``flock``, ``fstat``, one-byte ``pread``, the write, unlock).
    Medians over ``rounds`` of the per-line mean, in microseconds.
    """
    from modeltap.sink import JsonlFile

    line = orjson.dumps({"pad": "x" * 580}) + b"\n"
    bare: list[float] = []
    guarded: list[float] = []
    for i in range(rounds):
        path = work / f"sink-bare-{i}.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        t0 = time.perf_counter()
        for _ in range(lines):
            os.write(fd, line)
        bare.append((time.perf_counter() - t0) / lines * 1e6)
        os.close(fd)
        jsonl = JsonlFile(work / f"sink-guarded-{i}.jsonl")
        t0 = time.perf_counter()
        for _ in range(lines):
            jsonl.append(line)
        guarded.append((time.perf_counter() - t0) / lines * 1e6)
        jsonl.close()
    b, g = statistics.median(bare), statistics.median(guarded)
    return {"bare_us": b, "guarded_us": g, "added_us": g - b}


def sink_line(figures: dict[str, float]) -> str:
    return (
        f"Sink guards (case `sink`, in-process): {figures['guarded_us']:.2f} µs per audit line "
        f"with the torn-line and renamed-file checks, {figures['bare_us']:.2f} µs for a bare "
        f"append: {figures['added_us']:.2f} µs added per line."
    )


def count_lines(path: Path) -> int | None:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def py_spy() -> str | None:
    found = BIN / "py-spy"
    return str(found) if found.exists() else shutil.which("py-spy")


async def profile_load(port: int, seconds: float, case: str) -> int:
    """Load for ``seconds``: small requests at c=16, or one WebSocket session
    pipelining response.create messages; returns how many were sent."""
    deadline = time.perf_counter() + seconds
    sent = 0
    body = small_chat_body()
    message = ws_create_message()

    async def worker() -> None:
        nonlocal sent
        conn = HttpConnection(port)
        try:
            while time.perf_counter() < deadline:
                await conn.post(CHAT_PATH, body)
                sent += 1
        finally:
            conn.close()

    async def ws_worker() -> None:
        nonlocal sent
        async with ws_connect(
            f"ws://127.0.0.1:{port}{WS_PATH}", compression=None, max_size=None
        ) as ws:
            while time.perf_counter() < deadline:
                for _ in range(25):
                    await ws.send(message)
                done = 0
                while done < 25:
                    if '"response.completed"' in str(await ws.recv()):
                        done += 1
                sent += 25

    if case == "ws":
        await ws_worker()
    else:
        await asyncio.gather(*(worker() for _ in range(16)))
    return sent


def summarize_profile(raw: Path, top: int = 30) -> str:
    """Self and inclusive samples per function from py-spy's collapsed stacks."""
    self_n: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        count = int(n)
        total += count
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        self_n[frames[-1]] = self_n.get(frames[-1], 0) + count
        for f in set(frames):
            incl[f] = incl.get(f, 0) + count
    out = [f"{total} samples", "", "inclusive, modeltap frames:"]
    mine = sorted(
        ((n, f) for f, n in incl.items() if "modeltap/" in f and "bench/" not in f),
        reverse=True,
    )
    out += [f"{100 * n / total:6.1f}%  {f}" for n, f in mine[:top]]
    out += ["", "self time, all frames:"]
    out += [
        f"{100 * n / total:6.1f}%  {f}"
        for n, f in sorted(((n, f) for f, n in self_n.items()), reverse=True)[:top]
    ]
    return "\n".join(out)


def profile(
    seconds: float, work: Path, procs: Processes, which: str, case: str, src: Path | None
) -> None:
    spy = py_spy()
    if spy is None:
        raise SystemExit("py-spy is not installed (pip install py-spy; it is not a dependency)")
    up = procs.upstream(10.0)
    if which == "modeltap":
        tap = procs.modeltap(up.port, work / "out", src)
    else:
        tap = procs.mitmdump(up.port)
    assert tap.pid is not None
    asyncio.run(profile_load(tap.port, 1.0, case))  # warm-up
    raw = work / "profile.txt"
    common = ["record", "--pid", str(tap.pid), "--duration", str(int(seconds)), "--rate", "250"]
    spy_proc = subprocess.Popen([spy, *common, "--format", "raw", "--output", str(raw)])
    time.sleep(1.0)  # let py-spy attach
    sent = asyncio.run(profile_load(tap.port, seconds, case))
    spy_proc.wait(seconds + 30)
    print(f"{sent} requests in {seconds:.0f} s ({sent / seconds:.0f}/s) while profiling")
    print(summarize_profile(raw))
    keep = Path(tempfile.gettempdir()) / f"modeltap-profile-{which}-{case}.txt"
    shutil.copy(raw, keep)
    print(f"collapsed stacks: {keep} (flamegraph.pl or speedscope read them)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="modeltap benchmarks (see bench/README.md)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a smoke run; do not quote it")
    parser.add_argument("--update-readme", action="store_true", help="write into bench/README.md")
    parser.add_argument("--json", type=Path, help="also write every per-round value here")
    parser.add_argument(
        "--ws-session",
        type=int,
        default=2_500,
        help="response.create messages in the memory session (each answered by 3 events, "
        "so 2,500 make 10,000 messages)",
    )
    parser.add_argument(
        "--modeltap-src",
        type=Path,
        help="run modeltap from this source dir (the one holding the modeltap package) "
        "instead of the installed one",
    )
    parser.add_argument(
        "--candidate-src",
        type=Path,
        help="also measure modeltap from this source dir (e.g. a patched copy), as 'candidate'",
    )
    parser.add_argument(
        "--profile", type=float, metavar="SECONDS", help="py-spy modeltap instead of benchmarking"
    )
    parser.add_argument("--profile-target", choices=("modeltap", "mitmdump"), default="modeltap")
    parser.add_argument("--profile-case", choices=("small", "ws"), default="small")
    parser.add_argument(
        "--sink-only", action="store_true", help="only the sink micro-case (a few seconds)"
    )
    args = parser.parse_args(argv)
    plan = Plan(rounds=args.rounds, ws_session=args.ws_session)
    if args.quick:
        plan = Plan(
            rounds=2,
            c1_requests=100,
            c16_requests=320,
            sse_samples=10,
            large_5=1,
            large_20=1,
            ws_round_trips=50,
            ws_session=1_000,
        )
    load0 = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="modeltap-bench-"))
    procs = Processes(work)
    started = time.perf_counter()
    try:
        if args.profile:
            profile(
                args.profile, work, procs, args.profile_target, args.profile_case, args.modeltap_src
            )
            return 0
        sink = sink_micro(work)
        if args.sink_only:
            print(sink_line(sink))
            return 0
        up = procs.upstream(10.0)
        out = work / "out"
        targets = {
            "direct": up,
            "mitmdump": procs.mitmdump(up.port),
            "mitmdump-stream": procs.mitmdump(
                up.port, "--set", "stream_large_bodies=1", name="mitmdump-stream"
            ),
            "modeltap": procs.modeltap(up.port, out, args.modeltap_src),
        }
        if args.candidate_src:
            targets["candidate"] = procs.modeltap(
                up.port, work / "candidate-out", args.candidate_src, name="candidate"
            )
        results = Results()
        asyncio.run(run_rounds(Bench(plan, results), targets, plan))
        audit_lines = {
            "modeltap": count_lines(out / "audit.jsonl"),
            "candidate": count_lines(work / "candidate-out" / "audit.jsonl"),
        }
    finally:
        procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    load = f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    text = report(results, plan, time.perf_counter() - started, audit_lines, load)
    text += "\n\n" + sink_line(sink)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(results.values, indent=1))
    if args.update_readme:
        update_readme(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
