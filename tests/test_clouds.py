"""The clouds' paths and rules at the core: Azure deployments, Bedrock model
ids (raw, or encoded the ways boto3 and the Anthropic clients encode them),
Vertex's Anthropic models, what the path decides over the body, and the SigV4
detector (checked against signatures botocore makes)."""

from __future__ import annotations

from typing import Any, Final

import pytest
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from modeltap import apis
from modeltap.apis import (
    anthropic_messages,
    bedrock_converse,
    cloud_paths,
    openai_chat,
    openai_responses,
)
from modeltap.apis.contract import (
    FORM_AZURE_DEPLOYMENT,
    FORM_BEDROCK_INVOKE,
    FORM_VERTEX_RAW_PREDICT,
    EndpointMatch,
)
from modeltap.evidence.records import MAX_ID_CHARS
from modeltap.rules.errors import RULES, Rejected
from modeltap.rules.routing import RouteTable, parse_route_spec
from modeltap.wire.sigv4 import Signature, find_signature

CHAT, MESSAGES, CONVERSE = openai_chat.NAME, anthropic_messages.NAME, bedrock_converse.NAME
PROFILE = (
    "arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
    "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
)


# --------------------------------------------------------------------------
# Paths


@pytest.mark.parametrize(
    ("path", "match"),
    [
        # Azure OpenAI: the deployment form names the model; the others do not.
        (
            "/openai/deployments/dep-gpt4o/chat/completions?api-version=2024-10-21",
            EndpointMatch(CHAT, "dep-gpt4o", form=FORM_AZURE_DEPLOYMENT),
        ),
        (
            "/openai/v1/deployments/gpt-4o/chat/completions?api-version=preview",
            EndpointMatch(CHAT, "gpt-4o", form=FORM_AZURE_DEPLOYMENT),
        ),
        (
            "/openai/Deployments/team%2Fdep/Chat/Completions/",
            EndpointMatch(CHAT, "team/dep", form=FORM_AZURE_DEPLOYMENT),
        ),
        ("/openai/responses?api-version=2025-04-01-preview", EndpointMatch(openai_responses.NAME)),
        ("/openai/v1/chat/completions", EndpointMatch(CHAT)),
        # Bedrock: boto3 encodes the whole id, the Anthropic clients keep ':' and encode '/'.
        (
            "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse",
            EndpointMatch(CONVERSE, "us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
        ),
        (
            "/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/converse-stream",
            EndpointMatch(CONVERSE, "us.anthropic.claude-sonnet-4-5-20250929-v1:0", stream=True),
        ),
        (
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2F"
            "us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke",
            EndpointMatch(MESSAGES, PROFILE, form=FORM_BEDROCK_INVOKE),
        ),
        (
            "/model/arn:aws:bedrock:us-east-1:123456789012:inference-profile%2F"
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke-with-response-stream",
            EndpointMatch(MESSAGES, PROFILE, stream=True, form=FORM_BEDROCK_INVOKE),
        ),
        (
            "/gateway/model/anthropic.claude-3-5-haiku-20241022-v1:0/INVOKE",
            EndpointMatch(
                MESSAGES, "anthropic.claude-3-5-haiku-20241022-v1:0", form=FORM_BEDROCK_INVOKE
            ),
        ),
        # Vertex: '@' kept; the verb names the stream.
        (
            "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict",
            EndpointMatch(MESSAGES, "claude-sonnet-4-5@20250929", form=FORM_VERTEX_RAW_PREDICT),
        ),
        (
            "/v1/projects/p/locations/global/publishers/anthropic/models/claude-opus-4-6:streamRawPredict",
            EndpointMatch(MESSAGES, "claude-opus-4-6", stream=True, form=FORM_VERTEX_RAW_PREDICT),
        ),
        (
            "/v1/projects/p/locations/global/publishers/anthropic/models/claude-opus-4-6%40x:streamrawpredict",
            EndpointMatch(MESSAGES, "claude-opus-4-6@x", stream=True, form=FORM_VERTEX_RAW_PREDICT),
        ),
    ],
)
def test_cloud_paths_name_their_api_and_model(path: str, match: EndpointMatch) -> None:
    assert apis.match_endpoint(path) == match


@pytest.mark.parametrize(
    "path",
    [
        "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/count-tokens",
        "/inference-profiles?type=SYSTEM_DEFINED",
        "/inference-profiles/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Aapplication-inference-profile%2Fabc",
        "/v1/projects/p/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict",
        "/model/x/invoke/extra",
        "/openai/deployments/dep/embeddings?api-version=2024-10-21",
        "/v1/projects/p/locations/l/publishers/google/models/gemini-2.5-pro:rawPredict",
    ],
)
def test_what_runs_no_model_turn_is_no_endpoint(path: str) -> None:
    assert apis.match_endpoint(path) is None


def test_encodings_of_one_model_id_name_the_same_model() -> None:
    raw = (
        "/model/arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.x-v1:0/invoke"
    )
    anthropic = raw.replace("profile/", "profile%2F")
    boto = (
        "/model/"
        + "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2F"
        + "us.anthropic.x-v1%3A0"
        + "/invoke"
    )
    models = {apis.model_from_path(p) for p in (raw, anthropic, boto)}
    assert models == {
        "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.x-v1:0"
    }


def test_an_empty_or_overlong_model_id_is_refused_by_name() -> None:
    with pytest.raises(Rejected) as caught:
        apis.match_endpoint("/v1/projects/p/locations/l/publishers/anthropic/models/:rawPredict")
    assert caught.value.rule == "missing_model"
    with pytest.raises(Rejected) as caught:
        apis.match_endpoint(f"/model/{'m' * (MAX_ID_CHARS + 1)}/converse")
    assert (caught.value.rule, caught.value.detail) == ("value_too_long", "model")


# --------------------------------------------------------------------------
# What the path decides


def audit(path: str, body: dict[str, Any]) -> Any:
    found = apis.match_endpoint(path)
    assert found is not None
    return apis.module_for(found.api).audit_request(body, found)


CHAT_BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
INVOKE = "/model/us.anthropic.claude-haiku-4-5-20251001-v1:0/invoke"
VERTEX = (
    "/v1/projects/p/locations/l/publishers/anthropic/models/claude-haiku-4-5@20251001:rawPredict"
)
MESSAGES_BODY = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 1, "messages": []}


