"""The HTTP audit end to end: real SDKs -> modeltap -> the upstream stub.

Expected record values are written here by hand from the request each test
sends (hashes computed once from the texts shown beside them), never by the
code under test.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import ssl
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx2 as httpx
import openai
import orjson
import pytest

from tests.conftest import Running, intercepting_proxy, proxy_ca
from tests.upstream import (
    Reply,
    anthropic_text_json,
    anthropic_tool_json,
    chat_chunk,
    chat_text_json,
    responses_text_json,
    responses_tool_json,
)

KEY = "sk-test-PLANTED-SECRET-0123456789"
PNG = "data:image/png;base64,iVBORw0KGgo="
MARKER = "CONTENT-MARKER-7f3a"

# sha256("You are a careful agent.\n\nUse tools when helpful.\n\nAnswer briefly.")
CHAT_SHA = "e44cbfb77d5a12f27fccd9e2164896f583f036af96a9a5074dab7400f20b44ba"
# sha256("Be precise.\n\nDev A\n\nDev B")
RESP_SHA = "e60abef04d957191b12bc02e880886b311515a8c316c2954d792698b5b135299"
# sha256("Sys one\n\nSys two")
ANTH_SHA = "ca553bc30215ec73d1500314e71b1beaf6e5eefd9948901e1f0559d5c9b74833"
EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def oai(running: Running, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=running.base() + "/v1", api_key=KEY, max_retries=0, **kw)


def anth(running: Running, **kw: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=running.base(), api_key=KEY, max_retries=0, **kw)


def fn_tool(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": {}}},
    }


CHAT_MESSAGES: list[Any] = [
    {"role": "system", "content": "You are a careful agent."},
    {
        "role": "developer",
        "content": [
            {"type": "text", "text": "Use tools when helpful."},
            {"type": "text", "text": "Answer briefly."},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in these?"},
            {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}},
            {"type": "image_url", "image_url": {"url": "https://example.invalid/b.png"}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q":"x"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "result text"},
]

RESP_INPUT: list[Any] = [
    {
        "role": "developer",
        "content": [
            {"type": "input_text", "text": "Dev A"},
            {"type": "input_text", "text": "Dev B"},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": PNG, "detail": "high"},
        ],
    },
    {"type": "function_call", "call_id": "call_9", "name": "lookup", "arguments": "{}"},
    {
        "type": "function_call_output",
        "call_id": "call_9",
        # An image inside a tool output counts too (114 bytes as compact JSON).
        "output": [
            {"type": "input_text", "text": "see image"},
            {"type": "input_image", "image_url": PNG},
        ],
    },
]
RESP_TOOLS: list[Any] = [
    {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}},
    {"type": "web_search"},
]

ANTH_SRC = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
ANTH_MESSAGES: list[Any] = [
    {
        "role": "user",
        "content": [{"type": "text", "text": "hi"}, {"type": "image", "source": ANTH_SRC}],
    },
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"}}],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                # 120 bytes as compact JSON; the image inside counts.
                "content": [{"type": "text", "text": "ok"}, {"type": "image", "source": ANTH_SRC}],
            }
        ],
    },
]
ANTH_SYSTEM: list[Any] = [
    {"type": "text", "text": "Sys one", "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "Sys two"},
]
ANTH_TOOLS: list[Any] = [
    {"name": "lookup", "input_schema": {"type": "object", "properties": {}}},
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
]


def check_common(rec: dict[str, Any], running: Running, *, api: str, path: str) -> None:
    upstream = running.upstream.received[-1]
    assert rec["transport"] == "http"
    assert rec["api"] == api
    assert rec["route"] == "stub"
    assert rec["upstream"] == running.upstream.url
    assert rec["path"] == path
    assert upstream.path == path
    assert rec["body_bytes"] == len(upstream.raw)
    import hashlib

    assert rec["body_sha256"] == hashlib.sha256(upstream.raw).hexdigest()
    assert rec["seq"] == 1
    assert rec["session_id"] == rec["run_id"]
    assert rec["ts"].endswith("Z")
    assert rec["request_id"]  # the SDK's or the proxy's id; checked exactly below


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions_record(running: Running, stream: bool) -> None:
    client = oai(running)
    kwargs: dict[str, Any] = dict(
        model="gpt-5",
        messages=CHAT_MESSAGES,
        tools=[fn_tool("lookup"), fn_tool("write_file")],
        reasoning_effort="low",
    )
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **kwargs))
        assert chunks
    else:
        out = client.chat.completions.create(**kwargs)
        assert out.choices[0].message.content == "Hello from the stub."
    (rec,) = running.audit()
    check_common(rec, running, api="openai.chat_completions", path="/v1/chat/completions")
    expected = {
        "model": "gpt-5",
        "tool_names": ["lookup", "write_file"],
        "reasoning_effort": "low",
        "thinking": None,
        "image_details": ["low", None],
        "image_count": 2,
        "instructions_sha256": CHAT_SHA,
        "stream": stream,
        "hosted_tools": [],
        "tool_results": [{"call_id": "call_1", "bytes": 11, "is_error": None}],
        "previous_response_id": None,
        "generate": None,
        "omitted_settings": [],
    }
    assert {k: rec[k] for k in expected} == expected


@pytest.mark.parametrize("stream", [False, True])
def test_responses_record(running: Running, stream: bool) -> None:
    client = oai(running)
    kwargs: dict[str, Any] = dict(
        model="gpt-5.1",
        instructions="Be precise.",
        input=RESP_INPUT,
        tools=RESP_TOOLS,
        reasoning={"effort": "medium"},
        previous_response_id="resp_prev",
    )
    if stream:
        events = list(client.responses.create(stream=True, **kwargs))
        assert events[-1].type == "response.completed"
    else:
        out = client.responses.create(**kwargs)
        assert out.id == "resp_stub1"
    (rec,) = running.audit()
    check_common(rec, running, api="openai.responses", path="/v1/responses")
    expected = {
        "model": "gpt-5.1",
        "tool_names": ["lookup"],
        "reasoning_effort": "medium",
        "thinking": None,
        "image_details": ["high", None],
        "image_count": 2,
        "instructions_sha256": RESP_SHA,
        "stream": stream,
        "hosted_tools": [{"type": "web_search", "name": None}],
        "tool_results": [{"call_id": "call_9", "bytes": 114, "is_error": None}],
        "previous_response_id": "resp_prev",
        "generate": None,
        "omitted_settings": [],
    }
    assert {k: rec[k] for k in expected} == expected


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_messages_record(running: Running, stream: bool) -> None:
    client = anth(running)
    kwargs: dict[str, Any] = dict(
        model="claude-stub-1",
        max_tokens=4096,
        system=ANTH_SYSTEM,
        messages=ANTH_MESSAGES,
        tools=ANTH_TOOLS,
        thinking={"type": "enabled", "budget_tokens": 2048},
        extra_body={"output_config": {"effort": "high"}},
    )
    if stream:
        with client.messages.stream(**kwargs) as s:
            final = s.get_final_message()
        assert final.stop_reason == "end_turn"
    else:
        out = client.messages.create(**kwargs)
        assert out.content[0].type == "text"
    (rec,) = running.audit()
    check_common(rec, running, api="anthropic.messages", path="/v1/messages")
    expected = {
        "model": "claude-stub-1",
        "tool_names": ["lookup"],
        "reasoning_effort": "high",
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "image_details": [None, None],
        "image_count": 2,
        "instructions_sha256": ANTH_SHA,
        "stream": stream,
        "hosted_tools": [{"type": "web_search_20250305", "name": "web_search"}],
        "tool_results": [{"call_id": "toolu_1", "bytes": 120, "is_error": False}],
        "previous_response_id": None,
        "generate": None,
        "omitted_settings": [],
    }
    assert {k: rec[k] for k in expected} == expected


def test_request_id_from_client_header(running: Running) -> None:
    client = oai(running)
    client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-client-request-id": "req-abc-1"},
    )
    (rec,) = running.audit()
    assert rec["request_id"] == "req-abc-1"
    assert rec["instructions_sha256"] == EMPTY_SHA  # no instructions hashes ""
    assert rec["tool_names"] == []


def test_session_header_read_and_removed(running: Running) -> None:
    client = oai(running)
    client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-modeltap-session": "eval-42"},
    )
    (rec,) = running.audit()
    assert rec["session_id"] == "eval-42"
    assert "x-modeltap-session" not in {k.lower() for k in running.upstream.received[0].headers}


def test_claude_code_shape_query_string_and_head_preflight(running: Running) -> None:
    """Claude Code sends HEAD / first, then POST /v1/messages?beta=true."""
    head = httpx.head(running.base())
    assert head.status_code == 200
    client = anth(running)
    client.messages.create(
        model="claude-stub-2",
        max_tokens=10,
        messages=[{"role": "user", "content": "hi"}],
        extra_query={"beta": "true"},
    )
    (rec,) = running.audit()
    assert rec["path"] == "/v1/messages?beta=true"
    (unaudited,) = running.events("unaudited")
    assert (unaudited["method"], unaudited["path"], unaudited["status"]) == ("HEAD", "/", 200)


def test_models_listing_passes_unaudited_even_when_strict(
    start_proxy: Callable[..., Running],
) -> None:
    running = start_proxy(strict=True)
    models = oai(running).models.list()
    assert [m.id for m in models] == ["stub-model"]
    assert running.audit() == []
    (ev,) = running.events("unaudited")
    assert (ev["method"], ev["path"], ev["status"]) == ("GET", "/v1/models", 200)


def test_other_requests_unaudited_or_refused_when_strict(
    start_proxy: Callable[..., Running],
) -> None:
    lax = start_proxy()
    ok = oai(lax).post("/embeddings", cast_to=httpx.Response, body={"model": "e", "input": "x"})
    assert ok.status_code == 200
    (ev,) = lax.events("unaudited")
    assert (ev["method"], ev["path"]) == ("POST", "/v1/embeddings")

    strict = start_proxy(strict=True)
    n = len(strict.upstream.received)
    with pytest.raises(openai.BadRequestError) as exc:
        oai(strict).post("/embeddings", cast_to=httpx.Response, body={"model": "e", "input": "x"})
    assert exc.value.code == "modeltap_rejected"
    assert len(strict.upstream.received) == n
    (rej,) = strict.events("rejected")
    assert rej["rule"] == "strict_unaudited"


def test_gzip_request_body_audited_and_forwarded_unchanged(running: Running) -> None:
    body = orjson.dumps({"model": "gpt-5", "messages": [{"role": "system", "content": "S"}]})
    packed = gzip.compress(body)
    r = httpx.post(
        running.base() + "/v1/chat/completions",
        content=packed,
        headers={"content-encoding": "gzip", "content-type": "application/json"},
    )
    assert r.status_code == 200
    (rec,) = running.audit()
    assert rec["model"] == "gpt-5"
    # sha256("S")
    assert rec["instructions_sha256"] == (
        "8de0b3c47f112c59745f717a626932264c422a7563954872e237b223af4ad643"
    )
    assert running.upstream.received[0].raw == packed
    assert rec["body_bytes"] == len(packed)


def test_image_detail_rewrite(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy(image_detail="low")
    oai(running).chat.completions.create(model="gpt-5", messages=CHAT_MESSAGES)
    (rec,) = running.audit()
    assert rec["image_details"] == ["low", "low"]
    sent = running.upstream.received[0].json()
    parts = sent["messages"][2]["content"]
    assert [p["image_url"].get("detail") for p in parts[1:]] == ["low", "low"]


def test_regular_mode_forward_proxy(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy(mode="regular")
    proxied = httpx.Client(proxy=running.url)
    client = openai.OpenAI(
        base_url=running.upstream.url + "/v1", api_key=KEY, http_client=proxied, max_retries=0
    )
    client.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "x"}])
    (rec,) = running.audit()
    assert rec["route"] == "stub"
    assert rec["path"] == "/v1/chat/completions"


def test_regular_mode_https_interception(tmp_path: Any) -> None:
    """HTTPS_PROXY agents: CONNECT, mitmproxy's CA, a TLS upstream; audited the same."""
    from tests.upstream import Upstream, self_signed_tls

    with Upstream(tls=self_signed_tls()) as tls_upstream:
        # The stub's certificate is self-signed; mitmproxy's CA lives in tmp_path.
        with intercepting_proxy(tmp_path, [f"secure={tls_upstream.url}"]) as proxy:
            ca = proxy_ca(tmp_path)
            client = openai.OpenAI(
                base_url=tls_upstream.url + "/v1",
                api_key=KEY,
                max_retries=0,
                http_client=httpx.Client(
                    proxy=proxy.url, verify=ssl.create_default_context(cafile=str(ca))
                ),
            )
            out = client.chat.completions.create(model="gpt-5", messages=[])
            assert out.choices[0].message.content == "Hello from the stub."
        lines = (tmp_path / "out" / "audit.jsonl").read_bytes().splitlines()
        (rec,) = [orjson.loads(line) for line in lines]
        assert (rec["route"], rec["upstream"], rec["path"]) == (
            "secure",
            tls_upstream.url,
            "/v1/chat/completions",
        )
        assert len(tls_upstream.received) == 1


