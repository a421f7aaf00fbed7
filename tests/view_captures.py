"""Real captures for the page's tests: the proxy driven by the openai and anthropic SDKs.

Each function starts the stub upstream and a proxy of its own (as the
``start_proxy`` fixture does), runs agents through it with the official SDKs,
stops the proxy (which writes ``sessions.jsonl``) and returns where the files
are. Nothing is written by hand: the page is tested on what modeltap wrote.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from modeltap.app import control
from modeltap.app.proxy import Proxy, ProxyConfig
from tests.upstream import (
    TOOL_ARGUMENTS,
    Reply,
    Upstream,
    anthropic_text_sse,
    anthropic_tool_sse,
    chat_delta_chunk,
    chat_text_json,
    chat_text_sse,
    chat_tool_json,
)

#: Strings an agent or a model controls, each trying to run script in the page.
#: Every one sets a different ``window.__pwned`` value, so a test names the hole.
INJECT_SESSION = '<img src=x onerror="window.__pwned=1">'
INJECT_MODEL = "</script><script>window.__pwned=2</script>"
INJECT_TOOL = "<img src=x onerror=window.__pwned=3>"
INJECT_CALLED = "<svg onload=window.__pwned=4>"
INJECT_ARGUMENTS = '{"q": "</script><script>window.__pwned=5</script>", "n": "<!--"}'
INJECT_CALL_ID = "call_<b onmouseover=window.__pwned=6>x</b>"

#: A prompt that must never reach the page unless the recording is given.
SECRET_PROMPT = "the-user-prompt-text-7f3a"

SYSTEM_A = "You are a careful assistant."
SYSTEM_B = "You are a careful assistant. Answer in French."


def _function(name: str) -> Any:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def chat_tool_reply(model: str, name: str, arguments: str, call_id: str) -> Reply:
    """A chat completion that asks for one tool call; its id is made of the call's."""
    return chat_tool_json(
        model,
        name=name,
        arguments=arguments,
        call_id=call_id,
        response_id=f"chatcmpl-{call_id[:20]}",
        usage={"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
    )


@contextmanager
def running_proxy(out: Path, record: Path | None = None, **config: Any) -> Iterator[Running]:
    """The stub upstream and a proxy routing ``/stub`` (and a dead route) to it."""
    with Upstream() as upstream:
        cfg = ProxyConfig(
            listen_port=0,
            out=str(out),
            routes=[f"stub={upstream.url}", "dead=http://127.0.0.1:9"],
            quiet=True,
            record=str(record) if record is not None else None,
            **config,
        )
        proxy = Proxy(cfg).start()
        try:
            yield Running(proxy, upstream, out)
        finally:
            proxy.stop()


@dataclass
class Running:
    proxy: Proxy
    upstream: Upstream
    out: Path

    def openai(self, session: str, route: str = "stub", retries: int = 2) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.proxy.url}/{route}/v1",
            api_key="sk-test",
            max_retries=retries,
            default_headers={"x-modeltap-session": session},
        )

    def anthropic(self, session: str) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            base_url=f"{self.proxy.url}/stub",
            api_key="sk-ant-test",
            max_retries=0,
            default_headers={"x-modeltap-session": session},
        )


def _ws_messages() -> list[Any]:
    """A Responses WebSocket conversation: a turn, a continuation that does not
    restate its instructions and tools (refused: ``--continuation explicit``),
    and a turn that states them again without the hosted tool."""
    tools: list[Any] = [
        {"type": "function", "name": "shell", "parameters": {"type": "object"}},
        {"type": "web_search"},
    ]
    user = [{"role": "user", "content": [{"type": "input_text", "text": "list files"}]}]
    return [
        {
            "type": "response.create",
            "model": "gpt-stub-codex",
            "instructions": "You are a coding agent.",
            "tools": tools,
            "reasoning": {"effort": "medium"},
            "input": user,
        },
        {
            "type": "response.create",
            "model": "gpt-stub-codex",
            "previous_response_id": "resp_ws1",
            "input": user,
        },
        {
            "type": "response.create",
            "model": "gpt-stub-codex",
            "instructions": "You are a coding agent.",
            "tools": tools[:1],
            "reasoning": {"effort": "high"},
            "input": user,
        },
    ]


@dataclass(frozen=True)
class Made:
    out: Path
    record: Path


