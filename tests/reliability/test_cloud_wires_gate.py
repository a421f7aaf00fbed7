"""The request gate on the clouds' wires, tried as an attacker would (SPEC 2).

Issue 13 closed the ways around the audit on the OpenAI and Anthropic wires;
this applies each class to the wires that came later: Gemini (Developer API,
Vertex AI, Code Assist), Azure OpenAI, Bedrock (Converse and InvokeModel) and
Vertex's Anthropic models. The attacker wants a model call forwarded without
a true audit line: an endpoint that runs a model modeltap does not audit, a
path two servers read two ways, a body naming another model than the path, a
body for another model family, content hidden where the audit does not read,
or a regular-mode request that names its provider only in its ``Host``
header or TLS server name.

Driven through the real proxy on real sockets, with the real SDKs where an
SDK sends the request (google-genai, boto3, ``openai``'s ``AzureOpenAI``,
``anthropic``'s ``AnthropicVertex``); raw sockets where only a hand-made
request does. Each test checks what the upstream received (nothing, for a
refusal) and what was written. Figures go to ``$MODELTAP_RELIABILITY_FIGURES``.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import openai
import orjson
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from google.genai._interactions_errors import BadRequestError as InteractionsBadRequest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from modeltap.app.proxy import Proxy
from tests.conftest import Running, intercepting_proxy, proxy_ca, read_jsonl
from tests.reliability.faults import figure, read_until_closed
from tests.reliability.test_request_gate import send
from tests.upstream import Upstream, isolate_aws, self_signed_tls

KEY = "AIza-PLANTED-gemini-key-0123456789"
MODEL = "gemini-2.5-flash"
SONNET = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
CONTENTS = [{"role": "user", "parts": [{"text": "Platform for the 07:10?"}]}]
GEMINI = {"contents": CONTENTS}
CONVERSE = {"messages": [{"role": "user", "content": [{"text": "Platform?"}]}]}
MESSAGES = {
    "anthropic_version": "bedrock-2023-05-31",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "Platform?"}],
}
VERTEX_MESSAGES = {**MESSAGES, "anthropic_version": "vertex-2023-10-16"}
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Platform?"}]}
ROUTES = ("gemini", "bedrock", "vertex", "azure")
PROVIDERS = {
    "gemini": "gcp.gemini",
    "bedrock": "aws.bedrock",
    "vertex": "gcp.vertex_ai",
    "azure": "azure.ai.openai",
}


@pytest.fixture(autouse=True)
def no_real_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As the clouds' tests, plus a planted Bedrock API key that must never be written."""
    isolate_aws(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "ABSK-PLANTED-bedrock-key")


@pytest.fixture
def clouds(start_proxy: Callable[..., Running], upstream: Upstream, tmp_path: Path) -> Running:
    """A proxy with a route per cloud, each on the stub, naming the cloud's provider."""
    routes = [f"{name}={upstream.url},provider={PROVIDERS[name]}" for name in ROUTES]
    return start_proxy(routes=routes, extra={"confdir": str(tmp_path / "mitmproxy")})


def rules(running: Running) -> list[str]:
    return [e["rule"] for e in running.events("rejected")]


def gemini_client(running: Running, route: str = "gemini", **options: Any) -> genai.Client:
    http = types.HttpOptions(base_url=running.base(route), retry_options=None, **options)
    return genai.Client(api_key=KEY, http_options=http)


def mitm_ca(tmp_path: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(proxy_ca(tmp_path)))


def bedrock_client(running: Running, tmp_path: Path, **config: Any) -> Any:
    """boto3 on the bedrock route with a Bedrock API key (bearer: reverse mode takes it).

    boto3 sends a bearer token only over HTTPS: the proxy's port answers TLS too.
    """
    endpoint = "https://" + running.base("bedrock").split("://", 1)[1]
    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=endpoint,
        verify=str(proxy_ca(tmp_path)),
        config=Config(retries={"max_attempts": 1}, **config),
    )


# --------------------------------------------------------------------------
# 1. Model endpoints modeltap cannot audit: refused by name, never passed


