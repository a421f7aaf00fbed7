"""GenAI telemetry end to end: real SDKs -> modeltap -> stub; spans and metrics -> real OTLP.

What a collector receives from a proxied run, decoded from OTLP/HTTP and
OTLP/gRPC: exact attribute names and values per API (Anthropic's cached
tokens counted in ``gen_ai.usage.input_tokens``), the ``execute_tool`` spans of
a three-turn tool loop, the GenAI metric histograms with the conventions'
buckets, content in the conventions' shape, and the cost estimate on a known
model in ``events.jsonl`` and on the span.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import orjson
import pytest

from modeltap.evidence.cost import SOURCE as COST_SOURCE
from tests.conftest import Running
from tests.otlp_receiver import GrpcReceiver, HttpReceiver, ReceivedPoint, ReceivedSpan
from tests.upstream import Reply

pytest_plugins = ["tests.otlp_fixtures"]

Receiver = HttpReceiver | GrpcReceiver

SECONDS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKENS = tuple(float(4**i) for i in range(14))
SESSION = {"x-modeltap-session": "agent-run-7"}


def otlp_url(receiver: Receiver) -> str:
    return receiver.grpc_url if isinstance(receiver, GrpcReceiver) else receiver.endpoint


def openai_client(running: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=running.base() + "/v1", api_key="sk-x", max_retries=0)


def anthropic_client(running: Running) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=running.base(), api_key="sk-ant-x", max_retries=0)


def spans_after_stop(running: Running, receiver: Receiver) -> list[ReceivedSpan]:
    running.proxy.stop()  # flushes spans and metrics
    summary = running.proxy.spans.summary
    assert summary is not None and " 0 dropped" in summary and " 0 failed" in summary, summary
    return receiver.wait_for(running.proxy.spans.telemetry.stats().exported)


def by_seq(spans: list[ReceivedSpan]) -> dict[int, ReceivedSpan]:
    return {s.attributes["modeltap.seq"]: s for s in spans if "modeltap.seq" in s.attributes}


def point(receiver: Receiver, metric: str, attributes: dict[str, Any]) -> ReceivedPoint:
    return receiver.last_points()[(metric, tuple(sorted(attributes.items())))]


# --------------------------------------------------------------------------
# Every API: exact attributes, metrics and cost


def test_each_api_exact_attributes_metrics_and_cost(
    start_proxy: Callable[..., Running], otlp_receiver: Receiver
) -> None:
    running = start_proxy(otlp=otlp_url(otlp_receiver))
    port = int(running.upstream.url.rsplit(":", 1)[1])
    openai_client(running).chat.completions.create(
        model="gpt-5",
        messages=[{"role": "user", "content": "hi"}],
        max_completion_tokens=100,
        temperature=0.2,
        top_p=0.9,
        seed=7,
        stop=["END"],
        n=1,
        response_format={"type": "json_object"},
        service_tier="flex",
        extra_headers=SESSION,
    )
    stream = openai_client(running).responses.create(
        model="gpt-5", input="hi", instructions="be brief", max_output_tokens=64, stream=True
    )
    for _ in stream:
        pass
    anthropic_client(running).messages.create(
        model="claude-sonnet-4-6",
        max_tokens=256,
        system="be brief",
        messages=[{"role": "user", "content": "hi"}],
        # Sampling settings as sent on the wire (this SDK no longer takes them by name).
        extra_body={"temperature": 0.5, "top_k": 40},
        extra_headers=SESSION,
    )
    records = running.audit()
    events = running.events("response")
    spans = by_seq(spans_after_stop(running, otlp_receiver))
    chat, responses, messages = (spans[record["seq"]] for record in records)
    server = {"server.address": "127.0.0.1", "server.port": port}

    def links(record: dict[str, Any], session: str) -> dict[str, Any]:
        return {
            "modeltap.seq": record["seq"],
            "modeltap.request_id": record["request_id"],
            "modeltap.session_id": session,
            "modeltap.instructions_sha256": record["instructions_sha256"],
        }

    assert chat.name == "chat gpt-5" and chat.kind == "CLIENT"
    assert chat.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.conversation.id": "agent-run-7",
        "gen_ai.request.model": "gpt-5",
        "gen_ai.request.max_tokens": 100,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.top_p": 0.9,
        "gen_ai.request.seed": 7,
        "gen_ai.request.stop_sequences": ["END"],
        "gen_ai.output.type": "json",
        "openai.api.type": "chat_completions",
        "openai.request.service_tier": "flex",
        **server,
        **links(records[0], "agent-run-7"),
        "http.response.status_code": 200,
        "gen_ai.response.model": "gpt-5",
        "gen_ai.response.id": "chatcmpl-stub1",
        "gen_ai.usage.input_tokens": 21,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 3,
        "gen_ai.usage.reasoning.output_tokens": 0,
        "gen_ai.response.finish_reasons": ["stop"],
        # The flex tier was asked for but the response names none: standard prices.
        "modeltap.cost.estimate_usd": pytest.approx((18 * 1.25 + 3 * 0.125 + 5 * 10) / 1e6),
        "modeltap.cost.source": COST_SOURCE,
    }

    ttfc = responses.attributes.pop("gen_ai.response.time_to_first_chunk")
    assert 0 < ttfc * 1e9 <= responses.end_ns - responses.start_ns
    run_session = records[1]["session_id"]
    assert responses.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-5",
        "gen_ai.request.max_tokens": 64,
        "gen_ai.request.stream": True,
        "openai.api.type": "responses",
        **server,
        **links(records[1], run_session),
        "http.response.status_code": 200,
        "gen_ai.response.model": "gpt-5",
        "gen_ai.response.id": "resp_stub1",
        "gen_ai.usage.input_tokens": 30,
        "gen_ai.usage.output_tokens": 6,
        "gen_ai.usage.cache_read.input_tokens": 4,
        "gen_ai.usage.reasoning.output_tokens": 2,
        "gen_ai.response.finish_reasons": ["completed"],
        "modeltap.cost.estimate_usd": pytest.approx((26 * 1.25 + 4 * 0.125 + 6 * 10) / 1e6),
        "modeltap.cost.source": COST_SOURCE,
    }
    assert "gen_ai.conversation.id" not in responses.attributes  # the run's own session

    # Anthropic: input_tokens 25 + cache read 10 + cache write 5.
    assert messages.name == "chat claude-sonnet-4-6"
    assert messages.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.conversation.id": "agent-run-7",
        "gen_ai.request.model": "claude-sonnet-4-6",
        "gen_ai.request.max_tokens": 256,
        "gen_ai.request.temperature": 0.5,
        "gen_ai.request.top_k": 40.0,
        **server,
        **links(records[2], "agent-run-7"),
        "http.response.status_code": 200,
        "gen_ai.response.model": "claude-sonnet-4-6",
        "gen_ai.response.id": "msg_stub1",
        "gen_ai.usage.input_tokens": 40,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_read.input_tokens": 10,
        "gen_ai.usage.cache_write.input_tokens": 5,
        "gen_ai.response.finish_reasons": ["end_turn"],
        "modeltap.cost.estimate_usd": pytest.approx((25 * 3 + 10 * 0.3 + 5 * 3.75 + 7 * 15) / 1e6),
        "modeltap.cost.source": COST_SOURCE,
    }

    # events.jsonl keeps the provider's own counts, and the labelled estimate.
    anthropic_event = events[2]
    assert anthropic_event["usage"]["input_tokens"] == 25
    assert anthropic_event["cost"] == {
        "estimate_usd": pytest.approx((25 * 3 + 10 * 0.3 + 5 * 3.75 + 7 * 15) / 1e6),
        "source": COST_SOURCE,
        "priced_as": "anthropic/claude-sonnet-4-6",
        "note": None,
    }
    assert [event["cost"]["priced_as"] for event in events] == [
        "openai/gpt-5",
        "openai/gpt-5",
        "anthropic/claude-sonnet-4-6",
    ]

    # Metrics: the three histograms, their buckets and attributes.
    def base(provider: str, model: str) -> dict[str, Any]:
        return {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "gen_ai.response.model": model,
            **server,
        }

    for provider, model, tokens in (
        ("openai", "gpt-5", None),
        ("anthropic", "claude-sonnet-4-6", (40, 7)),
    ):
        duration = point(otlp_receiver, "gen_ai.client.operation.duration", base(provider, model))
        assert (duration.unit, duration.explicit_bounds) == ("s", SECONDS)
        assert duration.schema_url == "https://opentelemetry.io/schemas/1.41.1"
        if tokens is not None:
            for kind, count in zip(("input", "output"), tokens, strict=True):
                usage = point(
                    otlp_receiver,
                    "gen_ai.client.token.usage",
                    base(provider, model) | {"gen_ai.token.type": kind},
                )
                assert (usage.unit, usage.explicit_bounds) == ("{token}", TOKENS)
                assert (usage.count, usage.sum) == (1, count)
    openai_duration = point(
        otlp_receiver, "gen_ai.client.operation.duration", base("openai", "gpt-5")
    )
    assert openai_duration.count == 2  # chat and responses share the attributes
    openai_input = point(
        otlp_receiver,
        "gen_ai.client.token.usage",
        base("openai", "gpt-5") | {"gen_ai.token.type": "input"},
    )
    assert (openai_input.count, openai_input.sum) == (2, 21 + 30)
    first_chunk = point(
        otlp_receiver, "gen_ai.client.operation.time_to_first_chunk", base("openai", "gpt-5")
    )
    assert first_chunk.count == 1  # the streamed request only
    assert first_chunk.explicit_bounds == SECONDS
    assert not [
        p
        for p in otlp_receiver.points
        if p.metric == "gen_ai.client.operation.time_to_first_chunk"
        and p.attributes["gen_ai.provider.name"] == "anthropic"
    ]


# --------------------------------------------------------------------------
# A three-turn tool loop


TOOLS: list[Any] = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("get_weather", "get_time")
]


def loop_reply(turn: int) -> Reply:
    """The stand-in model: asks for get_weather, then get_time, then answers."""
    if turn < 2:
        name, call_id, arguments = [
            ("get_weather", "call_weather_1", {"city": "Paris"}),
            ("get_time", "call_time_1", {"timezone": "Europe/Paris"}),
        ][turn]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": "18°C and sunny, 14:05."}, "stop"
    return Reply(
        json={
            "id": f"chatcmpl-loop-{turn}",
            "object": "chat.completion",
            "created": 1760000000,
            "model": "gpt-5",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": 40 + 30 * turn,
                "completion_tokens": 12,
                "total_tokens": 52 + 30 * turn,
                "prompt_tokens_details": {"cached_tokens": 0},
            },
        }
    )


def run_tool_loop(client: openai.OpenAI) -> str:
    messages: list[Any] = [{"role": "user", "content": "Weather and time in Paris?"}]
    for _ in range(3):
        completion = client.chat.completions.create(
            model="gpt-5", messages=messages, tools=TOOLS, extra_headers=SESSION
        )
        message = completion.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call.model_dump() for call in message.tool_calls],
            }
        )
        for call in message.tool_calls:
            assert call.type == "function"
            result = {"get_weather": '{"temp_c": 18}', "get_time": '{"time": "14:05"}'}
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": result[call.function.name]}
            )
    raise AssertionError("no answer after three turns")


def test_three_turn_tool_loop_draws_execute_tool_spans(
    start_proxy: Callable[..., Running], otlp_receiver: Receiver
) -> None:
    running = start_proxy(otlp=otlp_url(otlp_receiver))
    running.upstream.replies.extend(loop_reply(turn) for turn in range(3))
    assert run_tool_loop(openai_client(running)) == "18°C and sunny, 14:05."
    spans = spans_after_stop(running, otlp_receiver)

    (root,) = [s for s in spans if s.name == "session agent-run-7"]
    waterfall = sorted(
        (s for s in spans if s.parent_span_id == root.span_id), key=lambda s: s.start_ns
    )
    assert [s.name for s in waterfall] == [
        "chat gpt-5",
        "execute_tool get_weather",
        "chat gpt-5",
        "execute_tool get_time",
        "chat gpt-5",
    ]
    turn0, weather, turn1, clock, turn2 = waterfall
    # From the end of the response that asked to the arrival of the request with the result.
    assert (weather.start_ns, weather.end_ns) == (turn0.end_ns, turn1.start_ns)
    assert (clock.start_ns, clock.end_ns) == (turn1.end_ns, turn2.start_ns)
    assert weather.kind == clock.kind == "INTERNAL"
    assert weather.attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "get_weather",
        "gen_ai.tool.call.id": "call_weather_1",
        "gen_ai.tool.type": "function",
        "modeltap.tool.result_seen": True,
        "modeltap.tool.result_bytes": len('{"temp_c": 18}'),
    }
    assert clock.attributes["gen_ai.tool.call.id"] == "call_time_1"
    assert root.start_ns <= turn0.start_ns and turn2.end_ns <= root.end_ns
    # The loop's token usage in the metrics: three turns, 40 + 70 + 100 input tokens.
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-5",
        "gen_ai.response.model": "gpt-5",
        "server.address": "127.0.0.1",
        "server.port": int(running.upstream.url.rsplit(":", 1)[1]),
    }
    usage = point(
        otlp_receiver, "gen_ai.client.token.usage", attributes | {"gen_ai.token.type": "input"}
    )
    assert (usage.count, usage.sum) == (3, 40 + 70 + 100)
    # 40 and 64 fall in (16, 64], 70 and 100 in (64, 256].
    assert usage.bucket_counts[TOKENS.index(64)] == 1
    assert usage.bucket_counts[TOKENS.index(256)] == 2


# --------------------------------------------------------------------------
# Content, under --capture-content only


def test_captured_content_is_in_the_conventions_shape(
    start_proxy: Callable[..., Running], otlp_http_receiver: HttpReceiver
) -> None:
    running = start_proxy(otlp=otlp_http_receiver.endpoint, capture_content=True)
    with anthropic_client(running).messages.stream(
        model="claude-sonnet-4-6",
        max_tokens=64,
        system="be brief",
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"name": "ls", "description": "List.", "input_schema": {"type": "object"}}],
    ) as stream:
        streamed = stream.get_final_text()
    list(
        openai_client(running).chat.completions.create(
            model="gpt-5", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    spans = by_seq(spans_after_stop(running, otlp_http_receiver))
    messages, chat = spans[1], spans[2]

    assert orjson.loads(messages.attributes["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "be brief"}
    ]
    assert orjson.loads(messages.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]}
    ]
    assert orjson.loads(messages.attributes["gen_ai.tool.definitions"]) == [
        {"type": "function", "name": "ls", "description": "List.", "parameters": {"type": "object"}}
    ]
    # The stream assembled into parts as it passed, not raw SSE.
    assert orjson.loads(messages.attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": streamed}],
            "finish_reason": "stop",
        }
    ]
    assert orjson.loads(chat.attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "Hello there"}],
            "finish_reason": "stop",
        }
    ]
    assert not [s for s in spans.values() if "data:" in repr(s.attributes)]
    # Content stays out of the evidence files.
    assert streamed not in (running.out / "events.jsonl").read_text()