# ---------------------------------------------------------------- refusals


class Rewrite(httpx.HTTPTransport):
    """A transport that alters the SDK's request on its way out, to send what
    no well-behaved SDK would (invalid JSON, a lying content-encoding)."""

    def __init__(self, body: bytes | None = None, headers: dict[str, str] | None = None):
        super().__init__()
        self.body, self.headers = body, headers or {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.body is not None:
            request = httpx.Request(
                request.method,
                request.url,
                headers={
                    **dict(request.headers),
                    "content-length": str(len(self.body)),
                    **self.headers,
                },
                content=self.body,
            )
        return super().handle_request(request)


def _chat(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt-5",
        "messages": [{"role": "user", "content": MARKER}],
    }
    body.update(over)
    return body


REFUSALS: list[tuple[str, dict[str, Any], bytes | None, dict[str, str]]] = [
    ("invalid_json", _chat(), b'{"model": "gpt-5", "messages": [' + MARKER.encode(), {}),
    ("body_not_object", _chat(), b'["' + MARKER.encode() + b'"]', {}),
    ("missing_model", _chat(model=""), None, {}),
    ("messages_and_input", _chat(input=MARKER), None, {}),
    (
        "instructions_not_text",
        _chat(
            messages=[
                {"role": "system", "content": [{"type": "image_url", "image_url": {"url": PNG}}]},
                {"role": "user", "content": MARKER},
            ]
        ),
        None,
        {},
    ),
    ("malformed_tools", _chat(tools=MARKER), None, {}),
    (
        "tool_without_name",
        _chat(tools=[{"type": "function", "function": {"description": MARKER}}]),
        None,
        {},
    ),
    (
        "malformed_image",
        _chat(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": 5, "detail": MARKER}}],
                }
            ]
        ),
        None,
        {},
    ),
    ("undecodable_content_encoding", _chat(), orjson.dumps(_chat()), {"content-encoding": "gzip"}),
]