def test_gemini_batches_interactions_and_live_are_refused_not_passed(
    clouds: Running, tmp_path: Path
) -> None:
    """Before: each reached the upstream as ``unaudited`` and ran a model there."""
    client = gemini_client(clouds, async_client_args={"ssl": mitm_ca(tmp_path)})
    inline = [types.InlinedRequest(contents="Platform for the 07:10?")]
    with pytest.raises(genai_errors.ClientError) as batch:
        client.batches.create(model=MODEL, src=inline)
    with pytest.raises(InteractionsBadRequest) as interaction:
        client.interactions.create(model=MODEL, input="Platform for the 07:10?")

    async def live() -> None:
        async with client.aio.live.connect(model="gemini-live-2.5-flash") as session:
            await session.send_realtime_input(text="Platform?")

    with pytest.raises(InvalidStatus) as socket_refused:
        asyncio.run(live())
    assert batch.value.code == 400 and "unsupported_endpoint" in str(batch.value)
    assert "unsupported_endpoint" in str(interaction.value)
    assert socket_refused.value.response.status_code == 400
    # What still passes: token counting and embeddings run no generation turn.
    assert client.models.count_tokens(model=MODEL, contents="x").total_tokens == 12
    client.models.embed_content(model="gemini-embedding-001", contents="x")
    assert clouds.audit() == []
    assert [r.path.split("?")[0].rpartition("/")[2] for r in clouds.upstream.received] == [
        f"{MODEL}:countTokens",
        "gemini-embedding-001:batchEmbedContents",
    ]
    assert clouds.upstream.ws_handshakes == []
    assert rules(clouds) == [
        "unsupported_endpoint",
        "unsupported_endpoint",
        "ws_unsupported_endpoint",
    ]
    assert [e["path"] for e in clouds.events("rejected")][2].startswith(
        "/ws/google.ai.generativelanguage."
    )


def test_azure_legacy_completions_batches_and_realtime_are_refused(
    clouds: Running, upstream: Upstream
) -> None:
    azure = openai.AzureOpenAI(
        azure_endpoint=clouds.base("azure"),
        api_key="azure-PLANTED-key",
        api_version="2024-10-21",
        max_retries=0,
    )
    with pytest.raises(openai.BadRequestError) as legacy:
        azure.completions.create(model="gpt-35-turbo-instruct", prompt="Platform?")
    with pytest.raises(openai.BadRequestError) as batch:
        azure.batches.create(
            input_file_id="file-1", endpoint="/v1/chat/completions", completion_window="24h"
        )
    with pytest.raises(InvalidStatus) as realtime:
        url = clouds.base("azure").replace("http://", "ws://")
        connect(f"{url}/openai/realtime?api-version=2025-04-01-preview&deployment=rt")
    assert "unsupported_endpoint" in legacy.value.message
    assert "unsupported_endpoint" in batch.value.message
    assert realtime.value.response.status_code == 400
    # The deployment form's "On Your Data" path runs the deployment: audited as it.
    status, _ = send(
        clouds.proxy.port,
        "POST",
        "/azure/openai/deployments/gpt4o/extensions/chat/completions?api-version=2024-02-01",
        orjson.dumps(CHAT),
    )
    assert status == 200
    assert [(r["model"], r["model_source"]) for r in clouds.audit()] == [("gpt4o", "path")]
    assert len(upstream.received) == 1 and upstream.ws_handshakes == []
    assert rules(clouds) == [
        "unsupported_endpoint",
        "unsupported_endpoint",
        "ws_unsupported_endpoint",
    ]


#: Endpoints only a hand-made request reaches: ``(target, body, content type)``.
RAW_UNSUPPORTED = [
    # Vertex: other publishers' raw predictions (Mistral, Llama), a deployed endpoint,
    # an Anthropic model whose path a decoding server reads as two segments.
    ("/vertex/v1/projects/p/locations/l/publishers/mistralai/models/m:rawPredict", CHAT, None),
    ("/vertex/v1/projects/p/locations/l/publishers/meta/models/l:streamRawPredict", CHAT, None),
    ("/vertex/v1/projects/p/locations/l/endpoints/42:rawPredict", CHAT, None),
    (
        "/vertex/v1/projects/p/locations/l/publishers/anthropic/models/a%2Fb:rawPredict",
        VERTEX_MESSAGES,
        None,
    ),
    ("/vertex/v1/projects/p/locations/l/batchPredictionJobs", {"model": "m"}, None),
    # gRPC (the Vertex AI SDK's default transport) and its Live API socket path.
    ("/vertex/google.cloud.aiplatform.v1.PredictionService/GenerateContent", {}, "grpc"),
    (
        "/gemini/google.ai.generativelanguage.v1beta.GenerativeService/StreamGenerateContent",
        {},
        "grpc",
    ),
    # Gemini's other generation methods, in the spellings a server decodes.
    ("/gemini/v1beta/models/x%3AbatchGenerateContent", {"batch": {}}, None),
    ("/gemini/v1beta/models/x:BatchGenerateContent", {"batch": {}}, None),
    ("/gemini/v1beta/models/aqa:generateAnswer", GEMINI, None),
    ("/gemini/v1beta/models/text-bison-001:generateText", {"prompt": {"text": "x"}}, None),
    ("/gemini/v1beta/interactions", {"model": MODEL, "input": "x"}, None),
    # Google's batch envelope: whole HTTP requests inside a multipart/mixed body.
    ("/gemini/batch", None, "multipart/mixed; boundary=b"),
    ("/gemini/batch", None, "application/json, Multipart/Mixed; boundary=b"),
    # Bedrock's bidirectional stream (Nova Sonic).
    ("/bedrock/model/amazon.nova-sonic-v1%3A0/invoke-with-bidirectional-stream", {}, None),
]


