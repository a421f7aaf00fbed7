"""Request paths: where the endpoint is decided, and which paths are refused.

The property test checks the promise behind ``check_path``: on a path it
accepts, none of the ways servers rewrite a path before routing (resolve dot
segments, collapse ``//``, read ``\\`` as ``/``, stop at a NUL, decode twice,
fold Unicode, drop trailing dots) changes it once its ``;params`` are dropped,
and whatever endpoint a server reaches, keeping or dropping ``;params``, is
the one modeltap decided on.
"""

from __future__ import annotations

import posixpath
import re
import unicodedata
from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from modeltap.apis import api_for_path, api_for_ws_path, endpoint_of, match_endpoint
from modeltap.rules import routing
from modeltap.rules.errors import Rejected
from modeltap.rules.routing import (
    check_path,
    decoded_path,
    overrides_method,
    overrides_path,
    routed_path,
    split_target,
)


def refusal(path: str) -> str | None:
    """The detail of check_path's refusal, or None if the path is accepted."""
    try:
        check_path(path)
    except Rejected as e:
        assert e.rule == "noncanonical_path"
        return e.detail
    return None


# ---------------------------------------------------------------- decoding


def test_split_target_keeps_everything_after_the_first_question_mark() -> None:
    assert split_target("/v1/x?a=1?b") == ("/v1/x", "a=1?b")
    assert split_target("/v1/x") == ("/v1/x", "")


def test_decoded_path_decodes_once_and_drops_the_query() -> None:
    assert decoded_path("/v1/chat%2Fcompletions?x=%2F") == "/v1/chat/completions"
    assert decoded_path("/v1/a%252F") == "/v1/a%2F"
    assert decoded_path("/v1/%FF") == "/v1/\ufffd"


def test_routed_path_drops_each_segments_parameters_after_decoding() -> None:
    assert routed_path("/v1/chat;x=1/completions;jsessionid=a?q=;") == "/v1/chat/completions"
    assert routed_path("/v1/chat%3Bx/completions") == "/v1/chat/completions"
    assert routed_path("/v1/..;/x") == "/v1/../x"


# ---------------------------------------------------------------- endpoints


@pytest.mark.parametrize(
    ("path", "api"),
    [
        ("/v1/chat/completions", "openai.chat_completions"),
        ("/v1/chat%2Fcompletions", "openai.chat_completions"),
        ("/v1/chat%2fcompletions", "openai.chat_completions"),
        ("/openai/deployments/d/chat/completions?api-version=1", "openai.chat_completions"),
        ("/v1/CHAT/Completions", "openai.chat_completions"),
        ("/v1/chat/completions/", "openai.chat_completions"),
        ("/v1/respons%65s", "openai.responses"),
        ("/v1/responses?stream=true", "openai.responses"),
        ("/v1/messag%65s?beta=true", "anthropic.messages"),
        ("/v1/Messages", "anthropic.messages"),
        ("/v1/chat;x=1/completions", "openai.chat_completions"),
        ("/v1;jsessionid=a/chat/completions;b", "openai.chat_completions"),
        ("/v1/respons%65s%3Bv=2", "openai.responses"),
        ("/v1/models", None),
        ("/v1/messages/count_tokens", None),
        ("/v1/responses/resp_1", None),
        ("/v1/responses/resp_1/cancel", None),
        ("/v1/responses/resp_1/input_items", None),
        ("/v1/responses/compact", "openai.responses"),
        ("/v1/responses/compact/", "openai.responses"),
        ("/v1/responses%2FCompact", "openai.responses"),
        ("/v1/responses/compact;x?api-version=1", "openai.responses"),
        ("/openai/responses/compact?api-version=2025-04-01-preview", "openai.responses"),
        ("/v1/responses/compactx", None),
        ("/v1/responses/resp_1/compact/cancel", None),
        ("/v1/chat/completions%3Fx", None),  # decodes to ".../completions?x": refused on a route
        ("/", None),
    ],
)
def test_endpoint_is_decided_on_the_decoded_path(path: str, api: str | None) -> None:
    assert endpoint_of(path) == api
    assert api_for_ws_path(path) == api
    assert api_for_path("POST", path) == api
    assert api_for_path("post", path) == api
    assert api_for_path("GET", path) is None


@pytest.mark.parametrize(
    ("path", "operation"),
    [
        ("/v1/responses", "create"),
        ("/v1/responses/compact", "compact"),
        ("/v1/respons%65s/comp%61ct?x=1", "compact"),
        ("/openai/responses/compact", "compact"),
        ("/v1/chat/completions", "create"),
        ("/v1/messages", "create"),
    ],
)
def test_the_path_names_the_operation(path: str, operation: str) -> None:
    found = match_endpoint(path)
    assert found is not None and found.operation == operation


# ---------------------------------------------------------------- check_path

