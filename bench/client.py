"""The bench's client side: a minimal HTTP/1.1 client, event counting, /proc readings
and statistics. The same code drives every target, so its own cost adds equally
to every column."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import socket
import statistics
import time
from dataclasses import dataclass, field

# --------------------------------------------------------------------------- /proc


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
    """CPU time of a process and its live child processes so far (a proxy's
    exporter process is part of its cost): the scheduler's nanosecond count summed
    over their threads (``/proc/PID/task/*/schedstat``); ``/proc/PID/stat``'s 10 ms
    ticks are too coarse for a few hundred requests. Threads that ended are not
    counted; the proxies keep theirs (worker pools, export threads).
    ``BENCH_CPU_OWN_ONLY=1`` leaves the child processes out (the proxy process alone)."""
    if os.environ.get("BENCH_CPU_OWN_ONLY") == "1":
        return _own_cpu_seconds(pid)
    return _own_cpu_seconds(pid) + sum(cpu_seconds(child) for child in _children(pid))


def _children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (``/proc/PID/task/*/children``)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                found.extend(int(c) for c in f.read().split())
    return found


def _own_cpu_seconds(pid: int) -> float:
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
    except OSError:
        total = 0
    if total:
        return total / 1e9
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


# --------------------------------------------------------------------------- events


class EventCounter:
    """Counts whole events in a byte stream as it arrives: SSE events (a blank
    line, LF or CRLF) or AWS event-stream messages (length-prefixed frames)."""

    def __init__(self, framing: str) -> None:
        self.framing = framing
        self.tail = b""
        self.buf = bytearray()

    def feed(self, data: bytes) -> int:
        if self.framing == "eventstream":
            self.buf += data
            n, pos = 0, 0
            while len(self.buf) - pos >= 4:
                total = int.from_bytes(self.buf[pos : pos + 4], "big")
                if total < 16 or len(self.buf) - pos < total:
                    break
                pos += total
                n += 1
            del self.buf[:pos]
            return n
        joined = self.tail + data
        n = joined.count(b"\n\n") + joined.count(b"\r\n\r\n")
        n -= self.tail.count(b"\n\n")
        self.tail = joined[-3:]
        return n


@dataclass
class Reply:
    """One answer as the client saw it."""

    status: int
    #: Seconds to the first whole event (or to the whole body), and to the end.
    first: float
    total: float
    #: Arrival time (seconds from the request) of each whole event, when counted.
    events: list[float] = field(default_factory=list)


class HttpConnection:
    """A minimal keep-alive HTTP/1.1 client: one request at a time on one socket.

    It sends a whole request, reads a Content-Length, chunked or close-delimited
    body and, given a framing, notes when each event of a streamed body arrived.
    """

    def __init__(self, port: int, extra_headers: str = "") -> None:
        self.port = port
        self.extra_headers = extra_headers
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

    async def post(self, path: str, body: bytes, framing: str | None = None) -> Reply:
        """Send one POST and read the whole answer."""
        reader, writer = await self._open()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            "Content-Type: application/json\r\nAuthorization: Bearer sk-bench-not-a-key\r\n"
            f"{self.extra_headers}Content-Length: {len(body)}\r\n\r\n"
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
        counter = EventCounter(framing or "sse")
        events: list[float] = []
        if b"content-length" in headers:
            await reader.readexactly(int(headers[b"content-length"]))
        elif headers.get(b"transfer-encoding") == b"chunked":
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    while await reader.readuntil(b"\r\n") != b"\r\n":
                        pass
                    break
                data = (await reader.readexactly(size + 2))[:-2]
                n = counter.feed(data)
                if n:
                    t = time.perf_counter() - t0
                    events.extend([t] * n)
        else:
            await reader.read()
            self.close()
        t1 = time.perf_counter() - t0
        if headers.get(b"connection") == b"close":
            self.close()
        return Reply(status, events[0] if events else t1, t1, events)


# --------------------------------------------------------------------------- statistics


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def gaps(times: list[float]) -> list[float]:
    """Intervals between consecutive arrivals."""
    return [b - a for a, b in itertools.pairwise(times)]
