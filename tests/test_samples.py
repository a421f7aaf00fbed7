"""Wire samples of every API, checked at the core: ``tests/data/<api module>/``.

Each API module of the registry (:data:`modeltap.apis.APIS`) has a folder
named after it. What a sample holds says what it checks:

- ``*.json``: ``request`` (a body as a client sends it) and ``expected``, the
  exact :class:`~modeltap.evidence.records.RequestFacts` it audits to; ``path``, when
  given, is the request path as sent (a cloud's path names the model, asks
  for a stream, or asks more of the body: :func:`modeltap.apis.match_endpoint`);
- ``refused/*.json``: ``request`` (and ``path``) and ``rejected_rule``, the
  rule that refuses it (the message names the rule and nothing from the body);
- ``responses/*.json``: ``response`` (a JSON body) and ``expected``, the exact
  :class:`~modeltap.evidence.records.ResponseFacts` observed;
- ``streams/*.json``: ``events`` (SSE events; ``data`` as JSON, or a string
  such as ``[DONE]``), optionally the ``request`` the stream answers and the
  ``error`` it was cut by (or ``"done": false`` for a stream the upstream
  ended early itself), ``outputs`` (which events carried model output)
  and ``expected`` facts. The events go through the real SSE decoder as
  bytes, then the API's observer; with ``"framing": "json_array"`` they are
  the elements of a streamed JSON array (Gemini without ``?alt=sse``) and go
  through :class:`~modeltap.wire.json_array.JsonArrayDecoder` instead. (Bedrock's
  event streams, in their binary framing, are in ``tests/data/bedrock/``:
  ``tests/test_bedrock.py``.)

A response's ``invocation_metrics`` (Bedrock's own measurements) may be left
out of ``expected`` where the wire reports none: it is then ``null``.

A new wire adds its module to the registry and its samples here; nothing in
this file changes.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from hashlib import sha256
from pathlib import Path
from typing import Any

import orjson
import pytest

from modeltap import apis
from modeltap.apis.contract import EndpointMatch, RequestContent, WireApi
from modeltap.evidence.records import RequestFacts, RequestSettings, ResponseFacts, Usage
from modeltap.rules.errors import RULES, Rejected
from modeltap.wire.json_array import JsonArrayDecoder
from modeltap.wire.sse import SSEDecoder

DATA = Path(__file__).parent / "data"
#: What a request sample's ``expected`` holds: the facts, without the settings
#: (spans only; :func:`test_request_settings` checks them).
REQUEST_FIELDS = {f.name for f in dataclasses.fields(RequestFacts)} - {"settings"}
#: What a response or stream sample's ``expected`` holds: the facts, without
#: the output kept for spans (only with content capture; see
#: :func:`test_streamed_output_in_the_conventions_shape`).
RESPONSE_FIELDS = {f.name for f in dataclasses.fields(ResponseFacts)} - {"output_messages"}
#: Response fields only some wires report: a sample that leaves one out expects null.
OPTIONAL_RESPONSE_FIELDS = {"invocation_metrics"}

#: Words of the wire (roles, part and block types, setting values) that a
#: rule's fixed text may share with a refused body by chance.
WIRE_WORDS = {
    *("system", "developer", "user", "tool", "text", "image", "image_url", "function"),
    *("custom", "base64", "enabled"),
}


#: A refusal's detail: field paths (``messages[0].content[1]``), or a fixed phrase of them.
FIELD_PATH = re.compile(r"[A-Za-z_]+(\[\d+\])?(\.[A-Za-z_]+(\[\d+\])?)*( or [A-Za-z_]+)?")


def folder(api: WireApi) -> str:
    """The samples folder of an API: its module's name (``openai_chat``)."""
    return str(getattr(api, "__name__", "")).rsplit(".", 1)[-1]


def samples(kind: str) -> list[Any]:
    """``(api, path)`` of every sample of a kind (``""`` for request samples), as params."""
    out = []
    for api in apis.APIS:
        for path in sorted((DATA / folder(api) / kind).glob("*.json")):
            out.append(
                pytest.param(api, path, id=f"{folder(api)}/{kind}{'/' * bool(kind)}{path.stem}")
            )
    return out


def load(path: Path) -> dict[str, Any]:
    sample: dict[str, Any] = orjson.loads(path.read_bytes())
    return sample


def as_json(value: object) -> Any:
    return orjson.loads(orjson.dumps(value))