@pytest.mark.parametrize(("rule", "body", "raw", "headers"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusal_openai(
    running: Running, rule: str, body: dict[str, Any], raw: bytes | None, headers: dict[str, str]
) -> None:
    http_client = httpx.Client(transport=Rewrite(raw, headers)) if raw is not None else None
    client = oai(running, http_client=http_client) if http_client else oai(running)
    with pytest.raises(openai.BadRequestError) as exc:
        client.post("/chat/completions", cast_to=httpx.Response, body=body)
    err = exc.value
    assert err.status_code == 400
    assert err.code == "modeltap_rejected"
    assert err.type == "invalid_request_error"
    assert f"rule {rule}" in err.message
    assert MARKER not in err.message
    assert running.upstream.received == []
    assert running.audit() == []
    (ev,) = running.events("rejected")
    assert (ev["rule"], ev["status"], ev["method"], ev["path"]) == (
        rule,
        400,
        "POST",
        "/v1/chat/completions",
    )
    assert MARKER not in (running.out / "events.jsonl").read_text()


@pytest.mark.parametrize(
    ("rule", "over"),
    [
        ("instructions_not_text", {"system": [{"type": "image", "source": ANTH_SRC}]}),
        ("tool_without_name", {"tools": [{"input_schema": {"description": MARKER}}]}),
        (
            "malformed_image",
            {"messages": [{"role": "user", "content": [{"type": "image", "source": MARKER}]}]},
        ),
        ("messages_and_input", {"input": MARKER}),
    ],
)
def test_refusal_anthropic(running: Running, rule: str, over: dict[str, Any]) -> None:
    body: dict[str, Any] = {
        "model": "claude-x",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": MARKER}],
    }
    body.update(over)
    with pytest.raises(anthropic.BadRequestError) as exc:
        anth(running).post("/v1/messages", cast_to=httpx.Response, body=body)
    err = exc.value
    assert err.status_code == 400
    assert isinstance(err.body, dict)
    assert err.body["type"] == "error"
    assert err.body["error"]["type"] == "invalid_request_error"
    assert f"rule {rule}" in err.body["error"]["message"]
    assert MARKER not in err.message
    assert running.upstream.received == []
    assert running.audit() == []
    (ev,) = running.events("rejected")
    assert ev["rule"] == rule


def test_body_too_large_is_413(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy(max_body="1k")
    with pytest.raises(openai.APIStatusError) as exc:
        oai(running).chat.completions.create(
            model="gpt-5", messages=[{"role": "user", "content": MARKER * 200}]
        )
    assert exc.value.status_code == 413
    assert "rule body_too_large" in exc.value.message
    assert running.upstream.received == []
    assert running.audit() == []
    (ev,) = running.events("rejected")
    assert (ev["rule"], ev["status"]) == ("body_too_large", 413)


def test_fail_closed_refuses_rest_of_session(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy(fail_closed=True)
    client = oai(running)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="",
            messages=[{"role": "user", "content": "x"}],
            extra_headers={"x-modeltap-session": "s1"},
        )
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(
            model="gpt-5",
            messages=[{"role": "user", "content": "x"}],
            extra_headers={"x-modeltap-session": "s1"},
        )
    assert "rule fail_closed" in exc.value.message
    # Another session is unaffected.
    client.chat.completions.create(
        model="gpt-5",
        messages=[{"role": "user", "content": "x"}],
        extra_headers={"x-modeltap-session": "s2"},
    )
    assert [r["session_id"] for r in running.audit()] == ["s2"]
    assert [e["rule"] for e in running.events("rejected")] == ["missing_model", "fail_closed"]
    assert len(running.upstream.received) == 1


def test_unwritable_audit_file_refuses_with_503(running: Running) -> None:
    audit = running.out / "audit.jsonl"
    running.proxy.core.sink.audit.close()  # type: ignore[union-attr]
    audit.mkdir()  # a directory where the file should be: every open fails
    with pytest.raises(openai.InternalServerError) as exc:
        oai(running).chat.completions.create(
            model="gpt-5", messages=[{"role": "user", "content": "x"}]
        )
    assert exc.value.status_code == 503
    assert "rule audit_write_failed" in exc.value.message
    assert running.upstream.received == []
    audit.rmdir()  # fixed: the proxy recovers by itself
    oai(running).chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "x"}])
    assert len(running.audit()) == 1
    assert len(running.upstream.received) == 1


