"""No secret of the clouds' wires lands in a file, a stderr line or a span (SPEC 8).

Real ``modeltap run`` processes with ``--record`` and ``--otlp``, driven by the
real SDKs with planted credentials in every place each wire puts one:

- Gemini: google-genai's ``x-goog-api-key`` header, a ``?key=`` query (as
  curl examples and Gemini CLI's older versions send it), on an audited
  request, a refused one (a batch, a body naming another model), an
  unaudited one (token counting) and a refused Live API handshake;
- Azure OpenAI: the ``api-key`` header of ``AzureOpenAI``, ``?api-key=`` and
  ``?subscription-key=`` (API Management);
- Vertex: ``AnthropicVertex``'s bearer token;
- Bedrock: a Bedrock API key (boto3's bearer), SigV4 with a session token
  (``X-Amz-Security-Token``) in regular mode, a presigned query
  (``X-Amz-Credential``, ``X-Amz-Signature``, ``X-Amz-Security-Token``), and
  the same signed request refused in reverse mode.

The upstream received each secret (they were really sent); every written
place is then scanned for them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anthropic
import boto3
import httpx2 as httpx
import openai
import orjson
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.otlp_receiver import HttpReceiver
from tests.reliability.faults import figure
from tests.reliability.test_processes import ProxyProcess
from tests.upstream import AWS_KEY_ID, AWS_SECRET, Upstream

GEMINI_KEY = "AIzaPLANTEDgeminikey0123456789"
AZURE_KEY = "PLANTEDazurekey0123456789"
VERTEX_TOKEN = "ya29.PLANTEDvertextoken0123"
BEDROCK_KEY = "ABSKPLANTEDbedrockkey0123"
SESSION_TOKEN = "PLANTEDawssessiontoken0123"
SECRETS = (GEMINI_KEY, AZURE_KEY, VERTEX_TOKEN, BEDROCK_KEY, SESSION_TOKEN)
SONNET = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
MESSAGES = [{"role": "user", "content": "Platform for the 07:10?"}]
CONVERSE = [{"role": "user", "content": [{"text": "Platform for the 07:10?"}]}]


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS configuration of the machine; mitmproxy's CA under this test's HOME."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CA_BUNDLE", "AWS_BEARER_TOKEN_BEDROCK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))


def _reverse_traffic(p: ProxyProcess, home: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every wire's credentials, through a reverse-mode proxy; returns the exchanges sent."""
    sent = 0
    gemini = genai.Client(
        api_key=GEMINI_KEY,
        http_options=types.HttpOptions(base_url=f"{p.url}/gemini", retry_options=None),
    )
    gemini.models.generate_content(model="gemini-2.5-flash", contents="Platform?")
    gemini.models.count_tokens(model="gemini-2.5-flash", contents="Platform?")
    with pytest.raises(genai_errors.ClientError):
        gemini.batches.create(
            model="gemini-2.5-flash", src=[types.InlinedRequest(contents="Platform?")]
        )
    other = genai.Client(
        api_key=GEMINI_KEY,
        http_options=types.HttpOptions(
            base_url=f"{p.url}/gemini", retry_options=None, extra_body={"model": "models/x"}
        ),
    )
    with pytest.raises(genai_errors.ClientError):
        other.models.generate_content(model="gemini-2.5-flash", contents="Platform?")
    sent += 4
    with httpx.Client(base_url=p.url, timeout=10) as client:
        body = {"contents": [{"role": "user", "parts": [{"text": "Platform?"}]}]}
        for path in (
            f"/gemini/v1beta/models/gemini-2.5-flash:generateContent?key={GEMINI_KEY}",
            f"/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key={GEMINI_KEY}",
            f"/gemini/v1beta/models/gemini-2.5-flash:countTokens?key={GEMINI_KEY}",
            f"/gemini/v1beta/models/gemini-2.5-flash:batchGenerateContent?key={GEMINI_KEY}",
            f"/gemini/v1beta/models/a;key={GEMINI_KEY}:generateContent",
        ):
            client.post(path, json=body)
            sent += 1
        for path in (
            f"/azure/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21&api-key={AZURE_KEY}",
            f"/azure/openai/deployments/gpt4o/chat/completions?subscription-key={AZURE_KEY}",
        ):
            client.post(path, json={"model": "gpt-4o", "messages": MESSAGES})
            sent += 1
    ws = p.url.replace("http://", "ws://")
    live = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
    headers = {"x-goog-api-key": GEMINI_KEY}
    with pytest.raises(InvalidStatus):
        connect(f"{ws}/gemini{live}?key={GEMINI_KEY}", additional_headers=headers)
    sent += 1

    azure = openai.AzureOpenAI(
        azure_endpoint=f"{p.url}/azure", api_key=AZURE_KEY, api_version="2024-10-21", max_retries=0
    )
    azure.chat.completions.create(model="gpt4o", messages=MESSAGES)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError):
        azure.completions.create(model="gpt4o", prompt="Platform?")
    sent += 2

    vertex = anthropic.AnthropicVertex(
        base_url=f"{p.url}/vertex",
        region="us-east5",
        project_id="p",
        access_token=VERTEX_TOKEN,
        max_retries=0,
    )
    vertex.messages.create(
        model="claude-sonnet-4-5@20250929",
        max_tokens=16,
        messages=MESSAGES,  # type: ignore[arg-type]
    )
    vertex.messages.count_tokens(model="claude-sonnet-4-5@20250929", messages=MESSAGES)  # type: ignore[arg-type]
    sent += 2

    # boto3 sends a Bedrock API key only over HTTPS: the proxy's port answers TLS.
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", BEDROCK_KEY)
    tls = p.url.replace("http://", "https://")
    ca = str(home / ".mitmproxy" / "mitmproxy-ca-cert.pem")
    bearer = _bedrock(f"{tls}/bedrock", verify=ca)
    bearer.converse(modelId=SONNET, messages=CONVERSE)
    with pytest.raises(ClientError):
        bearer.invoke_model(modelId="amazon.nova-pro-v1:0", body=orjson.dumps({"messages": []}))
    monkeypatch.delenv("AWS_BEARER_TOKEN_BEDROCK")
    signed = _bedrock(f"{p.url}/bedrock", aws_session_token=SESSION_TOKEN)
    with pytest.raises(ClientError):  # SigV4 in reverse mode: signed_request
        signed.converse(modelId=SONNET, messages=CONVERSE)
    sent += 3
    return sent


