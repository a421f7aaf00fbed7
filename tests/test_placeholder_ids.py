"""Unknown is null: an id or model sent empty never lands in a record as one (issue 27.6).

Azure OpenAI opens a chat stream with a prompt-filter chunk whose ``id`` and
``model`` are ``""`` (and sends content-filter annotations later with the
same placeholders); the response event then said ``response_id: ""``. Every
wire whose stream can open with a placeholder takes the first value that is
not one: chat chunks, Responses events (``response.created`` then the
later ones), Anthropic's ``message_start``, Gemini chunks (``responseId``,
``modelVersion``), Bedrock (Converse tool use ids; InvokeModel's Anthropic
events, whose request id then comes from the header). The record's own
constructor holds the line too. The Azure sample as the SDK receives it is
``tests/data/openai_chat/streams/azure_prompt_filter_first.json``; here it
also goes through the real proxy with ``AzureOpenAI``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import orjson
import pytest

from modeltap import apis
from modeltap.apis import (
    anthropic_messages,
    bedrock_converse,
    gemini,
    openai_chat,
    openai_responses,
)
from modeltap.apis.bedrock_converse import observe as converse_observe
from modeltap.apis.bedrock_converse.runtime import with_response_headers
from modeltap.apis.contract import WireApi
from modeltap.evidence.records import ResponseFacts, ToolCall
from modeltap.wire.sse import SSEDecoder
from tests.conftest import Running
from tests.reliability.faults import wait_until
from tests.test_samples import DATA, sse_bytes
from tests.upstream import Reply, Upstream

CHAT: Any = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}


def observed(api: WireApi, events: list[dict[str, Any]], request: Any = None) -> ResponseFacts:
    observer = api.StreamObserver(api.audit_request(request, None) if request else None)
    for event in SSEDecoder().feed(sse_bytes(events)):
        observer.feed(event)
    return observer.finish()


def chat_chunk(id: str, model: str, **more: Any) -> dict[str, Any]:
    return {"data": {"id": id, "model": model, "object": "chat.completion.chunk", **more}}


def test_chat_takes_the_first_id_and_model_that_are_not_placeholders() -> None:
    delta = [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]
    facts = observed(
        openai_chat,
        [
            chat_chunk("", "", choices=[], prompt_filter_results=[]),
            chat_chunk("chatcmpl-1", "gpt-4o-2024-11-20", choices=delta),
            chat_chunk("", "", choices=[]),  # a late annotation: no id either
            {"data": "[DONE]"},
        ],
        CHAT,
    )
    assert (facts.response_id, facts.model) == ("chatcmpl-1", "gpt-4o-2024-11-20")


def test_chat_with_placeholders_only_knows_no_id() -> None:
    facts = observed(openai_chat, [chat_chunk("", "", choices=[]), {"data": "[DONE]"}], CHAT)
    assert (facts.response_id, facts.model) == (None, None)


def test_chat_tool_call_ids_sent_empty_are_unknown() -> None:
    call = {"index": 0, "id": "", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    choice = [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]
    facts = observed(openai_chat, [chat_chunk("c", "m", choices=choice), {"data": "[DONE]"}], CHAT)
    assert facts.tool_calls == (ToolCall(None, "f", "{}"),)
    body = {"id": "", "model": "", "choices": [{"message": {"tool_calls": [call]}}]}
    whole = openai_chat.observe_json(body, None)
    assert (whole.response_id, whole.model, whole.tool_calls[0].call_id) == (None, None, None)


def responses_event(kind: str, id: str, model: str, **more: Any) -> dict[str, Any]:
    response = {"id": id, "model": model, "status": "in_progress", **more}
    return {"event": kind, "data": {"type": kind, "response": response}}


def test_responses_take_the_first_id_and_model_that_are_not_placeholders() -> None:
    usage = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}
    completed = {"status": "completed", "output": [], "usage": usage}
    facts = observed(
        openai_responses,
        [
            responses_event("response.created", "", ""),
            responses_event("response.in_progress", "resp_1", "gpt-5"),
            responses_event("response.completed", "", "", **completed),
        ],
    )
    assert (facts.response_id, facts.model, facts.status) == ("resp_1", "gpt-5", "completed")
    whole = openai_responses.observe_json({"id": "", "model": "", "output": []}, None)
    assert (whole.response_id, whole.model) == (None, None)


def test_anthropic_message_start_with_placeholders() -> None:
    start = {"type": "message_start", "message": {"id": "", "model": "", "usage": {}}}
    tool = {"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": "", "name": "f", "input": {}}}  # fmt: skip
    events = [
        {"event": "message_start", "data": start},
        {"event": "content_block_start", "data": tool},
        {"event": "content_block_stop", "data": {"type": "content_block_stop", "index": 0}},
        {"event": "message_stop", "data": {"type": "message_stop"}},
    ]
    facts = observed(anthropic_messages, events)
    assert (facts.response_id, facts.model) == (None, None)
    assert facts.tool_calls[0].call_id is None
    whole = anthropic_messages.observe_json({"id": "", "model": "", "content": []}, None)
    assert (whole.response_id, whole.model) == (None, None)


def test_bedrock_invoke_takes_its_request_id_when_the_body_names_none() -> None:
    """InvokeModel's Anthropic body with a placeholder id: the id is unknown, so
    the response's x-amzn-RequestId is taken, as for a body that names none."""
    facts = anthropic_messages.observe_json({"id": "", "model": "", "content": []}, None)
    headers = {"x-amzn-requestid": "req-7"}
    assert with_response_headers(facts, headers.get).response_id == "req-7"


