"""What every wire shares: a route's provider, models named in the path,
instruction parts, and the start-up screen's export lines (all pure core)."""

from __future__ import annotations

import dataclasses
import hashlib
import types
from typing import Any, Final

import orjson
import pytest

from modeltap import apis
from modeltap.apis import anthropic_messages, openai_chat, openai_responses
from modeltap.apis.contract import EndpointMatch, WireApi
from modeltap.apis.fields import instructions_digest
from modeltap.app.client_env import export_lines, exported_routes
from modeltap.evidence.capture.lines import decode_record
from modeltap.evidence.records import (
    MAX_ID_CHARS,
    AuditRecord,
    InstructionPart,
    RequestFacts,
    to_json_line,
)
from modeltap.rules.errors import Rejected
from modeltap.rules.routing import (
    PROVIDER_HOSTS,
    RouteError,
    RouteTable,
    parse_route_spec,
    parse_upstream_url,
    provider_of_host,
)
from tests.factories import AUDIT_SCHEMA


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------
# Instruction parts


def test_digest_hashes_the_join_and_each_text() -> None:
    texts = ["You are Claude Code.", "", "Billing: prompt 7 — ✓"]
    joined, parts = instructions_digest(texts)
    assert joined == sha("\n\n".join(texts))
    assert parts == tuple(InstructionPart(sha(t), len(t.encode())) for t in texts)
    assert parts is not None and parts[2].bytes == len("Billing: prompt 7 — ✓".encode())


def test_digest_of_no_instructions_and_of_omitted_ones() -> None:
    assert instructions_digest([]) == (sha(""), ())
    assert instructions_digest(None) == (None, None)


def test_digest_hashes_lone_surrogates_as_sent() -> None:
    joined, parts = instructions_digest(["a\ud800b"])
    assert parts is not None and parts[0].bytes == 5
    assert joined == parts[0].sha256


#: One request per API whose instructions are two messages, the first of two
#: text blocks; ``{bill}`` is the block that changes on every prompt.
def _requests(bill: str) -> list[tuple[Any, dict[str, Any]]]:
    first = [{"type": "text", "text": bill}, {"type": "text", "text": "Be terse."}]
    return [
        (
            openai_chat,
            {
                "model": "m",
                "messages": [
                    {"role": "system", "content": first},
                    {"role": "user", "content": "hi"},
                    {"role": "developer", "content": "Use tools."},
                ],
            },
        ),
        (
            openai_responses,
            {
                "model": "m",
                "instructions": [
                    {
                        "role": "developer",
                        "content": [{**b, "type": "input_text"} for b in first],
                    }
                ],
                "input": [{"role": "developer", "content": "Use tools."}],
            },
        ),
        (
            anthropic_messages,
            {
                "model": "m",
                "system": first,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "system", "content": "Use tools."},
                ],
            },
        ),
    ]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["chat", "responses", "anthropic"])
def test_each_text_block_is_one_part_and_the_join_is_unchanged(index: int) -> None:
    api, body = _requests("x-billing: 1")[index]
    _, later = _requests("x-billing: 2")[index]
    first, second = api.audit_request(body), api.audit_request(later)
    texts = ["x-billing: 1", "Be terse.", "Use tools."]
    assert first.instructions_sha256 == sha("\n\n".join(texts))
    assert first.instructions_parts == tuple(
        InstructionPart(sha(t), len(t.encode())) for t in texts
    )
    # The per-prompt block changes the hash and its own part; the others hold.
    assert first.instructions_sha256 != second.instructions_sha256
    assert first.instructions_parts is not None and second.instructions_parts is not None
    assert first.instructions_parts[0] != second.instructions_parts[0]
    assert first.instructions_parts[1:] == second.instructions_parts[1:]


@pytest.mark.parametrize(
    ("api", "body"),
    [
        (openai_chat, {"model": "m", "messages": [{"role": "system", "content": []}]}),
        (
            anthropic_messages,
            {"model": "m", "system": [], "messages": [{"role": "system", "content": "a"}]},
        ),
    ],
    ids=["chat", "anthropic"],
)
def test_a_message_of_no_blocks_is_one_empty_part(api: Any, body: dict[str, Any]) -> None:
    facts = api.audit_request(body)
    texts = [""] if api is openai_chat else ["", "a"]
    assert facts.instructions_sha256 == sha("\n\n".join(texts))  # as before parts existed
    assert facts.instructions_parts == tuple(InstructionPart(sha(t), len(t)) for t in texts)