def facts_json(facts: RequestFacts | ResponseFacts) -> Any:
    """Facts as a sample's ``expected`` holds them (see REQUEST_FIELDS, RESPONSE_FIELDS)."""
    data = as_json(facts)
    data.pop("settings", None)
    data.pop("output_messages", None)
    return data


def endpoint(api: WireApi, sample: dict[str, Any]) -> EndpointMatch | None:
    """What the sample's ``path`` says (it must name this API), or ``None`` without one."""
    if "path" not in sample:
        return None
    found = apis.match_endpoint(sample["path"])
    assert found is not None and found.api == api.NAME, sample["path"]
    return found


def audit(api: WireApi, sample: dict[str, Any]) -> RequestFacts:
    """The sample's request audited as sent to its path."""
    return api.audit_request(sample["request"], endpoint(api, sample))


def expected_response(sample: dict[str, Any]) -> dict[str, Any]:
    """A response or stream sample's ``expected``, optional fields filled in with null."""
    expected = sample["expected"]
    assert set(expected) <= RESPONSE_FIELDS
    assert RESPONSE_FIELDS - set(expected) <= OPTIONAL_RESPONSE_FIELDS
    return {name: None for name in OPTIONAL_RESPONSE_FIELDS} | expected


def leaves(value: Any) -> list[str]:
    """Every string value (not key) inside a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in leaves(v)]
    if isinstance(value, list):
        return [s for v in value for s in leaves(v)]
    return []


def test_every_api_has_samples_of_every_kind() -> None:
    for api in apis.APIS:
        for kind in ("", "refused", "responses", "streams"):
            assert list((DATA / folder(api) / kind).glob("*.json")), (folder(api), kind)


# --------------------------------------------------------------------------
# Requests


@pytest.mark.parametrize(("api", "path"), samples(""))
def test_request_audits_exactly(api: WireApi, path: Path) -> None:
    sample = load(path)
    assert set(sample["expected"]) == REQUEST_FIELDS
    body = sample["request"]
    before = copy.deepcopy(body)
    facts = audit(api, sample)
    assert facts_json(facts) == sample["expected"]
    assert facts.settings == api.request_settings(body)
    assert body == before  # the audit reads; it never changes what is forwarded


@pytest.mark.parametrize(("api", "path"), samples(""))
def test_instruction_parts_are_null_exactly_when_the_hash_is(api: WireApi, path: Path) -> None:
    facts = audit(api, load(path))
    assert (facts.instructions_parts is None) == (facts.instructions_sha256 is None)
    if facts.instructions_parts == ():
        assert facts.instructions_sha256 == sha256(b"").hexdigest()  # none sent: ""


@pytest.mark.parametrize(("api", "path"), samples(""))
def test_set_image_detail_rewrites_every_counted_image(api: WireApi, path: Path) -> None:
    sample = load(path)
    body = sample["request"]
    before = copy.deepcopy(body)
    counted = audit(api, sample).image_details
    rewritten = api.set_image_detail(body, "low")
    if rewritten == 0:  # no image, or an API whose images carry no detail
        assert body == before
    else:
        assert rewritten == len(counted)
        details = audit(api, sample).image_details
        # "low" in the API's own spelling (Gemini: MEDIA_RESOLUTION_LOW), on every image.
        assert len(details) == rewritten and len(set(details)) == 1
        assert details[0] is not None and "low" in details[0].lower()


@pytest.mark.parametrize(("api", "path"), samples(""))
def test_request_content_and_settings_never_raise(api: WireApi, path: Path) -> None:
    body = load(path)["request"]
    content = api.request_content(body)
    assert content.input_messages is not None  # every sample sends a conversation
    orjson.dumps(content.input_messages)  # JSON as it is: telemetry writes it
    assert isinstance(api.request_settings(body), RequestSettings)


@pytest.mark.parametrize(("api", "path"), samples("refused"))
def test_refused_by_its_rule_without_body_content(api: WireApi, path: Path) -> None:
    sample = load(path)
    rule, body = sample["rejected_rule"], sample["request"]
    with pytest.raises(Rejected) as caught:
        audit(api, sample)
    refusal = caught.value
    assert refusal.rule == rule
    # The message is the rule's fixed text and, at most, where in the body
    # the fault is, as a field path modeltap wrote: it has no room for content.
    where = f" ({refusal.detail})" if refusal.detail else ""
    assert (
        refusal.message == f"modeltap refused the request [rule {rule}]: {RULES[rule][1]}{where}."
    )
    assert refusal.detail is None or FIELD_PATH.fullmatch(refusal.detail), refusal.detail
    for leaf in leaves(body):
        # A value shorter than a word ("m", "ok") can match a path by chance.
        if len(leaf) >= 4 and leaf not in WIRE_WORDS:
            assert leaf not in refusal.message, leaf


#: Every rule an API's request audit raises has a refused sample.
REQUEST_RULES = {
    "missing_model",
    "messages_and_input",
    "malformed_messages",
    "malformed_tools",
    "tool_without_name",
    "malformed_image",
    "instructions_not_text",
    "malformed_setting",
    "value_too_long",
}


#: Where an API's rules differ from :data:`REQUEST_RULES`: Converse has no
#: ``input`` to send beside ``messages``; Bedrock's InvokeModel and Vertex's
#: rawPredict refuse other model families' native bodies; Gemini refuses an
#: object that spells one field in camelCase and in snake_case (parsers
#: disagree on which wins).
RULES_BY_API = {
    "bedrock_converse": REQUEST_RULES - {"messages_and_input"},
    "anthropic_messages": REQUEST_RULES | {"unsupported_body"},
    "gemini": REQUEST_RULES | {"duplicate_key"},
}


@pytest.mark.parametrize("api", apis.APIS, ids=folder)
def test_every_rule_the_api_raises_has_a_refused_sample(api: WireApi) -> None:
    refused = sorted((DATA / folder(api) / "refused").glob("*.json"))
    rules = RULES_BY_API.get(folder(api), REQUEST_RULES)
    assert {load(path)["rejected_rule"] for path in refused} == rules


# --------------------------------------------------------------------------
# Responses and streams


@pytest.mark.parametrize(("api", "path"), samples("responses"))
def test_response_observed_exactly(api: WireApi, path: Path) -> None:
    sample = load(path)
    assert facts_json(api.observe_json(sample["response"], None)) == expected_response(sample)


def sse_bytes(events: list[dict[str, Any]]) -> bytes:
    """The events as an upstream writes them."""
    out = bytearray()
    for event in events:
        if "event" in event:
            out += b"event: " + event["event"].encode() + b"\n"
        data = event["data"]
        out += b"data: " + (data.encode() if isinstance(data, str) else orjson.dumps(data))
        out += b"\n\n"
    return bytes(out)


def json_array_bytes(events: list[dict[str, Any]]) -> bytes:
    """The events' data as the elements of one streamed JSON array, as Gemini
    writes it (pretty-printed elements, ``\r\n`` before each comma)."""
    items = [orjson.dumps(event["data"], option=orjson.OPT_INDENT_2) for event in events]
    return b"[" + b"\r\n,".join(items) + b"]"


def framed(sample: dict[str, Any]) -> tuple[bytes, SSEDecoder | JsonArrayDecoder]:
    """A stream sample's bytes as the upstream sends them, and their decoder."""
    if sample.get("framing") == "json_array":
        return json_array_bytes(sample["events"]), JsonArrayDecoder()
    return sse_bytes(sample["events"]), SSEDecoder()


