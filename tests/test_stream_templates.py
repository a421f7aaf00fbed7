"""Plain stream events counted by their bytes observe exactly what decoding them does.

:class:`~modeltap.core.observe.StreamTap` counts the events that match the
template of the last plain event without decoding them
(:mod:`modeltap.apis.stream_templates`). Every test here runs the same bytes
through two taps, one with templates and one that decodes every event, and
asks for identical observations: the facts, the first output, the end. The
bytes are every wire's stream samples (``tests/data/<api>/streams/`` and the
Bedrock event streams of ``tests/data/bedrock/``), cut in several ways and
with events repeated and their text varied, and streams hypothesis makes
with text holding quotes, escapes, control characters and non-ASCII, other
spellings of the same JSON, and the events that must be decoded (usage,
finish reasons, tool calls, errors, ids) between the deltas.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from modeltap import apis
from modeltap.apis.stream_templates import EventTemplate, Slots, same_json
from modeltap.core.observe import StreamTap
from modeltap.evidence.records import RequestFacts
from modeltap.wire.sse import SSEEvent
from tests.eventstream_frames import SAMPLES as BEDROCK_SAMPLES
from tests.eventstream_frames import event as bedrock_event
from tests.eventstream_frames import padded
from tests.test_samples import audit, facts_json, load, samples, sse_bytes

CHAT = "openai.chat_completions"
RESPONSES = "openai.responses"
ANTHROPIC = "anthropic.messages"
GEMINI = "gemini.generate_content"
CONVERSE = "bedrock.converse"


def observe(
    api: str,
    chunks: list[bytes],
    *,
    templates: bool,
    facts: RequestFacts | None = None,
    framing: str = "sse",
    error: str | None = None,
) -> tuple[Any, bool, bool, int]:
    """What one tap observed: the facts, whether output came, the end, and how
    many events its observer decoded."""
    tap = StreamTap.observing(api, facts, "", framing=framing)  # type: ignore[arg-type]
    if not templates:
        tap.learner = None
    observer = tap.observer
    assert observer is not None
    decoded = 0
    feed = observer.feed

    def counting(event: SSEEvent) -> bool:
        nonlocal decoded
        decoded += 1
        return feed(event)

    observer.feed = counting  # type: ignore[method-assign]
    for chunk in [*(c for c in chunks if c), b""]:  # b"" ends the stream
        assert tap(chunk) == chunk
    done = tap.done
    return facts_json(tap.finish(error)), tap.first_chunk_ns is not None, done, decoded


def same_either_way(api: str, chunks: list[bytes], **kwargs: Any) -> int:
    """Assert both taps observe the same; return how many events templates spared."""
    fast = observe(api, chunks, templates=True, **kwargs)
    full = observe(api, chunks, templates=False, **kwargs)
    assert fast[:3] == full[:3]
    return full[3] - fast[3]


def sse_events(wire: bytes) -> list[bytes]:
    """The stream cut after each event (each blank line)."""
    parts = wire.split(b"\n\n")
    return [p + b"\n\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def cuts(wire: bytes, events: list[bytes]) -> list[list[bytes]]:
    """The ways a stream is cut here: per event, whole, every 7 bytes, and with
    every event sent three times (the shape of a long stream of deltas)."""
    thrice = [e for e in events for _ in range(3)]
    return [
        events,
        [wire],
        [wire[i : i + 7] for i in range(0, len(wire), 7)],
        thrice,
        [b"".join(thrice)],
        [b"".join(thrice[i : i + 2]) for i in range(0, len(thrice), 2)],
    ]


#: Every SSE stream sample; a JSON-array stream (Gemini's without ``alt=sse``)
#: is decoded in full, never by template, so it has nothing to compare here.
SSE_SAMPLES = [p for p in samples("streams") if load(p.values[1]).get("framing") != "json_array"]


def test_the_sse_samples_leave_out_only_json_arrays() -> None:
    left_out = [p for p in samples("streams") if p not in SSE_SAMPLES]
    assert left_out and all(load(p.values[1])["framing"] == "json_array" for p in left_out)
    assert len(SSE_SAMPLES) > len(left_out)


@pytest.mark.parametrize(("api", "path"), SSE_SAMPLES)
def test_every_stream_sample_observes_the_same(api: Any, path: Path) -> None:
    sample = load(path)
    facts = audit(api, sample) if "request" in sample else None
    wire = sse_bytes(sample["events"])
    for chunks in cuts(wire, sse_events(wire)):
        same_either_way(api.NAME, chunks, facts=facts, error=sample.get("error"))


def frames(wire: bytes) -> list[bytes]:
    """An event stream cut after each message."""
    out, pos = [], 0
    while pos < len(wire):
        (total,) = struct.unpack_from(">I", wire, pos)
        out.append(wire[pos : pos + total])
        pos += total
    return out


@pytest.mark.parametrize(
    "path", sorted(BEDROCK_SAMPLES.glob("*.eventstream")), ids=lambda p: p.stem
)
def test_every_bedrock_sample_observes_the_same(path: Path) -> None:
    sample = orjson.loads(path.with_suffix(".json").read_bytes())
    found = apis.match_endpoint(sample["path"])
    assert found is not None
    facts = apis.module_for(found.api).audit_request(sample["request"], found)
    wire = path.read_bytes()
    for chunks in cuts(wire, frames(wire)):
        same_either_way(found.api, chunks, facts=facts, framing="eventstream")


# -------------------------------------------------------------------------- the fast path is taken


def chat_chunk(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-x",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        **extra,
    }


def sse(data: object, name: str | None = None) -> bytes:
    head = b"event: " + name.encode() + b"\n" if name else b""
    body = data.encode() if isinstance(data, str) else orjson.dumps(data)
    return head + b"data: " + body + b"\n\n"


def long_streams() -> list[tuple[str, str, list[bytes]]]:
    """One long stream of text deltas per wire, as the bench sends them."""
    texts = [f"token {i} é \u2028" for i in range(50)]
    chat = [sse(chat_chunk({"role": "assistant", "content": ""}))]
    chat += [
        sse(chat_chunk({"content": t}, obfuscation="x" * (i % 5))) for i, t in enumerate(texts)
    ]
    chat += [
        sse(
            chat_chunk({}, usage=None)
            | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        )
    ]
    chat += [b"data: [DONE]\n\n"]
    responses = [
        sse(
            {
                "type": "response.output_text.delta",
                "sequence_number": i,
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": t,
            },
            "response.output_text.delta",
        )
        for i, t in enumerate(texts)
    ]
    responses.append(
        sse(
            {
                "type": "response.completed",
                "response": {"id": "resp_1", "model": "m", "status": "completed", "output": []},
            },
            "response.completed",
        )
    )
    anthropic = [
        sse({"type": "message_start", "message": {"id": "msg_1", "model": "c"}}, "message_start")
    ]
    anthropic += [
        sse(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}},
            "content_block_delta",
        )
        for t in texts
    ]
    anthropic += [
        sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}, "message_delta"),
        sse({"type": "message_stop"}, "message_stop"),
    ]
    gemini = [
        sse(
            {"candidates": [{"content": {"role": "model", "parts": [{"text": t}]}, "index": 0}]}
        ).replace(b"\n", b"\r\n")
        for t in texts
    ]
    gemini.append(
        sse({"candidates": [{"content": {"parts": [{"text": ""}]}, "finishReason": "STOP"}]})
    )
    converse = [bedrock_event("messageStart", orjson.dumps({"role": "assistant"}))]
    converse += [
        bedrock_event(
            "contentBlockDelta", padded({"contentBlockIndex": 0, "delta": {"text": t}}, 1 + i % 8)
        )
        for i, t in enumerate(texts)
    ]
    converse += [
        bedrock_event("contentBlockStop", orjson.dumps({"contentBlockIndex": 0})),
        bedrock_event("messageStop", orjson.dumps({"stopReason": "end_turn"})),
        bedrock_event("metadata", orjson.dumps({"usage": {"inputTokens": 1, "outputTokens": 2}})),
    ]
    return [
        (CHAT, "sse", chat),
        (RESPONSES, "sse", responses),
        (ANTHROPIC, "sse", anthropic),
        (GEMINI, "sse", gemini),
        (CONVERSE, "eventstream", converse),
    ]


@pytest.mark.parametrize(("api", "framing", "chunks"), long_streams(), ids=lambda v: str(v)[:12])
def test_a_long_stream_of_deltas_is_counted_without_decoding(
    api: str, framing: str, chunks: list[bytes]
) -> None:
    spared = same_either_way(api, chunks, framing=framing)
    # The first delta of each shape is decoded (it becomes the template); the
    # ones after it that differ only in their slots are not.
    assert spared >= 40


def test_content_capture_decodes_every_event() -> None:
    chunks = long_streams()[0][2]
    tap = StreamTap.observing(CHAT, None, "", capture_content=True)  # type: ignore[arg-type]
    for chunk in [*chunks, b""]:
        tap(chunk)
    assert tap.learner is not None and tap.learner.template is None
    facts = tap.finish()
    assert facts.output_messages is not None
    text = "".join(p["content"] for p in facts.output_messages[0]["parts"])
    assert text == "".join(f"token {i} é \u2028" for i in range(50))


def test_a_coded_stream_is_decoded_in_full() -> None:
    tap = StreamTap.observing(CHAT, None, "gzip")  # type: ignore[arg-type]
    assert tap.learner is None


# -------------------------------------------------------------------------- templates


def test_a_template_refuses_values_a_slot_cannot_hold() -> None:
    event = chat_chunk({"content": "hi"})
    raw = sse(event)
    decoded = SSEEvent(None, raw[6:-2].decode())
    template = EventTemplate.make(
        raw, decoded, event, Slots(text=(("choices", 0, "delta", "content"),)), True
    )
    assert template is not None
    for text, counted in [
        ("other", True),
        ("é ☃ \u2028", True),
        ('a"b', True),  # spelt with JSON's escapes, which a slot may hold
        ("a\\b\nc\x01", True),
        ("", False),  # an empty text is decoded: it may not be output
    ]:
        candidate = sse(chat_chunk({"content": text}))
        assert (template.consumed(candidate)[0] == 1) is counted, text
    # Bytes a slot cannot hold: a raw line end, a raw control character, an
    # escape JSON has not, a lone surrogate's escape.
    for raw_text in [b"a\nb", b"a\x01b", b"a\\xb", b"\\ud800", b"a\\"]:
        candidate = sse(chat_chunk({"content": "@"})).replace(b"@", raw_text)
        assert template.consumed(candidate)[0] == 0, raw_text
    # Another id, or a field more: decoded.
    assert template.consumed(sse(chat_chunk({"content": "x"}) | {"id": "other"}))[0] == 0
    assert template.consumed(sse(chat_chunk({"content": "x"}, usage=None)))[0] == 0


def test_a_slot_that_is_not_where_the_observer_said_makes_no_template() -> None:
    # The text is spelt with an escape; the same key and value, spelt plainly,
    # sit elsewhere: the bytes found are not the slot, and the probe says so.
    data = (
        '{"type":"content_block_delta","index":0,'
        '"delta":{"type":"text_delta","text":"\\u0061"},"x":{"text":"a"}}'
    )
    parsed = orjson.loads(data)
    assert parsed["delta"]["text"] == "a"
    raw = sse(data, "content_block_delta")
    event = SSEEvent("content_block_delta", data)
    assert EventTemplate.make(raw, event, parsed, Slots(text=(("delta", "text"),)), True) is None
    # A duplicate key: the parser keeps the last one, which is the slot.
    data = '{"type":"content_block_delta","delta":{"type":"text_delta","text":"a","text":"b"}}'
    raw = sse(data, "content_block_delta")
    event = SSEEvent("content_block_delta", data)
    template = EventTemplate.make(
        raw, event, orjson.loads(data), Slots(text=(("delta", "text"),)), True
    )
    assert template is not None
    assert template.consumed(raw.replace(b'"b"', b'"c"'))[0] == 1
    assert template.consumed(raw.replace(b'"a"', b'"c"'))[0] == 0


def test_same_json_compares_types() -> None:
    assert same_json({"a": [1, "x"]}, {"a": [1, "x"]})
    assert not same_json({"a": 1}, {"a": 1.0})
    assert not same_json({"a": 1}, {"a": True})
    assert not same_json({"a": 1, "b": 2}, {"b": 2, "a": 1})


# -------------------------------------------------------------------------- hypothesis

TEXT = st.text(
    st.one_of(
        st.sampled_from(list('ab "\\/\n\r\t\x00\x1fé☃\u2028')),
        st.characters(codec="utf-8"),
    ),
    max_size=8,
)


def encode(value: object, style: int) -> bytes:
    """One JSON spelling of ``value``: compact, spaced, or ASCII-escaped."""
    if style == 0:
        return orjson.dumps(value)
    if style == 1:
        return json.dumps(value).encode()
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True).encode()


@st.composite
def sse_wire(draw: st.DrawFn, events: st.SearchStrategy[tuple[str | None, object]]) -> list[bytes]:
    """Events framed as SSE in the forms upstreams use (one form a stream, now
    and then another), cut at events, at every other event, or anywhere."""
    nl = draw(st.sampled_from([b"\n", b"\r\n"]))
    style = draw(st.integers(0, 2))
    prefix = draw(st.sampled_from([b"data: ", b"data:"]))
    pieces: list[bytes] = []
    for name, value in draw(runs(events)):
        out = b""
        odd = draw(st.integers(0, 7)) == 0  # this event spelt otherwise
        if odd and draw(st.booleans()):
            out += b": keep-alive" + nl
        if odd and draw(st.booleans()):
            out += b"id: " + str(draw(st.integers(0, 9))).encode() + nl
        if name is not None:
            out += b"event: " + name.encode() + nl
        spelt = draw(st.integers(0, 2)) if odd else style
        body = value.encode() if isinstance(value, str) else encode(value, spelt)
        out += (b"data:" if odd and draw(st.booleans()) else prefix) + body + nl + nl
        pieces.append(out)
    wire = b"".join(pieces)
    cut = draw(st.sampled_from(["events", "pairs", "bytes"]))
    if cut == "events":
        return pieces
    if cut == "pairs":
        return [b"".join(pieces[i : i + 2]) for i in range(0, len(pieces), 2)]
    points = sorted(draw(st.lists(st.integers(0, len(wire)), max_size=12)))
    return [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True)]


def runs(events: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """Events in runs, each sent one to four times, as a model streams deltas
    of one shape (the texts of a run's events differ where hypothesis drew the
    same shape again)."""
    return st.lists(st.tuples(events, st.integers(1, 4)), min_size=1, max_size=16).map(
        lambda drawn: [event for event, times in drawn for _ in range(times)]
    )


CHAT_EVENTS = st.one_of(
    st.builds(
        lambda text, extra: (None, chat_chunk({"content": text}, **extra)),
        TEXT,
        st.fixed_dictionaries(
            {},
            optional={
                "obfuscation": TEXT,
                "service_tier": st.sampled_from(["default", "flex", None, ""]),
                "system_fingerprint": st.sampled_from(["fp_1", "fp_2", None]),
                "usage": st.one_of(
                    st.none(), st.just({"prompt_tokens": 3, "completion_tokens": 4})
                ),
                "error": st.sampled_from([None, {"type": "server_error"}]),
            },
        ),
    ),
    st.builds(
        lambda reason, text: (
            None,
            chat_chunk({"content": text})
            | {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": reason}]},
        ),
        st.sampled_from(["stop", "length", None]),
        TEXT,
    ),
    st.builds(
        lambda name, args, call_id: (
            None,
            chat_chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": call_id, "function": {"name": name, "arguments": args}}
                    ]
                }
            ),
        ),
        st.sampled_from(["read", None]),
        TEXT,
        st.sampled_from(["call_1", None]),
    ),
    st.builds(
        lambda i: (None, chat_chunk({"content": "x"}) | {"id": f"chatcmpl-{i}", "model": ""}),
        st.integers(0, 2),
    ),
    st.builds(
        lambda text: (
            None,
            chat_chunk({"content": text})
            | {"choices": [{"delta": {"content": text}}, {"delta": {"content": text}}]},
        ),
        TEXT,
    ),
    st.just((None, "[DONE]")),
    st.just((None, "not json")),
    st.just((None, "[1]")),
)

RESPONSES_EVENTS = st.one_of(
    st.builds(
        lambda kind, text, seq, extra: (
            kind,
            {"type": kind, "sequence_number": seq, "item_id": "msg_1", "delta": text, **extra},
        ),
        st.sampled_from(
            [
                "response.output_text.delta",
                "response.reasoning_text.delta",
                "response.function_call_arguments.delta",
            ]
        ),
        TEXT,
        st.one_of(st.integers(-3, 10**17), st.just(True), st.floats(0, 3)),
        st.fixed_dictionaries(
            {}, optional={"obfuscation": TEXT, "output_index": st.integers(0, 2)}
        ),
    ),
    st.builds(
        lambda kind, status: (
            kind,
            {
                "type": kind,
                "response": {"id": "resp_1", "model": "m", "status": status, "output": []},
            },
        ),
        st.sampled_from(
            ["response.created", "response.in_progress", "response.completed", "response.failed"]
        ),
        st.sampled_from(["in_progress", "completed", "failed"]),
    ),
    st.builds(
        lambda: (
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_1",
                    "name": "read",
                    "arguments": "",
                },
            },
        ),
    ),
    st.just(("error", {"type": "error", "code": "x"})),
)

ANTHROPIC_EVENTS = st.one_of(
    st.builds(
        lambda kind, text, index: (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": kind[0], kind[1]: text},
            },
        ),
        st.sampled_from(
            [
                ("text_delta", "text"),
                ("thinking_delta", "thinking"),
                ("input_json_delta", "partial_json"),
                ("signature_delta", "signature"),
                ("text_delta", "thinking"),
            ]
        ),
        TEXT,
        st.integers(0, 1),
    ),
    st.builds(
        lambda index, kind: (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {
                    "type": kind,
                    "id": "toolu_1",
                    "name": "read",
                    "input": {},
                    "text": "",
                },
            },
        ),
        st.integers(0, 1),
        st.sampled_from(["text", "tool_use"]),
    ),
    st.just(
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "model": "c",
                    "usage": {"input_tokens": 5, "output_tokens": 1},
                },
            },
        )
    ),
    st.builds(
        lambda n: (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": n},
            },
        ),
        st.integers(0, 9),
    ),
    st.just(("message_stop", {"type": "message_stop"})),
    st.just(("error", {"type": "error", "error": {"type": "overloaded_error"}})),
)

GEMINI_EVENTS = st.one_of(
    st.builds(
        lambda text, extra, part_extra: (
            None,
            {
                "candidates": [
                    {
                        "content": {"role": "model", "parts": [{"text": text, **part_extra}]},
                        "index": 0,
                        **extra,
                    }
                ],
                "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1},
                "responseId": "r1",
                "modelVersion": "g",
            },
        ),
        TEXT,
        st.fixed_dictionaries({}, optional={"finishReason": st.sampled_from(["STOP", None])}),
        st.fixed_dictionaries(
            {},
            optional={
                "thought": st.booleans(),
                "functionCall": st.just({"name": "read", "args": {}}),
            },
        ),
    ),
    st.builds(
        lambda n: (
            None,
            {
                "candidates": [{"content": {"parts": [{"text": "x"}]}}],
                "usageMetadata": {"candidatesTokenCount": n},
            },
        ),
        st.integers(0, 3),
    ),
    st.just((None, {"promptFeedback": {"blockReason": "SAFETY"}})),
    st.just((None, {"error": {"code": 500}})),
)


@pytest.mark.parametrize(
    ("api", "events"),
    [
        (CHAT, CHAT_EVENTS),
        (RESPONSES, RESPONSES_EVENTS),
        (ANTHROPIC, ANTHROPIC_EVENTS),
        (GEMINI, GEMINI_EVENTS),
    ],
    ids=["chat", "responses", "anthropic", "gemini"],
)
@given(data=st.data())
def test_generated_sse_streams_observe_the_same(api: str, events: Any, data: st.DataObject) -> None:
    same_either_way(api, data.draw(sse_wire(events)))


CONVERSE_EVENTS = st.one_of(
    st.builds(
        lambda text, index, pad, style: (
            "contentBlockDelta",
            {"contentBlockIndex": index, "delta": {"text": text}, "p": "abcdefgh"[:pad]},
            style,
        ),
        TEXT,
        st.integers(0, 1),
        st.integers(0, 8),
        st.integers(0, 2),
    ),
    st.builds(
        lambda text: (
            "contentBlockDelta",
            {"contentBlockIndex": 0, "delta": {"toolUse": {"input": text}}},
            0,
        ),
        TEXT,
    ),
    st.just(
        (
            "contentBlockStart",
            {"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "t1", "name": "read"}}},
            0,
        )
    ),
    st.just(("messageStop", {"stopReason": "end_turn"}, 0)),
    st.just(("metadata", {"usage": {"inputTokens": 1, "outputTokens": 2}}, 0)),
)


@given(data=st.data())
def test_generated_bedrock_streams_observe_the_same(data: st.DataObject) -> None:
    picked = data.draw(runs(CONVERSE_EVENTS))
    messages = [bedrock_event(name, encode(body, style)) for name, body, style in picked]
    if data.draw(st.booleans()):  # a corrupt frame: observing stops, the same either way
        i = data.draw(st.integers(0, len(messages) - 1))
        broken = bytearray(messages[i])
        broken[data.draw(st.integers(0, len(broken) - 1))] ^= 0x20
        messages[i] = bytes(broken)
    wire = b"".join(messages)
    cut = data.draw(st.sampled_from(["messages", "whole", "bytes"]))
    if cut == "messages":
        chunks = messages
    elif cut == "whole":
        chunks = [wire]
    else:
        points = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=12)))
        chunks = [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True)]
    same_either_way(CONVERSE, chunks, framing="eventstream")


def test_text_with_escapes_is_counted() -> None:
    texts = ["line\n", 'say "hi"', "back\\slash", "tab\tand é", "\u2028 and \x00"]
    chunks = [sse(chat_chunk({"content": "first"}))]
    chunks += [sse(chat_chunk({"content": t})) for t in texts * 4]
    chunks.append(b"data: [DONE]\n\n")
    assert same_either_way(CHAT, chunks) == len(texts) * 4 - 1
    # A lone surrogate's escape is left to the parser (it refuses it).
    lone = sse(chat_chunk({"content": "x"})).replace(b'"x"', b'"\\ud800"')
    assert same_either_way(CHAT, [*chunks[:3], lone, *chunks[3:]]) > 0


def test_learning_backs_off_when_every_event_differs() -> None:
    # Gemini's usage counts change every chunk: each chunk is plain, and no
    # template made from one matches the next.
    chunks = [
        sse(
            {
                "candidates": [{"content": {"parts": [{"text": f"t{i}"}]}, "index": 0}],
                "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": i},
            }
        )
        for i in range(300)
    ]
    tap = StreamTap.observing(GEMINI, None, "")  # type: ignore[arg-type]
    assert tap.learner is not None
    learner, made = tap.learner, 0
    make = learner.make

    def counting(*args: Any) -> Any:
        nonlocal made
        made += 1
        return make(*args)

    learner.make = counting
    for chunk in chunks:
        tap(chunk)
    assert made <= 12  # 1, 2, 4, ... then every 64th chunk, not 300
    assert same_either_way(GEMINI, chunks) == 0


@given(
    st.lists(
        st.one_of(
            st.sampled_from([b'"', b"\\", b"\\n", b"\\u00e9", b"\\ud800", b"\\x", b"\n", b"\x01"]),
            st.binary(max_size=3),
        ),
        max_size=6,
    ),
    st.integers(-20, 10**18),
)
def test_a_shape_compiled_whole_matches_as_its_parts_do(pieces: list[bytes], seq: int) -> None:
    # A template starts with its parts and compiles itself whole after many
    # matches: both must accept exactly the same bytes.
    event = {
        "type": "response.output_text.delta",
        "sequence_number": 1,
        "delta": "x",
        "obfuscation": "y",
    }
    raw = sse(event, "response.output_text.delta")
    decoded = SSEEvent("response.output_text.delta", raw.split(b"data: ")[1][:-2].decode())
    slots = Slots(text=(("delta",),), ignored=(("sequence_number",), ("obfuscation",)))
    template = EventTemplate.make(raw, decoded, event, slots, True)
    assert template is not None
    text = b"".join(pieces)
    candidate = raw.replace(b'"delta":"x"', b'"delta":"' + text + b'"').replace(
        b'"sequence_number":1', b'"sequence_number":' + str(seq).encode()
    )
    whole = template.shape.compiled().match(candidate)
    assert template.shape.end(candidate, 0) == (whole.end() if whole else -1)
