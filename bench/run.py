"""Measure modeltap's overhead against a direct connection and bare mitmdump.

One command, from the repository root with the project's venv::

    python bench/run.py                  # full run (~9 minutes), prints a markdown table
    python bench/run.py --update-readme  # ... and writes it into bench/README.md
    python bench/run.py --quick          # a smoke run (~2 minutes), figures not for quoting
    python bench/run.py --only telemetry,streams --candidate-src /tmp/patched/src
    python bench/run.py --profile 20 --profile-case stream   # py-spy the proxy under one load

Everything runs on loopback in subprocesses that this script starts and stops:
the bench upstream (``bench/upstream.py``, every wire of ``bench/wires.py``),
bare ``mitmdump`` in reverse mode, ``mitmdump -s bench/mitm_stream.py`` (the
streaming reference: it streams the responses modeltap streams), ``modeltap
run`` without export, with OTLP export to ``bench/otlp_sink.py`` (HTTP and
gRPC, healthy and slow) and to a port where nothing listens. The client is this
process (``bench/client.py``) and the ``websockets`` client.

Targets are measured in rounds; each round runs every case against every
target in a rotated order, so slow drifts of a noisy machine spread over all
of them. Figures are medians over rounds of each round's statistic; each row
of the table has its reference, the ratio and the goal beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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
from pathlib import Path

import orjson
from websockets.asyncio.client import connect as ws_connect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import mcp_call, startup  # noqa: E402
from bench.cases import Bench, Plan, Results, Target  # noqa: E402
from bench.client import (  # noqa: E402
    HttpConnection,
    cpu_seconds,
    free_port,
)
from bench.report import SIGNALS, TELEMETRY, report, update_readme  # noqa: E402
from bench.wires import WIRES, Wire, agent_turn_body, chat_body, image_chat_body  # noqa: E402

BENCH_DIR = ROOT / "bench"
BIN = Path(sys.executable).parent
CHAT_PATH = "/v1/chat/completions"
FAMILIES = ("small", "telemetry", "streams", "bodies", "ws", "startup", "mcp")
#: Seconds a slow collector takes to answer each export (the export timeout is 3 s).
SLOW_COLLECTOR_S = 2.0

__all__ = [
    "CHAT_PATH",
    "HttpConnection",
    "Processes",
    "cpu_seconds",
    "free_port",
    "small_chat_body",
]


def small_chat_body(stream: bool = False, size: int = 2048) -> bytes:
    """The 2 KB chat request (``bench/fleet.py`` uses it too)."""
    return chat_body(stream, size)


# --------------------------------------------------------------------------- processes


class Processes:
    """Starts the subprocesses and stops every one of them at the end."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.procs: list[subprocess.Popen[bytes]] = []

    def _env(self, src: Path | None = None) -> dict[str, str]:
        # No stray endpoint: a target exports only where the bench tells it to.
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env["PYTHONUNBUFFERED"] = "1"
        if src is not None:
            # Another source tree of modeltap (a snapshot, a patched copy) wins
            # over the editable install.
            env["PYTHONPATH"] = str(src)
        return env

    def _spawn_reporting(
        self, name: str, cmd: list[str], first: str
    ) -> tuple[subprocess.Popen[bytes], str]:
        log = self.work / f"{name}.log"
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log.open("wb"), env=self._env())
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if not line.startswith(first):
            raise RuntimeError(f"{name} did not start; see {log}")
        return proc, line

    def upstream(self, sse_pause_ms: float) -> Target:
        cmd = [
            sys.executable,
            str(BENCH_DIR / "upstream.py"),
            "--port",
            "0",
            "--sse-pause-ms",
            str(sse_pause_ms),
        ]
        proc, line = self._spawn_reporting("upstream", cmd, "PORT ")
        return Target("direct", int(line.split()[1]), proc)

    def otlp_sink(self, name: str, delay: float = 0.0) -> tuple[subprocess.Popen[bytes], int, int]:
        """A receiver process: (process, OTLP/HTTP port, OTLP/gRPC port)."""
        cmd = [sys.executable, str(BENCH_DIR / "otlp_sink.py"), "--delay", str(delay)]
        proc, line = self._spawn_reporting(name, cmd, "PORTS ")
        _, http, grpc = line.split()
        return proc, int(http), int(grpc)

    def proxy(
        self,
        name: str,
        cmd: list[str],
        port: int,
        src: Path | None = None,
        out: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Target:
        log = self.work / f"{name.replace(' ', '_')}.log"
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
            env={**self._env(src), **(env or {})},
        )
        self.procs.append(proc)
        target = Target(name, port, proc, str(out) if out else None)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 30:
            if proc.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", port), 0.2):
                    return target
            except OSError:
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
        self,
        up: int,
        out: Path,
        src: Path | None = None,
        name: str = "modeltap",
        otlp: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Target:
        port = free_port()
        cmd = modeltap_cmd(port, up, out)
        if otlp is not None:
            cmd += ["--otlp", otlp]
        return self.proxy(name, cmd, port, src, out, env)

    def stop(self, proc: subprocess.Popen[bytes]) -> bytes:
        """Stop one process; what it still had to say on stdout."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate(timeout=5)
        return out or b""

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


#: ``modeltap`` as a command of this interpreter, for any tree ``--modeltap-src``
#: names: the command line moved to ``modeltap.app.cli``, from ``modeltap.cli``.
MODELTAP_MAIN = (
    "-c",
    "import sys\n"
    "try:\n    from modeltap.app.cli import main\n"
    "except ModuleNotFoundError:\n    from modeltap.cli import main\n"
    "sys.exit(main())",
)


def modeltap_cmd(port: int, up: int, out: Path) -> list[str]:
    return [
        sys.executable,
        *MODELTAP_MAIN,
        "run",
        "--listen",
        f"127.0.0.1:{port}",
        "--upstream",
        f"http://127.0.0.1:{up}",
        "--out",
        str(out),
        "-q",
    ]


def known_wires(src: Path | None) -> list[Wire]:
    """The wires whose API the measured modeltap audits (asked in a subprocess, so
    that ``--modeltap-src`` is the one asked)."""
    code = "import json, modeltap.apis as a; print(json.dumps([m.NAME for m in a.APIS]))"
    env = {**os.environ, **({"PYTHONPATH": str(src)} if src else {})}
    names = json.loads(subprocess.check_output([sys.executable, "-c", code], env=env))
    return [w for w in WIRES if w.api in names]


class Setup:
    """The targets of one run: which processes, and which case runs against which."""

    def __init__(
        self, procs: Processes, work: Path, families: set[str], args: argparse.Namespace
    ) -> None:
        self.procs = procs
        self.work = work
        self.families = families
        self.candidate_src: Path | None = args.candidate_src
        self.modeltap_src: Path | None = args.modeltap_src
        self.up = procs.upstream(10.0)
        self.targets: dict[str, Target] = {"direct": self.up}
        self.sinks: dict[str, subprocess.Popen[bytes]] = {}
        self.down_port = free_port()  # nothing listens there: a dead collector
        self.targets["mitmdump"] = procs.mitmdump(self.up.port)
        if "streams" in families:
            self.targets["mitmdump-stream"] = procs.mitmdump(
                self.up.port, "-s", str(BENCH_DIR / "mitm_stream.py"), name="mitmdump-stream"
            )
        trees = [("modeltap", args.modeltap_src)]
        if args.candidate_src:
            trees.append(("candidate", args.candidate_src))
        for tree, src in trees:
            self.targets[tree] = procs.modeltap(self.up.port, work / f"{tree}-out", src, tree)
            if "telemetry" in families:
                for flavor in [*TELEMETRY, *SIGNALS]:
                    name = flavor if tree == "modeltap" else f"{tree} {flavor}"
                    self.targets[name] = procs.modeltap(
                        self.up.port,
                        work / f"{name.replace(' ', '-')}-out",
                        src,
                        name,
                        self._otlp(name, flavor),
                        SIGNALS[flavor][1] if flavor in SIGNALS else None,
                    )
        if "mcp" in families:
            self.targets.update(mcp_call.targets(procs, work, trees, MODELTAP_MAIN))

    def _otlp(self, name: str, flavor: str) -> str:
        state, protocol = flavor.split("-")
        if state == "dead":
            port = self.down_port
        else:
            proc, http, grpc = self.procs.otlp_sink(
                f"sink {name}", SLOW_COLLECTOR_S if state == "slow" else 0.0
            )
            self.sinks[name] = proc
            port = http if protocol == "http" else grpc
        return f"http://127.0.0.1:{port}" if protocol == "http" else f"grpc://127.0.0.1:{port}"

    def group(
        self, *names: str, telemetry: bool = False, signals: bool = False, stream_ref: bool = False
    ) -> list[Target]:
        """Targets by name (and their candidate twins), in a fixed order."""
        out = [self.targets[n] for n in names if n in self.targets]
        for tree in ("modeltap", "candidate"):
            if tree in self.targets:
                out.append(self.targets[tree])
            if telemetry:
                for flavor in [*TELEMETRY, *(SIGNALS if signals else ())]:
                    name = flavor if tree == "modeltap" else f"{tree} {flavor}"
                    if name in self.targets:
                        out.append(self.targets[name])
        if stream_ref and "mitmdump-stream" in self.targets:
            out.append(self.targets["mitmdump-stream"])
        return out

    def fresh(self) -> list[Target]:
        """New bare mitmdump and modeltap processes (and a candidate), named as the
        long-running ones so that their figures land in the same columns."""
        out = [self.procs.mitmdump(self.up.port)]
        trees = [("modeltap", self.modeltap_src), ("candidate", self.candidate_src)]
        for tree, src in trees:
            if tree in self.targets:
                out.append(
                    self.procs.modeltap(self.up.port, self.work / f"{tree}-fresh", src, tree)
                )
        return out

    def received(self) -> dict[str, dict[str, int]]:
        """What each OTLP receiver got (stops them)."""
        out = {}
        for name, proc in self.sinks.items():
            text = self.procs.stop(proc).decode(errors="replace")
            found = re.search(r"^RECEIVED (.*)$", text, re.M)
            out[name] = json.loads(found.group(1)) if found else {}
        return out


Case = tuple[str, Callable[[Target], Awaitable[None]], list[Target]]


def cases(bench: Bench, s: Setup, wires: list[Wire]) -> list[Case]:
    f = s.families
    out: list[Case] = []
    chat = next(w for w in WIRES if w.name == "chat")
    if "small" in f or "telemetry" in f:
        for w in wires if "small" in f else [chat]:
            telemetry = w.name == "chat" and "telemetry" in f
            group = s.group("direct", "mitmdump", telemetry=telemetry)
            out.append((f"{w.name} c=1", lambda t, w=w: bench.small_c1(t, w), group))
            if w.name == "chat":
                group = s.group("direct", "mitmdump", telemetry=telemetry, signals=True)
                out.append(("chat c=16", lambda t: bench.small_c16(t, chat), group))
    if "streams" in f:
        for w in wires:
            if w.transport == "http":
                out.append(
                    (
                        f"{w.name} first event",
                        lambda t, w=w: bench.first_event(t, w),
                        s.group("direct", stream_ref=True),
                    )
                )
            out.append(
                (
                    f"{w.name} long stream",
                    lambda t, w=w: bench.long_stream(t, w),
                    s.group("direct", stream_ref=True),
                )
            )
    if "mcp" in f:
        out += mcp_call.cases(bench, s.targets)
    if "bodies" in f:
        out.append(("large bodies", bench.large, s.group("direct", "mitmdump")))
        out.append(("agent turn", bench.agent_turn, s.group("direct", "mitmdump")))
    return out


async def run_rounds(
    bench: Bench, s: Setup, wires: list[Wire], plan: Plan, src: Path | None
) -> None:
    if "ws" in s.families:
        # The memory session first, in fresh processes: after the large bodies the
        # allocator has freed arenas to reuse, which would hide growth.
        t0 = time.perf_counter()
        for t in s.group("direct", "mitmdump"):
            await bench.ws_session(t)
        print(f"WebSocket sessions: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if "bodies" in s.families:
        # Peak RSS of the large bodies in processes of their own that served
        # nothing else: any earlier large body leaves room in the allocator.
        for t in s.fresh():
            await bench.large_memory(t)
            assert t.proc is not None
            s.procs.stop(t.proc)
    todo = cases(bench, s, wires)
    for i in range(plan.rounds):
        t0 = time.perf_counter()
        for name, case, group in todo:
            tc = time.perf_counter()
            k = i % len(group)
            for t in group[k:] + group[:k]:  # rotate the order each round
                await case(t)
            if i == 0:
                print(f"  {name}: {time.perf_counter() - tc:.1f} s", file=sys.stderr)
        if "startup" in s.families:
            tc = time.perf_counter()
            measure_startup(bench.r, s, plan, src, i)
            if i == 0:
                print(f"  start-up: {time.perf_counter() - tc:.1f} s", file=sys.stderr)
        print(f"round {i + 1}/{plan.rounds}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def measure_startup(r: Results, s: Setup, plan: Plan, src: Path | None, i: int) -> None:
    up = s.up.port
    runs = [
        ("modeltap", lambda p: modeltap_cmd(p, up, s.work / f"startup-{i}"), src),
        (
            "mitmdump",
            lambda p: [
                str(BIN / "mitmdump"),
                "--mode",
                f"reverse:http://127.0.0.1:{up}",
                "-p",
                str(p),
                "--listen-host",
                "127.0.0.1",
                "-q",
            ],
            None,
        ),
    ]
    if "candidate" in s.targets:
        runs.append(
            ("candidate", lambda p: modeltap_cmd(p, up, s.work / f"startup-c{i}"), s.candidate_src)
        )
    k = i % len(runs)
    for name, cmd, tree in runs[k:] + runs[:k]:
        port = free_port()
        r.add(
            name,
            "startup.listen_s",
            startup.time_to_listen(cmd(port), port, startup.child_env(tree)),
        )
    for name, tree in [("modeltap", src)] + (
        [("candidate", s.candidate_src)] if "candidate" in s.targets else []
    ):
        cost = startup.fixture_cost(plan.fixture_tests, startup.child_env(tree))
        r.add(name, "fixture.per_test_s", cost["per_test_s"])
        r.add(name, "fixture.first_s", cost["first_s"])


def count_lines(path: Path) -> int | None:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def checks(s: Setup, r: Results, received: dict[str, dict[str, int]]) -> list[str]:
    """Audit lines against requests sent, and what the OTLP receivers got."""
    out = []
    audits = []
    for name, t in s.targets.items():
        if t.audited and t.out:
            audits.append(
                f"{name} {count_lines(Path(t.out) / 'audit.jsonl')} of {r.requests.get(name, 0)}"
            )
    if audits:
        out.append(
            "Audit lines written / requests and response.create messages sent: "
            + ", ".join(audits)
            + "."
        )
    if received:
        got = "; ".join(
            f"{name}: " + ", ".join(f"{v} {k}" for k, v in sorted(n.items()))
            for name, n in received.items()
        )
        out.append(f"OTLP received: {got}.")
    return out


# --------------------------------------------------------------------------- sink micro-case


def sink_micro(work: Path, lines: int = 20_000, rounds: int = 5) -> dict[str, float]:
    """Cost per audit line of the sink's guards (SPEC section 8: whole lines after
    a full disk, a new file when the old one is renamed or deleted).

    In this process, on the bench's temp dir: ``lines`` appends of a 600-byte
    line with one bare ``os.write`` on an ``O_APPEND`` descriptor, against
    :class:`modeltap.evidence.sink.JsonlFile`. Medians over ``rounds`` of the per-line
    mean, in microseconds.
    """
    from modeltap.evidence.sink import JsonlFile

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
        f"Sink guards (in-process): {figures['guarded_us']:.2f} µs per audit line "
        f"with the torn-line and renamed-file checks, {figures['bare_us']:.2f} µs for a bare "
        f"append: {figures['added_us']:.2f} µs added per line."
    )


# --------------------------------------------------------------------------- profile

PROFILE_CASES = ("small", "ws", "stream", "ws-stream", "large", "agent", "otlp-http", "otlp-grpc")


async def profile_load(port: int, seconds: float, case: str, wire: Wire) -> int:
    """Load for ``seconds``; returns how many requests (or messages) were sent."""
    deadline = time.perf_counter() + seconds
    sent = 0

    async def worker(path: str, body: bytes, framing: str | None = None) -> None:
        nonlocal sent
        conn = HttpConnection(port)
        try:
            while time.perf_counter() < deadline:
                await conn.post(path, body, framing)
                sent += 1
        finally:
            conn.close()

    async def ws_worker(query: str) -> None:
        nonlocal sent
        from bench.wires import ws_create_message

        message = ws_create_message()
        async with ws_connect(
            f"ws://127.0.0.1:{port}/v1/responses{query}", compression=None, max_size=None
        ) as ws:
            while time.perf_counter() < deadline:
                for _ in range(25 if not query else 1):
                    await ws.send(message)
                done = 0
                while done < (25 if not query else 1):
                    if '"response.completed"' in str(await ws.recv()):
                        done += 1
                sent += 25 if not query else 1

    if case == "ws":
        await ws_worker("")
    elif case == "ws-stream":
        await ws_worker("?n=1998")
    elif case == "stream":
        sep = "&" if "?" in wire.stream_path else "?"
        await worker(f"{wire.stream_path}{sep}sse=1&n=10000&pause=0", wire.body(True), wire.framing)
    elif case == "large":
        await worker(CHAT_PATH, image_chat_body(20 * 1024 * 1024))
    elif case == "agent":
        await worker(CHAT_PATH, agent_turn_body())
    else:
        await asyncio.gather(*(worker(wire.path, wire.body(False)) for _ in range(16)))
    return sent


#: Frames of modeltap's that only wrap mitmproxy's own code (its time is mitmproxy's).
_WRAPPERS = ("mitm_http1.py", "request_limit.py", "cli.py", "proxy.py")
#: Leaf frames of a thread that waits (py-spy samples some waits as active).
_IDLE = ("Condition.wait", "EpollSelector.select", "_worker (concurrent", "Event.wait")


def _area(frames: list[str]) -> str:
    """Where one sample's time goes, for the README's "top three costs"."""
    leaf = frames[-1]
    if any("opentelemetry" in f or "/grpc/" in f for f in frames) and not any(
        "modeltap/" in f for f in frames
    ):
        return "OpenTelemetry export threads (encode, send)"
    if "_hash_pieces" in leaf or "sha256_hex" in leaf or "_WorkItem.run" in leaf:
        return "worker thread: SHA-256 of the body"
    owner = next(
        (f for f in reversed(frames) if "modeltap/" in f and not any(w in f for w in _WRAPPERS)),
        None,
    )
    if owner is not None:
        module, function = owner.split(" (", 1)[1], owner.split(" (", 1)[0]
        if "telemetry/" in module or "addons/spans" in module:
            return "telemetry: spans, log records, metrics (built, encoded, sent)"
        if "cost.py" in module:
            return "modeltap: cost estimate"
        if (
            module.startswith(("modeltap/evidence/sink.py", "modeltap/evidence/records.py"))
            or "write_" in function
        ):
            return "modeltap: audit and event lines (build, write)"
        if (
            any(
                m in module
                for m in ("observe.py", "sse.py", "ws.py", "eventstream.py", "bedrock.py")
            )
            or "Observer" in function
            or "feed" in function
        ):
            return "modeltap: observing responses and streams (decode, parse events)"
        if any(m in module for m in ("gate.py", "json_body.py", "fields.py", "message_parts.py")):
            return "modeltap: request audit (parse, checks)"
        if "audit" in function.lower():
            return "modeltap: request audit (parse, checks)"
        return f"modeltap: other ({module.rsplit('/', 1)[-1].rstrip(')')})"
    if "SelectorSocketTransport.write" in leaf or "_write_sendmsg" in leaf:
        return "socket writes (send system calls)"
    if "_read_ready" in leaf:
        return "socket reads"
    if any(x in leaf for x in ("AddonManager", "typecheck", "traverse", "contextlib")):
        return "mitmproxy: hook dispatch"
    if "ReceiveBuffer" in leaf or "h11" in leaf:
        return "mitmproxy: HTTP/1 parsing and buffers"
    if "wsproto" in leaf or "websocket" in leaf.lower():
        return "mitmproxy: WebSocket frames"
    return "mitmproxy: proxy layers and event loop"


def areas(raw: Path) -> list[tuple[float, str]]:
    """Share of the busy samples per area (idle waits left out), largest first."""
    counts: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";") if f]
        if frames and frames[0].startswith("thread "):
            frames = frames[1:]
        if not frames or any(x in frames[-1] for x in _IDLE):
            continue
        total += int(n)
        area = _area(frames)
        counts[area] = counts.get(area, 0) + int(n)
    return sorted(((100 * n / max(1, total), a) for a, n in counts.items()), reverse=True)


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
    out = [f"{total} samples", "", "by area (busy samples; the README's top costs):"]
    out += [f"{share:6.1f}%  {area}" for share, area in areas(raw)[:8]]
    out += ["", "inclusive, modeltap frames:"]
    mine = sorted(
        ((n, f) for f, n in incl.items() if "modeltap/" in f and "bench/" not in f), reverse=True
    )
    out += [f"{100 * n / total:6.1f}%  {f}" for n, f in mine[:top]]
    out += ["", "self time, all frames:"]
    out += [
        f"{100 * n / total:6.1f}%  {f}"
        for n, f in sorted(((n, f) for f, n in self_n.items()), reverse=True)[:top]
    ]
    return "\n".join(out)


def profile(seconds: float, work: Path, procs: Processes, args: argparse.Namespace) -> None:
    spy = BIN / "py-spy" if (BIN / "py-spy").exists() else shutil.which("py-spy")
    if spy is None:
        raise SystemExit("py-spy is not installed (pip install py-spy; it is not a dependency)")
    case, which = args.profile_case, args.profile_target
    wire = next(w for w in WIRES if w.name == args.profile_wire)
    up = procs.upstream(10.0)
    if which == "mitmdump":
        extra = ["-s", str(BENCH_DIR / "mitm_stream.py")] if "stream" in case else []
        tap = procs.mitmdump(up.port, *extra)
    else:
        otlp = None
        if case.startswith("otlp-"):
            _, http, grpc = procs.otlp_sink("sink")
            otlp = f"http://127.0.0.1:{http}" if case == "otlp-http" else f"grpc://127.0.0.1:{grpc}"
        tap = procs.modeltap(up.port, work / "out", args.modeltap_src, otlp=otlp)
    assert tap.pid is not None
    asyncio.run(profile_load(tap.port, 1.0, case, wire))  # warm-up
    raw = work / "profile.txt"
    common = ["record", "--pid", str(tap.pid), "--duration", str(int(seconds)), "--rate", "250"]
    if case.startswith("otlp-"):
        common.append("--threads")
    spy_proc = subprocess.Popen([str(spy), *common, "--format", "raw", "--output", str(raw)])
    time.sleep(1.0)  # let py-spy attach
    cpu0 = cpu_seconds(tap.pid)
    sent = asyncio.run(profile_load(tap.port, seconds, case, wire))
    cpu = cpu_seconds(tap.pid) - cpu0
    spy_proc.wait(seconds + 30)
    print(
        f"{sent} sent in {seconds:.0f} s ({sent / seconds:.1f}/s), "
        f"proxy CPU {cpu / max(1, sent) * 1e6:.0f} µs each"
    )
    print(summarize_profile(raw))
    keep = Path(tempfile.gettempdir()) / f"modeltap-profile-{which}-{case}.txt"
    shutil.copy(raw, keep)
    print(f"collapsed stacks: {keep} (flamegraph.pl or speedscope read them)")


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="modeltap benchmarks (see bench/README.md)")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--quick", action="store_true", help="a smoke run; do not quote it")
    parser.add_argument("--only", help=f"comma-separated case families: {', '.join(FAMILIES)}")
    parser.add_argument(
        "--wires", help="comma-separated wires (default: every wire modeltap audits)"
    )
    parser.add_argument("--update-readme", action="store_true", help="write into bench/README.md")
    parser.add_argument("--json", type=Path, help="also write every per-round value here")
    parser.add_argument(
        "--ws-session",
        type=int,
        help="response.create messages in the memory session (each answered by 3 events)",
    )
    parser.add_argument(
        "--modeltap-src",
        type=Path,
        help="run modeltap from this source dir instead of the installed one",
    )
    parser.add_argument(
        "--candidate-src",
        type=Path,
        help="also measure modeltap from this source dir, as 'candidate'",
    )
    parser.add_argument(
        "--profile", type=float, metavar="SECONDS", help="py-spy the proxy instead of benchmarking"
    )
    parser.add_argument("--profile-target", choices=("modeltap", "mitmdump"), default="modeltap")
    parser.add_argument("--profile-case", choices=PROFILE_CASES, default="small")
    parser.add_argument("--profile-wire", choices=[w.name for w in WIRES], default="chat")
    parser.add_argument(
        "--sink-only", action="store_true", help="only the sink micro-case (a few seconds)"
    )
    args = parser.parse_args(argv)
    plan = Plan.quick() if args.quick else Plan()
    if args.rounds:
        plan.rounds = args.rounds
    if args.ws_session:
        plan.ws_session = args.ws_session
    families = set(args.only.split(",")) if args.only else set(FAMILIES)
    if families - set(FAMILIES):
        parser.error(f"unknown case families: {', '.join(sorted(families - set(FAMILIES)))}")
    wires = known_wires(args.modeltap_src)
    skipped = [w.name for w in WIRES if w not in wires]
    if args.candidate_src:
        cand = known_wires(args.candidate_src)
        wires = [w for w in wires if w in cand]
    if args.wires:
        wires = [w for w in wires if w.name in args.wires.split(",")]
    load0 = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="modeltap-bench-"))
    procs = Processes(work)
    started = time.perf_counter()
    received: dict[str, dict[str, int]] = {}
    try:
        if args.profile:
            profile(args.profile, work, procs, args)
            return 0
        sink = sink_micro(work)
        if args.sink_only:
            print(sink_line(sink))
            return 0
        setup = Setup(procs, work, families, args)
        results = Results()
        asyncio.run(run_rounds(Bench(plan, results), setup, wires, plan, args.modeltap_src))
        received = setup.received()
        lines = checks(setup, results, received)
    finally:
        procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    load = f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    text, missed = report(
        results, plan, wires, families, time.perf_counter() - started, lines, load, skipped
    )
    text += "\n\n" + sink_line(sink)
    print(text)
    if missed:
        print(f"\n{len(missed)} goals not met: " + "; ".join(missed), file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results.values, indent=1))
    if args.update_readme:
        update_readme(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