# ---------------------------------------------------------------- concurrency, secrets, streams


def test_500_requests_16_in_flight(running: Running) -> None:
    client = oai(running)

    def one(i: int) -> None:
        client.chat.completions.create(
            model=f"model-{i}",
            messages=[{"role": "user", "content": "x"}],
            extra_headers={"x-client-request-id": f"req-{i}"},
        )

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(500)))
    lines = (running.out / "audit.jsonl").read_bytes().splitlines()
    assert len(lines) == 500
    records = [json.loads(line) for line in lines]  # every line whole JSON
    assert len({r["seq"] for r in records}) == 500
    for r in records:
        i = r["request_id"].removeprefix("req-")
        assert r["model"] == f"model-{i}"
    assert sorted(int(r["request_id"][4:]) for r in records) == list(range(500))


def test_no_key_in_any_file_or_output(
    start_proxy: Callable[..., Running], capfd: pytest.CaptureFixture[str]
) -> None:
    running = start_proxy(quiet=False)
    oai(running).chat.completions.create(
        model="gpt-5",
        messages=[{"role": "user", "content": "x"}],
        extra_headers={"api-key": KEY, "cookie": f"session={KEY}"},
        extra_query={"key": KEY},
    )
    anth(running).messages.create(
        model="claude-x", max_tokens=5, messages=[{"role": "user", "content": "x"}]
    )
    httpx.get(running.base() + "/v1/other", params={"key": KEY}, headers={"authorization": KEY})
    with pytest.raises(openai.BadRequestError):
        oai(running).chat.completions.create(
            model="", messages=[{"role": "user", "content": "x"}], extra_query={"api_key": KEY}
        )
    running.proxy.stop()
    # The upstream did get the keys (they are forwarded), so the plant was real.
    assert any(KEY in str(r.headers) for r in running.upstream.received)
    out, err = capfd.readouterr()
    assert "chat" in err  # the per-exchange lines were printed
    for f in running.out.iterdir():
        assert KEY not in f.read_text(), f.name
    assert KEY not in out and KEY not in err
    (rec, _) = running.audit()
    assert rec["path"] == "/v1/chat/completions?key=REDACTED"


