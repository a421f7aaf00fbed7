"""The clouds end to end, with their real clients against the local stub.

- Azure OpenAI with ``openai``'s ``AzureOpenAI`` (and the plain client on the
  v1 API); its ``api-key`` never reaches a file, a span, a log or a recording.
- Bedrock with ``boto3`` (converse, converse_stream, invoke_model,
  invoke_model_with_response_stream): in regular mode through mitmproxy's CA
  with SigV4, where the stub checks every signature with botocore, so the
  test proves the request arrived byte-for-byte; in reverse mode with a Bedrock
  API key (bearer token, which boto3 sends only over HTTPS: the proxy's port
  answers TLS); and SigV4 in reverse mode refused by name.
- ``anthropic``'s ``AnthropicBedrock`` (bearer in reverse mode, SigV4 in
  regular mode) and ``AnthropicVertex``.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import boto3
import httpx2 as httpx
import openai
import orjson
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from modeltap.app.proxy import Proxy, ProxyConfig, replay_proxy
from tests.conftest import Running, intercepting_proxy, proxy_ca, read_jsonl
from tests.otlp_receiver import HttpReceiver
from tests.upstream import (
    AWS_KEY_ID,
    AWS_SECRET,
    Upstream,
    converse_tool_stream,
    isolate_aws,
    self_signed_tls,
)

pytest_plugins = ["tests.otlp_fixtures"]

SONNET = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
SONNET_PATH = "us.anthropic.claude-sonnet-4-5-20250929-v1%3A0"  # as boto3 sends it
PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00"
    b"\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\xdacd`\xf8_\x0f\x00\x02\x87\x01\x80\xeb"
    b"G\xba\x92\x00\x00\x00\x00IEND\xaeB`\x82"
)
CONVERSE_MESSAGES: Any = [
    {
        "role": "user",
        "content": [
            {"text": "Which platform does the 07:10 to Tromsø leave from?"},
            {"image": {"format": "png", "source": {"bytes": PNG}}},
        ],
    }
]
CONVERSE_SYSTEM: Any = [{"text": "You read station boards."}]
ANTHROPIC_BODY = {
    "anthropic_version": "bedrock-2023-05-31",
    "max_tokens": 64,
    "system": "You read station boards.",
    "messages": [{"role": "user", "content": "Platform for the 07:10?"}],
}


@pytest.fixture(autouse=True)
def no_real_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate_aws(monkeypatch, tmp_path)


def bedrock_client(endpoint: str, **config: Any) -> Any:
    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=endpoint,
        config=Config(retries={"max_attempts": 1}, **config.pop("config", {})),
        **config,
    )


def drive_boto3(client: Any) -> list[dict[str, Any]]:
    """The four calls, each as an SDK user makes it; returns what boto3 handed back."""
    out = [
        client.converse(modelId=SONNET, messages=CONVERSE_MESSAGES, system=CONVERSE_SYSTEM),
    ]
    stream = client.converse_stream(
        modelId=SONNET, messages=CONVERSE_MESSAGES, system=CONVERSE_SYSTEM
    )
    out.append({"events": list(stream["stream"])})
    # No contentType: boto3 then sends no Content-Type header at all.
    answer = client.invoke_model(modelId=SONNET, body=orjson.dumps(ANTHROPIC_BODY))
    out.append(orjson.loads(answer["body"].read()))
    stream = client.invoke_model_with_response_stream(
        modelId=SONNET, body=orjson.dumps(ANTHROPIC_BODY), contentType="application/json"
    )
    out.append({"events": list(stream["body"])})
    return out


def check_boto3_capture(answers: list[dict[str, Any]], audit: list[Any], events: list[Any]) -> None:
    """What the four boto3 calls must have given and left in the files."""
    assert answers[0]["output"]["message"]["content"][0]["text"] == "Hello from the stub."
    metadata = next(e["metadata"] for e in answers[1]["events"] if "metadata" in e)
    assert metadata["usage"]["outputTokens"] == 2
    assert answers[2]["content"][0]["text"] == "Hello from the stub."
    assert len(answers[3]["events"]) == 6  # six chunks, ping dropped as Bedrock does
    assert [(r["api"], r["stream"]) for r in audit] == [
        ("bedrock.converse", False),
        ("bedrock.converse", True),
        ("anthropic.messages", False),
        ("anthropic.messages", True),
    ]
    for record in audit:
        assert (record["model"], record["model_source"]) == (SONNET, "path")
        assert record["provider"] == "aws.bedrock"
        assert record["instructions_parts"] == audit[0]["instructions_parts"]
    assert [r["image_count"] for r in audit] == [1, 1, 0, 0]
    assert [r["path"] for r in audit] == [
        f"/model/{SONNET_PATH}/converse",
        f"/model/{SONNET_PATH}/converse-stream",
        f"/model/{SONNET_PATH}/invoke",
        f"/model/{SONNET_PATH}/invoke-with-response-stream",
    ]
    responses = [e for e in events if e["kind"] == "response"]
    assert [e["seq"] for e in responses] == [r["seq"] for r in audit]
    assert all(e["evidence_complete"] for e in responses), [e["capture_errors"] for e in responses]
    assert [e["usage"]["output_tokens"] for e in responses] == [7, 2, 7, 12]
    assert [e["finish_reasons"] for e in responses] == [["end_turn"]] * 4
    # Converse bodies name no id: the request id header does. Invoke answers name theirs.
    request_id = "4c1e2b3a-5d6f-4a7b-8c9d-0e1f2a3b4c5d"
    assert [e["response_id"] for e in responses] == [
        request_id,
        request_id,
        "msg_stub1",
        "msg_stub2",
    ]
    assert [e["invocation_metrics"] for e in responses] == [
        {
            "input_tokens": None,
            "output_tokens": None,
            "latency_ms": 321,
            "first_byte_latency_ms": None,
        },
        {
            "input_tokens": None,
            "output_tokens": None,
            "latency_ms": 280,
            "first_byte_latency_ms": None,
        },
        {"input_tokens": 25, "output_tokens": 7, "latency_ms": 412, "first_byte_latency_ms": None},
        {"input_tokens": 25, "output_tokens": 12, "latency_ms": 640, "first_byte_latency_ms": 210},
    ]
    # Priced as Bedrock prices the model (an estimate from the price table).
    assert all(e["cost"]["priced_as"].startswith("aws/") for e in responses)
    assert all(e["cost"]["estimate_usd"] is not None for e in responses), [
        e["cost"] for e in responses
    ]


# --------------------------------------------------------------------------
# Regular mode: SigV4 requests go out byte-for-byte


@pytest.fixture
def tls_stub() -> Iterator[Upstream]:
    with Upstream(tls=self_signed_tls()) as stub:
        yield stub


def forward_proxy(tmp_path: Path, stub: Upstream, **options: Any) -> Proxy:
    # The stub stands in for a Bedrock region: audited as one.
    return intercepting_proxy(tmp_path, [f"bedrock={stub.url},provider=aws.bedrock"], **options)


def test_boto3_sigv4_in_regular_mode_arrives_with_its_signature_intact(
    tmp_path: Path, tls_stub: Upstream
) -> None:
    with forward_proxy(tmp_path, tls_stub) as proxy:
        client = bedrock_client(
            tls_stub.url,
            verify=str(proxy_ca(tmp_path)),
            config={"proxies": {"https": proxy.url}},
        )
        sent: list[tuple[bytes, dict[str, str]]] = []

        def name_the_session(request: Any, **_: Any) -> None:
            # Added before signing, so the signature covers it: it must stay on.
            request.headers["x-modeltap-session"] = "bedrock-eval-1"

        def keep(request: Any, **_: Any) -> None:
            body = request.body if isinstance(request.body, bytes) else request.body.read()
            headers = {
                k.lower(): v.decode() if isinstance(v, bytes) else v
                for k, v in request.headers.items()
            }
            sent.append((body, headers))

        client.meta.events.register("before-sign.bedrock-runtime.*", name_the_session)
        client.meta.events.register("before-send.bedrock-runtime.*", keep)
        answers = drive_boto3(client)
    out = tmp_path / "out"
    audit, events = read_jsonl(out / "audit.jsonl"), read_jsonl(out / "events.jsonl")
    check_boto3_capture(answers, audit, events)
    assert {r["session_id"] for r in audit} == {"bedrock-eval-1"}
    assert {r["route"] for r in audit} == {"bedrock"}

    # The proof: botocore recomputed each signature from what the stub received.
    received = tls_stub.received
    assert [r.sigv4 for r in received] == [True] * 4
    assert "content-type" not in {k.lower() for k in received[2].headers}  # invoke, no contentType
    for (body, headers), got in zip(sent, received, strict=True):
        assert got.raw == body  # the body byte for byte
        arrived = {k.lower(): v for k, v in got.headers.items()}
        for name, value in headers.items():
            assert arrived[name] == value, name  # every header, the session header too
        assert "x-modeltap-session" in got.headers["Authorization"]  # (it is signed)


def test_the_stubs_signature_check_can_fail() -> None:
    """The check above proves something only if a changed request fails it."""
    with Upstream() as stub:
        request = AWSRequest(
            method="POST",
            url=f"{stub.url}/model/{SONNET_PATH}/converse",
            data=b'{"messages":[]}',
            headers={"Content-Type": "application/json", "x-modeltap-session": "s"},
        )
        SigV4Auth(Credentials(AWS_KEY_ID, AWS_SECRET), "bedrock", "us-east-1").add_auth(request)
        headers = dict(request.headers.items())
        good = httpx.post(request.url, content=request.body, headers=headers)
        without = {k: v for k, v in headers.items() if k.lower() != "x-modeltap-session"}
        removed = httpx.post(request.url, content=request.body, headers=without)
        rewritten = httpx.post(request.url, content=b'{"messages": []}', headers=headers)
    assert good.status_code == 200
    assert (removed.status_code, rewritten.status_code) == (403, 403)
    assert [r.sigv4 for r in stub.received] == [True, False, False]


def test_anthropic_bedrock_sigv4_in_regular_mode(tmp_path: Path, tls_stub: Upstream) -> None:
    """AnthropicBedrock signs every header it sends, its retry count included."""
    with forward_proxy(tmp_path, tls_stub) as proxy:
        ca = ssl.create_default_context(cafile=str(proxy_ca(tmp_path)))
        client = anthropic.AnthropicBedrock(
            aws_access_key=AWS_KEY_ID,
            aws_secret_key=AWS_SECRET,
            aws_region="us-east-1",
            base_url=tls_stub.url,
            max_retries=0,
            http_client=httpx.Client(proxy=proxy.url, verify=ca),
        )
        message = client.messages.create(
            model=SONNET, max_tokens=64, messages=[{"role": "user", "content": "Platform?"}]
        )
        with client.messages.stream(
            model=SONNET, max_tokens=64, messages=[{"role": "user", "content": "Platform?"}]
        ) as stream:
            streamed = stream.get_final_message()
    assert message.content[0].text == "Hello from the stub."  # type: ignore[union-attr]
    assert streamed.stop_reason == "end_turn"
    assert [r.sigv4 for r in tls_stub.received] == [True, True]
    assert "x-stainless-retry-count" in tls_stub.received[0].headers["Authorization"]
    audit = read_jsonl(tmp_path / "out" / "audit.jsonl")
    assert [(r["api"], r["model"], r["stream"]) for r in audit] == [
        ("anthropic.messages", SONNET, False),
        ("anthropic.messages", SONNET, True),
    ]
    assert [r["path"] for r in audit] == [
        f"/model/{SONNET}/invoke",
        f"/model/{SONNET}/invoke-with-response-stream",
    ]


def test_a_signed_request_is_never_rewritten_for_image_detail(
    tmp_path: Path, tls_stub: Upstream
) -> None:
    """--image-detail would change the body the signature covers: refused by name.
    (Bedrock's OpenAI-compatible chat endpoint takes SigV4 and image details.)"""
    body = orjson.dumps(
        {
            "model": "openai.gpt-oss-120b-1:0",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is on the board?"},
                        {
                            "type": "image_url",
                            "image_url": {"url": "https://x/b.png", "detail": "high"},
                        },
                    ],
                }
            ],
        }
    )
    request = AWSRequest(
        method="POST",
        url=f"{tls_stub.url}/openai/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    SigV4Auth(Credentials(AWS_KEY_ID, AWS_SECRET), "bedrock", "us-east-1").add_auth(request)
    with forward_proxy(tmp_path, tls_stub, image_detail="low") as proxy:
        ca = ssl.create_default_context(cafile=str(proxy_ca(tmp_path)))
        with httpx.Client(proxy=proxy.url, verify=ca) as client:
            refused = client.post(request.url, content=body, headers=dict(request.headers.items()))
            # A Bedrock body has no image detail to rewrite: it goes out signed and whole.
            converse = boto3_client_through(proxy, tmp_path, tls_stub)
            converse.converse(modelId=SONNET, messages=CONVERSE_MESSAGES)
    assert refused.status_code == 400
    # (Bedrock's OpenAI-compatible endpoint answers in OpenAI's error shape.)
    assert "signed_request_rewrite" in refused.json()["error"]["message"]
    assert [r.path for r in tls_stub.received] == [f"/model/{SONNET_PATH}/converse"]
    assert tls_stub.received[0].sigv4 is True
    (rejected,) = [
        e for e in read_jsonl(tmp_path / "out" / "events.jsonl") if e["kind"] == "rejected"
    ]
    assert rejected["rule"] == "signed_request_rewrite"


def boto3_client_through(proxy: Proxy, tmp_path: Path, stub: Upstream) -> Any:
    return bedrock_client(
        stub.url,
        verify=str(proxy_ca(tmp_path)),
        config={"proxies": {"https": proxy.url}},
    )


# --------------------------------------------------------------------------
# Reverse mode: bearer tokens, and SigV4 refused by name


def reverse_proxy(
    start_proxy: Callable[..., Running], upstream: Upstream, **options: Any
) -> Running:
    return start_proxy(
        routes=[
            f"bedrock={upstream.url},provider=aws.bedrock",
            f"vertex={upstream.url},provider=gcp.vertex_ai",
            f"azure={upstream.url},provider=azure.ai.openai",
        ],
        **options,
    )


@pytest.fixture
def bedrock_over_tls(
    start_proxy: Callable[..., Running],
    upstream: Upstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., tuple[Running, Any]]:
    """Start a reverse proxy (any further options); return it and a boto3 client
    with a Bedrock API key on its Bedrock route.

    boto3 sends a bearer token only over HTTPS: the proxy's port answers TLS
    too, with the CA of its ``confdir``.
    """

    def start(**options: Any) -> tuple[Running, Any]:
        extra = {"confdir": str(tmp_path / "mitm")}
        running = reverse_proxy(start_proxy, upstream, extra=extra, **options)
        monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "ABSKbedrock-api-key-example")
        endpoint = "https://" + running.base("bedrock").split("://", 1)[1]
        verify = str(tmp_path / "mitm" / "mitmproxy-ca-cert.pem")
        return running, bedrock_client(endpoint, verify=verify)

    return start


