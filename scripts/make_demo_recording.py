"""Make the recording that ``modeltap demo`` replays.

Runs the demo agent (``modeltap.app.demo.agent``, the openai SDK) through
``modeltap run --record`` against the local test stub upstream
(``tests/upstream.py``), scripted to answer like a model would: stream a
``get_weather`` call, then a ``get_time`` call, then the final text. Nothing
leaves the machine and no key is needed.

    python scripts/make_demo_recording.py   # from the repository root

writes ``src/modeltap/app/demo/recording/`` (replacing it).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402
from tests.upstream import Reply, Upstream  # noqa: E402

from modeltap.app.demo import agent  # noqa: E402
from modeltap.app.proxy import Proxy, ProxyConfig  # noqa: E402

TARGET = ROOT / "src" / "modeltap" / "app" / "demo" / "recording"
CREATED = 1760000000


def chunk(n: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-demo{n}",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "gpt-demo-2025-01-01",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


def usage(n: int, prompt: int, completion: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-demo{n}",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "gpt-demo-2025-01-01",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }


def tool_call(n: int, call_id: str, name: str, parts: list[str], prompt: int) -> Reply:
    first = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }
    events: list[tuple[str | None, Any]] = [
        (None, chunk(n, {"role": "assistant", "content": None})),
        (None, chunk(n, {"tool_calls": [first]})),
    ]
    for part in parts:
        events.append(
            (None, chunk(n, {"tool_calls": [{"index": 0, "function": {"arguments": part}}]}))
        )
    events += [(None, chunk(n, {}, "tool_calls")), (None, usage(n, prompt, 18)), (None, "[DONE]")]
    # A model thinks before it calls: pauses the replay reproduces at the recorded pace.
    return Reply(sse=events, pause_after={0: 0.12, 2: 0.04})


def answer(n: int, words: list[str], prompt: int) -> Reply:
    events: list[tuple[str | None, Any]] = [(None, chunk(n, {"role": "assistant", "content": ""}))]
    events += [(None, chunk(n, {"content": w})) for w in words]
    events += [(None, chunk(n, {}, "stop")), (None, usage(n, prompt, 24)), (None, "[DONE]")]
    return Reply(sse=events, pause_after={i: 0.03 for i in range(1, len(words) + 1)})


def main() -> int:
    with Upstream() as stub, tempfile.TemporaryDirectory() as out:
        stub.replies.extend(
            [
                tool_call(1, "call_weather1", "get_weather", ['{"city": ', '"Lisbon"}'], 112),
                tool_call(2, "call_time1", "get_time", ['{"timezone": ', '"Europe/Lisbon"}'], 160),
                answer(
                    3,
                    [
                        "Yes: ",
                        "it is 17:40 ",
                        "in Lisbon, ",
                        "21°C ",
                        "and clear. ",
                        "Enjoy the walk!",
                    ],
                    205,
                ),
            ]
        )
        shutil.rmtree(TARGET, ignore_errors=True)
        config = ProxyConfig(
            listen_port=0,
            out=out,
            routes=[f"openai={stub.url}"],
            session=agent.SESSION,
            record=str(TARGET),
            quiet=True,
        )
        with Proxy(config) as proxy:
            client = openai.OpenAI(
                base_url=f"{proxy.url}/openai/v1",
                api_key="not-a-real-key",
                max_retries=0,
                http_client=openai.DefaultHttpxClient(trust_env=False),
            )
            print(agent.run_agent(client))
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