@pytest.mark.parametrize(("api", "path"), samples("streams"))
def test_stream_observed_exactly(api: WireApi, path: Path) -> None:
    sample = load(path)
    expected = expected_response(sample)
    facts = audit(api, sample) if "request" in sample else None
    observer = api.StreamObserver(facts)
    wire, decoder = framed(sample)
    # Cut anywhere: the decoder hands the observer whole events all the same.
    events = [event for i in range(0, len(wire), 7) for event in decoder.feed(wire[i : i + 7])]
    assert len(events) == len(sample["events"])
    assert [observer.feed(event) for event in events] == sample["outputs"]
    # A stream ends early when cut (``error``), or when the upstream ended it
    # with an error event of its own (``"done": false``).
    assert observer.done is sample.get("done", sample.get("error") is None)
    facts = observer.finish(sample.get("error"))
    assert facts_json(facts) == expected
    assert facts.output_messages is None  # the text is not kept without content capture


@pytest.mark.parametrize(("api", "path"), samples("streams"))
def test_streamed_output_in_the_conventions_shape(api: WireApi, path: Path) -> None:
    """With content capture the observer assembles the output as output messages
    (``output_messages`` of the sample), and observes the same facts as without."""
    sample = load(path)
    facts = audit(api, sample) if "request" in sample else None
    observer = api.StreamObserver(facts, capture_content=True)
    wire, decoder = framed(sample)
    for event in decoder.feed(wire):
        observer.feed(event)
    observed = observer.finish(sample.get("error"))
    assert facts_json(observed) == expected_response(sample)
    assert observed.output_messages == sample["output_messages"]


