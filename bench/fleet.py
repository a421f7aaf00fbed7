"""Sizing figures for docs/FLEET.md: one proxy's lines, bytes and CPU with OTLP log export.

From the repository root, with the project's venv::

    python bench/fleet.py                 # ~2 minutes; prints a markdown table
    python bench/fleet.py --requests 2000 --rounds 1    # a quick look, not for quoting

Runs on loopback only, in processes it starts and stops: the bench upstream
(``bench/upstream.py``, chat JSON), ``modeltap run`` (a subprocess, as in
production) and, in this process, the test suite's real OTLP receiver
(``tests/otlp_receiver.py``: OTLP/HTTP protobuf, decoded as a Collector would).
Each round drives ``--requests`` chat requests of 2 KB (system message, user
message, one tool; bench/run.py's small case) over 16 keep-alive connections,
spread over 25 sessions, against three set-ups in a rotated order:

- ``no OTLP``: files only;
- ``spans``: spans exported, log records off (``OTEL_LOGS_EXPORTER=none``);
- ``spans + logs``: spans and a log record per line (the default with an endpoint);
- ``collector down``: the same, pointed at a port where connections are refused.

Reported per set-up (medians over rounds): requests/s, the proxy's CPU time per
request (``/proc/PID/stat``), lines and local bytes per request, and for log
export the OTLP bytes per record as they arrived, records received and dropped.
Then, from the records received, an estimate of ClickHouse storage per million
requests: the rows the Collector's ``clickhouse`` exporter would insert into
``otel_logs`` (its column set), each column compressed with zstd level 1 in
blocks of 8,192 rows (the table's ``CODEC(ZSTD(1))`` and index granularity).
That is an estimate from measured data, not a ClickHouse measurement: no
ClickHouse runs here. ``pip install zstandard`` for it (not a project
dependency); without it the estimate is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run import (  # noqa: E402
    CHAT_PATH,
    HttpConnection,
    Processes,
    cpu_seconds,
    free_port,
    modeltap_cmd,
    small_chat_body,
)
from tests.otlp_receiver import HttpReceiver, ReceivedLog, closed_endpoint  # noqa: E402

CONNECTIONS = 16
SESSIONS = 25
SETUPS = ("no OTLP", "spans", "spans + logs", "collector down")
FILES = ("audit.jsonl", "events.jsonl", "sessions.jsonl")


class SessionConnection(HttpConnection):
    """The bench client, with the session header modeltap groups requests by."""

    def __init__(self, port: int, session: str) -> None:
        super().__init__(port)
        self.session = session

    async def post(self, path: str, body: bytes) -> tuple[int, float, float]:
        reader, writer = await self._open()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            "Content-Type: application/json\r\nAuthorization: Bearer sk-bench-not-a-key\r\n"
            f"x-modeltap-session: {self.session}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        t0 = time.perf_counter()
        writer.write(head + body)
        raw_head = await reader.readuntil(b"\r\n\r\n")
        status = int(raw_head.split(b" ", 2)[1])
        length = 0
        for line in raw_head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == b"content-length":
                length = int(value)
        await reader.readexactly(length)
        t1 = time.perf_counter()
        return status, t1 - t0, t1 - t0


async def drive(port: int, requests: int, body: bytes) -> None:
    """``requests`` POSTs over 16 connections, each connection one session at a time."""
    statuses: list[int] = []

    async def worker(index: int, count: int) -> None:
        conns = [SessionConnection(port, f"job-{s}") for s in range(index, SESSIONS, CONNECTIONS)]
        for i in range(count):
            conn = conns[i % len(conns)]
            status, _, _ = await conn.post(CHAT_PATH, body)
            statuses.append(status)
        for conn in conns:
            conn.close()

    share = [requests // CONNECTIONS + (i < requests % CONNECTIONS) for i in range(CONNECTIONS)]
    await asyncio.gather(*(worker(i, n) for i, n in enumerate(share)))
    bad = [s for s in statuses if s != 200]
    if bad or len(statuses) != requests:
        raise RuntimeError(f"{len(bad)} answers were not 200 (of {len(statuses)})")


class FleetProcesses(Processes):
    """bench.run's processes, with the OTLP variables of one set-up."""

    def __init__(self, work: Path, otel: dict[str, str]) -> None:
        super().__init__(work)
        self.otel = otel

    def _env(self, src: Path | None = None) -> dict[str, str]:
        return super()._env(src) | self.otel


def local_lines(out: Path) -> list[bytes]:
    lines: list[bytes] = []
    for name in FILES:
        path = out / name
        if path.exists():
            lines += path.read_bytes().splitlines()
    return lines


