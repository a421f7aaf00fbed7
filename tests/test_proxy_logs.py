"""Lines as OTLP log records, end to end (SPEC section 9).

Real SDKs -> modeltap -> the stub upstream, with a real OTLP receiver (HTTP and
gRPC) taking the spans and log records. Every local line must arrive exactly
once, as a log record whose body is the line; a collector that is down, slow
or silent must cost the traffic nothing, and what it did not get is counted
exactly: lines written minus records received.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import orjson
import pytest

from tests.conftest import Running
from tests.otlp_receiver import GrpcReceiver, HttpReceiver, ReceivedLog, closed_endpoint

pytest_plugins = ["tests.otlp_fixtures"]

FILES = ("audit.jsonl", "events.jsonl", "sessions.jsonl")
CONNECTIONS = 16
SESSIONS = 25


def otlp_url(receiver: HttpReceiver | GrpcReceiver) -> str:
    return receiver.grpc_url if isinstance(receiver, GrpcReceiver) else receiver.endpoint


def local_lines(out: Path) -> list[tuple[str, bytes]]:
    """Every line of the out dir's three files, with its file, newline removed."""
    lines = []
    for name in FILES:
        path = out / name
        if path.exists():
            lines += [(name, line) for line in path.read_bytes().splitlines()]
    return lines


async def drive(base: str, requests: int) -> list[int]:
    """``requests`` model requests over 16 connections, cycling through chat,
    responses and Anthropic messages, half of them streamed, over 25 sessions.

    Returns:
        How many requests of each API got their answer (chat, responses, messages).
    """
    limits = httpx2.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
    answered = [0, 0, 0]
    async with httpx2.AsyncClient(limits=limits, timeout=60) as http:
        oai = openai.AsyncOpenAI(
            base_url=base + "/v1", api_key="sk-x", max_retries=0, http_client=http
        )
        anth = anthropic.AsyncAnthropic(
            base_url=base, api_key="sk-ant-x", max_retries=0, http_client=http
        )
        gate = asyncio.Semaphore(CONNECTIONS)
        messages: Any = [{"role": "user", "content": "hi"}]

        async def one(i: int) -> None:
            headers = {"x-modeltap-session": f"job-{i % SESSIONS}"}
            stream = i % 2 == 1
            api = i % 3
            async with gate:
                if api == 0:
                    if stream:
                        chunks = await oai.chat.completions.create(
                            model="gpt-5",
                            messages=messages,
                            stream=True,
                            stream_options={"include_usage": True},
                            extra_headers=headers,
                        )
                        async for _ in chunks:
                            pass
                    else:
                        await oai.chat.completions.create(
                            model="gpt-5", messages=messages, extra_headers=headers
                        )
                elif api == 1:
                    if stream:
                        events = await oai.responses.create(
                            model="gpt-5.1", input="hi", stream=True, extra_headers=headers
                        )
                        async for _ in events:
                            pass
                    else:
                        await oai.responses.create(
                            model="gpt-5.1", input="hi", extra_headers=headers
                        )
                else:
                    if stream:
                        async with anth.messages.stream(
                            model="claude-x",
                            max_tokens=64,
                            messages=messages,
                            extra_headers=headers,
                        ) as s:
                            await s.get_final_message()
                    else:
                        await anth.messages.create(
                            model="claude-x",
                            max_tokens=64,
                            messages=messages,
                            extra_headers=headers,
                        )
            answered[api] += 1

        await asyncio.gather(*(one(i) for i in range(requests)))
    return answered


def run_traffic(running: Running, requests: int) -> None:
    answered = asyncio.run(drive(running.base(), requests))
    assert sum(answered) == requests
    assert answered == [len(range(api, requests, 3)) for api in range(3)]


def check_local_lines(running: Running, requests: int) -> list[tuple[str, bytes]]:
    """Traffic left its full evidence: one audit line and one response per request."""
    lines = local_lines(running.out)
    audit = [line for name, line in lines if name == "audit.jsonl"]
    responses = [
        obj
        for name, line in lines
        if name == "events.jsonl" and (obj := orjson.loads(line))["kind"] == "response"
    ]
    assert len(audit) == requests
    assert len(responses) == requests
    assert all(r["evidence_complete"] for r in responses)
    sessions = [orjson.loads(line) for name, line in lines if name == "sessions.jsonl"]
    assert len(sessions) == SESSIONS
    return lines


