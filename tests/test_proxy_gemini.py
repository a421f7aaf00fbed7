"""Gemini end to end: the real google-genai SDK -> modeltap -> the upstream stub.

The stub answers as Gemini does (JSON, SSE with ``\\r\\n`` line ends, the
streamed JSON array, Code Assist's wrapper). Expected record values are
written here by hand from the request each test sends (hashes computed once
from the texts shown beside them), never by the code under test.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
import orjson
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from modeltap.evidence.capture import Capture
from tests.conftest import Running, read_jsonl
from tests.factories import AUDIT_SCHEMA, EVENT_SCHEMA
from tests.otlp_receiver import HttpReceiver
from tests.upstream import (
    GEMINI_USAGE,
    Reply,
    gemini_chunk,
    gemini_function_call_chunks,
    gemini_reply,
    gemini_text_chunks,
)

pytest_plugins = ["tests.otlp_fixtures"]

KEY = "AIza-test-PLANTED-SECRET-0123456789"
MODEL = "gemini-2.5-flash"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
# sha256("You compare weather reports.")
SYSTEM_SHA = "34a847fcbcd3693f13b90a00af4785aeeecd996574e8122181c781e689c9681a"
WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="Current weather for a city.",
    parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


def client(running: Running, **kw: Any) -> genai.Client:
    options = types.HttpOptions(base_url=running.base(), retry_options=None)
    return genai.Client(api_key=KEY, http_options=options, **kw)


def no_afc(**kw: Any) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True), **kw
    )


def secret_free(running: Running) -> None:
    """No key in the files, and every line as the shipped JSON Schemas describe it."""
    for name, schema in (("audit.jsonl", AUDIT_SCHEMA), ("events.jsonl", EVENT_SCHEMA)):
        path = running.out / name
        if path.exists():  # written at the first line
            assert KEY.encode() not in path.read_bytes()
            for line in read_jsonl(path):
                schema.validate(line)


# --------------------------------------------------------------------------
# A tool loop over the Developer API (JSON): calls without ids


def test_tool_loop_without_ids_audits_both_turns_and_pairs_calls_by_position(
    running: Running,
) -> None:
    running.upstream.replies.append(
        gemini_reply(
            gemini_function_call_chunks(
                MODEL,
                [
                    {"name": "get_weather", "args": {"city": "Lyon"}},
                    {"name": "get_weather", "args": {"city": "Porto"}},
                ],
            ),
            "generateContent",
            None,
            False,
        )
    )
    config = no_afc(
        system_instruction="You compare weather reports.",
        tools=[types.Tool(function_declarations=[WEATHER]), types.Tool(google_search={})],
        thinking_config=types.ThinkingConfig(thinking_budget=512, include_thoughts=True),
        temperature=0.2,
    )
    gemini = client(running)
    question = types.Content(role="user", parts=[types.Part.from_text(text="Which is warmer?")])
    first = gemini.models.generate_content(model=MODEL, contents=[question], config=config)
    calls = first.function_calls or []
    assert [c.args for c in calls] == [{"city": "Lyon"}, {"city": "Porto"}]
    assert [c.id for c in calls] == [None, None]  # the Developer API sends none
    answers = types.Content(
        role="user",
        parts=[
            types.Part.from_function_response(name="get_weather", response={"temp_c": 14}),
            types.Part.from_function_response(name="get_weather", response={"temp_c": 19}),
        ],
    )
    assert first.candidates and first.candidates[0].content
    history = [question, first.candidates[0].content, answers]
    second = gemini.models.generate_content(model=MODEL, contents=history, config=config)
    assert second.text == "Hello from Gemini."

    one, two = running.audit()
    for record in (one, two):
        assert record["api"] == "gemini.generate_content"
        assert (record["model"], record["model_source"]) == (MODEL, "path")
        assert record["provider"] == "gcp.gemini"
        assert record["path"] == f"/v1/models/{MODEL}:generateContent"
        assert record["tool_names"] == ["get_weather"]
        assert record["hosted_tools"] == [{"type": "googleSearch", "name": None}]
        assert record["instructions_sha256"] == SYSTEM_SHA
        assert record["thinking"] == {"thinking_budget": 512, "include_thoughts": True}
        assert record["stream"] is False
    assert one["tool_results"] == []
    # {"temp_c":14} and {"temp_c":19}: 13 bytes each, no ids on the wire.
    assert two["tool_results"] == [
        {"call_id": None, "bytes": 13, "is_error": None},
        {"call_id": None, "bytes": 13, "is_error": None},
    ]
    # What the upstream got is what the client sent: the thought signature of
    # the call went back untouched.
    sent = running.upstream.received[1]
    assert two["body_sha256"] == hashlib.sha256(sent.raw).hexdigest()
    model_turn = sent.json()["contents"][1]["parts"]
    assert [p.get("thoughtSignature") for p in model_turn if "functionCall" in p] == [
        "c2lnLWNhbGw=",
        None,
    ]

    responses = running.events("response")
    assert responses[0]["tool_calls"] == [
        {"call_id": None, "name": "get_weather", "arguments": '{"city":"Lyon"}', "namespace": None},
        {
            "call_id": None,
            "name": "get_weather",
            "arguments": '{"city":"Porto"}',
            "namespace": None,
        },
    ]
    assert responses[0]["usage"] == {
        "input_tokens": 31,
        "output_tokens": 6,
        "total_tokens": 41,
        "cache_read_tokens": 8,
        "cache_write_tokens": None,
        "reasoning_tokens": 4,
    }
    assert responses[0]["finish_reasons"] == ["STOP"]
    assert responses[0]["response_id"] == "resp-gem1" and responses[0]["model"] == MODEL
    assert all(r["evidence_complete"] for r in responses)

    # The report pairs id-less calls with the id-less results by position.
    running.proxy.stop()
    (session,) = Capture.load(running.out).sessions.values()
    first_turn = session.turns[0]
    assert [inv.answered for inv in first_turn.tool_invocations] == [True, True]
    assert [inv.result_bytes for inv in first_turn.tool_invocations] == [13, 13]
    assert session.evidence_complete
    secret_free(running)


# --------------------------------------------------------------------------
# Streams: SSE and the JSON array, passed on as they arrive


def test_sse_stream_is_passed_on_as_it_arrives_and_observed(running: Running) -> None:
    gate = threading.Event()
    chunks = gemini_text_chunks(MODEL)
    running.upstream.replies.append(
        Reply(sse=[(None, c) for c in chunks], crlf=True, gate_after={0: gate})
    )
    gemini = client(running)  # (a client that is not kept closes itself)
    stream = gemini.models.generate_content_stream(
        model=MODEL, contents="Say hello.", config=no_afc()
    )
    it = iter(stream)
    first = next(it)  # would wait for the gate if the proxy buffered
    assert first.candidates and not gate.is_set()
    gate.set()
    rest = list(it)
    assert "".join(p.text or "" for c in rest for p in c.candidates[0].content.parts) == (
        "Hello from Gemini."
    )
    (record,) = running.audit()
    assert record["stream"] is True and record["path"].endswith(":streamGenerateContent?alt=sse")
    (event,) = running.events("response")
    assert event["stream"] is True and event["evidence_complete"] is True
    assert event["finish_reasons"] == ["STOP"] and event["usage"]["input_tokens"] == 31
    assert event["ttft_ms"] is not None


def test_json_array_stream_is_observed_element_by_element(running: Running) -> None:
    gate = threading.Event()
    chunks = gemini_text_chunks(MODEL)
    running.upstream.replies.append(Reply(json_array=chunks, gate_after={1: gate}))
    url = f"{running.base()}/v1beta/models/{MODEL}:streamGenerateContent"
    body = {"contents": [{"role": "user", "parts": [{"text": "Say hello."}]}]}
    received = b""
    headers = {"x-goog-api-key": KEY}
    with (
        httpx.Client(timeout=10) as http,
        http.stream("POST", url, json=body, headers=headers) as response,
    ):
        assert response.headers["content-type"].startswith("application/json")
        pieces = response.iter_raw()
        while b'"text": "Hello "' not in received:
            received += next(pieces)
        assert not gate.is_set()  # two elements arrived before the upstream went on
        gate.set()
        received += b"".join(pieces)
    assert orjson.loads(received) == chunks  # passed on byte for byte
    (event,) = running.events("response")
    assert event["stream"] is True and event["evidence_complete"] is True
    assert event["finish_reasons"] == ["STOP"]
    assert event["usage"]["reasoning_tokens"] == 4 and event["ttft_ms"] is not None
    secret_free(running)


def test_json_array_cut_short_is_incomplete_evidence(running: Running) -> None:
    chunks = gemini_text_chunks(MODEL)
    running.upstream.replies.append(Reply(json_array=chunks, cut_after=1))
    url = f"{running.base()}/v1beta/models/{MODEL}:streamGenerateContent"
    body = {"contents": [{"role": "user", "parts": [{"text": "Say hello."}]}]}
    with (
        httpx.Client(timeout=10) as http,
        pytest.raises(httpx.HTTPError),
        http.stream("POST", url, json=body) as response,
    ):
        b"".join(response.iter_raw())
    (error,) = running.events("error")
    assert error["error"] == "upstream_reset"
    (event,) = running.events("response")
    assert event["evidence_complete"] is False and event["finish_reasons"] is None
    assert event["capture_errors"][0] == "stream ended before a chunk with a finishReason"
    assert event["usage"]["input_tokens"] == 31  # what the elements that came said


# --------------------------------------------------------------------------
# Images, the refusal, Vertex, Code Assist, what passes unaudited


def test_images_count_with_their_media_resolution_and_image_detail_rewrites_them(
    start_proxy: Callable[..., Running],
) -> None:
    running = start_proxy(image_detail="high")
    image = types.Part(
        inline_data=types.Blob(data=PNG, mime_type="image/png"),
        media_resolution=types.PartMediaResolution(level="MEDIA_RESOLUTION_LOW"),
    )
    screenshot = types.Part.from_uri(file_uri="gs://bucket/shot.jpg", mime_type="image/jpeg")
    pdf = types.Part.from_uri(file_uri="gs://bucket/spec.pdf", mime_type="application/pdf")
    gemini = client(running)
    gemini.models.generate_content(
        model=MODEL,
        contents=[
            types.Content(
                role="user", parts=[types.Part.from_text(text="Compare."), image, screenshot, pdf]
            )
        ],
        config=no_afc(media_resolution="MEDIA_RESOLUTION_MEDIUM"),
    )
    (record,) = running.audit()
    assert record["image_count"] == 2
    assert record["image_details"] == ["MEDIA_RESOLUTION_HIGH", "MEDIA_RESOLUTION_HIGH"]
    parts = running.upstream.received[0].json()["contents"][0]["parts"]
    assert [p.get("mediaResolution") for p in parts] == [
        None,
        {"level": "MEDIA_RESOLUTION_HIGH"},
        {"level": "MEDIA_RESOLUTION_HIGH"},
        None,
    ]
    secret_free(running)


def test_an_image_in_the_instructions_is_refused_in_googles_error_shape(running: Running) -> None:
    instructions = types.Content(
        parts=[
            types.Part.from_text(text="Describe:"),
            types.Part.from_bytes(data=PNG, mime_type="image/png"),
        ]
    )
    gemini = client(running)
    with pytest.raises(genai_errors.ClientError) as caught:
        gemini.models.generate_content(
            model=MODEL, contents="hi", config=no_afc(system_instruction=instructions)
        )
    error = caught.value
    assert error.code == 400 and error.status == "INVALID_ARGUMENT"
    assert "[rule instructions_not_text]" in (error.message or "")
    assert running.upstream.received == [] and running.audit() == []
    (rejected,) = running.events("rejected")
    assert (
        rejected["rule"] == "instructions_not_text" and rejected["api"] == "gemini.generate_content"
    )
    secret_free(running)


def test_a_function_declaration_without_a_name_is_refused(running: Running) -> None:
    url = f"{running.base()}/v1beta/models/{MODEL}:generateContent"
    body = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "tools": [{"functionDeclarations": [{"description": "no name"}]}],
    }
    response = httpx.post(url, json=body)
    assert response.status_code == 400
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "[rule tool_without_name]" in response.json()["error"]["message"]
    assert running.upstream.received == []


def test_vertex_express_mode_is_gcp_vertex_ai(running: Running) -> None:
    gemini = client(running, vertexai=True)
    gemini.models.generate_content(model=MODEL, contents="hi")
    (record,) = running.audit()
    assert record["path"] == f"/v1beta1/publishers/google/models/{MODEL}:generateContent"
    assert (record["provider"], record["model"]) == ("gcp.vertex_ai", MODEL)
    secret_free(running)


def test_code_assist_wrapper_model_in_the_body_and_wrapped_stream(running: Running) -> None:
    base = running.base()
    body = {
        "model": "gemini-3-flash",
        "project": "my-project",
        "user_prompt_id": "p-1",
        "request": {
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "systemInstruction": {
                "role": "user",
                "parts": [{"text": "You compare weather reports."}],
            },
            "generationConfig": {
                "thinkingConfig": {"includeThoughts": True, "thinkingLevel": "HIGH"}
            },
            "session_id": "s-1",
        },
    }
    for method in ("loadCodeAssist", "retrieveUserQuota", "listExperiments", "countTokens"):
        assert (
            httpx.post(f"{base}/v1internal:{method}", json={"project": "my-project"}).status_code
            == 200
        )
    response = httpx.post(f"{base}/v1internal:streamGenerateContent?alt=sse", json=body)
    assert response.status_code == 200 and '"traceId"' in response.text
    (record,) = running.audit()
    assert (record["model"], record["model_source"], record["stream"]) == (
        "gemini-3-flash",
        "body",
        True,
    )
    assert record["instructions_sha256"] == SYSTEM_SHA and record["reasoning_effort"] == "HIGH"
    (event,) = running.events("response")
    assert event["evidence_complete"] is True and event["response_id"] == "resp-gem1"
    assert event["usage"]["total_tokens"] == GEMINI_USAGE["totalTokenCount"]
    assert [e["path"] for e in running.events("unaudited")] == [
        "/v1internal:loadCodeAssist",
        "/v1internal:retrieveUserQuota",
        "/v1internal:listExperiments",
        "/v1internal:countTokens",
    ]
    secret_free(running)


def test_count_tokens_passes_unaudited(running: Running) -> None:
    gemini = client(running)
    total = gemini.models.count_tokens(model=MODEL, contents="hello")
    assert total.total_tokens == 12
    assert running.audit() == []
    (event,) = running.events("unaudited")
    assert event["path"] == f"/v1/models/{MODEL}:countTokens"


def test_an_upstream_error_body_is_observed(running: Running) -> None:
    error = {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}
    running.upstream.replies.append(Reply(status=429, json=error))
    gemini = client(running)
    with pytest.raises(genai_errors.ClientError):
        next(iter(gemini.models.generate_content_stream(model=MODEL, contents="hi")))
    (event,) = running.events("response")
    assert event["status"] == 429 and event["response_status"] == "error"


def test_a_gemini_stub_answer_is_well_formed() -> None:
    """Guard for the stub's helpers: a whole answer is what the SDK reads."""
    chunk = gemini_chunk(MODEL, [{"text": "x"}], "STOP")
    parsed = types.GenerateContentResponse.model_validate(chunk)
    assert parsed.text == "x"


