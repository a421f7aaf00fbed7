"""Open-proxy detection (modeltap.rules.listening), alone."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from modeltap.rules.listening import (
    host_addresses,
    is_loopback,
    is_this_machine,
    open_proxy_listeners,
    open_proxy_message,
)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.8.0.1", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("LOCALHOST", True), ("", False), ("0.0.0.0", False),
     ("::", False), ("192.168.1.5", False), ("10.0.0.1", False), ("example.com", False),
     ("localhost.example.com", False)],
)  # fmt: skip
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_forwarding_modes_off_loopback_are_open() -> None:
    listeners = [("regular", "0.0.0.0", 8787), ("socks5", "", 1080), ("upstream", "10.0.0.2", 1)]
    assert open_proxy_listeners(listeners, None) == [
        "regular mode on 0.0.0.0:8787",
        "socks5 mode on *:1080",
        "upstream mode on 10.0.0.2:1",
    ]


@pytest.mark.parametrize("auth", [None, "", "any", " ANY "])
def test_proxyauth_any_is_no_protection(auth: str | None) -> None:
    assert open_proxy_listeners([("regular", "0.0.0.0", 1)], auth) == ["regular mode on 0.0.0.0:1"]


def test_safe_setups() -> None:
    assert open_proxy_listeners([("regular", "0.0.0.0", 1)], "user:pass") == []
    assert open_proxy_listeners([("regular", "127.0.0.1", 1), ("regular", "::1", 2)], None) == []
    # Reverse mode only reaches its routes; transparent needs the network routed to it.
    assert open_proxy_listeners([("reverse", "0.0.0.0", 1), ("transparent", "", 2)], None) == []


def test_message_is_one_line_naming_address_and_fix() -> None:
    msg = open_proxy_message(["regular mode on 0.0.0.0:8787"], "use --proxyauth USER:PASS")
    assert msg == (
        "refusing to start an open proxy: regular mode on 0.0.0.0:8787 would relay anyone's "
        "traffic to any host; use --proxyauth USER:PASS"
    )


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("10.1", "10.0.0.1"),
        ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
        ("[0:0:0:0:0:0:0:1]", "::1"),
        ("127.0.0.1.", "127.0.0.1"),
    ],
)
def test_host_addresses_are_read_as_the_os_reads_them(host: str, address: str) -> None:
    assert host_addresses(host) == (ipaddress.ip_address(address),)
    if not host.startswith("["):  # what the system's own resolver makes of it, where it can
        try:
            resolved = socket.getaddrinfo(host, 80, type=socket.SOCK_STREAM)[0][4][0]
        except socket.gaierror:
            return
        assert resolved == address


def test_localhost_and_names_below_it_are_loopback_whatever_dns_says() -> None:
    for host in ("localhost", "LocalHost.", "a.localhost", "a.b.localhost."):
        assert host_addresses(host) == (
            ipaddress.IPv4Address("127.0.0.1"),
            ipaddress.IPv6Address("::1"),
        )
    for host in ("example.com", "localhost.example", "1.2.3.4.5", "notlocalhost"):
        assert host_addresses(host) is None


def test_this_machine() -> None:
    for address in ("127.0.0.1", "127.9.9.9", "0.0.0.0", "::1", "::", "::ffff:127.0.0.1"):
        assert is_this_machine(ipaddress.ip_address(address)), address
    # TEST-NET-3 and the documentation prefix: no machine's interface.
    for address in ("203.0.113.9", "2001:db8::9", "::ffff:203.0.113.9"):
        assert not is_this_machine(ipaddress.ip_address(address)), address


def test_an_interface_address_is_this_machine() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: the route picks an interface
        except OSError:
            pytest.skip("no route off loopback on this machine")
        own = probe.getsockname()[0]
    if ipaddress.ip_address(own).is_loopback:
        pytest.skip("only loopback here")
    assert is_this_machine(ipaddress.ip_address(own))
    assert is_this_machine(ipaddress.ip_address(f"::ffff:{own}"))
