"""Experimental exporter process (``MODELTAP_TELEMETRY_PROCESS=1``, issue 29).

The whole proxy telemetry suite also passes with the variable set (run it so to
check a change to :mod:`modeltap.telemetry.remote`); these tests prove the
child is really used, that its spans and log records are the same ones, linked
the same way, and that facts dropped before the child are counted at exit.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import openai
import pytest

from modeltap.telemetry import remote
from modeltap.telemetry.remote import RemoteTelemetry
from tests.conftest import Running
from tests.otlp_receiver import GrpcReceiver, HttpReceiver

pytest_plugins = ["tests.otlp_fixtures"]


def otlp_url(receiver: HttpReceiver | GrpcReceiver) -> str:
    return receiver.grpc_url if isinstance(receiver, GrpcReceiver) else receiver.endpoint


def chat(running: Running, session: str) -> None:
    c = openai.OpenAI(base_url=running.base() + "/v1", api_key="sk-x", max_retries=0)
    c.chat.completions.create(
        model="gpt-5",
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-modeltap-session": session},
    )


def lines_written(out: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in out.glob("*.jsonl"))


def test_the_child_exports_the_spans_and_linked_log_records(
    start_proxy: Callable[..., Running],
    otlp_receiver: HttpReceiver | GrpcReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MODELTAP_TELEMETRY_PROCESS", "1")
    running = start_proxy(otlp=otlp_url(otlp_receiver))
    telemetry = running.proxy.spans.telemetry
    assert isinstance(telemetry, RemoteTelemetry)
    chat(running, "s1")
    chat(running, "s1")
    running.proxy.stop()

    spans = otlp_receiver.wait_for(3)
    exchanges = [s for s in spans if s.name == "chat gpt-5"]
    (root,) = [s for s in spans if s.name == "session s1"]
    assert len(exchanges) == 2
    assert {e.parent_span_id for e in exchanges} == {root.span_id}
    assert {e.trace_id for e in exchanges} == {root.trace_id}
    # Each audit line's log record links to its exchange's span, built in the child.
    audit = [log for log in otlp_receiver.logs if log.event_name == "modeltap.audit"]
    assert len(audit) == 2
    by_seq = {e.attributes["modeltap.seq"]: e for e in exchanges}
    for log in audit:
        span = by_seq[log.attributes["modeltap.seq"]]
        assert (log.trace_id, log.span_id) == (span.trace_id, span.span_id)
    summary = running.proxy.spans.summary or ""
    exported = len(otlp_receiver.spans)  # the exchanges' phase spans too
    assert f"spans: {exported} exported, 0 dropped" in summary, summary
    lines = lines_written(running.out)
    assert f"logs: {lines} of {lines} lines exported, 0 dropped" in summary
    assert telemetry._child.returncode == 0


def test_facts_the_child_never_got_are_counted_dropped(
    start_proxy: Callable[..., Running],
    otlp_http_receiver: HttpReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MODELTAP_TELEMETRY_PROCESS", "1")
    monkeypatch.setattr(remote, "MAX_PENDING", 0)  # every fact finds the backlog full
    running = start_proxy(otlp=otlp_http_receiver.endpoint)
    chat(running, "s1")
    chat(running, "s2")
    running.proxy.stop()

    summary = running.proxy.spans.summary or ""
    # Both exchange spans ended in the proxy and reached nobody.
    assert "spans: 0 exported, 2 dropped" in summary, summary
    lines = lines_written(running.out)
    assert lines > 0
    assert f"logs: 0 of {lines} lines exported, {lines} dropped" in summary
    assert otlp_http_receiver.spans == [] and otlp_http_receiver.logs == []