def test_the_deployment_decides_over_the_body_model() -> None:
    facts = audit("/openai/deployments/prod-mini/chat/completions?api-version=v1", CHAT_BODY)
    assert facts.model == "prod-mini"
    body_only = audit("/openai/deployments/prod-mini/chat/completions", {"messages": []})
    assert body_only.model == "prod-mini"  # Azure needs no body model on this path


@pytest.mark.parametrize(
    ("body_model", "rule"),
    [(7, "malformed_setting"), (["gpt-4o"], "malformed_setting"), ("m" * 300, "value_too_long")],
)
def test_a_body_model_beside_the_paths_is_still_checked(body_model: Any, rule: str) -> None:
    with pytest.raises(Rejected) as caught:
        audit("/openai/deployments/d/chat/completions", {**CHAT_BODY, "model": body_model})
    assert caught.value.rule == rule


def test_without_a_model_in_path_or_body_the_request_is_refused() -> None:
    for module in apis.APIS:
        with pytest.raises(Rejected) as caught:
            module.audit_request(
                {"messages": [], "input": []} if module is openai_responses else {"messages": []}
            )
        assert caught.value.rule == "missing_model", module.NAME


@pytest.mark.parametrize("path", [INVOKE, VERTEX])
def test_cloud_messages_bodies_carry_no_model_and_must_name_their_version(path: str) -> None:
    assert audit(path, MESSAGES_BODY).model == apis.model_from_path(path)
    for body in (
        {"max_tokens": 1, "messages": []},  # no anthropic_version
        {"anthropic_version": 20230531, "messages": []},  # not a string
        {"anthropic_version": "bedrock-2023-05-31", "prompt": "\n\nHuman: hi\n\nAssistant:"},
    ):
        with pytest.raises(Rejected) as caught:
            audit(path, body)
        assert caught.value.rule == "unsupported_body"
        assert caught.value.message.endswith(RULES["unsupported_body"][1] + ".")


def test_the_messages_path_itself_asks_nothing_of_anthropic_version() -> None:
    facts = anthropic_messages.audit_request({"model": "claude-haiku-4-5", "messages": []})
    assert facts.model == "claude-haiku-4-5"


@pytest.mark.parametrize(
    ("path", "body", "stream"),
    [
        (INVOKE, MESSAGES_BODY, False),
        (INVOKE.replace("/invoke", "/invoke-with-response-stream"), MESSAGES_BODY, True),
        (VERTEX, {**MESSAGES_BODY, "stream": True}, True),  # rawPredict streams when the body asks
        (VERTEX.replace(":rawPredict", ":streamRawPredict"), MESSAGES_BODY, True),
        ("/model/m/converse-stream", {"messages": []}, True),
        (
            "/model/m/converse",
            {"messages": [], "stream": True},
            False,
        ),  # Converse has no stream key
    ],
)
def test_the_path_or_the_body_asks_for_a_stream(path: str, body: Any, stream: bool) -> None:
    assert audit(path, body).stream is stream


