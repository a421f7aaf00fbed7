"""GenAI semantics of the telemetry, decoded from real OTLP: attributes, tool spans, metrics.

Every assertion names attributes exactly as semantic-conventions v1.41.1 (and
SPEC section 5 where it names one) spell them; values come over the wire from
the real SDK exporters to the test receiver, HTTP and gRPC.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from modeltap.apis.anthropic_messages import NAME as API_ANTHROPIC
from modeltap.apis.message_parts import CUT_MARK
from modeltap.apis.openai_chat import NAME as API_CHAT
from modeltap.apis.openai_responses import NAME as API_RESPONSES
from modeltap.evidence.records import (
    AuditRecord,
    Cost,
    RequestSettings,
    ResponseFacts,
    ToolCall,
    ToolResult,
    Usage,
)
from modeltap.telemetry import Telemetry, conventions
from tests.factories import audit_record, response_event
from tests.otlp_receiver import GrpcReceiver, HttpReceiver, ReceivedPoint, ReceivedSpan

pytest_plugins = ["tests.otlp_fixtures"]

Receiver = HttpReceiver | GrpcReceiver
RUN = "run-1"
T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def otlp_url(receiver: Receiver) -> str:
    return receiver.endpoint if isinstance(receiver, HttpReceiver) else receiver.grpc_url


def telemetry_for(receiver: Receiver, **kwargs: Any) -> Telemetry:
    kwargs.setdefault("capture_content", False)
    return Telemetry.configure(otlp=otlp_url(receiver), environ={}, run_id=RUN, **kwargs)


def collect(telemetry: Telemetry, receiver: Receiver) -> list[ReceivedSpan]:
    summary = telemetry.shutdown()
    assert " 0 dropped" in summary and " 0 failed" in summary, summary
    return receiver.wait_for(telemetry.stats().exported)


def the(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, (name, [span.name for span in spans])
    return found[0]


def exchange(
    telemetry: Telemetry,
    record: AuditRecord,
    *,
    start: int,
    end: int,
    settings: RequestSettings | None = None,
    observed: ResponseFacts | None = None,
    conversation_id: str | None = None,
    first_chunk: int | None = None,
    content: bytes | None = None,
    **response: Any,
) -> None:
    """Drive one exchange through the telemetry API the addon uses."""
    span = telemetry.start_exchange(
        session_id=record.session_id,
        traceparent=None,
        start_ns=start,
        conversation_id=conversation_id,
    )
    span.audited(record, content, forwarded_ns=start + MS, settings=settings)
    span.upstream_first_byte(start + 10 * MS)
    if first_chunk is not None:
        span.first_chunk(first_chunk)
    event = response_event(seq=record.seq, session_id=record.session_id, api=record.api, **response)
    span.finish(end_ns=end, response=event, observed=observed)


class StartRecorder(SpanProcessor):
    """What each span carried when it started: what a sampler sees."""

    def __init__(self) -> None:
        self.at_start: dict[str, dict[str, Any]] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.at_start[span.name] = dict(span.attributes or {})

    def on_end(self, span: ReadableSpan) -> None:
        pass


# --------------------------------------------------------------------------
# Attributes


def test_sampling_attributes_are_there_when_the_span_starts(
    otlp_http_receiver: HttpReceiver,
) -> None:
    telemetry = telemetry_for(otlp_http_receiver)
    recorder = StartRecorder()
    export = telemetry._export
    assert export is not None
    export._provider.add_span_processor(recorder)
    exchange(
        telemetry,
        audit_record(session_id="s1", upstream="https://api.openai.com:8443"),
        start=T0,
        end=T0 + 50 * MS,
    )
    collect(telemetry, otlp_http_receiver)
    started = recorder.at_start["chat gpt-5"]
    assert {key: started[key] for key in conventions_sampling()} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-5",
        "server.address": "api.openai.com",
        "server.port": 8443,
    }


def conventions_sampling() -> tuple[str, ...]:
    return (
        conventions.OPERATION_NAME,
        conventions.PROVIDER_NAME,
        conventions.REQUEST_MODEL,
        conventions.SERVER_ADDRESS,
        conventions.SERVER_PORT,
    )


def test_request_settings_conversation_and_openai_attributes(otlp_receiver: Receiver) -> None:
    telemetry = telemetry_for(otlp_receiver)
    settings = RequestSettings(
        max_tokens=256,
        temperature=0.2,
        top_p=0.9,
        stop_sequences=("END",),
        seed=7,
        frequency_penalty=0.5,
        presence_penalty=-0.5,
        choice_count=2,
        output_type="json",
        service_tier="flex",
    )
    observed = ResponseFacts(service_tier="flex", system_fingerprint="fp_44709d6fcb")
    exchange(
        telemetry,
        audit_record(session_id="agent-7", stream=False),
        start=T0,
        end=T0 + 80 * MS,
        settings=settings,
        observed=observed,
        conversation_id="agent-7",
        stream=False,
    )
    chat = the(collect(telemetry, otlp_receiver), "chat gpt-5")
    attributes = chat.attributes
    assert {key: value for key, value in attributes.items() if "request" in key} == {
        "gen_ai.request.model": "gpt-5",
        "gen_ai.request.max_tokens": 256,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.top_p": 0.9,
        "gen_ai.request.stop_sequences": ["END"],
        "gen_ai.request.seed": 7,
        "gen_ai.request.frequency_penalty": 0.5,
        "gen_ai.request.presence_penalty": -0.5,
        "gen_ai.request.choice.count": 2,
        "openai.request.service_tier": "flex",
        "modeltap.request_id": "req-1",
    }
    assert attributes["gen_ai.output.type"] == "json"
    assert attributes["gen_ai.conversation.id"] == "agent-7"
    assert attributes["openai.response.service_tier"] == "flex"
    assert attributes["openai.response.system_fingerprint"] == "fp_44709d6fcb"
    assert attributes["openai.api.type"] == "chat_completions"
    assert "gen_ai.request.stream" not in attributes  # not streamed: left out


def test_every_wire_names_an_operation_of_the_conventions() -> None:
    """Each wire's ``OPERATION_NAME`` is a ``gen_ai.operation.name`` value of
    the installed conventions; an exchange of no known wire is ``chat``."""
    from modeltap import apis

    for module in apis.APIS:
        assert module.OPERATION_NAME in conventions.OPERATIONS, module.NAME
        assert conventions.operation_of(module.NAME) == module.OPERATION_NAME
    assert conventions.operation_of("gemini.generate_content") == "generate_content"
    assert conventions.operation_of(API_CHAT) == conventions.operation_of(None) == "chat"


def test_defaults_the_conventions_leave_out(otlp_http_receiver: HttpReceiver) -> None:
    """``choice.count`` 1 and service tier ``auto`` are not reported; no
    conversation id for a session the user did not name."""
    telemetry = telemetry_for(otlp_http_receiver)
    exchange(
        telemetry,
        audit_record(session_id="s1"),
        start=T0,
        end=T0 + MS,
        settings=RequestSettings(choice_count=1, service_tier="auto"),
    )
    attributes = the(collect(telemetry, otlp_http_receiver), "chat gpt-5").attributes
    assert attributes["gen_ai.request.stream"] is True
    for absent in (
        "gen_ai.request.choice.count",
        "openai.request.service_tier",
        "gen_ai.conversation.id",
        "openai.response.service_tier",
    ):
        assert absent not in attributes


def test_a_routes_provider_names_the_span_and_drops_openai_attributes(
    otlp_http_receiver: HttpReceiver,
) -> None:
    telemetry = telemetry_for(otlp_http_receiver)
    # A chat wire routed to Azure OpenAI (--route NAME=URL,provider=azure.ai.openai).
    record = audit_record(session_id="s1", provider="azure.ai.openai")
    exchange(
        telemetry,
        record,
        start=T0,
        end=T0 + MS,
        settings=RequestSettings(service_tier="flex"),
        observed=ResponseFacts(service_tier="flex", system_fingerprint="fp_1"),
    )
    attributes = the(collect(telemetry, otlp_http_receiver), "chat gpt-5").attributes
    assert attributes["gen_ai.provider.name"] == "azure.ai.openai"
    assert not [key for key in attributes if key.startswith("openai.")]


@pytest.mark.parametrize(
    ("api", "usage", "expected"),
    [
        # Anthropic's input_tokens leaves the cache out: the span adds it (MUST).
        (
            API_ANTHROPIC,
            Usage(input_tokens=25, output_tokens=7, cache_read_tokens=10, cache_write_tokens=5),
            {"input": 40, "output": 7, "cache_read": 10, "cache_write": 5},
        ),
        # OpenAI's counts already hold the cached (and reasoning) tokens.
        (
            API_CHAT,
            Usage(
                input_tokens=21,
                output_tokens=5,
                total_tokens=26,
                cache_read_tokens=3,
                reasoning_tokens=2,
            ),
            {"input": 21, "output": 5, "cache_read": 3, "reasoning": 2},
        ),
        (
            API_RESPONSES,
            Usage(input_tokens=30, output_tokens=6, cache_read_tokens=4, reasoning_tokens=2),
            {"input": 30, "output": 6, "cache_read": 4, "reasoning": 2},
        ),
    ],
)
def test_usage_counts_every_input_token(
    otlp_http_receiver: HttpReceiver, api: str, usage: Usage, expected: dict[str, int]
) -> None:
    telemetry = telemetry_for(otlp_http_receiver)
    exchange(telemetry, audit_record(api=api), start=T0, end=T0 + MS, usage=usage)
    attributes = the(collect(telemetry, otlp_http_receiver), "chat gpt-5").attributes
    names = {
        "input": "gen_ai.usage.input_tokens",
        "output": "gen_ai.usage.output_tokens",
        "cache_read": "gen_ai.usage.cache_read.input_tokens",
        "cache_write": "gen_ai.usage.cache_write.input_tokens",
        "reasoning": "gen_ai.usage.reasoning.output_tokens",
    }
    assert {key: value for key, value in attributes.items() if ".usage." in key} == {
        names[kind]: count for kind, count in expected.items()
    }


def test_cost_estimate_on_the_span(otlp_http_receiver: HttpReceiver) -> None:
    telemetry = telemetry_for(otlp_http_receiver)
    priced = Cost(0.00303, "genai-prices 0.2.3", "anthropic/claude-sonnet-4-5")
    unknown = Cost(None, "genai-prices 0.2.3", None, "model not in the price table")
    exchange(telemetry, audit_record(seq=1), start=T0, end=T0 + MS, cost=priced)
    exchange(telemetry, audit_record(seq=2), start=T0 + 2 * MS, end=T0 + 3 * MS, cost=unknown)
    spans = sorted(
        (s for s in collect(telemetry, otlp_http_receiver) if s.name == "chat gpt-5"),
        key=lambda s: s.attributes["modeltap.seq"],
    )
    assert spans[0].attributes["modeltap.cost.estimate_usd"] == 0.00303
    assert spans[0].attributes["modeltap.cost.source"] == "genai-prices 0.2.3"
    assert "modeltap.cost.estimate_usd" not in spans[1].attributes  # unknown: never 0
    assert spans[1].attributes["modeltap.cost.note"] == "model not in the price table"


# --------------------------------------------------------------------------
# Tool execution spans


def test_tool_spans_between_the_turns_of_a_tool_loop(otlp_receiver: Receiver) -> None:
    """Three turns: call weather, call time, answer. Each tool span runs from the
    end of the response that asked to the arrival of the request carrying the result."""
    telemetry = telemetry_for(otlp_receiver, capture_content=True)
    weather = ToolCall("call_weather_1", "get_weather", '{"city": "Paris"}')
    clock = ToolCall("call_time_1", "get_time", '{"timezone": "Europe/Paris"}', namespace="clock")
    turns = [
        (T0, T0 + 100 * MS, (), (weather,)),
        (T0 + 300 * MS, T0 + 400 * MS, (ToolResult("call_weather_1", 52),), (clock,)),
        (T0 + 450 * MS, T0 + 600 * MS, (ToolResult("call_time_1", 40),), ()),
    ]
    for seq, (start, end, results, calls) in enumerate(turns, 1):
        exchange(
            telemetry,
            audit_record(seq=seq, session_id="loop", tool_results=results),
            start=start,
            end=end,
            tool_calls=calls,
            finish_reasons=("tool_calls",) if calls else ("stop",),
        )
    telemetry.end_session("loop")
    spans = collect(telemetry, otlp_receiver)
    root = the(spans, "session loop")
    first, second = (
        the(spans, "execute_tool get_weather"),
        the(spans, "execute_tool clock.get_time"),
    )
    assert (first.start_ns, first.end_ns) == (T0 + 100 * MS, T0 + 300 * MS)
    assert (second.start_ns, second.end_ns) == (T0 + 400 * MS, T0 + 450 * MS)
    for span in (first, second):
        assert span.kind == "INTERNAL" and span.parent_span_id == root.span_id
        assert span.trace_id == root.trace_id
    assert first.attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "get_weather",
        "gen_ai.tool.call.id": "call_weather_1",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.arguments": '{"city":"Paris"}',
        "modeltap.tool.result_seen": True,
        "modeltap.tool.result_bytes": 52,
    }
    # The waterfall reads model, tool, model, tool, model.
    order = sorted((s for s in spans if s.parent_span_id == root.span_id), key=lambda s: s.start_ns)
    assert [s.name for s in order] == [
        "chat gpt-5",
        "execute_tool get_weather",
        "chat gpt-5",
        "execute_tool clock.get_time",
        "chat gpt-5",
    ]


def test_a_tool_never_answered_ends_with_its_session(otlp_http_receiver: HttpReceiver) -> None:
    telemetry = telemetry_for(otlp_http_receiver)
    asked = (ToolCall("call_1", "bash", "{}"), ToolCall(None, "no_id", "{}"))
    exchange(
        telemetry, audit_record(session_id="s1"), start=T0, end=T0 + 100 * MS, tool_calls=asked
    )
    exchange(
        telemetry,
        audit_record(seq=2, session_id="s2"),
        start=T0,
        end=T0 + 100 * MS,
        tool_calls=(ToolCall("call_2", "read", "{}"),),
    )
    telemetry.end_session("s1", end_ns=T0 + 900 * MS)
    spans = collect(telemetry, otlp_http_receiver)  # s2 ends at shutdown
    bash, read = the(spans, "execute_tool bash"), the(spans, "execute_tool read")
    assert (bash.start_ns, bash.end_ns) == (T0 + 100 * MS, T0 + 900 * MS)
    assert bash.attributes["modeltap.tool.result_seen"] is False
    assert "modeltap.tool.result_bytes" not in bash.attributes
    assert (read.start_ns, read.end_ns) == (T0 + 100 * MS, T0 + 100 * MS)
    assert read.attributes["modeltap.tool.result_seen"] is False
    # A call without an id ends with its session too, and names no id.
    no_id = the(spans, "execute_tool no_id")
    assert (no_id.start_ns, no_id.end_ns) == (T0 + 100 * MS, T0 + 900 * MS)
    assert no_id.attributes["modeltap.tool.result_seen"] is False
    assert "gen_ai.tool.call.id" not in no_id.attributes
    assert "gen_ai.tool.call.arguments" not in bash.attributes  # content: capture only


def test_calls_without_ids_are_paired_by_position(otlp_http_receiver: HttpReceiver) -> None:
    """Gemini's Developer API sends calls without ids: the request whose id-less
    results number the calls answers them in order, as the evidence pairs them;
    a request that resends the history answers nothing again."""
    telemetry = telemetry_for(otlp_http_receiver)
    lyon, porto = ToolCall(None, "weather", "{}"), ToolCall(None, "clock", "{}")
    both = (ToolResult(None, 13), ToolResult(None, 21))
    turns = [
        (T0, T0 + 100 * MS, (), (lyon, porto)),
        (T0 + 300 * MS, T0 + 400 * MS, both, (ToolCall(None, "later", "{}"),)),
        # Three id-less results: the two already answered, then the new one.
        (T0 + 500 * MS, T0 + 600 * MS, (*both, ToolResult(None, 5)), ()),
    ]
    for seq, (start, end, results, calls) in enumerate(turns, 1):
        exchange(
            telemetry,
            audit_record(seq=seq, session_id="gem", tool_results=results),
            start=start,
            end=end,
            tool_calls=calls,
        )
    telemetry.end_session("gem")
    spans = collect(telemetry, otlp_http_receiver)
    weather, clock, later = (
        the(spans, "execute_tool weather"),
        the(spans, "execute_tool clock"),
        the(spans, "execute_tool later"),
    )
    assert (weather.start_ns, weather.end_ns) == (T0 + 100 * MS, T0 + 300 * MS)
    assert (clock.start_ns, clock.end_ns) == (T0 + 100 * MS, T0 + 300 * MS)
    assert (later.start_ns, later.end_ns) == (T0 + 400 * MS, T0 + 500 * MS)
    sizes = [s.attributes["modeltap.tool.result_bytes"] for s in (weather, clock, later)]
    assert sizes == [13, 21, 5]
    assert all(s.attributes["modeltap.tool.result_seen"] for s in (weather, clock, later))
    assert all("gen_ai.tool.call.id" not in s.attributes for s in (weather, clock, later))


# --------------------------------------------------------------------------
# Metrics


def points_by(points: list[ReceivedPoint], metric: str) -> list[ReceivedPoint]:
    return [point for point in points if point.metric == metric]


def test_genai_client_metrics(otlp_receiver: Receiver) -> None:
    telemetry = telemetry_for(otlp_receiver)
    anthropic = audit_record(
        seq=1,
        api=API_ANTHROPIC,
        model="claude-sonnet-4-5",
        upstream="https://api.anthropic.com",
        stream=True,
    )
    exchange(
        telemetry,
        anthropic,
        start=T0,
        end=T0 + 1500 * MS,
        first_chunk=T0 + 300 * MS,
        model="claude-sonnet-4-5-20250929",
        usage=Usage(input_tokens=25, output_tokens=7, cache_read_tokens=10, cache_write_tokens=5),
    )
    failed = audit_record(seq=2, stream=False, upstream="https://api.openai.com")
    exchange(
        telemetry,
        failed,
        start=T0,
        end=T0 + 50 * MS,
        status=429,
        model=None,
        usage=Usage(),
        observed=ResponseFacts(service_tier="default", system_fingerprint="fp_1"),
    )
    collect(telemetry, otlp_receiver)
    points = otlp_receiver.points
    assert points, "no metrics were exported"
    for point in points:
        assert point.scope == "modeltap"
        assert point.schema_url == "https://opentelemetry.io/schemas/1.41.1"
        assert point.temporality == "AGGREGATION_TEMPORALITY_CUMULATIVE"
    seconds = (
        0.01,
        0.02,
        0.04,
        0.08,
        0.16,
        0.32,
        0.64,
        1.28,
        2.56,
        5.12,
        10.24,
        20.48,
        40.96,
        81.92,
    )
    tokens = tuple(float(4**i) for i in range(14))
    anthropic_attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-5",
        "gen_ai.response.model": "claude-sonnet-4-5-20250929",
        "server.address": "api.anthropic.com",
        "server.port": 443,
    }
    openai_attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-5",
        "server.address": "api.openai.com",
        "server.port": 443,
        "openai.response.service_tier": "default",
        "openai.response.system_fingerprint": "fp_1",
    }
    latest = otlp_receiver.last_points()

    def point(metric: str, attributes: dict[str, Any]) -> ReceivedPoint:
        return latest[(metric, tuple(sorted(attributes.items())))]

    duration = point("gen_ai.client.operation.duration", anthropic_attributes)
    assert (duration.unit, duration.explicit_bounds) == ("s", seconds)
    assert (duration.count, duration.sum) == (1, pytest.approx(1.5))
    assert duration.bucket_counts[seconds.index(1.28) + 1] == 1  # 1.28 < 1.5 <= 2.56
    failed_duration = point(
        "gen_ai.client.operation.duration", openai_attributes | {"error.type": "429"}
    )
    assert failed_duration.count == 1

    usage = {
        kind: point("gen_ai.client.token.usage", anthropic_attributes | {"gen_ai.token.type": kind})
        for kind in ("input", "output")
    }
    assert usage["input"].unit == "{token}" and usage["input"].explicit_bounds == tokens
    # Input counts the cache too: 25 + 10 + 5.
    assert (usage["input"].count, usage["input"].sum) == (1, 40)
    assert (usage["output"].count, usage["output"].sum) == (1, 7)
    # No usage reported: no token metric for it (MUST NOT report).
    assert not [
        p
        for p in points_by(points, "gen_ai.client.token.usage")
        if p.attributes["gen_ai.provider.name"] == "openai"
    ]

    first_chunk = point("gen_ai.client.operation.time_to_first_chunk", anthropic_attributes)
    assert (first_chunk.count, first_chunk.sum) == (1, pytest.approx(0.3))
    assert first_chunk.explicit_bounds == seconds
    # Streaming calls only.
    assert len(points_by(points, "gen_ai.client.operation.time_to_first_chunk")) >= 1
    assert not [
        p
        for p in points_by(points, "gen_ai.client.operation.time_to_first_chunk")
        if p.attributes["gen_ai.provider.name"] == "openai"
    ]


def test_metrics_alone_and_spans_alone() -> None:
    """OTEL_TRACES_EXPORTER=none keeps metrics; the metrics endpoint follows the
    signal variables; a --otlp traces URL with its own path has no metrics beside it."""
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        "OTEL_TRACES_EXPORTER": "none",
    }
    telemetry = Telemetry.configure(otlp=None, capture_content=False, environ=environ)
    try:
        assert telemetry.describe() == (
            "spans: not exported; metrics: OTLP/HTTP -> http://c:4318/v1/metrics"
        )
    finally:
        telemetry.shutdown()
    custom = Telemetry.configure(otlp="http://c:4318/ingest", capture_content=False, environ={})
    try:
        assert custom.describe() == (
            "spans: OTLP/HTTP -> http://c:4318/ingest; metrics: not exported"
        )
    finally:
        custom.shutdown()


# --------------------------------------------------------------------------
# Content


def test_streamed_output_and_tool_definitions_in_the_conventions_shape(
    otlp_http_receiver: HttpReceiver,
) -> None:
    telemetry = telemetry_for(otlp_http_receiver, capture_content=True)
    body = {
        "model": "gpt-5",
        "messages": [{"role": "user", "content": "weather?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
    }
    streamed = [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "Sunny."}],
            "finish_reason": "stop",
        }
    ]
    exchange(
        telemetry,
        audit_record(),
        start=T0,
        end=T0 + MS,
        content=orjson.dumps(body),
        observed=ResponseFacts(output_messages=streamed),
    )
    attributes = the(collect(telemetry, otlp_http_receiver), "chat gpt-5").attributes
    assert orjson.loads(attributes["gen_ai.output.messages"]) == streamed
    assert orjson.loads(attributes["gen_ai.tool.definitions"]) == [
        {"type": "function", "name": "get_weather", "parameters": {}}
    ]


def test_content_is_cut_to_its_limit_and_says_so(otlp_http_receiver: HttpReceiver) -> None:
    telemetry = telemetry_for(otlp_http_receiver, capture_content=True)
    huge = "x" * 200_000
    body = {"model": "gpt-5", "messages": [{"role": "user", "content": huge}]}
    exchange(telemetry, audit_record(), start=T0, end=T0 + MS, content=orjson.dumps(body))
    attributes = the(collect(telemetry, otlp_http_receiver), "chat gpt-5").attributes
    text = attributes["gen_ai.input.messages"]
    assert len(text.encode()) <= 64 * 1024
    messages = orjson.loads(text)  # still valid JSON
    content = messages[0]["parts"][0]["content"]
    assert content.startswith("xxx") and CUT_MARK in content
    assert content.endswith(" characters]")
    assert attributes["modeltap.content.cut"] == ["gen_ai.input.messages"]