def test_omitted_instructions_have_no_parts() -> None:
    body = {"model": "m", "previous_response_id": "resp_1", "input": "go on"}
    facts = openai_responses.audit_request(body)
    assert facts.instructions_sha256 is None and facts.instructions_parts is None


# --------------------------------------------------------------------------
# A route's provider


@pytest.mark.parametrize(
    ("host", "provider"),
    [
        ("api.openai.com", "openai"),
        ("API.OpenAI.com.", "openai"),
        ("api.anthropic.com", "anthropic"),
        ("my-res.openai.azure.com", "azure.ai.openai"),
        ("my-res.services.ai.azure.com", "azure.ai.openai"),
        ("bedrock-runtime.us-east-1.amazonaws.com", "aws.bedrock"),
        ("us-central1-aiplatform.googleapis.com", "gcp.vertex_ai"),
        ("aiplatform.googleapis.com", "gcp.vertex_ai"),
        ("generativelanguage.googleapis.com", "gcp.gemini"),
        ("cloudcode-pa.googleapis.com", "gcp.gemini"),
        # The same providers under their other names (data residency, Bedrock's
        # OpenAI-compatible and Messages endpoint): a way around the audit otherwise.
        ("eu.api.openai.com", "openai"),
        ("us.api.openai.com", "openai"),
        ("bedrock-mantle.us-east-1.api.aws", "aws.bedrock"),
        ("127.0.0.1", None),
        ("api.openai.com.evil.example", None),
        ("evil.example.openai.azure.com.attacker.net", None),
        ("a.b.openai.azure.com", None),  # * is one label, not several
        ("bedrock-runtime.us-east-1.amazonaws.com.evil.example", None),
        ("bedrock.us-east-1.amazonaws.com", None),  # the control plane, not runtime
        ("notaiplatform.googleapis.com.example", None),
    ],
)
def test_provider_of_host(host: str, provider: str | None) -> None:
    assert provider_of_host(host) == provider


def test_every_host_pattern_names_a_provider_of_the_convention_shape() -> None:
    for pattern, provider in PROVIDER_HOSTS:
        route = parse_route_spec(f"r=https://{pattern.replace('*', 'x')},provider={provider}")
        assert provider_of_host(route.host) == provider


def test_route_provider_said_then_host_then_unknown() -> None:
    said = parse_route_spec("stub=http://127.0.0.1:9000,provider=azure.ai.openai")
    assert (said.name, said.url, said.provider) == (
        "stub",
        "http://127.0.0.1:9000",
        "azure.ai.openai",
    )
    # Said wins over the host: a gateway at api.openai.com's name is still the gateway.
    assert parse_route_spec("o=https://api.openai.com,provider=my.gateway").provider == "my.gateway"
    assert parse_route_spec("az=https://r.openai.azure.com/openai").provider == "azure.ai.openai"
    assert parse_route_spec("vllm=http://127.0.0.1:8000/v1").provider is None
    # A comma that is not an option stays in the URL.
    assert parse_route_spec("x=http://h/a,b").base_path == "/a,b"
    table = RouteTable.build([], "http://127.0.0.1:1")
    assert {r.name: r.provider for r in table.routes} == {
        "gemini": "gcp.gemini",
        "openai": "openai",
        "anthropic": "anthropic",
        "upstream": None,
    }


@pytest.mark.parametrize(
    "spec",
    [
        "s=http://h,provider=Azure",
        "s=http://h,provider=",
        "s=http://h,provider=azure..openai",
        "s=http://h,provider=a b",
        f"s=http://h,provider={'a' * 65}",
        "s=http://h,provider=openai,provider=anthropic",
        "s=http://h,region=us",
    ],
)
def test_bad_route_options_are_refused_by_name(spec: str) -> None:
    with pytest.raises(RouteError, match=r"^route s: "):
        parse_route_spec(spec)


def test_an_upstream_without_a_scheme_names_the_flag_and_shows_one() -> None:
    """``--upstream 127.0.0.1:8000`` said ``route upstream: …``: no such route was typed."""
    example = "the upstream must be an http:// or https:// URL, e.g. http://127.0.0.1:8000"
    with pytest.raises(RouteError, match=f"^--upstream: {example}"):
        RouteTable.build([], "127.0.0.1:8000")
    with pytest.raises(RouteError, match=f"^route vllm: {example}"):
        parse_route_spec("vllm=gpu-box:8000")