@pytest.mark.parametrize(("target", "body", "kind"), RAW_UNSUPPORTED)
def test_other_model_endpoints_are_refused_before_anything_is_forwarded(
    clouds: Running, target: str, body: Any, kind: str | None
) -> None:
    headers = {}
    if kind == "grpc":
        headers["Content-Type"] = "application/grpc"
    elif kind is not None:
        headers["Content-Type"] = kind
    data = orjson.dumps(body) if body is not None else _batch_envelope()
    status, answer = send(clouds.proxy.port, "POST", target, data, headers)
    assert status == 400
    assert b"unsupported_endpoint" in answer
    assert clouds.upstream.received == []
    assert clouds.audit() == []
    assert rules(clouds) == ["unsupported_endpoint"]


def _batch_envelope() -> bytes:
    inner = orjson.dumps(GEMINI)
    return (
        b"--b\r\nContent-Type: application/http\r\n\r\n"
        b"POST /v1beta/models/gemini-2.5-flash:generateContent HTTP/1.1\r\n"
        b"Content-Type: application/json\r\n\r\n" + inner + b"\r\n--b--\r\n"
    )


def test_a_websocket_to_an_encoded_live_path_is_refused(clouds: Running) -> None:
    url = clouds.base("gemini").replace("http://", "ws://")
    for path in (
        "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateCont%65nt",
        "/ws/google.cloud.aiplatform.v1beta1.LlmBidiService%2FBidiGenerateContent",
        "/v1beta/models/x%3AstreamGenerateContent",
    ):
        with pytest.raises(InvalidStatus) as refused:
            connect(url + path)
        assert refused.value.response.status_code == 400
    assert clouds.upstream.ws_handshakes == []
    assert rules(clouds) == ["ws_unsupported_endpoint"] * 3


def test_codings_and_duplicate_keys_hold_on_the_clouds_wires(clouds: Running) -> None:
    """Issue 13's body classes, already closed for every wire: checked on these."""
    gemini = "/gemini/v1beta/models/gemini-2.5-flash:generateContent"
    converse = "/bedrock/model/x/converse"
    other = base64.b64encode(orjson.dumps({**GEMINI, "model": "models/other"}))
    refused = [
        # A coding only Python's codecs know, decoding to another model: refused.
        (gemini, other, {"Content-Encoding": "base64"}, "undecodable_content_encoding"),
        (
            gemini,
            b'{"contents":[],"systemInstruction":{"parts":[]},"system_instruction":{"parts":[]}}',
            {},
            "duplicate_key",
        ),
        (converse, b'{"messages":[],"system":[{"text":"a"}],"system":[]}', {}, "duplicate_key"),
    ]
    for target, body, headers, _ in refused:
        assert send(clouds.proxy.port, "POST", target, body, headers)[0] == 400
    zipped = gzip.compress(orjson.dumps(CONVERSE))
    assert send(clouds.proxy.port, "POST", converse, zipped, {"Content-Encoding": "gzip"})[0] == 200
    assert rules(clouds) == [rule for *_, rule in refused]
    assert [r.raw for r in clouds.upstream.received] == [zipped]  # byte for byte


# --------------------------------------------------------------------------
# 2. Paths two servers read two ways


