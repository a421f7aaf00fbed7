"""Model endpoints modeltap cannot audit (``apis.unsupported``), and what still passes."""

from __future__ import annotations

import pytest

from modeltap import apis
from modeltap.core.gate import RequestHead, judge_request_line, provider_route, split_authority
from modeltap.rules.errors import Rejected
from modeltap.rules.routing import RouteTable


@pytest.mark.parametrize(
    ("path", "named"),
    [
        (
            "/v1beta/models/x:batchGenerateContent",
            "batchGenerateContent (a batch of model requests)",
        ),
        (
            "/v1beta/models/x%3ABATCHGENERATECONTENT",
            "batchGenerateContent (a batch of model requests)",
        ),
        ("/v1beta/models/aqa:generateAnswer", "generateAnswer"),
        ("/v1beta/interactions", "Interactions API"),
        ("/v1beta/interactions/live", "Interactions API (live)"),
        ("/v1/projects/p/locations/l/publishers/mistralai/models/m:rawPredict", None),
        ("/v1/projects/p/locations/l/endpoints/1:streamRawPredict", None),
        (
            "/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContentConstrained",
            "BidiGenerateContent (Live API)",
        ),
        (
            "/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent",
            "BidiGenerateContent (Live API)",
        ),
        (
            "/google.cloud.aiplatform.v1.PredictionService/StreamGenerateContent",
            "gRPC streamgeneratecontent",
        ),
        (
            "/model/amazon.nova-sonic-v1%3A0/invoke-with-bidirectional-stream",
            "InvokeModelWithBidirectionalStream",
        ),
        ("/v1/batches", "a batch of model requests"),
        ("/v1/messages/batches", "a batch of model requests"),
        ("/openai/batches", "a batch of model requests"),
        ("/v1/projects/p/locations/l/batchPredictionJobs", "a batch of model requests"),
        ("/v1/realtime", "Realtime API"),
        ("/v1/realtime/calls", "Realtime API"),
        ("/v1/realtime/calls/c1/accept", "Realtime API"),
        ("/v1/completions", "legacy completions"),
        ("/openai/deployments/d/completions", "legacy completions"),
        ("/v1/complete", "legacy text completions"),
    ],
)
def test_endpoints_that_run_a_model_modeltap_cannot_audit(path: str, named: str | None) -> None:
    found = apis.unsupported_endpoint(path)
    assert found is not None
    if named is not None:
        assert found == named


@pytest.mark.parametrize(
    "path",
    [
        # Audited (a wire module matches first) or running no generation turn.
        "/v1/projects/p/locations/l/publishers/anthropic/models/count-tokens:rawPredict",
        "/v1beta/models/x:countTokens",
        "/v1beta/models/x:embedContent",
        "/v1beta/models/x:batchEmbedContents",
        "/v1/projects/p/locations/l/publishers/google/models/imagen:predict",
        "/v1/batches/b1/cancel",
        "/v1/messages/batches/b1",
        "/v1/realtime/sessions",
        "/v1/realtime/client_secrets",
        "/v1/realtime/calls/c1/hangup",
        "/v1/chat/completions",
        "/v1/chat/completions/c1",
        "/v1beta/interactions/i1",
        "/model/x/count-tokens",
        "/v1/files",
        "/google.longrunning.Operations/GetOperation",
    ],
)
def test_what_is_not_named(path: str) -> None:
    assert apis.unsupported_endpoint(path) is None


def test_the_gate_refuses_them_posted_or_as_a_socket_and_lets_other_methods_pass() -> None:
    path = "/v1beta/models/x:batchGenerateContent"
    for method, names, websocket, rule in (
        ("POST", [], False, "unsupported_endpoint"),
        ("GET", ["X-HTTP-Method-Override"], False, "unsupported_endpoint"),
        ("GET", ["upgrade"], True, "ws_unsupported_endpoint"),
    ):
        with pytest.raises(Rejected) as caught:
            judge_request_line(method, path, path, names, websocket)
        assert caught.value.rule == rule
    assert judge_request_line("GET", "/v1/batches", "/v1/batches", [], False) is None
    # A batch envelope, whatever its path, and behind a repeated header.
    for kind in ("multipart/mixed; boundary=b", "application/json, MULTIPART/MIXED; boundary=b"):
        with pytest.raises(Rejected) as caught:
            judge_request_line("POST", "/batch", "/batch", [], False, kind)
        assert caught.value.rule == "unsupported_endpoint"
    files = judge_request_line("POST", "/v1/files", "/v1/files", [], False, "multipart/form-data")
    assert files is None  # an upload passes


@pytest.mark.parametrize(
    ("path", "api"),
    [
        ("/v1beta/models/x:generateContent;v=1", "gemini.generate_content"),
        ("/v1/chat;x=1/completions", "openai.chat_completions"),
        ("/model/x/converse;v=1", "bedrock.converse"),
    ],
)
def test_a_param_that_does_not_touch_the_endpoint_is_audited(path: str, api: str) -> None:
    assert apis.endpoint_of(path) == api


@pytest.mark.parametrize(
    "path",
    [
        "/v1beta/models/x;y=1:generateContent",
        "/model/x;a=b/converse",
        "/v1/projects/p/locations/l/publishers/anthropic/models/c;v=1:rawPredict",
        "/openai/deployments/d;x=1/chat/completions",
    ],
)
def test_a_param_that_changes_the_endpoint_or_model_is_noncanonical(path: str) -> None:
    with pytest.raises(Rejected) as caught:
        apis.match_endpoint(path)
    assert caught.value.rule == "noncanonical_path"


def test_split_authority() -> None:
    assert split_authority("h.example", 443) == ("h.example", 443)
    assert split_authority("h.example:8443", 443) == ("h.example", 8443)
    assert split_authority("[::1]:8080", 443) == ("::1", 8080)
    assert split_authority("[::1]", 443) == ("::1", 443)
    assert split_authority("h:x", 80) == ("h:x", 80)


def test_provider_route_tries_the_target_then_each_alias() -> None:
    routes = RouteTable.build([], None)

    def head(host: str, host_header: str | None = None, sni: str | None = None) -> RequestHead:
        return RequestHead(
            "f", "POST", "/", "https", host, 443, {}, host_header=host_header, sni=sni
        )

    assert provider_route(routes, head("10.0.0.1", "10.0.0.1:443")) is None
    for found in (
        provider_route(routes, head("10.0.0.1", "BEDROCK-RUNTIME.us-east-1.amazonaws.com.")),
        provider_route(
            routes, head("10.0.0.1", "10.0.0.1", "bedrock-runtime.us-east-1.amazonaws.com")
        ),
    ):
        assert found is not None and found.provider == "aws.bedrock"
    found = provider_route(routes, head("generativelanguage.googleapis.com", "api.openai.com"))
    assert found is not None and found.provider == "gcp.gemini"  # the target first