def make_rich_capture(root: Path) -> Made:
    """Sessions that exercise every part of the page.

    * ``agent-1`` (openai chat): turn 0 asks for ``lookup``; turn 1 adds
      ``get_time``, changes the instructions and sets effort ``low``, and is
      answered 429, so the SDK retries it (turn 2, the same body) and gets a
      ``get_time`` call; turn 3 changes the model and drops ``lookup``.
    * ``claude-1`` (anthropic, streamed, thinking): a tool call, then an answer,
      the first byte held back so time to first chunk is visible.
    * ``ended-1``: ended through the control API, then a request that is
      refused (``session_ended``).
    * ``broken-1``: a route whose upstream is down (an error event, 502).
    * the injection session: a session id, model, tool names, call id and
      arguments that try to run script.
    * ``codex-ws`` (Responses over WebSocket): a turn, a refused continuation,
      a turn that drops the hosted ``web_search`` and raises the effort.
    * ``idle-1``: named with ``--session`` and never used ("audit unsupported").
    """
    out, record = root / "out", root / "rec"
    with running_proxy(out, record, session="idle-1") as run:
        up = run.upstream
        client = run.openai("agent-1")
        up.replies.append(chat_tool_reply("gpt-stub", "lookup", TOOL_ARGUMENTS, "call_lookup1"))
        first = client.chat.completions.create(
            model="gpt-stub",
            messages=[
                {"role": "system", "content": SYSTEM_A},
                {"role": "user", "content": SECRET_PROMPT},
            ],
            tools=[_function("lookup")],
        )
        call = first.choices[0].message
        up.replies.append(
            Reply(
                status=429,
                json={"error": {"message": "slow down"}},
                headers={"retry-after-ms": "5"},
            )
        )
        up.replies.append(chat_tool_reply("gpt-stub", "get_time", '{"tz": "UTC"}', "call_time1"))
        history: list[Any] = [
            {"role": "system", "content": SYSTEM_B},
            {"role": "user", "content": SECRET_PROMPT},
            call.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": "call_lookup1", "content": '{"sky": "sunny"}'},
        ]
        second = client.chat.completions.create(
            model="gpt-stub",
            messages=history,
            tools=[_function("lookup"), _function("get_time")],
            reasoning_effort="low",
        )
        history += [
            second.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": "call_time1", "content": '{"time": "14:05"}'},
        ]
        up.replies.append(chat_text_json("gpt-stub-mini", "It is sunny."))
        client.chat.completions.create(
            model="gpt-stub-mini",
            messages=history,
            tools=[_function("get_time")],
            reasoning_effort="low",
        )

        claude = run.anthropic("claude-1")
        reply = anthropic_tool_sse("claude-stub")
        reply.pause_after = {0: 0.06}
        up.replies.append(reply)
        # The agent states the same settings on both turns.
        settings: Any = {
            "model": "claude-stub",
            "max_tokens": 2048,
            "system": "Be brief.",
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "tools": [{"name": "lookup", "input_schema": {"type": "object"}}],
        }
        with claude.messages.stream(
            **settings,
            messages=[{"role": "user", "content": "Weather?"}],
        ) as stream:
            message = stream.get_final_message()
        use = next(b for b in message.content if b.type == "tool_use")
        reply = anthropic_text_sse("claude-stub")
        reply.pause_after = {0: 0.03}
        up.replies.append(reply)
        with claude.messages.stream(
            **settings,
            messages=[
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": message.content},  # type: ignore[typeddict-item]
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 18 C"}
                    ],
                },
            ],
        ) as stream:
            stream.get_final_message()

        ended = run.openai("ended-1", retries=0)
        ended.chat.completions.create(
            model="gpt-stub", messages=[{"role": "user", "content": "hi"}]
        )
        control.end_session(out, "ended-1")
        with suppress(openai.APIStatusError):
            ended.chat.completions.create(
                model="gpt-stub", messages=[{"role": "user", "content": "again"}]
            )

        broken = run.openai("broken-1", route="dead", retries=0)
        with suppress(openai.APIStatusError):
            broken.chat.completions.create(
                model="gpt-stub", messages=[{"role": "user", "content": "hi"}]
            )

        codex = run.openai("codex-ws", retries=0)
        with codex.responses.connect() as conn:
            for message in _ws_messages():
                conn.send(message)
                for event in conn:
                    if event.type in ("response.completed", "error"):
                        break

        evil = run.openai(INJECT_SESSION)
        up.replies.append(
            chat_tool_reply(INJECT_MODEL, INJECT_CALLED, INJECT_ARGUMENTS, INJECT_CALL_ID)
        )
        evil.chat.completions.create(
            model=INJECT_MODEL,
            messages=[{"role": "user", "content": "hi"}],
            tools=[_function(INJECT_TOOL)],
        )
    return Made(out, record)


