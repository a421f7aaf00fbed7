"""The wires the bench measures: one table entry per API modeltap audits.

Each :class:`Wire` says how the client asks (path, a small request body, a
streaming one) and how the bench upstream answers (``answer``: whole JSON, or
a stream of a first event, ``n`` deltas and a tail). ``bench/run.py`` runs
the small-request and stream cases for every entry whose API the measured
modeltap knows (:func:`modeltap.apis.find`), so a wire added to modeltap is
measured once its entry is here, and an entry for a wire that has not landed
is skipped and said so.

The upstream never parses request bodies: the path says which wire, the
query string how to answer (``?sse=1`` a stream, ``n=`` deltas, ``pause=`` ms
after the first event, ``burst=`` deltas per 1 ms pause).
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

MODEL = "bench-model"
TOOL = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}
SYSTEM = "You are a careful coding assistant. " * 8


def _pad(body: dict[str, Any], size: int, setter: Callable[[dict[str, Any], str], None]) -> bytes:
    """``body`` with its user text grown so that the whole is ``size`` bytes."""
    setter(body, "")
    pad = size - len(orjson.dumps(body))
    setter(body, ("lorem ipsum dolor sit amet " * (pad // 27 + 1))[: max(0, pad)])
    return orjson.dumps(body)


# --------------------------------------------------------------------------- request bodies


def chat_body(stream: bool = False, size: int = 2048) -> bytes:
    """A chat request of ``size`` bytes: system message, user message, one tool."""
    body: dict[str, Any] = {
        "model": "gpt-bench",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ""}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Read a file of the workspace.",
                    "parameters": TOOL,
                },
            }
        ],
        "reasoning_effort": "low",
        "stream": stream,
    }

    def user(b: dict[str, Any], text: str) -> None:
        b["messages"][1]["content"] = text

    return _pad(body, size, user)


def responses_body(stream: bool = False, size: int = 2048) -> bytes:
    """A Responses request of ``size`` bytes: instructions, one input message, one tool."""
    body: dict[str, Any] = {
        "model": "gpt-bench",
        "instructions": SYSTEM,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": ""}]}],
        "tools": [{"type": "function", "name": "read_file", "parameters": TOOL}],
        "reasoning": {"effort": "low"},
        "store": False,
        "stream": stream,
    }

    def user(b: dict[str, Any], text: str) -> None:
        b["input"][0]["content"][0]["text"] = text

    return _pad(body, size, user)


def ws_create_message(size: int = 1024) -> str:
    """One WebSocket ``response.create`` of about ``size`` bytes."""
    body = orjson.loads(responses_body(size=size + 20))
    del body["stream"]
    return orjson.dumps({"type": "response.create", **body}).decode()


def anthropic_body(stream: bool = False, size: int = 2048) -> bytes:
    """An Anthropic Messages request of ``size`` bytes: system, one user message, one tool."""
    body: dict[str, Any] = {
        "model": "claude-bench",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": SYSTEM}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}],
        "tools": [{"name": "read_file", "description": "Read a file.", "input_schema": TOOL}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "stream": stream,
    }

    def user(b: dict[str, Any], text: str) -> None:
        b["messages"][0]["content"][0]["text"] = text

    return _pad(body, size, user)


def gemini_body(stream: bool = False, size: int = 2048) -> bytes:
    """A Gemini generateContent request of ``size`` bytes (the model is in the path)."""
    body: dict[str, Any] = {
        "systemInstruction": {"parts": [{"text": SYSTEM}]},
        "contents": [{"role": "user", "parts": [{"text": ""}]}],
        "tools": [{"functionDeclarations": [{"name": "read_file", "parameters": TOOL}]}],
        "generationConfig": {"thinkingConfig": {"thinkingLevel": "low"}},
    }

    def user(b: dict[str, Any], text: str) -> None:
        b["contents"][0]["parts"][0]["text"] = text

    return _pad(body, size, user)


def converse_body(stream: bool = False, size: int = 2048) -> bytes:
    """A Bedrock Converse request of ``size`` bytes (the model is in the path)."""
    body: dict[str, Any] = {
        "system": [{"text": SYSTEM}],
        "messages": [{"role": "user", "content": [{"text": ""}]}],
        "toolConfig": {
            "tools": [{"toolSpec": {"name": "read_file", "inputSchema": {"json": TOOL}}}]
        },
        "inferenceConfig": {"maxTokens": 1024},
    }

    def user(b: dict[str, Any], text: str) -> None:
        b["messages"][0]["content"][0]["text"] = text

    return _pad(body, size, user)


def agent_turn_body(size: int = 200 * 1024) -> bytes:
    """A coding agent's turn of about ``size`` bytes of history: system, task, then
    pairs of an assistant tool call and its result (file contents), no images."""
    result = ("def handler(event):\n    return process(event)  # line of code\n" * 80)[:4800]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM * 4},
        {"role": "user", "content": "Fix the failing test in tests/test_api.py."},
    ]
    i = 0
    while len(orjson.dumps(messages)) < size - 2000:
        call = f"call_{i:04d}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": f'{{"path":"src/m{i}.py"}}'},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call, "content": result})
        i += 1
    body = {
        "model": "gpt-bench",
        "messages": messages,
        "tools": [
            {
                "type": "function",
                "function": {"name": "read_file", "description": "Read.", "parameters": TOOL},
            }
        ],
        "stream": False,
    }
    return orjson.dumps(body)


def image_chat_body(size: int) -> bytes:
    """A chat request of about ``size`` bytes, almost all of it one base64 data-URL image."""
    import os

    head: dict[str, Any] = {
        "model": "gpt-bench",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Describe this image."},
                    {"type": "image_url", "image_url": {"url": "", "detail": "high"}},
                ],
            }
        ],
    }
    room = size - len(orjson.dumps(head)) - len("data:image/png;base64,")
    b64 = base64.b64encode(os.urandom(room * 3 // 4)).decode()
    head["messages"][0]["content"][1]["image_url"]["url"] = "data:image/png;base64," + b64
    return orjson.dumps(head)


# --------------------------------------------------------------------------- answers


def sse(obj: object, name: str | None = None, crlf: bool = False) -> bytes:
    """One SSE event (``event:`` line when named)."""
    nl = b"\r\n" if crlf else b"\n"
    head = b"event: " + name.encode() + nl if name else b""
    return head + b"data: " + orjson.dumps(obj) + nl + nl


@dataclass(frozen=True)
class Stream:
    """A streamed answer: the first event, one delta (repeated ``n`` times), the tail."""

    content_type: str
    first: bytes
    delta: bytes
    tail: bytes


@dataclass(frozen=True)
class Answer:
    """How the bench upstream answers one wire: whole JSON, and a stream."""

    json: bytes
    stream: Stream


def _chat() -> Answer:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    usage = {"prompt_tokens": 512, "completion_tokens": 8, "total_tokens": 520}
    whole = {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello from the bench upstream."},
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
    }
    return Answer(
        orjson.dumps(whole),
        Stream(
            "text/event-stream",
            sse(chunk({"role": "assistant", "content": "Hello"})),
            sse(chunk({"content": " token"})),
            sse(chunk({}, "stop"))
            + sse({**chunk({}), "choices": [], "usage": usage})
            + b"data: [DONE]\n\n",
        ),
    )


def _responses_object(status: str, text: str | None) -> dict[str, Any]:
    output = []
    if text is not None:
        output = [
            {
                "id": "msg_bench",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ]
    return {
        "id": "resp_bench",
        "object": "response",
        "created_at": 1700000000,
        "status": status,
        "model": MODEL,
        "output": output,
        "usage": None
        if text is None
        else {
            "input_tokens": 512,
            "output_tokens": 8,
            "total_tokens": 520,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def responses_events() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The first event, a delta and the completion of a Responses stream."""
    return (
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": _responses_object("in_progress", None),
        },
        {
            "type": "response.output_text.delta",
            "sequence_number": 1,
            "item_id": "msg_bench",
            "output_index": 0,
            "content_index": 0,
            "delta": " token",
        },
        {
            "type": "response.completed",
            "sequence_number": 2,
            "response": _responses_object("completed", "Hello"),
        },
    )