@pytest.mark.parametrize(
    "target",
    [
        # A ";param" inside the segment that names the model or the method: a server
        # that strips it reads another model (or no endpoint) than one that keeps it.
        "/gemini/v1beta/models/x;y=1:generateContent",
        "/bedrock/model/x;a=b/converse",
        "/vertex/v1/projects/p/locations/l/publishers/anthropic/models/c;v=1:rawPredict",
        # A trailing colon after the method.
        "/gemini/v1beta/models/x:generateContent:",
        "/bedrock/model/x/converse:",
    ],
)
def test_paths_read_two_ways_are_refused(clouds: Running, target: str) -> None:
    body = GEMINI if "gemini" in target else VERTEX_MESSAGES if "vertex" in target else CONVERSE
    status, _ = send(clouds.proxy.port, "POST", target, orjson.dumps(body))
    assert status == 400
    assert clouds.upstream.received == []
    assert rules(clouds) == ["noncanonical_path"]


def test_a_param_outside_the_model_and_method_is_audited(clouds: Running) -> None:
    for target, body in (
        ("/gemini/v1beta/models/x:generateContent;v=1", GEMINI),
        ("/bedrock/model/x/converse;v=1", CONVERSE),
    ):
        assert send(clouds.proxy.port, "POST", target, orjson.dumps(body))[0] == 200
    assert [(r["model"], r["path"]) for r in clouds.audit()] == [
        ("x", "/v1beta/models/x:generateContent;v=REDACTED"),
        ("x", "/model/x/converse;v=REDACTED"),
    ]


# --------------------------------------------------------------------------
# 3. The path and the body naming different models


def test_google_genai_with_a_body_model_of_its_own_is_refused(clouds: Running) -> None:
    """A gateway that reads the body would run ``other`` while the record said the path's."""
    other = gemini_client(clouds, extra_body={"model": "models/gemini-2.5-pro"})
    with pytest.raises(genai_errors.ClientError) as caught:
        other.models.generate_content(model=MODEL, contents="Platform?")
    assert "model_mismatch" in str(caught.value)
    same = gemini_client(clouds, extra_body={"model": f"models/{MODEL}"})
    same.models.generate_content(model=MODEL, contents="Platform?")
    assert [(r["model"], r["model_source"]) for r in clouds.audit()] == [(MODEL, "path")]
    assert len(clouds.upstream.received) == 1
    assert rules(clouds) == ["model_mismatch"]


def test_boto3_and_hand_made_bodies_with_a_model_of_their_own_are_refused(
    clouds: Running, tmp_path: Path
) -> None:
    """(``AnthropicVertex`` moves any body ``model`` into the path itself: only a
    hand-made request sends one to Vertex.)"""
    client = bedrock_client(clouds, tmp_path)
    with pytest.raises(ClientError) as invoked:
        client.invoke_model(
            modelId=SONNET, body=orjson.dumps({**MESSAGES, "model": "anthropic.claude-opus-4"})
        )
    assert invoked.value.response["Error"]["Code"] == "ValidationException"
    assert "model_mismatch" in invoked.value.response["Error"]["Message"]
    vertex = "/vertex/v1/projects/p/locations/l/publishers/anthropic/models/claude-x@1:rawPredict"
    for target, body in (
        (vertex, {**VERTEX_MESSAGES, "model": "claude-y@2"}),
        ("/bedrock/model/x/converse", {**CONVERSE, "modelId": "y"}),
        ("/gemini/v1internal:generateContent", {"model": "a", "request": {**GEMINI, "model": "b"}}),
        ("/gemini/v1internal/models/a:generateContent", {"model": "b", "request": GEMINI}),
    ):
        assert send(clouds.proxy.port, "POST", target, orjson.dumps(body))[0] == 400
    assert clouds.upstream.received == []
    assert rules(clouds) == ["model_mismatch"] * 5


# --------------------------------------------------------------------------
# 4. InvokeModel with a Messages body for another model family


@pytest.mark.parametrize(
    "model",
    [
        "amazon.nova-pro-v1:0",
        "us.amazon.nova-premier-v1:0",
        "openai.gpt-oss-120b-1:0",
        "meta.llama3-3-70b-instruct-v1:0",
        "arn:aws:bedrock:us-east-1::foundation-model/mistral.mistral-large-2407-v1:0",
        "arn:aws:bedrock:us-east-1:123456789012:prompt/PROMPT12345:1",
    ],
)
def test_a_messages_body_for_another_family_is_refused(
    clouds: Running, tmp_path: Path, model: str
) -> None:
    """Before: audited as anthropic.messages while Nova, gpt-oss, Llama or a stored
    prompt read the body their own way (Nova's ``toolConfig`` tools went unrecorded)."""
    body = {**MESSAGES, "toolConfig": {"tools": [{"toolSpec": {"name": "hidden"}}]}}
    with pytest.raises(ClientError) as caught:
        bedrock_client(clouds, tmp_path).invoke_model(modelId=model, body=orjson.dumps(body))
    assert "unsupported_body" in caught.value.response["Error"]["Message"]
    assert clouds.upstream.received == []
    assert rules(clouds) == ["unsupported_body"]


