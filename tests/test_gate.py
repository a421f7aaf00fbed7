"""The request gate's pure judgements: ids, the control API, the request line
(the body's audit is tests/test_body_audit.py)."""

from __future__ import annotations

from typing import Any

import pytest

from modeltap.apis.openai_chat import NAME as API_CHAT
from modeltap.apis.openai_responses import NAME as API_RESPONSES
from modeltap.core.body_audit import sha256_hex
from modeltap.core.gate import (
    RequestHead,
    destination,
    fail_closed,
    identify,
    is_control_address,
    is_control_path,
    judge_head_bytes,
    judge_request_line,
    needs_resolving,
    overlong_id_header,
    switch_asked,
)
from modeltap.rules.errors import Rejected
from modeltap.rules.routing import RouteTable


def test_identify() -> None:
    common = {"fallback_id": "f", "default_session": "run"}
    assert identify(
        session_header="s", client_request_id="c", request_id="r", websocket=False, **common
    ) == ("s", "c")
    assert identify(
        session_header=None, client_request_id=None, request_id="r", websocket=False, **common
    ) == ("run", "r")
    assert identify(
        session_header=None, client_request_id=None, request_id="r", websocket=True, **common
    ) == ("f", "f")
    assert identify(
        session_header=None, client_request_id="t", request_id=None, websocket=True, **common
    ) == ("t", "t")


def test_overlong_ids_are_named_by_their_header_never_quoted() -> None:
    assert overlong_id_header("r", "s") is None
    assert overlong_id_header("r", "s" * 257) == "x-modeltap-session"
    assert overlong_id_header("r" * 257, None) == "x-client-request-id or x-request-id"


@pytest.mark.parametrize(
    ("path", "control"),
    [
        ("/__modeltap/sessions/x/end", True),
        ("/__modeltap", True),
        ("/%5F%5Fmodeltap/sessions", True),
        ("/__modeltap?x", True),
        ("/__modeltapx", False),
        ("/v1/__modeltap/", False),
    ],
)
def test_control_paths(path: str, control: bool) -> None:
    assert is_control_path(path) is control


def test_control_addresses() -> None:
    listener = ("127.0.0.1", 9000)
    assert is_control_address("localhost", 9000, listener)
    assert is_control_address("a.localhost", 9000, listener)
    assert is_control_address("[::1]", 9000, listener)
    assert is_control_address("0.0.0.0", 9000, listener)
    assert not is_control_address("127.0.0.1", 9001, listener)
    assert not is_control_address("example.com", 9000, listener)
    assert not is_control_address("127.0.0.1", 9000, None)


