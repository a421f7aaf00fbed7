"""The harness always gets through to the control listener (issue 27.3).

Any local process can connect to the control listener (only the token keeps
it out). Before, 64 idle connections filled it, and every connection after
them was closed on arrival until one of the 64 timed out (30 s): `modeltap
session end` failed. Now a connection has a short deadline to present a
whole request, one without the token is closed after its 401, and when the
listener is full the connection that has waited longest is closed to make
room for the new one. Tried against a real `modeltap run` process with the
real CLI: crowds of idle connections, a slow drip, connections opened in a
loop, and all of them at once.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2 as httpx
import orjson
import pytest

from modeltap.app import control
from tests.cli_process import cli_main
from tests.conftest import read_jsonl
from tests.reliability.faults import figure
from tests.reliability.test_processes import ProxyProcess
from tests.upstream import Upstream


def listener(out: Path) -> tuple[str, int]:
    (ctl,) = control.endpoints(out)
    host, port = ctl.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


#: One kind of attacker and how many threads run it.
Attack = tuple[Callable[[threading.Event], None], int]


@contextmanager
def crowd(
    address: tuple[str, int], make: Callable[[threading.Event], None], n: int
) -> Iterator[None]:
    """``n`` threads running ``make(stop)`` against the listener until the block ends."""
    stop = threading.Event()
    threads = [threading.Thread(target=make, args=(stop,), daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(10)


def idle(address: tuple[str, int], count: int) -> Callable[[threading.Event], None]:
    """Hold ``count`` connections that send nothing, opening a new one for each closed."""

    def run(stop: threading.Event) -> None:
        held: list[socket.socket] = []
        while not stop.is_set():
            while len(held) < count:
                try:
                    held.append(socket.create_connection(address, timeout=5))
                except OSError:
                    time.sleep(0.01)
            time.sleep(0.05)
            for sock in list(held):  # replace those the listener closed
                sock.setblocking(False)
                try:
                    if sock.recv(1) == b"":
                        held.remove(sock)
                        sock.close()
                except BlockingIOError:
                    pass
                except OSError:
                    held.remove(sock)
                    sock.close()
        for sock in held:
            sock.close()

    return run


def drip(address: tuple[str, int], count: int) -> Callable[[threading.Event], None]:
    """Slowloris: ``count`` connections each sending a request head one byte per 100 ms."""
    head = b"POST /sessions/victim/end HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + b"A" * 43

    def run(stop: threading.Event) -> None:
        socks: list[tuple[socket.socket, int]] = []
        while not stop.is_set():
            while len(socks) < count:
                try:
                    socks.append((socket.create_connection(address, timeout=5), 0))
                except OSError:
                    time.sleep(0.01)
            kept = []
            for sock, sent in socks:
                try:
                    sock.send(head[sent % len(head) : sent % len(head) + 1])
                    kept.append((sock, sent + 1))
                except OSError:
                    sock.close()  # closed by the listener: a new one takes its place
            socks = kept
            time.sleep(0.1)
        for sock, _ in socks:
            sock.close()

    return run


def churn(address: tuple[str, int]) -> Callable[[threading.Event], None]:
    """Connections opened in a loop as fast as one thread can, each left open a moment."""

    def run(stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                sock = socket.create_connection(address, timeout=5)
            except OSError:
                continue
            stop.wait(0.002)
            sock.close()

    return run


@pytest.fixture
def proxy(tmp_path: Path, upstream: Upstream, processes: list[ProxyProcess]) -> ProxyProcess:
    proc = ProxyProcess("--out", str(tmp_path), "--route", f"stub={upstream.url}", "-q")
    processes.append(proc)
    return proc


def end_through_the_cli(out: Path, session: str) -> tuple[int, dict[str, object], float]:
    started = time.monotonic()
    result = cli_main("session", "end", session, "--out", str(out))
    took = time.monotonic() - started
    return result.returncode, orjson.loads(result.stdout) if result.stdout else {}, took


def open_session(proxy: ProxyProcess, session: str) -> None:
    body = {"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]}
    answer = httpx.post(
        proxy.url + "/stub/v1/chat/completions", json=body, headers={"x-modeltap-session": session}
    )
    assert answer.status_code == 200


ATTACKS: dict[str, Callable[[tuple[str, int]], list[Attack]]] = {
    "64 idle": lambda a: [(idle(a, 64), 1)],
    "300 idle": lambda a: [(idle(a, 100), 3)],
    "70 slow drips": lambda a: [(drip(a, 70), 1)],
    "connections in a loop": lambda a: [(churn(a), 4)],
    "all at once": lambda a: [(idle(a, 80), 1), (drip(a, 20), 1), (churn(a), 2)],
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_the_harness_gets_through(proxy: ProxyProcess, tmp_path: Path, name: str) -> None:
    open_session(proxy, "victim")
    address = listener(tmp_path)
    runs = ATTACKS[name](address)
    with contextlib.ExitStack() as stack:
        for make, threads in runs:
            stack.enter_context(crowd(address, make, threads))
        time.sleep(1.0)  # the crowd is in place
        code, status, took = end_through_the_cli(tmp_path, "victim")
        # The next end answers the first status: the listener still serves.
        again, repeated, _ = end_through_the_cli(tmp_path, "victim")
    assert code == 0, name
    assert status["session_id"] == "victim" and status["requests_audited"] == 1
    assert (again, repeated) == (0, status)
    assert [s["session_id"] for s in read_jsonl(tmp_path / "sessions.jsonl")] == ["victim"]
    figure("control_starvation", case=name, session_end_s=round(took, 3))


def test_a_connection_without_the_token_is_closed_after_its_401(
    proxy: ProxyProcess, tmp_path: Path
) -> None:
    address = listener(tmp_path)
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(b"POST /sessions/victim/end HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):  # until the listener closes it
            data += chunk
    assert data.startswith(b"HTTP/1.1 401") and b"connection: close" in data.lower()
    assert data.count(b"HTTP/1.1") == 1


def test_a_request_that_never_completes_is_cut(proxy: ProxyProcess, tmp_path: Path) -> None:
    """No timing asserted: the listener closes it (recv returns) well before the
    socket's own timeout would fail the test."""
    address = listener(tmp_path)
    with (
        socket.create_connection(address, timeout=60) as silent,
        socket.create_connection(address, timeout=60) as half,
    ):
        half.sendall(b"POST /sessions/victim/end HTTP/1.1\r\nHost: x\r\n")
        assert silent.recv(1) == b""
        assert half.recv(65536) == b""


def test_authenticated_requests_keep_their_connection(proxy: ProxyProcess, tmp_path: Path) -> None:
    """A keep-alive connection that authenticated is answered again on the same socket."""
    (ctl,) = control.endpoints(tmp_path)
    open_session(proxy, "a")
    open_session(proxy, "b")
    with socket.create_connection(listener(tmp_path), timeout=30) as sock:
        for session in ("a", "b"):
            sock.sendall(
                f"POST /sessions/{session}/end HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {ctl.token}\r\nContent-Length: 0\r\n\r\n".encode()
            )
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(1)
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            body = b""
            while len(body) < length:
                body += sock.recv(length - len(body))
            assert head.startswith(b"HTTP/1.1 200") and orjson.loads(body)["session_id"] == session
