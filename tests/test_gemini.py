"""Tests for modeltap.apis.gemini beyond its wire samples: endpoints, the path's
facts, both key spellings, the Code Assist wrapper, and what telemetry reads.

The samples in ``tests/data/gemini/`` (checked by ``test_samples.py``) hold
the request and response shapes; here are the rules that a table states
better than a sample.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from modeltap import apis
from modeltap.apis import gemini
from modeltap.apis.contract import EndpointMatch
from modeltap.app.client_env import export_lines
from modeltap.evidence.records import RequestFacts, RequestSettings, Usage
from modeltap.rules.errors import Rejected
from modeltap.rules.routing import RouteTable, parse_upstream_url

API = "gemini.generate_content"
VERTEX = "gcp.vertex_ai"
CONTENTS = [{"role": "user", "parts": [{"text": "hi"}]}]
#: Where the unit tests send their bodies (the path names the model).
PATH = "/v1beta/models/gemini-2.5-flash:generateContent"


def audit(body: Any, path: str = PATH) -> RequestFacts:
    """A body audited as sent to ``path``."""
    return gemini.audit_request(body, apis.match_endpoint(path))


@pytest.mark.parametrize(
    ("path", "match"),
    [
        ("/v1beta/models/gemini-2.5-flash:generateContent", EndpointMatch(API, "gemini-2.5-flash")),
        (
            "/v1/models/gemini-3-pro-preview:streamGenerateContent",
            EndpointMatch(API, "gemini-3-pro-preview", True),
        ),
        # The query string does not matter; the method's case does not either.
        ("/v1beta/models/m:streamGenerateContent?alt=sse", EndpointMatch(API, "m", True)),
        ("/v1beta/models/m:GENERATECONTENT", EndpointMatch(API, "m")),
        # Decided on the decoded path: an encoded colon or slash cannot hide one.
        ("/v1beta/models/m%3AgenerateContent", EndpointMatch(API, "m")),
        ("/v1beta/models/m%3astreamGenerateContent", EndpointMatch(API, "m", True)),
        ("/v1beta/models%2Fm:generateContent", EndpointMatch(API, "m")),
        ("/v1beta/models/a%2Fb:generateContent", EndpointMatch(API, "a/b")),
        # Vertex AI: project and location, and the express form.
        (
            "/v1beta1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent",
            EndpointMatch(API, "gemini-2.5-flash", False, provider=VERTEX),
        ),
        (
            "/v1/publishers/google/models/g:streamGenerateContent",
            EndpointMatch(API, "g", True, provider=VERTEX),
        ),
        (
            "/v1/projects/p/locations/l/endpoints/123:generateContent",
            EndpointMatch(API, "endpoints/123", False, provider=VERTEX),
        ),
        ("/v1beta/tunedModels/my-tune:generateContent", EndpointMatch(API, "tunedModels/my-tune")),
        # Code Assist: the model is in the body.
        ("/v1internal:generateContent", EndpointMatch(API, None)),
        ("/v1internal:streamGenerateContent", EndpointMatch(API, None, True)),
        # Under a route's base path.
        ("/gemini/v1beta/models/m:generateContent", EndpointMatch(API, "m")),
        # Not model requests.
        ("/v1beta/models/m:countTokens", None),
        ("/v1internal:countTokens", None),
        ("/v1internal:loadCodeAssist", None),
        ("/v1internal:retrieveUserQuota", None),
        ("/v1internal:listExperiments", None),
        ("/v1beta/models/m:embedContent", None),
        ("/v1beta/models/m", None),
        ("/v1beta/models/generateContent", None),
    ],
)
def test_endpoints(path: str, match: EndpointMatch | None) -> None:
    assert apis.match_endpoint(path) == match


@pytest.mark.parametrize(
    "path", ["/v1beta/models/:generateContent", "/v1beta/models%2F:generateContent"]
)
def test_a_path_that_names_an_empty_model_is_refused(path: str) -> None:
    with pytest.raises(Rejected) as caught:
        apis.match_endpoint(path)
    assert caught.value.rule == "missing_model"


def test_api_for_path_is_post_only() -> None:
    assert apis.api_for_path("POST", "/v1beta/models/m:generateContent") == API
    assert apis.api_for_path("GET", "/v1beta/models/m:generateContent") is None


def test_the_path_says_the_model_and_the_stream() -> None:
    def facts(body: dict[str, Any], path: str) -> tuple[str, bool]:
        found = gemini.audit_request(body, apis.match_endpoint(path))
        return found.model, found.stream

    stream = "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    assert facts({"contents": CONTENTS}, stream) == ("gemini-2.5-pro", True)
    # The path's model is what the upstream serves; a body naming the same one, in
    # any of its spellings, is fine, and one naming another is refused (a gateway
    # reading the body would run another model than the record says).
    for same in ("gemini-2.5-pro", "models/gemini-2.5-pro", "projects/p/models/gemini-2.5-pro"):
        named = {"model": same, "contents": CONTENTS}
        path = "/v1/models/gemini-2.5-pro:generateContent"
        assert facts(named, path) == ("gemini-2.5-pro", False)
    for other, path in (
        ("models/other", "/v1/models/gemini-2.5-pro:generateContent"),
        ("models/gemini-2.5-pro-x", "/v1/models/gemini-2.5-pro:generateContent"),
        ("tunedModels/b", "/v1beta/tunedModels/a:generateContent"),
    ):
        with pytest.raises(Rejected) as caught:
            facts({"model": other, "contents": CONTENTS}, path)
        assert caught.value.rule == "model_mismatch"
    # Code Assist's wrapper, the wrapped request and the path must agree too.
    for body, path in (
        ({"model": "a", "request": {"contents": CONTENTS}}, "/v1internal/models/b:generateContent"),
        (
            {"model": "a", "request": {"model": "b", "contents": CONTENTS}},
            "/v1internal:generateContent",
        ),
    ):
        with pytest.raises(Rejected) as caught:
            facts(body, path)
        assert caught.value.rule == "model_mismatch"
    # Code Assist: the body's model.
    wrapped = {"model": "gemini-3-flash", "request": {"contents": CONTENTS}}
    assert facts(wrapped, "/v1internal:streamGenerateContent") == ("gemini-3-flash", True)
    # No model in the path and none in the body: refused.
    for endpoint in (apis.match_endpoint("/v1internal:generateContent"), None):
        with pytest.raises(Rejected) as caught:
            gemini.audit_request({"contents": CONTENTS}, endpoint)
        assert caught.value.rule == "missing_model"


def test_provider_by_route_then_path_then_wire() -> None:
    stub = parse_upstream_url("stub", "http://127.0.0.1:9")
    vertex_path = "/v1/projects/p/locations/l/publishers/google/models/g:generateContent"
    assert apis.provider_for(stub, API, vertex_path) == VERTEX
    assert apis.provider_for(stub, API, "/v1/publishers/google/models/g:generateContent") == VERTEX
    assert apis.provider_for(stub, API, "/v1beta/models/g:generateContent") == "gcp.gemini"
    assert apis.provider_for(stub, API) == "gcp.gemini"
    # The gate's match, kept on the exchange, says the same as its path.
    assert apis.provider_for(stub, API, endpoint=apis.match_endpoint(vertex_path)) == VERTEX
    developer = parse_upstream_url("gemini", "https://generativelanguage.googleapis.com")
    assert apis.provider_for(developer, API, vertex_path) == "gcp.gemini"  # the route says
    said = parse_upstream_url("gw", "http://127.0.0.1:9", provider="gcp.vertex_ai")
    assert apis.provider_for(said, API, "/v1beta/models/g:generateContent") == VERTEX
    code_assist = parse_upstream_url("ca", "https://cloudcode-pa.googleapis.com")
    assert apis.provider_for(code_assist, API, "/v1internal:generateContent") == "gcp.gemini"


# --------------------------------------------------------------------------
# Both spellings, and the refusals they need


def test_snake_and_camel_case_read_alike() -> None:
    camel = {
        "contents": [
            {"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": "AA"}}]},
            {"role": "user", "parts": [{"functionResponse": {"id": "c1", "response": {"ok": 1}}}]},
        ],
        "systemInstruction": {"parts": [{"text": "be brief"}]},
        "tools": [{"functionDeclarations": [{"name": "f"}]}, {"googleSearch": {}}],
        "generationConfig": {
            "mediaResolution": "MEDIA_RESOLUTION_LOW",
            "thinkingConfig": {"thinkingLevel": "HIGH", "includeThoughts": True},
        },
    }
    snake = {
        "contents": [
            {"role": "user", "parts": [{"inline_data": {"mime_type": "image/png", "data": "AA"}}]},
            {"role": "user", "parts": [{"function_response": {"id": "c1", "response": {"ok": 1}}}]},
        ],
        "system_instruction": {"parts": [{"text": "be brief"}]},
        "tools": [{"function_declarations": [{"name": "f"}]}, {"google_search": {}}],
        "generation_config": {
            "media_resolution": "MEDIA_RESOLUTION_LOW",
            "thinking_config": {"thinking_level": "HIGH", "include_thoughts": True},
        },
    }
    a, b = audit(camel), audit(snake)
    assert a.instructions_sha256 == b.instructions_sha256
    assert a.tool_names == b.tool_names == ("f",)
    assert a.image_details == b.image_details == ("MEDIA_RESOLUTION_LOW",)
    assert a.tool_results == b.tool_results
    assert a.reasoning_effort == b.reasoning_effort == "HIGH"
    # Hosted tools and thinking keys are recorded as spelt on the wire.
    assert [t.type for t in b.hosted_tools] == ["google_search"]
    assert b.thinking == {"thinking_level": "HIGH", "include_thoughts": True}


@pytest.mark.parametrize(
    "body",
    [
        {"contents": CONTENTS, "generationConfig": {}, "generation_config": {}},
        {
            "contents": CONTENTS,
            "generationConfig": {
                "thinkingConfig": {"thinkingLevel": "LOW", "thinking_level": "HIGH"}
            },
        },
        {
            "contents": CONTENTS,
            "tools": [{"functionDeclarations": [], "function_declarations": [{"name": "x"}]}],
        },
        {
            "contents": [
                {
                    "role": "user",
                    "parts": [
                        {"fileData": {"mimeType": "image/png", "fileUri": "a", "file_uri": "b"}}
                    ],
                }
            ]
        },
        {
            "contents": [
                {
                    "role": "user",
                    "parts": [
                        {"functionResponse": {"id": "a", "response": {}}, "function_response": {}}
                    ],
                }
            ]
        },
        {
            "contents": [{"role": "user", "parts": [{"text": "t"}], "parts_": 1}],
            "cachedContent": "c",
            "cached_content": "d",
        },
    ],
)
def test_one_field_spelt_both_ways_is_refused(body: dict[str, Any]) -> None:
    with pytest.raises(Rejected) as caught:
        audit(body)
    assert caught.value.rule == "duplicate_key"


@pytest.mark.parametrize(
    "extra",
    [
        "contents",
        "systemInstruction",
        "system_instruction",
        "tools",
        "generationConfig",
        "cachedContent",
    ],
)
def test_a_wrapper_with_a_request_field_beside_it_is_refused(extra: str) -> None:
    body = {"model": "gemini-3-flash", "request": {"contents": CONTENTS}, extra: None}
    with pytest.raises(Rejected) as caught:
        audit(body)
    assert caught.value.rule == "malformed_messages"


@pytest.mark.parametrize(
    "part",
    [
        {"text": "x", "thought": True},
        {"text": "x", "thoughtSignature": "c2ln"},
        {"fileData": {"mimeType": "text/plain", "fileUri": "gs://b/f"}},
        {"text": 5},
        "x",
    ],
)
def test_instructions_must_be_plain_text_parts(part: Any) -> None:
    with pytest.raises(Rejected) as caught:
        audit({"contents": CONTENTS, "systemInstruction": {"parts": [part]}})
    assert caught.value.rule == "instructions_not_text"


def test_instructions_without_parts_are_one_empty_text() -> None:
    none = audit({"contents": CONTENTS})
    empty = audit({"contents": CONTENTS, "systemInstruction": {"role": "user"}})
    assert none.instructions_parts == () and empty.instructions_parts is not None
    assert len(empty.instructions_parts) == 1 and empty.instructions_parts[0].bytes == 0
    assert none.instructions_sha256 == empty.instructions_sha256  # both hash ""


def test_a_non_image_blob_is_not_counted_but_must_be_well_formed() -> None:
    audio = {"inlineData": {"mimeType": "audio/wav", "data": "AA"}}
    assert audit({"contents": [{"role": "user", "parts": [audio]}]}).image_details == ()
    with pytest.raises(Rejected) as caught:
        audit({"contents": [{"role": "user", "parts": [{"fileData": {"mimeType": "image/png"}}]}]})
    assert caught.value.rule == "malformed_image"


def test_set_image_detail_gives_every_image_its_resolution() -> None:
    body = {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {
                        "inline_data": {"mime_type": "image/png", "data": "AA"},
                        "media_resolution": {"level": "X"},
                    },
                    {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/f"}},
                    {
                        "functionResponse": {
                            "response": {},
                            "parts": [{"inlineData": {"mimeType": "image/jpeg", "data": "BB"}}],
                        }
                    },
                ],
            }
        ]
    }
    assert gemini.set_image_detail(body, "high") == 2
    assert audit(body).image_details == ("MEDIA_RESOLUTION_HIGH",) * 2
    wrapped = {"model": "m", "request": copy.deepcopy(body)}
    assert gemini.set_image_detail(wrapped, "auto") == 2
    wrapped_facts = audit(wrapped, "/v1internal:generateContent")
    assert wrapped_facts.image_details == ("MEDIA_RESOLUTION_UNSPECIFIED",) * 2


# --------------------------------------------------------------------------
# What telemetry reads


def test_request_content_in_the_conventions_shape() -> None:
    body = {
        "model": "gemini-3-flash",
        "request": {
            "contents": [
                {
                    "role": "user",
                    "parts": [
                        {"text": "look"},
                        {"inlineData": {"mimeType": "image/png", "data": "AA"}},
                    ],
                },
                {
                    "role": "model",
                    "parts": [
                        {"text": "plan", "thought": True},
                        {
                            "functionCall": {"id": "c1", "name": "ls", "args": {"p": "."}},
                            "thoughtSignature": "c2ln",
                        },
                    ],
                },
                {
                    "role": "user",
                    "parts": [
                        {
                            "functionResponse": {
                                "id": "c1",
                                "name": "ls",
                                "response": {"output": "a.py"},
                            }
                        },
                        {"inlineData": {"mimeType": "image/png", "data": "BB"}},
                    ],
                },
            ],
            "systemInstruction": {"parts": [{"text": "be brief"}]},
            "tools": [
                {
                    "functionDeclarations": [
                        {
                            "name": "ls",
                            "description": "List.",
                            "parametersJsonSchema": {"type": "object"},
                        }
                    ]
                },
                {"googleSearch": {}},
            ],
        },
    }
    content = gemini.request_content(body)
    assert content.input_messages == [
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": "look"},
                {"type": "blob", "modality": "image", "content": "AA", "mime_type": "image/png"},
            ],
        },
        {
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "content": "plan"},
                {"type": "tool_call", "id": "c1", "name": "ls", "arguments": {"p": "."}},
            ],
        },
        {
            "role": "tool",
            "parts": [
                {"type": "tool_call_response", "id": "c1", "response": {"output": "a.py"}},
                {"type": "blob", "modality": "image", "content": "BB", "mime_type": "image/png"},
            ],
        },
    ]
    assert content.system_instructions == [{"type": "text", "content": "be brief"}]
    assert content.tool_definitions == [
        {
            "type": "function",
            "name": "ls",
            "description": "List.",
            "parameters": {"type": "object"},
        },
        {"type": "googleSearch", "name": "googleSearch"},
    ]


def test_response_content_and_finish_reasons() -> None:
    body = {
        "response": {
            "candidates": [
                {
                    "content": {"parts": [{"text": "hm", "thought": True}, {"text": "ok"}]},
                    "finishReason": "STOP",
                },
                {
                    "content": {"parts": [{"functionCall": {"name": "f", "args": {}}}]},
                    "finishReason": "STOP",
                },
                {"content": {"parts": []}, "finishReason": "SAFETY"},
                {"content": {"parts": [{"text": "…"}]}, "finishReason": "MAX_TOKENS"},
            ]
        },
        "traceId": "t",
    }
    read = gemini.response_content(body)
    assert read is not None
    assert [m["finish_reason"] for m in read.output_messages] == [
        "stop",
        "tool_call",
        "content_filter",
        "length",
    ]
    assert read.output_messages[0]["parts"] == [
        {"type": "reasoning", "content": "hm"},
        {"type": "text", "content": "ok"},
    ]
    assert gemini.response_content({"error": {"code": 400}}) is None
    assert gemini.response_content({"promptFeedback": {"blockReason": "SAFETY"}}) is None


def test_request_settings_in_either_spelling() -> None:
    camel = {
        "generationConfig": {
            "maxOutputTokens": 10,
            "temperature": 1,
            "topP": 0.5,
            "topK": 40,
            "stopSequences": ["x"],
            "seed": 3,
            "candidateCount": 2,
            "responseMimeType": "application/json",
            "presencePenalty": 0.1,
            "frequencyPenalty": 0,
        }
    }
    snake = {
        "generation_config": {
            "max_output_tokens": 10,
            "temperature": 1,
            "top_p": 0.5,
            "top_k": 40,
            "stop_sequences": ["x"],
            "seed": 3,
            "candidate_count": 2,
            "response_mime_type": "application/json",
            "presence_penalty": 0.1,
            "frequency_penalty": 0,
        }
    }
    expected = RequestSettings(10, 1.0, 0.5, 40.0, ("x",), 3, 0.0, 0.1, 2, "json")
    assert gemini.request_settings(camel) == gemini.request_settings(snake) == expected
    assert gemini.request_settings({"model": "m", "request": camel}) == expected
    assert (
        gemini.request_settings({"generationConfig": {"temperature": "hot"}}) == RequestSettings()
    )


@pytest.mark.parametrize(
    ("usage", "totals"),
    [
        # candidatesTokenCount leaves the thoughts out: the output total adds them.
        (Usage(100, 20, 150, 60, None, 30), Usage(100, 50, 150, 60, None, 30)),
        (Usage(100, 20, 120), Usage(100, 20, 120)),
        (Usage(100, None, None, None, None, 30), Usage(100, None, None, None, None, 30)),
    ],
)
def test_usage_totals(usage: Usage, totals: Usage) -> None:
    assert gemini.usage_totals(usage) == totals


def test_the_wrapper_is_unwrapped_only_by_its_shape() -> None:
    inner = {"candidates": []}
    assert gemini.unwrap({"response": inner, "traceId": "t"}) is inner
    odd = {"response": inner, "candidates": [1]}
    assert gemini.unwrap(odd) is odd
    assert gemini.unwrap([1]) == [1]


# --------------------------------------------------------------------------
# Routes, hosts, export lines and the error shape


def test_regular_mode_audits_every_google_provider_host() -> None:
    table = RouteTable.build([], None)
    developer = table.for_host("generativelanguage.googleapis.com", 443)
    assert developer is not None and developer.name == "gemini"  # the default route
    vertex = table.for_host("us-central1-aiplatform.googleapis.com", 443)
    assert vertex is not None and vertex.provider == VERTEX
    assert vertex.url == "https://us-central1-aiplatform.googleapis.com"
    code_assist = table.for_host("CloudCode-PA.googleapis.com.", 443)
    assert code_assist is not None and code_assist.provider == "gcp.gemini"
    assert table.for_host("aiplatform.googleapis.com.evil.example", 443) is None
    # On any port: what the host is decides, as for the other clouds.
    other_port = table.for_host("us-central1-aiplatform.googleapis.com", 8443)
    assert other_port is not None and other_port.provider == VERTEX
    assert table.for_host("example.com", 443) is None
    assert apis.error_shape_for(API, None).name == "google"
    # A request of no known wire: the Developer API's route answers as Google
    # does; a Vertex route also carries Anthropic's wire, so the shape both read.
    assert apis.error_shape_for(None, developer).name == "google"
    assert apis.error_shape_for(None, vertex).name == "both"


def test_the_gemini_export_line() -> None:
    def lines(spec: str) -> list[str]:
        table = RouteTable.build([spec], None)
        return [
            line.text
            for line in export_lines(table.routes, "http://127.0.0.1:8787")
            if line.route == spec.split("=")[0]
        ]

    assert lines("g=https://generativelanguage.googleapis.com") == [
        "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8787/g  (route g)"
    ]
    # The SDKs append /{version}/models/…: no value is true for a base naming one.
    assert lines("g=https://generativelanguage.googleapis.com/v1beta") == []
    # A Vertex AI route (its provider found from the host): what the same
    # clients read with GOOGLE_GENAI_USE_VERTEXAI=true, after the line for
    # Anthropic's models on Vertex.
    assert lines("vertex=https://us-central1-aiplatform.googleapis.com") == [
        "ANTHROPIC_VERTEX_BASE_URL=http://127.0.0.1:8787/vertex/v1  (route vertex)",
        "GOOGLE_VERTEX_BASE_URL=http://127.0.0.1:8787/vertex  (route vertex)",
    ]
    versioned = lines("vertex=https://us-central1-aiplatform.googleapis.com/v1beta1")
    assert not [line for line in versioned if line.startswith("GOOGLE_")]
    # Code Assist: Gemini CLI signed in with Google posts to $CODE_ASSIST_ENDPOINT/v1internal:…
    assert lines("codeassist=https://cloudcode-pa.googleapis.com") == [
        "CODE_ASSIST_ENDPOINT=http://127.0.0.1:8787/codeassist  (route codeassist)"
    ]
    assert lines("codeassist=https://cloudcode-pa.googleapis.com/v1internal") == []


def test_googles_error_shape() -> None:
    body = orjson.loads(
        gemini.ERROR_SHAPE.body("modeltap refused", status=413, code="modeltap_rejected")
    )
    assert body == {
        "error": {
            "code": 413,
            "message": "modeltap refused",
            "status": "INVALID_ARGUMENT",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "modeltap_rejected",
                    "domain": "modeltap",
                }
            ],
        }
    }
