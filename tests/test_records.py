"""records.py: no secret survives in a written path; records bound what they copy."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from modeltap.records import MAX_ID_CHARS, MAX_PATH_CHARS, ResponseFacts, ToolCall, redact_path

SECRET = "s3cr3t-VALUE-9f8e"

#: Names real services put credentials under, in the spellings they use, and a
#: few no service uses: an allowlist must not care which.
SECRET_NAMES = [
    "key",
    "KEY",
    "api_key",
    "api-key",
    "apikey",
    "ApiKey",
    "x-api-key",
    "access_token",
    "accessToken",
    "token",
    "id_token",
    "refresh_token",
    "auth",
    "authorization",
    "Authorization",
    "sig",
    "signature",
    "X-Amz-Signature",
    "X-Amz-Credential",
    "X-Amz-Security-Token",
    "X-Goog-Signature",
    "X-Goog-Credential",
    "subscription-key",
    "Ocp-Apim-Subscription-Key",
    "client_secret",
    "client_id",
    "code",
    "password",
    "passwd",
    "pwd",
    "pass",
    "secret",
    "jwt",
    "session",
    "sessionid",
    "sv",
    "se",
    "sp",
    "st",
    "skoid",
    "key[]",
    "key[0]",
    "creds[token]",
    "private",
    "bearer",
    "q",
    "user",
    "anything",
]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/x", "/v1/x"),
        ("/v1/x?key=abc", "/v1/x?key=REDACTED"),
        ("/v1/x?a=1&api-key=q&api_key=r", "/v1/x?a=REDACTED&api-key=REDACTED&api_key=REDACTED"),
        ("/v1/x?%6Bey=zz", "/v1/x?%6Bey=REDACTED"),
        ("/v1/x?Authorization=Bearer%20sk&x=1", "/v1/x?Authorization=REDACTED&x=REDACTED"),
        ("/v1/x?beta=true#key=abc", "/v1/x?beta=true"),
        ("/v1/messages?beta=true", "/v1/messages?beta=true"),
        # The allowlist, each with only its harmless shapes.
        ("/openai/responses?api-version=2025-04-01-preview", None),
        ("/openai/deployments/d/chat/completions?api-version=2024-10-21", None),
        ("/v1beta/models/g:streamGenerateContent?alt=sse", None),
        ("/v1/x?api-version=preview&alt=json&beta=false", None),
        ("/v1/x?api-version=" + SECRET, "/v1/x?api-version=REDACTED"),
        ("/v1/x?beta=" + SECRET, "/v1/x?beta=REDACTED"),
        ("/v1/x?alt=sse%20" + SECRET, "/v1/x?alt=REDACTED"),
        ("/v1/x?%61pi-version=2024-01-01", "/v1/x?%61pi-version=2024-01-01"),
        ("/v1/x?API-VERSION=2024-01-01", "/v1/x?API-VERSION=REDACTED"),
        # A value without a name, or a name that may be a key.
        ("/v1/x?token", "/v1/x?REDACTED"),
        ("/v1/x?sk-live-0123456789", "/v1/x?REDACTED"),
        ("/v1/x?beta", "/v1/x?beta"),
        ("/v1/x?sk-live-0123456789=1", "/v1/x?REDACTED=REDACTED"),
        ("/v1/x?AKIAIOSFODNN7EXAMPLE=1", "/v1/x?REDACTED=REDACTED"),
        ("/v1/x?" + "a" * 60 + "=1", "/v1/x?REDACTED=REDACTED"),
        ("/v1/x?k%00y=1", "/v1/x?REDACTED=REDACTED"),
        # Separators: ; like &, repeated names, empty pieces, empty values kept empty.
        ("/v1/x?a=1;sig=zz", "/v1/x?a=REDACTED;sig=REDACTED"),
        ("/v1/x?key=1&key=2&&key=", "/v1/x?key=REDACTED&key=REDACTED&&key="),
        ("/v1/x;jsessionid=abc/y?q=1", "/v1/x;jsessionid=REDACTED/y?q=REDACTED"),
        ("/v1/x?a=b=c", "/v1/x?a=REDACTED"),
        ("/v1/x?key=a+b%20c#frag", "/v1/x?key=REDACTED"),
    ],
)
def test_redact_path(path: str, expected: str | None) -> None:
    expected = path if expected is None else expected
    assert redact_path(path) == expected
    assert redact_path(expected) == expected  # writing it again changes nothing


@pytest.mark.parametrize("name", SECRET_NAMES)
@pytest.mark.parametrize("encode", [False, True], ids=["plain", "percent-encoded"])
def test_no_value_survives_whatever_its_name(name: str, encode: bool) -> None:
    written_name = quote(name, safe="") if encode else name
    for value in (SECRET, quote(SECRET + "/+=&", safe=""), SECRET + "%2Fx"):
        redacted = redact_path(f"/v1/chat/completions?{written_name}={value}&beta=true")
        assert SECRET not in redacted
        assert redacted.endswith("=REDACTED&beta=true")


def test_a_long_path_is_cut_after_redaction() -> None:
    path = "/v1/x?" + "&".join(f"key{i % 10}={SECRET}" for i in range(500))
    written = redact_path(path)
    assert SECRET not in written
    assert len(written) <= MAX_PATH_CHARS + len("...[cut]")
    assert written.endswith("...[cut]")


def test_response_facts_keep_no_overlong_identifier() -> None:
    long = "echo " + "p" * MAX_ID_CHARS
    facts = ResponseFacts(
        response_id=long,
        model=long,
        status="completed",
        finish_reasons=("stop", long),
        tool_calls=(ToolCall(long, long, '{"a": 1}', long), ToolCall("c1", "f", None)),
        evidence_complete=True,
    )
    assert facts.response_id is None and facts.model is None
    assert facts.finish_reasons == ("stop",)
    assert facts.tool_calls == (ToolCall(None, None, '{"a": 1}', None), ToolCall("c1", "f", None))
    assert facts.evidence_complete is False
    assert all(long not in error for error in facts.capture_errors)
    assert any("model" in error for error in facts.capture_errors)


def test_response_facts_within_bounds_are_unchanged() -> None:
    facts = ResponseFacts(response_id="r" * MAX_ID_CHARS, model="m", evidence_complete=True)
    assert facts.response_id == "r" * MAX_ID_CHARS
    assert facts.evidence_complete is True and facts.capture_errors == ()