def session_lines(lines: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
    return [orjson.loads(line) for name, line in lines if name == "sessions.jsonl"]


def check_session_counts(lines: list[tuple[str, bytes]], dropped: int) -> None:
    """Each session line says how many records were known dropped when it was written:
    a count that only grows, and never passes the exact total at exit."""
    counts = [s["otlp_logs_dropped"] for s in session_lines(lines)]
    assert all(isinstance(c, int) for c in counts)
    assert counts == sorted(counts)
    assert counts[-1] <= dropped


def by_body(logs: list[ReceivedLog]) -> dict[bytes, ReceivedLog]:
    return {log.body.encode(): log for log in logs}


# --------------------------------------------------------------------------
# Every line, exactly once


def test_every_line_arrives_once_as_its_log_record(
    start_proxy: Callable[..., Running],
    otlp_receiver: HttpReceiver | GrpcReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A queue that holds the whole run: this is about delivery, not about a receiver
    # (in this very process) that a busy CI machine could slow below the traffic.
    monkeypatch.setenv("OTEL_BLRP_MAX_QUEUE_SIZE", "16384")
    # Enough traffic for several full export batches (512 records each) and
    # every API, stream mode and session of `drive`: delivery across batch
    # boundaries is what is proved, and more requests only repeat it.
    requests = 600
    running = start_proxy(otlp=otlp_url(otlp_receiver))
    run_traffic(running, requests)
    running.proxy.stop()  # flushes spans and log records

    lines = check_local_lines(running, requests)
    assert len(lines) > 2 * 512
    logs = otlp_receiver.logs
    # Exactly once: as many records as lines, and the same bodies, byte for byte.
    assert len(logs) == len(lines)
    assert collections.Counter(log.body.encode() for log in logs) == collections.Counter(
        line for _, line in lines
    )
    assert all(isinstance(log.body, str) for log in logs)
    stats = running.proxy.spans.telemetry.log_stats()
    assert stats is not None
    assert (stats.written, stats.exported, stats.dropped) == (len(lines), len(lines), 0)
    summary = running.proxy.spans.summary or ""
    assert f"logs: {len(lines)} of {len(lines)} lines exported, 0 dropped" in summary
    assert {s["otlp_logs_dropped"] for s in session_lines(lines)} == {0}

    # Attributes repeat what backends index on; the event name says the kind.
    records = by_body(logs)
    spans_by_seq = {
        s.attributes["modeltap.seq"]: s
        for s in otlp_receiver.spans
        if s.name.startswith("chat ") and "modeltap.seq" in s.attributes
    }
    roots = {
        s.attributes["modeltap.session_id"]: s
        for s in otlp_receiver.spans
        if s.name.startswith("session ")
    }
    assert len(spans_by_seq) == requests
    for name, line in lines:
        obj = orjson.loads(line)
        log = records[line]
        kind = {"audit.jsonl": "audit", "sessions.jsonl": "session"}.get(name) or obj["kind"]
        assert log.event_name == f"modeltap.{kind}"
        assert log.attributes["modeltap.kind"] == kind
        assert log.attributes["log.file.name"] == name
        assert log.attributes["modeltap.run_id"] == obj["run_id"]
        assert log.attributes["modeltap.session_id"] == obj["session_id"]
        assert log.scope == "modeltap"
        assert log.resource["service.name"] == "modeltap"
        if "seq" in obj and obj["seq"] is not None:
            # Linked to the exchange's own span, in its trace.
            span = spans_by_seq[obj["seq"]]
            assert log.attributes["modeltap.seq"] == obj["seq"]
            assert (log.trace_id, log.span_id) == (span.trace_id, span.span_id)
        if kind == "audit":
            assert log.attributes["gen_ai.request.model"] == obj["model"]
            assert log.attributes["gen_ai.operation.name"] == "chat"
            assert log.attributes["modeltap.api"] == obj["api"]
        elif kind == "response":
            assert log.attributes["gen_ai.response.model"] == obj["model"]
            assert log.attributes["http.response.status_code"] == 200
        elif kind == "session":
            # Linked to the session's root span.
            root = roots[obj["session_id"]]
            assert (log.trace_id, log.span_id) == (root.trace_id, root.span_id)
    providers = {
        log.attributes["modeltap.api"]: log.attributes["gen_ai.provider.name"]
        for log in logs
        if log.attributes["modeltap.kind"] == "audit"
    }
    assert providers == {
        "openai.chat_completions": "openai",
        "openai.responses": "openai",
        "anthropic.messages": "anthropic",
    }


# --------------------------------------------------------------------------
# A collector that is down, silent or slow


def test_a_collector_that_is_down_costs_nothing_and_every_line_is_counted(
    start_proxy: Callable[..., Running],
) -> None:
    requests = 300
    with closed_endpoint() as port:
        running = start_proxy(otlp=f"http://127.0.0.1:{port}")
        run_traffic(running, requests)
        running.proxy.stop()
    lines = check_local_lines(running, requests)
    stats = running.proxy.spans.telemetry.log_stats()
    assert stats is not None
    assert (stats.written, stats.exported, stats.dropped) == (len(lines), 0, len(lines))
    summary = running.proxy.spans.summary or ""
    assert f"logs: 0 of {len(lines)} lines exported, {len(lines)} dropped" in summary
    check_session_counts(lines, stats.dropped)


def test_a_silent_collector_costs_nothing_and_every_line_is_counted(
    start_proxy: Callable[..., Running], otlp_hanging_receiver: HttpReceiver | GrpcReceiver
) -> None:
    requests = 150
    running = start_proxy(otlp=otlp_url(otlp_hanging_receiver))
    run_traffic(running, requests)
    running.proxy.stop()
    lines = check_local_lines(running, requests)
    stats = running.proxy.spans.telemetry.log_stats()
    assert stats is not None
    assert otlp_hanging_receiver.logs == []
    assert otlp_hanging_receiver.requests >= 1
    assert (stats.written, stats.exported, stats.dropped) == (len(lines), 0, len(lines))
    check_session_counts(lines, stats.dropped)


def test_a_slow_collector_gets_what_it_can_and_the_rest_is_counted_exactly(
    start_proxy: Callable[..., Running], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One export a second of 32 records, behind a queue of 64: the traffic writes
    # lines far faster than that, so the queue fills and records are refused.
    monkeypatch.setenv("OTEL_BLRP_MAX_QUEUE_SIZE", "64")
    monkeypatch.setenv("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "32")
    monkeypatch.setenv("OTEL_BLRP_SCHEDULE_DELAY", "50")
    requests = 300
    with HttpReceiver(delay=1.0) as receiver:
        running = start_proxy(otlp=receiver.endpoint)
        run_traffic(running, requests)
        running.proxy.stop()
        received = receiver.logs
    lines = check_local_lines(running, requests)
    stats = running.proxy.spans.telemetry.log_stats()
    assert stats is not None
    assert stats.written == len(lines)
    assert stats.dropped == len(lines) - len(received)
    assert stats.exported == len(received)
    assert stats.queue_full > 0
    check_session_counts(lines, stats.dropped)
    # What did arrive is whole and never twice.
    bodies = [log.body.encode() for log in received]
    assert len(set(bodies)) == len(bodies)
    assert set(bodies) <= {line for _, line in lines}


def test_without_log_export_the_session_line_says_unknown(
    start_proxy: Callable[..., Running], otlp_http_receiver: HttpReceiver
) -> None:
    # One at a time: mitmproxy serves one master per process.
    for settings in ({"otlp": otlp_http_receiver.endpoint, "otlp_logs": False}, {}):
        running = start_proxy(**settings)
        client = openai.OpenAI(base_url=running.base() + "/v1", api_key="sk-x", max_retries=0)
        client.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "hi"}])
        running.proxy.stop()
        (status,) = session_lines(local_lines(running.out))
        assert status["otlp_logs_dropped"] is None
    assert otlp_http_receiver.logs == []
    assert otlp_http_receiver.wait_for(3)  # spans still went