def make_long_capture(out: Path, turns: int, record: Path | None = None) -> Path:
    """One session of ``turns`` turns, an agent loop through the openai SDK
    (recorded into ``record`` when given).

    Every other answer asks for a tool whose result goes back in the next
    request, so the timeline has model calls and tool gaps all along.
    """
    with running_proxy(out, record) as run:
        client = run.openai("long-1", retries=0)
        messages: list[Any] = [{"role": "user", "content": "start"}]
        for i in range(turns):
            if i % 2 == 0:
                run.upstream.replies.append(
                    chat_tool_reply("gpt-stub", f"tool_{i % 7}", f'{{"i": {i}}}', f"call_{i}")
                )
            answer = client.chat.completions.create(
                model="gpt-stub",
                messages=messages,
                tools=[_function(f"tool_{n}") for n in range(7)],
            )
            message = answer.choices[0].message
            if message.tool_calls:
                messages = [
                    {"role": "user", "content": "go on"},
                    message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "ok"},
                ]
            else:
                messages = [{"role": "user", "content": f"next {i}"}]
    return out


@pytest.fixture(scope="session")
def rich_capture(tmp_path_factory: pytest.TempPathFactory) -> Made:
    """:func:`make_rich_capture`, made once per test session."""
    return make_rich_capture(tmp_path_factory.mktemp("view-rich"))


#: The model of :func:`make_weather_capture`: a dated name, as providers answer.
WEATHER_MODEL = "gpt-4.1-mini-2025-04-14"


def _streamed_tool_calls(calls: list[tuple[str, str, str]], think: float) -> Reply:
    """A streamed chat answer asking for ``calls`` (call id, name, arguments),
    its first chunk held back ``think`` seconds."""
    model = WEATHER_MODEL
    events: list[tuple[str | None, Any]] = [
        (None, chat_delta_chunk(model, {"role": "assistant", "content": None}))
    ]
    for i, (call_id, name, arguments) in enumerate(calls):
        head = {"index": i, "id": call_id, "type": "function"}
        function = {"name": name, "arguments": arguments}
        events.append(
            (None, chat_delta_chunk(model, {"tool_calls": [{**head, "function": function}]}))
        )
    events.append((None, chat_delta_chunk(model, {}, "tool_calls")))
    usage = {"prompt_tokens": 310, "completion_tokens": 24, "total_tokens": 334}
    events.append((None, {**chat_delta_chunk(model, {}), "choices": [], "usage": usage}))
    events.append((None, "[DONE]"))
    return Reply(sse=events, pause_after={0: think, 1: 0.15})


def make_weather_capture(out: Path) -> Path:
    """One agent session of about three seconds, as a first user makes one.

    ``weather-1`` (openai chat, streamed, usage included, a dated model name):
    the model asks for ``get_weather``, the agent takes 0.6 s to run it; then
    for ``get_weather`` and ``get_local_time`` at once (0.5 s); then it
    answers in text, streamed over half a second. The session is ended
    through the control API, as a harness does.
    """
    with running_proxy(out) as run:
        up, client = run.upstream, run.openai("weather-1", retries=0)
        tools = [_function("get_weather"), _function("get_local_time")]
        messages: list[Any] = [{"role": "user", "content": "Walk in Lisbon or Porto?"}]
        script = [
            ([("call_w1", "get_weather", '{"city": "Lisbon"}')], 0.45, 0.6),
            (
                [
                    ("call_w2", "get_weather", '{"city": "Porto"}'),
                    ("call_t1", "get_local_time", '{"tz": "Europe/Lisbon"}'),
                ],
                0.4,
                0.5,
            ),
        ]
        for calls, think, tool_time in script:
            up.replies.append(_streamed_tool_calls(calls, think))
            with client.chat.completions.create(
                model=WEATHER_MODEL, messages=messages, tools=tools, stream=True,
                stream_options={"include_usage": True},
            ) as stream:  # fmt: skip
                for _ in stream:
                    pass
            time.sleep(tool_time)  # the agent runs its tools
            messages.append(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": c, "type": "function", "function": {"name": n, "arguments": a}}
                        for c, n, a in calls
                    ],
                }
            )
            messages += [{"role": "tool", "tool_call_id": c, "content": "{}"} for c, _, _ in calls]
        answer = chat_text_sse(WEATHER_MODEL, include_usage=True)
        answer.pause_after = {0: 0.3, 1: 0.25, 2: 0.25}
        up.replies.append(answer)
        with client.chat.completions.create(
            model=WEATHER_MODEL, messages=messages, tools=tools, stream=True,
            stream_options={"include_usage": True},
        ) as stream:  # fmt: skip
            for _ in stream:
                pass
        control.end_session(run.out, "weather-1")
    return out