def anthropic_vertex(running: Running) -> anthropic.AnthropicVertex:
    """The Anthropic SDK's Vertex client on the proxy's Vertex route."""
    return anthropic.AnthropicVertex(
        region="us-east5",
        project_id="fleet-project",
        access_token="ya29.vertex-token-example",
        base_url=running.base("vertex") + "/v1",
        max_retries=0,
    )


def test_boto3_with_a_bedrock_api_key_over_tls_in_reverse_mode(
    bedrock_over_tls: Callable[..., tuple[Running, Any]],
    upstream: Upstream,
) -> None:
    running, client = bedrock_over_tls()
    answers = drive_boto3(client)
    check_boto3_capture(answers, running.audit(), running.events())
    assert {r.headers["Authorization"] for r in upstream.received} == {
        "Bearer ABSKbedrock-api-key-example"
    }
    assert {r["route"] for r in running.audit()} == {"bedrock"}


def test_sigv4_in_reverse_mode_is_refused_by_name(
    start_proxy: Callable[..., Running], upstream: Upstream
) -> None:
    running = reverse_proxy(start_proxy, upstream)
    client = bedrock_client(running.base("bedrock"))
    with pytest.raises(ClientError) as caught:
        client.converse(modelId=SONNET, messages=CONVERSE_MESSAGES)
    error = caught.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert "signed_request" in error["Message"] and "regular mode" in error["Message"]
    assert "AWS_BEARER_TOKEN_BEDROCK" in error["Message"]
    claude = anthropic.AnthropicBedrock(
        aws_access_key=AWS_KEY_ID,
        aws_secret_key=AWS_SECRET,
        aws_region="us-east-1",
        base_url=running.base("bedrock"),
        max_retries=0,
    )
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(
            model=SONNET, max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
    assert upstream.received == []
    assert running.audit() == []
    rejected = running.events("rejected")
    assert [(e["rule"], e["api"]) for e in rejected] == [
        ("signed_request", "bedrock.converse"),
        ("signed_request", "anthropic.messages"),
    ]


def test_anthropic_bedrock_with_an_api_key_in_reverse_mode(
    start_proxy: Callable[..., Running], upstream: Upstream
) -> None:
    running = reverse_proxy(start_proxy, upstream)
    arn = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc123xyz"
    client = anthropic.AnthropicBedrock(
        api_key="ABSKbedrock-api-key-example",
        aws_region="us-east-1",
        base_url=running.base("bedrock"),
        max_retries=0,
    )
    client.messages.create(model=arn, max_tokens=16, messages=[{"role": "user", "content": "Hi"}])
    with client.messages.stream(
        model=SONNET,
        max_tokens=16,
        system="You read station boards.",
        messages=[{"role": "user", "content": "Hi"}],
    ) as stream:
        assert stream.get_final_message().usage.output_tokens == 12
    one, two = running.audit()
    assert (one["model"], one["stream"], one["provider"]) == (arn, False, "aws.bedrock")
    assert (
        one["path"] == "/model/arn:aws:bedrock:us-east-1:123456789012:application-inference-profile"
        "%2Fabc123xyz/invoke"
    )
    assert (two["model"], two["stream"]) == (SONNET, True)
    first, second = running.events("response")
    assert first["invocation_metrics"]["latency_ms"] == 412  # InvokeModel's headers
    assert second["invocation_metrics"] == {
        "input_tokens": 25,
        "output_tokens": 12,
        "latency_ms": 640,
        "first_byte_latency_ms": 210,
    }
    assert second["evidence_complete"] and second["ttft_ms"] is not None


def test_bedrock_paths_that_run_no_model_turn_pass_unaudited(
    start_proxy: Callable[..., Running], upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude Code's control-plane calls on the runtime's base URL, and token counting."""
    running = reverse_proxy(start_proxy, upstream)
    base = running.base("bedrock")
    bearer = {"Authorization": "Bearer ABSKbedrock-api-key-example"}
    listed = httpx.get(f"{base}/inference-profiles?type=SYSTEM_DEFINED", headers=bearer)
    counted = httpx.post(
        f"{base}/model/{SONNET_PATH}/count-tokens",
        headers=bearer,
        content=orjson.dumps({"input": {"converse": {"messages": CONVERSE_MESSAGES[:0]}}}),
    )
    assert (listed.status_code, counted.status_code) == (200, 200)
    assert running.audit() == []
    assert [(e["method"], e["path"]) for e in running.events("unaudited")] == [
        ("GET", "/inference-profiles?type=REDACTED"),
        ("POST", f"/model/{SONNET_PATH}/count-tokens"),
    ]


def test_other_families_native_invoke_bodies_are_refused(
    bedrock_over_tls: Callable[..., tuple[Running, Any]],
    upstream: Upstream,
) -> None:
    running, client = bedrock_over_tls()
    titan = {
        "inputText": "Write a haiku about fjords.",
        "textGenerationConfig": {"maxTokenCount": 50},
    }
    with pytest.raises(ClientError) as caught:
        client.invoke_model(modelId="amazon.titan-text-express-v1", body=orjson.dumps(titan))
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert "unsupported_body" in caught.value.response["Error"]["Message"]
    assert "haiku" not in caught.value.response["Error"]["Message"]
    assert upstream.received == [] and running.audit() == []


def test_bedrock_tool_calls_pair_with_their_results_in_the_report(
    bedrock_over_tls: Callable[..., tuple[Running, Any]],
    upstream: Upstream,
) -> None:
    from modeltap.evidence.capture import Capture

    running, client = bedrock_over_tls()
    tools = {
        "tools": [{"toolSpec": {"name": "lookup", "inputSchema": {"json": {"type": "object"}}}}]
    }
    upstream.replies.append(converse_tool_stream())
    first = client.converse_stream(modelId=SONNET, messages=CONVERSE_MESSAGES, toolConfig=tools)
    events = list(first["stream"])
    use = next(
        e["contentBlockStart"]["start"]["toolUse"] for e in events if "contentBlockStart" in e
    )
    history = [
        *CONVERSE_MESSAGES,
        {"role": "assistant", "content": [{"toolUse": {**use, "input": {"q": "weather", "n": 3}}}]},
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": use["toolUseId"], "content": [{"text": "Platform 2"}]}}
            ],
        },
    ]
    client.converse(modelId=SONNET, messages=history, toolConfig=tools)
    running.proxy.stop()
    first_response = running.events("response")[0]
    assert first_response["tool_calls"] == [
        {
            "call_id": "tooluse_lookup1",
            "name": "lookup",
            "arguments": '{"q": "weather", "n": 3}',
            "namespace": None,
        }
    ]
    capture = Capture.load(running.out)
    assert capture.evidence_complete, capture.capture_errors
    assert capture.tool_was_called("lookup") and capture.tool_call_count("lookup") == 1
    (session,) = capture.sessions.values()
    (invocation,) = session.turns[0].tool_invocations
    assert (invocation.name, invocation.result_bytes) == ("lookup", len(b'[{"text":"Platform 2"}]'))


# --------------------------------------------------------------------------
# Vertex and Azure


def test_anthropic_vertex(start_proxy: Callable[..., Running], upstream: Upstream) -> None:
    running = reverse_proxy(start_proxy, upstream)
    client = anthropic_vertex(running)
    model = "claude-sonnet-4-5@20250929"
    client.messages.create(model=model, max_tokens=16, messages=[{"role": "user", "content": "Hi"}])
    with client.messages.stream(
        model=model, max_tokens=16, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        assert stream.get_final_message().stop_reason == "end_turn"
    counted = client.messages.count_tokens(
        model=model, messages=[{"role": "user", "content": "Hi"}]
    )
    assert counted.input_tokens == 12
    audit = running.audit()
    assert [(r["model"], r["stream"], r["provider"], r["model_source"]) for r in audit] == [
        (model, False, "gcp.vertex_ai", "path"),
        (model, True, "gcp.vertex_ai", "path"),
    ]
    prefix = "/v1/projects/fleet-project/locations/us-east5/publishers/anthropic/models"
    assert [r["path"] for r in audit] == [
        f"{prefix}/{model}:rawPredict",
        f"{prefix}/{model}:streamRawPredict",
    ]
    assert [e["path"] for e in running.events("unaudited")] == [f"{prefix}/count-tokens:rawPredict"]
    assert len(running.events("response")) == 2  # so the check below reads both
    assert all(e["evidence_complete"] for e in running.events("response"))


AZURE_KEY = "azure-api-key-5ecret-0f9e8d7c6b5a"


def test_azure_openai_deployments_responses_and_the_v1_api(
    start_proxy: Callable[..., Running],
    upstream: Upstream,
    otlp_http_receiver: HttpReceiver,
    tmp_path: Path,
) -> None:
    running = reverse_proxy(
        start_proxy,
        upstream,
        otlp=otlp_http_receiver.endpoint,
        capture_content=True,
        record=str(tmp_path / "recording"),
    )
    azure = openai.AzureOpenAI(
        azure_endpoint=running.base("azure"),
        api_key=AZURE_KEY,
        api_version="2024-10-21",
        azure_deployment="dep-gpt4o",
        max_retries=0,
    )
    stream = azure.chat.completions.create(
        model="gpt-4o",  # still sent; the deployment in the path decides
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "Hello there"
    azure.responses.create(model="dep-gpt4o", input="Hi", instructions="Be brief.")
    v1 = openai.OpenAI(
        base_url=running.base("azure") + "/openai/v1",
        api_key=AZURE_KEY,
        default_headers={"api-key": AZURE_KEY},
        max_retries=0,
    )
    v1.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "Hi"}])
    # A key sent in the query (some gateways take one) is a secret too.
    httpx.post(
        running.base("azure")
        + "/openai/deployments/dep-gpt4o/chat/completions"
        + f"?api-version=2024-10-21&api-key={AZURE_KEY}",
        json={"messages": [{"role": "user", "content": "Hi"}]},
    )
    running.proxy.stop()

    audit = running.audit()
    assert [(r["api"], r["model"], r["model_source"]) for r in audit] == [
        ("openai.chat_completions", "dep-gpt4o", "path"),
        ("openai.responses", "dep-gpt4o", "body"),
        ("openai.chat_completions", "gpt-4.1-mini", "body"),
        ("openai.chat_completions", "dep-gpt4o", "path"),
    ]
    assert [r["path"] for r in audit] == [
        "/openai/deployments/dep-gpt4o/chat/completions?api-version=2024-10-21",
        "/openai/responses?api-version=2024-10-21",
        "/openai/v1/chat/completions",
        "/openai/deployments/dep-gpt4o/chat/completions?api-version=2024-10-21&api-key=REDACTED",
    ]
    assert {r["provider"] for r in audit} == {"azure.ai.openai"}
    assert upstream.received[0].headers["api-key"] == AZURE_KEY  # forwarded, never written
    assert upstream.received[0].json()["model"] == "gpt-4o"

    spans = otlp_http_receiver.wait_for(8)
    providers = {
        s.attributes.get("gen_ai.provider.name") for s in spans if "modeltap.seq" in s.attributes
    }
    assert providers == {"azure.ai.openai"}
    # The key is nowhere: not in the files, the recording, the spans or the log records.
    written = [
        p for p in [*running.out.rglob("*"), *(tmp_path / "recording").rglob("*")] if p.is_file()
    ]
    assert any(p.name == "recording.jsonl" for p in written)
    for path in written:
        assert AZURE_KEY.encode() not in path.read_bytes(), path
    assert AZURE_KEY not in repr([s.attributes for s in spans])
    assert len(otlp_http_receiver.logs) >= 4  # so the check below reads some
    assert AZURE_KEY not in repr([(log.body, log.attributes) for log in otlp_http_receiver.logs])


def test_bedrock_spans_name_the_provider(
    bedrock_over_tls: Callable[..., tuple[Running, Any]],
    otlp_http_receiver: HttpReceiver,
) -> None:
    running, client = bedrock_over_tls(otlp=otlp_http_receiver.endpoint)
    client.converse(modelId=SONNET, messages=CONVERSE_MESSAGES, system=CONVERSE_SYSTEM)
    running.proxy.stop()
    (span,) = [s for s in otlp_http_receiver.wait_for(3) if "modeltap.seq" in s.attributes]
    assert span.name == f"chat {SONNET}"
    attributes = span.attributes
    assert attributes["gen_ai.provider.name"] == "aws.bedrock"
    assert attributes["gen_ai.request.model"] == SONNET
    assert attributes["gen_ai.response.id"] == "4c1e2b3a-5d6f-4a7b-8c9d-0e1f2a3b4c5d"
    # All input tokens, the cache read included (Converse leaves it out of inputTokens).
    assert attributes["gen_ai.usage.input_tokens"] == 35
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 10
    assert list(attributes["gen_ai.response.finish_reasons"]) == ["end_turn"]


def test_vertex_and_bedrock_invoke_spans_follow_the_conventions(
    start_proxy: Callable[..., Running],
    upstream: Upstream,
    otlp_http_receiver: HttpReceiver,
) -> None:
    """The Anthropic wire on two clouds: the span names the cloud and the path's
    model, and counts the input the convention's way (cache reads included)."""
    running = reverse_proxy(start_proxy, upstream, otlp=otlp_http_receiver.endpoint)
    vertex = anthropic_vertex(running)
    bedrock = anthropic.AnthropicBedrock(
        api_key="ABSKbedrock-api-key-example",
        aws_region="us-east-1",
        base_url=running.base("bedrock"),
        max_retries=0,
    )
    for client, model in ((vertex, "claude-sonnet-4-5@20250929"), (bedrock, SONNET)):
        with client.messages.stream(
            model=model, max_tokens=16, messages=[{"role": "user", "content": "Hi"}]
        ) as stream:
            stream.get_final_message()
    running.proxy.stop()
    spans = [s for s in otlp_http_receiver.wait_for(6) if "modeltap.seq" in s.attributes]
    assert [s.name for s in spans] == ["chat claude-sonnet-4-5@20250929", f"chat {SONNET}"]
    for span, provider in zip(spans, ("gcp.vertex_ai", "aws.bedrock"), strict=True):
        attributes = span.attributes
        assert attributes["gen_ai.provider.name"] == provider
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.request.stream"] is True
        assert attributes["gen_ai.response.id"] == "msg_stub2"
        assert attributes["gen_ai.usage.input_tokens"] == 35  # 25 + 10 read from the cache
        assert attributes["gen_ai.usage.output_tokens"] == 12
        assert attributes["gen_ai.response.time_to_first_chunk"] > 0
        assert attributes["server.address"] == "127.0.0.1"


# --------------------------------------------------------------------------
# Record and replay


def test_a_bedrock_recording_replays_to_boto3_signed_or_not(
    bedrock_over_tls: Callable[..., tuple[Running, Any]],
    upstream: Upstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Recorded with an API key; replayed to the same calls signed with SigV4: the
    replay's upstream is the recording, which checks no signature."""
    running, client = bedrock_over_tls(record=str(tmp_path / "rec"))
    recorded = drive_boto3(client)
    running.proxy.stop()
    upstream.stop()

    monkeypatch.delenv("AWS_BEARER_TOKEN_BEDROCK")
    proxy, replay = replay_proxy(
        tmp_path / "rec",
        ProxyConfig(listen_port=0, out=str(tmp_path / "replayed"), quiet=True),
        fast=True,
    )
    with proxy:
        replayed = drive_boto3(bedrock_client(proxy.url + "/bedrock"))
    assert replay.problems == []

    def comparable(answers: list[dict[str, Any]]) -> list[Any]:
        # boto3 adds per-call metadata (its own request id, retry counts): drop it.
        return [{k: v for k, v in a.items() if k != "ResponseMetadata"} for a in answers]

    assert comparable(replayed) == comparable(recorded)
    audit = read_jsonl(tmp_path / "replayed" / "audit.jsonl")
    assert [r["api"] for r in audit] == [
        "bedrock.converse",
        "bedrock.converse",
        "anthropic.messages",
        "anthropic.messages",
    ]
    assert {r["provider"] for r in audit} == {"aws.bedrock"}  # the recorded route's
    # The replayed run observed what the recorded one did, Bedrock's headers included.
    check_boto3_capture(replayed, audit, read_jsonl(tmp_path / "replayed" / "events.jsonl"))
