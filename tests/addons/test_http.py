"""The HTTP addon's hooks, called directly (taddons, tflow)."""

from __future__ import annotations

import asyncio
import gzip
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from mitmproxy import connection, exceptions, http
from mitmproxy.proxy.server_hooks import ServerConnectionHookData
from mitmproxy.test import tflow, tutils

from modeltap.addons import http as http_addon
from modeltap.addons.deadlines import DEADLINE_KEY, Deadline
from modeltap.addons.http import VIEW_KEY, Http
from modeltap.core.body_audit import HASH_IN_THREAD_BYTES
from modeltap.core.observe import StreamTap
from tests.addons.conftest import CHAT, json_response, model_flow, tap
from tests.upstream import chat_text_json

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("modeltap_routes", ["no-equals-sign"], "--route takes NAME=URL"),
        ("modeltap_upstream", "ftp://x", "upstream"),
        ("modeltap_mode", "sideways", "modeltap_mode must be reverse or regular"),
        ("modeltap_image_detail", "huge", "modeltap_image_detail must be low, high or auto"),
        ("modeltap_max_body", "lots", "modeltap_max_body must be a size such as 64m"),
        ("modeltap_max_body", "0", "modeltap_max_body must be a size such as 64m"),
        ("stream_large_bodies", "1m", "cannot audit with stream_large_bodies set"),
    ],
)
async def test_bad_options_are_refused(
    tmp_path: Path, option: str, value: object, message: str
) -> None:
    with tap(tmp_path) as t, pytest.raises(exceptions.OptionsError, match=message):
        t.tctx.options.update(**{option: value})


