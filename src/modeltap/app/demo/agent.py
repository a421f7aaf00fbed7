"""The agent of ``modeltap demo``: an ordinary openai-SDK chat tool loop.

It asks one question, streams each completion, runs the tools the model asks
for, sends their results back and stops at the first text answer. The
shipped recording (``recording/``, made by ``scripts/make_demo_recording.py``)
answers it: ``get_weather``, then ``get_time``, then the final text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai

MODEL = "gpt-demo"
SESSION = "demo"
SYSTEM = "You are a concise travel assistant. Use the tools; never guess."
QUESTION = "Is it a good time for a walk in Lisbon right now?"


def get_weather(city: str) -> str:
    """The weather in ``city`` (fixed: the demo needs no network)."""
    return json.dumps({"city": city, "temp_c": 21, "sky": "clear"})


def get_time(timezone: str) -> str:
    """The local time in ``timezone`` (fixed, like the weather)."""
    return json.dumps({"timezone": timezone, "time": "17:40"})


TOOL_FUNCTIONS: dict[str, Callable[..., str]] = {
    "get_weather": get_weather,
    "get_time": get_time,
}

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


def run_agent(client: openai.OpenAI, question: str = QUESTION, max_turns: int = 6) -> str:
    """Run the tool loop until the model answers in text.

    Args:
        client: an OpenAI client whose base URL points at modeltap.
        question: the user's question.
        max_turns: the most completions it asks for.

    Returns:
        The model's final text.

    Raises:
        RuntimeError: if the model is still calling tools after ``max_turns``.
    """
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": question},
    ]
    for _ in range(max_turns):
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        stream = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            tools=TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                for call in delta.tool_calls or []:
                    slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                    if call.id:
                        slot["id"] = call.id
                    if call.function and call.function.name:
                        slot["name"] += call.function.name
                    if call.function and call.function.arguments:
                        slot["arguments"] += call.function.arguments
        if not calls:
            return "".join(text)
        ordered = [calls[i] for i in sorted(calls)]
        messages.append(
            {
                "role": "assistant",
                "content": "".join(text) or None,
                "tool_calls": [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for c in ordered
                ],
            }
        )
        for c in ordered:
            result = TOOL_FUNCTIONS[c["name"]](**json.loads(c["arguments"] or "{}"))
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})
    raise RuntimeError(f"the model still called tools after {max_turns} turns")