def test_record_provider_is_the_routes_else_the_wires() -> None:
    stub = parse_upstream_url("stub", "http://127.0.0.1:9")
    azure = parse_route_spec("stub=http://127.0.0.1:9,provider=azure.ai.openai")
    assert apis.provider_for(stub, openai_chat.NAME) == "openai"
    assert apis.provider_for(stub, anthropic_messages.NAME) == "anthropic"
    assert apis.provider_for(azure, openai_chat.NAME) == "azure.ai.openai"
    assert apis.provider_for(None, openai_responses.NAME) == "openai"


# --------------------------------------------------------------------------
# Models named in the path (no shipped API does it yet: a fake one proves it)


def _fake_match(path: str) -> EndpointMatch | None:
    """``…/models/{model}:generate``, case-insensitive, model case kept."""
    head, sep, verb = path.rpartition(":")
    at = head.lower().rfind("/models/")
    if not sep or verb.lower() != "generate" or at < 0:
        return None
    return EndpointMatch("fake.generate", head[at + len("/models/") :])


FAKE: Final[Any] = types.SimpleNamespace(
    NAME="fake.generate",
    PROVIDER="fake",
    OPENAI_API_TYPE=None,
    match_endpoint=_fake_match,
)


@pytest.fixture
def with_fake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apis, "APIS", (*apis.APIS, FAKE))


@pytest.mark.usefixtures("with_fake")
@pytest.mark.parametrize(
    ("path", "model"),
    [
        ("/v1beta/models/gemini-3-pro:generate", "gemini-3-pro"),
        ("/v1beta/MODELS/Gemini-3-Pro:GENERATE?alt=sse", "Gemini-3-Pro"),
        ("/model/anthropic.claude-v2%3A1/models/x%2Fy:generate", "x/y"),
        ("/v1/models/us.anthropic.claude%3A0:generate/", "us.anthropic.claude:0"),
        ("/v1/models;v=1/m:generate", "m"),  # ;params dropped as servlet containers do
    ],
)
def test_the_model_a_path_names_is_decoded(path: str, model: str) -> None:
    assert apis.match_endpoint(path) == EndpointMatch("fake.generate", model)
    assert apis.endpoint_of(path) == "fake.generate"
    assert apis.model_from_path(path) == model


@pytest.mark.usefixtures("with_fake")
def test_existing_endpoints_name_no_model_and_the_first_module_wins() -> None:
    assert apis.match_endpoint("/v1/chat/completions") == EndpointMatch(openai_chat.NAME)
    assert apis.match_endpoint("/v1/Chat%2FCompletions/") == EndpointMatch(openai_chat.NAME)
    assert apis.match_endpoint("/v1/messages?beta=true") == EndpointMatch(anthropic_messages.NAME)
    assert apis.model_from_path("/v1/responses") is None
    assert apis.match_endpoint("/v1/models/m:count") is None
    assert apis.model_from_path("/v1/embeddings") is None


@pytest.mark.usefixtures("with_fake")
def test_an_empty_or_overlong_model_in_the_path_is_refused_by_name() -> None:
    with pytest.raises(Rejected) as caught:
        apis.match_endpoint("/v1/models/:generate")
    assert caught.value.rule == "missing_model"
    with pytest.raises(Rejected) as caught:
        apis.match_endpoint(f"/v1/models/{'m' * (MAX_ID_CHARS + 1)}:generate")
    assert (caught.value.rule, caught.value.detail) == ("value_too_long", "model")


def test_every_shipped_module_meets_the_contract() -> None:
    modules: tuple[WireApi, ...] = apis.APIS
    for module in modules:
        assert module.match_endpoint("/nothing") is None


FACTS = RequestFacts(
    model="body-model",
    tool_names=(),
    reasoning_effort=None,
    thinking=None,
    image_details=(),
    instructions_sha256=sha(""),
    instructions_parts=(),
    stream=False,
    hosted_tools=(),
    tool_results=(),
    previous_response_id=None,
    generate=None,
)


