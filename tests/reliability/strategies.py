"""Hypothesis strategies for the reliability suite: JSON that looks like the APIs.

Purely random JSON almost never reaches the interesting branches (a tool list
whose third tool is a namespace whose second member has no name), so values
are drawn from the APIs' own vocabulary of keys and type names most of the
time, and from arbitrary text the rest.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import strategies as st

KEYS = [
    "model", "messages", "input", "tools", "instructions", "system", "thinking",
    "reasoning", "effort", "output_config", "reasoning_effort", "stream",
    "stream_options", "include_usage", "previous_response_id", "generate", "role",
    "content", "type", "text", "name", "function", "namespace", "image_url", "url",
    "detail", "file_id", "source", "tool_use_id", "tool_call_id", "call_id", "output",
    "mcp_servers", "server_label", "id", "arguments", "response", "item", "delta",
    "usage", "choices", "index", "finish_reason", "tool_calls", "output_index",
    "item_id", "status", "incomplete_details", "input_tokens", "output_tokens",
    "prompt_tokens", "completion_tokens", "total_tokens", "stop_reason", "message",
    "content_block", "error", "budget_tokens", "cache_read_input_tokens",
]  # fmt: skip

WORDS = [
    "function", "custom", "namespace", "web_search", "mcp", "message", "system",
    "developer", "user", "assistant", "tool", "text", "input_text", "output_text",
    "image_url", "input_image", "image", "tool_result", "tool_use", "function_call",
    "function_call_output", "custom_tool_call", "custom_tool_call_output",
    "additional_tools", "low", "high", "auto", "enabled", "adaptive", "gpt-5", "x", "",
    "response.create", "response.processed", "response.created", "response.completed",
    "response.incomplete", "response.failed", "error", "response.output_item.added",
    "response.output_item.done", "response.output_text.delta",
    "response.function_call_arguments.delta", "response.function_call_arguments.done",
    "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
    "message_start", "message_delta", "message_stop", "content_block_start",
    "content_block_delta", "content_block_stop", "text_delta", "input_json_delta",
    "thinking_delta", "ping", "stop", "tool_calls", "length", "[DONE]",
    "data:image/png;base64,iVBORw0KGgo=", "completed",
]  # fmt: skip

#: Text as orjson can produce it (no lone surrogates: orjson refuses them).
wire_text = st.one_of(st.sampled_from(WORDS), st.text(max_size=24))
#: Text as a Python caller could pass it: lone surrogates included.
any_text = st.one_of(
    wire_text, st.text(alphabet=st.characters(codec=None, categories=None), max_size=12)
)

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    wire_text,
)


def json_values(leaf: st.SearchStrategy[Any] = leaves, max_leaves: int = 12) -> Any:
    """JSON values whose object keys are mostly the APIs' own."""
    keys = st.one_of(st.sampled_from(KEYS), wire_text)
    return st.recursive(
        leaf,
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)
        ),
        max_leaves=max_leaves,
    )


@st.composite
def bodies(draw: st.DrawFn, leaf: st.SearchStrategy[Any] = leaves) -> dict[str, Any]:
    """A request-shaped object: usually a usable ``model``, and API-shaped fields."""
    body: dict[str, Any] = draw(
        st.dictionaries(st.sampled_from(KEYS), json_values(leaf), max_size=6)
    )
    if draw(st.integers(0, 4)):
        body["model"] = draw(st.sampled_from(["gpt-5", "claude-x", "m"]))
    for key in ("messages", "input", "tools"):
        if draw(st.booleans()):
            body[key] = draw(st.lists(json_values(leaf), max_size=3))
    return body


def dumps_or_none(value: Any) -> bytes | None:
    """orjson bytes, or None when orjson cannot encode it (too deep, surrogates)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return None


def nested(depth: int, open_: bytes = b"[", close: bytes = b"]", inner: bytes = b"") -> bytes:
    """``depth`` levels of nesting as JSON bytes (built by hand: orjson stops at 255)."""
    return open_ * depth + inner + close * depth