def test_converse_stored_prompt_may_send_no_messages_and_states_what_it_sends() -> None:
    arn = "/model/arn:aws:bedrock:us-east-1:1:prompt%2FP1/converse"
    facts = audit(arn, {"promptVariables": {}})
    assert facts.omitted_settings == ("instructions", "tools")
    assert (facts.tool_names, facts.instructions_sha256) == (None, None)
    stated = audit(arn, {"system": [{"text": "x"}], "toolConfig": {"tools": []}})
    assert stated.omitted_settings == () and stated.tool_names == ()
    with pytest.raises(Rejected) as caught:
        audit("/model/us.amazon.nova-pro-v1:0/converse", {"promptVariables": {}})
    assert caught.value.rule == "malformed_messages"  # a model, not a prompt: messages required


@pytest.mark.parametrize(
    ("extra", "effort"),
    [
        (
            {
                "outputConfig": {"effort": "low"},
                "additionalModelRequestFields": {"reasoning_effort": "high"},
            },
            "low",
        ),
        ({"additionalModelRequestFields": {"output_config": {"effort": "max"}}}, "max"),
        ({"additionalModelRequestFields": {"reasoning_effort": "high"}}, "high"),
        (
            {"additionalModelRequestFields": {"reasoningConfig": {"maxReasoningEffort": "medium"}}},
            "medium",
        ),
        ({}, None),
    ],
)
def test_converse_effort_is_read_where_it_was_sent(
    extra: dict[str, Any], effort: str | None
) -> None:
    assert audit("/model/m/converse", {"messages": [], **extra}).reasoning_effort == effort


@pytest.mark.parametrize(
    "extra",
    [
        {"additionalModelRequestFields": []},
        {"outputConfig": "high"},
        {"additionalModelRequestFields": {"reasoning_effort": 3}},
    ],
)
def test_converse_settings_of_the_wrong_type_are_refused(extra: dict[str, Any]) -> None:
    with pytest.raises(Rejected) as caught:
        audit("/model/m/converse", {"messages": [], **extra})
    assert caught.value.rule == "malformed_setting"


# --------------------------------------------------------------------------
# SigV4


def signed_by_botocore(headers: dict[str, str], *, query: bool = False) -> AWSRequest:
    request = AWSRequest(
        method="POST",
        url="https://bedrock-runtime.us-east-1.amazonaws.com/model/m%3A0/converse",
        data=b'{"messages":[]}',
        headers=headers,
    )
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    signer = (
        SigV4QueryAuth(credentials, "bedrock", "us-east-1")
        if query
        else SigV4Auth(credentials, "bedrock", "us-east-1")
    )
    signer.add_auth(request)
    return request


def test_a_botocore_signature_is_found_with_the_headers_it_covers() -> None:
    request = signed_by_botocore({"Content-Type": "application/json", "x-modeltap-session": "s1"})
    found = find_signature(request.headers["Authorization"], "")
    assert found is not None and not found.presigned
    assert set(found.signed_headers) == {"content-type", "host", "x-amz-date", "x-modeltap-session"}
    assert found.covers("X-ModelTap-Session") and not found.covers("amz-sdk-request")


def test_a_presigned_query_is_a_signature_too() -> None:
    request = signed_by_botocore({}, query=True)
    query = request.url.split("?", 1)[1]
    found = find_signature(None, query)
    assert found == Signature(("host",), presigned=True)
    assert find_signature(None, query.replace("X-Amz-", "x-amz-")) is not None
    assert find_signature(None, query.replace("X-Amz-Algorithm", "X%2DAmz%2DAlgorithm")) is not None
    # Without the algorithm AWS reads no query signature: the rest are plain parameters.
    unsigned = "&".join(p for p in query.split("&") if not p.startswith("X-Amz-Algorithm"))
    assert find_signature(None, unsigned) is None
    assert find_signature(None, "X-Amz-Algorithm=HMAC-SHA1&X-Amz-Signature=00") is None


@pytest.mark.parametrize(
    ("authorization", "query"),
    [
        ("Bearer ABSKexamplebedrockapikey", ""),
        (None, "api-version=2024-10-21"),
        ("Basic dXNlcjpwYXNz", "X-Amz-Date=20261201T000000Z"),
        (None, ""),
    ],
)
def test_bearer_tokens_and_plain_requests_are_not_signed(
    authorization: str | None, query: str
) -> None:
    assert find_signature(authorization, query) is None


