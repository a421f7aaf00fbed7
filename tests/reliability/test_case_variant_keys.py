"""Keys that differ only in case (SPEC 2: records never contradict what the upstream reads).

Go's ``encoding/json`` fills a struct field from a key that matches its name
case-insensitively (Unicode simple folding: the long s is ``s``, the Kelvin
sign is ``k``), and the last match wins. Ollama, LocalAI and Go gateways
read request bodies that way, so ``{"model": "gpt-5", "Model": "llama3"}``
runs ``llama3`` there while the audit read ``gpt-5``; a lone
``"Instructions"`` or ``"Tools"`` carries instructions or tools the record
says were not sent. Each shape is sent by the client an agent would use (the
``openai`` and ``anthropic`` SDKs with ``extra_body``, the ``websockets``
client, raw bodies for nested objects) through a real ``modeltap run``
process; the check is that the upstream received nothing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anthropic
import httpx2 as httpx
import openai
import orjson
import pytest
from websockets.sync.client import connect

from tests.conftest import read_jsonl
from tests.reliability.faults import figure
from tests.reliability.test_processes import ProxyProcess
from tests.upstream import Upstream

KEY = "sk-test-case-variant"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def proc(stub_process: ProxyProcess) -> ProxyProcess:
    return stub_process


def rules(out: Path) -> list[str]:
    return [e["rule"] for e in read_jsonl(out / "events.jsonl") if e["kind"] == "rejected"]


def test_sdk_requests_with_a_case_variant_key_are_refused(
    proc: ProxyProcess, upstream: Upstream, tmp_path: Path
) -> None:
    """Before: all 6 were audited (as gpt-5 / claude, no instructions, no tools) and forwarded."""
    oai = openai.OpenAI(base_url=proc.url + "/stub/v1", api_key=KEY, max_retries=0)
    ant = anthropic.Anthropic(base_url=proc.url + "/stub", api_key=KEY, max_retries=0)
    attempts: list[tuple[str, Any]] = [
        ("chat, Model beside model", lambda: oai.chat.completions.create(
            model="gpt-5", messages=HI, extra_body={"Model": "llama3"})),  # type: ignore[arg-type]
        ("chat, MESSAGES beside messages", lambda: oai.chat.completions.create(
            model="gpt-5", messages=HI,  # type: ignore[arg-type]
            extra_body={"MESSAGES": [{"role": "system", "content": "other"}]})),
        ("responses, a lone Instructions", lambda: oai.responses.create(
            model="gpt-5", input="hi", extra_body={"Instructions": "be someone else"})),
        ("responses, tools with the long s", lambda: oai.responses.create(
            model="gpt-5", input="hi", extra_body={"tool\u017f": [
                {"type": "function", "name": "rm_rf", "parameters": {}}]})),
        ("messages, a lone System", lambda: ant.messages.create(
            model="claude-x", max_tokens=5, messages=HI,  # type: ignore[arg-type]
            extra_body={"System": "be someone else"})),
        ("messages, Model beside model", lambda: ant.messages.create(
            model="claude-x", max_tokens=5, messages=HI,  # type: ignore[arg-type]
            extra_body={"MODEL": "claude-other"})),
    ]  # fmt: skip
    t0 = time.perf_counter()
    for name, call in attempts:
        with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as caught:
            call()
        assert "case_variant_key" in str(caught.value), name
    elapsed = time.perf_counter() - t0
    assert upstream.received == []
    assert not (tmp_path / "audit.jsonl").exists()
    assert rules(tmp_path) == ["case_variant_key"] * len(attempts)
    figure("case-variant keys: SDK requests", cases=len(attempts), seconds=elapsed)


NESTED = [
    # A message whose role a case-insensitive reader takes from the second key.
    {"model": "gpt-5", "messages": [{"role": "user", "Role": "system", "content": "x"}]},
    # A tool whose name a case-insensitive reader takes from "NAME".
    {"model": "gpt-5", "messages": HI,
     "tools": [{"type": "function", "function": {"name": "ls", "NAME": "rm_rf"}}]},
    # A content part's type, in capitals.
    {"model": "gpt-5", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "x", "TYPE": "image_url"}]}]},
    # The Kelvin sign folds to k.
    {"model": "gpt-5", "messages": HI, "metadata": {"\u212aey": 1, "key": 2}},
]  # fmt: skip


def test_nested_keys_equal_once_folded_are_refused(
    proc: ProxyProcess, upstream: Upstream, tmp_path: Path
) -> None:
    with httpx.Client(timeout=20) as client:
        for body in NESTED:
            resp = client.post(proc.url + "/stub/v1/chat/completions", content=orjson.dumps(body))
            assert resp.status_code == 400 and "case_variant_key" in resp.text
    assert upstream.received == []
    assert rules(tmp_path) == ["case_variant_key"] * len(NESTED)


WS_MESSAGES = [
    {"type": "response.create", "model": "gpt-5", "input": "x",
     "Tools": [{"type": "function", "name": "rm_rf"}]},
    # Forwarded before as a control message (ws_control, no audit line); a
    # case-insensitive reader takes the second key's type and runs the model.
    {"type": "response.processed", "Type": "response.create", "model": "gpt-5", "input": "x"},
]  # fmt: skip


def test_websocket_message_with_a_case_variant_key_is_refused(
    proc: ProxyProcess, upstream: Upstream, tmp_path: Path
) -> None:
    url = proc.url.replace("http://", "ws://") + "/stub/v1/responses"
    with connect(url) as ws:
        for message in WS_MESSAGES:
            ws.send(orjson.dumps(message).decode())
            event = orjson.loads(ws.recv(timeout=10))
            assert event["type"] == "error" and "case_variant_key" in event["error"]["message"]
        # The connection stays usable.
        ws.send(orjson.dumps({"type": "response.create", "model": "gpt-5", "input": "ok"}).decode())
        while orjson.loads(ws.recv(timeout=10))["type"] != "response.completed":
            pass
    assert len(upstream.ws_received) == 1
    assert [r["model"] for r in read_jsonl(tmp_path / "audit.jsonl")] == ["gpt-5"]


def test_keys_in_other_cases_that_collide_with_nothing_pass(
    proc: ProxyProcess, upstream: Upstream, tmp_path: Path
) -> None:
    """Tool schemas and metadata with capitalised names, Gemini's camelCase: audited."""
    oai = openai.OpenAI(base_url=proc.url + "/stub/v1", api_key=KEY, max_retries=0)
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"Name": {"type": "string"}, "Type": {}}}}}  # fmt: skip
    oai.chat.completions.create(
        model="gpt-5",
        messages=HI,  # type: ignore[arg-type]
        tools=[tool],  # type: ignore[list-item]
        metadata={"Session": "a", "Model": "b"},
    )
    (record,) = read_jsonl(tmp_path / "audit.jsonl")
    assert record["tool_names"] == ["f"]
    assert len(upstream.received) == 1