def _build(model_from_path: str | None) -> AuditRecord:
    return AuditRecord.build(
        FACTS,
        request_id="r",
        seq=1,
        run_id="run",
        session_id="s",
        transport="http",
        api="fake.generate",
        provider="gcp.gemini",
        route="g",
        upstream="https://generativelanguage.googleapis.com",
        path="/v1/models/x:generate",
        body_bytes=2,
        body_sha256="0" * 64,
        model_from_path=model_from_path,
    )


def test_the_path_model_decides_over_the_body() -> None:
    path = _build("path-model")
    assert (path.model, path.model_source, path.provider) == ("path-model", "path", "gcp.gemini")
    body = _build(None)
    assert (body.model, body.model_source) == ("body-model", "body")
    assert body.instructions_parts == ()


# --------------------------------------------------------------------------
# The start-up screen's export lines


def _lines(specs: list[str], upstream: str | None = None) -> list[str]:
    table = RouteTable.build(specs, upstream)
    return [line.text for line in export_lines(table.routes, "http://127.0.0.1:8787")]


def test_default_routes_export_their_sdks_base_urls() -> None:
    assert sorted(_lines([])) == [
        "ANTHROPIC_BASE_URL=http://127.0.0.1:8787/anthropic",
        "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8787/gemini  (route gemini)",
        "OPENAI_BASE_URL=http://127.0.0.1:8787/openai/v1",
    ]


def test_a_route_of_unknown_provider_gets_each_wires_line_with_its_condition() -> None:
    # Alone (no default route serves a wire): each wire's line, as a guess.
    table = RouteTable([parse_upstream_url("stub", "http://127.0.0.1:9000")])
    lines = [line.text for line in export_lines(table.routes, "http://127.0.0.1:8787")]
    assert lines == [
        "OPENAI_BASE_URL=http://127.0.0.1:8787/stub/v1  (route stub, if it speaks OpenAI)",
        "ANTHROPIC_BASE_URL=http://127.0.0.1:8787/stub  (route stub, if it speaks Anthropic)",
        "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8787/stub  (route stub, if it speaks Gemini)",
    ]


def test_a_guess_gives_way_to_the_default_route_that_serves_the_api() -> None:
    # Beside the default routes, each variable once: the route that serves its
    # API. The stub's OpenAI line stays (the screen shows the stub's URL otherwise).
    lines = _lines(["stub=http://127.0.0.1:9000"])
    assert sorted(lines) == [
        "ANTHROPIC_BASE_URL=http://127.0.0.1:8787/anthropic",
        "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8787/gemini  (route gemini)",
        "OPENAI_BASE_URL=http://127.0.0.1:8787/openai/v1",
    ]


def test_a_route_named_after_a_wire_speaks_that_wire_only() -> None:
    # --route openai=URL replaces the openai route: its line, and the other
    # wires' variables once each, from their own routes.
    assert sorted(_lines(["openai=http://127.0.0.1:9000"])) == [
        "ANTHROPIC_BASE_URL=http://127.0.0.1:8787/anthropic",
        "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8787/gemini  (route gemini)",
        "OPENAI_BASE_URL=http://127.0.0.1:8787/openai/v1  (route openai)",
    ]


def test_an_upstream_base_ending_in_v1_is_not_given_a_second_one() -> None:
    # OpenAI SDKs append /chat/completions to the base; Anthropic's append
    # /v1/messages, which no value makes true for this upstream.
    table = RouteTable([parse_upstream_url("vllm", "http://127.0.0.1:8000/v1")])
    assert [line.text for line in export_lines(table.routes, "http://127.0.0.1:8787")] == [
        "OPENAI_BASE_URL=http://127.0.0.1:8787/vllm  (route vllm, if it speaks OpenAI)",
    ]


def test_upstream_at_root_and_routes_named_otherwise() -> None:
    # As the screen chooses them: the --upstream and the named routes.
    table = RouteTable.build(["oai=https://api.openai.com"], "http://127.0.0.1:9000")
    shown = exported_routes(table.routes, {"oai"})
    lines = [line.text for line in export_lines(shown, "http://127.0.0.1:8787")]
    assert "OPENAI_BASE_URL=http://127.0.0.1:8787/oai/v1  (route oai)" in lines
    assert lines[-3:] == [
        "OPENAI_BASE_URL=http://127.0.0.1:8787/v1  (--upstream, if it speaks OpenAI)",
        "ANTHROPIC_BASE_URL=http://127.0.0.1:8787  (--upstream, if it speaks Anthropic)",
        "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8787  (--upstream, if it speaks Gemini)",
    ]