def test_an_unreadable_signed_header_list_covers_everything() -> None:
    found = find_signature(
        "AWS4-HMAC-SHA256 Credential=A/20261201/us-east-1/bedrock/aws4_request", ""
    )
    assert found is not None and found.covers("anything")
    sigv4a = find_signature(
        "aws4-ecdsa-p256-sha256 Credential=A, SignedHeaders=host;x-amz-date, Signature=0", ""
    )
    assert sigv4a is not None and sigv4a.signed_headers == ("host", "x-amz-date")


# --------------------------------------------------------------------------
# Regular mode's provider hosts, and the errors each cloud's SDKs read


@pytest.mark.parametrize(
    ("host", "provider"),
    [
        ("myres.openai.azure.com", "azure.ai.openai"),
        ("proj-7.services.ai.azure.com", "azure.ai.openai"),
        ("bedrock-runtime.eu-west-3.amazonaws.com", "aws.bedrock"),
        ("myres.cognitiveservices.azure.com", "azure.ai.openai"),
        ("myres.openai.azure.us", "azure.ai.openai"),
        ("bedrock-runtime-fips.us-gov-west-1.amazonaws.com", "aws.bedrock"),
        ("bedrock-runtime.cn-north-1.amazonaws.com.cn", "aws.bedrock"),
        ("bedrock-runtime.us-east-1.api.aws", "aws.bedrock"),
        ("us-east5-aiplatform.googleapis.com", "gcp.vertex_ai"),
        ("aiplatform.googleapis.com", "gcp.vertex_ai"),
    ],
)
def test_regular_mode_audits_every_provider_host(host: str, provider: str) -> None:
    route = RouteTable.build([], None).for_host(host.upper(), 443)
    assert route is not None
    assert (route.name, route.provider, route.host, route.port) == (provider, provider, host, 443)


BEDROCK_CONFIGS: Final = (
    {},
    {"use_fips_endpoint": True},
    {"use_dualstack_endpoint": True},
    {"use_fips_endpoint": True, "use_dualstack_endpoint": True},
)
BEDROCK_REGIONS: Final = (
    "us-east-1", "eu-west-3", "us-gov-west-1", "cn-north-1", "us-iso-east-1",
    "us-isob-east-1", "eu-isoe-west-1",
)  # fmt: skip


def test_every_bedrock_runtime_host_boto3_resolves_is_audited() -> None:
    """Regular mode must know the host boto3 really talks to, whatever the partition.

    Every region x endpoint variant is asked of boto3; a combination botocore
    has no endpoint for is counted, not skipped, so a botocore that stops
    resolving most of them fails here instead of passing on nothing.
    """
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    resolved: list[str] = []
    for region in BEDROCK_REGIONS:
        for config in BEDROCK_CONFIGS:
            try:
                client = boto3.client(
                    "bedrock-runtime",
                    region_name=region,
                    config=Config(**config),
                    aws_access_key_id="AKIDEXAMPLE",
                    aws_secret_access_key="secret",
                )
            except BotoCoreError:
                continue
            resolved.append(client.meta.endpoint_url.split("://", 1)[1])
    assert len(resolved) >= len(BEDROCK_REGIONS) * len(BEDROCK_CONFIGS) - 4, resolved
    for host in resolved:
        route = RouteTable.build([], None).for_host(host, 443)
        assert route is not None and route.provider == "aws.bedrock", host


def test_regular_mode_leaves_other_hosts_and_prefers_a_named_route() -> None:
    table = RouteTable.build(["br=https://bedrock-runtime.us-east-1.amazonaws.com"], None)
    assert table.for_host("bedrock-runtime.us-east-1.amazonaws.com", 443).name == "br"  # type: ignore[union-attr]
    assert table.for_host("bedrock.us-east-1.amazonaws.com", 443) is None  # the control plane
    assert table.for_host("s3.amazonaws.com", 443) is None
    assert table.for_host("evil.com.openai.azure.com.example", 443) is None