# --------------------------------------------------------------------------
# What telemetry reads (modeltap.apis.contract)


def api(name: str) -> WireApi:
    return apis.module_for(name)


CHAT = "openai.chat_completions"
RESPONSES = "openai.responses"
ANTHROPIC = "anthropic.messages"

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
#: MESSAGES in the GenAI conventions' shape.
CONVENTION_MESSAGES = [
    {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
    {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
]
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}


@pytest.mark.parametrize(
    ("name", "body", "content"),
    [
        (CHAT, {"messages": MESSAGES}, RequestContent(input_messages=CONVENTION_MESSAGES)),
        (
            CHAT,
            {"messages": MESSAGES, "system": "x"},
            RequestContent(input_messages=CONVENTION_MESSAGES),
        ),
        (
            CHAT,
            {
                "messages": [
                    {
                        "role": "user",
                        "name": "ann",
                        "content": [
                            {"type": "text", "text": "look"},
                            {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
                            {
                                "type": "image_url",
                                "image_url": {"url": "data:image/png;base64,AAA"},
                            },
                            {
                                "type": "input_audio",
                                "input_audio": {"data": "BBB", "format": "wav"},
                            },
                        ],
                    },
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                            },
                            {
                                "id": "call_2",
                                "type": "custom",
                                "custom": {"name": "sh", "input": "ls"},
                            },
                        ],
                    },
                    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                ],
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "weather",
                            "description": "Weather now.",
                            "parameters": WEATHER_SCHEMA,
                        },
                    },
                    {"type": "custom", "custom": {"name": "sh"}},
                    {"type": "web_search"},
                ],
            },
            RequestContent(
                input_messages=[
                    {
                        "role": "user",
                        "name": "ann",
                        "parts": [
                            {"type": "text", "content": "look"},
                            {"type": "uri", "modality": "image", "uri": "https://x/a.png"},
                            {
                                "type": "blob",
                                "modality": "image",
                                "content": "AAA",
                                "mime_type": "image/png",
                            },
                            {
                                "type": "blob",
                                "modality": "audio",
                                "content": "BBB",
                                "mime_type": "audio/wav",
                            },
                        ],
                    },
                    {
                        "role": "assistant",
                        "parts": [
                            {
                                "type": "tool_call",
                                "id": "call_1",
                                "name": "weather",
                                "arguments": {"city": "Paris"},
                            },
                            {"type": "tool_call", "id": "call_2", "name": "sh", "arguments": "ls"},
                        ],
                    },
                    {
                        "role": "tool",
                        "parts": [
                            {"type": "tool_call_response", "id": "call_1", "response": "sunny"}
                        ],
                    },
                ],
                tool_definitions=[
                    {
                        "type": "function",
                        "name": "weather",
                        "description": "Weather now.",
                        "parameters": WEATHER_SCHEMA,
                    },
                    {"type": "custom", "name": "sh"},
                    {"type": "web_search", "name": "web_search"},
                ],
            ),
        ),
        (
            ANTHROPIC,
            {"messages": MESSAGES[1:], "system": "s"},
            RequestContent(CONVENTION_MESSAGES[1:], [{"type": "text", "content": "s"}]),
        ),
        (
            ANTHROPIC,
            {
                "system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                "messages": [
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                            {
                                "type": "tool_use",
                                "id": "toolu_1",
                                "name": "ls",
                                "input": {"p": "."},
                            },
                        ],
                    },
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"}
                        ],
                    },
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "C",
                                },
                            },
                            {"type": "text", "text": "and?"},
                        ],
                    },
                ],
                "tools": [
                    {"name": "ls", "description": "List.", "input_schema": WEATHER_SCHEMA},
                    {"type": "web_search_20250305", "name": "web_search"},
                ],
                "mcp_servers": [{"type": "url", "url": "https://m", "name": "docs"}],
            },
            RequestContent(
                input_messages=[
                    {
                        "role": "assistant",
                        "parts": [
                            {"type": "reasoning", "content": "hmm"},
                            {
                                "type": "tool_call",
                                "id": "toolu_1",
                                "name": "ls",
                                "arguments": {"p": "."},
                            },
                        ],
                    },
                    {
                        "role": "tool",
                        "parts": [
                            {"type": "tool_call_response", "id": "toolu_1", "response": "a.py"}
                        ],
                    },
                    {
                        "role": "user",
                        "parts": [
                            {
                                "type": "blob",
                                "modality": "image",
                                "content": "C",
                                "mime_type": "image/png",
                            },
                            {"type": "text", "content": "and?"},
                        ],
                    },
                ],
                system_instructions=[
                    {"type": "text", "content": "a"},
                    {"type": "text", "content": "b"},
                ],
                tool_definitions=[
                    {
                        "type": "function",
                        "name": "ls",
                        "description": "List.",
                        "parameters": WEATHER_SCHEMA,
                    },
                    {"type": "web_search_20250305", "name": "web_search"},
                    {"type": "mcp", "name": "docs"},
                ],
            ),
        ),
        (ANTHROPIC, {"messages": None}, RequestContent()),
        (
            RESPONSES,
            {"input": "hi", "instructions": "i"},
            RequestContent(CONVENTION_MESSAGES[1:], [{"type": "text", "content": "i"}]),
        ),
        (
            RESPONSES,
            {
                "instructions": [
                    {"role": "developer", "content": [{"type": "input_text", "text": "i"}]}
                ],
                "input": [
                    {"role": "user", "content": [{"type": "input_text", "text": "go"}]},
                    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "plan"}]},
                    {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
                    {"type": "function_call", "call_id": "c2", "name": "cat", "arguments": "x"},
                    {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
                    {"type": "function_call_output", "call_id": "c2", "output": "text"},
                    {"type": "item_reference", "id": "msg_9"},
                ],
                "tools": [
                    {"type": "function", "name": "ls", "parameters": WEATHER_SCHEMA},
                    {
                        "type": "namespace",
                        "name": "fs",
                        "tools": [{"type": "function", "name": "cat"}],
                    },
                    {"type": "mcp", "server_label": "docs"},
                ],
            },
            RequestContent(
                input_messages=[
                    {"role": "user", "parts": [{"type": "text", "content": "go"}]},
                    {
                        "role": "assistant",
                        "parts": [
                            {"type": "reasoning", "content": "plan"},
                            {"type": "tool_call", "id": "c1", "name": "ls", "arguments": {}},
                            {"type": "tool_call", "id": "c2", "name": "cat", "arguments": "x"},
                        ],
                    },
                    {
                        "role": "tool",
                        "parts": [
                            {"type": "tool_call_response", "id": "c1", "response": "a.py"},
                            {"type": "tool_call_response", "id": "c2", "response": "text"},
                        ],
                    },
                    {"role": "assistant", "parts": [{"type": "item_reference", "id": "msg_9"}]},
                ],
                system_instructions=[{"type": "text", "content": "i"}],
                tool_definitions=[
                    {"type": "function", "name": "ls", "parameters": WEATHER_SCHEMA},
                    {"type": "function", "name": "fs.cat"},
                    {"type": "mcp", "name": "docs"},
                ],
            ),
        ),
        (RESPONSES, {"messages": MESSAGES, "system": "s"}, RequestContent()),
    ],
)
def test_request_content(name: str, body: dict[str, Any], content: RequestContent) -> None:
    assert api(name).request_content(body) == content