# --------------------------------------------------------------------------
# Spans: generate_content, the real provider, totals, content in the conventions' shape


def test_spans_name_the_operation_and_provider_and_carry_usage_totals_and_content(
    start_proxy: Callable[..., Running], otlp_http_receiver: HttpReceiver
) -> None:
    running = start_proxy(otlp=otlp_http_receiver.endpoint, capture_content=True)
    developer, vertex = client(running), client(running, vertexai=True)
    list(
        developer.models.generate_content_stream(
            model=MODEL,
            contents="Say hello.",
            config=no_afc(system_instruction="be brief", max_output_tokens=64, temperature=0.5),
        )
    )
    vertex.models.generate_content(model="gemini-2.5-pro", contents="hi")
    running.proxy.stop()
    summary = running.proxy.spans.summary
    assert summary is not None and " 0 dropped" in summary
    spans = otlp_http_receiver.wait_for(running.proxy.spans.telemetry.stats().exported)
    exchanges = {s.attributes["modeltap.seq"]: s for s in spans if "modeltap.seq" in s.attributes}
    stream, whole = exchanges[1], exchanges[2]

    assert stream.name == f"generate_content {MODEL}" and stream.kind == "CLIENT"
    attributes = stream.attributes
    assert attributes["gen_ai.operation.name"] == "generate_content"
    assert attributes["gen_ai.provider.name"] == "gcp.gemini"
    assert (attributes["gen_ai.request.model"], attributes["gen_ai.response.model"]) == (
        MODEL,
        MODEL,
    )
    assert attributes["gen_ai.request.stream"] is True
    assert attributes["gen_ai.request.max_tokens"] == 64
    assert attributes["gen_ai.request.temperature"] == 0.5
    # promptTokenCount counts the cached tokens; the output adds the thoughts.
    assert attributes["gen_ai.usage.input_tokens"] == 31
    assert attributes["gen_ai.usage.output_tokens"] == 6 + 4
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 8
    assert attributes["gen_ai.usage.reasoning.output_tokens"] == 4
    assert attributes["gen_ai.response.finish_reasons"] == ["STOP"]
    assert "openai.api.type" not in attributes
    assert orjson.loads(attributes["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "be brief"}
    ]
    assert orjson.loads(attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Say hello."}]}
    ]
    assert orjson.loads(attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "content": "Thinking it over."},
                {"type": "text", "content": "Hello from Gemini."},
            ],
            "finish_reason": "stop",
        }
    ]
    assert whole.name == "generate_content gemini-2.5-pro"
    assert whole.attributes["gen_ai.provider.name"] == "gcp.vertex_ai"


