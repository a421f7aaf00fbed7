"""Every spelling of this machine (issue 27.2): regular mode never reaches the control listener.

The control API ends sessions; only the harness may use it, so in ``--mode
regular`` a request or a ``CONNECT`` whose target is the control listener is
refused (``control_not_on_proxy_port``). It used to be decided by the
target's spelling: ``127.0.0.1``, ``localhost`` and ``[::1]`` were refused,
while ``127.1``, ``2130706433``, ``0x7f000001``, ``[::ffff:127.0.0.1]`` or
``0`` (each one the address ``getaddrinfo`` connects to) reached it, token
and all. Each attempt here carries the run's token and asks to end the
session of the run: one that got through would write its line.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

from modeltap.app import control
from tests.conftest import Running, read_jsonl
from tests.reliability.faults import figure, read_request

#: The issue's spellings, then more members of the class.
SPELLINGS = [
    *("127.1", "127.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "[::ffff:127.0.0.1]", "0"),
    *("0x7f.1", "0X7F000001", "017700000001", "127.0.0.1.", "127.42.0.7", "0.0.0.0", "0x0"),
    *("[::ffff:7f00:1]", "[0:0:0:0:0:0:ffff:7f00:1]", "[::1]", "[0::1]", "[::]"),
    *("localhost", "LOCALHOST", "localhost.", "x.localhost", "x.y.LocalHost."),
]


def machine_name() -> str | None:
    """This machine's own name, when the resolver says it is this machine (a DNS
    name that resolves to one of its addresses); None when it does not resolve."""
    name = socket.gethostname()
    try:
        socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return None
    return name


def attempts(proxy_port: int, host: str, port: int, token: str) -> list[bytes]:
    """An absolute-form request and a CONNECT to ``host:port``, with the token: the
    first line of each answer."""
    authority = f"{host}:{port}".encode()
    end = (
        b"POST http://" + authority + b"/sessions/victim/end HTTP/1.1\r\nHost: " + authority
        + b"\r\nAuthorization: Bearer " + token.encode() + b"\r\nContent-Length: 0\r\n\r\n"
    )  # fmt: skip
    tunnel = b"CONNECT " + authority + b" HTTP/1.1\r\nHost: " + authority + b"\r\n\r\n"
    answers = []
    for raw in (end, tunnel):
        with socket.create_connection(("127.0.0.1", proxy_port), timeout=30) as sock:
            sock.sendall(raw)
            data = read_request(sock)  # an answer is framed the same way
            if data.startswith(b"HTTP/1.1 200 Connection established"):
                # A tunnel that opened: try the control API through it too.
                sock.sendall(end.replace(b"http://" + authority, b""))
                data += read_request(sock)
        answers.append(data)
    return answers


def assert_none_got_through(running: Running, answers: dict[str, list[bytes]]) -> None:
    for host, (request, tunnel) in answers.items():
        for answered in (request, tunnel):
            if answered.startswith(b"HTTP/1.1 400") and b"Bad HTTP request line" in answered:
                continue  # mitmproxy's own parser refuses this spelling: nothing goes anywhere
            assert answered.startswith(b"HTTP/1.1 403"), (host, answered[:80])
            assert b"control_not_on_proxy_port" in answered
    assert not (running.out / "sessions.jsonl").exists()  # nothing ended
    rules = {e["rule"] for e in running.events("rejected")}
    assert rules == {"control_not_on_proxy_port"}


def test_every_spelling_is_refused(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy(mode="regular", session="victim")
    (ctl,) = control.endpoints(running.out)
    port = int(ctl.url.rsplit(":", 1)[1])
    hosts = [*SPELLINGS, *filter(None, [machine_name()])]
    answers = {host: attempts(running.proxy.port, host, port, ctl.token) for host in hosts}
    assert_none_got_through(running, answers)
    # The harness still gets through, on its own listener.
    (ended,) = control.end_session(running.out, "victim")
    assert ended.now
    figure("control_spellings", spellings=len(hosts), attempts=2 * len(hosts), reached=0)


def own_address() -> str | None:
    """An address of this machine off loopback (the route's choice), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # sends nothing: picks the interface
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_a_control_listener_on_an_interface_address(start_proxy: Callable[..., Running]) -> None:
    """`--control HOST:PORT` on one of this machine's addresses: that address in any
    spelling, and loopback's, reach nothing either."""
    address = own_address()
    if address is None:
        pytest.skip("this machine has no address off loopback")
    running = start_proxy(mode="regular", session="victim", control=f"{address}:0")
    (ctl,) = control.endpoints(running.out)
    port = int(ctl.url.rsplit(":", 1)[1])
    a, b, c, d = (int(x) for x in address.split("."))
    spellings = [address, f"[::ffff:{address}]", str(a << 24 | b << 16 | c << 8 | d), "127.1"]
    answers = {host: attempts(running.proxy.port, host, port, ctl.token) for host in spellings}
    assert_none_got_through(running, answers)


def test_a_name_that_rebinds_to_this_machine_reaches_nothing(
    start_proxy: Callable[..., Running], monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: the name answers elsewhere when the head is judged and this
    machine when mitmproxy connects. The connection is judged on the answer it
    is made with (and pinned to it), so the control API is never reached."""
    running = start_proxy(mode="regular", session="victim")
    (ctl,) = control.endpoints(running.out)
    port = int(ctl.url.rsplit(":", 1)[1])
    asked: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, service: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "rebind.test":
            return real(host, service, *args, **kwargs)
        asked.append(host)
        address = "203.0.113.9" if len(asked) == 1 else "127.0.0.1"  # TTL 0
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, service))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    request, _ = attempts(running.proxy.port, "rebind.test", port, ctl.token)
    assert not request.startswith(b"HTTP/1.1 200")  # killed before it connected
    assert len(asked) >= 2  # judged again where it connects
    assert not (running.out / "sessions.jsonl").exists()
    # And a name that answers this machine from the start is refused by name.
    asked.clear()
    asked.append("-")  # the next answer is this machine's
    request, tunnel = attempts(running.proxy.port, "rebind.test", port, ctl.token)
    assert request.startswith(b"HTTP/1.1 403") and tunnel.startswith(b"HTTP/1.1 403")
    assert not (running.out / "sessions.jsonl").exists()


def test_other_hosts_and_ports_still_pass(start_proxy: Callable[..., Running]) -> None:
    """Loopback on another port is a service of the agent's, not the control API."""
    running = start_proxy(mode="regular")
    stub = running.upstream.url.removeprefix("http://")
    port = stub.rsplit(":", 1)[1]
    with socket.create_connection(("127.0.0.1", running.proxy.port), timeout=30) as sock:
        sock.sendall(
            f"GET http://127.1:{port}/v1/models HTTP/1.1\r\nHost: 127.1:{port}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    assert [r.path for r in running.upstream.received] == ["/v1/models"]
    assert read_jsonl(running.out / "events.jsonl")[0]["kind"] == "unaudited"
