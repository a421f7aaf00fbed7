"""A three-turn tool loop through modeltap, judged with ``modeltap.expect`` and a case file.

The agent under test is an ordinary chat-completions tool loop written with the
openai SDK: it sends the question, runs the tools the model asks for, sends
their results back, and stops at the first text answer. The "model" is a tiny
local stand-in (standard library only) that asks for ``get_weather``, then
``get_time``, then answers, so the test needs no key and no network.

The test asserts in the order that matters:

1. the task's own output (modeltap cannot tell whether the answer is right);
2. verdicts on what the agent did (``modeltap.expect``): each is passed,
   failed or *unavailable* when the proxy did not see enough to tell, so a
   "not called" can never pass on a stream that was cut;
3. the execution facts underneath: tool arguments, tools advertised, token
   usage, and per turn which tool results came back and how fast.

The second test records the run and judges ``weather_cases.toml`` with
``modeltap check --expect``, as a CI job in any language would.

Run it with ``python -m pytest examples/test_tool_loop.py`` (needs modeltap
and openai installed). To drive a real model instead, drop the
``modeltap_config`` override and the stand-in's exact numbers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest

from modeltap import match, verdicts
from modeltap.pytest_plugin import ModelTapFixture

CASES = Path(__file__).with_name("weather_cases.toml")

MODEL = "stand-in-model"

# --------------------------------------------------------------------------
# The agent under test: two local tools and the loop that runs them


def get_weather(city: str) -> str:
    """The weather in ``city`` (fixed, so the test can check the answer)."""
    return json.dumps({"city": city, "temp_c": 18, "sky": "sunny"})


def get_time(timezone: str) -> str:
    """The local time in ``timezone`` (fixed, like the weather)."""
    return json.dumps({"timezone": timezone, "time": "14:05"})


TOOL_FUNCTIONS: dict[str, Callable[..., str]] = {"get_weather": get_weather, "get_time": get_time}

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Current local time in an IANA timezone.",
            "parameters": {
                "type": "object",
                "properties": {"timezone": {"type": "string"}},
                "required": ["timezone"],
            },
        },
    },
]


def run_agent(client: openai.OpenAI, question: str, max_turns: int = 5) -> str:
    """Ask ``question``, running requested tools until the model answers in text."""
    messages: list[Any] = [
        {"role": "system", "content": "Answer with the tools; be brief."},
        {"role": "user", "content": question},
    ]
    for _ in range(max_turns):
        completion = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        message = completion.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [call.model_dump() for call in message.tool_calls],
            }
        )
        for call in message.tool_calls:
            assert call.type == "function"
            arguments = json.loads(call.function.arguments)
            result = TOOL_FUNCTIONS[call.function.name](**arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise RuntimeError(f"no answer after {max_turns} turns")


# --------------------------------------------------------------------------
# The model stand-in: answers by how many tool results the request carries

#: (prompt_tokens, completion_tokens) the stand-in reports for turns 0, 1, 2.
USAGE = [(40, 12), (70, 11), (95, 18)]


def stand_in_reply(request: dict[str, Any]) -> dict[str, Any]:
    """A chat.completion answer: call get_weather, then get_time, then answer."""
    results = [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]
    turn = len(results)
    message: dict[str, Any]
    if turn < 2:
        name, call_id, arguments = [
            ("get_weather", "call_weather_1", {"city": "Paris"}),
            ("get_time", "call_time_1", {"timezone": "Europe/Paris"}),
        ][turn]
        message = {
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
        finish_reason = "tool_calls"
    else:
        weather, clock = results
        text = (
            f"In {weather['city']} it is {weather['temp_c']}°C and {weather['sky']}; "
            f"the time is {clock['time']}."
        )
        message = {"role": "assistant", "content": text}
        finish_reason = "stop"
    prompt_tokens, completion_tokens = USAGE[turn]
    return {
        "id": f"chatcmpl-stand-in-{turn}",
        "object": "chat.completion",
        "created": 1760000000,
        "model": request["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }


class _StandInHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        body = json.dumps(stand_in_reply(request)).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean


@pytest.fixture
def model_stand_in() -> Iterator[str]:
    """Serve the stand-in on a free port of 127.0.0.1; yield its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StandInHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def modeltap_config(model_stand_in: str, tmp_path: Path) -> dict[str, Any]:
    """Mount the stand-in as the ``openai`` route, so ``openai_base_url`` reaches it,
    and record the bodies (the final text is content: only a recording has it)."""
    return {"routes": [f"openai={model_stand_in}"], "record": str(tmp_path / "record")}