def assistant(parts: list[Any], finish: str) -> dict[str, Any]:
    return {"role": "assistant", "parts": parts, "finish_reason": finish}


@pytest.mark.parametrize(
    ("name", "body", "output"),
    [
        (
            CHAT,
            {
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "yes"},
                        "finish_reason": "stop",
                    },
                    {
                        "index": 1,
                        "message": {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {
                                    "id": "c",
                                    "type": "function",
                                    "function": {"name": "f", "arguments": "{}"},
                                }
                            ],
                        },
                        "finish_reason": "tool_calls",
                    },
                    {"index": 2, "message": {"refusal": "no"}, "finish_reason": "content_filter"},
                ]
            },
            [
                assistant([{"type": "text", "content": "yes"}], "stop"),
                assistant(
                    [{"type": "tool_call", "id": "c", "name": "f", "arguments": {}}], "tool_call"
                ),
                assistant([{"type": "text", "content": "no"}], "content_filter"),
            ],
        ),
        (CHAT, {"choices": None}, "absent"),
        (CHAT, {"error": {"type": "x"}}, "absent"),
        (
            ANTHROPIC,
            {
                "content": [
                    {"type": "text", "text": "ok"},
                    {"type": "tool_use", "id": "t", "name": "ls", "input": {}},
                ],
                "stop_reason": "tool_use",
            },
            [
                assistant(
                    [
                        {"type": "text", "content": "ok"},
                        {"type": "tool_call", "id": "t", "name": "ls", "arguments": {}},
                    ],
                    "tool_call",
                )
            ],
        ),
        (
            ANTHROPIC,
            {"content": [{"type": "text", "text": "…"}], "stop_reason": "max_tokens"},
            [assistant([{"type": "text", "content": "…"}], "length")],
        ),
        (ANTHROPIC, {"type": "error", "error": {}}, "absent"),
        (
            RESPONSES,
            {
                "status": "completed",
                "output": [
                    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "r"}]},
                    {"type": "message", "content": [{"type": "output_text", "text": "hi"}]},
                ],
            },
            [
                assistant(
                    [{"type": "reasoning", "content": "r"}, {"type": "text", "content": "hi"}],
                    "stop",
                )
            ],
        ),
        (
            RESPONSES,
            {
                "type": "response.completed",
                "response": {
                    "status": "completed",
                    "output": [
                        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
                    ],
                },
            },
            [
                assistant(
                    [{"type": "tool_call", "id": "c", "name": "f", "arguments": {}}], "tool_call"
                )
            ],
        ),
        (
            RESPONSES,
            {
                "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"},
                "output": [{"type": "web_search_call", "id": "ws_1"}],
            },
            [assistant([{"type": "web_search_call", "id": "ws_1"}], "length")],
        ),
        (RESPONSES, {"response": {"id": "r"}}, "absent"),
    ],
)
def test_response_content(name: str, body: dict[str, Any], output: object) -> None:
    read = api(name).response_content(body)
    if output == "absent":
        assert read is None
    else:
        assert read is not None and read.output_messages == output