async def test_an_open_proxy_is_refused_unless_allowed(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        with pytest.raises(exceptions.OptionsError, match="modeltap_allow_open_proxy=true"):
            t.tctx.options.update(mode=["regular"], listen_host="0.0.0.0")
        t.tctx.options.update(modeltap_allow_open_proxy=True)
        t.tctx.options.update(mode=["regular"], listen_host="0.0.0.0", modeltap_mode="regular")


async def test_options_reach_the_core(tmp_path: Path) -> None:
    with tap(tmp_path, mode="regular", strict=True, image_detail="low", max_body="1k") as t:
        s = t.run.settings
        assert (s.mode, s.strict, s.image_detail, s.max_body) == ("regular", True, "low", 1024)
        assert {r.name for r in s.routes.routes} == {"openai", "anthropic", "gemini", "stub"}


async def test_a_model_request_is_re_pointed_audited_and_answered(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        http_ = t.addon(Http)
        flow = model_flow(**{"x-modeltap-session": "s1"})
        http_.requestheaders(flow)
        req = flow.request
        assert (req.host, req.port, req.path) == ("127.0.0.1", 9, "/v1/chat/completions")
        assert "x-modeltap-session" not in req.headers  # never forwarded
        assert http_.request(flow) is None and flow.response is None
        (record,) = t.audit()
        assert (record["session_id"], record["route"], record["body_sha256"]) == (
            "s1",
            "stub",
            __import__("hashlib").sha256(CHAT).hexdigest(),
        )
        flow.response = json_response(orjson.dumps(chat_text_json("gpt-5").json))
        http_.responseheaders(flow)
        http_.response(flow)
        (event,) = t.events("response")
        assert (event["status"], event["model"], event["evidence_complete"]) == (200, "gpt-5", True)


async def test_refusals_answer_in_the_providers_shape(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        http_ = t.addon(Http)
        flow = model_flow("/__modeltap/sessions/x/end")
        http_.requestheaders(flow)
        assert flow.response is not None and flow.response.status_code == 403
        assert orjson.loads(flow.response.content)["error"]["code"] == "modeltap_rejected"
        flow = model_flow(body=b'{"messages": []}')
        http_.requestheaders(flow)
        http_.request(flow)
        assert flow.response is not None and flow.response.status_code == 400
        http_.response(flow)  # an answer of modeltap's own: nothing more is written
        assert [e["rule"] for e in t.events("rejected")] == [
            "control_not_on_proxy_port",
            "missing_model",
        ]


async def test_request_trailers_are_refused(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        http_ = t.addon(Http)
        flow = model_flow()
        http_.requestheaders(flow)
        flow.request.trailers = http.Headers(x_checksum="1")
        http_.request(flow)
        assert flow.response is not None and b"request_trailers" in flow.response.content


async def test_image_detail_rewrites_the_forwarded_body(tmp_path: Path) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": [image]}]})
    with tap(tmp_path, image_detail="high") as t:
        http_ = t.addon(Http)
        flow = model_flow(body=gzip.compress(body), **{"content-encoding": "gzip"})
        http_.requestheaders(flow)
        pending = http_.request(flow)
        assert pending is not None  # decoded on a worker thread
        await pending
        sent = orjson.loads(flow.request.get_content())
        assert sent["messages"][0]["content"][0]["image_url"]["detail"] == "high"
        assert flow.request.headers["content-encoding"] == "gzip"  # re-encoded as sent
        assert t.audit()[0]["image_details"] == ["high"]


async def test_a_large_body_is_hashed_off_the_event_loop(tmp_path: Path) -> None:
    filler = "x" * HASH_IN_THREAD_BYTES
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": filler}]})
    with tap(tmp_path) as t:
        http_ = t.addon(Http)
        flow = model_flow(body=body)
        http_.requestheaders(flow)
        pending = http_.request(flow)
        assert pending is not None
        await pending
        assert t.audit()[0]["body_sha256"] == __import__("hashlib").sha256(body).hexdigest()


async def test_work_the_glue_cannot_do_is_a_refusal_never_a_forward(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    gone = ThreadPoolExecutor(max_workers=1)
    gone.shutdown()  # run_in_executor now raises RuntimeError
    loop.set_default_executor(gone)
    try:
        with tap(tmp_path) as t:
            http_ = t.addon(Http)
            flow = model_flow(body=gzip.compress(CHAT), **{"content-encoding": "gzip"})
            http_.requestheaders(flow)
            pending = http_.request(flow)
            assert pending is not None
            await pending
            assert flow.response is not None and flow.response.status_code == 500
            assert [e["rule"] for e in t.events("rejected")] == ["audit_internal_error"]
            assert t.audit() == []
    finally:
        loop.set_default_executor(ThreadPoolExecutor())


async def test_an_event_stream_is_tapped_and_other_bodies_are_not(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        http_ = t.addon(Http)
        flow = model_flow(body=orjson.dumps({"model": "m", "messages": [], "stream": True}))
        http_.requestheaders(flow)
        http_.request(flow)
        flow.response = tutils.tresp(headers=http.Headers(content_type="text/event-stream"))
        http_.responseheaders(flow)
        assert isinstance(flow.response.stream, StreamTap)
        passed = model_flow("/stub/v1/models")
        http_.requestheaders(passed)
        http_.request(passed)
        passed.response = tutils.tresp()
        http_.responseheaders(passed)
        assert not passed.response.stream
        http_.response(passed)
        (event,) = t.events("unaudited")
        assert (event["method"], event["path"], event["status"]) == ("POST", "/v1/models", 200)


async def test_an_mcp_get_stream_is_tapped_with_no_idle_limit(tmp_path: Path) -> None:
    """An MCP GET stream is silent until the server speaks (SPEC 3b): no idle
    limit ends it, and its SSE is observed through the MCP tap; a POST's
    answer stays under the limits."""
    from modeltap.core.mcp_exchange import McpStreamTap

    with tap(tmp_path, mcp=["files=http://127.0.0.1:9/mcp"]) as t:
        http_ = t.addon(Http)
        get = tflow.tflow(req=tutils.treq(method=b"GET", path=b"/mcp/files", content=b""))
        http_.requestheaders(get)
        http_.request(get)
        assert get.request.path == "/mcp" and get.request.headers["accept-encoding"] == "identity"
        get.response = tutils.tresp(headers=http.Headers(content_type="text/event-stream"))
        http_.responseheaders(get)
        assert isinstance(get.response.stream, McpStreamTap)
        assert DEADLINE_KEY not in get.metadata or get.metadata[DEADLINE_KEY].handle is None
        message = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
        post = model_flow("/mcp/files", message)
        http_.requestheaders(post)
        http_.request(post)
        post.response = tutils.tresp(headers=http.Headers(content_type="text/event-stream"))
        http_.responseheaders(post)
        assert post.metadata[DEADLINE_KEY].watch == "response"
        (line,) = t.audit()
        assert (line["api"], line["mcp_method"], line["jsonrpc_id"]) == ("mcp", "tools/list", 1)


async def test_a_websocket_handshake_leaves_its_view(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        http_ = t.addon(Http)
        flow = tflow.twebsocketflow()
        flow.response = None
        flow.request.path = "/stub/v1/responses"
        http_.requestheaders(flow)
        http_.request(flow)
        view = flow.metadata[VIEW_KEY]
        assert (view.websocket, view.path, view.route.name) == (True, "/v1/responses", "stub")


async def test_a_failure_is_named_and_a_timeout_answered(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        http_ = t.addon(Http)
        flow = model_flow()
        http_.requestheaders(flow)
        http_.request(flow)
        # The deadline fired: modeltap closed the upstream while waiting for a byte.
        flow.metadata[DEADLINE_KEY] = Deadline("waiting", 0.0, expired="first_byte")
        flow.error = tflow.terr("connection closed")
        http_.error(flow)
        (error,) = t.events("error")
        assert error["error"] == "upstream_timeout"
        page = http_addon._error_page(502, "upstream gone")
        assert page.startswith(b"HTTP/1.1 504") and b"modeltap_upstream_timeout" in page
        # Only once: the next error page is mitmproxy's own failure, in JSON.
        assert b"modeltap_upstream_error" in http_addon._error_page(502, "gone")


async def test_response_trailers_are_dropped_for_http1_clients(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        flow = tflow.tflow(resp=True)
        flow.response.trailers = http.Headers(x_t="1")
        t.addon(Http).response(flow)
        assert flow.response.trailers is None


async def test_a_tunnel_to_the_control_listener_is_refused(tmp_path: Path) -> None:
    with tap(tmp_path, mode="regular") as t:
        control = t.run.control_address
        assert control is not None
        flow = tflow.tflow()
        flow.request = tutils.treq(method=b"CONNECT", host=control[0], port=control[1], path=b"")
        t.addon(Http).http_connect(flow)
        assert flow.response is not None and flow.response.status_code == 403
        elsewhere = tflow.tflow()
        elsewhere.request = tutils.treq(method=b"CONNECT", host="example.com", port=443, path=b"")
        t.addon(Http).http_connect(elsewhere)
        assert elsewhere.response is None


async def test_a_body_past_max_body_while_it_arrives_is_refused(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        http_ = t.addon(Http)
        flow = model_flow()
        http_.requestheaders(flow)
        http_.modeltap_request_too_large(flow)  # request_limit's hook
        assert flow.response is not None and flow.response.status_code == 413
        assert t.events("rejected")[0]["rule"] == "body_too_large"
        http_.modeltap_request_too_large(flow)  # answered already: once
        assert len(t.events("rejected")) == 1


# ---------------------------------------------------------------- regular mode: the connection


class Resolver:
    """A DNS that answers a name with the next of its answers (a rebinding one)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, *answers: str) -> None:
        self.answers = list(answers)
        self.asked = 0
        real = socket.getaddrinfo

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            if host != name:
                return real(host, port, *args, **kwargs)
            address = self.answers[min(self.asked, len(self.answers) - 1)]
            self.asked += 1
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            return [(family, socket.SOCK_STREAM, 6, "", (address, port))]

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


async def test_a_connection_landing_on_the_control_listener_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head was judged on the name's first answer (elsewhere); the connection
    is judged on what it resolves to when mitmproxy connects (here)."""
    resolver = Resolver(monkeypatch, "rebind.test", "127.0.0.1")
    with tap(tmp_path, mode="regular") as t:
        assert t.run.control_address is not None
        port = t.run.control_address[1]
        for host in ("rebind.test", "127.1", "[::ffff:127.0.0.1]", "0"):
            server = connection.Server(address=(host, port))
            data = ServerConnectionHookData(server=server, client=tflow.tclient_conn())
            hooked = t.addon(Http).server_connect(data)
            assert hooked is not None
            await hooked
            assert server.error is not None, host  # killed before it connects
    assert resolver.asked == 1


async def test_a_connection_to_the_control_port_is_pinned_to_the_address_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked on one answer, connected on another would be a rebinding gap:
    mitmproxy connects to the address that was checked, the name kept for TLS."""
    resolver = Resolver(monkeypatch, "rebind.test", "203.0.113.9", "127.0.0.1")
    with tap(tmp_path, mode="regular") as t:
        assert t.run.control_address is not None
        port = t.run.control_address[1]
        server = connection.Server(address=("rebind.test", port))
        data = ServerConnectionHookData(server=server, client=tflow.tclient_conn())
        hooked = t.addon(Http).server_connect(data)
        assert hooked is not None
        await hooked
        assert server.error is None
        assert (server.address, server.sni) == (("203.0.113.9", port), "rebind.test")
        # Any other port can never be the listener: mitmproxy resolves and connects itself.
        elsewhere = connection.Server(address=("rebind.test", 443))
        other = ServerConnectionHookData(server=elsewhere, client=tflow.tclient_conn())
        assert t.addon(Http).server_connect(other) is None
        assert elsewhere.address == ("rebind.test", 443)
    assert resolver.asked == 1


async def test_reverse_mode_routes_are_never_pinned(tmp_path: Path) -> None:
    with tap(tmp_path) as t:
        assert t.run.control_address is not None
        server = connection.Server(address=("127.0.0.1", t.run.control_address[1]))
        data = ServerConnectionHookData(server=server, client=tflow.tclient_conn())
        assert t.addon(Http).server_connect(data) is None  # the operator's routes