# --------------------------------------------------------------------------
# The test


def test_weather_and_time_tool_loop(modeltap: ModelTapFixture) -> None:
    client = openai.OpenAI(base_url=modeltap.openai_base_url, api_key="sk-not-used", max_retries=0)

    answer = run_agent(client, "What is the weather and the time in Paris?")

    # 1. The task's own output: modeltap records what happened, not whether it was right.
    assert "18°C" in answer and "14:05" in answer

    # 2. Verdicts: passed, failed, or unavailable when the evidence cannot tell.
    expect = modeltap.expect
    assert expect.tools_in_order(["get_weather", "get_time"])
    assert expect.tool_called("get_weather", city=match.fuzzy("PARIS"))
    assert expect.tool_called("get_time", timezone=match.regex("^Europe/"))
    assert expect.tool_not_called("send_email")  # judged: every call was seen and answered
    assert expect.max_tool_calls(3)
    assert expect.max_tokens(400)
    rolled = verdicts(expect.only_models([MODEL]), expect.instructions_unchanged())
    assert rolled, str(rolled)
    # The fixture records (modeltap_config), so the final text can be read.
    assert expect.final_text_contains("18°c and sunny")

    # 3. Execution facts.
    capture = modeltap.capture()
    assert capture.evidence_complete, capture.capture_errors
    assert capture.tool_was_called("get_weather")
    assert capture.tool_call_count("get_weather") == 1
    assert capture.tool_call_count("get_time") == 1
    assert not capture.tool_was_called("send_email")
    weather_call = capture.tool_calls_for("get_weather")[0]
    assert weather_call.arguments is not None
    assert json.loads(weather_call.arguments) == {"city": "Paris"}
    assert capture.tools_advertised() == ["get_weather", "get_time"]

    usage = capture.usage  # summed over the three turns
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (205, 41, 246)
    assert usage.cache_read_tokens == 0  # reported as zero: a known zero
    assert usage.cache_write_tokens is None  # chat completions never reports it: unknown

    # Per turn, as `modeltap report --json` shows it.
    (session,) = modeltap.report()["sessions"]
    turns = session["turns"]
    assert [turn["tool_calls"] for turn in turns] == [["get_weather"], ["get_time"], []]
    assert [turn["finish_reasons"] for turn in turns] == [["tool_calls"], ["tool_calls"], ["stop"]]
    for turn in turns[:2]:
        (invocation,) = turn["tool_invocations"]
        # The result came back in the very next request, with the size the agent sent.
        assert invocation["result_turn_index"] == turn["turn_index"] + 1
        expected = TOOL_FUNCTIONS[invocation["name"]](**invocation["args"])
        assert invocation["bytes"] == len(expected.encode())
        assert invocation["duration_ms"] is not None and invocation["duration_ms"] >= 0


@pytest.mark.modeltap(session="weather-1")
def test_the_case_file_passes_with_modeltap_check(
    modeltap: ModelTapFixture, tmp_path: Path
) -> None:
    client = openai.OpenAI(base_url=modeltap.openai_base_url, api_key="sk-not-used", max_retries=0)
    run_agent(client, "What is the weather and the time in Paris?")
    modeltap.end_session("weather-1")  # its sessions.jsonl line: `completed = true` reads it
    junit = tmp_path / "junit.xml"
    command = [sys.executable, "-m", "modeltap", "check", str(modeltap.out_dir)]
    command += ["--expect", str(CASES), "--record", str(modeltap.record_dir), "--junit", str(junit)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "[PASS] weather, then time, then the answer"
    assert lines[1] == "[PASS] priced under a cent"
    assert lines[2].startswith("       - unavailable (optional): max_cost(0.01)")
    assert lines[-1] == "2/2 passed, 0 failed, 0 unavailable"
    assert '<skipped message="optional, unavailable: max_cost(0.01)"' in junit.read_text()
