"""Auditing a body with its large payloads elided gives exactly the same facts."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from modeltap.apis import anthropic_messages, json_body, openai_chat, openai_responses

BIG = base64.b64encode(b"\x89PNG" * (json_body.ELIDE_MIN_BYTES // 2)).decode()
URL = "data:image/png;base64," + BIG


def chat_body() -> dict[str, Any]:
    return {
        "model": "gpt-5",
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": URL}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "small"},
        ],
    }


def responses_body() -> dict[str, Any]:
    return {
        "model": "gpt-5",
        "instructions": "I",
        "input": [
            {"role": "user", "content": [{"type": "input_image", "image_url": URL}]},
            {
                "type": "function_call_output",
                "call_id": "c9",
                "output": [
                    {"type": "input_text", "text": "see"},
                    {"type": "input_image", "image_url": URL, "detail": "low"},
                    {"type": "input_file", "file_data": URL, "filename": "a.pdf"},
                ],
            },
        ],
    }


def anthropic_body() -> dict[str, Any]:
    source = {"type": "base64", "media_type": "image/png", "data": BIG}
    return {
        "model": "claude-x",
        "max_tokens": 5,
        "system": [{"type": "text", "text": "Sys"}],
        "messages": [
            {"role": "user", "content": [{"type": "image", "source": source}]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "image", "source": source}],
                    }
                ],
            },
        ],
    }


CASES = [
    (openai_chat, chat_body),
    (openai_responses, responses_body),
    (anthropic_messages, anthropic_body),
]


@pytest.mark.parametrize(("module", "make"), CASES, ids=["chat", "responses", "anthropic"])
@pytest.mark.parametrize("indent", [False, True], ids=["compact", "indented"])
def test_same_facts_with_payloads_elided(module: Any, make: Any, indent: bool) -> None:
    raw = orjson.dumps(make(), option=orjson.OPT_INDENT_2 if indent else 0)
    short = json_body.elide_payloads(raw)
    assert len(short) < len(raw) // 10  # the payloads really went
    full = module.audit_request(json_body.parse_json_object(raw))
    elided = module.audit_request(json_body.parse_json_object(short))
    assert elided == full
    assert elided.tool_results  # sizes of outputs holding elided images are exact
    assert all(
        r.bytes > json_body.ELIDE_MIN_BYTES for r in elided.tool_results if r.call_id != "c1"
    )


def test_escaped_payload_and_small_bodies_are_left_alone() -> None:
    small = orjson.dumps(chat_body() | {"messages": []})
    assert json_body.elide_payloads(small) is small
    escaped = orjson.dumps(chat_body()).replace(b"image/png", b"image\\/png")
    short = json_body.elide_payloads(escaped)
    assert b"image\\/png;base64," + BIG[:100].encode() in short  # this payload was kept
    assert openai_chat.audit_request(
        json_body.parse_json_object(short)
    ) == openai_chat.audit_request(json_body.parse_json_object(escaped))


def test_marker_text_sent_by_a_client_disables_elision() -> None:
    body = chat_body()
    body["messages"][2]["content"] = "\x00modeltap-elided:5\x00"
    raw = orjson.dumps(body)
    assert json_body.elide_payloads(raw) is raw