def test_the_tool_budget_counts_calls_without_ids(start_proxy: Callable[..., Running]) -> None:
    running = start_proxy(max_tool_calls=1)
    call = {"name": "get_weather", "args": {"city": "Lyon"}}
    for _ in range(3):
        running.upstream.replies.append(
            gemini_reply(gemini_function_call_chunks(MODEL, [call]), "generateContent", None, False)
        )
    gemini = client(running)
    config = no_afc(tools=[types.Tool(function_declarations=[WEATHER])])
    history: list[Any] = [types.Content(role="user", parts=[types.Part.from_text(text="go")])]
    answered = types.Part.from_function_response(name="get_weather", response={"temp_c": 14})
    with pytest.raises(genai_errors.ClientError) as caught:
        for _ in range(3):
            out = gemini.models.generate_content(model=MODEL, contents=history, config=config)
            assert out.candidates and out.candidates[0].content
            history += [out.candidates[0].content, types.Content(role="user", parts=[answered])]
    assert "[rule tool_budget_exceeded]" in (caught.value.message or "")
    # Turn 2 carried the result of call 1 (the budget): turn 3 was refused.
    assert len(running.upstream.received) == 2
    running.proxy.stop()
    (status,) = read_jsonl(running.out / "sessions.jsonl")
    assert status["stop_reason"] == "tool_budget_exceeded"
    assert status["tool_calls_admitted"] == 1


def test_a_key_in_the_query_is_never_written(running: Running) -> None:
    """curl and older clients send the API key as ``?key=``: forwarded, never recorded."""
    url = f"{running.base()}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse&key={KEY}"
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    answer = httpx.post(url, json=body, timeout=30)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event")
    assert f"key={KEY}" in running.upstream.received[-1].path  # the upstream needs it
    (record,) = running.audit()
    path = f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse&key=REDACTED"
    assert (record["path"], record["stream"]) == (path, True)
    secret_free(running)