ACCEPTED = [
    "/",
    "/v1/chat/completions",
    "/v1/chat/completions/",
    "/v1/chat%2Fcompletions",
    "/v1/messages?beta=true&x=..//%25%zz;",  # the query string is not the path
    "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.anthropic.x-v1%3a0/invoke",
    "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/converse-stream",
    "/v1/publishers/anthropic/models/claude-sonnet-4@20250514:streamRawPredict",
    "/v1/files/file-abc/content",
    "/a/b~c/d!$&'()*+,=",
    "/v1/.well-known/x",  # a dot inside a segment is fine
    "/v1;jsessionid=abc/chat/completions",  # path parameters, read as servlets read them
    "/v1/chat/completions;v=1.2;x",
    "/v1/chat/completions/;x",
]


@pytest.mark.parametrize("path", ACCEPTED)
def test_canonical_paths_pass(path: str) -> None:
    check_path(path)


REFUSED = [
    ("v1/chat/completions", "not an absolute path"),
    ("*", "not an absolute path"),
    ("/v1/../x", "dot segment"),
    ("/v1/./x", "dot segment"),
    ("/v1/..", "dot segment"),
    ("/v1/.", "dot segment"),
    ("/v1/%2e%2E/x", "dot segment"),
    ("/v1/%2E/x", "dot segment"),
    ("/v1/a%2F..%2Fb", "dot segment"),
    ("/v1/completions.", "dot segment"),
    ("/v1beta/models/x:generateContent:", "trailing colon"),
    ("/model/x/converse%3A", "trailing colon"),
    ("/v1/x:;p=1/y", "trailing colon"),
    ("/v1/completions./", "dot segment"),
    ("//v1/x", "empty segment"),
    ("/v1//x", "empty segment"),
    ("/v1/%2F/x", "empty segment"),
    ("/v1/x//", "empty segment"),
    ("/v1/a%252Fb", "double encoding"),
    ("/v1/a%2565", "double encoding"),
    ("/v1/a%25", "double encoding"),
    ("/v1/a%25zz", "double encoding"),
    ("/v1/a%", "malformed percent-escape"),
    ("/v1/a%4", "malformed percent-escape"),
    ("/v1/a%g0", "malformed percent-escape"),
    ("/v1/%u002e", "malformed percent-escape"),
    ("/v1/..;/x", "dot segment"),  # Tomcat's ".." (the classic "..;/" bypass)
    ("/v1/..%3Bx/x", "encoded semicolon"),
    ("/v1/chat%3bx/completions", "encoded semicolon"),
    ("/v1/a;x./b", "dot segment"),
    ("/v1/;x/b", "empty segment"),
    ("/v1/a\\b", "backslash"),
    ("/v1/a%5Cb", "backslash"),
    ("/v1/a%00", "control character"),
    ("/v1/a%7F", "control character"),
    ("/v1/a\tb", "control character"),
    ("/v1/caf%C3%A9", "non-ASCII character"),
    ("/v1/café", "non-ASCII character"),
    ("/v1/a%C0%AFb", "non-ASCII character"),
    ("/v1/a%20b", "character not allowed in a path"),
    ("/v1/a b", "character not allowed in a path"),
    ("/v1/a%3Fb", "character not allowed in a path"),
    ("/v1/a#b", "character not allowed in a path"),
    ("/v1/a%23b", "character not allowed in a path"),
    ('/v1/a"b', "character not allowed in a path"),
    ("/v1/a<b>", "character not allowed in a path"),
    ("/v1/a{b}", "character not allowed in a path"),
    ("/v1/a|b^`", "character not allowed in a path"),
]


@pytest.mark.parametrize(("path", "detail"), REFUSED)
def test_noncanonical_paths_are_refused_with_a_fixed_detail(path: str, detail: str) -> None:
    assert refusal(path) == detail
    # The message is the rule's fixed text plus the detail: never the path.
    with pytest.raises(Rejected) as exc:
        check_path(path)
    assert path.strip("/") not in exc.value.message


# What servers do to a decoded path before they route it (besides dropping
# ";params", which routed_path does itself).
REWRITES = {
    "resolve dot segments": lambda p: (
        posixpath.normpath(p) + ("/" if p.endswith("/") else "") if p != "/" else p
    ),
    "collapse slashes": lambda p: re.sub("/+", "/", p),
    "backslash is a slash": lambda p: p.replace("\\", "/"),
    "stop at NUL": lambda p: p.split("\0", 1)[0],
    "decode again": unquote,
    "fold Unicode": lambda p: unicodedata.normalize("NFKC", p),
    "drop trailing dots and spaces": lambda p: re.sub(r"[. ]+(?=/|$)", "", p),
}
SUFFIXES = {
    "/chat/completions": "openai.chat_completions",
    "/responses": "openai.responses",
    "/messages": "anthropic.messages",
}