@pytest.mark.parametrize(
    ("name", "usage", "totals"),
    [
        # Anthropic leaves the cache out of input_tokens: the total adds it.
        (ANTHROPIC, Usage(25, 7, None, 10, 5), Usage(40, 7, None, 10, 5)),
        (ANTHROPIC, Usage(25, 7), Usage(25, 7)),
        (ANTHROPIC, Usage(None, 7, None, 10, 5), Usage(None, 7, None, 10, 5)),
        # OpenAI's counts already include cached and reasoning tokens.
        (CHAT, Usage(21, 5, 26, 3, None, 1), Usage(21, 5, 26, 3, None, 1)),
        (RESPONSES, Usage(30, 6, 36, 4, None, 2), Usage(30, 6, 36, 4, None, 2)),
    ],
)
def test_usage_totals(name: str, usage: Usage, totals: Usage) -> None:
    assert api(name).usage_totals(usage) == totals


@pytest.mark.parametrize(
    ("name", "body", "settings"),
    [
        (
            CHAT,
            {
                "max_tokens": 10,
                "max_completion_tokens": 20,
                "temperature": 1,
                "top_p": 0.5,
                "stop": "END",
                "seed": 7,
                "frequency_penalty": -0.5,
                "presence_penalty": 0,
                "n": 2,
                "response_format": {"type": "json_schema", "json_schema": {}},
                "service_tier": "flex",
            },
            RequestSettings(20, 1.0, 0.5, None, ("END",), 7, -0.5, 0.0, 2, "json", "flex"),
        ),
        (
            CHAT,
            {"max_tokens": 10, "stop": ["a", "b"]},
            RequestSettings(10, stop_sequences=("a", "b")),
        ),
        (
            CHAT,
            {"temperature": True, "seed": 1.5, "n": "2", "stop": ["a", 1], "response_format": 1},
            RequestSettings(),  # the wrong type is unknown, never a default
        ),
        (
            ANTHROPIC,
            {"max_tokens": 32000, "temperature": 0.2, "top_k": 40, "stop_sequences": ["\n\nH:"]},
            RequestSettings(32000, 0.2, top_k=40.0, stop_sequences=("\n\nH:",)),
        ),
        (ANTHROPIC, {"seed": 1, "n": 2, "stop": "x"}, RequestSettings()),
        (
            RESPONSES,
            {"max_output_tokens": 500, "top_p": 1, "text": {"format": {"type": "text"}}},
            RequestSettings(500, top_p=1.0, output_type="text"),
        ),
        (RESPONSES, {"max_tokens": 5, "stop": "x", "text": "json"}, RequestSettings()),
    ],
)
def test_request_settings(name: str, body: dict[str, Any], settings: RequestSettings) -> None:
    assert api(name).request_settings(body) == settings