@pytest.mark.parametrize(
    "host",
    [
        # The spellings (inet_aton reads them all as 127.0.0.1 or 0.0.0.0).
        *("127.1", "127.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "[::ffff:127.0.0.1]", "0"),
        # More of the class: other bases and groupings, IPv6 forms, names under localhost.
        *("0x7f.1", "0x7F.0.0.1", "017700000001", "127.0.0.1.", "127.255.255.254", "0.0.0.0"),
        *("[::ffff:7f00:1]", "[0:0:0:0:0:0:0:1]", "[::]", "[::ffff:0:0]", "[0::1]"),
        *("LOCALHOST", "localhost.", "x.y.localhost", "x.LocalHost."),
    ],
)
def test_every_spelling_of_this_machine_is_the_control_listener(host: str) -> None:
    assert is_control_address(host, 9000, ("127.0.0.1", 9000)), host
    assert not is_control_address(host, 9001, ("127.0.0.1", 9000))  # its port only


def test_a_name_is_judged_by_what_it_resolved_to() -> None:
    listener = ("127.0.0.1", 9000)
    assert needs_resolving("rebind.example", 9000, listener)
    assert not needs_resolving("rebind.example", 443, listener)  # elsewhere: never the listener
    assert not needs_resolving("127.1", 9000, listener)  # an address needs no DNS
    assert is_control_address("rebind.example", 9000, listener, ("192.0.2.7", "127.0.0.1"))
    assert is_control_address("rebind.example", 9000, listener, ("::ffff:127.0.0.1",))
    assert not is_control_address("rebind.example", 9000, listener, ("192.0.2.7",))
    assert not is_control_address("rebind.example", 9000, listener, ())  # unresolvable
    # What a name says of itself is not overruled by an answer for it.
    assert not is_control_address("192.0.2.7", 9000, listener, ("127.0.0.1",))


def test_the_listeners_own_host_is_the_listener() -> None:
    """--control HOST:PORT on an address: that address, however it is spelt."""
    listener = ("192.0.2.250", 9000)
    assert is_control_address("192.0.2.250", 9000, listener)
    assert is_control_address("127.1", 9000, listener)  # any local address counts


@pytest.mark.parametrize(
    ("name", "fields", "detail"),
    [
        ("obs-fold SP", [(b"x-a", b"a\r\n Transfer-Encoding: chunked")], "obs-fold"),
        ("obs-fold HTAB", [(b"x-a", b"a\r\n\tb")], "obs-fold"),
        ("bare CR", [(b"x-a", b"a\rTransfer-Encoding: chunked")], "control byte"),
        ("bare LF", [(b"x-a", b"a\nb")], "control byte"),
        ("NUL", [(b"x-a", b"a\x00b")], "control byte"),
        ("ESC", [(b"x-a", b"\x1b[2J")], "control byte"),
        ("DEL", [(b"x-a", b"a\x7f")], "control byte"),
        ("in the second field", [(b"x-a", b"a"), (b"x-b", b"\x01")], "control byte"),
        ("space in a name", [(b"x a", b"a")], "name"),
        ("empty name", [(b"", b"a")], "name"),
        ("colon in a name", [(b"x:a", b"a")], "name"),
        ("UTF-8 in a name", [("x-\u00e4".encode(), b"a")], "name"),
    ],
)
def test_header_bytes_no_intermediary_passes_on(
    name: str, fields: list[tuple[bytes, bytes]], detail: str
) -> None:
    with pytest.raises(Rejected, match="invalid_header_bytes") as refused:
        judge_head_bytes("GET", "/v1/models", fields)
    assert refused.value.detail is not None and detail in refused.value.detail, name
    assert "Transfer-Encoding" not in refused.value.message  # nothing of the request


def test_head_bytes_that_pass() -> None:
    ok = [
        (b"x-a", b"a\tb"),
        (b"x-b", "caf\u00e9".encode()),
        (b"x-c", b""),
        (b"~!#$%&'*+-.^_`|", b"x"),
    ]
    judge_head_bytes("GET", "/v1/models?q=1", ok)
    judge_head_bytes("OPTIONS", "*", ())
    judge_head_bytes("POST", "/v1/chat/completions", ok, session="s-\u00e9")


@pytest.mark.parametrize(
    ("method", "target", "session"),
    [
        ("GE\x01T", "/", None),
        ("GET /x", "/", None),
        ("", "/", None),
        ("GET", "/v1/models\x00", None),
        ("GET", "/v1/models HTTP/1.1", None),
        ("GET", "/v1/\x7f", None),
        ("GET", "/", "s\r\nx"),
        ("GET", "/", "s\x1b]0;t\x07"),
    ],
)
def test_the_request_line_and_session_hold_no_control_byte(
    method: str, target: str, session: str | None
) -> None:
    with pytest.raises(Rejected, match="invalid_header_bytes"):
        judge_head_bytes(method, target, [(b"host", b"x")], session)


def head(target: str, method: str = "GET", **headers: str) -> RequestHead:
    fields = tuple((k.encode(), v.encode()) for k, v in headers.items())
    return RequestHead("f", method, target, "https", "api.openai.com", 443, headers, fields)


def test_destination_in_each_mode() -> None:
    routes = RouteTable.build(["stub=http://127.0.0.1:9/base"], None)
    found = destination("reverse", routes, head("/stub/v1/chat/completions?x=1"))
    assert found is not None and found.route is not None
    assert (found.route.name, found.path, found.upstream, found.host) == (
        "stub",
        "/base/v1/chat/completions?x=1",
        "http://127.0.0.1:9/base",
        "127.0.0.1",
    )
    assert destination("reverse", routes, head("/elsewhere")) is None
    found = destination("regular", routes, head("/v1/chat/completions"))
    assert found is not None and found.route is not None and found.route.name == "openai"
    assert (found.path, found.upstream, found.host) == (
        "/v1/chat/completions",
        "https://api.openai.com:443",
        "api.openai.com",
    )


def test_the_switch_a_head_asks_for() -> None:
    ws = {"upgrade": "websocket", "sec-websocket-version": "13"}
    assert switch_asked(head("/v1/responses", **ws)) is True
    assert switch_asked(head("/v1/responses")) is False
    assert switch_asked(head("/v1/responses", **ws, **{"content-length": "5"})) is None
    assert switch_asked(head("/v1/responses", upgrade="h2c")) is False
    assert switch_asked(head("/v1/responses", upgrade="tls/1.3")) is None


def line_api(*args: Any) -> str | None:
    """The API of the endpoint :func:`judge_request_line` found, if any."""
    found = judge_request_line(*args)
    return None if found is None else found.api


def test_the_request_line() -> None:
    assert line_api("POST", "/v1/chat/completions", "/v1/chat/completions", [], False) == API_CHAT
    assert line_api("GET", "/x/v1/responses", "/v1/responses", [], True) == API_RESPONSES
    compact = "/v1/responses/compact"
    assert line_api("POST", compact, compact, [], False) == API_RESPONSES
    assert line_api("GET", "/v1/models", "/v1/models", ["X-HTTP-Method-Override"], False) is None
    # The match is the one the whole exchange keeps: its operation, its model.
    found = judge_request_line("POST", compact, compact, [], False)
    assert found is not None and found.operation == "compact"
    for method, path, names, websocket, rule in (
        ("POST", "/v1/chat/./completions", [], False, "noncanonical_path"),
        ("POST", "/v1/x", ["X-Original-URL"], False, "noncanonical_path"),
        ("GET", "/v1/chat/completions", [], True, "ws_unsupported_endpoint"),
        ("PUT", "/v1/messages", ["x-http-method-override"], False, "method_override"),
        # A compaction has no WebSocket mode: its socket's messages would go unread.
        ("GET", "/v1/responses/compact", [], True, "ws_unsupported_endpoint"),
        ("GET", "/v1/responses/COMPACT/", [], True, "ws_unsupported_endpoint"),
    ):
        with pytest.raises(Rejected) as e:
            judge_request_line(method, path, path, names, websocket)
        assert e.value.rule == rule


def test_fail_closed_turns_a_bug_into_a_refusal() -> None:
    def buggy() -> None:
        raise KeyError("a secret from the body")

    with pytest.raises(Rejected) as e:
        fail_closed(buggy)
    assert e.value.rule == "audit_internal_error" and "secret" not in e.value.message
    assert fail_closed(sha256_hex, b"") == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