def _responses() -> Answer:
    first, delta, done = responses_events()
    return Answer(
        orjson.dumps(_responses_object("completed", "Hello from the bench upstream.")),
        Stream(
            "text/event-stream",
            sse(first, first["type"]),
            sse(delta, delta["type"]),
            sse(done, done["type"]),
        ),
    )


def _anthropic() -> Answer:
    usage = {"input_tokens": 512, "output_tokens": 8}
    message = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": "Hello from the bench upstream."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    return Answer(
        orjson.dumps(message),
        Stream(
            "text/event-stream",
            sse({"type": "message_start", "message": start}, "message_start")
            + sse(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
                "content_block_start",
            ),
            sse(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": " token"},
                },
                "content_block_delta",
            ),
            sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
            + sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 8},
                },
                "message_delta",
            )
            + sse({"type": "message_stop"}, "message_stop"),
        ),
    )


def _gemini() -> Answer:
    def chunk(text: str, finish: str | None = None) -> dict[str, Any]:
        candidate: dict[str, Any] = {
            "content": {"role": "model", "parts": [{"text": text}]},
            "index": 0,
        }
        if finish:
            candidate["finishReason"] = finish
        usage = {"promptTokenCount": 512, "candidatesTokenCount": 8, "totalTokenCount": 520}
        return {
            "candidates": [candidate],
            "usageMetadata": usage,
            "modelVersion": MODEL,
            "responseId": "resp-bench",
        }

    return Answer(
        orjson.dumps(chunk("Hello from the bench upstream.", "STOP")),
        Stream(
            "text/event-stream",
            sse(chunk("Hello"), crlf=True),
            sse(chunk(" token"), crlf=True),
            sse(chunk("", "STOP"), crlf=True),
        ),
    )