@pytest.mark.parametrize(
    ("spec", "api", "shape"),
    [
        ("b=https://bedrock-runtime.us-east-1.amazonaws.com", CONVERSE, "bedrock"),
        ("b=https://bedrock-runtime.us-east-1.amazonaws.com", MESSAGES, "bedrock"),
        ("b=https://bedrock-runtime.us-east-1.amazonaws.com", None, "bedrock"),
        ("b=https://bedrock-runtime.us-east-1.amazonaws.com", CHAT, "openai"),
        ("v=https://us-east5-aiplatform.googleapis.com", MESSAGES, "anthropic"),
        ("a=https://r.openai.azure.com", None, "openai"),
        ("x=http://127.0.0.1:9,provider=anthropic", None, "anthropic"),
        ("anthropic-like=http://127.0.0.1:9", None, "both"),  # no guessing from a name
        ("s=http://127.0.0.1:9", CONVERSE, "bedrock"),
    ],
)
def test_error_shapes_follow_the_wire_and_the_routes_provider(
    spec: str, api: str | None, shape: str
) -> None:
    assert apis.error_shape_for(api, parse_route_spec(spec)).name == shape


def test_a_bedrock_refusal_is_what_boto3_reads_as_a_client_error() -> None:
    from botocore.parsers import RestJSONParser

    status = RULES["unsupported_body"][0]
    body = bedrock_converse.ERROR_SHAPE.body(
        "modeltap refused", status=status, code="modeltap_rejected"
    )
    # (botocore reads headers without regard to case.)
    headers = {k.lower(): v for k, v in bedrock_converse.ERROR_SHAPE.headers(status).items()}
    parsed = RestJSONParser().parse({"status_code": status, "headers": headers, "body": body}, None)
    assert parsed["Error"]["Code"] == "ValidationException"
    assert parsed["Error"]["Message"] == "modeltap refused"
    assert (
        bedrock_converse.ERROR_SHAPE.headers(503)["x-amzn-ErrorType"]
        == "ServiceUnavailableException"
    )
    assert openai_chat.ERROR_SHAPE.headers(400) == {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("anthropic.claude-3-5-haiku-20241022-v1:0", "anthropic"),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "anthropic"),
        ("global.anthropic.claude-sonnet-4-5-20250929-v1:0", "anthropic"),
        ("xx.anthropic.claude-new-v1:0", "anthropic"),  # a geography not listed yet
        ("arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-v2:1", "anthropic"),
        (
            "arn:aws-us-gov:bedrock:us-gov-west-1:1:inference-profile/us-gov.anthropic.c",
            "anthropic",
        ),
        ("amazon.nova-pro-v1:0", "amazon"),
        ("us.amazon.nova-premier-v1:0", "amazon"),
        ("us.meta.llama3-2-90b-instruct-v1:0", "meta"),
        ("openai.gpt-oss-120b-1:0", "openai"),
        ("arn:aws:bedrock:us-east-1::foundation-model/mistral.mistral-large-2407-v1:0", "mistral"),
        ("arn:aws:bedrock:us-east-1:1:custom-model/amazon.titan-text-express-v1:0:8k/x", "amazon"),
        ("arn:aws:bedrock:us-east-1:1:prompt/PROMPT12345:1", "prompt"),
        ("arn:aws:bedrock:us-east-1:1:application-inference-profile/a1b2c3", None),
        ("arn:aws:bedrock:us-east-1:1:provisioned-model/p1", None),
        ("opaque-id", None),
    ],
)
def test_bedrock_model_family(model: str, family: str | None) -> None:
    assert cloud_paths.bedrock_model_family(model) == family


def test_converse_reads_native_tools_and_refuses_native_content() -> None:
    messages = [{"role": "user", "content": [{"text": "x"}]}]
    endpoint = apis.match_endpoint("/model/m/converse")
    extra = {
        "tools": [
            {"type": "computer_20250124", "name": "computer"},
            {"name": "a", "input_schema": {}},
            {"type": "function", "function": {"name": "b"}},
        ]
    }
    body = {"messages": messages, "additionalModelRequestFields": extra}
    facts = bedrock_converse.audit_request(body, endpoint)
    assert facts.tool_names == ("a", "b")
    assert [(t.type, t.name) for t in facts.hosted_tools] == [("computer_20250124", "computer")]
    for key in ("system", "messages", "prompt", "inputText", "toolConfig"):
        refused = {"messages": messages, "additionalModelRequestFields": {key: "x"}}
        with pytest.raises(Rejected) as caught:
            bedrock_converse.audit_request(refused, endpoint)
        assert (caught.value.rule, caught.value.detail) == (
            "unsupported_body",
            f"additionalModelRequestFields.{key}",
        )
    with pytest.raises(Rejected) as caught:
        tools = {"tools": [{"type": "function", "function": {}}]}
        bedrock_converse.audit_request(
            {"messages": messages, "additionalModelRequestFields": tools}, endpoint
        )
    assert caught.value.rule == "tool_without_name"