def test_a_legacy_prompt_beside_messages_is_refused(clouds: Running, tmp_path: Path) -> None:
    """Claude 2.x on Bedrock takes Text Completions' ``prompt`` and Messages both."""
    body = {**MESSAGES, "prompt": "\n\nHuman: Answer in French.\n\nAssistant:"}
    with pytest.raises(ClientError) as caught:
        bedrock_client(clouds, tmp_path).invoke_model(
            modelId="anthropic.claude-v2:1", body=orjson.dumps(body)
        )
    assert "unsupported_body" in caught.value.response["Error"]["Message"]
    assert clouds.upstream.received == []


def test_anthropic_model_ids_in_every_form_are_audited(clouds: Running, tmp_path: Path) -> None:
    ids = [
        "anthropic.claude-3-5-haiku-20241022-v1:0",
        SONNET,
        "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-5-haiku-20241022-v1:0",
        "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-x-v1:0",
        # An application inference profile does not say its model: the body decides.
        "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3",
    ]
    client = bedrock_client(clouds, tmp_path)
    for model in ids:
        client.invoke_model(modelId=model, body=orjson.dumps(MESSAGES))
    assert [r["model"] for r in clouds.audit()] == ids
    assert rules(clouds) == []


# --------------------------------------------------------------------------
# 5. Content where the audit does not read it


def test_converse_tools_in_additional_fields_are_recorded_and_hidden_content_refused(
    clouds: Running, tmp_path: Path
) -> None:
    """AWS documents Claude's computer use on Converse through
    ``additionalModelRequestFields.tools``; before, those tools were advertised
    to the model and missing from the record."""
    client = bedrock_client(clouds, tmp_path)
    computer = {"type": "computer_20250124", "name": "computer", "display_width_px": 1024}
    client.converse(
        modelId=SONNET,
        messages=CONVERSE["messages"],
        toolConfig={"tools": [{"toolSpec": {"name": "lookup", "inputSchema": {"json": {}}}}]},
        additionalModelRequestFields={
            "tools": [computer, {"name": "native_tool", "input_schema": {"type": "object"}}],
            "anthropic_beta": ["computer-use-2025-01-24"],
        },
    )
    (record,) = clouds.audit()
    assert record["tool_names"] == ["lookup", "native_tool"]
    assert record["hosted_tools"] == [{"type": "computer_20250124", "name": "computer"}]
    hidden: dict[str, Any]
    for hidden in ({"system": "Answer in French."}, {"messages": []}, {"prompt": "x"}):
        with pytest.raises(ClientError) as caught:
            client.converse(
                modelId=SONNET, messages=CONVERSE["messages"], additionalModelRequestFields=hidden
            )
        assert "unsupported_body" in caught.value.response["Error"]["Message"]
    assert len(clouds.upstream.received) == 1
    assert rules(clouds) == ["unsupported_body"] * 3


def test_unions_with_two_members_are_refused(clouds: Running, tmp_path: Path) -> None:
    """Converse's blocks and Gemini's part data hold one member; a block holding two
    is read as either, and the record could show the one the model never sees."""
    png = {"format": "png", "source": {"bytes": b"\x89PNG"}}
    client = bedrock_client(clouds, tmp_path, parameter_validation=False)
    attempts: list[dict[str, Any]] = [
        {"system": [{"text": "Be brief.", "guardContent": {"text": {"text": "Be rude."}}}]},
        {"messages": [{"role": "user", "content": [{"text": "Platform?", "image": png}]}]},
        {"toolConfig": {"tools": [{"toolSpec": {"name": "a"}, "cachePoint": {}}]}},
    ]
    for extra in attempts:
        with pytest.raises(ClientError):
            client.converse(**{"modelId": SONNET, **CONVERSE, **extra})
    part = types.Part(text="Platform?", inline_data=types.Blob(mime_type="image/png", data=b"\x89"))
    gemini = gemini_client(clouds)
    with pytest.raises(genai_errors.ClientError) as caught:
        gemini.models.generate_content(
            model=MODEL, contents=[types.Content(role="user", parts=[part])]
        )
    assert "malformed_messages" in str(caught.value)
    assert clouds.upstream.received == []
    assert rules(clouds) == [
        "instructions_not_text",
        "malformed_messages",
        "malformed_tools",
        "malformed_messages",
    ]


