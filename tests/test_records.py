"""records.py: secrets never survive in a recorded path."""

from __future__ import annotations

import pytest

from modeltap.records import redact_path


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/x", "/v1/x"),
        ("/v1/x?key=abc", "/v1/x?key=REDACTED"),
        ("/v1/x?a=1&api-key=q&api_key=r", "/v1/x?a=1&api-key=REDACTED&api_key=REDACTED"),
        ("/v1/x?%6Bey=zz", "/v1/x?%6Bey=REDACTED"),
        ("/v1/x?Authorization=Bearer%20sk&x=1", "/v1/x?Authorization=REDACTED&x=1"),
        ("/v1/x?beta=true#key=abc", "/v1/x?beta=true"),
        ("/v1/x?token", "/v1/x?token"),  # a bare name carries no value
        ("/v1/messages?beta=true", "/v1/messages?beta=true"),
    ],
)
def test_redact_path(path: str, expected: str) -> None:
    assert redact_path(path) == expected
