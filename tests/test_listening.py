"""Open-proxy detection (modeltap.rules.listening), alone."""

from __future__ import annotations

import pytest

from modeltap.rules.listening import is_loopback, open_proxy_listeners, open_proxy_message


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