def test_stream_first_event_not_buffered(running: Running) -> None:
    """The first SSE event reaches the client while the upstream still pauses."""
    import threading

    gate = threading.Event()
    reply = Reply(
        sse=[
            (None, chat_chunk("first", model="m")),
            (None, chat_chunk(None, "stop", model="m")),
            (None, "[DONE]"),
        ],
        gate_after={0: gate},
    )
    running.upstream.replies.append(reply)
    stream = oai(running).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], stream=True
    )
    it = iter(stream)
    first = next(it)  # would block until the gate opens if the proxy buffered
    assert first.choices[0].delta.content == "first"
    assert not gate.is_set()
    gate.set()
    rest = list(it)
    assert rest[-1].choices[0].finish_reason == "stop"


def test_upstream_stub_serves_default_json(running: Running) -> None:
    """Guard for the stub itself: the canned answer round-trips through the SDK."""
    running.upstream.replies.append(chat_text_json("gpt-x", text="canned"))
    out = oai(running).chat.completions.create(model="m", messages=[])
    assert out.choices[0].message.content == "canned"


def test_large_body_hashed_off_thread_matches_forwarded_bytes(running: Running) -> None:
    """Bodies over HASH_IN_THREAD_BYTES take the worker-thread hash path."""
    import base64
    import hashlib

    from modeltap.core.body_audit import HASH_IN_THREAD_BYTES

    image = "data:image/png;base64," + base64.b64encode(b"\x89PNG" * HASH_IN_THREAD_BYTES).decode()
    oai(running).chat.completions.create(
        model="gpt-5",
        messages=[
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}}]}
        ],
    )
    (rec,) = running.audit()
    raw = running.upstream.received[0].raw
    assert rec["body_bytes"] == len(raw) > HASH_IN_THREAD_BYTES
    assert rec["body_sha256"] == hashlib.sha256(raw).hexdigest()
    assert rec["image_details"] == [None]


