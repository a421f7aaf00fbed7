"""Make ``docs/view.png``, the README's picture of ``modeltap view``.

Runs a small research agent through modeltap against the local test stub
(``tests/upstream.py``; no key, no network) with the openai and anthropic
SDKs, with model latency and tool time played out so the timeline has
something to show: streamed answers, parallel tool calls, a 429 that the SDK
retries, a tool catalogue and a model that change mid-run, and an upstream
that is down. Then it writes the page and photographs it in headless
Chromium (Debian's, driven by Playwright).

    .venv/bin/python scripts/make_view_screenshot.py [--out docs/view.png] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openai
from playwright.sync_api import sync_playwright
from tests.upstream import Reply, anthropic_text_sse, anthropic_tool_sse, chat_delta_chunk
from tests.view_browser import CHROMIUM, CHROMIUM_ARGS, PageWatch
from tests.view_captures import running_proxy

from modeltap.report.view import build_page

MODEL, SMALL = "gpt-5-stub", "gpt-5-mini-stub"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return chat_delta_chunk(MODEL, delta, finish, response_id="chatcmpl-demo")


def tool_calls_sse(calls: list[tuple[str, str]], think: float, usage: tuple[int, int]) -> Reply:
    """A streamed chat answer asking for ``calls`` (name, arguments) after ``think`` seconds."""
    events: list[tuple[str | None, Any]] = [(None, _chunk({"role": "assistant", "content": None}))]
    for i, (name, arguments) in enumerate(calls):
        first = {"index": i, "id": f"call_{name}_{i}", "type": "function"}
        events.append(
            (None, _chunk({"tool_calls": [{**first, "function": {"name": name, "arguments": ""}}]}))
        )
        events.append(
            (None, _chunk({"tool_calls": [{"index": i, "function": {"arguments": arguments}}]}))
        )
    events.append((None, _chunk({}, "tool_calls")))
    events.append(
        (
            None,
            {
                **_chunk({}),
                "choices": [],
                "usage": {
                    "prompt_tokens": usage[0],
                    "completion_tokens": usage[1],
                    "total_tokens": sum(usage),
                    "prompt_tokens_details": {"cached_tokens": usage[0] // 2},
                },
            },
        )
    )
    events.append((None, "[DONE]"))
    return Reply(sse=events, pause_after={0: think, 2: 0.12})


def text_sse(model: str, think: float) -> Reply:
    words = ["The ", "two ", "sources ", "agree: ", "ship ", "it."]
    start = {**_chunk({"role": "assistant"}), "model": model}
    events: list[tuple[str | None, Any]] = [(None, start)]
    events += [(None, {**_chunk({"content": w}), "model": model}) for w in words]
    events.append((None, {**_chunk({}, "stop"), "model": model}))
    events.append(
        (
            None,
            {
                **_chunk({}),
                "model": model,
                "choices": [],
                "usage": {"prompt_tokens": 2100, "completion_tokens": 48, "total_tokens": 2148},
            },
        )
    )
    events.append((None, "[DONE]"))
    return Reply(sse=events, pause_after={0: think, 3: 0.15, 5: 0.15})


def function(name: str) -> Any:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def stream_chat(
    client: openai.OpenAI, messages: list[Any], tools: list[Any], model: str = MODEL, **extra: Any
) -> None:
    """Send one streamed chat request (usage included) and read its answer to the end."""
    with client.chat.completions.create(
        model=model,
        messages=messages,
        tools=tools,
        stream=True,
        stream_options={"include_usage": True},
        **extra,
    ) as stream:
        for _ in stream:
            pass


def asked_for(calls: list[tuple[str, str]]) -> dict[str, Any]:
    """The assistant message that asked for ``calls`` (name, arguments), as the
    agent sends it back (call ids as :func:`tool_calls_sse` gives them)."""
    return {
        "role": "assistant",
        "tool_calls": [
            {
                "id": f"call_{name}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
            for i, (name, arguments) in enumerate(calls)
        ],
    }


def run_agents(out: Path) -> None:
    with running_proxy(out) as run:
        up = run.upstream
        client = run.openai("research-agent")
        tools = [function("search"), function("fetch")]
        messages: list[Any] = [
            {"role": "system", "content": "You are a research agent."},
            {"role": "user", "content": "Should we ship?"},
        ]
        script = [
            ([("search", '{"q": "release notes", "top_k": 5}')], 0.45, (820, 31)),
            (
                [
                    ("fetch", '{"url": "https://example.test/a"}'),
                    ("fetch", '{"url": "https://example.test/b"}'),
                ],
                0.6,
                (1430, 52),
            ),
        ]
        tool_time = [0.35, 0.8]
        for step, (calls, think, usage) in enumerate(script):
            up.replies.append(tool_calls_sse(calls, think, usage))
            stream_chat(client, messages, tools)
            messages.append(asked_for(calls))
            time.sleep(tool_time[step])
            messages += [
                {"role": "tool", "tool_call_id": f"call_{name}_{i}", "content": "x" * 900 * (i + 1)}
                for i, (name, _) in enumerate(calls)
            ]
        # The catalogue grows; the first try is rate limited and the SDK retries it.
        tools.append(function("summarize"))
        limited = {"error": {"message": "slow down"}}
        up.replies.append(Reply(status=429, json=limited, headers={"retry-after-ms": "200"}))
        up.replies.append(tool_calls_sse([("summarize", '{"max_words": 80}')], 0.5, (1900, 40)))
        stream_chat(client, messages, tools)
        time.sleep(0.3)
        messages += [
            asked_for([("summarize", '{"max_words": 80}')]),
            {"role": "tool", "tool_call_id": "call_summarize_0", "content": "y" * 400},
        ]
        # The last turn moves to a smaller model with low effort.
        up.replies.append(text_sse(SMALL, 0.35))
        stream_chat(client, messages, tools, model=SMALL, reasoning_effort="low")

        claude = run.anthropic("claude-reviewer")
        reply = anthropic_tool_sse("claude-stub")
        reply.pause_after = {0: 0.4}
        up.replies.append(reply)
        tool_list: Any = [{"name": "lookup", "input_schema": {"type": "object"}}]
        with claude.messages.stream(
            model="claude-stub",
            max_tokens=1024,
            system="Review the answer.",
            tools=tool_list,
            messages=[{"role": "user", "content": "Review"}],
        ) as stream:
            message = stream.get_final_message()
        time.sleep(0.25)
        reply = anthropic_text_sse("claude-stub")
        reply.pause_after = {0: 0.3}
        up.replies.append(reply)
        use = next(b for b in message.content if b.type == "tool_use")
        with claude.messages.stream(
            model="claude-stub",
            max_tokens=1024,
            system="Review the answer.",
            tools=tool_list,
            messages=[
                {"role": "user", "content": "Review"},
                {"role": "assistant", "content": message.content},  # type: ignore[typeddict-item]
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "ok"}],
                },
            ],
        ) as stream:
            stream.get_final_message()

        broken = run.openai("flaky-upstream", route="dead", retries=0)
        with suppress(openai.APIStatusError):
            hello = [{"role": "user", "content": "hi"}]
            broken.chat.completions.create(model=MODEL, messages=hello)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/view.png", help="where the PNG goes")
    parser.add_argument("--keep", help="also keep the capture and the page in this directory")
    parser.add_argument("--turn", default="t2", help="the row to select (default t2)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="modeltap-view-shot-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        out = root / "out"
        run_agents(out)
        page_file = root / "view.html"
        page_file.write_text(build_page(out, title="research-agent run"), encoding="utf-8")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            tab = browser.new_page(viewport={"width": 1440, "height": 860})
            watch = PageWatch(tab)
            tab.goto(page_file.as_uri() + f"#s=research-agent&r={args.turn}")
            tab.wait_for_selector("html[data-ready=true]")
            tab.screenshot(path=args.out)
            watch.assert_clean()
            browser.close()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
