"""A route's provider end to end: real SDKs -> modeltap -> stub, spans -> a real
OTLP receiver. The record and the span name the route's real provider, not the
wire's; a route that says none takes the wire's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai

from tests.conftest import Running
from tests.otlp_receiver import HttpReceiver
from tests.upstream import Upstream

pytest_plugins = ["tests.otlp_fixtures"]


def test_a_route_says_its_provider_in_the_record_and_the_span(
    start_proxy: Callable[..., Running], otlp_http_receiver: HttpReceiver, upstream: Upstream
) -> None:
    running = start_proxy(
        otlp=otlp_http_receiver.endpoint,
        # Replaces the fixture's plain stub route; "plain" is the same stub, unsaid.
        routes=[
            f"stub={upstream.url},provider=azure.ai.openai",
            f"plain={upstream.url}",
        ],
    )
    system: Any = [
        {"type": "text", "text": "x-billing: prompt 1"},
        {"type": "text", "text": "You are terse."},
    ]
    chat = openai.OpenAI(base_url=running.base("stub") + "/v1", api_key="k", max_retries=0)
    chat.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
    )
    plain = anthropic.Anthropic(base_url=running.base("plain"), api_key="k", max_retries=0)
    plain.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=16,
        system=system,
        messages=[{"role": "user", "content": "hi"}],
    )
    running.proxy.stop()  # flushes the spans

    azure, claude = running.audit()
    assert (azure["route"], azure["provider"]) == ("stub", "azure.ai.openai")
    assert (azure["model"], azure["model_source"]) == ("gpt-4o", "body")
    assert (claude["route"], claude["provider"]) == ("plain", "anthropic")  # the wire's
    # The same two blocks, one part each, whatever the wire.
    assert len(azure["instructions_parts"]) == 2
    assert azure["instructions_parts"] == claude["instructions_parts"]
    assert azure["instructions_sha256"] == claude["instructions_sha256"]

    spans = otlp_http_receiver.wait_for(4)
    providers = {
        s.attributes["modeltap.seq"]: s.attributes["gen_ai.provider.name"]
        for s in spans
        if "modeltap.seq" in s.attributes
    }
    assert providers == {azure["seq"]: "azure.ai.openai", claude["seq"]: "anthropic"}