def one_run(
    setup: str,
    up: int,
    work: Path,
    requests: int,
    receiver: HttpReceiver | None,
    down: int | None = None,
) -> dict[str, float]:
    otel: dict[str, str] = {}
    if receiver is not None:
        otel["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
        if setup == "spans":
            otel["OTEL_LOGS_EXPORTER"] = "none"
    if down is not None:
        otel["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{down}"
    out = work / f"out-{setup.replace(' ', '')}-{time.monotonic_ns()}"
    procs = FleetProcesses(work, otel)
    body = small_chat_body()
    try:
        port = free_port()
        target = procs.proxy(
            "modeltap",
            modeltap_cmd(port, up, out),
            port,
        )
        assert target.pid is not None
        asyncio.run(drive(port, 200, body))  # warm up
        before_logs = len(receiver.logs) if receiver is not None else 0
        cpu0, t0 = cpu_seconds(target.pid), time.perf_counter()
        asyncio.run(drive(port, requests, body))
        wall, cpu = time.perf_counter() - t0, cpu_seconds(target.pid) - cpu0
    finally:
        procs.stop_all()
    lines = local_lines(out)
    figures = {
        "req_per_s": requests / wall,
        "cpu_ms_per_req": cpu / requests * 1000,
        "lines": len(lines),
        "lines_per_req": len(lines) / (requests + 200),
        "local_bytes_per_req": sum(len(line) + 1 for line in lines) / (requests + 200),
        "lines_per_s": (len(lines) * requests / (requests + 200)) / wall,
    }
    if receiver is not None and setup == "spans + logs":
        received = [log for log in receiver.logs[before_logs:]]
        figures["received"] = len(received)
        figures["dropped"] = len(lines) - len(received)
    return figures


def clickhouse_estimate(logs: list[ReceivedLog]) -> dict[str, float]:
    """Compressed bytes per row of ``otel_logs``, column by column (see the module docstring)."""
    import zstandard

    compressor = zstandard.ZstdCompressor(level=1)
    columns: dict[str, list[bytes]] = {
        name: []
        for name in (
            "Timestamp",
            "TraceId",
            "SpanId",
            "SeverityText",
            "Body",
            "ResourceAttributes",
            "ScopeName",
            "LogAttributes",
        )
    }
    for log in logs:
        columns["Timestamp"].append(log.time_ns.to_bytes(8, "little"))
        columns["TraceId"].append((log.trace_id or "").encode())
        columns["SpanId"].append((log.span_id or "").encode())
        columns["SeverityText"].append(log.severity_text.encode())
        columns["Body"].append(log.body.encode())
        columns["ResourceAttributes"].append(orjson.dumps(log.resource))
        columns["ScopeName"].append(log.scope.encode())
        columns["LogAttributes"].append(
            orjson.dumps({k: str(v) for k, v in log.attributes.items()})
        )
    raw = sum(len(v) for values in columns.values() for v in values)
    compressed = 0
    for values in columns.values():
        for start in range(0, len(values), 8192):
            compressed += len(compressor.compress(b"".join(values[start : start + 8192])))
    # The fixed-width columns (TraceFlags, SeverityNumber, TimestampTime) add a
    # few bytes before compression and next to nothing after.
    rows = len(logs)
    return {"raw_per_row": raw / rows, "zstd_per_row": compressed / rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    started = time.monotonic()
    results: dict[str, list[dict[str, float]]] = {setup: [] for setup in SETUPS}
    last_logs: list[ReceivedLog] = []
    with tempfile.TemporaryDirectory(prefix="modeltap-fleet-") as tmp:
        work = Path(tmp)
        base = Processes(work)
        try:
            up = base.upstream(sse_pause_ms=10)
            for round_ in range(args.rounds):
                order = SETUPS[round_ % len(SETUPS) :] + SETUPS[: round_ % len(SETUPS)]
                for setup in order:
                    with HttpReceiver() as receiver, closed_endpoint() as down:
                        figures = one_run(
                            setup,
                            up.port,
                            work,
                            args.requests,
                            None if setup in ("no OTLP", "collector down") else receiver,
                            down if setup == "collector down" else None,
                        )
                        if setup == "spans + logs":
                            last_logs = receiver.logs
                            figures["otlp_bytes_per_record"] = receiver.log_bytes / len(last_logs)
                    results[setup].append(figures)
        finally:
            base.stop_all()

    def med(setup: str, key: str) -> float:
        values = [r[key] for r in results[setup] if key in r]
        return statistics.median(values) if values else float("nan")

    machine = platform.processor() or platform.machine()
    print(
        f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {args.rounds} rounds of "
        f"{args.requests} requests, {time.monotonic() - started:.0f} s. {machine}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}. Load average "
        f"{os.getloadavg()[0]:.1f} at the end.\n"
    )
    print(
        "| set-up | requests/s | CPU ms/request | lines/request | local bytes/request | lines/s |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for setup in SETUPS:
        print(
            f"| {setup} | {med(setup, 'req_per_s'):.0f} | {med(setup, 'cpu_ms_per_req'):.2f} | "
            f"{med(setup, 'lines_per_req'):.2f} | {med(setup, 'local_bytes_per_req'):.0f} | "
            f"{med(setup, 'lines_per_s'):.0f} |"
        )
    drops = [r["dropped"] for r in results["spans + logs"]]
    print(
        f"\nLog records: {med('spans + logs', 'otlp_bytes_per_record'):.0f} OTLP/HTTP bytes per "
        f"record as received (protobuf, uncompressed); dropped per round: {drops}."
    )
    if last_logs:
        try:
            estimate = clickhouse_estimate(last_logs)
        except ImportError:
            print("ClickHouse estimate skipped: pip install zstandard")
            return
        per_req = med("spans + logs", "lines_per_req")
        print(
            f"otel_logs estimate: {estimate['raw_per_row']:.0f} bytes per row raw, "
            f"{estimate['zstd_per_row']:.0f} compressed (zstd 1, 8,192-row blocks); "
            f"{estimate['zstd_per_row'] * per_req:.0f} bytes per request, "
            f"{estimate['zstd_per_row'] * per_req * 1e6 / 2**20:.0f} MiB per million requests."
        )


if __name__ == "__main__":
    main()