def test_bedrock_converse_tool_use_id_sent_empty_is_unknown() -> None:
    start = {"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "", "name": "f"}}}
    events = [
        {"event": "messageStart", "data": {"role": "assistant"}},
        {"event": "contentBlockStart", "data": start},
        {"event": "contentBlockStop", "data": {"contentBlockIndex": 0}},
        {"event": "messageStop", "data": {"stopReason": "tool_use"}},
        {"event": "metadata", "data": {"usage": {"inputTokens": 1, "outputTokens": 1}}},
    ]
    observer = converse_observe.StreamObserver()
    for event in SSEDecoder().feed(sse_bytes(events)):
        observer.feed(event)
    assert observer.finish().tool_calls[0].call_id is None


def test_gemini_chunks_take_the_first_response_id_and_model_version() -> None:
    def chunk(rid: str, version: str, **more: Any) -> dict[str, Any]:
        return {"data": {"responseId": rid, "modelVersion": version, **more}}

    part = {"content": {"parts": [{"text": "hi"}]}}
    facts = observed(
        gemini,
        [
            chunk("", "", candidates=[part]),
            chunk("r-1", "gemini-2.5-pro", candidates=[part]),
            chunk("", "", candidates=[{**part, "finishReason": "STOP"}]),
        ],
    )
    assert (facts.response_id, facts.model) == ("r-1", "gemini-2.5-pro")


def test_the_record_itself_never_holds_an_empty_id() -> None:
    facts = ResponseFacts(
        response_id="", model="", status="", tool_calls=(ToolCall("", "", "{}", ""),)
    )
    assert (facts.response_id, facts.model, facts.status) == (None, None, None)
    assert facts.tool_calls == (ToolCall(None, None, "{}", None),)
    assert facts.capture_errors == ()  # unknown, not an error


@pytest.mark.parametrize(
    ("api", "body"),
    [
        (openai_chat, {**CHAT, "messages": [{"role": "tool", "tool_call_id": "", "content": "r"}]}),
        (
            anthropic_messages,
            {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "", "content": "r"}]}]},
        ),
        (
            openai_responses,
            {"model": "m",
             "input": [{"type": "function_call_output", "call_id": "", "output": "r"}]},
        ),
    ],
)  # fmt: skip
def test_tool_results_sent_with_an_empty_call_id_are_unknown(api: WireApi, body: Any) -> None:
    (result,) = api.audit_request(body, None).tool_results
    assert result.call_id is None


def test_every_wire_is_covered() -> None:
    """A new wire lands here too (its placeholders tried above)."""
    covered = {openai_chat, openai_responses, anthropic_messages, gemini, bedrock_converse}
    assert set(apis.APIS) == covered


# ---------------------------------------------------------------- end to end


def test_azure_stream_through_the_proxy(
    start_proxy: Callable[..., Running], upstream: Upstream
) -> None:
    sample = orjson.loads(
        (DATA / "openai_chat/streams/azure_prompt_filter_first.json").read_bytes()
    )
    events = [(None, e["data"]) for e in sample["events"]]
    upstream.replies.append(Reply(sse=events))
    running = start_proxy(routes=[f"azure={upstream.url},provider=azure.ai.openai"])
    azure = openai.AzureOpenAI(
        azure_endpoint=running.base("azure"),
        api_key="azure-key",
        api_version="2024-10-21",
        azure_deployment="dep-gpt4o",
        max_retries=0,
    )
    stream = azure.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "secret-greeting"}], stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    # The annotation chunk has a choice without a delta: the SDK gives None there.
    text = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta]
    assert "".join(t or "" for t in text) == "Hello"
    # The event is written once the proxy has seen the stream's end, maybe after the SDK.
    (response,) = wait_until(lambda: running.events("response"))
    assert response["response_id"] == "chatcmpl-CH2azure0001"
    assert response["model"] == "gpt-4o-2024-11-20"
    assert response["evidence_complete"] is True
    assert "" not in (response["response_id"], response["model"])