def _frame(event_type: str, payload: dict[str, Any]) -> bytes:
    """One AWS event-stream message of Bedrock's shape (string headers, both CRCs)."""
    headers = b""
    for name, value in (
        (":event-type", event_type),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ):
        raw = value.encode()
        headers += bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(raw)) + raw
    body = orjson.dumps({**payload, "p": "abcdef"})
    total = 16 + len(headers) + len(body)
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + headers + body
    return message + struct.pack(">I", zlib.crc32(message))


def _bedrock() -> Answer:
    usage = {"inputTokens": 512, "outputTokens": 8, "totalTokens": 520}
    whole = {
        "output": {
            "message": {"role": "assistant", "content": [{"text": "Hello from the bench."}]}
        },
        "stopReason": "end_turn",
        "usage": usage,
        "metrics": {"latencyMs": 100},
    }
    return Answer(
        orjson.dumps(whole),
        Stream(
            "application/vnd.amazon.eventstream",
            _frame("messageStart", {"role": "assistant"}),
            _frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": " token"}}),
            _frame("contentBlockStop", {"contentBlockIndex": 0})
            + _frame("messageStop", {"stopReason": "end_turn"})
            + _frame("metadata", {"usage": usage, "metrics": {"latencyMs": 100}}),
        ),
    )


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Wire:
    """One API as the bench drives it."""

    #: Short name: the case labels and the metric keys use it.
    name: str
    #: modeltap's ``api`` value; the wire is measured only if modeltap knows it.
    api: str
    #: Path of a whole-answer request, and of a streamed one.
    path: str
    stream_path: str
    #: Request bodies: ``body(stream)`` of 2 KB.
    body: Callable[[bool], bytes]
    answer: Callable[[], Answer]
    #: How the client counts events in the stream: SSE blank lines or event-stream frames.
    framing: str = "sse"
    #: ``websocket``: measured with ``response.create`` messages instead of POSTs.
    transport: str = "http"


WIRES: tuple[Wire, ...] = (
    Wire(
        "chat",
        "openai.chat_completions",
        "/v1/chat/completions",
        "/v1/chat/completions",
        lambda s: chat_body(s),
        _chat,
    ),
    Wire(
        "responses",
        "openai.responses",
        "/v1/responses",
        "/v1/responses",
        lambda s: responses_body(s),
        _responses,
    ),
    Wire(
        "responses-ws",
        "openai.responses",
        "/v1/responses",
        "/v1/responses",
        lambda s: ws_create_message().encode(),
        _responses,
        transport="websocket",
    ),
    Wire(
        "anthropic",
        "anthropic.messages",
        "/v1/messages",
        "/v1/messages",
        lambda s: anthropic_body(s),
        _anthropic,
    ),
    Wire(
        "gemini",
        "gemini.generate_content",
        f"/v1beta/models/{MODEL}:generateContent",
        f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse",
        lambda s: gemini_body(s),
        _gemini,
    ),
    Wire(
        "bedrock",
        "bedrock.converse",
        f"/model/{MODEL}/converse",
        f"/model/{MODEL}/converse-stream",
        lambda s: converse_body(s),
        _bedrock,
        framing="eventstream",
    ),
)


def wire_for_path(path: str) -> Wire | None:
    """The HTTP wire one of whose paths is ``path`` (query string aside): the upstream's
    dispatch."""
    bare = path.split("?", 1)[0]
    for wire in WIRES:
        paths = (wire.path.split("?", 1)[0], wire.stream_path.split("?", 1)[0])
        if wire.transport == "http" and bare in paths:
            return wire
    return None
