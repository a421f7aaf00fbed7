"""Spans end to end: real SDKs -> modeltap -> stub, spans -> a real OTLP receiver."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import openai
import pytest

from modeltap.evidence.cost import SOURCE as COST_SOURCE
from tests.conftest import Running
from tests.otlp_receiver import GrpcReceiver, HttpReceiver, ReceivedSpan

pytest_plugins = ["tests.otlp_fixtures"]

MARKER = "PROMPT-TEXT-MARKER-91c2"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def otlp_url(receiver: HttpReceiver | GrpcReceiver) -> str:
    return receiver.grpc_url if isinstance(receiver, GrpcReceiver) else receiver.endpoint


def client(running: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=running.base() + "/v1", api_key="sk-x", max_retries=0)


def by_name(spans: list[ReceivedSpan], pattern: str) -> list[ReceivedSpan]:
    return [s for s in spans if re.fullmatch(pattern, s.name)]


def children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return sorted(
        (s for s in spans if s.parent_span_id == parent.span_id), key=lambda s: s.start_ns
    )


def test_exchange_spans_one_trace_per_session(
    start_proxy: Callable[..., Running], otlp_receiver: HttpReceiver | GrpcReceiver
) -> None:
    running = start_proxy(otlp=otlp_url(otlp_receiver))
    c = client(running)
    session = {"x-modeltap-session": "s1"}
    messages: Any = [{"role": "user", "content": MARKER}]
    c.chat.completions.create(model="gpt-5", messages=messages, extra_headers=session)
    list(
        c.chat.completions.create(
            model="gpt-5",
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
            reasoning_effort="low",
            extra_headers=session,
        )
    )
    c.chat.completions.create(
        model="gpt-5", messages=messages, extra_headers={"x-modeltap-session": "s2"}
    )
    running.proxy.stop()  # flushes the spans
    spans = otlp_receiver.wait_for(11)
    records = running.audit()

    exchanges = by_name(spans, "chat gpt-5")
    assert len(exchanges) == 3
    roots = {s.name: s for s in by_name(spans, "session .*")}
    assert set(roots) == {"session s1", "session s2"}
    s1 = [e for e in exchanges if e.trace_id == roots["session s1"].trace_id]
    s2 = [e for e in exchanges if e.trace_id == roots["session s2"].trace_id]
    assert len(s1) == 2 and len(s2) == 1
    assert roots["session s1"].trace_id != roots["session s2"].trace_id
    for e in exchanges:
        assert e.kind == "CLIENT"
        assert e.parent_span_id == roots[f"session {e.attributes['modeltap.session_id']}"].span_id

    plain, streamed = sorted(s1, key=lambda s: s.attributes["modeltap.seq"])
    port = int(running.upstream.url.rsplit(":", 1)[1])
    assert plain.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.conversation.id": "s1",
        "gen_ai.request.model": "gpt-5",
        "gen_ai.response.model": "gpt-5",
        "gen_ai.response.id": "chatcmpl-stub1",
        "gen_ai.usage.input_tokens": 21,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 3,
        "gen_ai.usage.reasoning.output_tokens": 0,
        "gen_ai.response.finish_reasons": ["stop"],
        "openai.api.type": "chat_completions",
        "server.address": "127.0.0.1",
        "server.port": port,
        "http.response.status_code": 200,
        "modeltap.seq": records[0]["seq"],
        "modeltap.request_id": records[0]["request_id"],
        "modeltap.session_id": "s1",
        "modeltap.instructions_sha256": records[0]["instructions_sha256"],
        # gpt-5 by the table: 18 x $1.25 + 3 cached x $0.125 + 5 x $10 per Mtok.
        "modeltap.cost.estimate_usd": pytest.approx((18 * 1.25 + 3 * 0.125 + 5 * 10) / 1e6),
        "modeltap.cost.source": COST_SOURCE,
    }
    assert streamed.attributes["gen_ai.request.stream"] is True
    assert streamed.attributes["gen_ai.request.reasoning.level"] == "low"
    assert streamed.attributes["gen_ai.usage.input_tokens"] == 9
    assert streamed.attributes["gen_ai.usage.output_tokens"] == 2
    ttfc = streamed.attributes["gen_ai.response.time_to_first_chunk"]
    assert isinstance(ttfc, float) and 0 < ttfc * 1e9 <= streamed.end_ns - streamed.start_ns

    # Phases as child spans, ordered in time, inside their exchange.
    wait, stream = children(spans, streamed)
    assert (wait.name, stream.name) == ("wait upstream", "stream")
    assert streamed.start_ns <= wait.start_ns <= wait.end_ns <= stream.start_ns
    assert stream.start_ns <= stream.end_ns <= streamed.end_ns
    assert [c.name for c in children(spans, plain)] == ["wait upstream", "receive"]

    # No prompt text anywhere without content capture.
    assert all(MARKER not in repr(s.attributes) + repr(s.events) for s in spans)


def test_traceparent_joins_the_agents_trace(
    start_proxy: Callable[..., Running], otlp_http_receiver: HttpReceiver
) -> None:
    running = start_proxy(otlp=otlp_http_receiver.endpoint)
    client(running).responses.create(
        model="gpt-5.1",
        input="hi",
        extra_headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
    )
    running.proxy.stop()
    spans = otlp_http_receiver.wait_for(3)
    (exchange,) = by_name(spans, "chat gpt-5.1")
    assert exchange.trace_id == TRACE_ID
    assert exchange.parent_span_id == PARENT_ID
    assert exchange.attributes["openai.api.type"] == "responses"
    assert by_name(spans, "session .*") == []


def test_content_capture_puts_prompt_in_spans(
    start_proxy: Callable[..., Running], otlp_http_receiver: HttpReceiver
) -> None:
    running = start_proxy(otlp=otlp_http_receiver.endpoint, capture_content=True)
    client(running).chat.completions.create(
        model="gpt-5", messages=[{"role": "user", "content": MARKER}]
    )
    running.proxy.stop()
    spans = otlp_http_receiver.wait_for(4)
    (exchange,) = by_name(spans, "chat gpt-5")
    assert MARKER in repr(exchange.attributes) + repr(exchange.events)
    assert MARKER not in (running.out / "audit.jsonl").read_text()


def test_refusal_span_has_error_type(
    start_proxy: Callable[..., Running], otlp_http_receiver: HttpReceiver
) -> None:
    running = start_proxy(otlp=otlp_http_receiver.endpoint)
    with pytest.raises(openai.BadRequestError):
        client(running).chat.completions.create(model="", messages=[])
    running.proxy.stop()
    spans = otlp_http_receiver.wait_for(2)
    (exchange,) = [s for s in spans if s.kind == "CLIENT"]
    assert exchange.status == "ERROR"
    assert exchange.attributes["error.type"] == "missing_model"
    assert exchange.attributes["http.response.status_code"] == 400


def test_websocket_connection_span_holds_one_child_per_response(
    start_proxy: Callable[..., Running], otlp_http_receiver: HttpReceiver
) -> None:
    running = start_proxy(otlp=otlp_http_receiver.endpoint)
    with client(running).responses.connect(max_retries=0) as conn:
        for _ in range(2):
            conn.send(
                {
                    "type": "response.create",
                    "model": "gpt-5",
                    "input": "hi",
                    "instructions": "x",
                    "tools": [],
                }
            )
            for event in conn:
                if event.type == "response.completed":
                    break
    running.proxy.stop()
    spans = otlp_http_receiver.wait_for(7)
    (connection,) = [s for s in spans if s.name.startswith("websocket")]
    responses = [s for s in children(spans, connection) if s.name == "chat gpt-5"]
    assert len(responses) == 2
    assert responses[0].end_ns <= responses[1].start_ns
    for r in responses:
        assert r.attributes["gen_ai.usage.input_tokens"] == 30
        assert connection.start_ns <= r.start_ns <= r.end_ns <= connection.end_ns


@pytest.mark.parametrize("collector", ["down", "hanging"])
def test_collector_down_or_hanging_does_not_touch_traffic(
    start_proxy: Callable[..., Running],
    otlp_down_port: int,
    otlp_http_receiver: HttpReceiver,
    collector: str,
) -> None:
    if collector == "down":
        url = f"http://127.0.0.1:{otlp_down_port}"
    else:
        otlp_http_receiver.hang = 30.0
        url = otlp_http_receiver.endpoint
    running = start_proxy(otlp=url)
    c = client(running)
    for i in range(20):
        out = c.chat.completions.create(model=f"m{i}", messages=[{"role": "user", "content": "x"}])
        assert out.choices[0].message.content == "Hello from the stub."
    assert [r["model"] for r in running.audit()] == [f"m{i}" for i in range(20)]
    assert len(running.events("response")) == 20
    running.proxy.stop()
    summary = running.proxy.spans.summary
    assert summary is not None
    dropped = int(re.search(r"(\d+) dropped", summary).group(1))  # type: ignore[union-attr]
    assert dropped > 0