def test_a_provider_without_rules_gets_no_line() -> None:
    # (The screen then shows the route's URL.) The wire helpers add rules.
    assert _lines(["m=https://api.mistral.ai,provider=mistral_ai"])[3:] == []


def test_cloud_routes_export_what_their_clients_read() -> None:
    lines = _lines(
        [
            "azure=https://r.openai.azure.com",
            "bedrock=https://bedrock-runtime.us-east-1.amazonaws.com",
            "vertex=https://us-east5-aiplatform.googleapis.com",
        ]
    )
    clouds = [line for line in lines if "(route " in line and "(route gemini)" not in line]
    assert clouds == [
        # (Routes are listed longest prefix first.)
        "ANTHROPIC_BEDROCK_BASE_URL=http://127.0.0.1:8787/bedrock  (route bedrock, with a "
        "Bedrock API key, AWS_BEARER_TOKEN_BEDROCK; SigV4 needs --mode regular)",
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME=https://127.0.0.1:8787/bedrock  (route bedrock, boto3 "
        "with AWS_BEARER_TOKEN_BEDROCK, over TLS: AWS_CA_BUNDLE=the CA cert)",
        "ANTHROPIC_VERTEX_BASE_URL=http://127.0.0.1:8787/vertex/v1  (route vertex)",
        "GOOGLE_VERTEX_BASE_URL=http://127.0.0.1:8787/vertex  (route vertex)",
        "AZURE_OPENAI_ENDPOINT=http://127.0.0.1:8787/azure  (route azure)",
        "OPENAI_BASE_URL=http://127.0.0.1:8787/azure/openai/v1  (route azure, Azure's v1 API "
        "with the OpenAI client)",
    ]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # AzureOpenAI appends /openai/...: no endpoint is true for a base that has it.
        (
            "az=https://r.openai.azure.com/openai",
            ["OPENAI_BASE_URL=http://127.0.0.1:8787/az/v1"],
        ),
        ("az=https://r.openai.azure.com/openai/v1", ["OPENAI_BASE_URL=http://127.0.0.1:8787/az"]),
        # AnthropicVertex's base ends in /v1 (its default does).
        (
            "gcp=https://europe-west1-aiplatform.googleapis.com/v1",
            ["ANTHROPIC_VERTEX_BASE_URL=http://127.0.0.1:8787/gcp"],
        ),
        # A local stub speaking for Bedrock.
        (
            "br=http://127.0.0.1:9000,provider=aws.bedrock",
            [
                "ANTHROPIC_BEDROCK_BASE_URL=http://127.0.0.1:8787/br",
                "AWS_ENDPOINT_URL_BEDROCK_RUNTIME=https://127.0.0.1:8787/br",
            ],
        ),
    ],
)
def test_cloud_export_values_follow_the_routes_base(spec: str, expected: list[str]) -> None:
    assert [line.split("  (")[0] for line in _lines([spec])[3:]] == expected


# --------------------------------------------------------------------------
# Reading records back


def test_the_new_fields_are_written_checked_and_read_back() -> None:
    record = dataclasses.replace(_build("path-model"), api=openai_chat.NAME)
    line = orjson.loads(to_json_line(record))
    AUDIT_SCHEMA.validate(line)
    assert line["instructions_parts"] == [] and line["model_source"] == "path"
    assert decode_record(line) == record
    assert not AUDIT_SCHEMA.is_valid({**line, "model_source": "header"})
    assert not AUDIT_SCHEMA.is_valid({**line, "provider": "Azure OpenAI"})
    assert not AUDIT_SCHEMA.is_valid({**line, "instructions_parts": [{"sha256": "x", "bytes": 1}]})


def test_a_line_an_older_modeltap_wrote_reads_back_with_the_new_fields_unknown() -> None:
    line = orjson.loads(to_json_line(_build(None)))
    for key in ("provider", "model_source", "instructions_parts", "operation"):
        del line[key]
    old = decode_record(line)
    assert (old.provider, old.model_source, old.instructions_parts) == (None, None, None)
    assert old.operation is None  # not "create": unknown
