"""records.py: no secret survives in a written path; records bound what they copy."""

from __future__ import annotations

import sys
import unicodedata
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from modeltap.evidence import redaction
from modeltap.evidence.records import MAX_ID_CHARS, ResponseFacts, ToolCall
from modeltap.evidence.redaction import MAX_PATH_CHARS, redact_path

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
        # A separator in the path however spelt, for a server that decodes first.
        ("/v1/models%3Fkey=" + SECRET, "/v1/models%3Fkey=REDACTED"),
        ("/v1/x%3bkey=" + SECRET + "/y", "/v1/x%3bkey=REDACTED/y"),
        ("/v1/x%253Bkey=" + SECRET + "/y", "/v1/x%253Bkey=REDACTED/y"),
        ("/v1/x%u003Bkey=" + SECRET + "/y", "/v1/x%u003Bkey=REDACTED/y"),
        ("/v1/x%C0%BBkey=" + SECRET + "/y", "/v1/x%C0%BBkey=REDACTED/y"),
        ("/v1/x%EF%BC%9Bkey=" + SECRET + "/y", "/v1/x%EF%BC%9Bkey=REDACTED/y"),
        ("/v1/x\uff1bkey=" + SECRET + "/y", "/v1/x\uff1bkey=REDACTED/y"),
        ("/v1/x%23key=" + SECRET + "/y", "/v1/x%23key=REDACTED"),
        ("/v1/x;a=1%3Fkey=" + SECRET + "/y", "/v1/x;a=REDACTED"),
        # Encoded characters that separate nothing stay as sent (Bedrock model ids).
        ("/model/arn%3Aaws%3Abedrock%2Fm/invoke", None),
        ("/v1/projects/p/models/g%40001:predict", None),
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


#: Characters a path could be split on after decoding, and a few around them.
SEPARATORS = ";?#"


def lookalikes(chars: str) -> dict[str, list[str]]:
    """For each of ``chars``, every character NFKC folds into text containing it
    (one pass over Unicode for all of them: this runs as the module loads)."""
    found: dict[str, list[str]] = {char: [] for char in chars}
    for c in range(0x80, sys.maxunicode + 1):
        folded = unicodedata.normalize("NFKC", chr(c))
        for char in chars:
            if char in folded:
                found[char].append(chr(c))
    return found


LOOKALIKES = lookalikes(SEPARATORS)


def test_the_lookalike_lists_are_complete() -> None:
    assert {c: sorted(v) for c, v in redaction._LOOKALIKES.items()} == LOOKALIKES


@st.composite
def separator_spellings(draw: st.DrawFn) -> str:
    """``;``, ``?`` or ``#`` as a server might come to read it: raw, NFKC look-alike,
    UTF-8 percent-encoded (mixed case, encoded again up to twice), IIS ``%uXXXX``,
    overlong UTF-8, and bytes above ASCII as mitmproxy hands them over."""
    base = draw(st.sampled_from(SEPARATORS))
    char = draw(st.sampled_from([base, *LOOKALIKES[base]]))
    form = draw(st.sampled_from(["raw", "utf8", "iis", "overlong"]))
    if form == "raw":
        return char
    depth = "25" * draw(st.integers(0, 2))

    def hexed(value: str) -> str:
        return "".join(draw(st.sampled_from([h.lower(), h.upper()])) for h in value)

    if form == "iis":
        return f"%{depth}{draw(st.sampled_from('uU'))}{hexed(f'{ord(char):04x}')}"
    data = list(char.encode())
    if form == "overlong" and ord(char) < 0x80:
        length = draw(st.integers(2, 4))
        data = [(0xC0, 0xE0, 0xF0)[length - 2], *[0x80] * (length - 2), 0x80 | ord(char)]
    out = ""
    for byte in data:
        how = draw(st.sampled_from(["pct", "latin1", "surrogate"] if byte >= 0x80 else ["pct"]))
        if how == "pct":
            out += f"%{depth}{hexed(f'{byte:02x}')}"
        else:
            out += chr(byte) if how == "latin1" else chr(0xDC00 + byte)
    return out


segments = st.text(alphabet="abcxyz019-_.:%", min_size=1, max_size=8)
secrets = st.text(alphabet="ABCdef0123456789-_.~%+", min_size=4, max_size=16).map(
    lambda s: "SeCrEt" + s
)


@given(
    before=st.lists(segments, min_size=1, max_size=3),
    separator=separator_spellings(),
    name=st.sampled_from(["key", "api_key", "sig", "beta", "api-version", ""]),
    equals=st.sampled_from(["=", "%3D", "%3d", "\uff1d", ""]),
    secret=secrets,
    after=st.lists(segments, max_size=2),
    query=st.sampled_from(["", "?beta=true", "?api-version=2024-10-21&x=1"]),
)
def test_no_secret_survives_a_separator_in_the_path(
    before: list[str],
    separator: str,
    name: str,
    equals: str,
    secret: str,
    after: list[str],
    query: str,
) -> None:
    """Whatever spelling of ``;``, ``?`` or ``#`` a server decodes or normalises
    into a separator, the parameters after it are written without their values."""
    path = "/" + "/".join(before) + separator + name + equals + secret
    path += "".join("/" + s for s in after) + query
    written = redact_path(path)
    assert "SeCrEt" not in written, (path, written)
    assert redact_path(written) == written


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