def _bedrock(endpoint: str, **options: Any) -> Any:
    proxies = options.pop("proxies", None)
    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id=AWS_KEY_ID,
        aws_secret_access_key=AWS_SECRET,
        config=Config(retries={"max_attempts": 1}, proxies=proxies),
        **options,
    )


def _regular_traffic(p: ProxyProcess, upstream: Upstream) -> int:
    """SigV4 with a session token and a presigned query, forwarded unchanged."""
    client = _bedrock(upstream.url, aws_session_token=SESSION_TOKEN, proxies={"http": p.url})
    client.converse(modelId=SONNET, messages=CONVERSE)
    client.converse_stream(modelId=SONNET, messages=CONVERSE)["stream"].close()
    presigned = (
        "X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential={AWS_KEY_ID}%2F20260101%2Fus-east-1%2Fbedrock%2Faws4_request"
        f"&X-Amz-Security-Token={SESSION_TOKEN}&X-Amz-Signature={SESSION_TOKEN}"
        "&X-Amz-SignedHeaders=host"
    )
    with httpx.Client(proxy=p.url, timeout=10) as client:
        target = f"{upstream.url}/model/{SONNET}/converse?{presigned}"
        assert client.post(target, json={"messages": CONVERSE}).status_code == 200
    return 3


def test_no_cloud_secret_reaches_any_written_place(
    tmp_path: Path, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = time.perf_counter()
    home = tmp_path / "home"
    places: dict[str, bytes] = {}
    sent = 0
    with HttpReceiver() as receiver:
        for mode in ("reverse", "regular"):
            out, rec = tmp_path / f"out-{mode}", tmp_path / f"rec-{mode}"
            routes = [
                f"{name}={upstream.url},provider={provider}"
                for name, provider in (
                    ("gemini", "gcp.gemini"),
                    ("azure", "azure.ai.openai"),
                    ("vertex", "gcp.vertex_ai"),
                    ("bedrock", "aws.bedrock"),
                )
            ]
            args = ["--out", str(out), "--record", str(rec), "--otlp", receiver.endpoint]
            args += ["--mode", mode] if mode == "regular" else []
            for route in routes if mode == "reverse" else routes[-1:]:
                args += ["--route", route]
            p = ProxyProcess(*args)
            try:
                if mode == "reverse":
                    sent += _reverse_traffic(p, home, monkeypatch)
                else:
                    sent += _regular_traffic(p, upstream)
                assert p.stop() == 0
            finally:
                p.kill()
            for directory in (out, rec, rec / "blobs"):
                if directory.is_dir():
                    for f in directory.iterdir():
                        if f.is_file():
                            places[f"{mode}/{directory.name}/{f.name}"] = f.read_bytes()
            places[f"{mode}/stderr"] = p.stderr
        spans = receiver.wait_for(10, timeout=10)
        logs = receiver.wait_for_logs(10, timeout=10)
    # The leak check below reads only what is here: make sure it is all here.
    assert len(spans) >= 10 and len(logs) >= 10, (len(spans), len(logs))
    for mode in ("reverse", "regular"):
        assert f"{mode}/out-{mode}/audit.jsonl" in places
        assert f"{mode}/rec-{mode}/recording.jsonl" in places
        assert any(name.startswith(f"{mode}/blobs/") for name in places), sorted(places)
    places["spans"] = repr(spans).encode()
    places["logs"] = repr(logs).encode()
    # The secrets were really sent: the upstream received each one.
    arrived = repr([(r.path, r.headers) for r in upstream.received])
    assert all(secret in arrived for secret in SECRETS), [s for s in SECRETS if s not in arrived]
    leaks = {
        (name, secret)
        for name, data in places.items()
        for secret in SECRETS
        if secret.encode() in data
    }
    assert leaks == set()
    audit = [
        orjson.loads(line)
        for name, data in places.items()
        if name.endswith("audit.jsonl")
        for line in data.splitlines()
    ]
    events = [
        orjson.loads(line)
        for name, data in places.items()
        if name.endswith("events.jsonl")
        for line in data.splitlines()
    ]
    kinds = {e["kind"] for e in events}
    assert {"response", "rejected", "unaudited"} <= kinds
    rejected = {e["rule"] for e in events if e["kind"] == "rejected"}
    assert {
        "unsupported_endpoint",
        "ws_unsupported_endpoint",
        "model_mismatch",
        "unsupported_body",
        "signed_request",
        "noncanonical_path",
    } <= rejected
    assert {r["provider"] for r in audit} == {
        "gcp.gemini",
        "azure.ai.openai",
        "gcp.vertex_ai",
        "aws.bedrock",
    }
    assert any("X-Amz-Security-Token=REDACTED" in r["path"] for r in audit)
    assert any("key=REDACTED" in r["path"] for r in audit)
    figure(
        "cloud_secrets",
        exchanges=sent,
        audit_lines=len(audit),
        events=len(events),
        spans=len(spans),
        log_records=len(logs),
        places=len(places),
        leaks=0,
        seconds=round(time.perf_counter() - started, 1),
    )
