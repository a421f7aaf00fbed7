"""A Gemini tool loop reads as an OpenAI one: in the report and in the spans.

The same loop — the model asks for ``lookup``, the client runs it and sends a
13-byte result back, the model answers — is driven once with the openai SDK
(chat, the call has an id) and once with the google-genai SDK (Developer API,
the call has none), each in its own session of one proxy exporting OTLP.
What ``modeltap report`` and the ``execute_tool`` spans say about the tool
must not depend on the wire: Gemini's call is paired by position
(:mod:`modeltap.evidence.pairing`) where the chat call is paired by id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import orjson
from google import genai
from google.genai import types

from modeltap.evidence.capture import Capture
from modeltap.report.report import build_report, render_text
from tests.conftest import Running
from tests.otlp_receiver import HttpReceiver
from tests.upstream import (
    TOOL_ARGUMENTS,
    chat_text_json,
    chat_tool_json,
    gemini_function_call_chunks,
    gemini_reply,
)

pytest_plugins = ["tests.otlp_fixtures"]

MODEL = "gemini-2.5-flash"
#: What the tool gave back, 13 bytes on both wires: the chat tool message's
#: content, and the compact JSON of Gemini's ``functionResponse.response``.
RESULT = {"temp_c": 14}
LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
}


def chat_loop(running: Running) -> None:
    chat = openai.OpenAI(
        base_url=running.base() + "/v1",
        api_key="sk-x",
        max_retries=0,
        default_headers={"x-modeltap-session": "chat-loop"},
    )
    tools: Any = [{"type": "function", "function": {"name": "lookup", "parameters": LOOKUP_SCHEMA}}]
    messages: list[Any] = [{"role": "user", "content": "What is the weather?"}]
    first = chat.chat.completions.create(model="gpt-5", messages=messages, tools=tools)
    (call,) = first.choices[0].message.tool_calls or []
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": orjson.dumps(RESULT).decode()},
    ]
    chat.chat.completions.create(model="gpt-5", messages=messages, tools=tools)


def gemini_loop(running: Running) -> None:
    options = types.HttpOptions(
        base_url=running.base(), headers={"x-modeltap-session": "gemini-loop"}
    )
    gemini = genai.Client(api_key="AIza-x", http_options=options)
    config = types.GenerateContentConfig(
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        tools=[
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(name="lookup", parameters_json_schema=LOOKUP_SCHEMA)
                ]
            )
        ],
    )
    question = types.Content(role="user", parts=[types.Part.from_text(text="What is the weather?")])
    first = gemini.models.generate_content(model=MODEL, contents=[question], config=config)
    assert first.candidates and first.candidates[0].content
    (call,) = first.function_calls or []
    assert call.id is None  # the Developer API names no call
    answer = types.Content(
        role="user",
        parts=[types.Part.from_function_response(name="lookup", response=RESULT)],
    )
    history = [question, first.candidates[0].content, answer]
    gemini.models.generate_content(model=MODEL, contents=history, config=config)


def tool_story(session: dict[str, Any]) -> dict[str, Any]:
    """What the report says about the session's tools, whatever the wire."""
    return {
        "turn_count": session["turn_count"],
        "tools_advertised": session["tools_advertised"],
        "tool_calls": session["tool_calls"],
        "invocations": [
            (inv["name"], inv["args"], inv["bytes"], inv["result_turn_index"])
            for inv in session["tool_invocations"]
        ],
        "results_sent": [
            [r["bytes"] for r in turn["tool_results_sent"]] for turn in session["turns"]
        ],
        "evidence_complete": session["evidence_complete"],
        "coverage": {name: c["status"] for name, c in session["coverage"].items()},
    }


def test_a_gemini_tool_loop_reads_as_an_openai_one(
    start_proxy: Callable[..., Running], otlp_http_receiver: HttpReceiver
) -> None:
    running = start_proxy(otlp=otlp_http_receiver.endpoint)
    running.upstream.replies += [
        chat_tool_json("gpt-5"),
        chat_text_json("gpt-5"),
        gemini_reply(
            gemini_function_call_chunks(
                MODEL, [{"name": "lookup", "args": orjson.loads(TOOL_ARGUMENTS)}]
            ),
            "generateContent",
            None,
            False,
        ),
    ]
    chat_loop(running)
    gemini_loop(running)  # its second answer is the stub's default text
    running.proxy.stop()

    report = build_report(Capture.load(running.out))
    sessions = {s["session_id"]: s for s in report["sessions"]}
    chat, gemini = sessions["chat-loop"], sessions["gemini-loop"]
    assert [t["api"] for t in gemini["turns"]] == ["gemini.generate_content"] * 2
    assert tool_story(gemini) == tool_story(chat)
    # And what they both say, written out: one call, answered by the next turn
    # (result_turn_index 1, shown as turn 2: turns are numbered from 1).
    assert tool_story(gemini)["invocations"] == [("lookup", {"q": "weather", "n": 3}, 13, 1)]
    assert tool_story(gemini)["results_sent"] == [[], [13]]
    assert gemini["evidence_complete"] is True
    assert [inv["call_id"] for inv in gemini["tool_invocations"]] == [None]
    text = render_text(report)
    gemini_text = text[text.index("session gemini-loop") :]
    assert "(no call_id)  -> turn 2" in gemini_text
    assert "no result" not in gemini_text

    spans = otlp_http_receiver.wait_for(running.proxy.spans.telemetry.stats().exported)
    tools = {
        s.attributes.get("gen_ai.tool.call.id", "(none)"): s
        for s in spans
        if s.name == "execute_tool lookup"
    }
    assert set(tools) == {"call_lookup1", "(none)"}
    for span in tools.values():
        assert span.attributes["modeltap.tool.result_seen"] is True
        assert span.attributes["modeltap.tool.result_bytes"] == 13
        assert span.end_ns >= span.start_ns
    # Each tool span hangs in its own session's trace, beside that session's exchanges.
    traces = {
        s.attributes["modeltap.session_id"]: s.trace_id
        for s in spans
        if "modeltap.seq" in s.attributes
    }
    assert tools["(none)"].trace_id == traces["gemini-loop"] != traces["chat-loop"]
    assert tools["call_lookup1"].trace_id == traces["chat-loop"]