def test_large_chunked_body_is_hashed_whole(running: Running) -> None:
    """A large body without Content-Length (chunked) is not hashed as it arrives;
    its audit line still carries the SHA-256 of exactly what was forwarded."""
    import base64

    from modeltap.core.body_audit import HASH_IN_THREAD_BYTES

    image = "data:image/png;base64," + base64.b64encode(b"\x89PNG" * HASH_IN_THREAD_BYTES).decode()
    body = orjson.dumps(
        {
            "model": "gpt-5",
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}}]}
            ],
        }
    )

    def pieces() -> Any:
        for start in range(0, len(body), 300_000):
            yield body[start : start + 300_000]

    response = httpx.post(
        running.base() + "/v1/chat/completions",
        content=pieces(),
        headers={"content-type": "application/json", "authorization": "Bearer sk-test"},
        timeout=30,
    )
    assert response.status_code == 200
    (rec,) = running.audit()
    raw = running.upstream.received[0].raw
    assert raw == body
    assert rec["body_bytes"] == len(body)
    assert rec["body_sha256"] == hashlib.sha256(body).hexdigest()


def test_a_bug_in_the_core_refuses_instead_of_forwarding(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mitmproxy forwards a request whose hook raised; modeltap must not let that happen."""
    from modeltap.apis import openai_chat

    def broken(body: Any) -> Any:
        raise TypeError("unhashable type: 'list'")

    monkeypatch.setattr(openai_chat, "audit_request", broken)
    with pytest.raises(openai.InternalServerError) as exc:
        oai(running).chat.completions.create(model="gpt-5", messages=[])
    assert exc.value.status_code == 500
    assert "rule audit_internal_error" in exc.value.message
    assert running.upstream.received == []
    assert running.audit() == []
    (ev,) = running.events("rejected")
    assert ev["rule"] == "audit_internal_error"


# --------------------------------------------------------------------------
# Continuations of server-held state over HTTP (SPEC 2): recorded as sent


def test_anthropic_tool_runner_thread_continue_is_recorded_as_sent(running: Running) -> None:
    """The anthropic SDK's own tool runner: turn 1 creates a thread with system and
    tools, turn 2 continues it with only the tool result."""

    @anthropic.beta_tool
    def lookup(q: str, n: int) -> str:
        """Look something up.

        Args:
            q: what.
            n: how many.
        """
        return f"{n} results for {q}"

    running.upstream.replies.extend(
        [anthropic_tool_json("claude-x"), anthropic_text_json("claude-x")]
    )
    client = anthropic.Anthropic(base_url=running.base(), api_key="k", max_retries=0)
    runner = client.beta.messages.tool_runner(
        model="claude-x",
        max_tokens=1024,
        system="Be brief.",
        tools=[lookup],
        messages=[{"role": "user", "content": "weather?"}],
    )
    assert [m.stop_reason for m in runner] == ["tool_use", "end_turn"]
    sent = [r.json() for r in running.upstream.received]
    assert [s["thread"]["type"] for s in sent] == ["create", "continue"]
    assert "system" not in sent[1] and "tools" not in sent[1]
    first, second = running.audit()
    assert first["omitted_settings"] == [] and first["tool_names"] == ["lookup"]
    assert first["instructions_sha256"] == hashlib.sha256(b"Be brief.").hexdigest()
    assert second["omitted_settings"] == ["instructions", "tools"]
    assert second["instructions_sha256"] is None and second["tool_names"] is None
    assert second["tool_results"] == [
        {"call_id": "toolu_lookup1", "bytes": len("3 results for weather"), "is_error": False}
    ]


def test_responses_previous_response_id_without_system_is_recorded_as_sent(
    running: Running,
) -> None:
    """What LangChain's ChatOpenAI(use_previous_response_id=True) sends after turn 1:
    the tool output and the tools again, no system message."""
    running.upstream.replies.extend([responses_tool_json("gpt-5"), responses_text_json("gpt-5")])
    client = openai.OpenAI(base_url=running.base() + "/v1", api_key="k", max_retries=0)
    tools: Any = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    first = client.responses.create(
        model="gpt-5",
        input=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "weather?"}],
        tools=tools,
    )
    client.responses.create(
        model="gpt-5",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": "call_lookup3", "output": "sunny"}],
        tools=tools,
    )
    one, two = running.audit()
    assert one["omitted_settings"] == [] and one["instructions_sha256"] is not None
    assert two["previous_response_id"] == first.id
    assert two["omitted_settings"] == ["instructions"]
    assert two["instructions_sha256"] is None and two["tool_names"] == ["lookup"]


# ---------------------------------------------------------------- a base URL without the route


def test_a_base_url_without_the_route_gets_each_sdks_own_404_naming_the_fix(
    start_proxy: Callable[..., Running], upstream: Any
) -> None:
    """The usual first mistake: the proxy's address as the base URL, without
    the route's prefix. Each SDK gets a 404 in its own API's error shape,
    naming the routes and what to put in the base URL; done as it says, the
    same call goes through."""
    from google import genai
    from google.genai import errors as genai_errors
    from google.genai import types as genai_types

    running = start_proxy(routes=[f"{n}={upstream.url}" for n in ("openai", "anthropic", "gemini")])
    routes = "Routes here: /anthropic, /gemini, /openai, /stub"
    # OpenAI's SDK, as its docs write the base URL (…/v1): OpenAI's error body.
    with pytest.raises(openai.NotFoundError) as oai_error:
        openai.OpenAI(
            base_url=f"{running.url}/v1", api_key=KEY, max_retries=0
        ).chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": MARKER}])
    body = oai_error.value.body
    assert isinstance(body, dict) and set(body) == {"message", "type", "param", "code"}
    assert body["code"] == "modeltap_no_route"
    message = body["message"]
    assert (
        "(an openai.chat_completions endpoint): put /openai right after this proxy's address"
        in message
    )
    assert routes in message and MARKER not in message and "/v1/chat" not in message
    fixed = openai.OpenAI(base_url=f"{running.url}/openai/v1", api_key=KEY, max_retries=0)
    assert fixed.chat.completions.create(model="gpt-5", messages=[]).choices
    # Anthropic's SDK at the bare address: Anthropic's error body.
    with pytest.raises(anthropic.NotFoundError) as anth_error:
        anthropic.Anthropic(base_url=running.url, api_key=KEY, max_retries=0).messages.create(
            model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    anth_body = anth_error.value.body
    assert isinstance(anth_body, dict) and anth_body["type"] == "error"
    assert "put /anthropic right after this proxy's address" in anth_body["error"]["message"]
    fixed_anth = anthropic.Anthropic(
        base_url=f"{running.url}/anthropic", api_key=KEY, max_retries=0
    )
    assert fixed_anth.messages.create(model="claude-x", max_tokens=8, messages=[]).content

    # google-genai at the bare address: Google's error body (code, status, message).
    def gemini(base: str) -> genai.Client:
        options = genai_types.HttpOptions(base_url=base, retry_options=None)
        return genai.Client(api_key="AIza-test", http_options=options)

    bare = gemini(running.url)  # (kept: a client dropped at once closes its connection)
    with pytest.raises(genai_errors.ClientError) as gem_error:
        bare.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert gem_error.value.code == 404 and gem_error.value.status == "NOT_FOUND"
    assert "put /gemini right after this proxy's address" in (gem_error.value.message or "")
    assert "gemini-2.5-flash" not in (gem_error.value.message or "")  # the path's model: not said
    fixed_gemini = gemini(f"{running.url}/gemini")
    assert fixed_gemini.models.generate_content(model="gemini-2.5-flash", contents="hi").text
    # Each 404 is an unaudited line; only the fixed calls were audited.
    assert [e["status"] for e in running.events("unaudited")] == [404, 404, 404]
    assert len(running.audit()) == 3


def test_a_path_of_no_route_and_no_wire_lists_the_routes(running: Running) -> None:
    reply = httpx.post(f"{running.url}/v2/elsewhere", json={})
    assert reply.status_code == 404
    error = reply.json()["error"]
    assert error["code"] == "modeltap_no_route"
    assert "routes here: /anthropic, /gemini, /openai, /stub" in error["message"]
    # Bedrock's path, and no route serves Bedrock: says how to add one.
    reply = httpx.post(f"{running.url}/model/m/converse", json={})
    assert "no route here serves it: add one with --route NAME=URL" in reply.text


def test_an_sdk_at_another_apis_route_is_told_the_upstream_refused_the_path(
    start_proxy: Callable[..., Running],
) -> None:
    """The Anthropic SDK pointed at an OpenAI route: the upstream answers 404
    in OpenAI's error shape. ``check`` and ``report`` say the upstream refused
    the path, not that a Message had no content list."""
    from tests.cli_process import cli_main

    running = start_proxy(session="wrong-api")
    openai_404 = {
        "error": {"message": "Invalid URL", "type": "invalid_request_error", "param": None},
    }
    running.upstream.replies.append(Reply(status=404, json=openai_404))
    claude = anthropic.Anthropic(base_url=running.base(), api_key=KEY, max_retries=0)
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="claude-x", max_tokens=8, messages=[])
    running.proxy.stop()
    said = (
        "[turn 1] the upstream answered HTTP 404, not in this API's error shape: it refused "
        "the path (wrong base URL, or another API's route?)"
    )
    check = cli_main("check", str(running.out))
    assert check.returncode == 1
    assert said in check.stdout.splitlines()[-2].strip()
    assert "content list" not in check.stdout + cli_main("report", str(running.out)).stdout
    assert f"events    partial      {said}" in cli_main("report", str(running.out)).stdout