# --------------------------------------------------------------------------
# 6. Regular mode: the provider named only by the Host header or the TLS server name


@pytest.fixture
def forward(tmp_path: Path) -> Iterator[tuple[Proxy, Upstream, Upstream]]:
    """A regular-mode proxy with no route for the stubs: they are not provider hosts."""
    proxy = intercepting_proxy(tmp_path, [])
    with Upstream() as plain, Upstream(tls=self_signed_tls()) as tls, proxy:
        yield proxy, plain, tls


def _through_tunnel(
    proxy: Proxy, port: int, sni: str | None, host: str, target: str, body: bytes
) -> bytes:
    """CONNECT to 127.0.0.1:port, TLS with ``sni``, one request with ``Host: host``."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        head = f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        sock.sendall(head.encode())
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with context.wrap_socket(sock, server_hostname=sni) as tunnel:
            tunnel.sendall(
                f"POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            return read_until_closed(tunnel)


def test_regular_mode_audits_a_provider_named_only_by_host_or_sni(
    forward: tuple[Proxy, Upstream, Upstream], tmp_path: Path
) -> None:
    """Before: decided on the CONNECT target alone, so a CONNECT to an IP address
    with ``Host: bedrock-runtime.…`` (what the provider's front end routes on)
    passed as ``unaudited`` and ran the model."""
    proxy, plain, tls = forward
    started = time.perf_counter()
    converse = orjson.dumps(CONVERSE)
    hosts = [
        "bedrock-runtime.us-east-1.amazonaws.com",
        "BEDROCK-RUNTIME.us-east-1.AMAZONAWS.com.",
        "bedrock-runtime.us-east-1.amazonaws.com:443",
        "bedrock-mantle.us-east-1.api.aws",
    ]
    for host in hosts:
        target = f"http://127.0.0.1:{plain.port}/model/x/converse"
        if "mantle" in host:
            target = f"http://127.0.0.1:{plain.port}/anthropic/v1/messages"
        body = converse if "mantle" not in host else orjson.dumps({**MESSAGES, "model": "m"})
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            sock.sendall(
                f"POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert read_until_closed(sock).startswith(b"HTTP/1.1 200")
    gemini = orjson.dumps(GEMINI)
    path = f"/v1beta/models/{MODEL}:generateContent"
    google = "generativelanguage.googleapis.com"
    # Host and server name both the provider's; only the server name; only the Host.
    for sni, host in ((google, google), (google, f"127.0.0.1:{tls.port}"), (None, google)):
        assert _through_tunnel(proxy, tls.port, sni, host, path, gemini).startswith(b"HTTP/1.1 200")
    audit = read_jsonl(tmp_path / "out" / "audit.jsonl")
    assert [(r["api"], r["provider"]) for r in audit] == [
        ("bedrock.converse", "aws.bedrock"),
        ("bedrock.converse", "aws.bedrock"),
        ("bedrock.converse", "aws.bedrock"),
        ("anthropic.messages", "aws.bedrock"),
        ("gemini.generate_content", "gcp.gemini"),
        ("gemini.generate_content", "gcp.gemini"),
        ("gemini.generate_content", "gcp.gemini"),
    ]
    assert len(plain.received) + len(tls.received) == len(audit)
    events = read_jsonl(tmp_path / "out" / "events.jsonl")
    assert [e for e in events if e["kind"] == "unaudited"] == []
    figure(
        "regular_mode_aliases",
        requests=len(audit),
        audited=len(audit),
        unaudited=0,
        seconds=round(time.perf_counter() - started, 2),
    )


def test_regular_mode_other_hosts_still_pass(forward: tuple[Proxy, Upstream, Upstream]) -> None:
    proxy, plain, _ = forward
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        body = orjson.dumps(CONVERSE)
        sock.sendall(
            f"POST http://127.0.0.1:{plain.port}/model/x/converse HTTP/1.1\r\nHost: example.com"
            f"\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert read_until_closed(sock).startswith(b"HTTP/1.1 200")
    assert len(plain.received) == 1