PATH_PIECES = st.sampled_from(
    ["/", "/", "/", "a", "v1", "x.y", ".a", "chat", "completions", "responses", ".", "..",
     "%2e", "%2E", "%2F", "%2f", "%25", "%252F", "%5C", "\\", ";", "%3B", "x=1", "%00", "%0a",
     "%", "%2", "%zz", "%C0%AF", "%EF%BC%8F", "é", " ", "%20", "#", "%23", "%3F", ":", "%3A",
     "@", "-", "_", "~", "+"]
)  # fmt: skip


def slow_refusal(path: str) -> str | None:
    """check_path's answer with its fast path for plain paths turned off."""
    saved = routing._PLAIN_PATH
    routing._PLAIN_PATH = re.compile(r"(?!)")
    try:
        return refusal(path)
    finally:
        routing._PLAIN_PATH = saved


def suffix_endpoint(path: str) -> str | None:
    """The endpoint a server that routes on ``path`` as it stands would reach."""
    bare = path.lower()
    bare = bare[:-1] if bare.endswith("/") else bare
    return next((api for suffix, api in SUFFIXES.items() if bare.endswith(suffix)), None)


@given(pieces=st.lists(PATH_PIECES, min_size=1, max_size=10))
def test_no_server_rewrite_changes_an_accepted_path(pieces: list[str]) -> None:
    path = "/" + "".join(pieces)
    # The fast path for plain paths decides as the full check does.
    assert refusal(path) == slow_refusal(path)
    slow_routed = "/".join(seg.split(";", 1)[0] for seg in decoded_path(path).split("/"))
    assert routed_path(path) == slow_routed
    if refusal(path) is not None:
        return
    routed = routed_path(path)
    for name, rewrite in REWRITES.items():
        assert rewrite(routed) == routed, name
    # Whatever a server makes of an accepted path, with or without its
    # ";params", the endpoint it reaches is the one modeltap decided on.
    for start in (decoded_path(path), routed):
        for rewrite in (lambda p: p, *REWRITES.values()):
            reached = suffix_endpoint(rewrite(start))
            if reached is not None:
                assert endpoint_of(path) == reached


# ---------------------------------------------------------------- method overrides


@pytest.mark.parametrize(
    ("headers", "target", "expected"),
    [
        (["X-HTTP-Method-Override"], "/v1/x", True),
        (["x-http-method"], "/v1/x", True),
        (["X-Method-Override"], "/v1/x", True),
        ([], "/v1/x?_method=POST", True),
        ([], "/v1/x?a=1&%5Fmethod=post", True),
        ([], "/v1/x?_METHOD=post", True),
        (["Content-Type"], "/v1/x?method=POST&x_method=1", False),
        ([], "/v1/x", False),
    ],
)
def test_method_overrides(headers: list[str], target: str, expected: bool) -> None:
    assert overrides_method(headers, target) is expected


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (["X-Original-URL"], True),
        (["x-rewrite-url"], True),
        (["X-Forwarded-Host", "Content-Type"], False),
        ([], False),
    ],
)
def test_path_overrides(headers: list[str], expected: bool) -> None:
    assert overrides_path(headers) is expected


# --------------------------------------------------------------------------
# MCP servers (SPEC 3b)


def test_an_mcp_server_is_mounted_at_mcp_name() -> None:
    table = routing.RouteTable.build([], None, ["files=https://mcp.example.com/mcp"])
    route = table.match("/mcp/files")
    assert route is not None and route.mcp and route.name == "files"
    # The mount is the server's endpoint itself: no slash added (servers
    # redirect /mcp/ to /mcp, off the mount).
    assert route.upstream_path("/mcp/files") == "/mcp"
    assert route.upstream_path("/mcp/files?x=1") == "/mcp?x=1"
    assert route.upstream_path("/mcp/files/sse") == "/mcp/sse"
    assert [r.name for r in table.mcp] == ["files"]
    assert table.match("/openai/v1/chat/completions") is not None  # the others stay
    with pytest.raises(routing.RouteError, match="given twice"):
        routing.RouteTable.build([], None, ["a=http://x", "a=http://y"])
    with pytest.raises(routing.RouteError, match="NAME=URL"):
        routing.parse_mcp_spec("no-url")


def test_an_mcp_host_is_mcp_in_regular_mode() -> None:
    table = routing.RouteTable.build([], None, [], ["mcp.example.com", "tools.local:8443"])
    any_port = table.for_host("MCP.example.com", 443, "https")
    assert any_port is not None and any_port.mcp and any_port.name == "mcp.example.com"
    assert (any_port.port, any_port.scheme) == (443, "https")
    assert table.for_host("tools.local", 8443, "http") is not None
    assert table.for_host("tools.local", 80, "http") is None
    provider = table.for_host("api.openai.com", 443)
    assert provider is not None and not provider.mcp
    with pytest.raises(routing.RouteError):
        routing.mcp_host_route("bad host/x")
