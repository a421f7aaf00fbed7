"""Memory of one long WebSocket Responses session: modeltap against bare mitmdump.

SPEC section 8 promises that long WebSocket sessions do not pile up messages
(mitmproxy keeps every message of a flow unless told otherwise). This sends
10,000 ``response.create`` messages over ONE connection, waits for each
``response.completed``, and samples the proxy process's resident memory
(``VmRSS`` of ``/proc/PID/status``) every 1,000 messages. The same run against
bare ``mitmdump --mode reverse:URL`` shows what an unbounded flow costs.

Run from the repository root with the project's venv (Linux only, for /proc)::

    PYTHONPATH=. python bench/ws_memory.py             # 10,000 messages
    PYTHONPATH=. python bench/ws_memory.py -n 2000     # a quicker look

Everything runs on loopback: the stub upstream (``tests.upstream.Upstream``)
in a thread of this process, each proxy in a subprocess this script starts and
always stops.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
from bench.run import MODELTAP_MAIN
from tests.upstream import Upstream
from websockets.sync.client import connect

SAMPLE_EVERY = 1_000
# A small but realistic turn: instructions, a tool, one user message.
MESSAGE = orjson.dumps(
    {
        "type": "response.create",
        "model": "gpt-5",
        "instructions": "You are a careful agent. " * 20,
        "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
        "input": [{"role": "user", "content": "Count the files in the repository."}],
    }
).decode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB, from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
            raise RuntimeError(
                f"{proc.args} exited with {proc.returncode} before listening\n{tail}"
            )
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listened on port {port} within {timeout} s")


@contextlib.contextmanager
def running(cmd: list[str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``cmd`` (a proxy listening on ``port``) and always stop it."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_listening(port, proc)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # modeltap flushes its files on Ctrl-C
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc.stderr is not None:
            proc.stderr.close()


def one_session(url: str, pid: int, messages: int, upstream: Upstream) -> list[tuple[int, int]]:
    """Send ``messages`` creates over one connection; (message count, RSS KiB) samples."""
    samples = []
    with connect(url, open_timeout=10, close_timeout=10, max_size=None) as ws:
        for n in range(1, messages + 1):
            ws.send(MESSAGE)
            while True:
                event = orjson.loads(ws.recv(timeout=30))
                if event["type"] == "response.completed":
                    break
                if event["type"] == "error":
                    raise RuntimeError(f"message {n} was answered with an error event")
            if n % SAMPLE_EVERY == 0:
                samples.append((n, rss_kib(pid)))
                # The stub keeps what it received; that is this process, not the
                # proxy, but keep it small anyway.
                upstream.ws_received.clear()
    return samples


def measure_modeltap(upstream: Upstream, messages: int) -> list[tuple[int, int]]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="modeltap-ws-bench-") as out:
        cmd = [
            sys.executable,
            *MODELTAP_MAIN,
            "run",
            "--listen",
            f"127.0.0.1:{port}",
            "--route",
            f"stub={upstream.url}",
            "--out",
            out,
            "-q",
        ]
        with running(cmd, port) as proc:
            url = f"ws://127.0.0.1:{port}/stub/v1/responses"
            samples = one_session(url, proc.pid, messages, upstream)
        audited = sum(1 for _ in (Path(out) / "audit.jsonl").open("rb"))
        if audited != messages:
            raise RuntimeError(f"modeltap audited {audited} of {messages} messages")
    return samples


def measure_mitmdump(upstream: Upstream, messages: int) -> list[tuple[int, int]]:
    mitmdump = shutil.which("mitmdump", path=str(Path(sys.executable).parent)) or "mitmdump"
    port = free_port()
    cmd = [mitmdump, "--mode", f"reverse:{upstream.url}", "-p", str(port), "-q"]
    with running(cmd, port) as proc:
        return one_session(f"ws://127.0.0.1:{port}/v1/responses", proc.pid, messages, upstream)


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def report(messages: int, modeltap: list[tuple[int, int]], mitm: list[tuple[int, int]]) -> str:
    lines = [
        f"WebSocket session memory: {messages:,} response.create over one connection",
        f"machine: nproc={os.cpu_count()}, Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}",
        "",
        "| messages | modeltap RSS (MiB) | bare mitmdump RSS (MiB) |",
        "|---:|---:|---:|",
    ]
    for (n, ours), (_, theirs) in zip(modeltap, mitm, strict=True):
        lines.append(f"| {n:,} | {mib(ours)} | {mib(theirs)} |")
    if len(modeltap) >= 2:
        first_n, last_n = modeltap[0][0], modeltap[-1][0]
        ours_growth = modeltap[-1][1] - modeltap[0][1]
        theirs_growth = mitm[-1][1] - mitm[0][1]
        lines += [
            "",
            f"growth from message {first_n:,} to {last_n:,}: "
            f"modeltap {ours_growth / 1024:+.1f} MiB "
            f"({ours_growth * 1024 / (last_n - first_n):+.0f} B/message), "
            f"bare mitmdump {theirs_growth / 1024:+.1f} MiB "
            f"({theirs_growth * 1024 / (last_n - first_n):+.0f} B/message)",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-n",
        "--messages",
        type=int,
        default=10_000,
        help="response.create messages to send (a multiple of 1,000; default 10,000)",
    )
    args = parser.parse_args()
    if args.messages < SAMPLE_EVERY or args.messages % SAMPLE_EVERY:
        parser.error(f"--messages must be a positive multiple of {SAMPLE_EVERY}")
    with Upstream() as upstream:
        started = time.monotonic()
        modeltap = measure_modeltap(upstream, args.messages)
        print(f"modeltap done in {time.monotonic() - started:.0f} s", file=sys.stderr)
        started = time.monotonic()
        mitm = measure_mitmdump(upstream, args.messages)
        print(f"mitmdump done in {time.monotonic() - started:.0f} s", file=sys.stderr)
    print(report(args.messages, modeltap, mitm))


if __name__ == "__main__":
    main()
